#include "exec/watchdog.hpp"

#include <unistd.h>

#include <cstdio>

namespace pacheck {

CallWatchdog::CallWatchdog(double timeout_s, std::function<bool(const Kernel&)> watched, OnTimeout on_timeout)
    : timeout_s_(timeout_s), watched_(std::move(watched)), on_timeout_(std::move(on_timeout)),
      thread_([this] { loop(); }) {}

CallWatchdog::~CallWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

CallWatchdog::Watch::~Watch() {
  if (dog_) dog_->release(id_);
}

CallWatchdog::Watch CallWatchdog::watch(std::string what) {
  const auto span = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  std::uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_++;
    calls_[id] = {Clock::now() + span, std::move(what)};
  }
  wake_.notify_all();
  return Watch(this, id);
}

void CallWatchdog::release(std::uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  calls_.erase(id);
}

void CallWatchdog::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!done_) {
    if (calls_.empty()) {
      wake_.wait(lock);
      continue;
    }
    // Calls share one timeout, so the oldest registered has the earliest deadline.
    const Clock::time_point deadline = calls_.begin()->second.deadline;
    if (Clock::now() < deadline) {
      wake_.wait_until(lock, deadline);
      continue;
    }
    const std::string what = calls_.begin()->second.what;
    lock.unlock();
    on_timeout_(what, timeout_s_);
    // on_timeout must not return: the hung call keeps its thread, and the run cannot finish.
    std::fflush(nullptr);
    ::_exit(1);
  }
}

}  // namespace pacheck
