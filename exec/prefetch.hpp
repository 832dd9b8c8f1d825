// Cases prepared ahead of a caller that runs their cells itself, in order: a pool of threads calls
// prepare_case (generation, oracle, paging: the host work of a cell) for the next cases while the caller's
// thread runs the kernel on the current one. For kernels that must be called from one thread in plan order
// (an interpreter's kernel: the Python module's batches, cells/), where run_in_process would call them
// from its workers.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/case.hpp"
#include "exec/prepare.hpp"
#include "exec/run_options.hpp"

namespace pacheck {

/// Prepares `cases` (in the order the caller will use them) on `threads` threads, at most `ahead` cases
/// past the one the caller is on (memory: ahead + 1 prepared cases at once, each estimate_case_memory()).
/// The threads release nothing of the GIL-holding caller: they run pacheck's C++ only. Not copyable; the
/// destructor stops the threads (a case being prepared is finished first) and frees every case.
class CasePrefetch {
 public:
  /// `threads` >= 1 and `ahead` >= 0 (0: each case is prepared only when asked for, on a pool thread).
  CasePrefetch(std::vector<Case> cases, const RunOptions& opt, int threads, int ahead);
  ~CasePrefetch();
  CasePrefetch(const CasePrefetch&) = delete;
  CasePrefetch& operator=(const CasePrefetch&) = delete;

  /// Case `i`'s prepared data, waiting for it; frees every case before `i` (call with non-decreasing i).
  /// Throws what prepare_case threw for it (CaseError, std::bad_alloc, ...), each time it is asked for.
  const CaseData& get(std::size_t i);
  std::size_t size() const { return slots_.size(); }

 private:
  struct Slot {
    Case c;
    enum class State { waiting, preparing, ready, failed } state = State::waiting;
    std::optional<CaseData> data;
    std::exception_ptr error;
  };
  void work();

  RunOptions opt_;
  int ahead_;
  std::vector<Slot> slots_;
  std::size_t current_ = 0;  ///< the case the caller is on (cases before it are freed)
  std::size_t next_ = 0;     ///< the next case a thread takes
  bool stopping_ = false;
  std::mutex mu_;
  std::condition_variable work_cv_, ready_cv_;
  std::vector<std::thread> threads_;
};

}  // namespace pacheck
