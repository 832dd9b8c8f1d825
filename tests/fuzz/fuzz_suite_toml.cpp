// libFuzzer target for the suite loader (suites/suite.hpp parse_suite): any text must either expand into
// cells that are valid cases whose ids parse back to themselves, or throw SuiteError -- never crash, hang,
// overflow or throw anything else (a toml++ or std exception escaping would be a message without the
// file, line and field). `include` resolves as for a suite file in the working directory (names fall back
// to the built-in suites).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/cell.hpp"
#include "suites/suite.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  pacheck::Suite s;
  try {
    s = pacheck::parse_suite(text, "fuzz.toml");
  } catch (const pacheck::SuiteError&) {
    return 0;  // the documented error
  }
  for (const auto& sc : s.cells) {
    sc.cell.c.validate();  // throws (and so fails the target) for a cell the loader should have refused
    const std::string id = sc.cell.id();
    if (pacheck::parse_cell_id(id).id() != id) std::abort();
  }
  return 0;
}
