#include "core/cell.hpp"

#include <fmt/format.h>

#include <sstream>
#include <stdexcept>

namespace pacheck {

namespace {
/// True for a token of the fault's form (TARGET:POISON@REGION, clean, none): no case token has it.
bool looks_like_fault(std::string_view t) {
  return t == "clean" || t == "none" || (t.find(':') != std::string_view::npos && t.find('@') != std::string_view::npos);
}
}  // namespace

std::string fault_case_problem(const FaultSpec& f, const Case& c) {
  if (f.clean()) return {};
  if (f.region == Region::window && c.sliding_window == 0)
    return fmt::format("'{}': region 'window' needs a sliding window (a 'win=W' token)", f.id());
  if (f.region == Region::scales) {
    const bool fp8 = is_fp8(c.kv_dtype);
    if (f.target != Target::v && !(fp8 && c.k_scale.per_slot()))
      return fmt::format("'{}': region 'scales' poisons the per-slot K scale table; this cell has none (ks=slotLO~HI "
                         "with an fp8 cache)", f.id());
    if (f.target != Target::k && !(fp8 && c.v_scale.per_slot()))
      return fmt::format("'{}': region 'scales' poisons the per-slot V scale table; this cell has none (vs=slotLO~HI "
                         "with an fp8 cache)", f.id());
  }
  return {};
}

Cell parse_cell_id(const std::string& id) {
  const auto sp = id.find_last_of(' ');
  if (sp == std::string::npos)
    throw std::invalid_argument(fmt::format("cell id '{}' has no fault part (e.g. '... seed7 V:nan@tail')", id));
  const std::string fault_part = id.substr(sp + 1), case_part = id.substr(0, sp);
  // A second fault token would otherwise be read as an unknown case token, or (last) win silently.
  std::istringstream tokens(case_part);
  for (std::string tok; tokens >> tok;) {
    if (!looks_like_fault(tok)) continue;
    if (looks_like_fault(fault_part))
      throw std::invalid_argument(
          fmt::format("cell id '{}': fault: given twice ('{}' and '{}'); a cell has one fault", id, tok, fault_part));
    throw std::invalid_argument(
        fmt::format("cell id '{}': fault: '{}' must be the last token, after the case", id, tok));
  }
  Cell cell;
  try {
    cell.fault = parse_fault(fault_part);
    cell.c = parse_case_id(case_part);
  } catch (const std::invalid_argument& e) {
    // An id of thousands of sequences is shortened: the reason after it names the field and the token.
    const std::string shown = id.size() > 160 ? id.substr(0, 120) + fmt::format("... ({} characters)", id.size()) : id;
    throw std::invalid_argument(fmt::format("cell id '{}': {}", shown, e.what()));
  }
  if (const std::string why = fault_case_problem(cell.fault, cell.c); !why.empty())
    throw std::invalid_argument(fmt::format("cell id '{}': fault: {}", id, why));
  return cell;
}

}  // namespace pacheck
