// Stopping a run on request (issue 21): SIGINT/SIGTERM, and the command that resumes what was stopped.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace pacheck::cli {

/// While alive, SIGINT and SIGTERM stop the run instead of killing the process: the first one sets a flag
/// (signal()) that RunOptions::stop reads, and writes one line to stderr saying that the cells running now
/// finish and that a second signal ends pacheck at once; a second signal (either one) then has its default
/// action. A signal the process ignored on entry (nohup, a background job of a shell) stays ignored. The
/// destructor puts the previous handlers back. One instance at a time.
class InterruptHandler {
 public:
  InterruptHandler();
  ~InterruptHandler();
  InterruptHandler(const InterruptHandler&) = delete;
  InterruptHandler& operator=(const InterruptHandler&) = delete;
  /// The first signal received (SIGINT, SIGTERM), or 0 while none has been.
  static int signal();
  /// The exit code of a run that `sig` stopped: 128 + sig (130 for SIGINT, 143 for SIGTERM).
  static int exit_code(int sig) { return 128 + sig; }
};

/// Remembers the command line as main() parsed it (argv[0] included, `run` added when pacheck was called
/// without a subcommand), for resume_command.
void remember_command_line(std::vector<std::string> args);
/// The remembered command line (empty when remember_command_line was never called).
const std::vector<std::string>& command_line();

/// `args` with every --report-dir and --resume (as "--opt VALUE" or "--opt=VALUE") removed, --fail-fast
/// removed (the command completes the run, so it must not stop again at the next failure) and so is each flag
/// of `drop` (as "--flag" or "--flag=VALUE"), and "--resume DIR" appended, each word shell-quoted where it
/// needs it: the command that completes a stopped run from its report directory `dir`, pasteable as it is.
std::string resume_command(const std::vector<std::string>& args, const std::string& dir,
                           const std::vector<std::string>& drop = {});

/// `n` with a comma every three digits: 1626 -> "1,626".
std::string group_digits(std::size_t n);

}  // namespace pacheck::cli
