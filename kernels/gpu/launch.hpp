// Host entry points of the GPU kernels (kernels/gpu/*.cu). Plain C++17 over the C ABI struct, so the .cu
// files see no project C++20 headers (and no Eigen: see docs/device-notes.md); gpu_kernels.cpp wraps them
// as pacheck::Kernel objects and turns a failed LaunchResult into a KernelError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "pacheck/kernel_abi.h"

namespace pacheck::gpu {

/// Outcome of a launch: empty `error` on success; otherwise the runtime's message, and `fatal` when the
/// error is sticky (illegal address and the like: the device context is lost).
struct LaunchResult {
  std::string error;
  bool fatal = false;
  bool ok() const { return error.empty(); }
};

/// Device kind of the GPU kernels and backend of this build: HIP for the TUs hipcc compiles and for the host
/// TUs of the HIP library (PACHECK_GPU_HIP), CUDA otherwise.
#if defined(PACHECK_GPU_HIP) || defined(__HIPCC__)
inline constexpr pacheck_device kGpuDevice = PACHECK_DEVICE_HIP;
#else
inline constexpr pacheck_device kGpuDevice = PACHECK_DEVICE_CUDA;
#endif

/// Tokens per partition of gpu.paged_v2 (vLLM's PARTITION_SIZE).
inline constexpr int kPagedV2PartitionSize = 512;

/// vLLM-style paged attention over the `vllm` or `aiter` layout (csrc/attention paged_attention_v1/v2 design):
/// one thread block per (sequence, query head[, partition]), logits of the block's tokens in shared memory.
///  - partition_size == 0: v1, one partition covering the whole context (logits of the longest possible
///    context, max_blocks_per_seq * block_size, must fit in shared memory: see paged_v1_max_tokens).
///  - partition_size > 0: v2, split-KV partitions of that many tokens (a multiple of block_size) write
///    partial outputs, max logits and exp sums to scratch, merged by a second kernel.
///  - zero_v_tail == false builds the planted fault: the V vector that straddles seq_len is used as
///    loaded, so a NaN/Inf in the unwritten tail of the final block reaches P.V as 0 * NaN.
///  - half_products: with a 16-bit q/out dtype, each probability and each p x v product is rounded to that
///    dtype before the fp32 sum (vLLM's half2 dot()); f32 runs as without it.
///  - scale_unmasked (v1 with zero_v_tail only) builds gpu.slot_scale_unmasked: the straddling V vector's
///    codes are zeroed past seq_len, but every lane's per-slot V scale entry is folded into its p, so a
///    NaN/Inf entry of an unwritten slot reaches P.V as 0 x NaN. Without per-slot tables it is gpu.paged_v1.
/// Dtypes: q == kv == out in {f32, f16, bf16}, or an fp8 kv_dtype (e4m3fn, e4m3fnuz, e5m2; block_size >= 16)
/// with q == out in {bf16, f16}, dequantised with k_scales_per_slot / v_scales_per_slot (per token, by
/// physical block id) when given, else k_scales_per_head[g] / v_scales_per_head[g] when given, else k_scale /
/// v_scale. Layouts: vllm, and aiter with block_size a multiple of 16. Anything else is an error naming the
/// field.
LaunchResult launch_paged_attention(const pacheck_kernel_args& a, int partition_size, bool zero_v_tail,
                                    bool half_products = false, bool scale_unmasked = false);

/// Test hook of the fp8 cache path: decodes `n` fp8 codes (a multiple of 16) of encoding `kv_dtype`
/// (PACHECK_DTYPE_FP8_*) from device memory `codes` (16-byte aligned) into `n` fp32 values at device memory
/// `out`, with the 16-byte load + expand16 path the paged kernels use (kernels/gpu/fp8.hpp), on `stream`.
/// Errors: n not a positive multiple of 16, misaligned codes, a dtype that is not fp8, a launch failure.
LaunchResult decode_fp8_codes(pacheck_dtype kv_dtype, const void* codes, float* out, int n, void* stream);

/// Longest context (tokens, counted as max_blocks_per_seq * block_size) gpu.paged_v1 holds in shared
/// memory for `head_size` on the current device (the H200's 227 KiB opt-in when no device is present).
int paged_v1_max_tokens(int head_size);

/// Warp-split decode over the `nhd` layout (FlashDecoding-style split-KV with an online softmax per warp).
/// gqa_fused == false: one block per (sequence, query head, partition); true: one block per (sequence, KV
/// head, partition, tile of up to 8 query heads of the group), each K/V row loaded once for the tile.
LaunchResult launch_warp_split(const pacheck_kernel_args& a, bool gqa_fused);

/// Tokens per split-KV partition of the warp-split kernels. A constant of the build (not of the batch), so
/// a sequence's output does not depend on the other sequences of its batch. Settable for tuning runs.
int warp_split_partition_size();
void set_warp_split_partition_size(int tokens);

/// True when split-KV scratch is pre-filled with NaN before the partition kernels run, so a merge that reads
/// a partition never written shows as NaN: always in builds without NDEBUG, and when the environment sets
/// PACHECK_GPU_POISON_SCRATCH=1.
bool scratch_poison_enabled();

/// Fills `n` elements of `dtype` at device pointer `p` with values uniform in [-amplitude, amplitude]
/// drawn from a counter hash of (seed, index), on `stream`. For benchmarks, which must not run on zeros.
LaunchResult fill_uniform(void* p, std::size_t n, pacheck_dtype dtype, std::uint64_t seed, float amplitude,
                          void* stream);

}  // namespace pacheck::gpu
