#include "core/fault.hpp"

#include <fmt/format.h>

#include <bit>
#include <stdexcept>

#include "core/fp8.hpp"
#include "core/table.hpp"

namespace pacheck {

namespace {

std::uint32_t zero_bits(DType) { return 0; }
/// The canonical quiet NaN of each dtype.
std::uint32_t nan_bits(DType t) {
  switch (t) {
    case DType::f32: return 0x7FC00000u;
    case DType::f16: return 0x7E00u;
    case DType::bf16: return 0x7FC0u;
    case DType::fp8_e4m3fn:
    case DType::fp8_e4m3fnuz:
    case DType::fp8_e5m2: return fp8_format(fp8_of(t)).nan_code;
  }
  return 0;
}
std::uint32_t pinf_bits(DType t) { return to_bits(std::bit_cast<float>(0x7F800000u), t); }
std::uint32_t ninf_bits(DType t) { return to_bits(std::bit_cast<float>(0xFF800000u), t); }
std::uint32_t big_bits(DType t) { return to_bits(1.0e4f, t); }
std::uint32_t max_bits(DType t) { return to_bits(static_cast<float>(dtype_max_finite(t)), t); }
/// Exponent field 0, mantissa 1: the smallest positive subnormal of every dtype here (f32 2^-149, f16 2^-24,
/// bf16 2^-133, e4m3fn 2^-9, e4m3fnuz 2^-10, e5m2 2^-16; core/fp8.hpp's table).
std::uint32_t subnormal_bits(DType) { return 1; }

constexpr PoisonInfo kPoisons[] = {
    {Poison::none, "none", "", "no fault: unwritten slots stay zero", false, false, zero_bits},
    {Poison::nan, "nan", "", "quiet NaN (the fp8 encodings' own NaN code)", true, false, nan_bits},
    {Poison::pinf, "+inf", "inf", "+Inf (refused for the fp8 encodings without Inf)", true, true, pinf_bits},
    {Poison::ninf, "-inf", "", "-Inf (refused for the fp8 encodings without Inf)", true, true, ninf_bits},
    {Poison::big, "1e4", "", "finite garbage 1e4, rounded (fp8: saturated) to the cache dtype", false, false, big_bits},
    {Poison::max_finite, "max", "", "the cache dtype's largest finite value, the nearest thing to Inf where there is none",
     false, false, max_bits},
    {Poison::zero, "zero", "", "explicit +0, a control: must behave exactly like none", false, false, zero_bits},
    {Poison::subnormal, "subnormal", "", "the cache dtype's smallest positive subnormal: finite, must change nothing",
     false, false, subnormal_bits},
};

constexpr TargetInfo kTargets[] = {
    {Target::k, "K", "k", "the key cache"},
    {Target::v, "V", "v", "the value cache"},
    {Target::kv, "K+V", "kv KV k+v", "both caches"},
};

constexpr RegionInfo kRegions[] = {
    {Region::tail, "tail", "unwritten tail slots of each sequence's final block"},
    {Region::unused, "unused", "every slot of blocks no sequence uses"},
    {Region::padding, "padding", "every slot of the block that block-table padding entries point at"},
    {Region::all, "all", "every slot that no sequence wrote"},
    {Region::others, "others", "the tails of every sequence but sequence 0, and unused blocks (sequence 0 reads none)"},
    {Region::window, "window",
     "the written slots of every key before a sliding window's edge (cells with a window): a kernel must not let them reach the output"},
    {Region::scales, "scales",
     "the per-slot scale-table entries of every slot no sequence wrote (cells with per-slot fp8 scales): the caches stay clean"},
};

bool has_inf(DType t) { return !is_fp8(t) || fp8_format(fp8_of(t)).has_inf; }

}  // namespace

std::span<const PoisonInfo> poison_table() { return kPoisons; }
std::string_view poison_name(Poison p) { return name_of(poison_table(), p); }
Poison parse_poison(std::string_view s) { return parse(poison_table(), s, "poison"); }
bool poison_is_nonfinite(Poison p) {
  const PoisonInfo* r = find_row(poison_table(), p);
  return r && r->nonfinite;
}

std::string poison_unsupported(Poison p, DType t) {
  if (const PoisonInfo* r = find_row(poison_table(), p); r && r->needs_inf && !has_inf(t))
    return fmt::format("{} has no Inf code; poison 'max' writes its largest finite value {}, the nearest thing to Inf",
                       dtype_name(t), dtype_max_finite(t));
  return {};
}

void check_fault(const FaultSpec& f, DType kv_dtype) {
  // Region `scales` writes the per-slot scale tables, which are fp32 in every fp8 encoding: Inf fits there.
  if (f.region == Region::scales) return;
  if (std::string why = poison_unsupported(f.poison, kv_dtype); !why.empty())
    throw std::invalid_argument(fmt::format("fault {} cannot be written into a {} cache: {}", f.id(), dtype_name(kv_dtype), why));
}

std::uint32_t poison_bits(Poison p, DType t) {
  if (std::string why = poison_unsupported(p, t); !why.empty())
    throw std::invalid_argument(fmt::format("poison {}: {}", poison_name(p), why));
  const PoisonInfo* r = find_row(poison_table(), p);
  return r ? r->bits(t) : 0;
}

std::span<const TargetInfo> target_table() { return kTargets; }
std::string_view target_name(Target t) { return name_of(target_table(), t); }
Target parse_target(std::string_view s) { return parse(target_table(), s, "poison target"); }

std::span<const RegionInfo> region_table() { return kRegions; }
std::string_view region_name(Region r) { return name_of(region_table(), r); }
Region parse_region(std::string_view s) { return parse(region_table(), s, "poison region"); }

std::string FaultSpec::id() const {
  if (clean()) return "clean";
  return std::string(target_name(target)) + ":" + std::string(poison_name(poison)) + "@" + std::string(region_name(region));
}

FaultSpec parse_fault(std::string_view s) {
  FaultSpec f;
  if (s == "clean" || s == "none") return f;
  const auto colon = s.find(':'), at = s.find('@');
  if (colon == std::string_view::npos || at == std::string_view::npos || at < colon)
    throw std::invalid_argument("fault '" + std::string(s) + "' is not TARGET:POISON@REGION (e.g. V:nan@tail) or clean");
  f.target = parse_target(s.substr(0, colon));
  f.poison = parse_poison(s.substr(colon + 1, at - colon - 1));
  f.region = parse_region(s.substr(at + 1));
  return f;
}

}  // namespace pacheck
