// libFuzzer target for the cell-id parser (core/cell.hpp parse_cell_id, and through it parse_case_id and
// parse_fault): any byte string must either parse into a cell whose id() parses back to the same id, or
// throw std::invalid_argument (CaseError is one) -- never crash, hang, overflow or throw anything else.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "core/cell.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::string id;
  try {
    id = pacheck::parse_cell_id(text).id();
  } catch (const std::invalid_argument&) {
    return 0;  // the documented error
  }
  // Outside the try: what parsed must print an id that parses again (repro pastes it), to itself.
  if (pacheck::parse_cell_id(id).id() != id) std::abort();
  return 0;
}
