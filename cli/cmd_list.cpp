// pacheck list kernels|suites|devices|poisons|verdicts|properties|distributions|formats|fields|cells
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <optional>
#include <regex>
#include <unordered_set>

#include "cli/common.hpp"
#include "kernels/backend.hpp"
#include "oracle/oracle.hpp"
#include "report/report.hpp"

#ifdef PACHECK_HAVE_FUZZ
#include "properties/properties.hpp"
#endif

namespace pacheck::cli {

void list_fields(bool json);  // cli/cmd_list_fields.cpp

namespace {

/// Every poison value of core/fault.hpp's table, with its bit pattern in each cache dtype.
void list_poisons() {
  fmt::print("{:<10} {:<10}", "poison", "kind");
  for (const DTypeInfo& t : dtype_table()) fmt::print(" {:>12}", t.name);
  fmt::print("  meaning\n");
  for (const PoisonInfo& p : poison_table()) {
    fmt::print("{:<10} {:<10}", p.name, p.nonfinite ? "non-finite" : "finite");
    for (const DTypeInfo& t : dtype_table()) {
      const std::string bits = poison_unsupported(p.value, t.value).empty()
                                   ? fmt::format("0x{:0{}X}", poison_bits(p.value, t.value), 2 * t.size)
                                   : "refused";
      fmt::print(" {:>12}", bits);
    }
    fmt::print("  {}\n", p.meaning);
  }
}

/// Every verdict of judge/verdict.hpp's table, in order of precedence.
void list_verdicts() {
  fmt::print("{:<17} {:<8} meaning (in order of precedence: the first that applies is the cell's)\n", "verdict", "failure");
  for (const VerdictInfo& v : verdict_table()) fmt::print("{:<17} {:<8} {}\n", v.name, v.fails_gate ? "yes" : "no", v.meaning);
}

/// Every distribution of core/case.hpp's table (suite key `dists`, case id token `dist=`).
void list_distributions() {
  for (const DistInfo& d : dist_table()) fmt::print("{:<8} {}\n", d.name, d.meaning);
}

/// Every property of properties/properties.hpp's table (`pacheck fuzz --property`).
void list_properties() {
#ifdef PACHECK_HAVE_FUZZ
  for (const prop::PropertyInfo& p : prop::property_table()) fmt::print("{:<18} {}\n", p.name, p.claim);
#else
  throw UsageError("the properties need RapidCheck: rebuild with -DPACHECK_BUILD_TESTS=ON");
#endif
}

/// Every report format of report/report.hpp's table: name, file in a report directory, description.
void list_formats() {
  for (const FormatInfo& f : format_table())
    fmt::print("{:<10} {:<13} {}\n", f.name, f.file ? f.file : "(stdout)", f.description);
}

/// `pacheck list cells`: the id of every cell of suite `suite_name`, one per line, in suite order, as a run's
/// rows, --filter and `pacheck repro` take them. With `kernel_names`, each named kernel's layout is applied
/// as a run applies it (kernel-major; an id that two kernels share is listed once); without, the suite's
/// own. `filter` (a regular expression, as run's --filter) keeps the ids it matches. Runs nothing.
void list_cells(const std::string& suite_name, const std::vector<std::string>& kernel_names, const std::string& filter) {
  const Suite suite = load_suite_flag(suite_name);
  std::vector<KernelPtr> kernels;
  for (const auto& name : kernel_names) kernels.push_back(find_named_kernel(name));
  std::optional<std::regex> re;
  if (!filter.empty()) {
    try {
      re = std::regex(filter);
    } catch (const std::regex_error& e) {
      throw UsageError(fmt::format("--filter: '{}' is not a valid regular expression: {}", filter, e.what()));
    }
  }
  std::unordered_set<std::string> listed;
  std::string out;
  auto list = [&](const Cell& cell) {
    const std::string id = cell.id();
    if (re && !std::regex_search(id, *re)) return;
    if (listed.insert(id).second) out += id + "\n";
  };
  if (kernels.empty())
    for (const SuiteCell& c : suite.cells) list(c.cell);
  const CellKinds kinds = cell_kinds(suite);
  for (const auto& k : kernels)
    for (const SuiteCell& c : suite.cells)
      if (pairs_with(*k, c.cell.c, kinds)) list(c.for_layouts(k->layouts()));
  // As run's --filter: a filter that matches no cell is a mistake (usage error, exit 2), not an empty list.
  if (re && listed.empty())
    throw UsageError(fmt::format("--filter: '{}' matches none of the {} cells of suite '{}' (ids look like '{}')", filter,
                                 suite.cells.size(), suite.name, suite.cells.empty() ? "" : suite.cells.front().cell.id()));
  fmt::print("{}", out);
}

}  // namespace

void add_list_command(CLI::App& app, Context& ctx) {
  auto* cmd = app.add_subcommand(
      "list", "list kernels, suites, devices, poisons, verdicts, properties, distributions, report formats or case fields");
  auto what = std::make_shared<std::string>();
  auto plugins = std::make_shared<std::vector<std::string>>();
  struct CellsOptions {
    std::string suite, filter;
    std::vector<std::string> kernels;
  };
  auto cells = std::make_shared<CellsOptions>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("what", *what,
                  "kernels, suites, devices, poisons, verdicts, properties, distributions, formats, fields or cells")
      ->required()
      ->check(CLI::IsMember({"kernels", "suites", "devices", "poisons", "verdicts", "properties", "distributions",
                             "formats", "fields", "cells"}));
  cmd->add_flag("--json", *json, "list fields: the case field table as JSON (what the Python module and case "
                                 "manifests carry)");
  cmd->add_option("--plugin", *plugins,
                  "list kernels / list cells: also the kernels of this shared library (repeatable), each marked "
                  "with its library");
  cmd->add_option("--suite", cells->suite, "list cells: the suite (a name or a .toml path; default gate)");
  cmd->add_option("--kernel,-k", cells->kernels,
                  "list cells: ids as this kernel runs them (its layout; repeatable; default: the suite's own)");
  cmd->add_option("--filter,-f", cells->filter, "list cells: only ids matching this regular expression");
  cmd->callback([&ctx, what, cells, plugins, json] {
    if (!plugins->empty() && *what != "kernels" && *what != "cells")
      throw UsageError(fmt::format("--plugin: only `list kernels` and `list cells` load kernel libraries, not `list {}`",
                                   *what));
    if (*what != "cells" && (!cells->suite.empty() || !cells->kernels.empty() || !cells->filter.empty()))
      throw UsageError(fmt::format("--suite, --kernel and --filter: only for `pacheck list cells`, not `list {}`", *what));
    if (*json && *what != "fields")
      throw UsageError(fmt::format("--json: only for `pacheck list fields`, not `list {}`", *what));
    load_plugin_flags(*plugins);
    if (*what == "fields") {
      list_fields(*json);
    } else if (*what == "cells") {
      list_cells(cells->suite.empty() ? "gate" : cells->suite, cells->kernels, cells->filter);
    } else if (*what == "kernels") {
      for (const auto& k : Registry::global().all()) {
        const char* dev = k->device() == PACHECK_DEVICE_CPU ? "cpu" : k->device() == PACHECK_DEVICE_CUDA ? "cuda" : "hip";
        const std::string lib = plugin_path_of(k->name());
        fmt::print("{:<24} {:<5} {}{}{}\n", k->name(), dev, k->description(), k->is_negative_control() ? " [negative control]" : "",
                   lib.empty() ? "" : " [plugin " + lib + "]");
      }
    } else if (*what == "suites") {
      for (const auto& n : list_suites()) {
        try {
          Suite s = load_suite(n);
          fmt::print("{:<14} {:>5} cells  {}\n", n, s.cells.size(), s.file);
        } catch (const std::exception& e) {
          fmt::print("{:<14} INVALID: {}\n", n, e.what());
          ctx.exit_code = kUsage;
        }
      }
    } else if (*what == "devices") {
      for (const auto& b : backend_status())
        fmt::print("{:<5} {:<10} {} device(s)  {}\n", b.kind, b.built ? "built" : "not built", b.devices, b.detail);
      // The host oracle's instruction set (oracle/oracle.hpp): which SIMD path every cell's reference ran on.
      std::vector<std::string_view> isas;
      for (OracleIsa i : available_oracle_isas()) isas.push_back(oracle_isa_name(i));
      const char* forced = std::getenv("PACHECK_ORACLE_ISA");
      try {
        fmt::print("oracle: {} (this CPU and build run {}; PACHECK_ORACLE_ISA {})\n", oracle_isa_name(oracle_isa()),
                   fmt::join(isas, ", "), forced && *forced ? fmt::format("= {}", forced) : std::string("unset"));
      } catch (const OracleIsaError& e) {
        throw UsageError(e.what());
      }
    } else if (*what == "poisons") {
      list_poisons();
    } else if (*what == "verdicts") {
      list_verdicts();
    } else if (*what == "properties") {
      list_properties();
    } else if (*what == "formats") {
      list_formats();
    } else {
      list_distributions();
    }
  });
}

}  // namespace pacheck::cli
