#include "exec/fresh.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "exec/guarded_run.hpp"
#include "exec/isolate.hpp"
#include "exec/prepare.hpp"
#include "kernels/backend.hpp"

namespace pacheck {

namespace {

std::atomic<bool> g_gpu_context_opened{false};

bool send_all(int fd, const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

/// The child of one request: runs the kernel once and writes to `reply` a JSON header line, {"ok": true,
/// "elements": N} followed by N raw uint32 words, or {"ok": false, "why": "..."}.
void answer(int reply, const std::string& request, const std::vector<const Kernel*>& kernels) {
  nlohmann::json header;
  std::vector<std::uint32_t> bits;
  try {
    const auto j = nlohmann::json::parse(request);
    const std::size_t index = j.at("kernel").get<std::size_t>();
    if (index >= kernels.size()) throw std::runtime_error("no such kernel");
    const std::string id = j.at("cell").get<std::string>();
    const Cell cell = parse_cell_id(id);
    if (cell.id() != id) throw std::runtime_error(fmt::format("cell id '{}' reads back as '{}'", id, cell.id()));
    const CaseData data = prepare_inputs(cell.c);
    std::optional<FaultedCache> faulted;
    if (j.at("faulted").get<bool>()) faulted = faulted_cache(data.c, data.cache, cell.fault);
    const std::string device = j.at("device").get<std::string>();
    const auto backend = device == "cpu" ? make_cpu_backend() : open_backend(device);
    bits = run_kernel_once(*kernels[index], *backend, data, faulted ? faulted->cache : data.cache).bits;
    header = {{"ok", true}, {"elements", bits.size()}};
  } catch (const std::exception& e) {
    bits.clear();
    header = {{"ok", false}, {"why", e.what()}};
  }
  const std::string line = header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (send_all(reply, line.data(), line.size())) send_all(reply, bits.data(), bits.size() * sizeof(std::uint32_t));
}

/// The server: receives one request per datagram, with the reply socket attached (SCM_RIGHTS), and forks a
/// child per request. Ends when every sender has closed its side of `ctl`, or with this process's parent.
[[noreturn]] void server_main(int ctl, const std::vector<const Kernel*>& kernels, double timeout_s) {
  ::signal(SIGCHLD, SIG_IGN);  // children are reaped by the system; nobody waits for them here
  for (;;) {
    char buf[8192];
    iovec iov{buf, sizeof buf};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(ctl, &msg, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(0);
    int reply = -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(&reply, CMSG_DATA(c), sizeof reply);
    if (reply < 0) continue;
    const pid_t server = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
      setup_forked_child(server);
      ::close(ctl);
      ::signal(SIGCHLD, SIG_DFL);
      // The watchdog: SIGALRM's default action ends a child whose kernel hangs.
      ::alarm(static_cast<unsigned>(std::max(1.0, std::ceil(timeout_s))));
      answer(reply, std::string(buf, static_cast<std::size_t>(n)), kernels);
      _exit(0);
    }
    ::close(reply);
  }
}

}  // namespace

void note_gpu_context_opened() { g_gpu_context_opened = true; }

bool gpu_context_opened() { return g_gpu_context_opened; }

FreshProcesses::FreshProcesses(const std::vector<const Kernel*>& kernels, double timeout_s)
    : kernels_(kernels), timeout_s_(timeout_s), gpu_usable_(!g_gpu_context_opened) {
  const ConnectedChild server =
      fork_connected_child(SOCK_SEQPACKET, [&](int fd) { server_main(fd, kernels_, timeout_s_); });
  if (server.pid < 0) {
    unavailable_ = server.why;
    return;
  }
  pid_ = server.pid;
  fd_ = server.fd;
  owner_ = ::getpid();
}

FreshProcesses::~FreshProcesses() {
  if (pid_ <= 0 || ::getpid() != owner_) return;  // a forked copy of the owner leaves the server alone
  ::close(fd_);
  ::kill(pid_, SIGKILL);
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
}

namespace {

/// Sends `request` to the server on `ctl` with a new reply socket attached; returns this side of the reply
/// socket, or -1 with `*why` set.
int send_request(int ctl, const std::string& request, std::string* why) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    *why = fmt::format("socketpair failed: {}", std::strerror(errno));
    return -1;
  }
  iovec iov{const_cast<char*>(request.data()), request.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &sv[1], sizeof(int));
  ssize_t sent;
  while ((sent = ::sendmsg(ctl, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
  }
  ::close(sv[1]);
  if (sent < 0) {
    ::close(sv[0]);
    *why = fmt::format("the fresh-process server is gone ({})", std::strerror(errno));
    return -1;
  }
  return sv[0];
}

/// Reads one answer from `fd` (see answer()) by `deadline`: the header line, then exactly the words it
/// announces, so another process holding a copy of the reply socket would delay EOF, never the answer.
std::optional<std::vector<std::uint32_t>> read_answer(int fd, std::chrono::steady_clock::time_point deadline,
                                                      double timeout_s, std::string* why) {
  std::string in;
  std::optional<std::size_t> need;  ///< bytes of output bits, once the header is read
  char buf[65536];
  for (;;) {
    if (!need)
      if (const auto nl = in.find('\n'); nl != std::string::npos) {
        try {
          const auto header = nlohmann::json::parse(in.substr(0, nl));
          if (!header.at("ok").get<bool>()) {
            *why = fmt::format("the fresh run failed: {}", header.at("why").get<std::string>());
            return std::nullopt;
          }
          need = header.at("elements").get<std::size_t>() * sizeof(std::uint32_t);
          in.erase(0, nl + 1);
        } catch (const std::exception& e) {
          *why = fmt::format("the fresh process answered garbage ({})", e.what());
          return std::nullopt;
        }
      }
    if (need && in.size() >= *need) break;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      *why = fmt::format("no answer from the fresh process within {:g} s", timeout_s);
      return std::nullopt;
    }
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (ready < 0 && errno != EINTR) {
      *why = fmt::format("poll failed: {}", std::strerror(errno));
      return std::nullopt;
    }
    if (ready <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      *why = fmt::format("the fresh process died before it answered (a crash, or killed at the {:g} s timeout)",
                         timeout_s);
      return std::nullopt;
    }
    in.append(buf, static_cast<std::size_t>(n));
  }
  std::vector<std::uint32_t> bits(*need / sizeof(std::uint32_t));
  std::memcpy(bits.data(), in.data(), *need);
  return bits;
}

}  // namespace

std::vector<std::vector<std::uint32_t>> FreshProcesses::run(const Kernel& k, const Cell& cell, bool faulted,
                                                            const std::string& device, int count, std::string* why) const {
  if (!unavailable_.empty()) {
    *why = unavailable_;
    return {};
  }
  const auto it = std::find(kernels_.begin(), kernels_.end(), &k);
  if (it == kernels_.end()) {
    *why = fmt::format("{} is not a kernel of this run's fresh-process server", k.name());
    return {};
  }
  if (device != "cpu" && !gpu_usable_) {
    *why = "this process opened a GPU context before the fresh-process server was forked, and a fork after CUDA "
           "initialisation cannot use the device (issue 17)";
    return {};
  }
  const std::string request = nlohmann::json{{"kernel", it - kernels_.begin()},
                                             {"cell", cell.id()},
                                             {"faulted", faulted},
                                             {"device", device}}
                                  .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  // Every request first, so the children run side by side; then the answers, in order.
  std::vector<int> replies;
  for (int i = 0; i < count; ++i) {
    const int fd = send_request(fd_, request, why);
    if (fd < 0) break;
    replies.push_back(fd);
  }
  // The child's own alarm ends a hung kernel; the deadline covers a child that could not even start.
  const double limit = timeout_s_ + 10.0;
  using Clock = std::chrono::steady_clock;
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit));
  std::vector<std::vector<std::uint32_t>> runs;
  bool failed = replies.size() != static_cast<std::size_t>(count);  // `why` says why a request was not sent
  for (int fd : replies) {
    if (!failed) {
      auto bits = read_answer(fd, deadline, limit, why);
      if (bits) runs.push_back(std::move(*bits));
      else failed = true;
    }
    ::close(fd);  // a child still running gets EPIPE, or its alarm, and ends
  }
  if (failed) return {};
  return runs;
}

}  // namespace pacheck
