#include "exec/isolate.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "judge/result.hpp"
#include "kernels/plugin.hpp"

namespace pacheck {

std::string signal_description(int sig) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 32)
  const char* abbrev = sigabbrev_np(sig);
  const char* descr = sigdescr_np(sig);
  if (!abbrev) return fmt::format("signal {}", sig);
  return descr ? fmt::format("SIG{} ({})", abbrev, descr) : fmt::format("SIG{}", abbrev);
#else
  const char* descr = ::strsignal(sig);
  return descr ? fmt::format("signal {} ({})", sig, descr) : fmt::format("signal {}", sig);
#endif
}

std::string describe_wait_status(int status) {
  if (WIFSIGNALED(status)) return "killed by " + signal_description(WTERMSIG(status));
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  return fmt::format("ended with wait status {:#x}", status);
}

namespace {
/// Held around fork() and around every hooks.done call, process-wide: a child forked while another
/// thread is inside done() (printing a row, appending to results.jsonl) would inherit that thread's locks
/// held forever. Also makes socketpair + fork + close atomic, so no child inherits another child's end
/// of its socket (which would hide that child's death from the parent: no EOF while a copy is open).
std::mutex& fork_mutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace

void setup_forked_child(pid_t parent) {
#ifdef __linux__
  // Die with the parent (a SIGKILLed run must not leave children spinning on a hung kernel), and catch the
  // race where the parent died before prctl ran.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
  if (::getppid() != parent) _exit(0);
  // Out of the terminal's process group: Ctrl-C stops the run (and, through the death signal, its children)
  // instead of killing the child first and being recorded as that cell's crash.
  ::setpgid(0, 0);
  // A kernel crashing on every cell would otherwise leave a core file per cell in the CI workspace.
  const rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  ::signal(SIGPIPE, SIG_DFL);
  // The parent's stop handlers (SIGINT/SIGTERM: finish the running cells) are not the child's: a signal
  // sent to the whole process tree ends the child, whose cell the parent then leaves unrun.
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::pthread_sigmask(SIG_SETMASK, &none, nullptr);
}

ConnectedChild fork_connected_child(int type, const std::function<void(int fd)>& body) {
  ConnectedChild out;
  int sv[2];
  const pid_t parent = ::getpid();
  pid_t pid;
  {
    std::unique_lock<std::mutex> lock(fork_mutex());
    if (::socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, sv) != 0) {
      out.why = fmt::format("socketpair failed: {}", std::strerror(errno));
      return out;
    }
    // Unwritten stdio output would be copied into the child and printed twice if a kernel flushes.
    std::fflush(nullptr);
    pid = ::fork();
    if (pid == 0) {
      // The child's copy of the lock is held by its one thread (this one): released, or a child that forks
      // in turn (an isolated `repro` naming the cause of a difference in fresh processes) waits forever.
      lock.unlock();
      setup_forked_child(parent);
      ::close(sv[0]);
      body(sv[1]);
      _exit(0);
    }
    ::close(sv[1]);
  }
  if (pid < 0) {
    ::close(sv[0]);
    out.why = fmt::format("fork failed: {}", std::strerror(errno));
    return out;
  }
  out.pid = pid;
  out.fd = sv[0];
  return out;
}

namespace {

using Clock = std::chrono::steady_clock;

bool send_all(int fd, const std::string& s) {
  std::size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<std::size_t>(n);
  }
  return true;
}

/// The child: reads job numbers, one per line, and answers each with one JSON line
/// {"job": J, "restart": bool, "result": {...}}. Ends with _exit, never exit(): the parent's atexit
/// handlers and unflushed stdio buffers are not the child's to run or flush.
[[noreturn]] void child_main(int fd, const IsolationHooks& hooks, int lane) {
  std::string in;
  char buf[256];
  for (;;) {
    std::size_t nl;
    while ((nl = in.find('\n')) == std::string::npos) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) _exit(0);  // the parent closed the socket: no more work
      in.append(buf, static_cast<std::size_t>(n));
    }
    const std::size_t job = std::stoull(in.substr(0, nl));
    in.erase(0, nl + 1);
    ChildOutcome out;
    try {
      out = hooks.run(job, lane);
    } catch (const std::exception& e) {
      out.result = hooks.lost(job, Verdict::error, e.what(), 0);
    } catch (...) {
      out.result = hooks.lost(job, Verdict::error, "unknown exception", 0);
    }
    const nlohmann::json j = {{"job", job}, {"restart", out.restart}, {"result", to_json(out.result)}};
    // Plugin messages may hold invalid UTF-8; dump() would throw on them.
    if (!send_all(fd, j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n")) _exit(1);
    if (out.restart) _exit(0);
  }
}

struct Child {
  pid_t pid = -1;
  int fd = -1;
  int group = -1;
  std::string buf;  ///< bytes received and not yet consumed as a line
  bool alive() const { return pid > 0; }
};

/// Waits for `c` (blocking), closes its socket and returns its wait status.
int reap(Child& c) {
  int status = 0;
  while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
  }
  ::close(c.fd);
  c = Child{};
  return status;
}

/// Ends `c` whatever it is doing: SIGKILL, then reap. Returns its wait status.
int stop(Child& c) {
  if (!c.alive()) return 0;
  ::kill(c.pid, SIGKILL);
  return reap(c);
}

/// Forks a child of lane `lane` for `group`. Returns an empty string on success, else why not.
std::string spawn(Child& c, int group, int lane, const IsolationHooks& hooks) {
  const ConnectedChild child = fork_connected_child(SOCK_STREAM, [&](int fd) { child_main(fd, hooks, lane); });
  if (child.pid < 0) return child.why;
  c.pid = child.pid;
  c.fd = child.fd;
  c.group = group;
  c.buf.clear();
  return {};
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Runs `job` on `c` (starting a child when none is alive) and returns its result. When opt.stop says
/// stop while the child runs the job, the child is killed and reaped, `*cancelled` is set and the result
/// is empty.
CellResult run_one(Child& c, int group, int lane, std::size_t job, const IsolationOptions& opt,
                   const IsolationHooks& hooks, bool* cancelled = nullptr) {
  const auto t0 = Clock::now();
  const std::string cmd = std::to_string(job) + "\n";
  if (hooks.started) hooks.started(job);
  for (int attempt = 0;; ++attempt) {
    if (!c.alive()) {
      const std::string why = spawn(c, group, lane, hooks);
      if (!why.empty()) return hooks.lost(job, Verdict::error, "could not start a child process: " + why, 0);
    }
    if (send_all(c.fd, cmd)) break;
    // The child died after its previous result (e.g. in a destructor the kernel registered): that death
    // belongs to no cell. A fresh child gets the job; a second failure is this job's.
    const int status = reap(c);
    if (attempt == 1)
      return hooks.lost(job, Verdict::crash, "child process " + describe_wait_status(status) + " before the cell started",
                        seconds_since(t0));
  }
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt.cell_timeout_s));
  char buf[65536];
  for (;;) {
    const std::size_t nl = c.buf.find('\n');
    if (nl != std::string::npos) {
      const std::string line = c.buf.substr(0, nl);
      c.buf.erase(0, nl + 1);
      try {
        const auto j = nlohmann::json::parse(line);
        if (j.at("job").get<std::size_t>() != job)
          throw std::runtime_error(fmt::format("answer for job {} while waiting for job {}", j.at("job").get<std::size_t>(), job));
        CellResult r = cell_result_from_json(j.at("result"));
        if (j.at("restart").get<bool>()) stop(c);
        return r;
      } catch (const std::exception& e) {
        // The kernel scribbled over the child's memory or socket: treat the process as crashed.
        stop(c);
        return hooks.lost(job, Verdict::crash, fmt::format("child process sent a malformed result ({})", e.what()),
                          seconds_since(t0));
      }
    }
    if (cancelled && opt.stop && opt.stop()) {
      stop(c);
      *cancelled = true;
      return {};
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      stop(c);
      return hooks.lost(job, Verdict::timeout,
                        fmt::format("no result within the cell timeout of {:g} s; child process killed (SIGKILL)",
                                    opt.cell_timeout_s),
                        seconds_since(t0));
    }
    pollfd p{c.fd, POLLIN, 0};
    // A short wait: a stop request is noticed within 100 ms even when the signal went to another thread.
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 100)));
    if (ready < 0 && errno != EINTR) {
      stop(c);
      return hooks.lost(job, Verdict::crash, fmt::format("poll failed: {}", std::strerror(errno)), seconds_since(t0));
    }
    if (ready <= 0) continue;
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n > 0) {
      c.buf.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    // EOF: the child is gone without a complete answer.
    const int status = reap(c);
    return hooks.lost(job, Verdict::crash, "child process " + describe_wait_status(status) + " while running the cell",
                      seconds_since(t0));
  }
}

}  // namespace

std::optional<std::string> run_in_child_process(const std::function<std::string()>& fn, double timeout_s) {
  ChildAnswer a = ask_child_process(fn, timeout_s);
  if (!a.answered) return std::nullopt;
  return std::move(a.text);
}

ChildAnswer ask_child_process(const std::function<std::string()>& fn, double timeout_s) {
  IsolationHooks hooks;
  hooks.run = [&](std::size_t, int) {
    ChildOutcome out;
    out.result.detail = fn();
    return out;
  };
  hooks.lost = [](std::size_t, Verdict v, const std::string& detail, double) {
    CellResult r;
    r.verdict = v;
    r.detail = detail;
    return r;
  };
  Child c;
  const CellResult r = run_one(c, 0, 0, 0, IsolationOptions{1, timeout_s}, hooks);
  stop(c);
  if (r.verdict != Verdict::pass) {
    std::string why = r.detail;
    const std::string cell_words = " while running the cell";  // run_one speaks of cells; a probe is none
    if (const auto at = why.find(cell_words); at != std::string::npos) why.erase(at, cell_words.size());
    return {false, std::string(verdict_name(r.verdict)) + ": " + why};
  }
  return {true, r.detail};
}

std::string plugin_dies_on_load(const std::string& path, double timeout_s) {
  const ChildAnswer a = ask_child_process(
      [&]() -> std::string {
        Registry scratch;
        try {
          load_plugin(path, scratch);
        } catch (const std::exception&) {
          // Reported by the real load, with the same message.
        }
        return "loaded";
      },
      timeout_s);
  const bool died = a.text.rfind("crash", 0) == 0 || a.text.rfind("timeout", 0) == 0;
  return !a.answered && died ? a.text : std::string();
}

void run_isolated(const std::vector<IsolatedBatch>& batches, const IsolationOptions& opt, const IsolationHooks& hooks) {
  if (opt.lanes < 1) throw std::invalid_argument(fmt::format("isolation: {} lanes (need at least 1)", opt.lanes));
  if (!(opt.cell_timeout_s > 0))
    throw std::invalid_argument(fmt::format("--cell-timeout: {} s (must be > 0)", opt.cell_timeout_s));
  if (hooks.prepare && !opt.child_per_batch)
    throw std::invalid_argument("isolation: a prepare hook needs child_per_batch (older children lack its data)");
  for (const auto& b : batches)
    if (b.groups.size() != b.jobs.size()) throw std::invalid_argument("isolation: a batch needs one group per job");
  std::atomic<std::size_t> next{0};
  std::atomic<bool> abort{false};
  std::mutex err_mu;
  std::exception_ptr first_error;
  const auto stopping = [&] { return opt.stop && opt.stop(); };
  auto lane = [&](int lane_index) {
    Child c;
    try {
      for (std::size_t b; !abort && !stopping() && (b = next++) < batches.size();) {
        const IsolatedBatch& batch = batches[b];
        if (hooks.prepare) hooks.prepare(b, lane_index);
        for (std::size_t i = 0; i < batch.jobs.size() && !stopping(); ++i) {
          // One kernel per process: switch processes when the group changes.
          if (c.alive() && c.group != batch.groups[i]) stop(c);
          bool cancelled = false;
          CellResult r = run_one(c, batch.groups[i], lane_index, batch.jobs[i], opt, hooks, &cancelled);
          if (cancelled) break;
          std::lock_guard<std::mutex> lock(fork_mutex());
          hooks.done(batch.jobs[i], r);
        }
        if (opt.child_per_batch) stop(c);
        if (hooks.release) hooks.release(b, lane_index);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(err_mu);
      if (!first_error) first_error = std::current_exception();
      abort = true;
    }
    stop(c);
  };
  const int lanes = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(opt.lanes), batches.size()));
  std::vector<std::thread> threads;
  for (int i = 0; i < lanes; ++i) threads.emplace_back(lane, i);
  for (auto& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace pacheck
