// Reading input files and writing output files safely: every file pacheck reads (suite TOML and its
// includes, case-file manifests, case and output files, results.jsonl, report JSON) goes through
// read_regular_file, which accepts only a regular file within a stated size cap and never blocks on a
// FIFO or device; every file pacheck replaces goes through write_file_atomically, which never writes
// through a symbolic link planted at the destination or at its temporary name.
//
// Quick start: reading a new kind of input file
//  Pick a cap for it (a ReadLimit naming the kind of file, so the error can state it), call
//  read_regular_file(path, limit) and turn its FileError into the caller's error type with the option or
//  field that named the file (e.g. "--suite: ..."), so the CLI exits 2 for it like any other bad input.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace pacheck {

/// A file that could not be read or written, or was refused. what() is "'PATH': REASON".
struct FileError : std::runtime_error {
  /// `reason` says why, without the path ("not a regular file (a FIFO)", "cannot open: No such file ...").
  FileError(std::string path, std::string reason);
  std::string path;
  std::string reason;
};

/// The most bytes an input file of one kind may have, and that kind's name for the error message.
struct ReadLimit {
  std::uint64_t max_bytes;
  std::string_view kind;  ///< "a suite file", "a case file", ...: "over the 16 MiB limit for a suite file"
};

/// Whether read_regular_file follows a symbolic link at `path` (its last component).
enum class Symlinks { follow, refuse };

/// Reads all of `path`, which must be a regular file (after symlinks, unless `links` refuses them) of at
/// most `limit.max_bytes` bytes. Never blocks and never reads without bound: the path is stat'ed first
/// and opened O_NONBLOCK only when it names a regular file, the opened file is checked again with fstat,
/// and at most max_bytes + 1 bytes are read (a file that grows past the cap while read is refused too).
/// Throws FileError with reasons such as "not a regular file (a directory)", "not a regular file (a
/// FIFO)", "is 10737418240 bytes, over the 4 GiB limit for a case file", "is a symbolic link" or
/// "cannot open: <strerror>".
std::string read_regular_file(const std::string& path, const ReadLimit& limit, Symlinks links = Symlinks::follow);

/// "16 MiB", "4 GiB", "512 bytes": a byte count in the largest binary unit that divides it (for caps).
std::string byte_size_text(std::uint64_t bytes);

/// Writes `data` to `path` through a temporary file created beside it (mkstemp: a new file, never an
/// existing one or a link planted at its name), then renamed over `path`: a reader never sees half a file,
/// and a symbolic link at `path` is replaced by the file, never written through. On any failure the
/// temporary file is removed. Throws FileError naming the file and the errno text (a full disk included).
void write_file_atomically(const std::string& path, std::string_view data);

/// Opens `path` for appending, as a regular file and never through a symbolic link (O_NOFOLLOW; a FIFO
/// or device is refused without blocking). `fresh`: a file or link already at `path` is removed first and
/// a new empty file created (O_EXCL); otherwise the file is created when absent and appended to. Returns
/// the descriptor (O_APPEND, close-on-exec). Throws FileError ("is a symbolic link: ...", "not a regular
/// file (...)", "cannot open: ...").
int open_for_append(const std::string& path, bool fresh);

}  // namespace pacheck
