#include "verify/evidence.hpp"

#include <fmt/format.h>

#include <set>

#include "core/digest.hpp"
#include "report/json.hpp"

namespace pacheck {

std::vector<std::string> evidence_file_names() {
  std::vector<std::string> out{kResultsLogFile, kRunFile};
  for (const FormatInfo& f : format_table())
    if (f.file) out.emplace_back(f.file);
  return out;
}

namespace {

/// files[]: each report file of `dir` the evidence lists, with its size and SHA-256.
nlohmann::json listed_files(const std::string& dir) {
  nlohmann::json files = nlohmann::json::array();
  for (const std::string& name : evidence_file_names()) {
    std::string bytes;
    try {
      bytes = read_regular_file(path_in(dir, name), kEvidenceReadLimit, Symlinks::refuse);
    } catch (const FileError& e) {
      throw ReportError(fmt::format("{}: cannot read {}", kEvidenceFile, e.what()));
    }
    files.push_back({{"name", name}, {"bytes", bytes.size()}, {"sha256", sha256_of(bytes)}});
  }
  return files;
}

/// kernels[]: each kernel of the run with its layouts, whether it is a negative control and whether it is an
/// MLA kernel (takes_mla: the cells of a mixed suite it was paired with).
nlohmann::json listed_kernels(const EvidenceInputs& in) {
  nlohmann::json kernels = nlohmann::json::array();
  for (const EvidenceKernel& k : in.kernels) {
    nlohmann::json layouts = nlohmann::json::array();
    for (Layout l : k.layouts) layouts.push_back(std::string(layout_name(l)));
    kernels.push_back({{"name", k.name}, {"layouts", layouts}, {"negative_control", k.negative_control},
                       {"takes_mla", k.takes_mla}});
  }
  return kernels;
}

/// controls[]: each negative control's outcome, planted and caught cells, and the devices its results name.
nlohmann::json listed_controls(const RunSummary& s) {
  nlohmann::json controls = nlohmann::json::array();
  for (const KernelSummary& k : s.kernels) {
    if (k.control == ControlOutcome::not_control) continue;
    std::set<std::string> devices;
    for (const CellResult& r : s.results)
      if (r.kernel == k.kernel && !r.device.empty()) devices.insert(r.device);
    controls.push_back({{"kernel", k.kernel},
                        {"outcome", std::string(control_outcome_name(k.control))},
                        {"planted", k.caught + k.missed},
                        {"caught", k.caught},
                        {"not_run", k.not_run},
                        {"devices", std::vector<std::string>(devices.begin(), devices.end())}});
  }
  return controls;
}

}  // namespace

nlohmann::json evidence_json(const std::string& dir, const RunSummary& s, const ReportMeta& meta,
                             const EvidenceInputs& in) {
  const nlohmann::json files = listed_files(dir);
  nlohmann::json plugins = nlohmann::json::array();
  for (const auto& p : meta.environment.plugins) plugins.push_back({{"path", p.path}, {"sha256", p.sha256}});
  int missed = 0;
  for (const KernelSummary& k : s.kernels) missed += k.missed;
  const Environment& env = meta.environment;
  nlohmann::json j = {
      {"evidence_version", kEvidenceVersion},
      {"pacheck", {{"version", env.pacheck_version}, {"git_commit", env.git_commit}}},
      {"suite", {{"name", in.suite.name}, {"sha256", in.suite.sha256}, {"cells", in.suite.cells}}},
      {"results", s.results.size()},
      {"kernels", listed_kernels(in)},
      {"summary",
       {{"passed", s.passed},
        {"failed", s.failed},
        {"declined", s.declined},
        {"caught", s.caught},
        {"missed", missed},
        {"not_run", s.not_run}}},
      {"controls", listed_controls(s)},
      {"selftest", {{"passed", s.selftest.passed}}},
      {"judge_flags", s.judge_flags},
      {"device",
       {{"spec", env.device},
        {"description", env.device_description},
        {"name", env.device_name},
        {"driver", env.driver},
        {"runtime", env.runtime}}},
      {"plugins", plugins},
      {"run", meta.run},
      {"files", files}};
  j["evidence_sha256"] = sha256_of(json_text(j, 1));
  return j;
}

void write_evidence(const std::string& dir, const RunSummary& s, const ReportMeta& meta, const EvidenceInputs& in) {
  const nlohmann::json j = evidence_json(dir, s, meta, in);
  try {
    write_file_atomically(path_in(dir, kEvidenceFile), json_text(j, 1) + "\n");
  } catch (const FileError& e) {
    throw ReportError(fmt::format("cannot write {}", e.what()));
  }
}

}  // namespace pacheck
