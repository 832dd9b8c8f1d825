// The built-in CPU kernels: faithful models of real paged-attention decode designs, including negative
// controls, one file each in kernels/cpu, registered by the table below.
//
// cpu.reference, cpu.vector_v*, cpu.split_kv normalise the softmax weights before P.V (a convex
// combination, as vLLM's CUDA kernels do); the panel below does not (cpu.online, cpu.two_pass,
// cpu.split_kv_lse, cpu.p_in_v_dtype accumulate unnormalised p x V, at most seq_len x max|V|), and the
// checks must accept both: the extreme distribution bounds V so that no such sum overflows fp32, and the
// opt-in `overflow` property tests the range beyond (docs/PROPERTIES.md, Domains).
// Every kernel reads fp8 caches (e4m3fn, e4m3fnuz, e5m2) as decode(code) * scale of the KV head, in fp32:
// the product the oracle's pre-paging values were made with (oracle/tensors.hpp).
#include "faults/inject.hpp"
#include "kernels/kernel.hpp"

namespace pacheck {

// Factories of the kernels' files (make_cpu_split_kv and make_cpu_scale_fault are public: kernel.hpp).
KernelPtr make_cpu_reference(bool head0_scales);  // reference.cpp
KernelPtr make_cpu_fixed_scale();                 // reference.cpp
KernelPtr make_cpu_vector_v(bool mask_v);         // vector_v.cpp
KernelPtr make_cpu_tf32();                        // tf32.cpp
KernelPtr make_cpu_online();                      // online.cpp
KernelPtr make_cpu_two_pass();                    // two_pass.cpp
KernelPtr make_cpu_split_kv_lse();                // split_kv_lse.cpp
KernelPtr make_cpu_half_products();               // half_products.cpp
KernelPtr make_cpu_p_in_v_dtype();                // p_in_v_dtype.cpp
KernelPtr make_cpu_softcap_ratio();               // variant_controls.cpp
KernelPtr make_cpu_window_scratch();              // variant_controls.cpp
KernelPtr make_cpu_offset32(bool is_signed);      // offset32.cpp
KernelPtr make_cpu_qlen_no_causal();              // variant_controls.cpp
KernelPtr make_cpu_slot_scale_unmasked();         // slot_scale_unmasked.cpp
KernelPtr make_cpu_sentinel_max();                // logit_controls.cpp
KernelPtr make_cpu_softmax_no_max();              // logit_controls.cpp
KernelPtr make_cpu_carried_max();                 // logit_controls.cpp
KernelPtr make_cpu_p_f16_ftz();                   // dtype_controls.cpp
KernelPtr make_cpu_e4m3_ieee();                   // dtype_controls.cpp
KernelPtr make_cpu_slot_scale_nhd();              // dtype_controls.cpp
KernelPtr make_cpu_replay_output();               // state_controls.cpp
KernelPtr make_cpu_stale_max();                   // state_controls.cpp

void register_cpu_kernels(Registry& r) {
  // One row per kernel, in the order `pacheck list kernels` and every report show them.
  r.add(make_cpu_reference(/*head0_scales=*/false));  // cpu.reference
  r.add(make_cpu_vector_v(/*mask_v=*/false));         // cpu.vector_v: NEGATIVE CONTROL (V tail unmasked)
  r.add(make_cpu_vector_v(/*mask_v=*/true));          // cpu.vector_v_masked
  r.add(make_cpu_split_kv(512));                      // cpu.split_kv
  // The honest panel (fault-classes.md section 9): designs other people's correct kernels use, each
  // written as that design does it, never tuned to the checks; a check that fails one of them is wrong.
  r.add(make_cpu_online());              // cpu.online: FlashAttention-2 / Triton decode, divided at the end
  r.add(make_cpu_two_pass());            // cpu.two_pass: unnormalised P.V sum, divided at the end
  r.add(make_cpu_split_kv_lse());        // cpu.split_kv_lse: partitions merged through their LSE
  r.add(make_cpu_split_kv(512, /*partials_in_out_dtype=*/true));  // cpu.split_kv_tmp_out: vLLM v2's tmp_out
  r.add(make_cpu_half_products());       // cpu.half_products: P.V products rounded to f16/bf16 (vLLM CUDA)
  r.add(make_cpu_p_in_v_dtype());        // cpu.p_in_v_dtype: P rounded to V's dtype (vLLM Triton)
  r.add(make_cpu_tf32());                // cpu.tf32: TF32 operands for f32 dots (declared; Triton tl.dot)
  r.add(make_cpu_reference(/*head0_scales=*/true));   // cpu.fp8_head0_scale: NEGATIVE CONTROL
  r.add(make_cpu_scale_fault("cpu.fp8_scale_fault",   // NEGATIVE CONTROL: the last KV head's scales as 1
                             ScaleFault{Target::kv, -1, 1.0f}));
  r.add(make_cpu_fixed_scale());  // cpu.fixed_scale: NEGATIVE CONTROL (1/sqrt(head_size), not the passed scale)
  // Attention-variant controls (issue 19): each must fail its variant's cells.
  r.add(make_cpu_softcap_ratio());    // cpu.softcap_ratio: NEGATIVE CONTROL (soft cap as e^x ratio, vLLM #56578)
  r.add(make_cpu_window_scratch());   // cpu.window_scratch: NEGATIVE CONTROL (unwritten split scratch, PR #47188)
  // High physical block ids (issue 18): block_id x stride in 32 bits (FlashInfer #3130, llama.cpp #24912).
  r.add(make_cpu_offset32(/*is_signed=*/true));    // cpu.int32_offset: NEGATIVE CONTROL (past 2^31 elements)
  r.add(make_cpu_offset32(/*is_signed=*/false));   // cpu.uint32_offset: NEGATIVE CONTROL (past 2^32 elements)
  r.add(make_cpu_qlen_no_causal());   // cpu.qlen_no_causal: NEGATIVE CONTROL (no causal mask among query tokens)
  // Per-slot fp8 scales (seed 002): the unwritten slots' scale entries reach P.V.
  r.add(make_cpu_slot_scale_unmasked());  // cpu.slot_scale_unmasked: NEGATIVE CONTROL (V scales unmasked)
  // Logits far from zero (issue 45): caught on the offset distributions' cells (far_below, far_above,
  // mixed_scales) and the extreme distribution's.
  r.add(make_cpu_sentinel_max());    // cpu.sentinel_max: NEGATIVE CONTROL (running max from -5e4, FlashInfer #4450)
  r.add(make_cpu_softmax_no_max());  // cpu.softmax_no_max: NEGATIVE CONTROL (exp(s) without the max)
  r.add(make_cpu_carried_max());     // cpu.carried_max: NEGATIVE CONTROL (max carried across sequences)
  // Dtypes and scale tables (issue 45).
  r.add(make_cpu_p_f16_ftz());       // cpu.p_f16_ftz: NEGATIVE CONTROL (P to f16 with flush-to-zero)
  r.add(make_cpu_e4m3_ieee());       // cpu.e4m3_ieee: NEGATIVE CONTROL (e4m3fn's exponent 15 read as Inf/NaN)
  r.add(make_cpu_slot_scale_nhd());  // cpu.slot_scale_nhd: NEGATIVE CONTROL (per-slot tables read token-major)
  // State across calls (issue 45): fail where `run` reuses a worker's buffers after a contrasting case.
  r.add(make_cpu_replay_output());   // cpu.replay_output: NEGATIVE CONTROL (output replayed for the same addresses)
  r.add(make_cpu_stale_max());       // cpu.stale_max: NEGATIVE CONTROL (running max kept from the previous call)
}

}  // namespace pacheck
