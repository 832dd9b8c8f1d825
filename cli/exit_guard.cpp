#include "cli/exit_guard.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "cli/common.hpp"

namespace pacheck::cli {

namespace {
// Read by the exit handler, which may run on any thread while the main thread is elsewhere: each text is
// published whole through an atomic pointer and never freed (a few per process).
std::atomic<const std::string*> g_command{nullptr};
std::atomic<const std::string*> g_note{nullptr};
std::atomic<pid_t> g_armed_pid{0};

extern "C" void exit_while_running() {
  if (g_armed_pid.load() != ::getpid()) return;  // not armed, or a forked child exiting
  const std::string* command = g_command.load();
  end_unfinished(fmt::format("exit() was called while `pacheck {}` was running, by code in this process (a kernel "
                             "or library; plugin kernels run here under --no-isolate): the command did not finish",
                             command ? *command : "?"));
}
}  // namespace

ExitGuard::ExitGuard(std::string command) {
  static const bool registered = [] {
    std::atexit(exit_while_running);
    std::at_quick_exit(exit_while_running);
    return true;
  }();
  (void)registered;
  g_command.store(new std::string(std::move(command)));
  g_armed_pid.store(::getpid());
}

ExitGuard::~ExitGuard() { g_armed_pid.store(0); }

void set_unfinished_note(std::string note) { g_note.store(new std::string(std::move(note))); }

void end_unfinished(const std::string& why) {
  g_armed_pid.store(0);  // an exit() from here on (a second thread) is not reported again
  std::fflush(stdout);
  const std::string* note = g_note.load();
  const std::string text = fmt::format("\npacheck: error: {}{}{}\n", why, note && !note->empty() ? "; " : "",
                                       note ? *note : "");
  (void)!::write(STDERR_FILENO, text.data(), text.size());
  ::_exit(kFail);
}

std::unique_ptr<CallWatchdog> in_process_watchdog(double timeout_s, std::function<bool(const Kernel&)> watched) {
  return std::make_unique<CallWatchdog>(timeout_s, std::move(watched), [](const std::string& what, double s) {
    end_unfinished(fmt::format("--cell-timeout: {} has run for {:g} s in this process, where a call cannot be stopped "
                               "(--no-isolate): the command was ended; without --no-isolate the cell runs in a child "
                               "process and gets the verdict timeout",
                               what, s));
  });
}

}  // namespace pacheck::cli
