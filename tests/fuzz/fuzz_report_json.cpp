// libFuzzer target for the report.json reader (report/report_read.hpp: parse_json_text, then
// summary_from_report: what `pacheck report` and `pacheck merge` read): any text must either read into a run
// summary whose results write back (report_json's "results" through to_json) and read again to the same
// results, or throw ReportError -- never crash, overflow (a number read into an int) or throw anything else
// (a json::exception escaping would be a message without the file).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "report/report_read.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::pair<pacheck::RunSummary, pacheck::ReportMeta> got;
  try {
    got = pacheck::summary_from_report(pacheck::parse_json_text(text, "report.json"), "report.json");
  } catch (const pacheck::ReportError&) {
    return 0;  // the documented error
  }
  // What was read is judged again by summarize(): its counts cover every result once.
  const pacheck::RunSummary& s = got.first;
  const std::size_t counted = static_cast<std::size_t>(s.passed) + static_cast<std::size_t>(s.failed) +
                              static_cast<std::size_t>(s.declined) + static_cast<std::size_t>(s.caught) +
                              static_cast<std::size_t>(s.not_run);
  std::size_t missed = 0;
  for (const auto& k : s.kernels) missed += static_cast<std::size_t>(k.missed);
  if (counted + missed != s.results.size()) std::abort();
  // Each result writes back (results.jsonl's and report.json's form) and reads again to itself; outside the
  // try, so a ReportError or json::exception here fails the target too.
  for (const auto& r : s.results) {
    const nlohmann::json j = pacheck::to_json(r);
    if (pacheck::to_json(pacheck::cell_result_from_json(j)) != j) std::abort();
  }
  return 0;
}
