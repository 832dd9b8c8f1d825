// The oracle: decode attention from the pre-paging tensors. Per sequence and KV head, the R =
// num_heads / num_kv_heads query heads of the GQA group are computed together against one read of
// that head's K and V.
//
// Why the two products are not plain Eigen products: with only R (1..16) right-hand columns, Eigen's
// GEMM spends its time packing K and V into panels; on the benchmark cell (h32/8 d128 ctx32768, R = 4)
// it ran at ~8 GFLOP/s and the oracle took 6x a stream over the same bytes. The products are the same
// ([L, D] x [D, R] for the logits, [R, L] x [L, D] for the output), written instead as register-blocked
// SIMD loops that read K and V once, in place, one token tile of all KV heads at a time
// (oracle/products_body.inc), compiled for the build's flags, AVX2+FMA and AVX-512 and chosen at run time
// (oracle_isa(); oracle/products.cpp). docs/BENCHMARKS.md has the numbers.
#include "oracle/oracle.hpp"

#include <Eigen/Core>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "core/table.hpp"
#include "oracle/products.hpp"

namespace pacheck {
namespace {

using detail::Index;
/// [L, num_heads] logits, then probabilities, column h (query head h) at h * ld: see logits_stride.
template <class S>
using ColMap = Eigen::Map<Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>, Eigen::Unaligned,
                          Eigen::OuterStride<>>;

/// The distance between columns of the logits: L rounded up to a cache line, plus one line. With L a
/// multiple of 1024 tokens (4 KiB of fp32) the columns would otherwise start at addresses congruent modulo
/// the L1 and L2 set period, and the products, which write and read every column at the same token, then
/// evict their own lines (32 columns in one 8-way set); the extra line puts each column in a set of its own.
template <class S>
Index logits_stride(Index L) {
  constexpr Index line = 64 / static_cast<Index>(sizeof(S));
  return (L + line - 1) / line * line + line;
}

/// Tokens per tile of the oracle's two-level P.V sum: each tile's products are summed in S, the tiles'
/// sums in double, so rounding error grows with kTile + seq_len / kTile terms, not seq_len.
constexpr Index kTile = 128;

void check_shapes(const Case& c, const PrePaging& p) {
  c.validate();
  const std::size_t H = c.num_heads, G = c.num_kv_heads, D = c.head_size;
  const std::size_t n = static_cast<std::size_t>(c.num_seqs()), rows = static_cast<std::size_t>(c.num_query_tokens());
  if (p.q.size() != rows * H * D)
    throw std::invalid_argument(fmt::format(
        "oracle: q has {} elements, case needs num_query_tokens*num_heads*head_size = {}", p.q.size(), rows * H * D));
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

/// Throws std::invalid_argument when this CPU or build cannot run `isa` (an explicit argument that did not
/// come from available_oracle_isas()).
void check_isa(OracleIsa isa) {
  const std::vector<OracleIsa> ok = available_oracle_isas();
  if (std::find(ok.begin(), ok.end(), isa) == ok.end())
    throw std::invalid_argument(fmt::format("oracle: instruction set '{}' is not available on this CPU or build",
                                            oracle_isa_name(isa)));
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

/// The attention variants of one sequence as the softmax applies them (include/pacheck/kernel_abi.h,
/// "Attention variants"): soft cap c (0 = none), ALiBi slope and sink logit of each query head (empty =
/// none), and the first key position the query row sees (the sliding window's left edge; 0 = all). The
/// query row sits at position L - 1, where L is the number of keys it sees (causal: p + 1).
template <class S>
struct RowVariants {
  S cap = S(0);
  std::vector<S> slopes, sinks;
  Index first = 0;
  /// No variant applies to this row: the softmax is the plain one.
  bool plain() const { return cap == S(0) && slopes.empty() && sinks.empty() && first == 0; }
};

/// The variants of the query row at position `pos` of its sequence.
template <class S>
RowVariants<S> row_variants(const Case& c, int pos) {
  RowVariants<S> v;
  if (c.logits_soft_cap) v.cap = static_cast<S>(*c.logits_soft_cap);
  for (float x : c.alibi_slopes.resolve(c.num_heads)) v.slopes.push_back(static_cast<S>(x));
  for (float x : c.sinks.resolve(c.num_heads)) v.sinks.push_back(static_cast<S>(x));
  v.first = c.window_start_at(pos);
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
void softmax_columns(ColMap<S>& lg, S scale, S* lse, bool serial_sum, const RowVariants<S>& rv) {
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

template <class S>
const detail::TileProducts<S>& products_for(OracleIsa isa) {
  if constexpr (std::is_same_v<S, float>)
    return detail::tile_products_f32(isa);
  else
    return detail::tile_products_f64(isa);
}

template <class S, Mode mode>
void attend(const Case& c, const PrePaging& p, OracleIsa isa, std::vector<double>& out,
            std::vector<double>* lse_out) {
  check_shapes(c, p);
  check_isa(isa);
  const detail::TileProducts<S>& prod = products_for<S>(isa);
  using Acc = std::conditional_t<mode == Mode::oracle, double, S>;
  const int H = c.num_heads, G = c.num_kv_heads, D = c.head_size, R = c.gqa_ratio();
  const Index row = static_cast<Index>(G) * D;  // one token of K or V: [num_kv_heads, head_size]
  const S scale = static_cast<S>(c.effective_scale());
  const int rows = c.num_query_tokens();
  out.assign(static_cast<std::size_t>(rows) * H * D, 0.0);
  if (lse_out) lse_out->assign(static_cast<std::size_t>(rows) * H, 0.0);

  constexpr bool kSerial = mode == Mode::emulate;
  std::vector<S> kbuf, vbuf, q(static_cast<std::size_t>(H) * D), lse(H);
  // Running sums in S of every head: of one tile (oracle), or of the whole sequence (emulate).
  std::vector<S> run(static_cast<std::size_t>(H) * D);
  std::vector<Acc> o(static_cast<std::size_t>(H) * D);
  std::vector<S> lgbuf;  // the logits of a sequence (ColMap, logits_stride)
  std::vector<S> mx(H), inv(H);  // the dispatched softmax's column max and 1 / sum
  std::vector<double> sum(H);
  // One query row at a time: row i of sequence s sits at position pos = seq_len - query_len + i and sees
  // keys 0 .. pos (causal), i.e. the first L = pos + 1 tokens of K and V; with one query token per sequence
  // (plain decode) L = seq_len. Its window edge and ALiBi distances are taken from pos.
  for (int s = 0; s < c.num_seqs(); ++s) {
    const S* k = as_scalar<S>(p.k[s], kbuf);
    const S* v = as_scalar<S>(p.v[s], vbuf);
    for (int qi = 0; qi < c.query_len(s); ++qi) {
      const int pos = c.query_pos(s, qi), r = c.query_start(s) + qi;
      const Index L = pos + 1;
      for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<S>(p.q[static_cast<std::size_t>(r) * q.size() + i]);
      const Index ld = logits_stride<S>(L);
      lgbuf.resize(static_cast<std::size_t>(ld) * H);
      ColMap<S> lg(lgbuf.data(), L, H, Eigen::OuterStride<>(ld));

      // Logits: the [L, D] x [D, R] products of every KV head's group, token by token. The scale is applied
      // to the dot products (softmax_columns), as kernels do.
      prod.logits(q.data(), G, R, D, k, L, lg.data(), ld);
      // The plain softmax of the oracle (fp32) runs on the products' instruction set and leaves the
      // normalisation to P.V (pscale: p * (1 / sum), rounded as softmax_columns' col *= 1 / sum); variants,
      // fp64 and the emulation's serial sum take softmax_columns.
      const RowVariants<S> rv = row_variants<S>(c, pos);
      const S* pscale = nullptr;
      if (mode == Mode::oracle && prod.softmax && rv.plain()) {
        prod.softmax(lg.data(), ld, L, H, scale, mx.data(), sum.data());
        for (int h = 0; h < H; ++h) {
          inv[h] = static_cast<S>(1.0 / sum[h]);
          lse[h] = static_cast<S>(static_cast<double>(mx[h]) + std::log(sum[h]));
        }
        pscale = inv.data();
      } else {
        softmax_columns<S>(lg, scale, lse.data(), kSerial, rv);
      }
      if constexpr (mode == Mode::emulate)
        lg = lg.unaryExpr([&](S x) { return static_cast<S>(round_to(static_cast<float>(x), c.out_dtype)); });

      // Output: [R, T] x [T, D] for every group, per tile of kTile tokens (oracle: each tile's sums in S, then
      // added in Acc = double), or carried over the whole sequence (emulate).
      std::fill(o.begin(), o.end(), Acc(0));
      std::fill(run.begin(), run.end(), S(0));
      for (Index t0 = 0; t0 < L; t0 += kTile) {
        const Index T = std::min(kTile, L - t0);
        if constexpr (!kSerial) std::fill(run.begin(), run.end(), S(0));
        prod.pv(lg.data() + t0, ld, pscale, G, R, D, v + t0 * row, T, L - t0, run.data());
        if constexpr (!kSerial)
          for (std::size_t i = 0; i < run.size(); ++i) o[i] += static_cast<Acc>(run[i]);
      }
      if constexpr (kSerial) std::copy(run.begin(), run.end(), o.begin());

      const std::size_t base = static_cast<std::size_t>(r) * H * D;
      for (std::size_t i = 0; i < o.size(); ++i)
        out[base + i] = mode == Mode::emulate ? static_cast<double>(round_to(static_cast<float>(o[i]), c.out_dtype))
                                              : static_cast<double>(o[i]);
      if (lse_out)
        for (int h = 0; h < H; ++h) (*lse_out)[static_cast<std::size_t>(r) * H + h] = static_cast<double>(lse[h]);
    }
  }
}

constexpr OracleIsaInfo kIsas[] = {
    {OracleIsa::baseline, "baseline", "the build's own flags through Eigen's packets (x86-64 default: SSE2, no FMA)"},
    {OracleIsa::avx2, "avx2", "AVX2 + FMA: 8 floats per packet, fused multiply-add"},
    {OracleIsa::avx512, "avx512", "AVX-512F: 16 floats per packet, fused multiply-add"},
};

/// Whether this CPU runs `isa` (baseline: always).
bool cpu_runs(OracleIsa isa) {
  if (!detail::oracle_isa_compiled(isa)) return false;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  switch (isa) {
    case OracleIsa::baseline: return true;
    case OracleIsa::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case OracleIsa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }
  return false;
#else
  return isa == OracleIsa::baseline;
#endif
}

}  // namespace

std::span<const OracleIsaInfo> oracle_isa_table() { return kIsas; }
std::string_view oracle_isa_name(OracleIsa isa) { return name_of(oracle_isa_table(), isa); }

std::vector<OracleIsa> available_oracle_isas() {
  std::vector<OracleIsa> out;
  for (const OracleIsaInfo& r : kIsas)
    if (cpu_runs(r.value)) out.push_back(r.value);
  return out;
}

OracleIsa resolve_oracle_isa(const char* env) {
  const std::vector<OracleIsa> ok = available_oracle_isas();
  std::vector<std::string_view> ok_names;
  for (OracleIsa i : ok) ok_names.push_back(oracle_isa_name(i));
  if (!env || !*env) return ok.back();
  const OracleIsaInfo* r = find_name(oracle_isa_table(), env);
  if (!r)
    throw OracleIsaError(fmt::format("PACHECK_ORACLE_ISA: '{}' is not an instruction set of the oracle ({}); this "
                                     "CPU runs {}",
                                     env, names_list(oracle_isa_table()), fmt::join(ok_names, ", ")));
  if (std::find(ok.begin(), ok.end(), r->value) == ok.end())
    throw OracleIsaError(fmt::format("PACHECK_ORACLE_ISA: '{}' cannot run here ({}); this CPU and build run {}", env,
                                     detail::oracle_isa_compiled(r->value) ? "the CPU lacks it"
                                                                           : "not compiled into this build",
                                     fmt::join(ok_names, ", ")));
  return r->value;
}

OracleIsa oracle_isa() {
  // Decided once: a value the environment changes later does not switch paths halfway through a run.
  static const std::optional<OracleIsa> chosen = []() -> std::optional<OracleIsa> {
    try {
      return resolve_oracle_isa(std::getenv("PACHECK_ORACLE_ISA"));
    } catch (const OracleIsaError&) {
      return std::nullopt;
    }
  }();
  if (!chosen) return resolve_oracle_isa(std::getenv("PACHECK_ORACLE_ISA"));  // throws the error again
  return *chosen;
}

OracleResult oracle(const Case& c, const PrePaging& p, Precision precision, OracleIsa isa) {
  OracleResult r;
  r.precision = precision;
  if (precision == Precision::f64)
    attend<double, Mode::oracle>(c, p, isa, r.out, &r.lse);
  else
    attend<float, Mode::oracle>(c, p, isa, r.out, &r.lse);
  return r;
}

OracleResult oracle(const Case& c, const PrePaging& p, Precision precision) {
  return oracle(c, p, precision, oracle_isa());
}

std::vector<double> emulate_low_precision(const Case& c, const PrePaging& p, OracleIsa isa) {
  std::vector<double> out;
  attend<float, Mode::emulate>(c, p, isa, out, nullptr);
  return out;
}

std::vector<double> emulate_low_precision(const Case& c, const PrePaging& p) {
  return emulate_low_precision(c, p, oracle_isa());
}

}  // namespace pacheck
