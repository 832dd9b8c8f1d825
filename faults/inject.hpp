// Fault injection: poison values written into the unwritten regions of a paged KV cache, and faults in
// the fp8 dequantisation scales a kernel is given.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/cell.hpp"
#include "core/fault.hpp"
#include "paging/pager.hpp"

namespace pacheck {

/// A fault in the fp8 dequantisation scales a kernel is given: the K, V or both scales of KV head `head`
/// (-1: the last KV head) replaced by `value`. 0 is a zero scale; 1 is the scale left out on one path;
/// anything else a wrong scale. The kernel is right and its inputs are wrong, so its output must differ
/// from the oracle: negative controls use it (kernels/cpu cpu.fp8_scale_fault, make_cpu_scale_fault).
/// Suite cells never carry it: every correct kernel would fail such a cell.
struct ScaleFault {
  Target target = Target::kv;
  int head = -1;
  float value = 1.0f;
  /// e.g. "K+V:scale=1@hlast", "V:scale=0@h2".
  std::string id() const;
  /// Applies the fault to per-KV-head scales k and v ([num_kv_heads] each); a head past the end is a no-op.
  void apply(std::vector<float>& k, std::vector<float>& v) const;
};

/// True when a slot of class `c` in physical block `block` belongs to the slot region `r` (tail, unused, padding,
/// all, others, and for `scales` every unwritten slot); `seq0_last` is sequence 0's final physical block
/// (seq0_final_block), whose tail `others` leaves clean. False for `window`, whose slots are chosen by key
/// position. inject() and the MLA injector (faults/mla_inject.hpp) poison exactly these slots.
bool region_holds(Region r, SlotClass c, int block, int seq0_last);
/// The physical block holding sequence 0's last token, or -1 for a cache without sequences.
int seq0_final_block(const PagedCache& cache);

/// Writes the fault into `cache` in place and returns the number of elements written (0 for a clean
/// spec, or when the case has no slot of that region, e.g. an aligned length and Region::tail, or a case
/// without a sliding window and Region::window). A sparse pool (Case::high_block_ids) is poisoned in its
/// live blocks only (PagedCache::resident_blocks: the used and spare window, the blocks a 32-bit wrapped
/// offset lands on, block 0, the last block and 8 sampled ones); every other block keeps reading as zero.
std::int64_t inject(PagedCache& cache, const FaultSpec& f);

/// True when a cell's fault puts a NaN or Inf into the unwritten tail of a final V block that a kernel
/// reading V in whole-block vectors would touch: a non-finite poison, in V (or K+V), in the tail (or all
/// unwritten slots, or their per-slot V scale entries: Region::scales), of a case with a straddling length;
/// or in Region::others, of a case where a sequence
/// other than sequence 0 straddles. The cells the tail-read negative controls
/// (cpu.vector_v, gpu.paged_v1_tail_fault) must fail.
bool poisons_v_tail(const Cell& cell);
/// True when a cell's fault puts a NaN or Inf into V (or K+V) outside a sliding window (Region::window) of
/// a case where some sequence's window edge falls inside a block (with `aligned_too`, any edge after key
/// 0): a kernel that reads V in whole-block vectors from the edge's block (cpu.vector_v: the first window
/// block's slots before the edge; with aligned_too, a kernel that reads every block with p = 0 before the
/// edge, as gpu.paged_v1_tail_fault does) multiplies 0 by it.
bool poisons_v_window(const Cell& cell, bool aligned_too);
/// poisons_v_tail or poisons_v_window(cell, true): the cells of a kernel that reads every V block from key
/// 0 and zeroes no lane (gpu.paged_v1_tail_fault).
bool poisons_v_tail_or_window(const Cell& cell);
/// True when a cell's fault puts a NaN or Inf into the per-slot V scale-table entries (Region::scales, V or
/// K+V) of the unwritten tail of some sequence's final block: an fp8 case with a per-slot V table and a
/// straddling length. The cells of a kernel that masks the V codes past seq_len but multiplies every slot of
/// the final block by its scale entry (0 x NaN): cpu.slot_scale_unmasked, gpu.slot_scale_unmasked.
bool poisons_v_slot_scale_tail(const Cell& cell);
}  // namespace pacheck
