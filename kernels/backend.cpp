#include "kernels/backend.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/kernel.hpp"

namespace pacheck {
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
  void release(void* p) override { std::free(p); }
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

std::vector<BackendStatus> backend_status() {
  std::vector<BackendStatus> out;
  out.push_back({"cpu", true, 1, cpu_model()});
#ifdef PACHECK_HAVE_CUDA
  std::string why;
  int n = cuda_device_count(&why);
  out.push_back({"cuda", true, n, n > 0 ? why : why});
#else
  out.push_back({"cuda", false, 0, "not built (configure with the CUDA toolkit present)"});
#endif
  return out;
}

std::string default_device() {
#ifdef PACHECK_HAVE_CUDA
  std::string why;
  if (cuda_device_count(&why) > 0) return "cuda:0";
#endif
  return "cpu";
}

std::unique_ptr<Backend> open_backend(const std::string& spec) {
  if (spec == "cpu") return make_cpu_backend();
  if (spec == "cuda" || spec.rfind("cuda:", 0) == 0) {
#ifdef PACHECK_HAVE_CUDA
    int ordinal = 0;
    if (spec.size() > 5) {
      try {
        std::size_t used = 0;
        ordinal = std::stoi(spec.substr(5), &used);
        if (used != spec.size() - 5 || ordinal < 0) throw std::invalid_argument("");
      } catch (const std::exception&) {
        throw std::invalid_argument("--device: '" + spec + "' is not cuda:N with N a device ordinal");
      }
    }
    std::string why;
    const int n = cuda_device_count(&why);
    if (n == 0) throw std::runtime_error(why);
    if (ordinal >= n)
      throw std::invalid_argument("--device: " + spec + " asks for device " + std::to_string(ordinal) + " but " +
                                  std::to_string(n) + " CUDA device(s) exist");
    return make_cuda_backend(ordinal);
#else
    throw std::runtime_error("no CUDA device: this pacheck was built without the CUDA backend");
#endif
  }
  throw std::invalid_argument("--device: unknown device '" + spec + "' (expected cpu, cuda or cuda:N)");
}

}  // namespace pacheck
