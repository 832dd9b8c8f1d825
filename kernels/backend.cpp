#include "kernels/backend.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/kernel.hpp"

namespace pacheck {

void* Backend::alloc_zeroed(std::size_t bytes) {
  void* p = alloc(bytes);
  constexpr std::size_t kPiece = std::size_t{64} << 20;
  const std::vector<std::uint8_t> zeros(std::min(std::max<std::size_t>(bytes, 1), kPiece), 0);
  try {
    for (std::size_t at = 0; at < bytes; at += kPiece)
      upload(static_cast<std::uint8_t*>(p) + at, zeros.data(), std::min(kPiece, bytes - at));
  } catch (...) {
    release(p);
    throw;
  }
  return p;
}

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  return "unknown CPU";
}

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
  std::string description() const override { return cpu_model(); }
  void* alloc(std::size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    if (!p) throw KernelError("cpu: out of host memory allocating " + std::to_string(bytes) + " bytes");
    return p;
  }
  void release(void* p) override {
    {
      std::lock_guard<std::mutex> lock(mapped_mu_);
      if (auto it = mapped_.find(p); it != mapped_.end()) {
        ::munmap(p, it->second);
        mapped_.erase(it);
        return;
      }
    }
    std::free(p);
  }
  void* alloc_zeroed(std::size_t bytes) override {
    const std::size_t n = std::max<std::size_t>(bytes, 1);
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw KernelError("cpu: out of address space mapping " + std::to_string(bytes) + " bytes");
    std::lock_guard<std::mutex> lock(mapped_mu_);
    mapped_[p] = n;
    return p;
  }
  void upload(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void sync() override {}
  void* stream() override { return nullptr; }
  double time_ms(const std::function<void()>& fn) override {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  double copy_bandwidth_gbs(std::size_t bytes, int reps) override;

 private:
  std::mutex mapped_mu_;
  std::map<void*, std::size_t> mapped_;  ///< alloc_zeroed's mappings and their lengths
};

double CpuBackend::copy_bandwidth_gbs(std::size_t bytes, int reps) {
  std::vector<char> a(bytes, 1), b(bytes, 0);
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) ms.push_back(time_ms([&] { std::memcpy(b.data(), a.data(), bytes); }));
  std::sort(ms.begin(), ms.end());
  return 2.0 * static_cast<double>(bytes) / (ms[ms.size() / 2] * 1e6);
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

namespace {

/// A GPU backend kind as this binary knows it: its entry points when linked, nullptr otherwise.
struct GpuKind {
  const char* name;     ///< "cuda": the --device prefix and BackendStatus::kind
  const char* runtime;  ///< "CUDA": as in "no CUDA device: ..."
  pacheck_device device;
  int (*count)(std::string* why);
  std::unique_ptr<Backend> (*make)(int ordinal);
  const char* not_built;  ///< BackendStatus::detail when not linked
};

const GpuKind kGpuKinds[] = {
#ifdef PACHECK_HAVE_CUDA
    {"cuda", "CUDA", PACHECK_DEVICE_CUDA, cuda_device_count, make_cuda_backend, ""},
#else
    {"cuda", "CUDA", PACHECK_DEVICE_CUDA, nullptr, nullptr, "not built (configure with the CUDA toolkit present)"},
#endif
#ifdef PACHECK_HAVE_HIP
    {"hip", "HIP", PACHECK_DEVICE_HIP, hip_device_count, make_hip_backend, ""},
#else
    // A binary links one GPU runtime: with CUDA present the HIP objects are built but not linked here.
    {"hip", "HIP", PACHECK_DEVICE_HIP, nullptr, nullptr,
     "not built into this binary (a HIP build needs hipcc and -DPACHECK_CUDA=OFF: docs/HIP.md)"},
#endif
};

/// N of "<kind>:N" (0 for a bare "<kind>"); std::invalid_argument when N is not a device ordinal.
int parse_ordinal(const std::string& spec, const std::string& kind) {
  if (spec.size() == kind.size()) return 0;
  const std::string tail = spec.substr(kind.size() + 1);
  try {
    std::size_t used = 0;
    const int ordinal = std::stoi(tail, &used);
    if (used != tail.size() || ordinal < 0) throw std::invalid_argument("");
    return ordinal;
  } catch (const std::exception&) {
    throw std::invalid_argument("--device: '" + spec + "' is not " + kind + ":N with N a device ordinal, or " + kind + ":all");
  }
}

}  // namespace

std::vector<BackendStatus> backend_status() {
  std::vector<BackendStatus> out;
  out.push_back({"cpu", true, 1, cpu_model()});
  for (const GpuKind& k : kGpuKinds) {
    if (!k.count) {
      out.push_back({k.name, false, 0, k.not_built});
      continue;
    }
    std::string why;
    const int n = k.count(&why);
    out.push_back({k.name, true, n, why});
  }
  return out;
}

std::string default_device() {
  for (const GpuKind& k : kGpuKinds) {
    std::string why;
    if (k.count && k.count(&why) > 0) return std::string(k.name) + ":0";
  }
  return "cpu";
}

std::string gpu_backend_kind() {
  for (const GpuKind& k : kGpuKinds)
    if (k.count) return k.name;
  return "";
}

std::string device_kind_spec(pacheck_device device) {
  for (const GpuKind& k : kGpuKinds)
    if (k.device == device) return k.name;
  return "cpu";
}

bool is_all_devices_spec(const std::string& spec) {
  for (const GpuKind& k : kGpuKinds)
    if (spec == std::string(k.name) + ":all") return true;
  return false;
}

std::vector<std::string> expand_device_spec(const std::string& spec, int device_count, const std::string& no_device_why) {
  const auto colon = spec.find(':');
  if (colon == std::string::npos || spec.substr(colon + 1) != "all") return {spec};
  if (!is_all_devices_spec(spec))
    throw std::invalid_argument("--device: unknown device '" + spec + "' (expected cpu, cuda[:N|:all] or hip[:N|:all])");
  if (device_count < 0)
    throw std::invalid_argument("--device: " + spec + ": device count " + std::to_string(device_count) + " is negative");
  if (device_count == 0) throw std::runtime_error(no_device_why);
  std::vector<std::string> out;
  const std::string kind = spec.substr(0, colon);
  for (int i = 0; i < device_count; ++i) out.push_back(kind + ":" + std::to_string(i));
  return out;
}

std::vector<std::string> resolve_device_specs(const std::string& spec) {
  if (!is_all_devices_spec(spec)) return expand_device_spec(spec, 0, "");
  for (const GpuKind& k : kGpuKinds) {
    if (spec != std::string(k.name) + ":all") continue;
    if (!k.count)
      throw std::runtime_error("no " + std::string(k.runtime) + " device: this pacheck was built without the " +
                               k.runtime + " backend");
    std::string why;
    const int n = k.count(&why);
    return expand_device_spec(spec, n, why.empty() ? "no " + std::string(k.runtime) + " device" : why);
  }
  return {spec};
}

void check_device_spec(const std::string& spec) {
  if (spec == "cpu" || is_all_devices_spec(spec)) return;
  for (const GpuKind& k : kGpuKinds) {
    const std::string name = k.name;
    if (spec != name && spec.rfind(name + ":", 0) != 0) continue;
    parse_ordinal(spec, name);
    return;
  }
  throw std::invalid_argument("--device: unknown device '" + spec + "' (expected cpu, cuda[:N|:all] or hip[:N|:all])");
}

std::unique_ptr<Backend> open_backend(const std::string& spec) {
  if (is_all_devices_spec(spec))
    throw std::invalid_argument("--device: " + spec + " names several devices; open_backend opens one (resolve_device_specs)");
  check_device_spec(spec);
  if (spec == "cpu") return make_cpu_backend();
  for (const GpuKind& k : kGpuKinds) {
    const std::string name = k.name;
    if (spec != name && spec.rfind(name + ":", 0) != 0) continue;
    const int ordinal = parse_ordinal(spec, name);
    if (!k.count)
      throw std::runtime_error("no " + std::string(k.runtime) + " device: this pacheck was built without the " +
                               k.runtime + " backend");
    std::string why;
    const int n = k.count(&why);
    if (n == 0) throw std::runtime_error(why);
    if (ordinal >= n)
      throw std::invalid_argument("--device: " + spec + " asks for device " + std::to_string(ordinal) + " but " +
                                  std::to_string(n) + " " + k.runtime + " device(s) exist");
    return k.make(ordinal);
  }
  throw std::invalid_argument("--device: unknown device '" + spec + "' (expected cpu, cuda[:N|:all] or hip[:N|:all])");
}

}  // namespace pacheck
