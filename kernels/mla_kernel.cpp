#include "kernels/mla_kernel.hpp"

namespace pacheck {

pacheck_kernel_args make_mla_args(const MlaCase& mc, const PagedCache& pc, const void* query, const void* latent_cache,
                                  const std::int32_t* block_tables, const std::int32_t* seq_lens, void* out,
                                  const std::int32_t* query_start_loc) {
  mc.validate();
  pacheck_kernel_args a = make_args(mc.c, pc, query, latent_cache, latent_cache, block_tables, seq_lens, out, nullptr,
                                    nullptr, nullptr, nullptr, query_start_loc);
  for (int i = 0; i < 5; ++i) a.v_strides[i] = a.k_strides[i];
  a.v_scale = a.k_scale;
  a.out_stride_head = mc.m.v_head_dim;
  a.out_stride_seq = static_cast<std::int64_t>(mc.c.num_heads) * mc.m.v_head_dim;
  return a;
}

}  // namespace pacheck
