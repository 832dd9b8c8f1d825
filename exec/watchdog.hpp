// A watchdog for kernel calls made in this process: what `--cell-timeout` means for a kernel that runs
// in process (a plugin under --no-isolate), where there is no child process to kill. A call into kernel
// code cannot be interrupted, so the watchdog's only remedy is to end the process with a message.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "kernels/kernel.hpp"

namespace pacheck {

/// Watches calls into the kernels `watched` selects: each watched call is registered with watch() and
/// unregistered when its Watch ends. When one has run for `timeout_s` wall seconds, `on_timeout(what,
/// timeout_s)` is called from the watchdog's own thread with the `what` of that call (the oldest, when
/// several are over); it must end the process (_exit), since the hung call holds its thread for good. One
/// thread, started by the constructor and joined by the destructor.
class CallWatchdog {
 public:
  using OnTimeout = std::function<void(const std::string& what, double timeout_s)>;
  CallWatchdog(double timeout_s, std::function<bool(const Kernel&)> watched, OnTimeout on_timeout);
  ~CallWatchdog();
  CallWatchdog(const CallWatchdog&) = delete;
  CallWatchdog& operator=(const CallWatchdog&) = delete;

  /// A registered call; unregistered when destroyed. Movable; a default-constructed one watches nothing.
  class Watch {
   public:
    Watch() = default;
    Watch(Watch&& o) noexcept : dog_(o.dog_), id_(o.id_) { o.dog_ = nullptr; }
    Watch& operator=(Watch&&) = delete;
    Watch(const Watch&) = delete;
    ~Watch();

   private:
    friend class CallWatchdog;
    Watch(CallWatchdog* dog, std::uint64_t id) : dog_(dog), id_(id) {}
    CallWatchdog* dog_ = nullptr;
    std::uint64_t id_ = 0;
  };

  /// Whether calls into `k` are watched.
  bool watches(const Kernel& k) const { return watched_ && watched_(k); }
  /// Registers a call described by `what` ("planted.hang on cell 'ID'"), watched until the Watch ends.
  [[nodiscard]] Watch watch(std::string what);

 private:
  void loop();
  void release(std::uint64_t id);

  using Clock = std::chrono::steady_clock;
  struct Call {
    Clock::time_point deadline;
    std::string what;
  };
  double timeout_s_;
  std::function<bool(const Kernel&)> watched_;
  OnTimeout on_timeout_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::map<std::uint64_t, Call> calls_;  ///< by registration order: the first is the oldest
  std::uint64_t next_ = 0;
  bool done_ = false;
  std::thread thread_;
};

/// A Watch of `dog` for a call into `k` described by what() (called only when the call is watched); inert
/// when `dog` is null or does not watch `k`.
template <class What>
CallWatchdog::Watch watch_call(CallWatchdog* dog, const Kernel& k, What&& what) {
  return dog && dog->watches(k) ? dog->watch(what()) : CallWatchdog::Watch{};
}

}  // namespace pacheck
