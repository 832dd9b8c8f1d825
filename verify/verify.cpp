// pacheck verify: a report directory checked against its evidence.json (verify/evidence.hpp). Apart from the
// writer of evidence.json (verify/evidence.cpp, which lists every report format's file), so the libFuzzer
// target of evidence.json (tests/fuzz/fuzz_evidence_json.cpp) compiles this reader without the formats.
#include "verify/verify.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/digest.hpp"
#include "core/files.hpp"
#include "judge/summary.hpp"
#include "kernels/plugin.hpp"
#include "report/json.hpp"
#include "report/report_dir.hpp"
#include "report/results_log.hpp"
#include "verify/evidence.hpp"

namespace pacheck {

namespace fs = std::filesystem;

namespace {

/// "1a2b3c4d..": the first 8 hex digits of a digest, for the one-line answer.
std::string short_hash(const std::string& hex) { return hex.size() > 8 ? hex.substr(0, 8) + ".." : hex; }

/// The device kind of a spec: "cpu", "cuda", "hip" ("cuda:1" -> "cuda", score's "cpu (replayed outputs)" -> "cpu").
std::string device_kind(const std::string& spec) { return spec.substr(0, spec.find_first_of(": ")); }

/// A failed check: its exit code and its message (what, then why).
struct Failure {
  int code;
  std::string message;
};

[[noreturn]] void fail(int code, std::string message) { throw Failure{code, std::move(message)}; }

/// evidence.json's field `key` of `j` (an object), of the JSON type `want`; a missing or mistyped one is
/// the evidence's failure, naming the field.
const nlohmann::json& field(const nlohmann::json& j, const char* key, nlohmann::json::value_t want,
                            const std::string& where) {
  if (!j.is_object() || !j.contains(key)) fail(kVerifyEvidence, fmt::format("{}: field '{}' is missing", where, key));
  const nlohmann::json& v = j[key];
  const bool ok = v.type() == want || (want == nlohmann::json::value_t::number_unsigned && v.is_number_integer() &&
                                       v.get<long long>() >= 0);
  if (!ok) fail(kVerifyEvidence, fmt::format("{}: field '{}' is not of the type pacheck writes", where, key));
  return v;
}
std::string str_field(const nlohmann::json& j, const char* key, const std::string& where) {
  return field(j, key, nlohmann::json::value_t::string, where).get<std::string>();
}
std::size_t count_field(const nlohmann::json& j, const char* key, const std::string& where) {
  return field(j, key, nlohmann::json::value_t::number_unsigned, where).get<std::size_t>();
}
bool bool_field(const nlohmann::json& j, const char* key, const std::string& where) {
  return field(j, key, nlohmann::json::value_t::boolean, where).get<bool>();
}
const nlohmann::json& array_field(const nlohmann::json& j, const char* key, const std::string& where) {
  return field(j, key, nlohmann::json::value_t::array, where);
}
const nlohmann::json& object_field(const nlohmann::json& j, const char* key, const std::string& where) {
  return field(j, key, nlohmann::json::value_t::object, where);
}

/// Calls f(kernel index, cell id as it ran) for each (kernel, cell) of `suite` the run paired (a mixed suite:
/// each kernel with its own kind's cells, as run's plan pairs them), kernel-major in suite order.
template <class F>
void for_each_planned(const Suite& suite, const std::vector<EvidenceKernel>& kernels, F&& f) {
  const CellKinds kinds = cell_kinds(suite);
  for (std::size_t k = 0; k < kernels.size(); ++k)
    for (const SuiteCell& c : suite.cells)
      if (pairs_with_kind(kernels[k].takes_mla, c.cell.c, kinds)) f(k, c.for_layouts(kernels[k].layouts).id());
}

/// The planned result keys of `kernels` over `suite`: result_key(kernel, cell id as it ran) -> the
/// kernel's index.
std::unordered_map<std::string, std::size_t> planned_keys(const Suite& suite, const std::vector<EvidenceKernel>& kernels) {
  std::unordered_map<std::string, std::size_t> out;
  for_each_planned(suite, kernels, [&](std::size_t k, const std::string& id) { out.emplace(result_key(kernels[k].name, id), k); });
  return out;
}

/// Reads `name` of the report directory for verify: a regular file (no link, FIFO or device) within the cap.
/// Returns false when it does not exist; throws Failure(code) naming it for anything else.
bool read_dir_file(const std::string& dir, const std::string& name, int code, std::string& bytes) {
  const std::string path = path_in(dir, name);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return false;
  try {
    bytes = read_regular_file(path, kEvidenceReadLimit, Symlinks::refuse);
  } catch (const FileError& e) {
    fail(code, e.what());
  }
  return true;
}

/// A negative control's cells as results.jsonl holds them.
struct ControlCount {
  int planted = 0, caught = 0;
  std::set<std::string> devices;  ///< the devices of its caught cells
};

/// The results counted by cell_outcome, as the run's summary counts them.
struct OutcomeCounts {
  int passed = 0, failed = 0, declined = 0, caught = 0, missed = 0, not_run = 0;
  std::string first_failed;  ///< "KERNEL 'CELL' (VERDICT)" of the first failed result, for --require-pass
  std::map<std::string, ControlCount> controls;
};

/// What verify has read and what the checks so far established: each check below reads it, fails, or adds
/// its part for the checks after it.
struct Verification {
  explicit Verification(const VerifyRequest& r)
      : req(r), ev_path(path_in(r.dir, kEvidenceFile)), results_path(path_in(r.dir, kResultsLogFile)) {}
  const VerifyRequest& req;
  const std::string ev_path, results_path;
  nlohmann::json ev;                            ///< evidence.json
  std::map<std::string, std::string> contents;  ///< the listed files' bytes by name
  nlohmann::json run, report;                   ///< run.json and report.json
  Suite suite;                                  ///< as this pacheck resolves it
  SuiteDigest mine;                             ///< its digest
  std::vector<EvidenceKernel> kernels;          ///< as the evidence lists them
  std::unordered_map<std::string, std::size_t> planned;  ///< planned_keys(suite, kernels)
  ResultsLog log;                               ///< results.jsonl
  OutcomeCounts counts;
  std::string plugin_text;                      ///< the plugin's part of the verified line
  std::string spec, description;                ///< the evidence's device spec and description
  int planted = 0, caught_on_device = 0;        ///< the controls' planted cells, and their caught ones
};

void check_directory(const Verification& v) {
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(v.req.dir, ec)))
    fail(kVerifyUsage,
         fmt::format("'{}': not a directory (give the report directory of a `pacheck run --report-dir`)", v.req.dir));
}

/// 1. The manifest itself: present, JSON, as pacheck writes it, its digest matching its content.
void check_manifest(Verification& v) {
  std::string ev_text;
  if (!read_dir_file(v.req.dir, kEvidenceFile, kVerifyEvidence, ev_text))
    fail(kVerifyEvidence, fmt::format("{}: missing: only a finished `pacheck run --report-dir` writes it (merge, "
                                      "a stopped run and pacheck before verify write none)",
                                      v.ev_path));
  try {
    v.ev = nlohmann::json::parse(ev_text);
  } catch (const nlohmann::json::exception& e) {
    fail(kVerifyEvidence, fmt::format("{}: not valid JSON: {}", v.ev_path, e.what()));
  }
  if (!v.ev.is_object()) fail(kVerifyEvidence, fmt::format("{}: not a JSON object", v.ev_path));
  if (json_text(v.ev, 1) + "\n" != ev_text)
    fail(kVerifyEvidence, fmt::format("{}: not byte for byte as pacheck writes it: the file was edited", v.ev_path));
  const std::string claimed = str_field(v.ev, "evidence_sha256", v.ev_path);
  nlohmann::json body = v.ev;
  body.erase("evidence_sha256");
  if (sha256_of(json_text(body, 1)) != claimed)
    fail(kVerifyEvidence, fmt::format("{}: evidence_sha256 does not match its content: the file was edited", v.ev_path));
  // value("evidence_version", 0) throws for a string there: test the type before comparing.
  const nlohmann::json version = v.ev.value("evidence_version", nlohmann::json());
  if (!version.is_number_integer() || version.get<long long>() != kEvidenceVersion)
    fail(kVerifyEvidence, fmt::format("{}: evidence_version {} (this pacheck reads {})", v.ev_path, json_text(version),
                                      kEvidenceVersion));
}

/// 2. Every listed file as listed (its size and SHA-256), and nothing else in the directory.
void check_files(Verification& v) {
  const std::string& dir = v.req.dir;
  for (const nlohmann::json& f : array_field(v.ev, "files", v.ev_path)) {
    const std::string name = str_field(f, "name", v.ev_path + " files[]");
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == ".." || name == kEvidenceFile)
      fail(kVerifyEvidence, fmt::format("{}: files[] names '{}', not a report file of the directory", v.ev_path, name));
    const std::string path = path_in(dir, name);
    std::string bytes;
    if (!read_dir_file(dir, name, kVerifyFiles, bytes))
      fail(kVerifyFiles, fmt::format("{}: listed in {} but missing", path, kEvidenceFile));
    const std::size_t want_bytes = count_field(f, "bytes", v.ev_path + " files[" + name + "]");
    if (bytes.size() != want_bytes)
      fail(kVerifyFiles, fmt::format("{}: {} bytes, {} lists {}: changed after the run", path, bytes.size(),
                                     kEvidenceFile, want_bytes));
    const std::string digest = sha256_of(bytes);
    if (digest != str_field(f, "sha256", v.ev_path + " files[" + name + "]"))
      fail(kVerifyFiles, fmt::format("{}: sha256 {}, {} lists {}: changed after the run", path, short_hash(digest),
                                     kEvidenceFile, short_hash(f["sha256"].get<std::string>())));
    v.contents[name] = std::move(bytes);
  }
  for (const std::string name : {kResultsLogFile, kRunFile, "report.json"})
    if (!v.contents.count(name)) fail(kVerifyEvidence, fmt::format("{}: files[] does not list {}", v.ev_path, name));
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == kEvidenceFile || name == kLockFile || v.contents.count(name)) continue;
    fail(kVerifyFiles, fmt::format("{}: not listed in {}: a file added after the run", entry.path().string(), kEvidenceFile));
  }
  if (ec) fail(kVerifyUsage, fmt::format("'{}': cannot list the directory: {}", dir, ec.message()));
}

/// run.json and report.json are JSON, and run.json is the run the evidence records.
void check_run_file(Verification& v) {
  try {
    v.run = nlohmann::json::parse(v.contents[kRunFile]);
    v.report = nlohmann::json::parse(v.contents["report.json"]);
  } catch (const nlohmann::json::exception& e) {
    fail(kVerifyResults, fmt::format("{} or report.json: not valid JSON: {}", path_in(v.req.dir, kRunFile), e.what()));
  }
  if (v.run != field(v.ev, "run", nlohmann::json::value_t::object, v.ev_path))
    fail(kVerifyResults, fmt::format("{}: differs from the run {} records", path_in(v.req.dir, kRunFile), kEvidenceFile));
}

/// 3 (score). The export a `pacheck score` judged: --cases is given exactly for a score's evidence, its
/// manifest is the scored one (run.json's score.manifest_sha256), and the score judged every cell of it.
/// Returns false for a run's evidence (check_suite goes on with the suite).
bool check_scored_export(Verification& v) {
  const VerifyRequest& req = v.req;
  const std::string run_path = path_in(req.dir, kRunFile);
  const bool scored = v.run.contains("score");
  if (!scored && req.cases)
    fail(kVerifyUsage, fmt::format("--cases {}: {} is of `pacheck run`, not of `pacheck score`: verify it with "
                                   "--suite (or none) instead",
                                   req.cases->dir, v.ev_path));
  if (!scored) return false;
  if (req.cases && !req.suite.empty())
    fail(kVerifyUsage, fmt::format("--suite {}: a score's cells are those of --cases {}, not a suite's: drop --suite",
                                   req.suite, req.cases->dir));
  if (!req.cases)
    fail(kVerifyUsage, fmt::format("{}: the evidence of `pacheck score`: give --cases DIR, your copy of the export it "
                                   "scored (its cells stand in for a suite's)",
                                   v.ev_path));
  const nlohmann::json& score = object_field(v.run, "score", run_path);
  const std::string scored_sha = score.value("manifest_sha256", std::string());
  if (scored_sha != req.cases->manifest_sha256)
    fail(kVerifySuite, fmt::format("{} score.manifest_sha256: the score judged an export whose manifest.json has "
                                   "sha256 {}, but --cases {} holds {}: not the same case files",
                                   run_path, scored_sha.empty() ? "(none recorded)" : short_hash(scored_sha),
                                   req.cases->dir, short_hash(req.cases->manifest_sha256)));
  v.suite = req.cases->suite;
  v.mine = suite_digest(v.suite);
  const nlohmann::json& ev_suite = object_field(v.ev, "suite", v.ev_path);
  const std::size_t ev_cells = count_field(ev_suite, "cells", v.ev_path + " suite");
  if (v.mine.sha256 != str_field(ev_suite, "sha256", v.ev_path + " suite") || v.mine.cells != ev_cells)
    fail(kVerifySuite, fmt::format("{} suite: the score judged {} cells, not the {} cells of --cases {} (a score of "
                                   "part of an export, `--cell`, leaves cells out)",
                                   v.ev_path, ev_cells, v.mine.cells, req.cases->dir));
  return true;
}

/// 3. The suite, as this pacheck resolves it: the same cells, and the run neither filtered nor sharded.
void check_suite(Verification& v) {
  if (check_scored_export(v)) return;
  const VerifyRequest& req = v.req;
  const nlohmann::json& ev_suite = object_field(v.ev, "suite", v.ev_path);
  const std::string ev_suite_name = str_field(ev_suite, "name", v.ev_path + " suite");
  const std::string ev_suite_sha = str_field(ev_suite, "sha256", v.ev_path + " suite");
  const std::size_t ev_cells = count_field(ev_suite, "cells", v.ev_path + " suite");
  const std::string suite_arg = req.suite.empty() ? ev_suite_name : req.suite;
  try {
    v.suite = load_suite(suite_arg);
  } catch (const SuiteError& e) {
    if (req.suite.empty())
      fail(kVerifySuite, fmt::format("{} suite.name: '{}' is no suite this pacheck knows ({}); give --suite FILE",
                                     v.ev_path, ev_suite_name, e.what()));
    fail(kVerifyUsage, fmt::format("--suite: {}", e.what()));
  }
  v.mine = suite_digest(v.suite);
  if (v.mine.sha256 != ev_suite_sha || v.mine.cells != ev_cells)
    fail(kVerifySuite,
         fmt::format("{} suite: the run is of suite '{}' ({} cells, sha256 {}), but {} resolves to '{}' ({} cells, sha256 "
                     "{}) here: not the same cells{}",
                     v.ev_path, ev_suite_name, ev_cells, short_hash(ev_suite_sha),
                     req.suite.empty() ? "its name" : "--suite " + req.suite, v.mine.name, v.mine.cells,
                     short_hash(v.mine.sha256),
                     req.suite.empty() ? " (another pacheck version, or an edited suite file)" : ""));
  const std::string run_path = path_in(req.dir, kRunFile);
  if (v.run.value("filter", std::string()) != "")
    fail(kVerifySuite, fmt::format("{}: filter '{}': a filtered run leaves cells of the suite out", run_path,
                                   v.run.value("filter", std::string())));
  if (v.run.contains("shard") && v.run["shard"].is_object() && v.run["shard"].value("count", 1) != 1)
    fail(kVerifySuite, fmt::format("{}: shard {}: one shard of a run holds part of the suite (verify the merged "
                                   "run's shards one by one, or run unsharded)",
                                   run_path, json_text(v.run["shard"])));
}

/// 4a. The kernels the evidence lists (with their layouts), which must be run.json's kernels.
void check_kernels(Verification& v) {
  std::vector<std::string> kernel_names;
  for (const nlohmann::json& k : array_field(v.ev, "kernels", v.ev_path)) {
    EvidenceKernel ek;
    ek.name = str_field(k, "name", v.ev_path + " kernels[]");
    ek.negative_control = bool_field(k, "negative_control", v.ev_path + " kernels[]");
    // Absent in evidence written before MLA kernels existed: a multi-head kernel.
    ek.takes_mla = k.contains("takes_mla") && bool_field(k, "takes_mla", v.ev_path + " kernels[]");
    for (const nlohmann::json& l : array_field(k, "layouts", v.ev_path + " kernels[]")) {
      try {
        ek.layouts.push_back(parse_layout(l.is_string() ? l.get<std::string>() : std::string()));
      } catch (const std::exception&) {
        fail(kVerifyEvidence, fmt::format("{} kernels[{}].layouts: {} is not a layout", v.ev_path, ek.name, json_text(l)));
      }
    }
    kernel_names.push_back(ek.name);
    v.kernels.push_back(std::move(ek));
  }
  if (!v.run.contains("kernels") || v.run["kernels"] != nlohmann::json(kernel_names))
    fail(kVerifyResults,
         fmt::format("{}: its kernels are not the kernels {} lists", path_in(v.req.dir, kRunFile), kEvidenceFile));
}

/// 4b. results.jsonl holds one result per (kernel, cell) of the suite: none added, none twice, none missing,
/// as many as the evidence counts.
void check_results(Verification& v) {
  try {
    v.log = parse_results_jsonl(v.contents[kResultsLogFile], v.results_path);
  } catch (const ReportError& e) {
    fail(kVerifyResults, e.what());
  }
  if (v.log.torn_tail) fail(kVerifyResults, fmt::format("{}: its last line is cut short", v.results_path));
  v.planned = planned_keys(v.suite, v.kernels);
  std::unordered_map<std::string, int> line_of;
  for (std::size_t i = 0; i < v.log.results.size(); ++i) {
    const CellResult& r = v.log.results[i];
    const std::string key = result_key(r.kernel, r.cell_id);
    if (!v.planned.count(key))
      fail(kVerifyResults, fmt::format("{}:{}: {} '{}' is not a cell of suite '{}' for the run's kernels: a result added",
                                       v.results_path, v.log.line_numbers[i], r.kernel, r.cell_id, v.suite.name));
    const auto [it, fresh] = line_of.emplace(key, v.log.line_numbers[i]);
    if (!fresh)
      fail(kVerifyResults, fmt::format("{}:{}: a second result for {} '{}' (the first is line {})", v.results_path,
                                       v.log.line_numbers[i], r.kernel, r.cell_id, it->second));
  }
  if (line_of.size() != v.planned.size()) {
    for_each_planned(v.suite, v.kernels, [&](std::size_t k, const std::string& id) {
      if (!line_of.count(result_key(v.kernels[k].name, id)))
        fail(kVerifyResults, fmt::format("{}: no result for {} '{}' ({} of {} results missing): cells skipped or "
                                         "removed",
                                         v.results_path, v.kernels[k].name, id, v.planned.size() - line_of.size(),
                                         v.planned.size()));
    });
  }
  const std::size_t ev_results = count_field(v.ev, "results", v.ev_path);
  if (ev_results != v.log.results.size())
    fail(kVerifyResults,
         fmt::format("{} results: {}, but {} holds {}", v.ev_path, ev_results, v.results_path, v.log.results.size()));
}

/// 4c. Counts the results by cell_outcome and each control's planted and caught cells; a not_run result is
/// allowed only for a control's cell outside its expected failures.
void count_outcomes(Verification& v) {
  OutcomeCounts& n = v.counts;
  for (const CellResult& r : v.log.results) {
    const EvidenceKernel& k = v.kernels[v.planned.at(result_key(r.kernel, r.cell_id))];
    switch (cell_outcome(r, k.negative_control)) {
      case CellOutcome::passed: ++n.passed; break;
      case CellOutcome::failed:
        ++n.failed;
        if (n.first_failed.empty()) n.first_failed = fmt::format("{} '{}' ({})", r.kernel, r.cell_id, verdict_name(r.verdict));
        break;
      case CellOutcome::declined: ++n.declined; break;
      case CellOutcome::caught: ++n.caught; break;
      case CellOutcome::missed: ++n.missed; break;
      case CellOutcome::not_run:
        // Only a control's cell outside its expected failures may be left unrun: a not_run planted cell would
        // hide a miss, and an ordinary kernel runs every cell it supports.
        if (!k.negative_control || r.expected_fail)
          fail(kVerifyResults,
               fmt::format("{}: {} '{}' is not_run, but {}: a cell that had to run was left out", v.results_path,
                           r.kernel, r.cell_id,
                           k.negative_control ? "it is one of the control's planted cells" : "the kernel is no negative control"));
        ++n.not_run;
        break;
    }
    if (k.negative_control) {
      // Planted = caught + missed, as the run's summary counts them (report.json, evidence.json controls[]): a
      // faulted cell the control declined was never run, so it is no planted cell it could have missed.
      ControlCount& c = n.controls[k.name];
      const CellOutcome o = cell_outcome(r, true);
      if (o == CellOutcome::caught || o == CellOutcome::missed) ++c.planted;
      if (o == CellOutcome::caught) {
        ++c.caught;
        if (!r.device.empty()) c.devices.insert(r.device);
      }
    }
  }
}

/// 4d. The summaries of evidence.json and report.json count what results.jsonl holds.
void check_summaries(const Verification& v) {
  const OutcomeCounts& n = v.counts;
  const std::string report_path = path_in(v.req.dir, "report.json");
  const nlohmann::json& summary = object_field(v.ev, "summary", v.ev_path);
  const nlohmann::json& rsum = object_field(v.report, "summary", "report.json");
  for (const auto& [name, value] : std::vector<std::pair<const char*, int>>{
           {"passed", n.passed}, {"failed", n.failed}, {"declined", n.declined}, {"caught", n.caught}}) {
    if (summary.value(name, -1) != value)
      fail(kVerifyResults, fmt::format("{} summary.{}: {}, but {} counts {}", v.ev_path, name,
                                       json_text(summary.value(name, nlohmann::json())), v.results_path, value));
    if (rsum.value(name, -1) != value)
      fail(kVerifyResults, fmt::format("{} summary.{}: {}, but {} counts {}", report_path, name,
                                       json_text(rsum.value(name, nlohmann::json())), v.results_path, value));
  }
  // not_run: in reports since negative controls run only where their fault can show; an earlier report has
  // no such field and no such result.
  for (const auto& [json, where] : {std::pair{&summary, v.ev_path}, std::pair{&rsum, report_path}})
    if (json->value("not_run", 0) != n.not_run)
      fail(kVerifyResults, fmt::format("{} summary.not_run: {}, but {} counts {}", where,
                                       json_text(json->value("not_run", nlohmann::json(0))), v.results_path, n.not_run));
}

/// 5. The plugin: with --plugin, the library's SHA-256 is one the run loaded.
void check_plugin(Verification& v) {
  const VerifyRequest& req = v.req;
  const nlohmann::json& plugins = array_field(v.ev, "plugins", v.ev_path);
  if (req.plugin.empty()) {
    v.plugin_text = req.cases ? fmt::format("a case-file runner's outputs (export sha256 {} = --cases)",
                                            short_hash(req.cases->manifest_sha256))
                    : plugins.empty() ? "no plugin"
                                    : fmt::format("plugin sha256 {} (not checked: no --plugin)",
                                                  short_hash(str_field(plugins[0], "sha256", v.ev_path + " plugins[]")));
    return;
  }
  std::string lib;
  try {
    lib = sha256_of(read_regular_file(req.plugin, ReadLimit{kMaxPluginBytes, "a plugin library"}));
  } catch (const FileError& e) {
    fail(kVerifyUsage, fmt::format("--plugin: {}", e.what()));
  }
  std::string theirs;
  bool match = false;
  for (const nlohmann::json& p : plugins) {
    const std::string sha = str_field(p, "sha256", v.ev_path + " plugins[]");
    theirs += fmt::format("{}{} (sha256 {})", theirs.empty() ? "" : ", ", str_field(p, "path", v.ev_path + " plugins[]"),
                          short_hash(sha));
    match = match || sha == lib;
  }
  if (plugins.empty())
    fail(kVerifyPlugin, fmt::format("--plugin {}: the run loaded no plugin ({} plugins is empty): its results are "
                                    "not of this library",
                                    req.plugin, v.ev_path));
  if (!match)
    fail(kVerifyPlugin, fmt::format("--plugin {}: sha256 {}, but the run loaded {}: not the library that ran",
                                    req.plugin, short_hash(lib), theirs));
  v.plugin_text = fmt::format("plugin sha256 {} (= --plugin)", short_hash(lib));
}

/// 6. Negative controls: run.json's device is the evidence's, no control missed a planted cell, and some
/// control was caught on the run's device kind.
void check_controls(Verification& v) {
  const nlohmann::json& device = object_field(v.ev, "device", v.ev_path);
  v.spec = str_field(device, "spec", v.ev_path + " device");
  v.description = str_field(device, "description", v.ev_path + " device");
  if (v.run.value("device", std::string()) != v.spec)
    fail(kVerifyResults, fmt::format("{}: device {} is not {}'s device '{}'", path_in(v.req.dir, kRunFile),
                                     json_text(v.run.value("device", nlohmann::json())), kEvidenceFile, v.spec));
  bool any_on_device = false;
  for (const auto& [name, c] : v.counts.controls) {
    if (c.caught < c.planted)
      fail(kVerifyControls, fmt::format("{}: negative control {} caught {} of its {} planted cells: the instrument is "
                                        "blind there",
                                        v.results_path, name, c.caught, c.planted));
    v.planted += c.planted;
    for (const std::string& d : c.devices) any_on_device = any_on_device || device_kind(d) == device_kind(v.spec);
    if (device_kind(v.spec) == "cpu" && c.caught > 0) any_on_device = true;  // CPU results may not name a device
    v.caught_on_device += c.caught;
  }
  if (!any_on_device)
    fail(kVerifyControls,
         fmt::format("{}: no negative control was caught on the run's device {}{}: nothing shows the checks can fail "
                     "there ({})",
                     v.results_path, v.spec, v.counts.controls.empty() ? " (none ran)" : "",
                     v.req.cases ? "score with --control-outputs DIR, the outputs of your runner with a planted fault"
                                 : "run with --with-controls"));
}

/// 7. The comparator self-test passed, by the evidence and by report.json.
void check_selftest(const Verification& v) {
  const nlohmann::json& report = v.report;
  if (!bool_field(object_field(v.ev, "selftest", v.ev_path), "passed", v.ev_path + " selftest") ||
      !report.contains("selftest") || !report["selftest"].is_object() || report["selftest"].value("passed", false) != true)
    fail(kVerifySelftest, fmt::format("{} selftest: the comparator self-test failed: the run's verdicts cannot be trusted",
                                      path_in(v.req.dir, "report.json")));
}

/// 8. The device the caller expects (--device-expect) is in the run's device description.
void check_device_expect(const Verification& v) {
  if (!v.req.device_expect.empty() && v.description.find(v.req.device_expect) == std::string::npos)
    fail(kVerifyDevice, fmt::format("{} device.description: '{}' does not contain --device-expect '{}'", v.ev_path,
                                    v.description, v.req.device_expect));
}

/// 9. The kernels' own result, when the caller gates on it (--require-pass; the evidence is sound by now).
void check_require_pass(const Verification& v) {
  const int failed = v.counts.failed;
  if (v.req.require_pass && failed > 0)
    fail(kVerifyFailed, fmt::format("{}: the evidence verifies, but the run failed {} cell{} (--require-pass); the "
                                    "first: {}",
                                    v.results_path, failed, failed == 1 ? "" : "s", v.counts.first_failed));
}

/// The one line of a verified directory.
std::string verified_line(const Verification& v) {
  const nlohmann::json& ver = object_field(v.ev, "pacheck", v.ev_path);
  return fmt::format(
      "verified: suite {} ({} cells, sha256 {}; {} results), {}, on {} ({}), pacheck {} ({}): {} failed, controls "
      "{}/{} caught, self-test passed{}",
      v.suite.name, v.mine.cells, short_hash(v.mine.sha256), v.log.results.size(), v.plugin_text,
      v.description.empty() ? "an undescribed device" : v.description, v.spec, ver.value("version", std::string("?")),
      ver.value("git_commit", std::string("?")), v.counts.failed + v.counts.missed, v.caught_on_device, v.planted,
      v.ev.value("judge_flags", std::string()).empty() ? "" : ", judged with " + v.ev.value("judge_flags", std::string()));
}

/// Every check in order; the first that fails throws its Failure.
VerifyOutcome verify(const VerifyRequest& req) {
  Verification v(req);
  check_directory(v);
  check_manifest(v);
  check_files(v);
  check_run_file(v);
  check_suite(v);
  check_kernels(v);
  check_results(v);
  count_outcomes(v);
  check_summaries(v);
  check_plugin(v);
  check_controls(v);
  check_selftest(v);
  check_device_expect(v);
  check_require_pass(v);
  return {kVerified, verified_line(v)};
}

}  // namespace

SuiteDigest suite_digest(const Suite& suite) {
  Sha256 h;
  for (const SuiteCell& c : suite.cells) {
    const std::string line = c.cell.id() + (c.native_layout ? "\tnative\n" : "\tfixed\n");
    h.update(line.data(), line.size());
  }
  return {suite.name, h.hex(), suite.cells.size()};
}

VerifyOutcome verify_report_dir(const VerifyRequest& req) {
  try {
    return verify(req);
  } catch (const Failure& f) {
    return {f.code, "verify: " + f.message};
  } catch (const std::exception& e) {
    return {kVerifyEvidence, fmt::format("verify: {}: {}", path_in(req.dir, kEvidenceFile), e.what())};
  }
}

}  // namespace pacheck
