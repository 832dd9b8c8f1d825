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

std::pair<RunSummary, ReportMeta> merge_reports(const std::vector<MergeInput>& inputs) {
  if (inputs.empty()) throw ReportError("merge: no report given");
  std::vector<std::pair<RunSummary, ReportMeta>> parts;
  for (const auto& in : inputs) {
    parts.push_back(summary_from_report(in.report, in.source));
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
    // One set of verdict options per merged report: its repro lines carry them (RunSummary::judge_flags).
    if (i == 0) out.judge_flags = s.judge_flags;
    else if (s.judge_flags != out.judge_flags)
      throw ReportError(fmt::format("merge: {} was judged with '{}' but {} with '{}': one merged report has one "
                                    "tolerance, oracle precision and --tf32 (merge each kind apart)",
                                    inputs[0].source, out.judge_flags, inputs[i].source, s.judge_flags));
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
