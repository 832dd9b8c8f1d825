#include "paging/mla_pager.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace pacheck {

PagedCache page_mla(const MlaCase& mc, const PrePaging& p) {
  mc.validate();
  const Case& c = mc.c;
  const bool fp8 = is_fp8(c.kv_dtype);
  const std::size_t W = static_cast<std::size_t>(mc.m.row());
  if (p.k.size() != c.seq_lens.size() || (fp8 && p.k_codes.size() != p.k.size()))
    throw std::invalid_argument("page_mla: the pre-paging tensors carry no latent rows (or fp8 codes): use generate_mla()");
  PagedCache pc = empty_pool(c, /*value_cache=*/false);
  for (int s = 0; s < c.num_seqs(); ++s) {
    if (p.k[s].size() != static_cast<std::size_t>(c.seq_lens[s]) * W)
      throw std::invalid_argument(fmt::format("page_mla: sequence {} has {} latent values, seq_len*row = {}", s,
                                              p.k[s].size(), static_cast<std::size_t>(c.seq_lens[s]) * W));
    for (int t = 0; t < c.seq_lens[s]; ++t) {
      const int block = pc.block_tables[static_cast<std::size_t>(s) * pc.max_blocks_per_seq + t / c.block_size];
      const int slot = t % c.block_size;
      for (std::size_t i = 0; i < W; ++i) {
        const std::size_t src = t * W + i;
        const std::int64_t dst = pc.key_offset(block, 0, slot, static_cast<int>(i));
        if (fp8)
          store_bits(pc.key_cache.data(), dst, c.kv_dtype, p.k_codes[s][src]);
        else
          store(pc.key_cache.data(), dst, c.kv_dtype, p.k[s][src]);
      }
    }
  }
  return pc;
}

std::vector<float> gather_mla(const PagedCache& pc, int s) {
  const int len = pc.seq_lens[s], W = pc.head_size;
  std::vector<float> rows(static_cast<std::size_t>(len) * W);
  for (int t = 0; t < len; ++t) {
    const int block = pc.block_tables[static_cast<std::size_t>(s) * pc.max_blocks_per_seq + t / pc.block_size];
    for (int i = 0; i < W; ++i) {
      float v = load(pc.key_cache.data(), pc.key_offset(block, 0, t % pc.block_size, i), pc.kv_dtype);
      if (is_fp8(pc.kv_dtype)) v *= pc.k_scales[0];
      rows[static_cast<std::size_t>(t) * W + i] = v;
    }
  }
  return rows;
}

}  // namespace pacheck
