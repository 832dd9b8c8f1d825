#include "exec/devices.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "exec/fresh.hpp"
#include "exec/isolate.hpp"

namespace pacheck {
namespace {

bool is_gpu(const Kernel& k) { return k.device() != PACHECK_DEVICE_CPU; }

/// GpuDevices::specs for GPU kernels of kind `kind` (see gpu_devices_of).
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

GpuDevices gpu_devices_of(const std::vector<KernelPtr>& kernels, const std::string& device_spec) {
  GpuDevices d;
  const auto any_gpu = std::find_if(kernels.begin(), kernels.end(), [](const KernelPtr& k) { return is_gpu(*k); });
  if (any_gpu != kernels.end()) d.specs = gpu_device_specs(device_spec, (*any_gpu)->device());
  return d;
}

bool needs_in_process_gpus(const std::vector<KernelPtr>& kernels, const RunOptions& opt) {
  return std::any_of(kernels.begin(), kernels.end(),
                     [&](const KernelPtr& k) { return is_gpu(*k) && !runs_isolated(opt, *k); });
}

void open_in_process_gpus(GpuDevices& d, const std::vector<KernelPtr>& kernels, const RunOptions& opt) {
  if (!needs_in_process_gpus(kernels, opt) || !d.in_process.empty()) return;
  note_gpu_context_opened();  // later forks of this process (fresh servers, isolated children) cannot use it
  for (const auto& spec : d.specs) d.in_process.push_back(open_backend(spec));
}

void check_in_process_gpus(const GpuDevices& d, const std::vector<KernelPtr>& kernels, const RunOptions& opt) {
  if (!needs_in_process_gpus(kernels, opt)) return;
  // The answer's first character says which exception open_backend threw: 'i' invalid_argument,
  // 'r' any other; "ok" when every spec opened.
  auto probe = [&]() -> std::string {
    try {
      for (const auto& spec : d.specs) open_backend(spec);
      return "ok";
    } catch (const std::invalid_argument& e) {
      return std::string("i") + e.what();
    } catch (const std::exception& e) {
      return std::string("r") + e.what();
    }
  };
  const std::optional<std::string> answer = run_in_child_process(probe, 120);
  if (!answer || *answer == "ok" || answer->empty()) return;
  if ((*answer)[0] == 'i') throw std::invalid_argument(answer->substr(1));
  throw std::runtime_error(answer->substr(1));
}

}  // namespace pacheck
