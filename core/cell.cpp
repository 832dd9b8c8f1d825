#include "core/cell.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace pacheck {

Cell parse_cell_id(const std::string& id) {
  const auto sp = id.find_last_of(' ');
  if (sp == std::string::npos)
    throw std::invalid_argument(fmt::format("cell id '{}' has no fault part (e.g. '... seed7 V:nan@tail')", id));
  Cell cell;
  try {
    cell.fault = parse_fault(id.substr(sp + 1));
    cell.c = parse_case_id(id.substr(0, sp));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("cell id '{}': {}", id, e.what()));
  }
  return cell;
}

}  // namespace pacheck
