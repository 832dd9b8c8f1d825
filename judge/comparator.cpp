#include "judge/comparator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "oracle/oracle.hpp"
#include "oracle/tensors.hpp"

namespace pacheck {

std::string sci(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.3e}", v);
}

namespace {

/// Bits of a double reference rounded once to `t`. Going double -> float -> f16/bf16 with two
/// round-to-nearest steps can land on the wrong side of a tie; rounding to float with round-to-odd
/// first (truncate, then set the last bit if anything was dropped) makes the second rounding exact,
/// because float keeps more than p + 2 bits of an f16 or bf16 value (Boldo & Melquiond, 2008).
std::uint32_t ref_bits(double r, DType t) {
  if (t == DType::f32 || !std::isfinite(r)) return to_bits(static_cast<float>(r), t);
  float f = static_cast<float>(r);  // round to nearest
  if (static_cast<double>(f) != r && std::isfinite(f)) {
    // Step back to the float nearer zero if rounding went away from zero, then mark it inexact.
    if (std::fabs(static_cast<double>(f)) > std::fabs(r)) f = std::nextafter(f, 0.0f);
    std::uint32_t b;
    std::memcpy(&b, &f, 4);
    b |= 1u;
    std::memcpy(&f, &b, 4);
  } else if (std::isinf(f)) {
    // |r| is above FLT_MAX: FLT_MAX with its odd last bit already rounds to Inf in f16 and bf16.
    f = std::copysign(std::numeric_limits<float>::max(), static_cast<float>(r));
  }
  return to_bits(f, t);
}

/// Bits of an output element: kernels store `out` in `t`, so the value is representable and the
/// conversion exact; a value that is not (a caller passing an unrounded double) is rounded like ref.
std::uint32_t out_bits(double o, DType t) { return ref_bits(o, t); }

bool same_inf(double o, double r) { return std::isinf(o) && std::isinf(r) && std::signbit(o) == std::signbit(r); }

}  // namespace

Index3 index3(std::int64_t i, const Case& c) {
  const std::int64_t H = c.num_heads, D = c.head_size;
  const int row = static_cast<int>(i / (H * D));
  Index3 at{row, static_cast<int>((i / D) % H), static_cast<int>(i % D)};
  if (c.max_query_len() > 1) {  // output row -> (sequence, query token)
    int s = 0;
    while (s + 1 < c.num_seqs() && c.query_start(s + 1) <= row) ++s;
    at.seq = s;
    at.token = row - c.query_start(s);
  }
  return at;
}

std::string describe(const Index3& at) {
  if (at.token < 0) return fmt::format("seq {}, head {}, dim {}", at.seq, at.head, at.dim);
  return fmt::format("seq {}, query token {}, head {}, dim {}", at.seq, at.token, at.head, at.dim);
}

namespace {

/// The functions the self-test drives. The real comparator, or a blinded one that reports every
/// output equal to the reference (the negative control of the self-test itself).
struct ComparatorFns {
  Metrics (*metrics)(const std::vector<double>&, const std::vector<double>&, const Case&, DType);
  std::vector<std::int64_t> (*differing)(const std::vector<double>&, const std::vector<double>&, DType);
};

Metrics blind_metrics(const std::vector<double>& out, const std::vector<double>&, const Case&, DType) {
  Metrics m;
  m.elements = static_cast<std::int64_t>(out.size());
  m.bitwise_equal_pct = 100.0;
  return m;
}
std::vector<std::int64_t> blind_differing(const std::vector<double>&, const std::vector<double>&, DType) {
  return {};
}

/// Verdict of one comparison: no NaN, no unmatched Inf, rel_linf within the limit.
bool passes(const Metrics& m, double limit) { return m.bad_nonfinite == 0 && m.rel_linf <= limit; }

}  // namespace

Metrics compare(const std::vector<double>& out, const std::vector<double>& ref, const Case& c, DType out_dtype) {
  const std::size_t n = static_cast<std::size_t>(c.num_query_tokens()) * c.num_heads * c.head_size;
  if (out.size() != ref.size() || out.size() != n)
    throw std::invalid_argument(fmt::format(
        "compare: out has {} elements, ref {}, case needs num_query_tokens*num_heads*head_size = {}", out.size(),
        ref.size(), n));
  Metrics m;
  m.elements = static_cast<std::int64_t>(n);
  double max_ref = 0, sum_sq_diff = 0, sum_sq_ref = 0, sum_abs = 0;
  std::int64_t equal = 0, finite_pairs = 0, worst_i = -1;
  bool worst_nonfinite = false;
  const bool half = out_dtype == DType::f16 || out_dtype == DType::bf16;
  double bias_sum = 0, row_sum = 0;
  const std::size_t row_len = static_cast<std::size_t>(c.head_size);
  for (std::size_t i = 0; i < n; ++i) {
    const double o = out[i], r = ref[i];
    const std::uint32_t ob = out_bits(o, out_dtype), rb = ref_bits(r, out_dtype);
    if (std::isnan(o)) ++m.nan_count;
    if (std::isinf(o)) ++m.inf_count;
    if (!std::isnan(o) && !std::isnan(r) && ob == rb) ++equal;  // NaN is never equal, even to NaN

    const std::uint64_t ulp = ulp_distance(from_bits(ob, out_dtype), from_bits(rb, out_dtype), out_dtype);
    m.max_ulp = std::max(m.max_ulp, ulp);

    if (std::isfinite(r)) max_ref = std::max(max_ref, std::fabs(r));
    if (std::isfinite(o) && std::isfinite(r)) {
      const double d = std::fabs(o - r);
      ++finite_pairs;
      sum_abs += d;
      sum_sq_diff += d * d;
      sum_sq_ref += r * r;
      if (!worst_nonfinite && (worst_i < 0 || d > m.max_abs)) worst_i = static_cast<std::int64_t>(i);
      m.max_abs = std::max(m.max_abs, d);
      // Rounding bias: only where ref needs rounding; steps counted away from zero, clamped so that an
      // element whose error is many ULPs (small |ref| next to large ones) weighs as one wrong rounding.
      if (half && static_cast<double>(from_bits(rb, out_dtype)) != r) {
        const double steps =
            static_cast<double>(ordered_bits(ob, out_dtype) - ordered_bits(rb, out_dtype)) * (r < 0 ? -1.0 : 1.0);
        bias_sum += std::clamp(steps, -1.0, 1.0);
        ++m.bias_elements;
        if (steps < 0) ++m.bias_toward;
        if (steps > 0) ++m.bias_away;
        row_sum += std::clamp(steps, -1.0, 1.0);
      }
    } else if (!same_inf(o, r)) {
      // NaN on either side, or an Inf the reference does not have (or lacks where the reference has one).
      ++m.bad_nonfinite;
      if (!worst_nonfinite) worst_i = static_cast<std::int64_t>(i);
      worst_nonfinite = true;
    }
    if ((i + 1) % row_len == 0) {  // end of one (seq, head) row
      if (row_sum < 0) ++m.bias_rows_toward;
      if (row_sum > 0) ++m.bias_rows_away;
      row_sum = 0;
    }
  }
  m.bitwise_equal_pct = n ? 100.0 * static_cast<double>(equal) / static_cast<double>(n) : 100.0;
  m.bias_ulp = m.bias_elements ? bias_sum / static_cast<double>(m.bias_elements) : 0.0;
  m.mean_abs = finite_pairs ? sum_abs / static_cast<double>(finite_pairs) : 0.0;
  const double inf = std::numeric_limits<double>::infinity();
  m.rel_linf = max_ref > 0 ? m.max_abs / max_ref : (m.max_abs > 0 ? inf : 0.0);
  m.nmse = sum_sq_ref > 0 ? sum_sq_diff / sum_sq_ref : (sum_sq_diff > 0 ? inf : 0.0);
  // Unfinished business from the loop: an unmatched non-finite element makes every error measure
  // meaningless, so report it as infinitely bad rather than leaving the finite part's small numbers.
  if (m.bad_nonfinite > 0) m.rel_linf = m.nmse = inf;
  if (worst_i >= 0) m.worst = index3(worst_i, c);
  return m;
}

std::string bias_finding(const Metrics& m, const BiasCheck& check) {
  const std::int64_t moved = m.bias_toward + m.bias_away;
  if (moved == 0 || !(std::fabs(m.bias_ulp) > check.limit_ulp)) return "";
  const double z = static_cast<double>(std::llabs(m.bias_toward - m.bias_away)) / std::sqrt(static_cast<double>(moved));
  if (z < check.min_z) return "";
  const bool toward = m.bias_ulp < 0;
  const std::int64_t rows = m.bias_rows_toward + m.bias_rows_away;
  const std::int64_t rows_with = toward ? m.bias_rows_toward : m.bias_rows_away;
  const double row_z =
      rows ? static_cast<double>(2 * rows_with - rows) / std::sqrt(static_cast<double>(rows)) : 0.0;
  if (row_z < check.min_row_z) return "";
  return fmt::format("output rounds {} zero: signed mean error {:+.3f} ULP over {} elements that need rounding "
                     "({} toward zero, {} away from zero from the nearest; |mean| limit {}, z {:.1f}; {} of {} "
                     "rows one way){}",
                     toward ? "toward" : "away from", m.bias_ulp, m.bias_elements, m.bias_toward, m.bias_away,
                     check.limit_ulp, z, rows_with, rows,
                     toward ? ": a truncating conversion (fp32 to 16-bit by dropping bits) instead of round to "
                              "nearest even"
                            : ": a conversion that rounds up in magnitude instead of to nearest even");
}

std::vector<std::int64_t> differing_elements(const std::vector<double>& out, const std::vector<double>& ref,
                                             DType dtype) {
  if (out.size() != ref.size())
    throw std::invalid_argument(
        fmt::format("differing_elements: out has {} elements, ref {}", out.size(), ref.size()));
  std::vector<std::int64_t> idx;
  for (std::size_t i = 0; i < out.size(); ++i)
    if (std::isnan(out[i]) || std::isnan(ref[i]) || out_bits(out[i], dtype) != ref_bits(ref[i], dtype))
      idx.push_back(static_cast<std::int64_t>(i));
  return idx;
}

std::string judge_flags(const Tolerance& tolerance, Precision oracle_precision) {
  std::string flags;
  auto add = [&](const std::string& f) { flags += (flags.empty() ? "" : " ") + f; };
  if (tolerance.policy == TolerancePolicy::calibrated) {
    add("--tolerance calibrated");
    if (tolerance.multiple != Tolerance{}.multiple) add(fmt::format("--multiple {}", tolerance.multiple));
  }
  if (oracle_precision == Precision::f32) add("--oracle-precision f32");
  if (tolerance.tf32) add("--tf32");
  return flags;
}

// Reasons for each number are in docs/TOLERANCE.md; u is the dtype's unit roundoff (half an ULP at the
// bottom of a binade, relative): bf16 2^-8, f16 2^-11, f32 2^-24.
double fixed_limit(DType out_dtype) {
  switch (out_dtype) {
    case DType::bf16: return 0x1.4p-6;  // 5u = 1.95e-2: output, probability and product rounding (3u) + 2u
    case DType::f16: return 0x1.4p-9;   // 5u = 2.44e-3, the same budget in f16's precision
    case DType::f32: return 0x1p-14;    // 6.1e-5: ~10x random-order fp32 accumulation over 32K tokens
    default: break;
  }
  throw std::invalid_argument(fmt::format("fixed_limit: no limit for output dtype {}", dtype_name(out_dtype)));
}

namespace {
/// Calibrated floor: what the emulation cannot see, so that a cell whose emulation error is ~0 (seq_len
/// 1, a peaked row that rounds exactly) does not get a zero limit. fp32: exp implementations and logit
/// summation order (a naive-loop fp32 kernel measured 3.8e-7 where the emulation measured 0); bf16/f16:
/// u/16, the same fp32-level differences flipping a rounding, far below one output rounding.
double calibrated_floor(DType out_dtype) {
  switch (out_dtype) {
    case DType::bf16: return 0x1p-12;
    case DType::f16: return 0x1p-15;
    case DType::f32: return 0x1p-19;
    default: break;
  }
  throw std::invalid_argument(fmt::format("calibrated limit: no floor for output dtype {}", dtype_name(out_dtype)));
}
}  // namespace

double tf32_limit() { return 0x1p-7; }  // 7.8e-3: 3.7x the worst cpu.tf32 cell (docs/TOLERANCE.md)

double tf32_hint_floor() { return 0x1p-13; }  // 1.2e-4: a quarter of TF32's unit roundoff 2^-11

double accumulation_limit(int max_seq_len) { return 0x1p-23 * std::max(0, max_seq_len); }

double fixed_limit(DType out_dtype, int max_seq_len) {
  return std::max(fixed_limit(out_dtype), accumulation_limit(max_seq_len));
}

double Tolerance::limit(DType out_dtype, double emulation_rel_linf, bool tf32_products, int max_seq_len) const {
  if (tf32_products) return std::max(tf32_limit(), fixed_limit(out_dtype, max_seq_len));
  if (policy == TolerancePolicy::fixed) return fixed_limit(out_dtype, max_seq_len);
  if (!(emulation_rel_linf >= 0) || !std::isfinite(emulation_rel_linf))
    throw std::invalid_argument(
        fmt::format("Tolerance::limit: emulation rel_linf must be finite and >= 0, got {}", emulation_rel_linf));
  return multiple * emulation_rel_linf + calibrated_floor(out_dtype);
}

SelfTestResult comparator_selftest(int ulps, std::vector<std::int64_t> offsets, bool blind) {
  SelfTestResult res;
  bool ok = true;
  auto check = [&](bool cond, const std::string& what) {
    res.lines.push_back((cond ? "ok     " : "FAILED ") + what);
    ok = ok && cond;
  };

  // The clean row: a real oracle output, 16 heads x 128 = 2048 elements (seed 001's row size, at its
  // ctx=31 cell, which straddles a 32-token block), rounded to bf16: what a perfect bf16 kernel stores.
  Case c;
  c.num_heads = 16;
  c.num_kv_heads = 4;
  c.head_size = 128;
  c.block_size = 32;
  c.seq_lens = {31};
  const DType dt = DType::bf16;
  const std::vector<double> ref = oracle(c, generate(c)).out;
  const std::int64_t n = static_cast<std::int64_t>(ref.size());
  std::vector<double> clean(ref.size());
  for (std::size_t i = 0; i < ref.size(); ++i) clean[i] = from_bits(ref_bits(ref[i], dt), dt);

  std::sort(offsets.begin(), offsets.end());
  const bool offsets_ok = !offsets.empty() && offsets.front() >= 0 && offsets.back() < n &&
                          std::adjacent_find(offsets.begin(), offsets.end()) == offsets.end();
  check(offsets_ok, fmt::format("offsets {} are distinct and inside the {}-element row", fmt::join(offsets, ","), n));
  check(ulps >= 1, fmt::format("corruption of {} ULP is at least 1 ULP", ulps));
  if (!offsets_ok || ulps < 1) return res;

  const ComparatorFns fns = blind ? ComparatorFns{blind_metrics, blind_differing}
                                  : ComparatorFns{compare, differing_elements};
  const double limit = fixed_limit(dt);

  // 1. The clean row passes against the oracle, bitwise equal to it in bf16 everywhere.
  const Metrics mo = fns.metrics(clean, ref, c, dt);
  check(passes(mo, limit) && mo.bitwise_equal_pct == 100.0 && mo.max_ulp == 0 && fns.differing(clean, ref, dt).empty(),
        fmt::format("clean row vs oracle passes: bitwise {:.4f}%, max_ulp {}, rel_linf {:.3e} <= {:.3e}",
                    mo.bitwise_equal_pct, mo.max_ulp, mo.rel_linf, limit));

  // 2. Seeded copies are compared with the clean row, as kernel A/B (seed 001): every difference is
  // then one that was seeded. The unseeded copy passes with nothing reported.
  const std::vector<double> copy = clean;
  const Metrics mc = fns.metrics(copy, clean, c, dt);
  check(passes(mc, limit) && mc.bitwise_equal_pct == 100.0 && mc.max_abs == 0 && fns.differing(copy, clean, dt).empty(),
        fmt::format("unseeded copy passes: bitwise {:.4f}%, max_abs {:.3e}", mc.bitwise_equal_pct, mc.max_abs));

  // 3. k-ULP corruption: each seeded element moves k steps along bf16's ordered line, away from zero.
  std::vector<double> bad = clean;
  for (std::int64_t o : offsets) {
    const std::uint32_t b = to_bits(static_cast<float>(clean[o]), dt) + static_cast<std::uint32_t>(ulps);
    bad[o] = from_bits(b, dt);
  }
  const Metrics mb = fns.metrics(bad, clean, c, dt);
  check(mb.max_ulp == static_cast<std::uint64_t>(ulps) && mb.max_abs > 0,
        fmt::format("{}-ULP corruption detected: max_ulp {}, max_abs {:.3e}", ulps, mb.max_ulp, mb.max_abs));
  const std::int64_t seeded = static_cast<std::int64_t>(offsets.size());
  const double want_pct = 100.0 * static_cast<double>(n - seeded) / static_cast<double>(n);
  check(mb.bitwise_equal_pct == want_pct,
        fmt::format("bitwise-equal drops by exactly {}/{}: {:.4f}% (want {:.4f}%)", seeded, n,
                    mb.bitwise_equal_pct, want_pct));
  const std::vector<std::int64_t> where = fns.differing(bad, clean, dt);
  check(where == offsets,
        fmt::format("reported locations are exactly the seeded offsets: [{}]", fmt::join(where, ",")));
  const std::int64_t worst_flat = mb.worst.flat(c);
  check(mb.worst.seq >= 0 && std::binary_search(offsets.begin(), offsets.end(), worst_flat),
        fmt::format("worst element (seq {}, head {}, dim {}) is a seeded offset", mb.worst.seq, mb.worst.head,
                    mb.worst.dim));

  // 4. One NaN: never passes, counted once, located.
  std::vector<double> nan_row = clean;
  nan_row[offsets.front()] = std::numeric_limits<double>::quiet_NaN();
  const Metrics mn = fns.metrics(nan_row, clean, c, dt);
  check(mn.nan_count == 1 && mn.bad_nonfinite == 1 && !passes(mn, limit),
        fmt::format("one NaN detected and fails: nan_count {}, bad_nonfinite {}", mn.nan_count, mn.bad_nonfinite));
  const std::vector<std::int64_t> nan_where = fns.differing(nan_row, clean, dt);
  const Index3 want3 = index3(offsets.front(), c);
  check(nan_where == std::vector<std::int64_t>{offsets.front()} && mn.worst.seq == want3.seq &&
            mn.worst.token == want3.token && mn.worst.head == want3.head && mn.worst.dim == want3.dim,
        fmt::format("NaN located at offset {} only (worst = seq {}, head {}, dim {})", offsets.front(), mn.worst.seq,
                    mn.worst.head, mn.worst.dim));

  res.passed = ok;
  return res;
}

}  // namespace pacheck
