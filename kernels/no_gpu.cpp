// Builds without the CUDA backend register no GPU kernels.
#include "kernels/kernel.hpp"

namespace pacheck {
void register_gpu_kernels(Registry&) {}
}  // namespace pacheck
