// The GPU MLA kernels as MlaKernel objects: gpu.mla_decode and its tail-fault twin (kernels/gpu/mla_decode.cu),
// CUDA kernels in an nvcc build and HIP kernels in a hipcc build, under the same names.
#include <memory>
#include <string>
#include <vector>

#include "faults/mla_inject.hpp"
#include "kernels/gpu/mla_launch.hpp"
#include "kernels/mla_kernel.hpp"

namespace pacheck {
namespace {

class GpuMlaDecode final : public MlaKernel {
 public:
  explicit GpuMlaDecode(bool tail_fault) : tail_fault_(tail_fault) {}
  std::string name() const override { return tail_fault_ ? "gpu.mla_decode_tail_fault" : "gpu.mla_decode"; }
  std::string description() const override {
    return tail_fault_ ? "gpu.mla_decode loading the final block's tail into P.V (negative control)"
                       : "MLA decode: 16-token latent tiles in shared memory shared by 4 query heads, online softmax";
  }
  pacheck_device device() const override { return gpu::kGpuDevice; }
  Support supports(const MlaCase& mc) const override {
    const Case& c = mc.c;
    if (is_fp8(c.kv_dtype)) {
      if (c.q_dtype != c.out_dtype || (c.q_dtype != DType::bf16 && c.q_dtype != DType::f16))
        return Support::no("q_dtype and out_dtype must be equal and bf16 or f16 with an fp8 latent cache");
    } else if (c.q_dtype != c.kv_dtype || c.out_dtype != c.kv_dtype) {
      return Support::no("q_dtype, kv_dtype and out_dtype must match (or an fp8 cache with a 16-bit query)");
    }
    return Support::yes();
  }
  std::optional<std::function<bool(const MlaCell&)>> expected_failures() const override {
    if (!tail_fault_) return std::nullopt;
    return std::function<bool(const MlaCell&)>([](const MlaCell& cell) { return mla_poisons_v_tail(cell); });
  }
  void run(const pacheck_kernel_args& a, const MlaDims& d) const override {
    const gpu::LaunchResult r = gpu::launch_mla_decode(a, d.kv_lora_rank, d.v_head_size, tail_fault_);
    if (!r.ok()) throw KernelError(r.error, r.fatal);
  }

 private:
  bool tail_fault_;
};

}  // namespace

std::vector<MlaKernelPtr> gpu_mla_kernels() {
  return {std::make_shared<GpuMlaDecode>(false), std::make_shared<GpuMlaDecode>(true)};
}

}  // namespace pacheck
