#include "exec/run_options.hpp"

#include <algorithm>
#include <thread>

namespace pacheck {

int worker_threads(const RunOptions& opt) {
  return std::max(1, opt.threads > 0 ? opt.threads : static_cast<int>(std::thread::hardware_concurrency()));
}

int isolated_gpu_lanes(const RunOptions& opt) {
  return opt.isolate_gpu_lanes > 0 ? opt.isolate_gpu_lanes : std::min(worker_threads(opt), kIsolatedGpuLanesCap);
}

bool runs_isolated(const RunOptions& opt, const Kernel& k) { return opt.isolate && opt.isolate(k); }

bool stop_requested(const RunOptions& opt) { return opt.stop && opt.stop(); }

}  // namespace pacheck
