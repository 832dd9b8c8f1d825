#include "kernels/mla_kernel.hpp"

#include <fmt/format.h>

namespace pacheck {

namespace {

class MlaAsKernel final : public Kernel {
 public:
  explicit MlaAsKernel(MlaKernelPtr k) : k_(std::move(k)) {}
  std::string name() const override { return k_->name(); }
  std::string description() const override { return k_->description(); }
  pacheck_device device() const override { return k_->device(); }
  bool takes_mla() const override { return true; }
  unsigned variants() const override { return PACHECK_VARIANT_MULTI_QUERY; }
  std::vector<Layout> layouts() const override { return {Layout::nhd}; }
  Support supports(const Case& c) const override {
    if (!c.is_mla()) return Support::no(fmt::format("kv_lora_rank 0: {} is an MLA decode kernel", name()));
    return k_->supports(mla_case_of(c));
  }
  void run(const pacheck_kernel_args&) const override {
    throw KernelError(name() + " is an MLA kernel: it runs through run_case (the arguments lack the latent shape)");
  }
  void run_case(const pacheck_kernel_args& a, const Case& c) const override {
    k_->run(a, MlaDims{c.kv_lora_rank, c.v_head_dim});
  }
  std::optional<std::function<bool(const Cell&)>> expected_failures() const override {
    auto pred = k_->expected_failures();
    if (!pred) return std::nullopt;
    return [pred = *pred](const Cell& cell) { return cell.c.is_mla() && pred(MlaCell{mla_case_of(cell.c), cell.fault}); };
  }

 private:
  MlaKernelPtr k_;
};

}  // namespace

KernelPtr as_kernel(MlaKernelPtr k) { return std::make_shared<MlaAsKernel>(std::move(k)); }

pacheck_kernel_args make_mla_args(const MlaCase& mc, const PagedCache& pc, const void* query, const void* latent_cache,
                                  const std::int32_t* block_tables, const std::int32_t* seq_lens, void* out,
                                  const std::int32_t* query_start_loc) {
  mc.validate();
  pacheck_kernel_args a = make_args(mc.c, pc, query, latent_cache, latent_cache, block_tables, seq_lens, out, nullptr,
                                    nullptr, nullptr, nullptr, query_start_loc);
  for (int i = 0; i < 5; ++i) a.v_strides[i] = a.k_strides[i];
  a.v_scale = a.k_scale;
  a.kv_lora_rank = mc.m.kv_lora_rank;  // ABI version 4: the latent shape, whatever mc.c's own fields say
  a.qk_rope_head_dim = mc.m.qk_rope_head_dim;
  a.v_head_dim = mc.m.v_head_dim;
  a.out_stride_head = mc.m.v_head_dim;
  a.out_stride_seq = static_cast<std::int64_t>(mc.c.num_heads) * mc.m.v_head_dim;
  return a;
}

}  // namespace pacheck
