// The GPU device backend: discovery, memory, copies, one stream per backend, event timing, and the
// conversion of runtime errors into KernelError (fatal when the context is lost). Every runtime call goes
// through kernels/gpu/gpu_runtime.hpp, so this one file is the CUDA backend in pacheck_gpu (nvcc build) and
// the HIP backend in pacheck_hip (compiled with PACHECK_GPU_HIP): names, messages and the exported entry
// points follow the runtime (cuda_device_count / make_cuda_backend, hip_device_count / make_hip_backend).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/gpu/gpu_runtime.hpp"
#include "kernels/gpu/launch.hpp"
#include "kernels/kernel.hpp"

namespace pacheck {
namespace {

using namespace pacheck::gpu;

[[noreturn]] void fail(const std::string& what, Error e) {
  throw KernelError(std::string(kBackendKind) + ": " + what + ": " + error_name(e) + ": " + error_string(e),
                    is_sticky(e));
}

void check(Error e, const std::string& what) {
  if (e != kSuccess) fail(what, e);
}

class DeviceBackend final : public Backend {
 public:
  explicit DeviceBackend(int ordinal) : ordinal_(ordinal) {
    check(set_device(ordinal_), "select device " + std::to_string(ordinal_));
    check(device_props(&props_, ordinal_), "device properties");
    check(stream_create(&stream_), "create stream");
    keep_scratch_pool();
  }
  ~DeviceBackend() override {
    if (stream_) {
      (void)set_device(ordinal_);
      (void)stream_destroy(stream_);
      (void)get_last_error();
    }
  }
  DeviceBackend(const DeviceBackend&) = delete;
  DeviceBackend& operator=(const DeviceBackend&) = delete;

  std::string name() const override { return std::string(kBackendKind) + ":" + std::to_string(ordinal_); }
  pacheck_device device() const override { return gpu::kGpuDevice; }

  std::string description() const override {
    int drv = 0, rt = 0;
    (void)driver_version(&drv);
    (void)runtime_version(&rt);
    char mem[32];
    std::snprintf(mem, sizeof mem, "%.1f GiB", static_cast<double>(props_.totalGlobalMem) / (1024.0 * 1024 * 1024));
    return std::string(props_.name) + " " + arch_name(props_) + ", " + std::to_string(props_.multiProcessorCount) +
           " SMs, " + mem + ", warp " + std::to_string(props_.warpSize) + ", driver " + version_string(drv) +
           ", runtime " + version_string(rt);
  }

  void* alloc(std::size_t bytes) override {
    select();
    void* p = nullptr;
    check(malloc_device(&p, std::max<std::size_t>(bytes, 1)), "allocate " + std::to_string(bytes) + " bytes");
    return p;
  }

  // A sparse pool's device copy (high block ids): the whole pool really allocated, zeroed on the device
  // rather than through uploads of zeros.
  void* alloc_zeroed(std::size_t bytes) override {
    void* p = alloc(bytes);
    const Error e1 = memset_async(p, 0, std::max<std::size_t>(bytes, 1), stream_);
    const Error e2 = e1 == kSuccess ? stream_sync(stream_) : e1;
    if (e2 != kSuccess) {
      release(p);
      check(e2, "zero " + std::to_string(bytes) + " bytes");
    }
    return p;
  }

  // Never throws: release runs during clean-up, also after the context was lost.
  void release(void* p) override {
    if (!p) return;
    (void)set_device(ordinal_);
    if (free_device(p) != kSuccess) (void)get_last_error();
  }

  void upload(void* dst, const void* src, std::size_t bytes) override {
    select();
    check(copy_h2d_async(dst, src, bytes, stream_), "upload " + std::to_string(bytes) + " bytes");
    check(stream_sync(stream_), "upload " + std::to_string(bytes) + " bytes");
  }

  void download(void* dst, const void* src, std::size_t bytes) override {
    select();
    check(copy_d2h_async(dst, src, bytes, stream_), "download " + std::to_string(bytes) + " bytes");
    check(stream_sync(stream_), "download " + std::to_string(bytes) + " bytes");
  }

  void sync() override {
    select();
    // A fault inside a kernel surfaces here (illegal address: sticky, the context is gone).
    Error e = stream_sync(stream_);
    if (e == kSuccess) e = get_last_error();
    if (e != kSuccess) fail("kernel execution", e);
  }

  void* stream() override { return static_cast<void*>(stream_); }

  double time_ms(const std::function<void()>& fn) override {
    select();
    Event a{}, b{};
    check(event_create(&a), "create event");
    Error e = event_create(&b);
    if (e != kSuccess) {
      (void)event_destroy(a);
      fail("create event", e);
    }
    float ms = 0.f;
    try {
      check(event_record(a, stream_), "record event");
      fn();
      check(event_record(b, stream_), "record event");
      check(event_sync(b), "wait for event");
      check(event_elapsed_ms(&ms, a, b), "event time");
    } catch (...) {
      (void)event_destroy(a);
      (void)event_destroy(b);
      throw;
    }
    (void)event_destroy(a);
    (void)event_destroy(b);
    return ms;
  }

  double copy_bandwidth_gbs(std::size_t bytes, int reps) override {
    select();
    void* src = alloc(bytes);
    void* dst = nullptr;
    try {
      dst = alloc(bytes);
      // Not zeros: a copy engine or compressor must not get an easy input.
      check(memset_async(src, 0x5A, bytes, stream_), "fill copy source");
      check(copy_d2d_async(dst, src, bytes, stream_), "warm-up copy");
      std::vector<double> ms;
      for (int r = 0; r < std::max(reps, 1); ++r)
        ms.push_back(time_ms([&] { check(copy_d2d_async(dst, src, bytes, stream_), "device-to-device copy"); }));
      std::sort(ms.begin(), ms.end());
      release(src);
      release(dst);
      // Bytes read plus bytes written, per second.
      return 2.0 * static_cast<double>(bytes) / (ms[ms.size() / 2] * 1e6);
    } catch (...) {
      release(src);
      release(dst);
      throw;
    }
  }

 private:
  void select() { check(set_device(ordinal_), "select device " + std::to_string(ordinal_)); }

  int ordinal_;
  DeviceProp props_{};
  Stream stream_{};
};

/// Devices of this runtime, or 0 with `why` = "no <runtime> device: <runtime message>" (no GPU, no driver:
/// cudaErrorInsufficientDriver / hipErrorNoDevice on the CPU machines).
int gpu_device_count(std::string* why) {
  const std::string none = std::string("no ") + kRuntimeName + " device: ";
  int n = 0;
  const Error e = device_count(&n);
  if (e != kSuccess) {
    (void)get_last_error();  // discovery failures are not sticky: clear them for later calls
    if (why) *why = none + error_string(e);
    return 0;
  }
  if (n <= 0) {
    if (why) *why = none + "the runtime reports 0 devices";
    return 0;
  }
  if (why) {
    std::string names;
    for (int i = 0; i < n; ++i) {
      DeviceProp p{};
      if (device_props(&p, i) != kSuccess) {
        (void)get_last_error();
        continue;
      }
      if (!names.empty()) names += "; ";
      names += std::string(kBackendKind) + ":" + std::to_string(i) + " " + p.name + " " + arch_name(p) + " warp " +
               std::to_string(p.warpSize);
    }
    *why = names;
  }
  return n;
}

}  // namespace

#if PACHECK_GPU_IS_HIP
int hip_device_count(std::string* why) { return gpu_device_count(why); }
std::unique_ptr<Backend> make_hip_backend(int ordinal) { return std::make_unique<DeviceBackend>(ordinal); }
#else
int cuda_device_count(std::string* why) { return gpu_device_count(why); }
std::unique_ptr<Backend> make_cuda_backend(int ordinal) { return std::make_unique<DeviceBackend>(ordinal); }
#endif

}  // namespace pacheck
