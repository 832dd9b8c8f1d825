// Element offsets in the paged KV-cache layouts. Header-only and host/device callable, so CPU kernels,
// GPU kernels and the pager agree on one definition.
#pragma once

#include <cstdint>

#include "pacheck/kernel_abi.h"

#if defined(__CUDACC__) || defined(__HIPCC__)
#define PACHECK_HD __host__ __device__ __forceinline__
#else
#define PACHECK_HD inline
#endif

namespace pacheck {

/// Strides (elements) of the key and value caches for `layout`, as carried in pacheck_kernel_args.
/// x = 16 / kv element size packs the vllm key cache; it is ignored by nhd/hnd.
struct CacheStrides {
  std::int64_t k[5] = {0, 0, 0, 0, 0};
  std::int64_t v[5] = {0, 0, 0, 0, 0};
};

PACHECK_HD CacheStrides make_strides(pacheck_layout layout, int num_kv_heads, int head_size, int block_size,
                                     int x) {
  CacheStrides st;
  const std::int64_t G = num_kv_heads, D = head_size, B = block_size;
  switch (layout) {
    case PACHECK_LAYOUT_VLLM:
      // K [blocks, G, D/x, B, x]; V [blocks, G, D, B]
      st.k[4] = 1; st.k[3] = x; st.k[2] = B * x; st.k[1] = (D / x) * B * x; st.k[0] = G * D * B;
      st.v[3] = 1; st.v[2] = B; st.v[1] = D * B; st.v[0] = G * D * B;
      break;
    case PACHECK_LAYOUT_NHD:
      // [blocks, B, G, D]
      st.k[3] = st.v[3] = 1; st.k[2] = st.v[2] = D; st.k[1] = st.v[1] = G * D; st.k[0] = st.v[0] = B * G * D;
      break;
    case PACHECK_LAYOUT_HND:
      // [blocks, G, B, D]
      st.k[3] = st.v[3] = 1; st.k[2] = st.v[2] = D; st.k[1] = st.v[1] = B * D; st.k[0] = st.v[0] = G * B * D;
      break;
    case PACHECK_LAYOUT_AITER:
      // K as VLLM [blocks, G, D/x, B, x]; V shuffled [blocks, G, B/16, D, 16] (block_size % 16 == 0)
      st.k[4] = 1; st.k[3] = x; st.k[2] = B * x; st.k[1] = (D / x) * B * x; st.k[0] = G * D * B;
      st.v[4] = 1; st.v[3] = 16; st.v[2] = D * 16; st.v[1] = B * D; st.v[0] = G * D * B;
      break;
  }
  return st;
}

/// Offset (elements) of key element d of slot `slot` of physical block `block`, KV head g.
PACHECK_HD std::int64_t key_offset(pacheck_layout layout, const std::int64_t* ks, int x, std::int64_t block,
                                   int g, int slot, int d) {
  switch (layout) {
    case PACHECK_LAYOUT_VLLM: return block * ks[0] + g * ks[1] + (d / x) * ks[2] + slot * ks[3] + (d % x) * ks[4];
    case PACHECK_LAYOUT_NHD: return block * ks[0] + slot * ks[1] + g * ks[2] + d * ks[3];
    case PACHECK_LAYOUT_HND: return block * ks[0] + g * ks[1] + slot * ks[2] + d * ks[3];
    case PACHECK_LAYOUT_AITER:
      return block * ks[0] + g * ks[1] + (d / x) * ks[2] + slot * ks[3] + (d % x) * ks[4];
  }
  return 0;
}

/// Offset (elements) of value element d of slot `slot` of physical block `block`, KV head g.
PACHECK_HD std::int64_t value_offset(pacheck_layout layout, const std::int64_t* vs, std::int64_t block, int g,
                                     int slot, int d) {
  switch (layout) {
    case PACHECK_LAYOUT_VLLM: return block * vs[0] + g * vs[1] + d * vs[2] + slot * vs[3];
    case PACHECK_LAYOUT_NHD: return block * vs[0] + slot * vs[1] + g * vs[2] + d * vs[3];
    case PACHECK_LAYOUT_HND: return block * vs[0] + g * vs[1] + slot * vs[2] + d * vs[3];
    case PACHECK_LAYOUT_AITER:  // slot t is group t / 16, lane t % 16
      return block * vs[0] + g * vs[1] + (slot / 16) * vs[2] + d * vs[3] + (slot % 16) * vs[4];
  }
  return 0;
}

/// Index (entries, not bytes) of slot `slot` of physical block `block`, KV head g, in a per-slot fp8 scale
/// table [num_blocks, num_kv_heads, block_size] fp32 (PACHECK_SCALE_FORM_PER_SLOT, kernel_abi.h): indexed by
/// the PHYSICAL block id, (block * num_kv_heads + g) * block_size + slot, in 64 bits. The pager, the CPU
/// kernels and the GPU kernels all index the tables through this one function.
PACHECK_HD std::int64_t slot_scale_offset(std::int64_t block, int num_kv_heads, int block_size, int g, int slot) {
  return (block * num_kv_heads + g) * block_size + slot;
}

}  // namespace pacheck
