#include "report/reports.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <utility>

#include "kernels/backend.hpp"
#include "report/build_info.hpp"
#include "report/html_report.hpp"
#include "report/report.hpp"

namespace pacheck {

namespace fs = std::filesystem;

namespace {

constexpr const char* kResults = "results.jsonl";
constexpr const char* kRun = "run.json";
constexpr const char* kReport = "report.json";
constexpr const char* kJunit = "junit.xml";
constexpr const char* kSummary = "summary.md";
constexpr const char* kHtml = "report.html";

/// Plugin messages and device strings may hold invalid UTF-8, on which nlohmann's dump() throws.
std::string dump(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string compiler_string() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "gcc " __VERSION__;
#else
  return "unknown";
#endif
}

std::string path_in(const std::string& dir, const char* name) { return (fs::path(dir) / name).string(); }

/// Writes `text` to `path` through a temporary file renamed into place: a reader (or a run killed while
/// writing) never leaves half a report under the final name.
void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw ReportError(fmt::format("cannot write '{}'", tmp));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw ReportError(fmt::format("cannot rename '{}' to '{}': {}", tmp, path, ec.message()));
}

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ReportError(fmt::format("cannot read '{}'", path));
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ReportError(fmt::format("'{}' is not valid JSON: {}", path, e.what()));
  }
}

// ---- text escaping -------------------------------------------------------------------------------------

/// Replaces every byte that is not part of a valid UTF-8 sequence by '?'.
std::string valid_utf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
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

/// XML attribute/text escaping. Control characters other than tab, newline and carriage return are not
/// allowed in XML 1.0 even as references, so they become '?'.
std::string xml(const std::string& raw) {
  std::string out;
  for (char ch : valid_utf8(raw)) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') out += '?';
        else out += ch;
    }
  }
  return out;
}

/// Text for a Markdown table cell: one line, no pipes, clipped.
std::string md(const std::string& raw, std::size_t max = 160) {
  std::string out;
  for (char ch : valid_utf8(raw)) {
    if (ch == '|') out += "\\|";
    else if (ch == '\n' || ch == '\r') out += ' ';
    else out += ch;
  }
  if (out.size() > max) out = out.substr(0, max - 3) + "...";
  return out;
}

std::string sci(double v) { return std::isfinite(v) ? fmt::format("{:.3e}", v) : std::string(std::isnan(v) ? "nan" : "inf"); }

// ---- judging helpers shared by the report formats ------------------------------------------------------

bool is_control(const RunSummary& s, const std::string& kernel) {
  for (const auto& k : s.kernels)
    if (k.kernel == kernel) return k.control != ControlOutcome::not_control;
  return false;
}

/// The result is a failure of the run (not a negative control's expected failure being caught).
bool counts_as_failure(const RunSummary& s, const CellResult& r) {
  if (r.verdict == Verdict::declined) return false;
  if (r.expected_fail && is_control(s, r.kernel)) return !is_failure(r.verdict);  // missed
  return is_failure(r.verdict);
}

bool is_error_verdict(Verdict v) { return v == Verdict::error || v == Verdict::crash || v == Verdict::timeout; }

/// Severity for "worst cells": the process-level failures first, then integrity, then numerics.
int severity(Verdict v) {
  switch (v) {
    case Verdict::crash: return 10;
    case Verdict::timeout: return 9;
    case Verdict::oob_write: return 8;
    case Verdict::input_mutated: return 7;
    case Verdict::error: return 6;
    case Verdict::unwritten: return 5;
    case Verdict::poisoned: return 4;
    case Verdict::variant: return 3;
    case Verdict::fail: return 2;
    default: return 0;
  }
}

std::string exit_meaning(int code) {
  switch (code) {
    case 0: return "every cell passed and every negative control was caught";
    case 1: return "some cell failed, or some kernel ran no cell";
    case 3: return "instrument blind: a negative control was not caught or the comparator self-test failed";
  }
  return "?";
}

std::string metrics_text(const CellResult& r) {
  const Metrics& m = r.metrics;
  return fmt::format(
      "verdict: {}\ndetail: {}\nrel_linf: {}\nlimit: {}\nmargin: {}\nmax_abs: {}\nnmse: {}\nmax_ulp: {}\n"
      "bitwise_equal_pct: {:.4f}\nnan: {}\ninf: {}\nvariant_elements: {}\nworst: (seq {}, head {}, dim {})\n"
      "expected_fail: {}",
      verdict_name(r.verdict), r.detail, sci(m.rel_linf), sci(r.limit), sci(r.margin), sci(m.max_abs), sci(m.nmse),
      m.max_ulp, m.bitwise_equal_pct, m.nan_count, m.inf_count, r.variant_elements, m.worst.seq, m.worst.head,
      m.worst.dim, r.expected_fail);
}

std::vector<std::pair<std::string, std::string>> environment_rows(const Environment& e) {
  std::vector<std::pair<std::string, std::string>> rows = {
      {"pacheck.version", e.pacheck_version}, {"pacheck.git_commit", e.git_commit},
      {"pacheck.build_type", e.build_type},   {"compiler", e.compiler},
      {"host", e.host},                       {"device", e.device},
      {"device.name", e.device_name},         {"device.arch", e.arch},
      {"device.driver", e.driver},            {"device.runtime", e.runtime},
      {"device.description", e.device_description}};
  for (const auto& p : e.plugins) rows.push_back({"plugin.sha256 " + p.path, p.sha256});
  return rows;
}

std::vector<std::string> suites_of(const RunSummary& s) {
  std::vector<std::string> out;
  for (const auto& r : s.results)
    if (std::find(out.begin(), out.end(), r.suite) == out.end()) out.push_back(r.suite);
  return out;
}

/// The KernelSummary of `kernel` over the results of one suite (a merged report may hold several).
KernelSummary summary_for(const RunSummary& s, const std::string& suite, const std::string& kernel) {
  RunSummary part;
  for (const auto& r : s.results)
    if (r.suite == suite && r.kernel == kernel) part.results.push_back(r);
  summarize(part, {{kernel, is_control(s, kernel)}});
  return part.kernels.front();
}

}  // namespace

// ---- environment ---------------------------------------------------------------------------------------

void parse_device_description(Environment& env, const std::string& description) {
  env.device_description = description;
  utsname u{};
  const std::string machine = ::uname(&u) == 0 ? u.machine : "";
  if (env.device == "cpu" || env.device.empty()) {
    env.device_name = description;
    env.arch = machine;
    return;
  }
  std::smatch m;
  static const std::regex arch_re(R"(^(.*?)\s+(sm_\d+a?|gfx[0-9a-f]+)\b)");
  static const std::regex driver_re(R"(driver ([^,]+))");
  static const std::regex runtime_re(R"(runtime ([^,]+))");
  if (std::regex_search(description, m, arch_re)) {
    env.device_name = m[1];
    env.arch = m[2];
  } else {
    env.device_name = description;
  }
  if (std::regex_search(description, m, driver_re)) env.driver = m[1];
  if (std::regex_search(description, m, runtime_re)) env.runtime = m[1];
}

Environment collect_environment(const std::string& device_spec, std::vector<PluginFingerprint> plugins) {
  Environment env;
  env.pacheck_version = pacheck_version();
  env.git_commit = PACHECK_GIT_COMMIT;
  env.build_type = PACHECK_BUILD_TYPE;
  env.compiler = compiler_string();
  utsname u{};
  if (::uname(&u) == 0) env.host = fmt::format("{} {} {}", u.sysname, u.release, u.machine);
  env.device = device_spec;
  try {
    // "cuda:all": the first device describes the run (they are one model on the machines this targets).
    const std::vector<std::string> specs = resolve_device_specs(device_spec);
    parse_device_description(env, open_backend(specs.front())->description());
    if (specs.size() > 1) env.device_name += fmt::format(" (x{})", specs.size());
  } catch (const std::exception& e) {
    env.device_name = fmt::format("unavailable: {}", e.what());
  }
  env.plugins = std::move(plugins);
  return env;
}

nlohmann::json to_json(const Environment& e) {
  nlohmann::json plugins = nlohmann::json::array();
  for (const auto& p : e.plugins) plugins.push_back({{"path", p.path}, {"sha256", p.sha256}});
  return {{"pacheck_version", e.pacheck_version}, {"git_commit", e.git_commit}, {"build_type", e.build_type},
          {"compiler", e.compiler},               {"host", e.host},             {"device", e.device},
          {"device_name", e.device_name},         {"arch", e.arch},             {"driver", e.driver},
          {"runtime", e.runtime},                 {"device_description", e.device_description},
          {"plugins", plugins}};
}

Environment environment_from_json(const nlohmann::json& j) {
  Environment e;
  if (!j.is_object()) return e;
  auto s = [&](const char* k) { return j.value(k, std::string()); };
  e.pacheck_version = s("pacheck_version");
  e.git_commit = s("git_commit");
  e.build_type = s("build_type");
  e.compiler = s("compiler");
  e.host = s("host");
  e.device = s("device");
  e.device_name = s("device_name");
  e.arch = s("arch");
  e.driver = s("driver");
  e.runtime = s("runtime");
  e.device_description = s("device_description");
  if (j.contains("plugins") && j["plugins"].is_array())
    for (const auto& p : j["plugins"]) e.plugins.push_back({p.value("path", ""), p.value("sha256", "")});
  return e;
}

nlohmann::json run_identity(const Suite& suite, const std::vector<std::string>& kernels, const std::string& device,
                            const RunOptions& opt, const std::string& filter) {
  return {{"suite", suite.name},
          {"cells", suite.cells.size()},
          {"kernels", kernels},
          {"device", device},
          {"filter", filter},
          {"seed", opt.seed ? nlohmann::json(*opt.seed) : nlohmann::json(nullptr)},
          {"tolerance", opt.tolerance.policy == TolerancePolicy::fixed ? "fixed" : "calibrated"},
          {"multiple", opt.tolerance.multiple},
          {"oracle_precision", opt.oracle_precision == Precision::f32 ? "f32" : "f64"},
          {"shard", {{"index", opt.shard_index}, {"count", opt.shard_count}}}};
}

// ---- report formats ------------------------------------------------------------------------------------

nlohmann::json report_json(const RunSummary& s, const ReportMeta& meta) {
  nlohmann::json j = to_json(s, meta.suite, meta.device);
  j["environment"] = to_json(meta.environment);
  j["run"] = meta.run;
  if (!meta.merged_from.empty()) j["merged_from"] = meta.merged_from;
  return j;
}

std::string junit_xml(const RunSummary& s, const ReportMeta& meta) {
  struct Counts {
    int tests = 0, failures = 0, errors = 0, skipped = 0;
    double time = 0;
  };
  std::ostringstream body;
  Counts all;
  const auto env_rows = environment_rows(meta.environment);
  auto properties = [&](std::ostringstream& o) {
    o << "    <properties>\n";
    for (const auto& [k, v] : env_rows) o << "      <property name=\"" << xml(k) << "\" value=\"" << xml(v) << "\"/>\n";
    o << "    </properties>\n";
  };
  auto suite_open = [&](const std::string& name, const Counts& c) {
    all.tests += c.tests;
    all.failures += c.failures;
    all.errors += c.errors;
    all.skipped += c.skipped;
    all.time += c.time;
    return fmt::format("  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.6f}\">\n",
                       xml(name), c.tests, c.failures, c.errors, c.skipped, c.time);
  };

  for (const auto& suite : suites_of(s)) {
    for (const auto& ks : s.kernels) {
      Counts c;
      std::ostringstream cases;
      const std::string classname = "pacheck." + suite + "." + ks.kernel;
      for (const auto& r : s.results) {
        if (r.suite != suite || r.kernel != ks.kernel) continue;
        ++c.tests;
        c.time += r.seconds;
        cases << fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{:.6f}\"", xml(classname), xml(r.cell_id),
                             r.seconds);
        const bool control = ks.control != ControlOutcome::not_control && r.expected_fail;
        if (r.verdict == Verdict::declined) {
          ++c.skipped;
          cases << ">\n      <skipped message=\"" << xml("declined: " + r.detail) << "\"/>\n    </testcase>\n";
        } else if (control && is_failure(r.verdict)) {
          cases << ">\n      <system-out>" << xml(fmt::format("negative control: the planted fault was caught ({})\n",
                                                               verdict_name(r.verdict)) + metrics_text(r))
                << "</system-out>\n    </testcase>\n";
        } else if (control) {
          ++c.failures;
          cases << ">\n      <failure type=\"missed\" message=\""
                << xml("negative control not caught: this cell must fail but passed (instrument blind)") << "\">"
                << xml(metrics_text(r)) << "</failure>\n    </testcase>\n";
        } else if (is_failure(r.verdict)) {
          const bool err = is_error_verdict(r.verdict);
          (err ? c.errors : c.failures)++;
          const char* tag = err ? "error" : "failure";
          cases << ">\n      <" << tag << " type=\"" << verdict_name(r.verdict) << "\" message=\""
                << xml(fmt::format("{}: {}", verdict_name(r.verdict), r.detail)) << "\">" << xml(metrics_text(r))
                << "</" << tag << ">\n    </testcase>\n";
        } else {
          cases << "/>\n";
        }
      }
      if (c.tests == 0) continue;
      body << suite_open(suite + "." + ks.kernel, c);
      properties(body);
      body << cases.str() << "  </testsuite>\n";
    }
  }

  // Run-level checks, so the file fails exactly when the exit code is not 0.
  Counts c;
  std::ostringstream cases;
  auto check = [&](const std::string& name, bool ok, bool skipped, const std::string& message, const std::string& text) {
    ++c.tests;
    cases << "    <testcase classname=\"pacheck.checks\" name=\"" << xml(name) << "\" time=\"0\"";
    if (skipped) {
      ++c.skipped;
      cases << ">\n      <skipped message=\"" << xml(message) << "\"/>\n    </testcase>\n";
    } else if (!ok) {
      ++c.failures;
      cases << ">\n      <failure type=\"check\" message=\"" << xml(message) << "\">" << xml(text) << "</failure>\n    </testcase>\n";
    } else {
      cases << "/>\n";
    }
  };
  std::string lines;
  for (const auto& l : s.selftest.lines) lines += l + "\n";
  check("comparator self-test", s.selftest.passed, false, "comparator self-test failed: the comparator cannot be trusted", lines);
  for (const auto& k : s.kernels) {
    if (k.control != ControlOutcome::not_control)
      check(k.kernel + ": negative control caught", k.control != ControlOutcome::blind,
            k.control == ControlOutcome::not_exercised,
            k.control == ControlOutcome::not_exercised
                ? "no cell this negative control must fail was selected"
                : fmt::format("instrument blind: {} of {} expected failures missed", k.missed, k.missed + k.caught),
            fmt::format("caught {}, missed {}", k.caught, k.missed));
    check(k.kernel + ": ran at least one cell", !k.vacuous, k.vacuous && s.shard,
          s.shard ? "no cell of this kernel in this shard: pacheck merge judges the whole run"
                  : "no cell of this kernel ran (every cell declined or none selected): a vacuous pass counts as a failure",
          fmt::format("declined {}", k.declined));
  }
  body << suite_open("pacheck.checks", c);
  properties(body);
  body << cases.str() << "  </testsuite>\n";

  return fmt::format("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                     "<testsuites name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.6f}\">\n",
                     xml("pacheck " + meta.suite), all.tests, all.failures, all.errors, all.skipped, all.time) +
         body.str() + "</testsuites>\n";
}

std::string summary_markdown(const RunSummary& s, const ReportMeta& meta) {
  std::ostringstream o;
  const int code = s.exit_code();
  o << fmt::format("## pacheck {}: {} (exit {})\n\n", md(meta.suite), code == 0 ? "PASS" : code == 3 ? "BLIND" : "FAIL", code);
  o << fmt::format("{} on `{}`: {} passed, {} failed, {} declined, {} caught by negative controls.\n\n", exit_meaning(code),
                   md(meta.device), s.passed, s.failed, s.declined, s.caught);

  o << "| suite | kernel | passed | failed | declined | negative control |\n| --- | --- | ---: | ---: | ---: | --- |\n";
  for (const auto& suite : suites_of(s))
    for (const auto& k : s.kernels) {
      const KernelSummary ks = summary_for(s, suite, k.kernel);
      if (ks.passed + ks.failed + ks.declined + ks.caught + ks.missed == 0) continue;
      std::string control(control_outcome_name(ks.control));
      if (ks.control == ControlOutcome::caught || ks.control == ControlOutcome::blind)
        control += fmt::format(" ({} caught, {} missed)", ks.caught, ks.missed);
      o << fmt::format("| {} | `{}` | {} | {} | {} | {}{} |\n", md(suite), md(k.kernel), ks.passed, ks.failed + ks.missed,
                       ks.declined, control, ks.vacuous ? " - **no cell ran**" : "");
    }
  o << fmt::format("\n**Comparator self-test:** {}\n", s.selftest.passed ? "passed" : "FAILED");
  if (!s.selftest.passed)
    for (const auto& l : s.selftest.lines) o << "- " << md(l, 300) << "\n";

  std::vector<const CellResult*> failing, ran;
  for (const auto& r : s.results) {
    if (counts_as_failure(s, r)) failing.push_back(&r);
    else if (r.verdict == Verdict::pass && !r.expected_fail) ran.push_back(&r);
  }
  constexpr std::size_t kShow = 10;
  if (!failing.empty()) {
    std::stable_sort(failing.begin(), failing.end(), [](const CellResult* a, const CellResult* b) {
      if (severity(a->verdict) != severity(b->verdict)) return severity(a->verdict) > severity(b->verdict);
      return a->margin > b->margin;
    });
    o << fmt::format("\n### Worst cells ({} failing)\n\n| kernel | cell | verdict | rel_linf | margin | detail |\n"
                     "| --- | --- | --- | ---: | ---: | --- |\n",
                     failing.size());
    for (std::size_t i = 0; i < std::min(kShow, failing.size()); ++i) {
      const CellResult& r = *failing[i];
      const std::string verdict = r.expected_fail ? "pass (negative control MISSED)" : std::string(verdict_name(r.verdict));
      // Cells that produced no output have no metrics to show.
      const bool no_output = is_error_verdict(r.verdict);
      o << fmt::format("| `{}` | `{}` | {} | {} | {} | {} |\n", md(r.kernel), md(r.cell_id), verdict,
                       no_output ? "-" : sci(r.metrics.rel_linf), no_output ? "-" : sci(r.margin), md(r.detail));
    }
    if (failing.size() > kShow) o << fmt::format("\n... and {} more in junit.xml and report.json.\n", failing.size() - kShow);
  } else if (!ran.empty()) {
    std::stable_sort(ran.begin(), ran.end(), [](const CellResult* a, const CellResult* b) { return a->margin > b->margin; });
    o << "\n### Closest to the limit (no cell failed)\n\n| kernel | cell | rel_linf | limit | margin |\n"
         "| --- | --- | ---: | ---: | ---: |\n";
    for (std::size_t i = 0; i < std::min<std::size_t>(5, ran.size()); ++i) {
      const CellResult& r = *ran[i];
      o << fmt::format("| `{}` | `{}` | {} | {} | {} |\n", md(r.kernel), md(r.cell_id), sci(r.metrics.rel_linf), sci(r.limit),
                       sci(r.margin));
    }
  }

  o << "\n<details><summary>Environment</summary>\n\n| | |\n| --- | --- |\n";
  for (const auto& [k, v] : environment_rows(meta.environment))
    if (!v.empty()) o << fmt::format("| {} | `{}` |\n", md(k), md(v, 300));
  for (const auto& m : meta.merged_from)
    o << fmt::format("| merged from | `{}` |\n", md(m.value("source", std::string())));
  o << "\n</details>\n";
  return o.str();
}

// ---- results.jsonl and the report directory ------------------------------------------------------------

ResultsLog read_results_jsonl(const std::string& path) {
  ResultsLog log;
  std::ifstream in(path, std::ios::binary);
  if (!in) return log;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) {
      log.torn_tail = true;  // cut short by a kill: the cell reruns
      break;
    }
    ++line_no;
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty()) {
      log.valid_bytes = pos;
      continue;
    }
    try {
      log.results.push_back(cell_result_from_json(nlohmann::json::parse(line)));
    } catch (const std::exception& e) {
      throw ReportError(fmt::format("{}:{}: malformed result line: {}", path, line_no, e.what()));
    }
    log.valid_bytes = pos;
  }
  return log;
}

ReportDir::ReportDir(std::string dir, int fd) : dir_(std::move(dir)), fd_(fd) {}
ReportDir::ReportDir(ReportDir&& o) noexcept
    : dir_(std::move(o.dir_)), fd_(std::exchange(o.fd_, -1)), previous_(std::move(o.previous_)),
      append_error_(std::move(o.append_error_)) {}
ReportDir& ReportDir::operator=(ReportDir&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    dir_ = std::move(o.dir_);
    fd_ = std::exchange(o.fd_, -1);
    previous_ = std::move(o.previous_);
    append_error_ = std::move(o.append_error_);
  }
  return *this;
}
ReportDir::~ReportDir() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {
int open_results(const std::string& dir, bool truncate) {
  const std::string path = path_in(dir, kResults);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0644);
  if (fd < 0) throw ReportError(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  return fd;
}

/// A directory holds report.json only once its run finished: remove the final reports of an earlier run
/// before results of a new (or resumed) one are appended.
void remove_final_reports(const std::string& dir) {
  for (const char* name : {kReport, kJunit, kSummary, kHtml}) {
    std::error_code ec;
    fs::remove(path_in(dir, name), ec);
    if (ec) throw ReportError(fmt::format("cannot remove '{}': {}", path_in(dir, name), ec.message()));
  }
}
}  // namespace

ReportDir ReportDir::start(const std::string& dir, const nlohmann::json& run) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) throw ReportError(fmt::format("--report-dir: cannot create directory '{}'", dir));
  remove_final_reports(dir);
  const int fd = open_results(dir, /*truncate=*/true);
  ReportDir rd(dir, fd);
  write_atomically(path_in(dir, kRun), dump(run, 1) + "\n");
  return rd;
}

ReportDir ReportDir::resume(const std::string& dir, const nlohmann::json& run) {
  const std::string run_path = path_in(dir, kRun);
  if (!fs::exists(run_path))
    throw ReportError(fmt::format("--resume: '{}' has no {}: no run to resume there (start one with --report-dir)", dir, kRun));
  const nlohmann::json before = read_json_file(run_path);
  if (before != run) {
    std::vector<std::string> diff;
    for (const auto& [k, v] : run.items())
      if (!before.contains(k) || before[k] != v)
        diff.push_back(fmt::format("{} was {}, now {}", k, before.contains(k) ? dump(before[k]) : "absent", dump(v)));
    for (const auto& [k, v] : before.items())
      if (!run.contains(k)) diff.push_back(fmt::format("{} was {}, now absent", k, dump(v)));
    std::string why;
    for (const auto& d : diff) why += (why.empty() ? "" : "; ") + d;
    throw ReportError(fmt::format("--resume: '{}' holds a different run ({}); give the same suite, kernels, device and options",
                                  dir, why));
  }
  const std::string results = path_in(dir, kResults);
  ResultsLog log = read_results_jsonl(results);
  if (log.torn_tail) {
    // Cut the torn line off so the next append starts on a line of its own.
    std::error_code ec;
    fs::resize_file(results, log.valid_bytes, ec);
    if (ec) throw ReportError(fmt::format("cannot truncate '{}': {}", results, ec.message()));
  }
  remove_final_reports(dir);
  ReportDir rd(dir, open_results(dir, /*truncate=*/false));
  rd.previous_ = std::move(log.results);
  return rd;
}

void ReportDir::append(const CellResult& r) {
  if (!append_error_.empty()) return;
  const std::string line = dump(to_json(r)) + "\n";
  std::size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      append_error_ = fmt::format("cannot append to '{}': {}", path_in(dir_, kResults), std::strerror(errno));
      return;
    }
    off += static_cast<std::size_t>(n);
  }
}

namespace {
void write_final_reports(const std::string& dir, const RunSummary& s, const ReportMeta& meta) {
  write_atomically(path_in(dir, kJunit), junit_xml(s, meta));
  write_atomically(path_in(dir, kSummary), summary_markdown(s, meta));
  write_atomically(path_in(dir, kHtml), html_report(s, meta));
  // Last: report.json marks the run as finished (load_report tells unfinished runs by its absence).
  write_atomically(path_in(dir, kReport), dump(report_json(s, meta), 1) + "\n");
}
}  // namespace

void ReportDir::finish(const RunSummary& s, const ReportMeta& meta) {
  if (!append_error_.empty()) throw ReportError(append_error_);
  write_final_reports(dir_, s, meta);
}

void write_reports(const std::string& dir, const RunSummary& s, const ReportMeta& meta) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) throw ReportError(fmt::format("cannot create directory '{}'", dir));
  std::string lines;
  for (const auto& r : s.results) lines += dump(to_json(r)) + "\n";
  write_atomically(path_in(dir, kResults), lines);
  write_atomically(path_in(dir, kRun), dump(meta.run, 1) + "\n");
  write_final_reports(dir, s, meta);
}

// ---- reading and merging reports -----------------------------------------------------------------------

nlohmann::json load_report(const std::string& path) {
  if (fs::is_directory(path)) {
    const std::string report = path_in(path, kReport);
    if (!fs::exists(report)) {
      if (fs::exists(path_in(path, kResults)))
        throw ReportError(fmt::format("'{}' has {} but no {}: the run did not finish; complete it with "
                                      "`pacheck run --resume {}` (same options) first",
                                      path, kResults, kReport, path));
      throw ReportError(fmt::format("'{}' holds no {}", path, kReport));
    }
    return read_json_file(report);
  }
  if (!fs::exists(path)) throw ReportError(fmt::format("'{}' does not exist", path));
  return read_json_file(path);
}

std::pair<RunSummary, ReportMeta> summary_from_report(const nlohmann::json& report) {
  RunSummary s;
  ReportMeta meta;
  try {
    meta.suite = report.at("suite").get<std::string>();
    meta.device = report.at("device").get<std::string>();
    if (report.contains("environment")) meta.environment = environment_from_json(report["environment"]);
    meta.run = report.value("run", nlohmann::json::object());
    if (report.contains("merged_from")) meta.merged_from = report["merged_from"];
    const auto& st = report.at("selftest");
    s.selftest.passed = st.at("passed").get<bool>();
    s.selftest.lines = st.at("lines").get<std::vector<std::string>>();
    for (const auto& r : report.at("results")) s.results.push_back(cell_result_from_json(r));
    std::vector<KernelRole> roles;
    for (const auto& k : report.at("kernels"))
      roles.push_back({k.at("kernel").get<std::string>(), k.at("negative_control").get<std::string>() != "-"});
    if (meta.run.is_object() && meta.run.contains("shard")) s.shard = meta.run["shard"].value("count", 1) > 1;
    summarize(s, roles);
  } catch (const nlohmann::json::exception& e) {
    throw ReportError(fmt::format("malformed report: {}", e.what()));
  } catch (const std::runtime_error& e) {
    throw ReportError(fmt::format("malformed report: {}", e.what()));
  }
  return {std::move(s), std::move(meta)};
}

std::pair<RunSummary, ReportMeta> merge_reports(const std::vector<MergeInput>& inputs) {
  if (inputs.empty()) throw ReportError("merge: no report given");
  std::vector<std::pair<RunSummary, ReportMeta>> parts;
  for (const auto& in : inputs) {
    try {
      parts.push_back(summary_from_report(in.report));
    } catch (const ReportError& e) {
      throw ReportError(fmt::format("{}: {}", in.source, e.what()));
    }
  }

  // Shards: inputs of one run (same identity but the shard, wherever they ran) must cover 0..N-1 once each.
  std::map<std::string, std::map<int, std::string>> shards;  // run without shard/device -> index -> source
  std::map<std::string, int> shard_counts;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const nlohmann::json& run = parts[i].second.run;
    if (!run.is_object() || !run.contains("shard")) continue;
    nlohmann::json key = run;
    key.erase("shard");
    key.erase("device");
    const int index = run["shard"].value("index", 0), count = run["shard"].value("count", 1);
    const std::string k = dump(key);
    if (shard_counts.count(k) && shard_counts[k] != count)
      throw ReportError(fmt::format("merge: {} is shard {} of {} but another input of the same run was split into {} shards",
                                    inputs[i].source, index, count, shard_counts[k]));
    shard_counts[k] = count;
    if (auto [it, fresh] = shards[k].emplace(index, inputs[i].source); !fresh)
      throw ReportError(fmt::format("merge: shard {}/{} given twice ({} and {})", index, count, it->second, inputs[i].source));
  }
  for (const auto& [k, got] : shards) {
    std::string missing;
    for (int i = 0; i < shard_counts[k]; ++i)
      if (!got.count(i)) missing += (missing.empty() ? "" : ", ") + std::to_string(i);
    if (!missing.empty())
      throw ReportError(fmt::format("merge: shard(s) {} of {} missing for suite '{}' (merging without them would drop their "
                                    "cells)",
                                    missing, shard_counts[k], nlohmann::json::parse(k).value("suite", std::string("?"))));
  }

  RunSummary out;
  ReportMeta meta = parts.front().second;
  meta.merged_from = nlohmann::json::array();
  std::vector<KernelRole> roles;
  std::vector<std::string> suites, devices;
  std::map<std::string, std::pair<std::size_t, std::size_t>> seen;  // key -> (input, position in out.results)
  out.selftest.passed = true;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const auto& [s, m] = parts[i];
    meta.merged_from.push_back({{"source", inputs[i].source}, {"run", m.run}, {"environment", to_json(m.environment)}});
    for (const auto& k : s.kernels) {
      auto it = std::find_if(roles.begin(), roles.end(), [&](const KernelRole& r) { return r.name == k.kernel; });
      if (it == roles.end()) roles.push_back({k.kernel, k.control != ControlOutcome::not_control});
      else it->negative_control = it->negative_control || k.control != ControlOutcome::not_control;
    }
    if (std::find(devices.begin(), devices.end(), m.device) == devices.end()) devices.push_back(m.device);
    if (!s.selftest.passed && out.selftest.passed) {
      out.selftest = s.selftest;
    } else if (i == 0) {
      out.selftest.lines = s.selftest.lines;
    }
    for (const auto& r : s.results) {
      if (std::find(suites.begin(), suites.end(), r.suite) == suites.end()) suites.push_back(r.suite);
      const std::string key = r.suite + '\n' + result_key(r.kernel, r.cell_id);
      if (auto it = seen.find(key); it != seen.end()) {
        const CellResult& first = out.results[it->second.second];
        if (first.verdict != r.verdict)
          throw ReportError(fmt::format("merge: cell '{}' of kernel {} is {} in {} but {} in {}", r.cell_id, r.kernel,
                                        verdict_name(first.verdict), inputs[it->second.first].source,
                                        verdict_name(r.verdict), inputs[i].source));
        continue;
      }
      seen.emplace(key, std::make_pair(i, out.results.size()));
      out.results.push_back(r);
    }
  }
  // The order a single run writes: kernel-major, then suite, then position in the suite.
  auto rank = [&](const std::vector<std::string>& v, const std::string& x) {
    return std::find(v.begin(), v.end(), x) - v.begin();
  };
  std::vector<std::string> kernel_names;
  for (const auto& r : roles) kernel_names.push_back(r.name);
  std::stable_sort(out.results.begin(), out.results.end(), [&](const CellResult& a, const CellResult& b) {
    const auto ka = rank(kernel_names, a.kernel), kb = rank(kernel_names, b.kernel);
    if (ka != kb) return ka < kb;
    const auto sa = rank(suites, a.suite), sb = rank(suites, b.suite);
    if (sa != sb) return sa < sb;
    const unsigned ia = static_cast<unsigned>(a.index), ib = static_cast<unsigned>(b.index);  // -1 sorts last
    return ia < ib;
  });
  summarize(out, roles);
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
    return s;
  };
  if (!suites.empty()) meta.suite = join(suites);
  meta.device = join(devices);
  if (meta.run.is_object()) meta.run.erase("shard");  // the merged report is the whole run
  return {std::move(out), std::move(meta)};
}

nlohmann::json without_timings(nlohmann::json report) {
  if (report.contains("results"))
    for (auto& r : report["results"]) r.erase("seconds");
  if (report.is_object() && report.contains("seconds")) report.erase("seconds");
  return report;
}

}  // namespace pacheck
