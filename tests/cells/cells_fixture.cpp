// A kernel's gtest binary as tests/cells/test_cells.cpp drives it: the planted kernel cells.tail_v
// (tail_v_kernel.c, linked in) registered through pacheck::gtest on the suite named by $PACHECK_FIXTURE_SUITE
// (default tail-poison; several, comma-separated, are registered in turn). $PACHECK_FIXTURE_KERNEL=mla registers
// the planted MLA kernel cells.mla_v_tail (mla_v_tail_kernel.c) instead. $PACHECK_FIXTURE_NO_CHECK=1 leaves out
// the instrument Environment; $PACHECK_FIXTURE_DEVICE sets Options::device.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "pacheck/gtest.hpp"

extern "C" pacheck_status cells_tail_v_register(pacheck_registrar* registrar);
extern "C" pacheck_status cells_mla_v_tail_register(pacheck_registrar* registrar);

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const char* suite = std::getenv("PACHECK_FIXTURE_SUITE");
  const char* no_check = std::getenv("PACHECK_FIXTURE_NO_CHECK");
  pacheck::gtest::Options opt;
  opt.check_instrument = !(no_check && std::string(no_check) == "1");
  const char* kernel = std::getenv("PACHECK_FIXTURE_KERNEL");
  const bool mla = kernel && std::string(kernel) == "mla";
  opt.repro_plugin = mla ? PACHECK_MLA_V_TAIL_PLUGIN : PACHECK_TAIL_V_PLUGIN;
  if (const char* device = std::getenv("PACHECK_FIXTURE_DEVICE"); device && *device) opt.device = device;
  // Several suites, comma-separated, are registered one after another (a bad one among good ones).
  std::string suites = suite && *suite ? suite : "tail-poison";
  for (std::size_t at = 0; at <= suites.size();) {
    const std::size_t comma = std::min(suites.find(',', at), suites.size());
    pacheck::gtest::register_suite(suites.substr(at, comma - at), mla ? cells_mla_v_tail_register : cells_tail_v_register, opt);
    at = comma + 1;
  }
  return RUN_ALL_TESTS();
}
