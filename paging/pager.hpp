// The pager: writes pre-paging K/V into a paged KV cache and classifies every slot of the pool.
//
// Quick start: adding a cache layout
//  Add its row to layout_table() (core/case.cpp) and its element offset to paging/layout.hpp (host and
//  device callable, so the pager, CPU and GPU kernels share one definition); page() then writes it and
//  classifies slots as for every layout. Add it to tests/test_pager.cpp's layout loop (round trip via gather).
#pragma once

#include <cstdint>
#include <vector>

#include "paging/layout.hpp"
#include "paging/pool_buffer.hpp"
#include "core/case.hpp"
#include "oracle/tensors.hpp"

namespace pacheck {

/// What a slot of the pool holds. Faults target every class but `written`.
enum class SlotClass : std::uint8_t {
  written,        ///< a token of some sequence (slot < seq_len within its block)
  tail,           ///< unwritten slot of a sequence's final block (seq_len % block_size != 0)
  unused,         ///< slot of a block no sequence uses and no padding entry names
  padding_target, ///< slot of a block that block-table padding entries point at, not used by a sequence
};
std::string_view slot_class_name(SlotClass c);

/// A paged KV cache in host memory, with its block tables and slot map.
///  - key_cache / value_cache: raw bytes of kv_dtype in `layout` (shapes in include/pacheck/kernel_abi.h),
///    num_blocks = sum of blocks the sequences need + spare_blocks, or with Case::high_block_ids the pool up
///    to the end of the high window (Case::pool_plan()); such a pool is sparse (PoolBuffer): only the
///    blocks in `resident_blocks` are live, every other block reads as zero and takes no memory.
///  - block_tables: [num_seqs, max_blocks_per_seq] int32, max_blocks_per_seq = longest sequence's blocks +
///    padding_columns; entries past a sequence's last block point at padding_block.
///  - seq_lens: [num_seqs] int32.
///  - slot_map: [num_blocks, block_size], the class of each slot.
///  - k_scales, v_scales: [num_kv_heads] dequantisation scale of each KV head (fp8: the case's resolved
///    KvScale, per tensor = all equal; other dtypes: 1). k_per_head / v_per_head: kernels get the array
///    (pacheck_kernel_args::k_scales_per_head), else the scalar k_scale. Fault injection may change them.
struct PagedCache {
  Layout layout{};
  DType kv_dtype{};
  int num_blocks = 0, block_size = 0, num_kv_heads = 0, head_size = 0, x = 1;
  int max_blocks_per_seq = 0;
  int padding_block = -1;  ///< physical block padding entries name
  CacheStrides strides;
  PoolBuffer key_cache, value_cache;
  /// Sparse pools only (empty for a dense pool, whose every block is live): the physical blocks that are
  /// live in both caches, ascending. They are the window of used and spare blocks, the block just below
  /// it, the blocks a 32-bit wrapped offset (id x elements per block mod 2^32) of a window block lands on,
  /// block 0, the last block and 8 blocks drawn from the seed below the window. Faults poison the slots of
  /// their region in these blocks only (faults/inject.cpp); the rest of the pool stays zero.
  std::vector<int> resident_blocks;
  std::vector<std::int32_t> block_tables, seq_lens;
  std::vector<SlotClass> slot_map;
  std::vector<float> k_scales, v_scales;
  bool k_per_head = false, v_per_head = false;
  /// Per-slot scales (KvScale::slot, fp8): [num_blocks, num_kv_heads, block_size] fp32, entry (b, g, slot) at
  /// slot_scale_index(b, g, slot), indexed by physical block id: a written slot holds its token's scale
  /// (PrePaging::k_slot_scales), every other entry 1 until a `scales` fault poisons it. Empty otherwise.
  std::vector<float> k_slot_scales, v_slot_scales;
  std::size_t slot_scale_index(int block, int g, int slot) const {
    return static_cast<std::size_t>(slot_scale_offset(block, num_kv_heads, block_size, g, slot));
  }
  /// [num_seqs] the first key position some query row of each sequence sees (Case::window_start: that of
  /// its first query row, seq_len - query_len + 1 - W with a sliding window shorter than that, else 0). Keys
  /// before it are written but outside every row's window: the `window` fault region (faults/inject.cpp).
  std::vector<std::int32_t> window_first;
  /// [num_seqs + 1] int32, the ABI's query_start_loc (Case::query_start), when some sequence has several
  /// query tokens; empty for plain decode (kernels then get NULL and one query row per sequence).
  std::vector<std::int32_t> query_start_loc;

  std::int64_t elements() const;  ///< elements in each of key_cache and value_cache
  std::int64_t key_offset(int block, int g, int slot, int d) const;
  std::int64_t value_offset(int block, int g, int slot, int d) const;
  SlotClass slot_class(int block, int slot) const { return slot_map[static_cast<std::size_t>(block) * block_size + slot]; }
  bool sparse() const { return key_cache.sparse(); }
  /// Calls f(block) for every block that may hold data or poison: all of them in a dense pool,
  /// resident_blocks in a sparse one.
  template <typename F>
  void for_each_live_block(F&& f) const {
    if (!sparse()) {
      for (int b = 0; b < num_blocks; ++b) f(b);
    } else {
      for (int b : resident_blocks) f(b);
    }
  }
  /// Number of slots of each class (indexed by SlotClass).
  std::vector<std::int64_t> class_counts() const;
};

/// The pool of case `c` with no token written: the physical blocks (a permutation of the pool drawn from
/// c.seed, Philox; of the high window of c.pool_plan() with c.high_block_ids, the pool then sparse), block_tables,
/// seq_lens, the slot map, padding_block, the scales of `c`, window_first and query_start_loc, and zeroed caches:
/// key_cache, and value_cache when `value_cache` (an MLA pool holds one latent cache: paging/mla_pager.hpp).
/// page() writes a case's tokens into it. Throws CaseError if `c` is invalid.
PagedCache empty_pool(const Case& c, bool value_cache = true);

/// Pages `p` into a fresh pool for case `c` (empty_pool, then the tokens). Physical blocks are a permutation of the pool drawn from
/// c.seed (Philox), so logical and physical ids differ; unwritten slots are zero. With c.high_block_ids
/// the permutation is of the high window [window_first, num_blocks) of c.pool_plan() and the pool sparse. fp8 caches get the codes
/// of p.k_codes / p.v_codes verbatim. Throws CaseError if `c` is invalid, std::invalid_argument if an fp8
/// case's `p` has no codes.
PagedCache page(const Case& c, const PrePaging& p);

/// Reads sequence `s` back out of the cache as [seq_len, num_kv_heads, head_size] fp32, fp8 codes
/// dequantised with the cache's scales (tests only: the round trip page -> gather must be exact).
/// Returns {K, V}.
std::pair<std::vector<float>, std::vector<float>> gather(const PagedCache& cache, int s);

}  // namespace pacheck
