// pacheck verify: a report directory checked against its evidence.json (report/evidence.hpp). Apart from the
// writer of evidence.json (evidence.cpp, which lists every report format's file), so the libFuzzer target of
// evidence.json (tests/fuzz/fuzz_evidence_json.cpp) compiles this reader without the formats.
#include "report/evidence.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <unordered_map>

#include "core/digest.hpp"
#include "core/files.hpp"
#include "kernels/plugin.hpp"
#include "report/json.hpp"
#include "report/report_dir.hpp"
#include "report/results_log.hpp"

namespace pacheck {

namespace fs = std::filesystem;

namespace {

/// "1a2b3c4d..": the first 8 hex digits of a digest, for the one-line answer.
std::string short_hash(const std::string& hex) { return hex.size() > 8 ? hex.substr(0, 8) + ".." : hex; }

/// The device kind of a spec: "cpu", "cuda", "hip" ("cuda:1" -> "cuda").
std::string device_kind(const std::string& spec) { return spec.substr(0, spec.find(':')); }

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

/// The planned result keys of `kernels` over `suite`: result_key(kernel, cell id as it ran) -> the
/// kernel's index.
std::unordered_map<std::string, std::size_t> planned_keys(const Suite& suite, const std::vector<EvidenceKernel>& kernels) {
  std::unordered_map<std::string, std::size_t> out;
  for (std::size_t k = 0; k < kernels.size(); ++k)
    for (const SuiteCell& c : suite.cells) out.emplace(result_key(kernels[k].name, c.for_layouts(kernels[k].layouts).id()), k);
  return out;
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

namespace {

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

VerifyOutcome verify(const VerifyRequest& req) {
  const std::string& dir = req.dir;
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(dir, ec)))
    fail(kVerifyUsage, fmt::format("'{}': not a directory (give the report directory of a `pacheck run --report-dir`)", dir));

  // 1. The manifest itself: present, JSON, as pacheck writes it, its digest matching its content.
  const std::string ev_path = path_in(dir, kEvidenceFile);
  std::string ev_text;
  if (!read_dir_file(dir, kEvidenceFile, kVerifyEvidence, ev_text))
    fail(kVerifyEvidence, fmt::format("{}: missing: only a finished `pacheck run --report-dir` writes it (merge, "
                                      "a stopped run and pacheck before verify write none)",
                                      ev_path));
  nlohmann::json ev;
  try {
    ev = nlohmann::json::parse(ev_text);
  } catch (const nlohmann::json::exception& e) {
    fail(kVerifyEvidence, fmt::format("{}: not valid JSON: {}", ev_path, e.what()));
  }
  if (!ev.is_object()) fail(kVerifyEvidence, fmt::format("{}: not a JSON object", ev_path));
  if (json_text(ev, 1) + "\n" != ev_text)
    fail(kVerifyEvidence, fmt::format("{}: not byte for byte as pacheck writes it: the file was edited", ev_path));
  const std::string claimed = str_field(ev, "evidence_sha256", ev_path);
  nlohmann::json body = ev;
  body.erase("evidence_sha256");
  if (sha256_of(json_text(body, 1)) != claimed)
    fail(kVerifyEvidence, fmt::format("{}: evidence_sha256 does not match its content: the file was edited", ev_path));
  // value("evidence_version", 0) throws for a string there: test the type before comparing.
  const nlohmann::json version = ev.value("evidence_version", nlohmann::json());
  if (!version.is_number_integer() || version.get<long long>() != kEvidenceVersion)
    fail(kVerifyEvidence, fmt::format("{}: evidence_version {} (this pacheck reads {})", ev_path, json_text(version),
                                      kEvidenceVersion));

  // 2. Every listed file as listed, and nothing else.
  std::map<std::string, std::string> contents;
  for (const nlohmann::json& f : array_field(ev, "files", ev_path)) {
    const std::string name = str_field(f, "name", ev_path + " files[]");
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == ".." || name == kEvidenceFile)
      fail(kVerifyEvidence, fmt::format("{}: files[] names '{}', not a report file of the directory", ev_path, name));
    const std::string path = path_in(dir, name);
    std::string bytes;
    if (!read_dir_file(dir, name, kVerifyFiles, bytes))
      fail(kVerifyFiles, fmt::format("{}: listed in {} but missing", path, kEvidenceFile));
    const std::size_t want_bytes = count_field(f, "bytes", ev_path + " files[" + name + "]");
    if (bytes.size() != want_bytes)
      fail(kVerifyFiles, fmt::format("{}: {} bytes, {} lists {}: changed after the run", path, bytes.size(),
                                     kEvidenceFile, want_bytes));
    const std::string digest = sha256_of(bytes);
    if (digest != str_field(f, "sha256", ev_path + " files[" + name + "]"))
      fail(kVerifyFiles, fmt::format("{}: sha256 {}, {} lists {}: changed after the run", path, short_hash(digest),
                                     kEvidenceFile, short_hash(f["sha256"].get<std::string>())));
    contents[name] = std::move(bytes);
  }
  for (const std::string name : {kResultsLogFile, kRunFile, "report.json"})
    if (!contents.count(name)) fail(kVerifyEvidence, fmt::format("{}: files[] does not list {}", ev_path, name));
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == kEvidenceFile || name == ".pacheck.lock" || contents.count(name)) continue;
    fail(kVerifyFiles, fmt::format("{}: not listed in {}: a file added after the run", entry.path().string(), kEvidenceFile));
  }
  if (ec) fail(kVerifyUsage, fmt::format("'{}': cannot list the directory: {}", dir, ec.message()));

  nlohmann::json run, report;
  try {
    run = nlohmann::json::parse(contents[kRunFile]);
    report = nlohmann::json::parse(contents["report.json"]);
  } catch (const nlohmann::json::exception& e) {
    fail(kVerifyResults, fmt::format("{} or report.json: not valid JSON: {}", path_in(dir, kRunFile), e.what()));
  }
  if (run != field(ev, "run", nlohmann::json::value_t::object, ev_path))
    fail(kVerifyResults, fmt::format("{}: differs from the run {} records", path_in(dir, kRunFile), kEvidenceFile));

  // 3. The suite, as this pacheck resolves it.
  const nlohmann::json& ev_suite = object_field(ev, "suite", ev_path);
  const std::string ev_suite_name = str_field(ev_suite, "name", ev_path + " suite");
  const std::string ev_suite_sha = str_field(ev_suite, "sha256", ev_path + " suite");
  const std::size_t ev_cells = count_field(ev_suite, "cells", ev_path + " suite");
  const std::string suite_arg = req.suite.empty() ? ev_suite_name : req.suite;
  Suite suite;
  try {
    suite = load_suite(suite_arg);
  } catch (const SuiteError& e) {
    if (req.suite.empty())
      fail(kVerifySuite, fmt::format("{} suite.name: '{}' is no suite this pacheck knows ({}); give --suite FILE",
                                     ev_path, ev_suite_name, e.what()));
    fail(kVerifyUsage, fmt::format("--suite: {}", e.what()));
  }
  const SuiteDigest mine = suite_digest(suite);
  if (mine.sha256 != ev_suite_sha || mine.cells != ev_cells)
    fail(kVerifySuite,
         fmt::format("{} suite: the run is of suite '{}' ({} cells, sha256 {}), but {} resolves to '{}' ({} cells, sha256 "
                     "{}) here: not the same cells{}",
                     ev_path, ev_suite_name, ev_cells, short_hash(ev_suite_sha),
                     req.suite.empty() ? "its name" : "--suite " + req.suite, mine.name, mine.cells,
                     short_hash(mine.sha256),
                     req.suite.empty() ? " (another pacheck version, or an edited suite file)" : ""));
  if (run.value("filter", std::string()) != "")
    fail(kVerifySuite, fmt::format("{}: filter '{}': a filtered run leaves cells of the suite out",
                                   path_in(dir, kRunFile), run.value("filter", std::string())));
  if (run.contains("shard") && run["shard"].is_object() && run["shard"].value("count", 1) != 1)
    fail(kVerifySuite, fmt::format("{}: shard {}: one shard of a run holds part of the suite (verify the merged "
                                   "run's shards one by one, or run unsharded)",
                                   path_in(dir, kRunFile), json_text(run["shard"])));

  // 4. One result with a verdict per (kernel, cell) of the suite.
  std::vector<EvidenceKernel> kernels;
  std::vector<std::string> kernel_names;
  for (const nlohmann::json& k : array_field(ev, "kernels", ev_path)) {
    EvidenceKernel ek;
    ek.name = str_field(k, "name", ev_path + " kernels[]");
    ek.negative_control = bool_field(k, "negative_control", ev_path + " kernels[]");
    for (const nlohmann::json& l : array_field(k, "layouts", ev_path + " kernels[]")) {
      try {
        ek.layouts.push_back(parse_layout(l.is_string() ? l.get<std::string>() : std::string()));
      } catch (const std::exception&) {
        fail(kVerifyEvidence, fmt::format("{} kernels[{}].layouts: {} is not a layout", ev_path, ek.name, json_text(l)));
      }
    }
    kernel_names.push_back(ek.name);
    kernels.push_back(std::move(ek));
  }
  if (!run.contains("kernels") || run["kernels"] != nlohmann::json(kernel_names))
    fail(kVerifyResults, fmt::format("{}: its kernels are not the kernels {} lists", path_in(dir, kRunFile), kEvidenceFile));
  const std::string results_path = path_in(dir, kResultsLogFile);
  ResultsLog log;
  try {
    log = parse_results_jsonl(contents[kResultsLogFile], results_path);
  } catch (const ReportError& e) {
    fail(kVerifyResults, e.what());
  }
  if (log.torn_tail) fail(kVerifyResults, fmt::format("{}: its last line is cut short", results_path));
  const auto planned = planned_keys(suite, kernels);
  std::unordered_map<std::string, int> line_of;
  for (std::size_t i = 0; i < log.results.size(); ++i) {
    const CellResult& r = log.results[i];
    const std::string key = result_key(r.kernel, r.cell_id);
    if (!planned.count(key))
      fail(kVerifyResults, fmt::format("{}:{}: {} '{}' is not a cell of suite '{}' for the run's kernels: a result added",
                                       results_path, log.line_numbers[i], r.kernel, r.cell_id, suite.name));
    const auto [it, fresh] = line_of.emplace(key, log.line_numbers[i]);
    if (!fresh)
      fail(kVerifyResults, fmt::format("{}:{}: a second result for {} '{}' (the first is line {})", results_path,
                                       log.line_numbers[i], r.kernel, r.cell_id, it->second));
  }
  if (line_of.size() != planned.size()) {
    for (std::size_t k = 0; k < kernels.size(); ++k)
      for (const SuiteCell& c : suite.cells) {
        const std::string id = c.for_layouts(kernels[k].layouts).id();
        if (!line_of.count(result_key(kernels[k].name, id)))
          fail(kVerifyResults, fmt::format("{}: no result for {} '{}' ({} of {} results missing): cells skipped or "
                                           "removed",
                                           results_path, kernels[k].name, id, planned.size() - line_of.size(),
                                           planned.size()));
      }
  }
  const std::size_t ev_results = count_field(ev, "results", ev_path);
  if (ev_results != log.results.size())
    fail(kVerifyResults, fmt::format("{} results: {}, but {} holds {}", ev_path, ev_results, results_path, log.results.size()));
  int passed = 0, failed = 0, declined = 0, caught = 0, missed = 0, not_run = 0;
  std::string first_failed;  // "KERNEL 'CELL' (VERDICT)" of the first failed result, for --require-pass
  struct ControlCount {
    int planted = 0, caught = 0;
    std::set<std::string> devices;
  };
  std::map<std::string, ControlCount> controls;
  for (const CellResult& r : log.results) {
    const EvidenceKernel& k = kernels[planned.at(result_key(r.kernel, r.cell_id))];
    switch (cell_outcome(r, k.negative_control)) {
      case CellOutcome::passed: ++passed; break;
      case CellOutcome::failed:
        ++failed;
        if (first_failed.empty()) first_failed = fmt::format("{} '{}' ({})", r.kernel, r.cell_id, verdict_name(r.verdict));
        break;
      case CellOutcome::declined: ++declined; break;
      case CellOutcome::caught: ++caught; break;
      case CellOutcome::missed: ++missed; break;
      case CellOutcome::not_run:
        // Only a control's cell outside its expected failures may be left unrun: a not_run planted cell would
        // hide a miss, and an ordinary kernel runs every cell it supports.
        if (!k.negative_control || r.expected_fail)
          fail(kVerifyResults,
               fmt::format("{}: {} '{}' is not_run, but {}: a cell that had to run was left out", results_path,
                           r.kernel, r.cell_id,
                           k.negative_control ? "it is one of the control's planted cells" : "the kernel is no negative control"));
        ++not_run;
        break;
    }
    if (k.negative_control) {
      // Planted = caught + missed, as the run's summary counts them (report.json, evidence.json controls[]): a
      // faulted cell the control declined was never run, so it is no planted cell it could have missed.
      ControlCount& c = controls[k.name];
      const CellOutcome o = cell_outcome(r, true);
      if (o == CellOutcome::caught || o == CellOutcome::missed) ++c.planted;
      if (o == CellOutcome::caught) {
        ++c.caught;
        if (!r.device.empty()) c.devices.insert(r.device);
      }
    }
  }
  const nlohmann::json& summary = object_field(ev, "summary", ev_path);
  const nlohmann::json& rsum = object_field(report, "summary", "report.json");
  for (const auto& [name, value] : std::vector<std::pair<const char*, int>>{
           {"passed", passed}, {"failed", failed}, {"declined", declined}, {"caught", caught}}) {
    if (summary.value(name, -1) != value)
      fail(kVerifyResults, fmt::format("{} summary.{}: {}, but {} counts {}", ev_path, name, json_text(summary.value(name, nlohmann::json())),
                                       results_path, value));
    if (rsum.value(name, -1) != value)
      fail(kVerifyResults, fmt::format("{} summary.{}: {}, but {} counts {}", path_in(dir, "report.json"), name,
                                       json_text(rsum.value(name, nlohmann::json())), results_path, value));
  }
  // not_run: in reports since negative controls run only where their fault can show; an earlier report has
  // no such field and no such result.
  for (const auto& [json, where] : {std::pair{&summary, ev_path}, std::pair{&rsum, path_in(dir, "report.json")}})
    if (json->value("not_run", 0) != not_run)
      fail(kVerifyResults, fmt::format("{} summary.not_run: {}, but {} counts {}", where,
                                       json_text(json->value("not_run", nlohmann::json(0))), results_path, not_run));

  // 5. The plugin.
  const nlohmann::json& plugins = array_field(ev, "plugins", ev_path);
  std::string plugin_text;
  if (!req.plugin.empty()) {
    std::string lib;
    try {
      lib = sha256_of(read_regular_file(req.plugin, ReadLimit{kMaxPluginBytes, "a plugin library"}));
    } catch (const FileError& e) {
      fail(kVerifyUsage, fmt::format("--plugin: {}", e.what()));
    }
    std::string theirs;
    bool match = false;
    for (const nlohmann::json& p : plugins) {
      const std::string sha = str_field(p, "sha256", ev_path + " plugins[]");
      theirs += fmt::format("{}{} (sha256 {})", theirs.empty() ? "" : ", ", str_field(p, "path", ev_path + " plugins[]"), short_hash(sha));
      match = match || sha == lib;
    }
    if (plugins.empty())
      fail(kVerifyPlugin, fmt::format("--plugin {}: the run loaded no plugin ({} plugins is empty): its results are "
                                      "not of this library",
                                      req.plugin, ev_path));
    if (!match)
      fail(kVerifyPlugin, fmt::format("--plugin {}: sha256 {}, but the run loaded {}: not the library that ran",
                                      req.plugin, short_hash(lib), theirs));
    plugin_text = fmt::format("plugin sha256 {} (= --plugin)", short_hash(lib));
  } else if (!plugins.empty()) {
    plugin_text = fmt::format("plugin sha256 {} (not checked: no --plugin)",
                              short_hash(str_field(plugins[0], "sha256", ev_path + " plugins[]")));
  } else {
    plugin_text = "no plugin";
  }

  // 6. Negative controls caught on the run's device.
  const nlohmann::json& device = object_field(ev, "device", ev_path);
  const std::string spec = str_field(device, "spec", ev_path + " device");
  const std::string description = str_field(device, "description", ev_path + " device");
  if (run.value("device", std::string()) != spec)
    fail(kVerifyResults, fmt::format("{}: device {} is not {}'s device '{}'", path_in(dir, kRunFile),
                                     json_text(run.value("device", nlohmann::json())), kEvidenceFile, spec));
  int planted = 0, caught_on_device = 0;
  bool any_on_device = false;
  for (const auto& [name, c] : controls) {
    if (c.caught < c.planted)
      fail(kVerifyControls, fmt::format("{}: negative control {} caught {} of its {} planted cells: the instrument is "
                                        "blind there",
                                        results_path, name, c.caught, c.planted));
    planted += c.planted;
    for (const std::string& d : c.devices) any_on_device = any_on_device || device_kind(d) == device_kind(spec);
    if (device_kind(spec) == "cpu" && c.caught > 0) any_on_device = true;  // CPU results may not name a device
    caught_on_device += c.caught;
  }
  if (!any_on_device)
    fail(kVerifyControls,
         fmt::format("{}: no negative control was caught on the run's device {}{}: nothing shows the checks can fail "
                     "there (run with --with-controls)",
                     results_path, spec, controls.empty() ? " (none ran)" : ""));

  // 7. The self-test.
  if (!bool_field(object_field(ev, "selftest", ev_path), "passed", ev_path + " selftest") ||
      !report.contains("selftest") || !report["selftest"].is_object() || report["selftest"].value("passed", false) != true)
    fail(kVerifySelftest, fmt::format("{} selftest: the comparator self-test failed: the run's verdicts cannot be trusted",
                                      path_in(dir, "report.json")));

  // 8. The device the caller expects.
  if (!req.device_expect.empty() && description.find(req.device_expect) == std::string::npos)
    fail(kVerifyDevice, fmt::format("{} device.description: '{}' does not contain --device-expect '{}'", ev_path,
                                    description, req.device_expect));

  // 9. The kernels' own result, when the caller gates on it (the evidence is sound by now).
  if (req.require_pass && failed > 0)
    fail(kVerifyFailed, fmt::format("{}: the evidence verifies, but the run failed {} cell{} (--require-pass); the "
                                    "first: {}",
                                    results_path, failed, failed == 1 ? "" : "s", first_failed));

  const nlohmann::json& ver = object_field(ev, "pacheck", ev_path);
  VerifyOutcome out;
  out.line = fmt::format(
      "verified: suite {} ({} cells, sha256 {}; {} results), {}, on {} ({}), pacheck {} ({}): {} failed, controls "
      "{}/{} caught, self-test passed{}",
      suite.name, mine.cells, short_hash(mine.sha256), log.results.size(), plugin_text,
      description.empty() ? "an undescribed device" : description, spec, ver.value("version", std::string("?")),
      ver.value("git_commit", std::string("?")), failed + missed, caught_on_device, planted,
      ev.value("judge_flags", std::string()).empty() ? "" : ", judged with " + ev.value("judge_flags", std::string()));
  return out;
}

}  // namespace

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
