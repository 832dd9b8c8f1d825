// The MLA pager: an MLA case's latent rows written into one paged latent cache.
//
// The layouts MLA decode kernels read are one layout: vLLM's MLA cache [num_blocks, block_size, row]
// (concat_and_cache_mla; its Triton MLA decode, CUTLASS MLA at 128, AITER MLA at page size 1) and FlashMLA's
// k_cache [num_blocks, 64, 1, row] hold latent value i of slot `slot` of physical block b at
// (b * block_size + slot) * row + i: the nhd layout of one KV head (paging/layout.hpp), which is what
// page_mla() writes. tests/test_mla.cpp checks both views' offsets against nhd's for every element.
#pragma once

#include <cstdint>
#include <vector>

#include "core/mla.hpp"
#include "paging/pager.hpp"

namespace pacheck {

/// Offset (elements) of latent value i of slot `slot` of physical block `block` in vLLM's
/// [num_blocks, block_size, row] view of the latent cache.
inline std::int64_t mla_pool_offset(int block_size, int row, std::int64_t block, int slot, int i) {
  return (block * block_size + slot) * static_cast<std::int64_t>(row) + i;
}
/// The same element in FlashMLA's [num_blocks, page_block_size, 1, row] view (KV head index 0).
inline std::int64_t flashmla_offset(int page_block_size, int row, std::int64_t block, int slot, int i) {
  const std::int64_t head = 0, heads = 1;
  return ((block * page_block_size + slot) * heads + head) * row + i;
}

/// Pages the latent rows of `p` (generate_mla) into a fresh pool for `mc`: empty_pool(mc.c) without a value
/// cache, key_cache [num_blocks, block_size, 1, row] in kv_dtype (fp8: the codes of p.k_codes verbatim, with
/// the per-tensor k_scale in k_scales), block tables, slot map, padding and high block ids as page() lays them
/// out. Kernels read V from the same cache: value_cache == key_cache (kernels/mla_kernel.hpp). Throws CaseError
/// for an invalid case, std::invalid_argument when `p` lacks the latent rows or (fp8) their codes.
PagedCache page_mla(const MlaCase& mc, const PrePaging& p);

/// Reads sequence `s` back out of an MLA cache as [seq_len, row] fp32 (fp8 codes x the cache's scale): the
/// round trip page_mla -> gather_mla is exact (tests only).
std::vector<float> gather_mla(const PagedCache& cache, int s);

}  // namespace pacheck
