// Host entry point of the GPU MLA decode kernel (kernels/gpu/mla_decode.cu). Plain C++17 over the C ABI struct,
// as launch.hpp; kernels/gpu/mla_kernels.cpp wraps it as MlaKernel objects.
#pragma once

#include "kernels/gpu/launch.hpp"

namespace pacheck::gpu {

/// Paged MLA decode (gpu.mla_decode; with `tail_fault`, its negative-control twin gpu.mla_decode_tail_fault,
/// which loads the final block's tail into P.V): `a` describes the latent cache as kernels/mla_kernel.hpp's
/// MlaDims says (layout nhd, num_kv_heads 1, head_size = the row, value_cache == key_cache, out
/// [num_query_tokens, num_heads, v_head_size]), kv_lora_rank and v_head_size its MLA dimensions. Dtypes: query,
/// cache and output one of f32/f16/bf16, or an fp8 cache (per-tensor k_scale) with query == output in {bf16,
/// f16}; any block_size; head_size up to 1024; several query tokens per sequence (query_start_loc); no other
/// attention variant. Anything else is an error naming the field.
LaunchResult launch_mla_decode(const pacheck_kernel_args& a, int kv_lora_rank, int v_head_size, bool tail_fault);

}  // namespace pacheck::gpu
