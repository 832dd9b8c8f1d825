// pacheck list fields [--json]: the case field table (core/case_fields.hpp), one row per field of a case.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "core/case_fields.hpp"

namespace pacheck::cli {

/// Prints the case field table: as text (name, kind, id token, suite key, the ABI version and the
/// pacheck_kernel_args fields that carry it, the case-file tensors and the format_version that added them),
/// or with `json` the description case_fields_json() gives the Python module and the case manifests.
void list_fields(bool json) {
  if (json) {
    fmt::print("{}\n", case_fields_json());
    return;
  }
  using Row = std::array<std::string, 6>;
  std::vector<Row> rows{{"field", "kind", "id token", "suite key", "kernel ABI (version: pacheck_kernel_args)",
                         "case file (format_version: tensors)"}};
  auto or_dash = [](std::string_view s) { return s.empty() ? std::string("-") : std::string(s); };
  for (const CaseField& f : case_field_table())
    rows.push_back({std::string(f.name), std::string(field_kind_name(f.kind)), or_dash(f.token_form),
                    std::string(f.suite_key),
                    f.abi_version       ? fmt::format("{}: {}", f.abi_version, or_dash(f.abi_args))
                    : f.abi_args.empty() ? std::string("-")
                                         : fmt::format("- (through the pager: {})", f.abi_args),
                    f.casefile.empty() ? std::string("-") : fmt::format("{}: {}", f.casefile_version, f.casefile)});
  std::array<std::size_t, 6> width{};
  for (const Row& r : rows)
    for (std::size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  for (const Row& r : rows) {
    std::string line;
    for (std::size_t i = 0; i < r.size(); ++i) line += i + 1 < r.size() ? fmt::format("{:<{}}  ", r[i], width[i]) : r[i];
    fmt::print("{}\n", line);
  }
}

}  // namespace pacheck::cli
