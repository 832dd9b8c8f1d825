#include "core/files.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace pacheck {

namespace {

/// "a directory", "a FIFO", ...: what a stat mode names, for "not a regular file (...)".
std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a plain file";
}

std::string errno_text(int err) { return std::strerror(err); }

std::string over_limit(std::uint64_t size, const ReadLimit& limit, bool at_least) {
  return fmt::format("is {}{} bytes, over the {} limit for {}", at_least ? "more than " : "", size,
                     byte_size_text(limit.max_bytes), limit.kind);
}

/// Closes `fd` on every way out of a scope.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

constexpr const char* kLinkRefused =
    "is a symbolic link: pacheck uses this file only as a regular file of its directory, never through a link "
    "(remove the link)";

}  // namespace

FileError::FileError(std::string p, std::string r)
    : std::runtime_error(fmt::format("'{}': {}", p, r)), path(std::move(p)), reason(std::move(r)) {}

std::string byte_size_text(std::uint64_t bytes) {
  static constexpr const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  std::uint64_t v = bytes;
  while (u < 4 && v >= 1024 && v % 1024 == 0) {
    v /= 1024;
    ++u;
  }
  return fmt::format("{} {}", v, units[u]);
}

std::string read_regular_file(const std::string& path, const ReadLimit& limit, Symlinks links) {
  const bool refuse = links == Symlinks::refuse;
  // stat before open: opening a FIFO or some devices for reading blocks or has side effects.
  struct stat st {};
  if ((refuse ? ::lstat(path.c_str(), &st) : ::stat(path.c_str(), &st)) != 0)
    throw FileError(path, fmt::format("cannot open: {}", errno_text(errno)));
  if (refuse && S_ISLNK(st.st_mode)) throw FileError(path, kLinkRefused);
  if (!S_ISREG(st.st_mode)) throw FileError(path, fmt::format("not a regular file ({})", kind_of(st.st_mode)));
  if (static_cast<std::uint64_t>(st.st_size) > limit.max_bytes)
    throw FileError(path, over_limit(static_cast<std::uint64_t>(st.st_size), limit, false));
  // O_NONBLOCK: should the path have been replaced by a FIFO since the stat, the open does not wait.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY | (refuse ? O_NOFOLLOW : 0));
  if (fd < 0) {
    if (errno == ELOOP && refuse) throw FileError(path, kLinkRefused);
    throw FileError(path, fmt::format("cannot open: {}", errno_text(errno)));
  }
  FdGuard guard{fd};
  if (::fstat(fd, &st) != 0) throw FileError(path, fmt::format("cannot stat: {}", errno_text(errno)));
  if (!S_ISREG(st.st_mode)) throw FileError(path, fmt::format("not a regular file ({})", kind_of(st.st_mode)));
  if (static_cast<std::uint64_t>(st.st_size) > limit.max_bytes)
    throw FileError(path, over_limit(static_cast<std::uint64_t>(st.st_size), limit, false));
  std::string out;
  out.resize(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  for (;;) {
    if (got == out.size()) {
      // The file may have grown since fstat: read on, one byte past the cap at most.
      if (got > limit.max_bytes) throw FileError(path, over_limit(limit.max_bytes, limit, true));
      out.resize(std::min<std::uint64_t>(limit.max_bytes + 1, std::max<std::uint64_t>(2 * got, 4096)));
      if (got == out.size()) throw FileError(path, over_limit(limit.max_bytes, limit, true));
    }
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw FileError(path, fmt::format("read failed: {}", errno_text(errno)));
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  out.resize(got);
  if (got > limit.max_bytes) throw FileError(path, over_limit(limit.max_bytes, limit, true));
  return out;
}

void write_file_atomically(const std::string& path, std::string_view data) {
  // mkstemp creates a new file (O_EXCL): a link planted at a fixed temporary name cannot redirect the write.
  std::vector<char> tmpl(path.begin(), path.end());
  for (char c : std::string_view(".tmpXXXXXX")) tmpl.push_back(c);
  tmpl.push_back('\0');
  const int fd = ::mkstemp(tmpl.data());
  if (fd < 0) throw FileError(path, fmt::format("cannot create a temporary file beside it: {}", errno_text(errno)));
  const std::string tmp(tmpl.data());
  auto fail = [&](const std::string& what, int err) {
    ::unlink(tmp.c_str());
    throw FileError(path, fmt::format("{} '{}': {}", what, tmp, errno_text(err)));
  };
  ::fchmod(fd, 0644);  // mkstemp's 0600 would hide reports from the CI user that uploads them
  std::size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      fail("cannot write", err);
    }
    off += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) fail("cannot write", errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot rename into place", errno);
}

int open_for_append(const std::string& path, bool fresh) {
  int flags = O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW | O_NONBLOCK;
  if (fresh) {
    // unlink removes a link itself, never its target.
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      throw FileError(path, fmt::format("cannot remove the earlier file: {}", errno_text(errno)));
    flags |= O_EXCL;
  }
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) {
    if (errno == ELOOP) throw FileError(path, kLinkRefused);
    if (errno == ENXIO) throw FileError(path, "not a regular file (a FIFO)");
    throw FileError(path, fmt::format("cannot open: {}", errno_text(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string kind = kind_of(st.st_mode);
    ::close(fd);
    throw FileError(path, fmt::format("not a regular file ({})", kind));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace pacheck
