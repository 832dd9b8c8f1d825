#include "report/report_dir.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <unordered_map>
#include <utility>

#include "core/files.hpp"
#include "report/json.hpp"
#include "report/results_log.hpp"

namespace pacheck {

namespace fs = std::filesystem;


namespace {

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

int open_results(const std::string& dir, bool fresh) {
  try {
    return open_for_append(path_in(dir, kResultsLogFile), fresh);
  } catch (const FileError& e) {
    throw ReportError(fmt::format("cannot open {}", e.what()));
  }
}

/// A directory holds report.json only once its run finished: remove the final reports of an earlier run
/// before results of a new (or resumed) one are appended.
void remove_final_reports(const std::string& dir) {
  std::vector<const char*> files{kEvidenceFile};  // first: an evidence.json never outlives the files it lists
  for (const FormatInfo& f : format_table())
    if (f.file) files.push_back(f.file);
  for (const char* file : files) {
    std::error_code ec;
    fs::remove(path_in(dir, file), ec);
    if (ec) throw ReportError(fmt::format("cannot remove '{}': {}", path_in(dir, file), ec.message()));
  }
}

void write_final_reports(const std::string& dir, const RunSummary& s, const ReportMeta& meta) {
  for (const FormatInfo* f : file_formats_in_write_order())
    write_atomically(path_in(dir, f->file), render_format(f->name, s, meta));
}

}  // namespace

void write_atomically(const std::string& path, const std::string& text) {
  try {
    write_file_atomically(path, text);
  } catch (const FileError& e) {
    throw ReportError(fmt::format("cannot write {}", e.what()));
  }
}

ReportDirLock::ReportDirLock(const std::string& dir) {
  const std::string path = path_in(dir, kLockFile);
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0644);
  if (fd_ < 0)
    throw ReportError(fmt::format("cannot open the lock file '{}': {}", path,
                                  errno == ELOOP ? "it is a symbolic link (remove it)" : std::strerror(errno)));
  // A POSIX record lock (fcntl F_SETLK), not flock: it belongs to this process alone, so the children a run
  // forks (isolated lanes, fresh processes naming a cause) do not inherit it, and a killed run's lock goes with
  // it even while a child it forked is still winding down. The catch of record locks, that closing any
  // descriptor of the file releases them, is why this class is the only code that opens the lock file, and a
  // process takes it once.
  struct flock whole {};
  whole.l_type = F_WRLCK;
  whole.l_whence = SEEK_SET;
  whole.l_start = 0;
  whole.l_len = 0;
  if (::fcntl(fd_, F_SETLK, &whole) != 0) {
    const int err = (errno == EACCES || errno == EAGAIN) ? EWOULDBLOCK : errno;
    std::string holder;
    if (err == EWOULDBLOCK) {
      char buf[64] = {};
      const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
      std::string text(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
      while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
      if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) holder = " (pid " + text + ")";
    }
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      throw ReportError(fmt::format("report directory '{}' is in use by another pacheck run{}: two runs into one "
                                    "directory would interleave their results; wait for it to finish or write into "
                                    "another directory",
                                    dir, holder));
    throw ReportError(fmt::format("cannot lock '{}': {}", path, std::strerror(err)));
  }
  // The holder's pid, for the message of a run that finds the directory taken.
  const std::string pid = std::to_string(static_cast<long>(::getpid())) + "\n";
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, pid.data(), pid.size(), 0);
}

ReportDirLock::ReportDirLock(ReportDirLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
ReportDirLock& ReportDirLock::operator=(ReportDirLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}
ReportDirLock::~ReportDirLock() {
  if (fd_ >= 0) ::close(fd_);
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

ReportDir::ReportDir(std::string dir, ReportDirLock lock, int fd)
    : dir_(std::move(dir)), lock_(std::move(lock)), fd_(fd) {}
ReportDir::ReportDir(ReportDir&& o) noexcept
    : dir_(std::move(o.dir_)),
      lock_(std::move(o.lock_)),
      fd_(std::exchange(o.fd_, -1)),
      previous_(std::move(o.previous_)),
      dropped_(std::move(o.dropped_)),
      append_error_(std::move(o.append_error_)) {}
ReportDir& ReportDir::operator=(ReportDir&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    dir_ = std::move(o.dir_);
    lock_ = std::move(o.lock_);
    fd_ = std::exchange(o.fd_, -1);
    previous_ = std::move(o.previous_);
    dropped_ = std::move(o.dropped_);
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
  ReportDirLock lock(dir);  // before anything of an earlier run is removed
  remove_final_reports(dir);
  const int fd = open_results(dir, /*fresh=*/true);
  ReportDir rd(dir, std::move(lock), fd);
  write_atomically(path_in(dir, kRunFile), json_text(run, 1) + "\n");
  return rd;
}

ReportDir ReportDir::resume(const std::string& dir, const nlohmann::json& run, const ResumePlan& plan) {
  const std::string run_path = path_in(dir, kRunFile);
  if (!fs::exists(run_path))
    throw ReportError(
        fmt::format("--resume: '{}' has no {}: no run to resume there (start one with --report-dir)", dir, kRunFile));
  ReportDirLock lock(dir);  // a run still writing here would append while this one reads
  const nlohmann::json before = read_json_file(run_path);
  check_same_run(before, run, run_path);
  const std::string results = path_in(dir, kResultsLogFile);
  ResultsLog log;
  try {
    log = read_results_jsonl(results);
  } catch (const ReportError& e) {
    throw ReportError(fmt::format("--resume: {}", e.what()));
  }
  // Each line against the plan: one line per planned cell. Lines of other cells (another run's, or an
  // edit) are dropped and listed; a second line for one cell cannot be told from the first, so it is
  // an error rather than a silent choice (appending a `fail` line used to win).
  std::vector<CellResult> kept;
  std::vector<std::string> dropped;
  std::string kept_text;
  std::unordered_map<std::string, int> line_of_key;
  for (std::size_t i = 0; i < log.results.size(); ++i) {
    const CellResult& r = log.results[i];
    const int line = log.line_numbers[i];
    if (!plan.planned(r.kernel, r.cell_id)) {
      dropped.push_back(fmt::format("line {}: {} '{}'", line, r.kernel, r.cell_id));
      continue;
    }
    const auto [it, fresh] = line_of_key.emplace(result_key(r.kernel, r.cell_id), line);
    if (!fresh)
      throw ReportError(fmt::format(
          "--resume: {}:{}: a second result for {} '{}' (the first is line {}): results.jsonl holds one line per cell, "
          "and which of the two is this run's cannot be told; remove the wrong line, or start afresh with "
          "--report-dir",
          results, line, r.kernel, r.cell_id, it->second));
    kept.push_back(r);
    kept_text += log.lines[i];
  }
  if (log.torn_tail || !dropped.empty()) {
    // Rewritten without the torn line and the dropped ones, so the next append starts on a line of its own
    // and the file holds only this run's cells.
    write_atomically(results, kept_text);
  }
  remove_final_reports(dir);
  ReportDir rd(dir, std::move(lock), open_results(dir, /*fresh=*/false));
  rd.previous_ = std::move(kept);
  rd.dropped_ = std::move(dropped);
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
  const ReportDirLock lock(dir);
  // A merged directory has no evidence (no one run's suite and kernels): an earlier run's must not stay.
  std::error_code rm;
  fs::remove(path_in(dir, kEvidenceFile), rm);
  std::string lines;
  for (const auto& r : s.results) lines += results_line(r);
  write_atomically(path_in(dir, kResultsLogFile), lines);
  write_atomically(path_in(dir, kRunFile), json_text(meta.run, 1) + "\n");
  write_final_reports(dir, s, meta);
}

}  // namespace pacheck
