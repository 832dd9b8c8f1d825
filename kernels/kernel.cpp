#include "kernels/kernel.hpp"

#include <cctype>

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "kernels/mla_kernel.hpp"
#include "paging/pager.hpp"
#include "suites/suite.hpp"

namespace pacheck {

Registry& Registry::global() {
  static Registry* r = [] {
    auto* reg = new Registry;
    register_cpu_kernels(*reg);
    register_gpu_kernels(*reg);
    for (const std::vector<MlaKernelPtr>& mla : {cpu_mla_kernels(), gpu_mla_kernels()})
      for (const MlaKernelPtr& k : mla) reg->add(as_kernel(k));
    return reg;
  }();
  return *r;
}

void Registry::add(KernelPtr k) {
  if (!k) throw std::invalid_argument("kernel registry: null kernel");
  if (find(k->name())) throw std::invalid_argument("kernel registry: duplicate kernel name '" + k->name() + "'");
  kernels_.push_back(std::move(k));
}

KernelPtr Registry::find(const std::string& name) const {
  for (const auto& k : kernels_)
    if (k->name() == name) return k;
  return nullptr;
}

std::vector<KernelPtr> Registry::negative_controls(pacheck_device device) const {
  std::vector<KernelPtr> out;
  for (const auto& k : kernels_)
    if (k->is_negative_control() && k->device() == device) out.push_back(k);
  return out;
}

std::string kernel_name_problem(std::string_view name) {
  if (name.empty()) return "name is empty";
  if (name.size() > kMaxKernelNameLength) return fmt::format("name is longer than {} characters", kMaxKernelNameLength);
  auto shown = [](char ch) {
    const auto u = static_cast<unsigned char>(ch);
    return std::isprint(u) ? std::string(1, ch) : fmt::format("\\x{:02x}", u);
  };
  for (char ch : name) {
    if (std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-') continue;
    std::string printable;
    for (char c : name) printable += shown(c);
    return fmt::format("name '{}' has character '{}' (allowed: letters, digits, '.', '_', '-')", printable, shown(ch));
  }
  return {};
}

bool pairs_with(const Kernel& k, const Case& c, const CellKinds& kinds) { return pairs_with_kind(k.takes_mla(), c, kinds); }

Support cell_support(const Kernel& k, const Case& c) {
  if (c.is_mla() && !k.takes_mla())
    return Support::no(fmt::format("kv_lora_rank {}: {} reads multi-head K/V caches, not an MLA latent cache (mla={}+{})",
                                   c.kv_lora_rank, k.name(), c.kv_lora_rank, c.qk_rope_head_dim));
  if (!c.is_mla() && k.takes_mla())
    return Support::no(fmt::format("kv_lora_rank 0: {} is an MLA decode kernel and the case has no latent cache (no "
                                   "mla= token)",
                                   k.name()));
  return k.supports(c);
}

std::optional<Support> variant_decline(const Case& c, unsigned implemented, const std::string& kernel) {
  const unsigned missing = case_variants(c) & ~implemented;
  for (const CaseField& f : case_field_table())
    if (missing & f.variant_bit) {
      const std::string subject = f.decline_subject ? f.decline_subject(c) : fmt::format("{} {}", f.name, f.id_text(c));
      return Support::no(fmt::format("{}: {} {}", subject, kernel, f.variant_lacks));
    }
  return std::nullopt;
}

pacheck_kernel_args make_args(const Case& c, const PagedCache& pc, const void* query, const void* key_cache,
                              const void* value_cache, const std::int32_t* block_tables,
                              const std::int32_t* seq_lens, void* out, const float* k_scales_per_head,
                              const float* v_scales_per_head, const float* alibi_slopes, const float* sinks,
                              const std::int32_t* query_start_loc, const float* k_scales_per_slot,
                              const float* v_scales_per_slot) {
  pacheck_kernel_args a{};
  a.struct_size = sizeof(pacheck_kernel_args);
  set_case_fields(a, c);  // the case's own fields; what the paged cache holds and the buffers follow
  a.num_blocks = pc.num_blocks;
  a.max_blocks_per_seq = pc.max_blocks_per_seq;
  a.query = query;
  a.q_stride_head = c.head_size;
  a.q_stride_seq = static_cast<std::int64_t>(c.num_heads) * c.head_size;
  a.key_cache = key_cache;
  a.value_cache = value_cache;
  for (int i = 0; i < 5; ++i) {
    a.k_strides[i] = pc.strides.k[i];
    a.v_strides[i] = pc.strides.v[i];
  }
  a.block_tables = block_tables;
  a.block_tables_stride = pc.max_blocks_per_seq;
  a.seq_lens = seq_lens;
  a.out = out;
  a.out_stride_head = c.head_size;
  a.out_stride_seq = static_cast<std::int64_t>(c.num_heads) * c.head_size;
  if ((pc.k_per_head && !k_scales_per_head) || (pc.v_per_head && !v_scales_per_head))
    throw std::invalid_argument("make_args: the cache has per-KV-head scales but no device copy of them was given");
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  a.k_scale = pc.k_per_head ? kNaN : pc.k_scales.empty() ? 1.0f : pc.k_scales[0];
  a.v_scale = pc.v_per_head ? kNaN : pc.v_scales.empty() ? 1.0f : pc.v_scales[0];
  a.k_scales_per_head = pc.k_per_head ? k_scales_per_head : nullptr;
  a.v_scales_per_head = pc.v_per_head ? v_scales_per_head : nullptr;
  // Version 3: per-slot scale tables replace both the scalar and the per-head array.
  const bool k_slot = !pc.k_slot_scales.empty(), v_slot = !pc.v_slot_scales.empty();
  if ((k_slot && !k_scales_per_slot) || (v_slot && !v_scales_per_slot))
    throw std::invalid_argument("make_args: the cache has per-slot scale tables but no device copy of them was given");
  if (k_slot) a.k_scale = kNaN;
  if (v_slot) a.v_scale = kNaN;
  a.k_scales_per_slot = k_slot ? k_scales_per_slot : nullptr;
  a.v_scales_per_slot = v_slot ? v_scales_per_slot : nullptr;
  a.stream = nullptr;
  // Version 2: host-side lengths, and the query rows' offsets with several query tokens per sequence.
  a.seq_lens_host = pc.seq_lens.data();
  a.max_seq_len = pc.seq_lens.empty() ? 0 : *std::max_element(pc.seq_lens.begin(), pc.seq_lens.end());
  a.query_start_loc = nullptr;
  a.query_start_loc_host = nullptr;
  if (c.max_query_len() > 1) {
    if (!query_start_loc || pc.query_start_loc.size() != static_cast<std::size_t>(c.num_seqs()) + 1)
      throw std::invalid_argument("make_args: the case has several query tokens per sequence but no query_start_loc "
                                  "(device copy, or the cache's host copy) was given");
    a.query_start_loc = query_start_loc;
    a.query_start_loc_host = pc.query_start_loc.data();
  }
  if ((!c.alibi_slopes.is_default() && !alibi_slopes) || (!c.sinks.is_default() && !sinks))
    throw std::invalid_argument("make_args: the case has ALiBi slopes or sinks but no device copy of them was given");
  a.alibi_slopes = c.alibi_slopes.is_default() ? nullptr : alibi_slopes;
  a.sinks = c.sinks.is_default() ? nullptr : sinks;
  return a;
}

}  // namespace pacheck
