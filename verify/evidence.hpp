// evidence.json: the manifest a finished `pacheck run --report-dir` writes last, after ReportDir::finish
// wrote the reports it lists (docs/VALIDATING.md). verify/verify.hpp checks a directory against it.
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
//  Add it in evidence_json() and, when verify checks it, a check function in verify/verify.cpp, called in
//  order from verify_report_dir(), with one of the VerifyExit classes (docs/VALIDATING.md lists them), and a
//  tampering test in tests/cli/test_verify_cli.py.
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
#include "report/report_dir.hpp"  // kEvidenceFile: the report directory removes an earlier run's manifest
#include "suites/suite.hpp"

namespace pacheck {

/// The manifest's layout version: verify reads this one only.
inline constexpr int kEvidenceVersion = 1;
/// The most any file of a report directory may hold when the evidence hashes it or verify reads it back.
inline constexpr ReadLimit kEvidenceReadLimit{std::uint64_t{1} << 30, "a report-directory file"};

/// What identifies a suite's cells, whichever file or include they came from.
struct SuiteDigest {
  std::string name;    ///< Suite::name
  std::string sha256;  ///< of "ID\tnative|fixed\n" per cell in suite order (64 lower-case hex digits)
  std::size_t cells = 0;
};
/// The digest of `suite`'s resolved cell list: each SuiteCell's Cell::id() (its own layout) and whether it
/// is native-layout, in order. Two suites with the same cells in the same order have the same digest.
/// Defined in verify/verify.cpp, with the reader that recomputes it (the fuzz target compiles that alone).
SuiteDigest suite_digest(const Suite& suite);

/// A kernel of the run as the evidence records it: enough to recompute its cell ids from the suite.
struct EvidenceKernel {
  std::string name;
  std::vector<Layout> layouts;  ///< Kernel::layouts(), preferred first: the layout its native cells ran in
  bool negative_control = false;
  bool takes_mla = false;  ///< Kernel::takes_mla: which of a mixed suite's cells it ran (suites' pairs_with_kind)
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
/// other report file is written (ReportDir::finish), while the run still holds the directory's lock.
/// Throws ReportError.
void write_evidence(const std::string& dir, const RunSummary& s, const ReportMeta& meta, const EvidenceInputs& in);

}  // namespace pacheck
