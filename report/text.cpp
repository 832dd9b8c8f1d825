#include "report/text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <mutex>

#include "kernels/plugin.hpp"

namespace pacheck {

std::string valid_utf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (int k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
    if (!ok) {
      out += '?';
      ++i;
      continue;
    }
    out.append(s, i, static_cast<std::size_t>(len));
    i += static_cast<std::size_t>(len);
  }
  return out;
}

std::string shell_quote(const std::string& s) {
  const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' || c == '/';
  });
  if (plain) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string plugin_flag(const std::string& kernel) {
  const std::string path = plugin_path_of(kernel);
  return path.empty() ? std::string() : " --plugin " + shell_quote(path);
}

namespace {
struct ReproOverrides {
  std::mutex mu;
  std::map<std::string, ReproCommandFn> by_kernel;
};
ReproOverrides& repro_overrides() {
  static ReproOverrides o;
  return o;
}
}  // namespace

namespace {
struct CommandName {
  std::mutex mu;
  std::string words = "pacheck";
};
CommandName& command_name_slot() {
  static CommandName n;
  return n;
}
}  // namespace

void set_command_name(std::string shell_words) {
  CommandName& n = command_name_slot();
  std::lock_guard<std::mutex> lock(n.mu);
  n.words = std::move(shell_words);
}

std::string command_name() {
  CommandName& n = command_name_slot();
  std::lock_guard<std::mutex> lock(n.mu);
  return n.words;
}

void set_repro_command(const std::string& kernel, ReproCommandFn fn) {
  ReproOverrides& o = repro_overrides();
  std::lock_guard<std::mutex> lock(o.mu);
  if (fn) o.by_kernel[kernel] = std::move(fn);
  else o.by_kernel.erase(kernel);
}

std::string repro_command(const CellResult& r, const std::string& judge_flags) {
  {
    ReproOverrides& o = repro_overrides();
    std::lock_guard<std::mutex> lock(o.mu);
    const auto it = o.by_kernel.find(r.kernel);
    if (it != o.by_kernel.end()) return it->second(r.cell_id, judge_flags);
  }
  return fmt::format("{} repro {} --kernel {}{}{}{}", command_name(), shell_quote(r.cell_id), shell_quote(r.kernel),
                     plugin_flag(r.kernel), judge_flags.empty() ? "" : " ", judge_flags);
}

std::string outcome_word(int code) { return code == 0 ? "PASS" : code == 3 ? "BLIND" : "FAIL"; }

ControlFacts control_facts(const RunSummary& s) {
  ControlFacts c;
  for (const auto& k : s.kernels) {
    switch (k.control) {
      case ControlOutcome::not_control: continue;
      case ControlOutcome::caught: c.caught.push_back(k.kernel); break;
      case ControlOutcome::blind: c.blind.push_back(k.kernel); break;
      case ControlOutcome::not_exercised: c.not_exercised.push_back(k.kernel); break;
    }
    c.caught_cells += k.caught;
    c.missed_cells += k.missed;
    c.not_run_cells += k.not_run;
  }
  return c;
}

std::string controls_statement(const RunSummary& s) {
  constexpr const char* kShowsNothing = "so this run does not show that its checks can fail here";
  const ControlFacts c = control_facts(s);
  if (c.ran() == 0) return fmt::format("negative controls: none ran, {}", kShowsNothing);
  std::string out = fmt::format("negative controls: {} ran", c.ran());
  for (const auto& [label, names] : {std::pair{"BLIND", &c.blind}, std::pair{"caught", &c.caught},
                                     std::pair{"not exercised", &c.not_exercised}})
    if (!names->empty()) out += fmt::format("; {}: {}", label, fmt::join(*names, ", "));
  out += fmt::format("; cells: {} caught, {} missed, {} not run", c.caught_cells, c.missed_cells, c.not_run_cells);
  if (c.caught.empty() && c.blind.empty()) out += fmt::format("; none was exercised, {}", kShowsNothing);
  return out;
}

std::string exit_meaning(const RunSummary& s) {
  const int code = s.exit_code();
  const ControlFacts c = control_facts(s);
  if (code == 0)
    return c.ran() > 0 && c.caught.size() == c.ran() ? "every cell passed and every negative control was caught"
                                                     : "every cell passed";
  std::vector<std::string> why;
  if (code == 3) {
    if (!c.blind.empty()) why.push_back("a negative control was not caught");
    if (!s.selftest.passed) why.push_back("the comparator self-test failed");
    return fmt::format("instrument blind: {}", why.empty() ? "a check of the instrument failed" : fmt::format("{}", fmt::join(why, " and ")));
  }
  if (s.failed > 0) why.push_back("some cell failed");
  if (s.vacuous) why.push_back("some kernel ran no cell");
  if (s.results.size() < s.planned) why.push_back("the run stopped before every result finished");
  return why.empty() ? "some cell failed, or some kernel ran no cell" : fmt::format("{}", fmt::join(why, ", and "));
}

Headline headline(const RunSummary& s) {
  Headline h;
  h.code = s.exit_code();
  h.word = outcome_word(h.code);
  h.meaning = exit_meaning(s);
  h.counts = fmt::format("{} passed, {} failed, {} declined, {} caught by negative controls{}", s.passed, s.failed,
                         s.declined, s.caught, s.not_run > 0 ? fmt::format(", {} not run", s.not_run) : "");
  h.controls = controls_statement(s);
  return h;
}

std::string metrics_text(const CellResult& r) {
  const Metrics& m = r.metrics;
  const std::string bias = m.bias_elements == 0
                               ? std::string("not measured (no element needs rounding, or not a 16-bit output)")
                               : fmt::format("{:+.4f} over {} ({} toward zero, {} away)", m.bias_ulp, m.bias_elements,
                                             m.bias_toward, m.bias_away);
  return fmt::format(
      "verdict: {}\ndetail: {}\nrel_linf: {}\nlimit: {}\nmargin: {}\nmax_abs: {}\nnmse: {}\nmax_ulp: {}\n"
      "bitwise_equal_pct: {:.4f}\nbias_ulp: {}\nnan: {}\ninf: {}\n"
      "variant_elements: {}\nworst: ({})\nexpected_fail: {}",
      verdict_name(r.verdict), r.detail, metric_text(m, m.rel_linf), sci(r.limit), metric_text(m, r.margin),
      metric_text(m, m.max_abs), metric_text(m, m.nmse), max_ulp_text(m), m.bitwise_equal_pct, bias, m.nan_count,
      m.inf_count, r.variant_elements, describe(m.worst), r.expected_fail);
}

KernelSummary kernel_summary_in(const RunSummary& s, const std::string& suite, const std::string& kernel) {
  RunSummary part;
  for (const auto& r : s.results)
    if (r.suite == suite && r.kernel == kernel) part.results.push_back(r);
  summarize(part, {{kernel, is_negative_control(s, kernel)}});
  return part.kernels.front();
}

std::vector<std::string> suites_of(const RunSummary& s) {
  std::vector<std::string> out;
  for (const auto& r : s.results)
    if (std::find(out.begin(), out.end(), r.suite) == out.end()) out.push_back(r.suite);
  return out;
}

bool listed_as_row(const CellResult& r, bool negative_control) {
  if (!negative_control || is_error_verdict(r.verdict)) return true;
  const CellOutcome o = cell_outcome(r, true);
  return o == CellOutcome::missed || o == CellOutcome::failed;
}

SummarisedCells summarised_cells(const RunSummary& s) {
  SummarisedCells c;
  for (const auto& r : s.results) {
    const bool control = is_negative_control(s, r.kernel);
    if (!control || listed_as_row(r, control)) continue;
    switch (cell_outcome(r, control)) {
      case CellOutcome::caught: ++c.caught; break;
      case CellOutcome::not_run: ++c.not_run; break;
      case CellOutcome::passed: ++c.passed; break;
      case CellOutcome::declined: ++c.declined; break;
      case CellOutcome::failed:
      case CellOutcome::missed: break;  // listed: they fail the run
    }
  }
  return c;
}

std::string summarised_text(const SummarisedCells& c) {
  if (c.total() == 0) return "";
  std::vector<std::string> parts;
  for (const auto& [n, what] : {std::pair{c.caught, "caught"}, std::pair{c.not_run, "not run"},
                                std::pair{c.passed, "passed"}, std::pair{c.declined, "declined"}})
    if (n > 0) parts.push_back(fmt::format("{} {}", n, what));
  return fmt::format("{} cells of negative controls are counted, not listed ({})", c.total(), fmt::join(parts, ", "));
}

namespace {
/// A negative control's cells by outcome, for its check (RunCheck::counts).
std::string control_counts(const KernelSummary& k) {
  std::string out = fmt::format("{} caught, {} missed, {} not run", k.caught, k.missed, k.not_run);
  for (const auto& [n, what] : {std::pair{k.declined, "declined"}, std::pair{k.passed, "passed"}, std::pair{k.failed, "failed"}})
    if (n > 0) out += fmt::format(", {} {}", n, what);
  return out;
}
}  // namespace

std::vector<RunCheck> run_checks(const RunSummary& s) {
  using Status = RunCheck::Status;
  std::vector<RunCheck> out;
  std::string lines;
  for (const auto& l : s.selftest.lines) lines += l + "\n";
  out.push_back({"comparator self-test", s.selftest.passed ? Status::passed : Status::failed,
                 "comparator self-test failed: the comparator cannot be trusted", lines});
  // Skipped, never failed: a run without controls may pass, but its reports say that nothing showed the
  // checks failing (a JUnit viewer lists the skip; a property alone would go unseen).
  if (control_facts(s).ran() == 0)
    out.push_back({"a negative control ran", Status::skipped, controls_statement(s), ""});
  for (const auto& k : s.kernels) {
    if (k.control != ControlOutcome::not_control) {
      const bool exercised = k.control != ControlOutcome::not_exercised;
      out.push_back(
          {k.kernel + ": negative control caught",
           !exercised                           ? Status::skipped
           : k.control == ControlOutcome::blind ? Status::failed
                                                : Status::passed,
           exercised ? fmt::format("instrument blind: {} of {} expected failures missed", k.missed, k.missed + k.caught)
                     : "no cell this negative control must fail was selected",
           fmt::format("caught {}, missed {}", k.caught, k.missed), control_counts(k)});
    }
    out.push_back(
        {k.kernel + ": ran at least one cell",
         !k.vacuous ? Status::passed
         : s.shard  ? Status::skipped
                    : Status::failed,
         s.shard
             ? "no cell of this kernel in this shard: pacheck merge judges the whole run"
             : "no cell of this kernel ran (every cell declined or none selected): a vacuous pass counts as a failure",
         fmt::format("declined {}", k.declined)});
  }
  return out;
}

}  // namespace pacheck
