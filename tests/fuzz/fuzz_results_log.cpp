// libFuzzer target for the results.jsonl reader (report/results_log.hpp parse_results_jsonl, what
// `--resume` reads): any text must either read into complete lines whose results write back (results_line) and
// read again to the same line, or throw ReportError -- never crash, overflow (a number read into an int)
// or throw anything else.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "report/report.hpp"
#include "report/results_log.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  pacheck::ResultsLog log;
  try {
    log = pacheck::parse_results_jsonl(text, "results.jsonl");
  } catch (const pacheck::ReportError&) {
    return 0;  // the documented error
  }
  if (log.results.size() != log.lines.size() || log.results.size() != log.line_numbers.size()) std::abort();
  if (log.valid_bytes > size) std::abort();
  if (log.torn_tail != (text.find_last_of('\n') + 1 != size)) std::abort();
  for (const auto& r : log.results) {
    // What was read writes a line (as a run appends it) that reads back to the same line; outside the try,
    // so a ReportError here fails the target too.
    const std::string line = pacheck::results_line(r);
    const pacheck::ResultsLog again = pacheck::parse_results_jsonl(line, "again.jsonl");
    if (again.results.size() != 1 || again.torn_tail || pacheck::results_line(again.results[0]) != line) std::abort();
  }
  return 0;
}
