#include "exec/devices.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "exec/fresh.hpp"
#include "exec/isolate.hpp"

namespace pacheck {
namespace {

/// GpuDevices::specs for GPU kernels of kind `kind` (see open_gpu_devices).
std::vector<std::string> gpu_device_specs(const std::string& device_spec, pacheck_device kind) {
  if (device_spec == "cpu") return {device_kind_spec(kind)};
  if (!is_all_devices_spec(device_spec)) return {device_spec};
  const std::string plain = device_spec.substr(0, device_spec.find(':'));
  auto count = [&]() -> std::string {
    try {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& s : resolve_device_specs(device_spec)) out.push_back(s);
      return out.dump();
    } catch (const std::runtime_error&) {
      return "[]";  // no device, or the kind is not built in
    }
  };
  std::optional<std::string> answer = run_in_child_process(count, 120);
  if (!answer) answer = count();  // no child could be forked: ask here
  std::vector<std::string> specs;
  try {
    for (const auto& s : nlohmann::json::parse(*answer)) specs.push_back(s.get<std::string>());
  } catch (const std::exception&) {
    specs.clear();
  }
  if (specs.empty()) specs.push_back(plain);
  return specs;
}

}  // namespace

std::size_t gpu_device_for(std::size_t position, std::size_t devices) {
  if (devices == 0) throw std::invalid_argument("gpu_device_for: no device to assign GPU work to");
  return position % devices;
}

GpuDevices open_gpu_devices(const std::vector<KernelPtr>& kernels, const std::string& device_spec,
                            const RunOptions& opt) {
  GpuDevices d;
  auto gpu = [](const KernelPtr& k) { return k->device() != PACHECK_DEVICE_CPU; };
  const auto any_gpu = std::find_if(kernels.begin(), kernels.end(), gpu);
  if (any_gpu == kernels.end()) return d;
  d.specs = gpu_device_specs(device_spec, (*any_gpu)->device());
  const bool in_process = std::any_of(kernels.begin(), kernels.end(),
                                      [&](const KernelPtr& k) { return gpu(k) && !runs_isolated(opt, *k); });
  if (in_process) {
    note_gpu_context_opened();  // later fresh-process servers of this process cannot run GPU kernels
    for (const auto& spec : d.specs) d.in_process.push_back(open_backend(spec));
  }
  return d;
}

}  // namespace pacheck
