// evidence.json: the manifest a finished `pacheck run --report-dir` writes last, and `pacheck verify`, which
// checks a report directory someone else produced against it (issue 17 item 6, docs/VALIDATING.md).
//
// The manifest lists every report file of the directory with its size and SHA-256, the suite (name, a
// SHA-256 of its resolved cell list, its cell count) and the number of results, each kernel with the
// layouts its cells ran in and whether it is a negative control, the plugins and their SHA-256, the device
// description, each negative control's caught cells and devices, the comparator self-test, pacheck's
// version and commit and the judge flags; then a SHA-256 of all of that (`evidence_sha256`), so an edit of
// the manifest itself is seen. Hashes prove integrity and consistency, not authenticity: whoever holds the
// directory can rerun with another kernel and write a matching manifest; only verify's --plugin check and
// the negative controls catch that. Nothing is signed.
//
// Quick start: a new field in the evidence
//  Add it in evidence_json() (report/evidence.cpp) and, when verify checks it, a check in verify_report_dir()
//  (report/verify.cpp, apart so tests/fuzz/fuzz_evidence_json.cpp compiles it alone) with one of the
//  VerifyExit classes below (docs/VALIDATING.md lists them), and a tampering test in
//  tests/cli/test_verify_cli.py.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/case.hpp"
#include "core/files.hpp"
#include "judge/summary.hpp"
#include "report/report.hpp"
#include "suites/suite.hpp"

namespace pacheck {

/// The manifest's file name in a report directory (not manifest.json: that is an export's case list).
inline constexpr const char* kEvidenceFile = "evidence.json";
/// The evidence_version evidence_json() writes and verify reads.
inline constexpr int kEvidenceVersion = 1;
/// The most any file of a report directory may hold when the evidence is written or verify reads it back.
inline constexpr ReadLimit kEvidenceReadLimit{std::uint64_t{1} << 30, "a report-directory file"};

/// What identifies a suite's cells, whichever file or include they came from.
struct SuiteDigest {
  std::string name;    ///< Suite::name
  std::string sha256;  ///< of "ID\tnative|fixed\n" per cell in suite order (64 lower-case hex digits)
  std::size_t cells = 0;
};
/// The digest of `suite`'s resolved cell list: each SuiteCell's Cell::id() (its own layout) and whether it
/// is native-layout, in order. Two suites with the same cells in the same order have the same digest.
SuiteDigest suite_digest(const Suite& suite);

/// A kernel of the run as the evidence records it: enough to recompute its cell ids from the suite.
struct EvidenceKernel {
  std::string name;
  std::vector<Layout> layouts;  ///< Kernel::layouts(), preferred first: the layout its native cells ran in
  bool negative_control = false;
};

/// What a run knows that its summary does not: the suite and the kernels it ran.
struct EvidenceInputs {
  SuiteDigest suite;
  std::vector<EvidenceKernel> kernels;
};

/// The files of a report directory the evidence lists, in this order: results.jsonl, run.json, then every
/// format's file in format_table() order (report.json, junit.xml, summary.md, report.html).
std::vector<std::string> evidence_file_names();

/// The manifest of the finished run whose reports are in `dir` (each listed file is read to hash it),
/// `evidence_sha256` included. Throws ReportError when a listed file cannot be read.
nlohmann::json evidence_json(const std::string& dir, const RunSummary& s, const ReportMeta& meta,
                             const EvidenceInputs& in);
/// Writes evidence_json() to DIR/evidence.json through a temporary file renamed into place. Call after every
/// other report file is written. Throws ReportError.
void write_evidence(const std::string& dir, const RunSummary& s, const ReportMeta& meta, const EvidenceInputs& in);

/// Exit codes of `pacheck verify`, one per class of failure (docs/VALIDATING.md). 2 is a usage or input
/// error of the verify command itself (no such directory, an unknown --suite, an unreadable --plugin).
enum VerifyExit : int {
  kVerified = 0,         ///< every check passed
  kVerifyUsage = 2,      ///< bad command line: DIR is not a directory, --suite or --plugin cannot be read
  kVerifyEvidence = 10,  ///< evidence.json missing, unreadable, malformed, lacking a field, or edited
  kVerifyFiles = 11,     ///< a listed file missing, of another size or hash; a file the evidence does not list
  kVerifySuite = 12,     ///< the run's suite is not the suite this pacheck resolves, or it ran a filter/shard
  kVerifyResults = 13,   ///< results.jsonl or run.json do not hold exactly the suite's cells, one verdict each
  kVerifyPlugin = 14,    ///< --plugin LIB's SHA-256 is not the run's plugin's (or the run loaded none)
  kVerifyControls = 15,  ///< no negative control was caught on the run's device, or one missed
  kVerifySelftest = 16,  ///< the comparator self-test failed
  kVerifyDevice = 17,    ///< --device-expect TEXT is not in the run's device description
  kVerifyFailed = 18,    ///< --require-pass: the evidence verifies, but the run's kernels failed some cell
};

/// What `pacheck verify DIR` was asked to check.
struct VerifyRequest {
  std::string dir;
  std::string suite;          ///< --suite: "" = the suite the evidence names, resolved by this pacheck
  std::string plugin;         ///< --plugin LIB: "" = the plugin hash is reported, not checked
  std::string device_expect;  ///< --device-expect TEXT: "" = not checked
  bool require_pass = false;  ///< --require-pass: a run with a failed cell is exit 18 (a missed control is 15)
};

/// verify's answer: the exit code and one line. Verified: "verified: suite gate (271 cells, sha256 1a2b..;
/// 1,626 results), plugin sha256 ab12.. (= --plugin), on NVIDIA H200 ... (cuda:0): 0 failed, controls 12/12
/// caught, self-test passed". Otherwise "verify: FILE or FIELD: REASON" with the code of its class.
struct VerifyOutcome {
  int code = kVerified;
  std::string line;
};

/// Checks the report directory `req.dir` against its evidence.json: the manifest's own digest; every listed
/// file's size and SHA-256 and no unlisted file (the lock file aside); the suite's digest and cell count
/// against the suite as this pacheck resolves it, and no --filter or --shard; one result with a verdict
/// per (kernel, cell) of the suite in results.jsonl, run.json agreeing, counts agreeing with report.json;
/// the plugin's SHA-256 against --plugin; the negative controls caught on the run's device kind, none
/// missed; the self-test; --device-expect; with --require-pass, no failed cell. The first failing check decides the outcome. Inputs are read
/// with core/files.hpp's read_regular_file (capped, no FIFO, no symbolic link). Never throws.
VerifyOutcome verify_report_dir(const VerifyRequest& req);

}  // namespace pacheck
