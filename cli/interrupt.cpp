#include "cli/interrupt.hpp"

#include <algorithm>

#include <signal.h>
#include <unistd.h>

#include <atomic>

#include "report/text.hpp"

namespace pacheck::cli {

namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal flag must be lock-free to be set in a handler");

struct sigaction g_old_int, g_old_term;
bool g_installed_int = false, g_installed_term = false;

extern "C" void on_stop_signal(int sig) {
  int none = 0;
  if (g_signal.compare_exchange_strong(none, sig)) {
    static const char msg[] =
        "\npacheck: stopping: no further cell starts, the cells running now finish (signal again to quit at once)\n";
    // Async-signal-safe: write(2) only; nothing to do if it fails.
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    return;
  }
  // A second signal: its default action, now.
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

/// Installs on_stop_signal for `sig` unless the process ignores it; returns whether it did.
bool install(int sig, struct sigaction* old) {
  if (::sigaction(sig, nullptr, old) != 0 || old->sa_handler == SIG_IGN) return false;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking wait returns EINTR and notices the flag sooner
  return ::sigaction(sig, &sa, nullptr) == 0;
}

std::vector<std::string>& remembered() {
  static std::vector<std::string> args;
  return args;
}

}  // namespace

InterruptHandler::InterruptHandler() {
  g_signal = 0;
  g_installed_int = install(SIGINT, &g_old_int);
  g_installed_term = install(SIGTERM, &g_old_term);
}

InterruptHandler::~InterruptHandler() {
  if (g_installed_int) ::sigaction(SIGINT, &g_old_int, nullptr);
  if (g_installed_term) ::sigaction(SIGTERM, &g_old_term, nullptr);
  g_installed_int = g_installed_term = false;
}

int InterruptHandler::signal() { return g_signal.load(); }

void remember_command_line(std::vector<std::string> args) { remembered() = std::move(args); }

const std::vector<std::string>& command_line() { return remembered(); }

std::string resume_command(const std::vector<std::string>& args, const std::string& dir,
                           const std::vector<std::string>& drop) {
  auto is_flag = [](const std::string& a, const std::string& flag) {
    return a == flag || a.rfind(flag + "=", 0) == 0;
  };
  std::string out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--report-dir" || a == "--resume") {
      ++i;  // and its value
      continue;
    }
    if (is_flag(a, "--report-dir") || is_flag(a, "--resume") || is_flag(a, "--fail-fast")) continue;
    if (std::any_of(drop.begin(), drop.end(), [&](const std::string& f) { return is_flag(a, f); })) continue;
    out += (out.empty() ? "" : " ") + shell_quote(a);
  }
  return out + (out.empty() ? "" : " ") + "--resume " + shell_quote(dir);
}

std::string group_digits(std::size_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace pacheck::cli
