// The oracle: decode attention from the pre-paging tensors. Per sequence and KV head, the R =
// num_heads / num_kv_heads query heads of the GQA group are computed together against one read of
// that head's K and V.
//
// Why the two products are not plain Eigen products: with only R (1..16) right-hand columns, Eigen's
// GEMM spends its time packing K and V into panels; on the benchmark cell (h32/8 d128 ctx32768, R = 4)
// it ran at ~8 GFLOP/s and the oracle took 6x a stream over the same bytes. The products are the same
// ([L, D] x [D, R] for the logits, [R, L] x [L, D] for the output), written instead
// on Eigen's packet layer (the SIMD abstraction Eigen's own kernels use, so SSE/AVX/AVX-512/NEON follow
// the build flags) as register-blocked loops that read K and V once, in place, one token tile of all
// KV heads at a time. docs/BENCHMARKS.md has the numbers.
#include "oracle/oracle.hpp"

#include <Eigen/Core>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <type_traits>

namespace pacheck {
namespace {

namespace ei = Eigen::internal;
using Eigen::Index;

template <class S>
using Packet = typename ei::packet_traits<S>::type;
template <class S>
constexpr int kLanes = ei::unpacket_traits<Packet<S>>::size;
template <class S>
using ColMat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;

/// Tokens per tile. A tile of K or V ([kTile, num_kv_heads, head_size], contiguous in the pre-paging
/// layout) is read for all KV heads before the next one, so every page is finished while it is in the
/// TLB and the next tile can be prefetched as one contiguous range. Walking one KV head over the whole
/// sequence instead (rows num_kv_heads * head_size apart) measured 2x slower.
constexpr Index kTile = 128;
/// Tokens per register pass of P.V (see pv_block); 4 and 8 measured ~12% faster than 16 and 128.
constexpr Index kSubTile = 8;

void check_shapes(const Case& c, const PrePaging& p) {
  c.validate();
  const std::size_t H = c.num_heads, G = c.num_kv_heads, D = c.head_size;
  const std::size_t n = static_cast<std::size_t>(c.num_seqs());
  if (p.q.size() != n * H * D)
    throw std::invalid_argument(fmt::format(
        "oracle: q has {} elements, case needs num_seqs*num_heads*head_size = {}", p.q.size(), n * H * D));
  if (p.k.size() != n || p.v.size() != n)
    throw std::invalid_argument(
        fmt::format("oracle: {} K and {} V sequences for num_seqs = {}", p.k.size(), p.v.size(), n));
  for (std::size_t s = 0; s < n; ++s) {
    const std::size_t want = static_cast<std::size_t>(c.seq_lens[s]) * G * D;
    if (p.k[s].size() != want || p.v[s].size() != want)
      throw std::invalid_argument(fmt::format(
          "oracle: sequence {} has K {} / V {} elements, seq_len*num_kv_heads*head_size = {}", s,
          p.k[s].size(), p.v[s].size(), want));
  }
}

/// The values of a pre-paging tensor in scalar S. fp32 reads the caller's buffer in place (no copy:
/// the oracle's cost is then one read of K and V); fp64 converts once into `scratch`.
template <class S>
const S* as_scalar(const std::vector<float>& src, std::vector<S>& scratch) {
  if constexpr (std::is_same_v<S, float>) {
    return src.data();
  } else {
    scratch.assign(src.begin(), src.end());
    return scratch.data();
  }
}

/// A contiguous range to prefetch a few cache lines at a time from inside the compute loops, so the
/// next tile streams in while this one is computed instead of in one burst that stalls the core.
struct PrefetchCursor {
  const char* p = nullptr;
  const char* end = nullptr;
  int lines_per_step = 0;
  void step() {
    for (int i = 0; i < lines_per_step && p < end; ++i, p += 64) ei::prefetch(p);
  }
};

/// Part `part` of `parts` equal parts of [begin, end), prefetched over `steps` steps: spread over the
/// KV heads of one tile, the next tile arrives while this one is computed.
template <class S>
PrefetchCursor part_cursor(const S* begin, const S* end, int part, int parts, Index steps) {
  const Index n = end - begin, lo = n * part / parts, hi = n * (part + 1) / parts;
  PrefetchCursor c;
  c.p = reinterpret_cast<const char*>(begin + lo);
  c.end = reinterpret_cast<const char*>(begin + hi);
  const Index lines = (c.end - c.p + 63) / 64;
  c.lines_per_step = static_cast<int>(steps > 0 ? (lines + steps - 1) / steps : lines);
  return c;
}

/// lg(t, j) = q_j . K_t for RB query heads j and tokens t in [0, T) (the product [T, D] x [D, RB]).
///  q: RB rows of head_size D, contiguous. k: token t's row of this KV head at k + t * ks.
///  lg: column j at lg + j * ld.
/// Two tokens per step share each load of q; the RB x 2 dot products stay in registers.
template <class S, int RB>
void qk_block(const S* q, int D, const S* k, Index ks, Index T, S* lg, Index ld, PrefetchCursor& pf) {
  using P = Packet<S>;
  constexpr int N = kLanes<S>;
  const int Dv = D - D % N;
  auto tail = [&](const S* kt, int j) {  // head_size not a multiple of the packet width
    S s = 0;
    for (int d = Dv; d < D; ++d) s += kt[d] * q[j * D + d];
    return s;
  };
  Index t = 0;
  for (; t + 2 <= T; t += 2) {
    const S* k0 = k + t * ks;
    const S* k1 = k0 + ks;
    pf.step();
    P a0[RB], a1[RB];
    for (int j = 0; j < RB; ++j) a0[j] = a1[j] = ei::pset1<P>(S(0));
    for (int d = 0; d < Dv; d += N) {
      const P x0 = ei::ploadu<P>(k0 + d), x1 = ei::ploadu<P>(k1 + d);
      for (int j = 0; j < RB; ++j) {
        const P qj = ei::ploadu<P>(q + j * D + d);
        a0[j] = ei::pmadd(x0, qj, a0[j]);
        a1[j] = ei::pmadd(x1, qj, a1[j]);
      }
    }
    for (int j = 0; j < RB; ++j) {
      lg[j * ld + t] = ei::predux(a0[j]) + tail(k0, j);
      lg[j * ld + t + 1] = ei::predux(a1[j]) + tail(k1, j);
    }
  }
  for (; t < T; ++t) {
    const S* k0 = k + t * ks;
    for (int j = 0; j < RB; ++j) {
      P a = ei::pset1<P>(S(0));
      for (int d = 0; d < Dv; d += N) a = ei::pmadd(ei::ploadu<P>(k0 + d), ei::ploadu<P>(q + j * D + d), a);
      lg[j * ld + t] = ei::predux(a) + tail(k0, j);
    }
  }
}

/// acc_j += sum over t in [0, T) of p(t, j) * V_t for RB query heads, token by token (acc: RB rows of
/// D, fp32 running sums). p: column j at p + j * ld. v: V_t at v + t * vs. bcast: scratch of T * RB
/// packets. Columns of D in chunks of two packets keep RB x 2 accumulators in registers over the T
/// tokens; T is kept small (kSubTile) because the rows of one KV head are num_kv_heads * head_size
/// apart (4 KiB for 8 x 128 fp32), so they all fall into the same L1 set, and each chunk pass must find
/// its rows still in L1.
template <class S, int RB>
void pv_block(const S* p, Index ld, const S* v, Index vs, Index T, int D, S* acc, S* bcast, PrefetchCursor& pf) {
  using P = Packet<S>;
  constexpr int N = kLanes<S>;
  // Each probability broadcast to a full packet once, not once per column chunk: the broadcast is a
  // shuffle on the same pipes as the multiply-adds.
  for (Index t = 0; t < T; ++t) {
    pf.step();
    for (int j = 0; j < RB; ++j) ei::pstoreu(bcast + (t * RB + j) * N, ei::pset1<P>(p[j * ld + t]));
  }
  int d = 0;
  for (; d + 2 * N <= D; d += 2 * N) {
    P a[RB][2];
    for (int j = 0; j < RB; ++j) {
      a[j][0] = ei::ploadu<P>(acc + j * D + d);
      a[j][1] = ei::ploadu<P>(acc + j * D + d + N);
    }
    for (Index t = 0; t < T; ++t) {
      const S* vt = v + t * vs + d;
      const P v0 = ei::ploadu<P>(vt), v1 = ei::ploadu<P>(vt + N);
      for (int j = 0; j < RB; ++j) {
        const P pj = ei::ploadu<P>(bcast + (t * RB + j) * N);
        a[j][0] = ei::pmadd(pj, v0, a[j][0]);
        a[j][1] = ei::pmadd(pj, v1, a[j][1]);
      }
    }
    for (int j = 0; j < RB; ++j) {
      ei::pstoreu(acc + j * D + d, a[j][0]);
      ei::pstoreu(acc + j * D + d + N, a[j][1]);
    }
  }
  for (; d < D; ++d) {  // head_size not a multiple of two packets (e.g. 80 with 16-lane AVX-512)
    for (int j = 0; j < RB; ++j) {
      S s = acc[j * D + d];
      for (Index t = 0; t < T; ++t) s += p[j * ld + t] * v[t * vs + d];
      acc[j * D + d] = s;
    }
  }
}

/// Runs `fn(j, integral_constant<RB>)` over query-head blocks of 4, then the 1..3 heads left: R need
/// not be a multiple of 4 (GQA 7 is legal), and a compile-time RB keeps the accumulators in registers.
template <class Fn>
void by_head_blocks(int R, Fn&& fn) {
  int j = 0;
  for (; j + 4 <= R; j += 4) fn(j, std::integral_constant<int, 4>{});
  switch (R - j) {
    case 3: fn(j, std::integral_constant<int, 3>{}); break;
    case 2: fn(j, std::integral_constant<int, 2>{}); break;
    case 1: fn(j, std::integral_constant<int, 1>{}); break;
    default: break;
  }
}

/// The attention variants of one sequence as the softmax applies them (include/pacheck/kernel_abi.h,
/// "Attention variants"): soft cap c (0 = none), ALiBi slope and sink logit of each query head (empty =
/// none), and the first key position the query row sees (the sliding window's left edge; 0 = all). The
/// query row sits at position L - 1 of its sequence.
template <class S>
struct RowVariants {
  S cap = S(0);
  std::vector<S> slopes, sinks;
  Index first = 0;
};

template <class S>
RowVariants<S> row_variants(const Case& c, int s) {
  RowVariants<S> v;
  if (c.logits_soft_cap) v.cap = static_cast<S>(*c.logits_soft_cap);
  for (float x : c.alibi_slopes.resolve(c.num_heads)) v.slopes.push_back(static_cast<S>(x));
  for (float x : c.sinks.resolve(c.num_heads)) v.sinks.push_back(static_cast<S>(x));
  v.first = c.window_start(s);
  return v;
}

/// Softmax of each column of `lg` ([L, num_heads], one column per query head), in place, after scaling
/// the logits; lse[h] gets column h's log-sum-exp. Subtracting the column max keeps exp() <= 1, so the
/// "extreme" distribution (logits ~1e4) neither overflows nor loses the row. The probabilities are
/// normalised before P.V (not the output after it): with V near the largest finite value, the
/// unnormalised sum of a few tied weights would overflow.
///
/// The variants `rv` are applied in the ABI's order, straight from the formula: s = scale * q.k, then
/// s = c tanh(s / c), then s += slope_h (j - (L - 1)), then keys before rv.first get weight 0 (exactly),
/// and a sink logit joins the max and the denominator (not the numerator): lse[h] is then the log of the
/// whole denominator, sink included.
///
/// `serial_sum` sums each column's weights one token at a time in order, in S (the emulation: a kernel's
/// running denominator, which drops the weights below half an ULP of the sum once a hot token has been
/// added, as fp32 kernels do on peaked rows); otherwise Eigen's lane-parallel sum (the oracle). The sink's
/// weight comes first in the serial sum, as kernels that start their running sum from the sink do.
template <class S>
void softmax_columns(ColMat<S>& lg, S scale, S* lse, bool serial_sum, const RowVariants<S>& rv) {
  const Index L = lg.rows();
  for (Index h = 0; h < lg.cols(); ++h) {
    auto col = lg.col(h);
    col *= scale;
    if (rv.cap > S(0)) col = col.unaryExpr([&](S x) { return rv.cap * std::tanh(x / rv.cap); });
    if (!rv.slopes.empty())
      for (Index j = 0; j < L; ++j) col[j] += rv.slopes[h] * static_cast<S>(j - (L - 1));
    for (Index j = 0; j < rv.first && j < L; ++j) col[j] = -std::numeric_limits<S>::infinity();
    const bool sink = !rv.sinks.empty();
    const S mx = sink ? std::max(col.maxCoeff(), rv.sinks[h]) : col.maxCoeff();
    // Eigen's packet exp clamps its argument (fp32: at about -87.3, giving ~6e-38, not 0); with a sink far
    // above every logit all the weights lie there, so the row takes std::exp, which underflows to 0 as the
    // formula does. Keys outside the window get exactly 0.
    if (sink)
      col = col.unaryExpr([&](S x) { return std::exp(x - mx); });
    else
      col = (col.array() - mx).exp();
    for (Index j = 0; j < rv.first && j < L; ++j) col[j] = S(0);
    S sum = sink ? std::exp(rv.sinks[h] - mx) : S(0);
    if (serial_sum)
      for (Index t = 0; t < col.size(); ++t) sum += col[t];
    else
      sum += col.sum();
    col *= S(1) / sum;
    lse[h] = mx + std::log(sum);
  }
}

/// Mode::oracle sums the per-tile partial outputs in double (two-level summation: rounding error grows
/// with kTile + seq_len / kTile terms, not seq_len). Mode::emulate is a kernel's arithmetic instead:
/// probabilities rounded to out_dtype, the softmax denominator and one fp32 accumulator per output
/// element each carried token by token over the whole sequence (the least accurate order a correct kernel
/// uses, so the calibrated limit covers the others), output rounded to out_dtype.
enum class Mode { oracle, emulate };

template <class S, Mode mode>
void attend(const Case& c, const PrePaging& p, std::vector<double>& out, std::vector<double>* lse_out) {
  check_shapes(c, p);
  using Acc = std::conditional_t<mode == Mode::oracle, double, S>;
  const int H = c.num_heads, G = c.num_kv_heads, D = c.head_size, R = c.gqa_ratio();
  const Index row = static_cast<Index>(G) * D;  // one token of K or V: [num_kv_heads, head_size]
  const S scale = static_cast<S>(c.effective_scale());
  out.assign(static_cast<std::size_t>(c.num_seqs()) * H * D, 0.0);
  if (lse_out) lse_out->assign(static_cast<std::size_t>(c.num_seqs()) * H, 0.0);

  constexpr bool kSerial = mode == Mode::emulate;
  std::vector<S> kbuf, vbuf, q(static_cast<std::size_t>(H) * D), lse(H);
  // fp32 running sums: of one tile and one KV head's group (oracle), or of the whole sequence (emulate).
  std::vector<S> run(static_cast<std::size_t>(kSerial ? H : R) * D);
  std::vector<S> bcast(static_cast<std::size_t>(kSubTile) * 4 * kLanes<S>);
  std::vector<Acc> o(static_cast<std::size_t>(H) * D);
  ColMat<S> lg;  // [seq_len, num_heads]: logits, then probabilities
  for (int s = 0; s < c.num_seqs(); ++s) {
    const Index L = c.seq_lens[s];
    const S* k = as_scalar<S>(p.k[s], kbuf);
    const S* v = as_scalar<S>(p.v[s], vbuf);
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<S>(p.q[s * q.size() + i]);
    lg.resize(L, H);

    // Logits: for each KV head g, [T, D] x [D, R] against the R query heads g*R .. g*R+R-1 (contiguous
    // rows of q, contiguous columns of lg). The scale is applied to the dot products, as kernels do.
    for (Index t0 = 0; t0 < L; t0 += kTile) {
      const Index T = std::min(kTile, L - t0);
      const S* next = k + std::min(L, t0 + T) * row;
      for (int g = 0; g < G; ++g) {
        PrefetchCursor pf = part_cursor(next, k + std::min(L, t0 + T + kTile) * row, g, G, T / 2);
        by_head_blocks(R, [&](int j, auto rb) {
          const Index h = static_cast<Index>(g) * R + j;
          qk_block<S, decltype(rb)::value>(q.data() + h * D, D, k + t0 * row + g * D, row, T,
                                           lg.data() + h * L + t0, L, pf);
        });
      }
    }
    softmax_columns<S>(lg, scale, lse.data(), kSerial, row_variants<S>(c, s));
    if constexpr (mode == Mode::emulate)
      lg = lg.unaryExpr([&](S x) { return static_cast<S>(round_to(static_cast<float>(x), c.out_dtype)); });

    // Output: for each KV head g, [R, T] x [T, D] per tile, kSubTile tokens per register pass.
    std::fill(o.begin(), o.end(), Acc(0));
    std::fill(run.begin(), run.end(), S(0));
    for (Index t0 = 0; t0 < L; t0 += kTile) {
      const Index T = std::min(kTile, L - t0);
      const S* next = v + std::min(L, t0 + T) * row;
      for (int g = 0; g < G; ++g) {
        PrefetchCursor pf = part_cursor(next, v + std::min(L, t0 + T + kTile) * row, g, G, T);
        if constexpr (!kSerial) std::fill(run.begin(), run.end(), S(0));
        for (Index u0 = t0; u0 < t0 + T; u0 += kSubTile) {
          const Index U = std::min(kSubTile, t0 + T - u0);
          by_head_blocks(R, [&](int j, auto rb) {
            const Index h = static_cast<Index>(g) * R + j;
            pv_block<S, decltype(rb)::value>(lg.data() + h * L + u0, L, v + u0 * row + g * D, row, U, D,
                                             run.data() + (kSerial ? h : j) * D, bcast.data(), pf);
          });
        }
        if constexpr (!kSerial) {
          Acc* og = o.data() + static_cast<Index>(g) * R * D;
          for (Index i = 0; i < static_cast<Index>(R) * D; ++i) og[i] += static_cast<Acc>(run[i]);
        }
      }
    }
    if constexpr (kSerial) std::copy(run.begin(), run.end(), o.begin());

    const std::size_t base = static_cast<std::size_t>(s) * H * D;
    for (std::size_t i = 0; i < o.size(); ++i)
      out[base + i] = mode == Mode::emulate ? static_cast<double>(round_to(static_cast<float>(o[i]), c.out_dtype))
                                            : static_cast<double>(o[i]);
    if (lse_out)
      for (int h = 0; h < H; ++h) (*lse_out)[static_cast<std::size_t>(s) * H + h] = static_cast<double>(lse[h]);
  }
}

}  // namespace

OracleResult oracle(const Case& c, const PrePaging& p, Precision precision) {
  OracleResult r;
  r.precision = precision;
  if (precision == Precision::f64)
    attend<double, Mode::oracle>(c, p, r.out, &r.lse);
  else
    attend<float, Mode::oracle>(c, p, r.out, &r.lse);
  return r;
}

std::vector<double> emulate_low_precision(const Case& c, const PrePaging& p) {
  std::vector<double> out;
  attend<float, Mode::emulate>(c, p, out, nullptr);
  return out;
}

}  // namespace pacheck
