// A command that ends before it finished must not exit 0 (issue 46): kernels and libraries that run in
// this process (plugin kernels under --no-isolate) can call exit() or hang, and a CI gate reading exit 0
// with no results would read green. One place says so and ends the process with a failure exit.
#pragma once

#include <string>

#include "exec/watchdog.hpp"

namespace pacheck::cli {

/// While alive (main() holds one around the subcommand), an exit() or quick_exit() of this process -- from
/// kernel or library code, since pacheck's own commands return to main() -- ends it through
/// end_unfinished() (exit kFail) instead of with the status given. Forked children are not affected (the
/// handler acts only in the process that armed it). One instance at a time.
class ExitGuard {
 public:
  explicit ExitGuard(std::string command);
  ~ExitGuard();
  ExitGuard(const ExitGuard&) = delete;
  ExitGuard& operator=(const ExitGuard&) = delete;
};

/// What end_unfinished() adds about the results that were kept: set by a command once it knows, e.g. "the
/// results finished before it are in DIR/results.jsonl; complete the run with: CMD". Empty: nothing.
void set_unfinished_note(std::string note);

/// Flushes stdout, prints "pacheck: error: WHY; NOTE" to stderr and ends the process with kFail (_exit: no
/// destructor runs, since a kernel thread may still be inside the hung or exiting call). Safe to call from
/// any thread and from an atexit handler.
[[noreturn]] void end_unfinished(const std::string& why);

/// The watchdog of a command's in-process calls into the kernels `watched` selects (plugin kernels under
/// --no-isolate): after `timeout_s` seconds in one call it ends the process through end_unfinished(),
/// naming the call, --cell-timeout and what isolation would have done.
std::unique_ptr<CallWatchdog> in_process_watchdog(double timeout_s, std::function<bool(const Kernel&)> watched);

}  // namespace pacheck::cli
