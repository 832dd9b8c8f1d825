// Negative controls for dtypes and scale tables (issue 45; fault-classes.md section 5). Each is cpu.two_pass
// (logits and max, then the unnormalised exp-sum and P.V in fp32) with one planted fault, and declares the
// cells it must fail:
//  cpu.p_f16_ftz       the normalised weights converted to f16 for P.V, as half-precision kernels of f16
//                      models do, but with flush-to-zero: every weight below 2^-14 becomes 0. At long
//                      contexts with a flat softmax every weight is below it (1/32768 at 32K tokens) and the
//                      output loses its mass.
//  cpu.e4m3_ieee       e4m3fn codes decoded as IEEE-style E4M3 (the E4M3 / E4M3FN confusion): exponent 15 read
//                      as Inf (mantissa 0) or NaN, where e4m3fn holds the finite 256..448 there (only 0x7F and
//                      0xFF are NaN).
//  cpu.slot_scale_nhd  an NHD/HND kernel that indexes the per-slot fp8 scale tables by the token's LOGICAL
//                      block (t / block_size) instead of the physical block id its block_tables row gives
//                      (fault-classes.md section 5: scales indexed by the wrong block): every token of a block
//                      the pool placed elsewhere takes another block's scales.
#include <fmt/format.h>

#include <mutex>
#include <unordered_map>

#include "kernels/cpu/cpu_common.hpp"
#include "kernels/cpu/row_logits.hpp"

namespace pacheck::cpu {
namespace {

/// f16's smallest normal: cpu.p_f16_ftz flushes weights below it to 0.
constexpr float kF16MinNormal = 0x1p-14f;

/// cpu.two_pass over one query row, the key (value) row of token t of KV head g read into row[head_size] by
/// kf(t, row) (vf(t, row)), and each normalised weight through pf before P.V.
template <class KF, class VF, class PF>
void two_pass_row(const SeqView& sv, const std::vector<float>& q, std::vector<float>& out, KF kf, VF vf, PF pf) {
  const pacheck_kernel_args& a = sv.a;
  const int len = sv.len, D = a.head_size, first = window_first(a, len);
  const std::optional<float> sink = sink_logit(a, sv.h);
  std::vector<float> s(static_cast<std::size_t>(len));
  float* row = k_scratch(D);
  float m = sink.value_or(kNegInf);
  for (int t = first; t < len; ++t) {
    kf(t, row);
    float dot = 0;
    for (int d = 0; d < D; ++d) dot += q[d] * row[d];
    m = std::max(m, s[t] = apply_variants(a, len, sv.h, t, dot * a.scale));
  }
  float l = sink ? std::exp(*sink - m) : 0.0f;
  for (int t = first; t < len; ++t) l += (s[t] = std::exp(s[t] - m));
  std::fill(out.begin(), out.end(), 0.0f);
  for (int t = first; t < len; ++t) {
    const float p = pf(s[t] / l);
    vf(t, row);
    for (int d = 0; d < D; ++d) out[d] += p * row[d];
  }
}

/// A row reader for two_pass_row from an element reader f(t, d): row[d] = f(t, d) for d < head_size.
template <class F>
auto by_element(const pacheck_kernel_args& a, F f) {
  return [&a, f](int t, float* row) {
    for (int d = 0; d < a.head_size; ++d) row[d] = f(t, d);
  };
}

/// The weight cpu.p_f16_ftz multiplies V by in a call of `a`: f16 with flush-to-zero when the call's P.V runs
/// in f16 (an f16 cache, or an fp8 cache with f16 queries), the weight as it is otherwise.
bool p_in_f16(DType kv, DType q) { return kv == DType::f16 || (is_fp8(kv) && q == DType::f16); }

/// The relative error cpu.p_f16_ftz makes on `c`: max over output elements of |sum of the flushed weights'
/// p_t V_t| / max |out|, from the pre-paging tensors in fp64 (weights below kF16MinNormal flushed).
double ftz_error(const Case& c) {
  const PrePaging pre = generate(c);
  const int H = c.num_heads, G = c.num_kv_heads, D = c.head_size, ratio = c.gqa_ratio();
  const std::vector<float> sinks = c.sinks.resolve(H);
  double worst = 0, top = 0;
  std::vector<double> all(static_cast<std::size_t>(D)), lost(static_cast<std::size_t>(D));
  for_each_row_logits(c, pre, [&](int s, int, int h, int first, const std::vector<double>& x) {
    double m = sinks.empty() ? -std::numeric_limits<double>::infinity() : sinks[h], l = 0;
    for (double v : x) m = std::max(m, v);
    for (double v : x) l += std::exp(v - m);
    if (!sinks.empty()) l += std::exp(sinks[h] - m);
    std::fill(all.begin(), all.end(), 0.0);
    std::fill(lost.begin(), lost.end(), 0.0);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double p = std::exp(x[i] - m) / l;
      const float* v = &pre.v[s][((first + i) * G + h / ratio) * D];
      for (int d = 0; d < D; ++d) {
        all[d] += p * v[d];
        if (p < kF16MinNormal) lost[d] += p * v[d];
      }
    }
    for (int d = 0; d < D; ++d) {
      worst = std::max(worst, std::abs(lost[d]));
      top = std::max(top, std::abs(all[d]));
    }
  });
  return top > 0 ? worst / top : 0.0;
}

/// True when cpu.p_f16_ftz must fail the cell: P.V in f16 (p_in_f16) and flushed weights that move the
/// output by more than 1% of its largest element: four times the f16 limit, above every fixed limit of a
/// cell of 16K tokens or fewer (docs/TOLERANCE.md; gate's h32/8 f16 cells at 4,096 tokens lose 3.6e-2 to 3.9e-2
/// of it, its flat 32K-token cells all of it). Computed once per case id.
bool ftz_fails(const Case& c) {
  if (!p_in_f16(c.kv_dtype, c.q_dtype)) return false;
  static std::mutex mu;
  static std::unordered_map<std::string, bool> cache;
  const std::string id = c.id();
  {
    const std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(id); it != cache.end()) return it->second;
  }
  const bool fails = ftz_error(c) > 0.01;
  const std::lock_guard<std::mutex> lock(mu);
  return cache.emplace(id, fails).first->second;
}

/// An e4m3fn code as an IEEE-style E4M3 decoder reads it: exponent 15 is Inf (mantissa 0) or NaN.
float ieee_e4m3(std::uint8_t code) {
  if (((code >> 3) & 0xF) == 0xF) {
    if (code & 7) return std::numeric_limits<float>::quiet_NaN();
    return code & 0x80 ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  }
  return fp8_decode(code, Fp8::e4m3fn);
}

/// True when cpu.e4m3_ieee must fail the cell: an e4m3fn cache with a K or V code of exponent 15 in a slot
/// some query row reads (keys from the first row's window edge to the end of each sequence).
bool top_binade_read(const Case& c) {
  if (c.kv_dtype != DType::fp8_e4m3fn) return false;
  const PrePaging pre = generate(c);
  const std::size_t per_token = static_cast<std::size_t>(c.num_kv_heads) * c.head_size;
  for (int s = 0; s < c.num_seqs(); ++s)
    for (const auto* codes : {&pre.k_codes[s], &pre.v_codes[s]})
      for (std::size_t i = static_cast<std::size_t>(c.window_start(s)) * per_token; i < codes->size(); ++i)
        if ((((*codes)[i] >> 3) & 0xF) == 0xF) return true;
  return false;
}

class PF16Ftz final : public CpuKernel {
 public:
  std::string name() const override { return "cpu.p_f16_ftz"; }
  std::string description() const override {
    return "normalised weights to f16 with flush-to-zero before P.V: every p below 2^-14 lost (negative control)";
  }
  std::optional<std::function<bool(const Cell&)>> expected_failures() const override {
    return std::function<bool(const Cell&)>([](const Cell& cell) { return ftz_fails(cell.c); });
  }
  void run(const pacheck_kernel_args& a) const override {
    const bool f16 = p_in_f16(static_cast<DType>(a.kv_dtype), static_cast<DType>(a.q_dtype));
    for_each_query_head(a, [&]<DType KV>(const SeqView& sv, int g, const std::vector<float>& q, std::vector<float>& out) {
      two_pass_row(
          sv, q, out, [&](int t, float* row) { sv.k_row<KV>(t, g, row, a.head_size); },
          [&](int t, float* row) { sv.v_row<KV>(t, g, row, a.head_size); },
          [f16](float p) { return !f16 ? p : p < kF16MinNormal ? 0.0f : round_to(p, DType::f16); });
    });
  }
};

class E4m3Ieee final : public CpuKernel {
 public:
  std::string name() const override { return "cpu.e4m3_ieee"; }
  std::string description() const override {
    return "e4m3fn codes decoded as IEEE-style E4M3: exponent 15 (256..448) read as Inf/NaN (negative control)";
  }
  std::optional<std::function<bool(const Cell&)>> expected_failures() const override {
    return std::function<bool(const Cell&)>([](const Cell& cell) { return top_binade_read(cell.c); });
  }
  void run(const pacheck_kernel_args& a) const override {
    const bool fn = a.kv_dtype == PACHECK_DTYPE_FP8_E4M3FN;
    const auto* kc = static_cast<const std::uint8_t*>(a.key_cache);
    const auto* vc = static_cast<const std::uint8_t*>(a.value_cache);
    for_each_query_head(a, [&]<DType KV>(const SeqView& sv, int g, const std::vector<float>& q, std::vector<float>& out) {
      // The fault: e4m3fn's codes through ieee_e4m3; every other dtype as the honest kernels read it.
      auto at = [&](int t) { return std::pair{sv.block_of(t), t % a.block_size}; };
      auto kf = [&](int t, int d) {
        if (!fn) return sv.k<KV>(t, g, d);
        const auto [b, slot] = at(t);
        return ieee_e4m3(kc[key_offset(a.layout, a.k_strides, sv.x, b, g, slot, d)]) * sv.sc.k_at(b, g, slot);
      };
      auto vf = [&](int t, int d) {
        if (!fn) return sv.v<KV>(t, g, d);
        const auto [b, slot] = at(t);
        return ieee_e4m3(vc[value_offset(a.layout, a.v_strides, b, g, slot, d)]) * sv.sc.v_at(b, g, slot);
      };
      two_pass_row(sv, q, out, by_element(a, kf), by_element(a, vf), [](float p) { return p; });
    });
  }
};

class SlotScaleNhd final : public CpuKernel {
 public:
  std::string name() const override { return "cpu.slot_scale_nhd"; }
  std::string description() const override {
    return "NHD/HND kernel indexing the per-slot fp8 scale tables by the logical block, not the physical one "
           "(negative control)";
  }
  std::vector<Layout> layouts() const override { return {Layout::nhd, Layout::hnd}; }
  Support supports(const Case& c) const override {
    if (c.layout != Layout::nhd && c.layout != Layout::hnd)
      return Support::no(fmt::format("layout {}: cpu.slot_scale_nhd reads nhd and hnd", layout_name(c.layout)));
    return Support::yes();
  }
  /// Every cell with per-slot tables: the pager places each sequence's blocks at physical ids drawn from the
  /// seed over the whole pool, so some block sits away from its logical index (gate's cells: dozens of
  /// blocks), and its tokens read scales drawn apart from theirs (0.25 to 4).
  std::optional<std::function<bool(const Cell&)>> expected_failures() const override {
    return std::function<bool(const Cell&)>(
        [](const Cell& cell) { return cell.c.k_scale.per_slot() || cell.c.v_scale.per_slot(); });
  }
  void run(const pacheck_kernel_args& a) const override {
    const int G = a.num_kv_heads, B = a.block_size;
    // The fault: token t's entry read at its logical block t / B, not the physical block_of(t).
    auto wrong = [&](const float* table, float head, int t, int g) {
      return table ? table[slot_scale_offset(t / B, G, B, g, t % B)] : head;
    };
    for_each_query_head(a, [&]<DType KV>(const SeqView& sv, int g, const std::vector<float>& q, std::vector<float>& out) {
      auto kf = [&](int t, int d) {
        const std::int64_t b = sv.block_of(t);
        const int slot = t % B;
        const float e = ld<KV>(a.key_cache, key_offset(a.layout, a.k_strides, sv.x, b, g, slot, d));
        if constexpr (is_fp8(KV)) return e * wrong(a.k_scales_per_slot, sv.sc.k[static_cast<std::size_t>(g)], t, g);
        else return e;
      };
      auto vf = [&](int t, int d) {
        const std::int64_t b = sv.block_of(t);
        const int slot = t % B;
        const float e = ld<KV>(a.value_cache, value_offset(a.layout, a.v_strides, b, g, slot, d));
        if constexpr (is_fp8(KV)) return e * wrong(a.v_scales_per_slot, sv.sc.v[static_cast<std::size_t>(g)], t, g);
        else return e;
      };
      two_pass_row(sv, q, out, by_element(a, kf), by_element(a, vf), [](float p) { return p; });
    });
  }
};

}  // namespace
}  // namespace pacheck::cpu

namespace pacheck {
/// cpu.p_f16_ftz, cpu.e4m3_ieee, cpu.slot_scale_nhd (registered in cpu_kernels.cpp).
KernelPtr make_cpu_p_f16_ftz() { return std::make_shared<cpu::PF16Ftz>(); }
KernelPtr make_cpu_e4m3_ieee() { return std::make_shared<cpu::E4m3Ieee>(); }
KernelPtr make_cpu_slot_scale_nhd() { return std::make_shared<cpu::SlotScaleNhd>(); }
}  // namespace pacheck
