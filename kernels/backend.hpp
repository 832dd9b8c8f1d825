// Device backends: where a kernel's buffers live and how they get there. CPU is always present; one GPU
// backend at most per binary (kernels/gpu): CUDA when built with nvcc, otherwise HIP when built with hipcc
// (docs/HIP.md says why not both), usable when a device is found.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pacheck/kernel_abi.h"

namespace pacheck {

/// Memory, copies, synchronisation and timing on one device. Errors are thrown as KernelError
/// (kernels/kernel.hpp) carrying the runtime's message; `fatal` when the context is lost.
class Backend {
 public:
  virtual ~Backend() = default;
  /// "cpu", "cuda:0", ...
  virtual std::string name() const = 0;
  virtual pacheck_device device() const = 0;
  /// Human description for reports, e.g. "NVIDIA H200 sm_90, driver 13.0, runtime 13.0" or the CPU model.
  virtual std::string description() const = 0;
  virtual void* alloc(std::size_t bytes) = 0;
  virtual void release(void* p) = 0;
  /// `bytes` of zeroed device memory, freed with release(). The default allocates and uploads zeros in
  /// 64 MiB pieces; the CPU backend maps anonymous pages (MAP_NORESERVE), which use memory only once
  /// written, so a sparse pool's device copy (paging/pool_buffer.hpp) stays about as small as its live bytes.
  virtual void* alloc_zeroed(std::size_t bytes);
  virtual void upload(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void download(void* dst, const void* src, std::size_t bytes) = 0;
  /// Waits for all work on the backend's stream and raises the first pending error.
  virtual void sync() = 0;
  /// The stream handle kernels receive in pacheck_kernel_args::stream (nullptr for CPU).
  virtual void* stream() = 0;
  /// Times one call of `fn` in milliseconds (CUDA events on GPUs, steady_clock on the CPU).
  virtual double time_ms(const std::function<void()>& fn) = 0;
  /// Device-to-device copy bandwidth in GB/s (bytes read + bytes written per second) over `bytes`,
  /// median of `reps` copies: the ceiling bench reports kernels against.
  virtual double copy_bandwidth_gbs(std::size_t bytes, int reps) = 0;
};

/// State of one backend kind on this machine, for `pacheck list devices`.
struct BackendStatus {
  std::string kind;    ///< "cpu", "cuda", "hip"
  bool built = false;  ///< compiled into this binary
  int devices = 0;     ///< devices found
  std::string detail;  ///< device names, or why none ("no CUDA device: <runtime message>")
};
/// One entry per kind: cpu, cuda, hip (in that order), built or not.
std::vector<BackendStatus> backend_status();

/// Opens the backend named by `spec`: "cpu", "cuda", "cuda:N", "hip", "hip:N". Throws
/// std::invalid_argument for an unknown spec and std::runtime_error ("no CUDA device: ...", "no HIP
/// device: ...") when the device is absent or its backend is not built into this binary.
std::unique_ptr<Backend> open_backend(const std::string& spec);
/// Checks the form of a device spec without touching any device: "cpu", "cuda", "cuda:N", "cuda:all" and
/// the same for "hip". Throws std::invalid_argument with open_backend's message otherwise.
void check_device_spec(const std::string& spec);
/// "cuda:0" or "hip:0" when a device of the linked GPU backend is present, otherwise "cpu".
std::string default_device();

/// Whether `spec` is "cuda:all" or "hip:all": every local device of that kind, one GPU worker each.
bool is_all_devices_spec(const std::string& spec);
/// The backend specs `spec` stands for, given `device_count` devices of its kind present: "cuda:all" with
/// 2 devices -> {"cuda:0", "cuda:1"}; any other spec -> {spec} unchanged (open_backend validates it).
/// Throws std::runtime_error(`no_device_why`) for "<kind>:all" when `device_count` is 0 (the same message
/// open_backend gives for a plain "<kind>"), std::invalid_argument for "<kind>:all" of an unknown kind or a
/// negative count. Pure: the unit tests pass a fake count.
std::vector<std::string> expand_device_spec(const std::string& spec, int device_count, const std::string& no_device_why);
/// expand_device_spec with the device count of this machine (the runtime is asked only for "<kind>:all";
/// for CUDA that initialises it in this process). Throws std::runtime_error ("no CUDA device: ...") when
/// the kind is not built in or has no device, as open_backend does for "cuda".
std::vector<std::string> resolve_device_specs(const std::string& spec);
/// The GPU backend linked into this binary: "cuda", "hip", or "" when it has none.
std::string gpu_backend_kind();
/// The backend spec a kernel of `device` runs on when no GPU device was named: "cpu", "cuda" or "hip".
std::string device_kind_spec(pacheck_device device);

/// The CPU backend (host memory, no stream).
std::unique_ptr<Backend> make_cpu_backend();
#ifdef PACHECK_HAVE_CUDA
/// Implemented in kernels/gpu: number of CUDA devices, or 0 with `why` filled ("no CUDA device: ...").
int cuda_device_count(std::string* why);
std::unique_ptr<Backend> make_cuda_backend(int ordinal);
#endif
#ifdef PACHECK_HAVE_HIP
/// Implemented in kernels/gpu (built with hipcc): number of HIP devices, or 0 with `why` filled
/// ("no HIP device: hipErrorNoDevice" on a machine without an AMD GPU).
int hip_device_count(std::string* why);
std::unique_ptr<Backend> make_hip_backend(int ordinal);
#endif

}  // namespace pacheck
