// The verify stage: `pacheck verify DIR` checks a report directory someone else produced (on hardware the
// kernel author may not have) against the evidence.json its run wrote (verify/evidence.hpp,
// docs/VALIDATING.md). It comes after report/: it reads what the report stage wrote, and nothing of the
// pipeline reads it.
//
// Quick start: a new check
//  Write it as one function in verify/verify.cpp that throws its failure (fail(code, message)), call it from
//  verify() in its place in the order below (the first failing check decides the outcome), give it one of
//  the VerifyExit classes (a new class: its enumerator here and its row in docs/VALIDATING.md), and add a
//  tampering test in tests/cli/test_verify_cli.py.
#pragma once

#include <optional>
#include <string>

#include "suites/suite.hpp"

namespace pacheck {

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

/// The export a `pacheck score` judged, as `verify --cases DIR` names it: the author's copy of the case files.
/// The command line reads it (interop/ reads case files, and comes after this stage).
struct ScoredExport {
  std::string dir;              ///< --cases DIR, for messages
  std::string manifest_sha256;  ///< of DIR/manifest.json's bytes: the score's run.json records the scored one's
  Suite suite;                  ///< the manifest's cells in its order, each layout fixed by the export
};

/// What `pacheck verify DIR` was asked to check.
struct VerifyRequest {
  std::string dir;
  std::string suite;          ///< --suite: "" = the suite the evidence names, resolved by this pacheck
  std::string plugin;         ///< --plugin LIB: "" = the plugin hash is reported, not checked
  std::string device_expect;  ///< --device-expect TEXT: "" = not checked
  bool require_pass = false;  ///< --require-pass: a run with a failed cell is exit 18 (a missed control is 15)
  /// --cases DIR: the evidence is of `pacheck score`, whose cells are those of this export (its manifest's
  /// SHA-256 must be the scored one's) in place of a suite's. Required for a score's evidence, refused for a run's.
  std::optional<ScoredExport> cases;
};

/// verify's answer: the exit code and one line. Verified: "verified: suite gate (271 cells, sha256 1a2b..;
/// 1,626 results), plugin sha256 ab12.. (= --plugin), on NVIDIA H200 ... (cuda:0): 0 failed, controls 12/12
/// caught, self-test passed". Otherwise "verify: FILE or FIELD: REASON" with the code of its class.
struct VerifyOutcome {
  int code = kVerified;
  std::string line;
};

/// Checks the report directory `req.dir` against its evidence.json, in this order: the manifest's own
/// digest; every listed file's size and SHA-256 and no unlisted file (the lock file aside); the suite's
/// digest and cell count against the suite as this pacheck resolves it, and no --filter or --shard; one
/// result with a verdict per (kernel, cell) of the suite in results.jsonl, run.json agreeing, counts
/// agreeing with report.json; the plugin's SHA-256 against --plugin; the negative controls caught on the
/// run's device kind, none missed; the self-test; --device-expect; with --require-pass, no failed cell. The
/// first failing check decides the outcome. Inputs are read with core/files.hpp's read_regular_file
/// (capped, no FIFO, no symbolic link). Never throws.
VerifyOutcome verify_report_dir(const VerifyRequest& req);

}  // namespace pacheck
