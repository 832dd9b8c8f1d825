// Fault injection: poison values written into the unwritten regions of a paged KV cache.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/layouts/pager.hpp"

namespace pacheck {

/// The value written into poisoned slots, as the exact bit pattern of the cache dtype.
enum class Poison : std::uint8_t {
  none,        ///< no fault: unwritten slots stay zero
  nan,         ///< quiet NaN (f32 0x7FC00000, f16 0x7E00, bf16 0x7FC0)
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
/// The bit pattern of `p` in `t` (low bits).
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

/// Writes the fault into `cache` in place and returns the number of elements written (0 for a clean
/// spec, or when the case has no slot of that region, e.g. an aligned length and Region::tail).
std::int64_t inject(PagedCache& cache, const FaultSpec& f);

}  // namespace pacheck

namespace pacheck {
struct Cell;
/// True when a cell's fault puts a NaN or Inf into the unwritten tail of a final V block that a kernel
/// reading V in whole-block vectors would touch: a non-finite poison, in V (or K+V), in the tail (or all
/// unwritten slots), of a case with a straddling length. The cells the tail-read negative controls
/// (cpu.vector_v, gpu.paged_v1_tail_fault) must fail.
bool poisons_v_tail(const Cell& cell);
}  // namespace pacheck
