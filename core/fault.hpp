// What a fault is: the poison value, the cache it goes into (K, V or both) and the region of unwritten
// slots it fills. Part of a cell's identity (its id ends in the fault id); faults/ writes it into a cache.
//
// Quick start
//  - A poison value is one row of poison_table() in core/fault.cpp: its name (as fault ids spell it), what
//    it is, whether it is non-finite (0 * x = NaN: a kernel that reads it where it should not is caught by
//    the tail-poison negative control), how its bit pattern is derived from the cache dtype, and whether it
//    needs an Inf code. Add the enumerator below, the row, and its line in docs/REFERENCE.md's fault table
//    (tests/test_tables.cpp checks the two agree). Suites, case ids, repro, case files, reports and
//    `pacheck fuzz` (which draws from the table) take it with no other edit; `pacheck list poisons` shows it.
//  - A region is a row of region_table() plus the slot classes it covers in faults/inject.cpp (region_has),
//    since the slot map belongs to paging/, a later stage than core/. `window` is not a slot class: its
//    slots are written ones, chosen by the keys' positions (PagedCache::window_first).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.hpp"

namespace pacheck {

/// The value written into poisoned slots, as the exact bit pattern of the cache dtype. fp8 caches get the
/// encoding's own pattern (docs/FP8.md has the table):
///              e4m3fn        e4m3fnuz      e5m2
///   nan        0x7F          0x80          0x7E
///   +inf/-inf  rejected      rejected      0x7C / 0xFC
///   1e4        0x7E (448)    0x7F (240)    0x71 (10240)   saturated / rounded like any value
///   max        0x7E (448)    0x7F (240)    0x7B (57344)   the nearest thing to Inf where there is none
///   zero       0x00          0x00          0x00
///   subnormal  0x01 (2^-9)   0x01 (2^-10)  0x01 (2^-16)   the smallest positive subnormal
/// +-Inf on e4m3fn / e4m3fnuz is refused (poison_unsupported) rather than written as +-max: the cell would
/// claim a non-finite poison that is not there, and a tail-read control would look blind.
enum class Poison : std::uint8_t {
  none,        ///< no fault: unwritten slots stay zero
  nan,         ///< quiet NaN (f32 0x7FC00000, f16 0x7E00, bf16 0x7FC0, fp8 as above)
  pinf,        ///< +Inf
  ninf,        ///< -Inf
  big,         ///< finite garbage 1e4 (rounded to the dtype)
  max_finite,  ///< the dtype's largest finite value
  zero,        ///< explicit +0 (a control: must behave exactly like `none`)
  subnormal,   ///< the smallest positive subnormal (f32 0x00000001, f16 and bf16 0x0001, fp8 0x01)
};

/// One row of poison_table().
struct PoisonInfo {
  Poison value;
  std::string_view name;     ///< as fault ids spell it ("nan", "+inf", "1e4")
  std::string_view aliases;  ///< other accepted spellings, space-separated ("inf" for +inf)
  std::string_view meaning;  ///< one line for `pacheck list poisons` and docs/REFERENCE.md's fault table
  bool nonfinite;            ///< NaN or +-Inf: turns 0 * x into NaN
  bool needs_inf;            ///< only a dtype with an Inf code can hold it (poison_unsupported)
  /// The bit pattern in dtype `t` (low bits); called only where the dtype can hold the value.
  std::uint32_t (*bits)(DType t);
};
/// Every poison value, `none` first, in the order `pacheck list poisons` and docs/REFERENCE.md list them.
std::span<const PoisonInfo> poison_table();
/// "none", "nan", "+inf", "-inf", "1e4", "max", "zero", "subnormal" (poison_table()'s names).
std::string_view poison_name(Poison p);
/// Parses a poison_name() (or "inf" for +inf); throws std::invalid_argument listing the names otherwise.
Poison parse_poison(std::string_view s);
/// True for NaN and +-Inf: values that turn 0 * x into NaN (PoisonInfo::nonfinite).
bool poison_is_nonfinite(Poison p);
/// Empty when `p` can be written into a cache of dtype `t`; otherwise why not (+-Inf in an fp8 encoding
/// without Inf).
std::string poison_unsupported(Poison p, DType t);
/// The bit pattern of `p` in `t` (low bits). Throws std::invalid_argument when poison_unsupported().
std::uint32_t poison_bits(Poison p, DType t);

/// Which cache a fault writes.
enum class Target : std::uint8_t { k, v, kv };
/// One row of target_table().
struct TargetInfo {
  Target value;
  std::string_view name;     ///< as fault ids spell it ("K", "V", "K+V")
  std::string_view aliases;  ///< other accepted spellings, space-separated
  std::string_view meaning;  ///< one line for docs/REFERENCE.md's fault table
};
/// K, V, K+V.
std::span<const TargetInfo> target_table();
std::string_view target_name(Target t);  ///< "K", "V", "K+V"
/// Accepts "K"/"k", "V"/"v", "K+V"/"kv"/"KV"/"k+v"; throws std::invalid_argument listing the names otherwise.
Target parse_target(std::string_view s);

/// Which unwritten slots a fault writes (classes of the pager's slot map).
enum class Region : std::uint8_t {
  tail,     ///< unwritten tail slots of each sequence's final block
  unused,   ///< every slot of blocks no sequence uses
  padding,  ///< every slot of the block that block-table padding entries point at
  all,      ///< every slot that is not `written`
  /// Issue 18 (FlashInfer #941): the unwritten tails of every sequence but sequence 0, and the unused
  /// blocks, while sequence 0's own tail and the padding target stay clean. Sequence 0 reads nothing
  /// poisoned, so an honest kernel's sequence-0 output is the clean one; a kernel that lets another
  /// sequence's slots into sequence 0's result shows it there (the verdict's detail names the sequence).
  others,
  window,   ///< written slots of the keys before a sliding window's edge (cells with win=W; issue 19)
  /// Seed 002: the per-slot scale-table entries (pacheck_kernel_args::k_scales_per_slot) of every slot no
  /// sequence wrote (tails, unused blocks, the padding target), in the K and/or V table; the caches
  /// themselves stay clean. Only cells whose targeted caches have per-slot scales (ks=/vs=slotLO~HI) take it.
  scales,
};
/// One row of region_table().
struct RegionInfo {
  Region value;
  std::string_view name;     ///< as fault ids spell it ("tail")
  std::string_view meaning;  ///< one line for docs/REFERENCE.md's fault table
};
/// tail, unused, padding, all, others, window, scales.
std::span<const RegionInfo> region_table();
std::string_view region_name(Region r);  ///< "tail", "unused", "padding", "all", "others", "window", "scales"
/// Parses a region_name(); throws std::invalid_argument listing the names otherwise.
Region parse_region(std::string_view s);

/// One fault: what value, into which cache, in which region. `poison == none` means a clean cell.
struct FaultSpec {
  Poison poison = Poison::none;
  Target target = Target::v;
  Region region = Region::tail;

  bool clean() const { return poison == Poison::none; }
  /// "clean", or e.g. "V:nan@tail", "K+V:-inf@all" (part of the cell id).
  std::string id() const;
};
/// Parses an id written by FaultSpec::id(); throws std::invalid_argument naming the part it cannot read.
FaultSpec parse_fault(std::string_view s);
/// Throws std::invalid_argument when fault `f` cannot be written into a cache of dtype `kv_dtype`
/// (poison_unsupported), naming the fault and the dtype.
void check_fault(const FaultSpec& f, DType kv_dtype);

}  // namespace pacheck
