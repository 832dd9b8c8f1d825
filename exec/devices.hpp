// Which devices a run uses: the GPU backend specs its GPU work spreads over ("cuda:all" = one per local
// device), the backends opened in this process, and which device runs which in-process GPU case.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "exec/run_options.hpp"
#include "kernels/backend.hpp"
#include "kernels/kernel.hpp"

namespace pacheck {

/// The device (0..devices-1) that runs in-process GPU case number `position` (0-based, in suite order of
/// the run's GPU cases) when a run spreads its GPU cases over `devices` devices: position % devices, so
/// the assignment depends only on the suite, filter and shard, never on timing. Throws
/// std::invalid_argument when `devices` is 0.
std::size_t gpu_device_for(std::size_t position, std::size_t devices);

/// The GPU devices of one run.
struct GpuDevices {
  /// One backend spec per device GPU work spreads over: {"cuda:0", "cuda:1"} for "cuda:all" with two
  /// devices, the spec itself for "cuda" / "cuda:N", the GPU kernels' own kind ("cuda", or "hip" in a HIP
  /// build) for "cpu". Empty when no kernel of the run is a GPU kernel.
  std::vector<std::string> specs;
  /// A backend (and stream) per spec, opened in this process (open_in_process_gpus) only when some GPU
  /// kernel runs in-process, and only once the run's isolated children are done: isolated GPU kernels open
  /// their own in each child, and a CUDA context created before fork() is unusable in the child.
  std::vector<std::unique_ptr<Backend>> in_process;
};

/// The GPU devices for `kernels` on `device_spec`, with no backend opened yet (GpuDevices::in_process is
/// empty): "<kind>:all" is counted in a child process (which leaves this process without a GPU context for
/// the isolated children forked later); with no device present it falls back to "<kind>", so it fails
/// exactly as a plain "cuda" does (open_backend's "no CUDA device: ..." when opened, or each isolated cell's
/// error).
GpuDevices gpu_devices_of(const std::vector<KernelPtr>& kernels, const std::string& device_spec);

/// Whether some GPU kernel of `kernels` runs in this process under `opt` (so the run needs
/// open_in_process_gpus).
bool needs_in_process_gpus(const std::vector<KernelPtr>& kernels, const RunOptions& opt);

/// Opens a backend (and stream) per spec of `d` in this process when needs_in_process_gpus(kernels, opt),
/// after note_gpu_context_opened(): from then on no child forked by this process can use the device, so a
/// run calls it only after its isolated children are done (exec/runner.hpp). Throws what open_backend
/// throws.
void open_in_process_gpus(GpuDevices& d, const std::vector<KernelPtr>& kernels, const RunOptions& opt);

/// Checks, in a child process, that open_in_process_gpus(d, kernels, opt) would succeed, without opening
/// anything here: a run whose isolated children are forked before its in-process GPU lane opens the device
/// still refuses an unusable device before any cell runs. Throws what open_backend throws in the child
/// (std::invalid_argument or std::runtime_error, with its message); does nothing when no GPU kernel runs
/// in-process, and when no child could be forked or it died (open_in_process_gpus reports it later).
void check_in_process_gpus(const GpuDevices& d, const std::vector<KernelPtr>& kernels, const RunOptions& opt);

}  // namespace pacheck
