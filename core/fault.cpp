#include "core/fault.hpp"

#include <fmt/format.h>

#include <bit>
#include <stdexcept>

#include "core/fp8.hpp"

namespace pacheck {

std::string_view poison_name(Poison p) {
  switch (p) {
    case Poison::none: return "none";
    case Poison::nan: return "nan";
    case Poison::pinf: return "+inf";
    case Poison::ninf: return "-inf";
    case Poison::big: return "1e4";
    case Poison::max_finite: return "max";
    case Poison::zero: return "zero";
  }
  return "?";
}

Poison parse_poison(std::string_view s) {
  for (Poison p : {Poison::none, Poison::nan, Poison::pinf, Poison::ninf, Poison::big, Poison::max_finite, Poison::zero})
    if (s == poison_name(p)) return p;
  if (s == "inf") return Poison::pinf;
  throw std::invalid_argument("unknown poison '" + std::string(s) + "' (expected none, nan, +inf, -inf, 1e4, max or zero)");
}

bool poison_is_nonfinite(Poison p) { return p == Poison::nan || p == Poison::pinf || p == Poison::ninf; }

std::string poison_unsupported(Poison p, DType t) {
  if ((p == Poison::pinf || p == Poison::ninf) && is_fp8(t) && t != DType::fp8_e5m2)
    return fmt::format("{} has no Inf code; poison 'max' writes its largest finite value {}, the nearest thing to Inf",
                       dtype_name(t), dtype_max_finite(t));
  return {};
}

void check_fault(const FaultSpec& f, DType kv_dtype) {
  if (std::string why = poison_unsupported(f.poison, kv_dtype); !why.empty())
    throw std::invalid_argument(fmt::format("fault {} cannot be written into a {} cache: {}", f.id(), dtype_name(kv_dtype), why));
}

std::uint32_t poison_bits(Poison p, DType t) {
  if (std::string why = poison_unsupported(p, t); !why.empty())
    throw std::invalid_argument(fmt::format("poison {}: {}", poison_name(p), why));
  switch (p) {
    case Poison::none:
    case Poison::zero: return 0;
    case Poison::nan:
      switch (t) {
        case DType::f32: return 0x7FC00000u;
        case DType::f16: return 0x7E00u;
        case DType::bf16: return 0x7FC0u;
        case DType::fp8_e4m3fn:
        case DType::fp8_e4m3fnuz:
        case DType::fp8_e5m2: return fp8_format(static_cast<Fp8>(static_cast<std::uint8_t>(t))).nan_code;
      }
      break;
    case Poison::pinf: return to_bits(std::bit_cast<float>(0x7F800000u), t);
    case Poison::ninf: return to_bits(std::bit_cast<float>(0xFF800000u), t);
    case Poison::big: return to_bits(1.0e4f, t);
    case Poison::max_finite: return to_bits(static_cast<float>(dtype_max_finite(t)), t);
  }
  return 0;
}

std::string_view target_name(Target t) {
  switch (t) {
    case Target::k: return "K";
    case Target::v: return "V";
    case Target::kv: return "K+V";
  }
  return "?";
}

Target parse_target(std::string_view s) {
  if (s == "K" || s == "k") return Target::k;
  if (s == "V" || s == "v") return Target::v;
  if (s == "K+V" || s == "kv" || s == "KV" || s == "k+v") return Target::kv;
  throw std::invalid_argument("unknown poison target '" + std::string(s) + "' (expected K, V or K+V)");
}

std::string_view region_name(Region r) {
  switch (r) {
    case Region::tail: return "tail";
    case Region::unused: return "unused";
    case Region::padding: return "padding";
    case Region::all: return "all";
  }
  return "?";
}

Region parse_region(std::string_view s) {
  for (Region r : {Region::tail, Region::unused, Region::padding, Region::all})
    if (s == region_name(r)) return r;
  throw std::invalid_argument("unknown poison region '" + std::string(s) + "' (expected tail, unused, padding or all)");
}

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
