// What a fault is: the poison value, the cache it goes into (K, V or both) and the region of unwritten
// slots it fills. Part of a cell's identity (its id ends in the fault id); faults/ writes it into a cache.
#pragma once

#include <cstdint>
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
};
std::string_view poison_name(Poison p);
/// Parses "none", "nan", "+inf", "-inf", "1e4", "max", "zero"; throws std::invalid_argument otherwise.
Poison parse_poison(std::string_view s);
/// True for NaN and +-Inf: values that turn 0 * x into NaN.
bool poison_is_nonfinite(Poison p);
/// Empty when `p` can be written into a cache of dtype `t`; otherwise why not (+-Inf in an fp8 encoding
/// without Inf).
std::string poison_unsupported(Poison p, DType t);
/// The bit pattern of `p` in `t` (low bits). Throws std::invalid_argument when poison_unsupported().
std::uint32_t poison_bits(Poison p, DType t);

/// Which cache a fault writes.
enum class Target : std::uint8_t { k, v, kv };
std::string_view target_name(Target t);  ///< "K", "V", "K+V"
Target parse_target(std::string_view s);  ///< accepts "K"/"k", "V"/"v", "K+V"/"kv"

/// Which unwritten slots a fault writes (classes of the pager's slot map).
enum class Region : std::uint8_t {
  tail,     ///< unwritten tail slots of each sequence's final block
  unused,   ///< every slot of blocks no sequence uses
  padding,  ///< every slot of the block that block-table padding entries point at
  all,      ///< every slot that is not `written`
};
std::string_view region_name(Region r);
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
