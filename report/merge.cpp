#include "report/merge.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "report/json.hpp"
#include "report/report_dir.hpp"

namespace pacheck {

namespace fs = std::filesystem;

namespace {
/// report.json: the file of the format whose presence marks a finished run.
const char* report_file() { return find_format(kFinishedFormat)->file; }
}  // namespace

nlohmann::json load_report(const std::string& path) {
  if (fs::is_directory(path)) {
    const std::string report = path_in(path, report_file());
    if (!fs::exists(report)) {
      if (fs::exists(path_in(path, kResultsLogFile)))
        throw ReportError(fmt::format("'{}' has {} but no {}: the run did not finish; complete it with "
                                      "`pacheck run --resume {}` (same options) first",
                                      path, kResultsLogFile, report_file(), path));
      throw ReportError(fmt::format("'{}' holds no {}", path, report_file()));
    }
    return read_json_file(report);
  }
  if (!fs::exists(path)) throw ReportError(fmt::format("'{}' does not exist", path));
  return read_json_file(path);
}

std::string report_file_of(const std::string& path) {
  return fs::is_directory(path) ? path_in(path, report_file()) : path;
}

namespace {

using Part = std::pair<RunSummary, ReportMeta>;

/// Throws ReportError unless the inputs that are shards of one run (the same identity but the shard and the
/// device, wherever they ran) cover shards 0..N-1 once each, all split into the same N.
void check_shards(const std::vector<Part>& parts, const std::vector<MergeInput>& inputs) {
  std::map<std::string, std::map<int, std::string>> shards;  // run without shard/device -> index -> source
  std::map<std::string, int> shard_counts;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const nlohmann::json& run = parts[i].second.run;
    if (!run.is_object() || !run.contains("shard")) continue;
    nlohmann::json key = run;
    key.erase("shard");
    key.erase("device");
    const int index = run["shard"].value("index", 0), count = run["shard"].value("count", 1);
    const std::string k = json_text(key);
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
}

/// The merged run as it is gathered, input by input: names in order of first appearance.
struct Merged {
  RunSummary out;
  std::vector<KernelRole> roles;  ///< a kernel is a negative control when any input says so
  std::vector<std::string> suites, devices;
  std::map<std::string, std::pair<std::size_t, std::size_t>> seen;  ///< suite+result key -> (input, index in out.results)
};

/// Adds input `i`'s kernels, device, verdict options and self-test to `m`. Throws ReportError when its
/// verdict options are not the first input's: one merged report has one set (its repro lines carry them).
void merge_run_facts(Merged& m, const Part& part, std::size_t i, const std::vector<MergeInput>& inputs) {
  const auto& [s, meta] = part;
  for (const auto& k : s.kernels) {
    auto it = std::find_if(m.roles.begin(), m.roles.end(), [&](const KernelRole& r) { return r.name == k.kernel; });
    if (it == m.roles.end()) m.roles.push_back({k.kernel, k.control != ControlOutcome::not_control});
    else it->negative_control = it->negative_control || k.control != ControlOutcome::not_control;
  }
  if (std::find(m.devices.begin(), m.devices.end(), meta.device) == m.devices.end()) m.devices.push_back(meta.device);
  // One set of verdict options per merged report: its repro lines carry them (RunSummary::judge_flags).
  if (i == 0) m.out.judge_flags = s.judge_flags;
  else if (s.judge_flags != m.out.judge_flags)
    throw ReportError(fmt::format("merge: {} was judged with '{}' but {} with '{}': one merged report has one "
                                  "tolerance, oracle precision and --tf32 (merge each kind apart)",
                                  inputs[0].source, m.out.judge_flags, inputs[i].source, s.judge_flags));
  if (!s.selftest.passed && m.out.selftest.passed) {
    m.out.selftest = s.selftest;
  } else if (i == 0) {
    m.out.selftest.lines = s.selftest.lines;
  }
}

/// Adds input `i`'s results to `m`: a result already there from an earlier input (the same suite, kernel and
/// cell) is kept once; throws ReportError when the two verdicts differ.
void merge_results(Merged& m, const RunSummary& s, std::size_t i, const std::vector<MergeInput>& inputs) {
  for (const auto& r : s.results) {
    if (std::find(m.suites.begin(), m.suites.end(), r.suite) == m.suites.end()) m.suites.push_back(r.suite);
    const std::string key = r.suite + '\n' + result_key(r.kernel, r.cell_id);
    if (auto it = m.seen.find(key); it != m.seen.end()) {
      const CellResult& first = m.out.results[it->second.second];
      if (first.verdict != r.verdict)
        throw ReportError(fmt::format("merge: cell '{}' of kernel {} is {} in {} but {} in {}", r.cell_id, r.kernel,
                                      verdict_name(first.verdict), inputs[it->second.first].source,
                                      verdict_name(r.verdict), inputs[i].source));
      continue;
    }
    m.seen.emplace(key, std::make_pair(i, m.out.results.size()));
    m.out.results.push_back(r);
  }
}

/// Sorts `m.out.results` into the order a single run writes: kernel-major, then suite, then position in the
/// suite (results without one last).
void sort_as_one_run(Merged& m) {
  auto rank = [&](const std::vector<std::string>& v, const std::string& x) {
    return std::find(v.begin(), v.end(), x) - v.begin();
  };
  std::vector<std::string> kernel_names;
  for (const auto& r : m.roles) kernel_names.push_back(r.name);
  std::stable_sort(m.out.results.begin(), m.out.results.end(), [&](const CellResult& a, const CellResult& b) {
    const auto ka = rank(kernel_names, a.kernel), kb = rank(kernel_names, b.kernel);
    if (ka != kb) return ka < kb;
    const auto sa = rank(m.suites, a.suite), sb = rank(m.suites, b.suite);
    if (sa != sb) return sa < sb;
    const unsigned ia = static_cast<unsigned>(a.index), ib = static_cast<unsigned>(b.index);  // -1 sorts last
    return ia < ib;
  });
}

}  // namespace

std::pair<RunSummary, ReportMeta> merge_reports(const std::vector<MergeInput>& inputs) {
  if (inputs.empty()) throw ReportError("merge: no report given");
  std::vector<Part> parts;
  for (const auto& in : inputs) {
    parts.push_back(summary_from_report(in.report, in.source));
  }
  check_shards(parts, inputs);

  Merged m;
  ReportMeta meta = parts.front().second;
  meta.merged_from = nlohmann::json::array();
  m.out.selftest.passed = true;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const ReportMeta& mi = parts[i].second;
    meta.merged_from.push_back({{"source", inputs[i].source}, {"run", mi.run}, {"environment", to_json(mi.environment)}});
    merge_run_facts(m, parts[i], i, inputs);
    merge_results(m, parts[i].first, i, inputs);
  }
  sort_as_one_run(m);
  summarize(m.out, m.roles);
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
    return s;
  };
  if (!m.suites.empty()) meta.suite = join(m.suites);
  meta.device = join(m.devices);
  if (meta.run.is_object()) meta.run.erase("shard");  // the merged report is the whole run
  return {std::move(m.out), std::move(meta)};
}

nlohmann::json without_timings(nlohmann::json report) {
  if (report.contains("results"))
    for (auto& r : report["results"]) r.erase("seconds");
  if (report.is_object() && report.contains("seconds")) report.erase("seconds");
  return report;
}

}  // namespace pacheck
