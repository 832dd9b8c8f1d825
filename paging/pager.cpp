#include "paging/pager.hpp"

#include <Random123/philox.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace pacheck {

std::string_view slot_class_name(SlotClass c) {
  switch (c) {
    case SlotClass::written: return "written";
    case SlotClass::tail: return "tail";
    case SlotClass::unused: return "unused";
    case SlotClass::padding_target: return "padding_target";
  }
  return "?";
}

std::int64_t PagedCache::elements() const {
  return static_cast<std::int64_t>(num_blocks) * num_kv_heads * head_size * block_size;
}

std::int64_t PagedCache::key_offset(int block, int g, int slot, int d) const {
  return pacheck::key_offset(static_cast<pacheck_layout>(layout), strides.k, x, block, g, slot, d);
}

std::int64_t PagedCache::value_offset(int block, int g, int slot, int d) const {
  return pacheck::value_offset(static_cast<pacheck_layout>(layout), strides.v, block, g, slot, d);
}

std::vector<std::int64_t> PagedCache::class_counts() const {
  std::vector<std::int64_t> n(4, 0);
  for (SlotClass c : slot_map) ++n[static_cast<int>(c)];
  return n;
}

namespace {

/// Fisher-Yates over [0, n) with Philox draws keyed by the seed: the same permutation on every
/// platform and standard library (std::shuffle's algorithm is implementation-defined).
std::vector<int> permutation(int n, std::uint64_t seed) {
  std::vector<int> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  r123::Philox4x32 rng;
  r123::Philox4x32::key_type key{{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)}};
  for (int i = n - 1; i > 0; --i) {
    r123::Philox4x32::ctr_type ctr{{0x9a6e5u, static_cast<std::uint32_t>(i), 0, 0}};
    const std::uint64_t r = (static_cast<std::uint64_t>(rng(ctr, key)[0]) << 32) | rng(ctr, key)[1];
    std::swap(perm[i], perm[static_cast<int>(r % static_cast<std::uint64_t>(i + 1))]);
  }
  return perm;
}

/// The live blocks of a sparse pool (PagedCache::resident_blocks): the window [first, num_blocks), the
/// block below it, the blocks a 32-bit wrapped offset of a window block lands on, block 0, the last block,
/// an explicit padding target and 8 blocks below the window drawn from the seed. Ascending, unique.
std::vector<int> resident_blocks(const PagedCache& pc, int first, int padding_target, std::uint64_t seed) {
  std::vector<int> r;
  for (int b = std::max(0, first - 1); b < pc.num_blocks; ++b) r.push_back(b);
  const std::int64_t E = pc.strides.k[0];  // elements per block; v[0] is the same in every layout
  constexpr std::int64_t k2to32 = std::int64_t{1} << 32;
  for (int b = first; b < pc.num_blocks; ++b) {
    const std::int64_t off = b * E;
    if (off + E <= k2to32) continue;
    // Every element of the block, its offset taken mod 2^32 (uint32 arithmetic; int32 lands there too
    // whenever the wrapped value is below 2^31).
    for (std::int64_t e = off; e < off + E; e += E - 1 > 0 ? E - 1 : 1) {
      const std::int64_t w = e % k2to32;
      if (e >= k2to32 && w / E < pc.num_blocks) r.push_back(static_cast<int>(w / E));
    }
  }
  r.push_back(0);
  r.push_back(pc.num_blocks - 1);
  if (padding_target >= 0) r.push_back(padding_target);
  if (first > 1) {
    r123::Philox4x32 rng;
    r123::Philox4x32::key_type key{{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)}};
    for (std::uint32_t i = 0; i < 8; ++i) {
      r123::Philox4x32::ctr_type ctr{{0x5a3b1u, i, 0, 0}};
      r.push_back(static_cast<int>(rng(ctr, key)[0] % static_cast<std::uint32_t>(first - 1)));
    }
  }
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

}  // namespace

PagedCache empty_pool(const Case& c, bool value_cache) {
  c.validate();
  PagedCache pc;
  pc.layout = c.layout;
  pc.kv_dtype = c.kv_dtype;
  pc.block_size = c.block_size;
  pc.num_kv_heads = c.num_kv_heads;
  pc.head_size = c.head_size;
  pc.x = layout_vector_width(Layout::vllm, c.kv_dtype);
  int longest = 0;
  for (int s = 0; s < c.num_seqs(); ++s) longest = std::max(longest, c.blocks_for(s));
  const Case::PoolPlan plan = c.pool_plan();
  const int needed = static_cast<int>(plan.needed), first = static_cast<int>(plan.window_first);
  pc.num_blocks = static_cast<int>(plan.num_blocks);
  pc.max_blocks_per_seq = longest + c.padding_columns;
  pc.strides = make_strides(static_cast<pacheck_layout>(c.layout), c.num_kv_heads, c.head_size, c.block_size, pc.x);
  pc.k_scales = c.k_scale.resolve(c.num_kv_heads);
  pc.v_scales = c.v_scale.resolve(c.num_kv_heads);
  pc.k_per_head = c.k_scale.per_head();
  pc.v_per_head = c.v_scale.per_head();

  const std::size_t bytes = static_cast<std::size_t>(pc.elements()) * dtype_size(c.kv_dtype);
  const bool sparse = c.high_block_ids != 0;
  pc.key_cache = PoolBuffer(bytes, sparse);
  if (value_cache) pc.value_cache = PoolBuffer(bytes, sparse);
  pc.slot_map.assign(static_cast<std::size_t>(pc.num_blocks) * c.block_size, SlotClass::unused);

  // The blocks of the window [first, num_blocks): all of a dense pool, the high window of a sparse one.
  std::vector<int> perm = permutation(pc.num_blocks - first, c.seed);
  for (int& b : perm) b += first;
  pc.padding_block = c.padding_target >= 0 ? c.padding_target : perm[needed];  // first spare by default
  if (sparse) {
    pc.resident_blocks = resident_blocks(pc, first, c.padding_target, c.seed);
    const std::size_t block_bytes = static_cast<std::size_t>(pc.strides.k[0]) * dtype_size(c.kv_dtype);
    for (int b : pc.resident_blocks) {
      pc.key_cache.mark_live(b * block_bytes, (b + 1) * block_bytes);
      if (value_cache) pc.value_cache.mark_live(b * block_bytes, (b + 1) * block_bytes);
    }
  }
  pc.block_tables.assign(static_cast<std::size_t>(c.num_seqs()) * pc.max_blocks_per_seq, pc.padding_block);
  pc.seq_lens.assign(c.seq_lens.begin(), c.seq_lens.end());
  pc.window_first.resize(c.seq_lens.size());
  for (int s = 0; s < c.num_seqs(); ++s) pc.window_first[s] = c.window_start(s);
  if (c.max_query_len() > 1)
    for (int s = 0; s <= c.num_seqs(); ++s) pc.query_start_loc.push_back(c.query_start(s));

  // Padding targets first: a used block that padding also names stays written/tail below.
  for (int slot = 0; slot < c.block_size; ++slot)
    pc.slot_map[static_cast<std::size_t>(pc.padding_block) * c.block_size + slot] = SlotClass::padding_target;
  int next = 0;
  for (int s = 0; s < c.num_seqs(); ++s)
    for (int j = 0; j < c.blocks_for(s); ++j) {
      const int block = perm[next++];
      pc.block_tables[static_cast<std::size_t>(s) * pc.max_blocks_per_seq + j] = block;
      for (int slot = 0; slot < c.block_size; ++slot)
        pc.slot_map[static_cast<std::size_t>(block) * c.block_size + slot] =
            j * c.block_size + slot < c.seq_lens[s] ? SlotClass::written : SlotClass::tail;
    }
  return pc;
}

PagedCache page(const Case& c, const PrePaging& p) {
  PagedCache pc = empty_pool(c);
  const bool fp8 = is_fp8(c.kv_dtype);
  const bool k_slot = fp8 && c.k_scale.per_slot(), v_slot = fp8 && c.v_scale.per_slot();
  if ((k_slot && p.k_slot_scales.size() != c.seq_lens.size()) || (v_slot && p.v_slot_scales.size() != c.seq_lens.size()))
    throw std::invalid_argument("page: per-slot scales but the pre-paging tensors carry none (use generate())");
  if (fp8 && (p.k_codes.size() != p.k.size() || p.v_codes.size() != p.v.size()))
    throw std::invalid_argument("page: fp8 kv_dtype but the pre-paging tensors carry no codes (use generate())");
  const std::size_t table = static_cast<std::size_t>(pc.num_blocks) * c.num_kv_heads * c.block_size;
  if (k_slot) pc.k_slot_scales.assign(table, 1.0f);
  if (v_slot) pc.v_slot_scales.assign(table, 1.0f);

  const int G = c.num_kv_heads, D = c.head_size;
  for (int s = 0; s < c.num_seqs(); ++s)
    for (int t = 0; t < c.seq_lens[s]; ++t) {
      const int block = pc.block_tables[static_cast<std::size_t>(s) * pc.max_blocks_per_seq + t / c.block_size];
      const int slot = t % c.block_size;
      for (int g = 0; g < G; ++g) {
        const std::size_t tg = static_cast<std::size_t>(t) * G + g;
        if (k_slot) pc.k_slot_scales[pc.slot_scale_index(block, g, slot)] = p.k_slot_scales[s][tg];
        if (v_slot) pc.v_slot_scales[pc.slot_scale_index(block, g, slot)] = p.v_slot_scales[s][tg];
      }
      for (int g = 0; g < G; ++g)
        for (int d = 0; d < D; ++d) {
          const std::size_t src = (static_cast<std::size_t>(t) * G + g) * D + d;
          if (fp8) {
            store_bits(pc.key_cache.data(), pc.key_offset(block, g, slot, d), c.kv_dtype, p.k_codes[s][src]);
            store_bits(pc.value_cache.data(), pc.value_offset(block, g, slot, d), c.kv_dtype, p.v_codes[s][src]);
            continue;
          }
          store(pc.key_cache.data(), pc.key_offset(block, g, slot, d), c.kv_dtype, p.k[s][src]);
          store(pc.value_cache.data(), pc.value_offset(block, g, slot, d), c.kv_dtype, p.v[s][src]);
        }
    }
  return pc;
}

std::pair<std::vector<float>, std::vector<float>> gather(const PagedCache& pc, int s) {
  const int len = pc.seq_lens[s], G = pc.num_kv_heads, D = pc.head_size;
  std::vector<float> k(static_cast<std::size_t>(len) * G * D), v(k.size());
  const bool fp8 = is_fp8(pc.kv_dtype);
  for (int t = 0; t < len; ++t) {
    const int block = pc.block_tables[static_cast<std::size_t>(s) * pc.max_blocks_per_seq + t / pc.block_size];
    const int slot = t % pc.block_size;
    for (int g = 0; g < G; ++g)
      for (int d = 0; d < D; ++d) {
        const std::size_t dst = (static_cast<std::size_t>(t) * G + g) * D + d;
        k[dst] = load(pc.key_cache.data(), pc.key_offset(block, g, slot, d), pc.kv_dtype);
        v[dst] = load(pc.value_cache.data(), pc.value_offset(block, g, slot, d), pc.kv_dtype);
        if (fp8) {  // the product the oracle's values were made with (tensors.cpp)
          k[dst] *= pc.k_scales[g];
          v[dst] *= pc.v_scales[g];
        }
      }
  }
  return {std::move(k), std::move(v)};
}

}  // namespace pacheck
