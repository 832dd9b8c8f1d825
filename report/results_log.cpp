#include "report/results_log.hpp"

#include <fmt/format.h>

#include <filesystem>

#include "core/files.hpp"
#include "report/json.hpp"

namespace pacheck {

std::string results_line(const CellResult& r) { return json_text(to_json(r)) + "\n"; }

ResultsLog read_results_jsonl(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec))) return {};
  std::string text;
  try {
    // Never through a link: results.jsonl is appended to next, and must be the report directory's own file.
    text = read_regular_file(path, kResultsLogLimit, Symlinks::refuse);
  } catch (const FileError& e) {
    throw ReportError(e.what());
  }
  return parse_results_jsonl(text, path);
}

ResultsLog parse_results_jsonl(const std::string& text, const std::string& path) {
  ResultsLog log;
  std::size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) {
      log.torn_tail = true;  // cut short by a kill: the cell reruns
      break;
    }
    ++line_no;
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty()) {
      log.valid_bytes = pos;
      continue;
    }
    try {
      log.results.push_back(cell_result_from_json(nlohmann::json::parse(line)));
    } catch (const std::exception& e) {
      throw ReportError(fmt::format("{}:{}: malformed result line: {}", path, line_no, e.what()));
    }
    log.line_numbers.push_back(line_no);
    log.lines.push_back(line + "\n");
    log.valid_bytes = pos;
  }
  return log;
}

}  // namespace pacheck
