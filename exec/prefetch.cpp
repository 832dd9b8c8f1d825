#include "exec/prefetch.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace pacheck {

CasePrefetch::CasePrefetch(std::vector<Case> cases, const RunOptions& opt, int threads, int ahead)
    : opt_(opt), ahead_(std::max(0, ahead)) {
  // The callbacks of a run mean nothing here, and a copy of them must not outlive their owner.
  opt_.on_result = nullptr;
  opt_.on_result_in_order = nullptr;
  opt_.on_started = nullptr;
  slots_.resize(cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) slots_[i].c = std::move(cases[i]);
  const int n = std::max(1, std::min<int>(threads, static_cast<int>(std::max<std::size_t>(1, slots_.size()))));
  for (int t = 0; t < n; ++t) threads_.emplace_back([this] { work(); });
}

CasePrefetch::~CasePrefetch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void CasePrefetch::work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // A case is taken once the caller is within `ahead` of it: at most ahead + 1 cases exist at once.
    work_cv_.wait(lock, [&] { return stopping_ || (next_ < slots_.size() && next_ <= current_ + ahead_); });
    if (stopping_) return;
    const std::size_t i = next_++;
    Slot& s = slots_[i];
    s.state = Slot::State::preparing;
    lock.unlock();
    std::optional<CaseData> data;
    std::exception_ptr error;
    try {
      data.emplace(prepare_case(s.c, opt_));
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (i < current_) {
      s.state = Slot::State::waiting;  // the caller moved past it while it was prepared: drop it
    } else {
      s.data = std::move(data);
      s.error = error;
      s.state = error ? Slot::State::failed : Slot::State::ready;
    }
    ready_cv_.notify_all();
  }
}

const CaseData& CasePrefetch::get(std::size_t i) {
  std::unique_lock<std::mutex> lock(mu_);
  if (i < current_ || i >= slots_.size())
    throw std::logic_error("CasePrefetch::get: case " + std::to_string(i) + " was freed or does not exist");
  for (std::size_t j = current_; j < i && j < slots_.size(); ++j) {
    slots_[j].data.reset();
    slots_[j].error = nullptr;
  }
  current_ = std::max(current_, i);
  // Cases skipped over without being taken are not prepared at all.
  next_ = std::max(next_, current_);
  work_cv_.notify_all();
  Slot& s = slots_.at(i);
  ready_cv_.wait(lock, [&] { return s.state == Slot::State::ready || s.state == Slot::State::failed; });
  if (s.state == Slot::State::failed) std::rethrow_exception(s.error);
  return *s.data;
}

}  // namespace pacheck
