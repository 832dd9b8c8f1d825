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
  return fmt::format("pacheck repro {} --kernel {}{}{}{}", shell_quote(r.cell_id), shell_quote(r.kernel),
                     plugin_flag(r.kernel), judge_flags.empty() ? "" : " ", judge_flags);
}

std::string exit_meaning(int code) {
  switch (code) {
    case 0: return "every cell passed and every negative control was caught";
    case 1: return "some cell failed, or some kernel ran no cell";
    case 3: return "instrument blind: a negative control was not caught or the comparator self-test failed";
  }
  return "?";
}

std::string outcome_word(int code) { return code == 0 ? "PASS" : code == 3 ? "BLIND" : "FAIL"; }

std::string unless_nonfinite(const Metrics& m, const std::string& formatted) {
  if (m.nan_count > 0) return "nan";
  if (m.inf_count > 0) return "inf";
  return formatted;
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
      verdict_name(r.verdict), r.detail, unless_nonfinite(m, sci(m.rel_linf)), sci(r.limit), sci(r.margin),
      unless_nonfinite(m, sci(m.max_abs)), unless_nonfinite(m, sci(m.nmse)),
      m.max_ulp == UINT64_MAX ? std::string("inf (NaN present)") : std::to_string(m.max_ulp), m.bitwise_equal_pct, bias,
      m.nan_count,
      m.inf_count, r.variant_elements, describe(m.worst), r.expected_fail);
}

std::vector<std::string> suites_of(const RunSummary& s) {
  std::vector<std::string> out;
  for (const auto& r : s.results)
    if (std::find(out.begin(), out.end(), r.suite) == out.end()) out.push_back(r.suite);
  return out;
}

std::vector<RunCheck> run_checks(const RunSummary& s) {
  using Status = RunCheck::Status;
  std::vector<RunCheck> out;
  std::string lines;
  for (const auto& l : s.selftest.lines) lines += l + "\n";
  out.push_back({"comparator self-test", s.selftest.passed ? Status::passed : Status::failed,
                 "comparator self-test failed: the comparator cannot be trusted", lines});
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
           fmt::format("caught {}, missed {}", k.caught, k.missed)});
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
