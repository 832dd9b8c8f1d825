#include "report/report_dir.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "report/json.hpp"
#include "report/results_log.hpp"

namespace pacheck {

namespace fs = std::filesystem;

namespace {

std::string path_in(const std::string& dir, const char* name) { return (fs::path(dir) / name).string(); }

/// Every format of the table with a file in a report directory, the finished-run marker last.
std::vector<const FormatInfo*> file_formats_in_write_order() {
  std::vector<const FormatInfo*> out;
  const FormatInfo* marker = nullptr;
  for (const FormatInfo& f : format_table()) {
    if (!f.file) continue;
    if (std::string(f.name) == kFinishedFormat) marker = &f;
    else out.push_back(&f);
  }
  if (marker) out.push_back(marker);
  return out;
}

int open_results(const std::string& dir, bool truncate) {
  const std::string path = path_in(dir, kResultsLogFile);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0644);
  if (fd < 0) throw ReportError(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  return fd;
}

/// A directory holds report.json only once its run finished: remove the final reports of an earlier run
/// before results of a new (or resumed) one are appended.
void remove_final_reports(const std::string& dir) {
  for (const FormatInfo& f : format_table()) {
    if (!f.file) continue;
    std::error_code ec;
    fs::remove(path_in(dir, f.file), ec);
    if (ec) throw ReportError(fmt::format("cannot remove '{}': {}", path_in(dir, f.file), ec.message()));
  }
}

void write_final_reports(const std::string& dir, const RunSummary& s, const ReportMeta& meta) {
  for (const FormatInfo* f : file_formats_in_write_order())
    write_atomically(path_in(dir, f->file), render_format(f->name, s, meta));
}

}  // namespace

void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw ReportError(fmt::format("cannot write '{}'", tmp));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw ReportError(fmt::format("cannot rename '{}' to '{}': {}", tmp, path, ec.message()));
}

std::string format_files_prose() {
  std::vector<std::string> files;
  for (const FormatInfo& f : format_table())
    if (f.file) files.push_back(f.file);
  std::string out;
  for (std::size_t i = 0; i < files.size(); ++i)
    out += (i == 0 ? "" : i + 1 == files.size() ? " and " : ", ") + files[i];
  return out;
}

std::string reports_line(const std::string& dir) {
  std::string out = fmt::format("reports in {}:", dir);
  auto add = [&](const char* file) {
    if (fs::exists(fs::path(dir) / file)) out += std::string(" ") + file;
  };
  add(kResultsLogFile);
  for (const FormatInfo& f : format_table())
    if (f.file) add(f.file);
  return out;
}

ReportDir::ReportDir(std::string dir, int fd) : dir_(std::move(dir)), fd_(fd) {}
ReportDir::ReportDir(ReportDir&& o) noexcept
    : dir_(std::move(o.dir_)),
      fd_(std::exchange(o.fd_, -1)),
      previous_(std::move(o.previous_)),
      append_error_(std::move(o.append_error_)) {}
ReportDir& ReportDir::operator=(ReportDir&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    dir_ = std::move(o.dir_);
    fd_ = std::exchange(o.fd_, -1);
    previous_ = std::move(o.previous_);
    append_error_ = std::move(o.append_error_);
  }
  return *this;
}
ReportDir::~ReportDir() {
  if (fd_ >= 0) ::close(fd_);
}

ReportDir ReportDir::start(const std::string& dir, const nlohmann::json& run) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) throw ReportError(fmt::format("--report-dir: cannot create directory '{}'", dir));
  remove_final_reports(dir);
  const int fd = open_results(dir, /*truncate=*/true);
  ReportDir rd(dir, fd);
  write_atomically(path_in(dir, kRunFile), json_text(run, 1) + "\n");
  return rd;
}

ReportDir ReportDir::resume(const std::string& dir, const nlohmann::json& run) {
  const std::string run_path = path_in(dir, kRunFile);
  if (!fs::exists(run_path))
    throw ReportError(
        fmt::format("--resume: '{}' has no {}: no run to resume there (start one with --report-dir)", dir, kRunFile));
  const nlohmann::json before = read_json_file(run_path);
  if (before != run) {
    std::vector<std::string> diff;
    for (const auto& [k, v] : run.items())
      if (!before.contains(k) || before[k] != v)
        diff.push_back(
            fmt::format("{} was {}, now {}", k, before.contains(k) ? json_text(before[k]) : "absent", json_text(v)));
    for (const auto& [k, v] : before.items())
      if (!run.contains(k)) diff.push_back(fmt::format("{} was {}, now absent", k, json_text(v)));
    std::string why;
    for (const auto& d : diff) why += (why.empty() ? "" : "; ") + d;
    throw ReportError(fmt::format(
        "--resume: '{}' holds a different run ({}); give the same suite, kernels, device and options", dir, why));
  }
  const std::string results = path_in(dir, kResultsLogFile);
  ResultsLog log = read_results_jsonl(results);
  if (log.torn_tail) {
    // Cut the torn line off so the next append starts on a line of its own.
    std::error_code ec;
    fs::resize_file(results, log.valid_bytes, ec);
    if (ec) throw ReportError(fmt::format("cannot truncate '{}': {}", results, ec.message()));
  }
  remove_final_reports(dir);
  ReportDir rd(dir, open_results(dir, /*truncate=*/false));
  rd.previous_ = std::move(log.results);
  return rd;
}

void ReportDir::append(const CellResult& r) {
  if (!append_error_.empty()) return;
  const std::string line = results_line(r);
  std::size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      append_error_ = fmt::format("cannot append to '{}': {}", path_in(dir_, kResultsLogFile), std::strerror(errno));
      return;
    }
    off += static_cast<std::size_t>(n);
  }
}

void ReportDir::finish(const RunSummary& s, const ReportMeta& meta) {
  if (!append_error_.empty()) throw ReportError(append_error_);
  write_final_reports(dir_, s, meta);
}

void write_reports(const std::string& dir, const RunSummary& s, const ReportMeta& meta) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) throw ReportError(fmt::format("cannot create directory '{}'", dir));
  std::string lines;
  for (const auto& r : s.results) lines += results_line(r);
  write_atomically(path_in(dir, kResultsLogFile), lines);
  write_atomically(path_in(dir, kRunFile), json_text(meta.run, 1) + "\n");
  write_final_reports(dir, s, meta);
}

}  // namespace pacheck
