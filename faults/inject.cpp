#include "faults/inject.hpp"

#include <fmt/format.h>

#include <cstring>
#include <stdexcept>


namespace pacheck {

bool region_holds(Region r, SlotClass c, int block, int seq0_last) {
  switch (r) {
    case Region::others: return c == SlotClass::unused || (c == SlotClass::tail && block != seq0_last);
    case Region::tail: return c == SlotClass::tail;
    case Region::unused: return c == SlotClass::unused;
    case Region::padding: return c == SlotClass::padding_target;
    case Region::all: return c != SlotClass::written;
    case Region::window: return false;  // written slots chosen by position (inject_window)
    case Region::scales: return c != SlotClass::written;  // the scale entries of these slots (inject_scales)
  }
  return false;
}

int seq0_final_block(const PagedCache& pc) {
  if (pc.seq_lens.empty() || pc.seq_lens[0] <= 0 || pc.block_size <= 0) return -1;
  return pc.block_tables[static_cast<std::size_t>((pc.seq_lens[0] - 1) / pc.block_size)];
}

namespace {
/// The `window` region: the written slots of sequence s's keys 0 .. window_first[s] - 1.
std::int64_t inject_window(PagedCache& pc, std::uint32_t bits, bool to_k, bool to_v) {
  std::int64_t written = 0;
  for (std::size_t s = 0; s < pc.window_first.size(); ++s)
    for (int t = 0; t < pc.window_first[s]; ++t) {
      const int block = pc.block_tables[s * static_cast<std::size_t>(pc.max_blocks_per_seq) + t / pc.block_size];
      const int slot = t % pc.block_size;
      for (int g = 0; g < pc.num_kv_heads; ++g)
        for (int d = 0; d < pc.head_size; ++d) {
          if (to_k) store_bits(pc.key_cache.data(), pc.key_offset(block, g, slot, d), pc.kv_dtype, bits), ++written;
          if (to_v) store_bits(pc.value_cache.data(), pc.value_offset(block, g, slot, d), pc.kv_dtype, bits), ++written;
        }
    }
  return written;
}
}  // namespace

/// The `scales` region: the per-slot scale-table entries of every unwritten slot, as fp32 poison.
std::int64_t inject_scales(PagedCache& pc, const FaultSpec& f, bool to_k, bool to_v) {
  if ((to_k && pc.k_slot_scales.empty()) || (to_v && pc.v_slot_scales.empty()))
    throw std::invalid_argument(fmt::format("fault {}: the case has no per-slot {} scale table (ks=/vs=slotLO~HI)",
                                            f.id(), to_k && pc.k_slot_scales.empty() ? "K" : "V"));
  const std::uint32_t bits = poison_bits(f.poison, DType::f32);
  float value = 0;
  std::memcpy(&value, &bits, sizeof value);
  std::int64_t written = 0;
  for (int block = 0; block < pc.num_blocks; ++block)
    for (int slot = 0; slot < pc.block_size; ++slot) {
      if (pc.slot_class(block, slot) == SlotClass::written) continue;
      for (int g = 0; g < pc.num_kv_heads; ++g) {
        if (to_k) pc.k_slot_scales[pc.slot_scale_index(block, g, slot)] = value, ++written;
        if (to_v) pc.v_slot_scales[pc.slot_scale_index(block, g, slot)] = value, ++written;
      }
    }
  return written;
}

std::int64_t inject(PagedCache& pc, const FaultSpec& f) {
  if (f.clean()) return 0;
  if (f.region == Region::scales) return inject_scales(pc, f, f.target != Target::v, f.target != Target::k);
  const std::uint32_t bits = poison_bits(f.poison, pc.kv_dtype);
  const bool to_k = f.target != Target::v, to_v = f.target != Target::k;
  if (f.region == Region::window) return inject_window(pc, bits, to_k, to_v);
  std::int64_t written = 0;
  const int seq0_last = seq0_final_block(pc);
  // A sparse pool (high block ids) is poisoned in its live blocks only; the rest of it reads as zero.
  pc.for_each_live_block([&](int block) {
    for (int slot = 0; slot < pc.block_size; ++slot) {
      if (!region_holds(f.region, pc.slot_class(block, slot), block, seq0_last)) continue;
      for (int g = 0; g < pc.num_kv_heads; ++g)
        for (int d = 0; d < pc.head_size; ++d) {
          if (to_k) store_bits(pc.key_cache.data(), pc.key_offset(block, g, slot, d), pc.kv_dtype, bits), ++written;
          if (to_v) store_bits(pc.value_cache.data(), pc.value_offset(block, g, slot, d), pc.kv_dtype, bits), ++written;
        }
    }
  });
  return written;
}

std::string ScaleFault::id() const {
  return fmt::format("{}:scale={}@h{}", target_name(target), value, head < 0 ? std::string("last") : std::to_string(head));
}

void ScaleFault::apply(std::vector<float>& k, std::vector<float>& v) const {
  const auto set = [&](std::vector<float>& s) {
    const long g = head < 0 ? static_cast<long>(s.size()) - 1 : head;
    if (g >= 0 && g < static_cast<long>(s.size())) s[static_cast<std::size_t>(g)] = value;
  };
  if (target != Target::v) set(k);
  if (target != Target::k) set(v);
}

bool poisons_v_window(const Cell& cell, bool aligned_too) {
  const FaultSpec& f = cell.fault;
  if (!poison_is_nonfinite(f.poison) || f.target == Target::k || f.region != Region::window) return false;
  for (int s = 0; s < cell.c.num_seqs(); ++s) {
    const int first = cell.c.window_start(s);
    if (first > 0 && (aligned_too || first % cell.c.block_size != 0)) return true;
  }
  return false;
}

bool poisons_v_tail_or_window(const Cell& cell) { return poisons_v_tail(cell) || poisons_v_window(cell, true); }

bool poisons_v_slot_scale_tail(const Cell& cell) {
  const FaultSpec& f = cell.fault;
  return is_fp8(cell.c.kv_dtype) && cell.c.v_scale.per_slot() && poison_is_nonfinite(f.poison) &&
         f.target != Target::k && f.region == Region::scales && cell.c.straddles();
}

bool poisons_v_tail(const Cell& cell) {
  const FaultSpec& f = cell.fault;
  if (!poison_is_nonfinite(f.poison) || f.target == Target::k) return false;
  if (f.region == Region::tail || f.region == Region::all) return cell.c.straddles();
  // Seed 002: the V scale entries of the tail slots: a whole-block V reader multiplies p = 0 by code x NaN.
  if (f.region == Region::scales) return cell.c.straddles();
  if (f.region == Region::others) {  // the tails of sequences 1.. only
    const Case& c = cell.c;
    for (int s = 1; s < c.num_seqs(); ++s)
      if (c.seq_lens[static_cast<std::size_t>(s)] % c.block_size != 0) return true;
  }
  return false;
}

}  // namespace pacheck
