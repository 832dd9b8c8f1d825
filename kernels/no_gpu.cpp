// Builds without the CUDA backend register no GPU kernels.
#include "kernels/kernel.hpp"
#include "kernels/mla_kernel.hpp"

namespace pacheck {
void register_gpu_kernels(Registry&) {}
std::vector<MlaKernelPtr> gpu_mla_kernels() { return {}; }
}  // namespace pacheck
