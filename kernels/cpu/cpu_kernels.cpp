// The built-in CPU kernels: faithful models of real paged-attention decode designs, including negative
// controls, one file each in kernels/cpu, registered by the table below.
//
// Every kernel normalises the softmax weights before P.V (out = sum_t (p_t / sum p) V_t, a convex
// combination, as vLLM's kernels and the GPU kernels do): an accumulator of unnormalised p x V overflows
// fp32 to Inf when a few V near the dtype's limit (bf16/f32 up to 3.4e38) tie at the max logit, where the
// output itself is finite (docs/PROPERTIES.md, Findings).
// Every kernel reads fp8 caches (e4m3fn, e4m3fnuz, e5m2) as decode(code) * scale of the KV head, in fp32:
// the product the oracle's pre-paging values were made with (oracle/tensors.hpp).
#include "faults/inject.hpp"
#include "kernels/kernel.hpp"

namespace pacheck {

// Factories of the kernels' files (make_cpu_split_kv and make_cpu_scale_fault are public: kernel.hpp).
KernelPtr make_cpu_reference(bool head0_scales);  // reference.cpp
KernelPtr make_cpu_vector_v(bool mask_v);         // vector_v.cpp
KernelPtr make_cpu_tf32();                        // tf32.cpp

void register_cpu_kernels(Registry& r) {
  // One row per kernel, in the order `pacheck list kernels` and every report show them.
  r.add(make_cpu_reference(/*head0_scales=*/false));  // cpu.reference
  r.add(make_cpu_vector_v(/*mask_v=*/false));         // cpu.vector_v: NEGATIVE CONTROL (V tail unmasked)
  r.add(make_cpu_vector_v(/*mask_v=*/true));          // cpu.vector_v_masked
  r.add(make_cpu_split_kv(512));                      // cpu.split_kv
  r.add(make_cpu_reference(/*head0_scales=*/true));   // cpu.fp8_head0_scale: NEGATIVE CONTROL
  r.add(make_cpu_scale_fault("cpu.fp8_scale_fault",   // NEGATIVE CONTROL: the last KV head's scales as 1
                             ScaleFault{Target::kv, -1, 1.0f}));
  r.add(make_cpu_tf32());                             // cpu.tf32: TF32 operands for f32 dots (declared)
}

}  // namespace pacheck
