// A kernel's gtest binary as tests/cells/test_cells.cpp drives it: the planted kernel cells.tail_v
// (tail_v_kernel.c, linked in) registered through pacheck::gtest on the suite named by $PACHECK_FIXTURE_SUITE
// (default tail-poison). $PACHECK_FIXTURE_NO_CHECK=1 leaves out the instrument Environment.
#include <cstdlib>
#include <string>

#include "pacheck/gtest.hpp"

extern "C" pacheck_status cells_tail_v_register(pacheck_registrar* registrar);

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const char* suite = std::getenv("PACHECK_FIXTURE_SUITE");
  const char* no_check = std::getenv("PACHECK_FIXTURE_NO_CHECK");
  pacheck::gtest::Options opt;
  opt.check_instrument = !(no_check && std::string(no_check) == "1");
  opt.repro_plugin = PACHECK_TAIL_V_PLUGIN;
  pacheck::gtest::register_suite(suite && *suite ? suite : "tail-poison", cells_tail_v_register, opt);
  return RUN_ALL_TESTS();
}
