// Shared pieces of the CPU kernels (kernels/cpu/*.cpp): typed element access over pacheck_kernel_args,
// dtype dispatch, dequantisation scales, the K/V view of one sequence and the CpuKernel base class.
#pragma once

// The standard headers every kernel file of this folder uses come with it.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/fp8.hpp"
#include "kernels/kernel.hpp"
#include "paging/layout.hpp"

namespace pacheck::cpu {

/// Reads element i of a raw buffer of dtype T as fp32, with T's decode table (fp8, f16) looked up once at
/// construction: a row's loads share one Loader (SeqView::k_row). fp8 elements are the decoded code, before
/// any scale.
template <DType T>
struct Loader {
  const float* table = nullptr;
  Loader() {
    if constexpr (is_fp8(T)) table = fp8_decode_table(static_cast<Fp8>(static_cast<std::uint8_t>(T))).data();
    else if constexpr (T == DType::f16) table = f16_decode_table().data();
  }
  float operator()(const void* base, std::int64_t i) const {
    if constexpr (is_fp8(T)) {
      return table[static_cast<const std::uint8_t*>(base)[i]];
    } else if constexpr (T == DType::f32) {
      float v;
      std::memcpy(&v, static_cast<const char*>(base) + 4 * i, 4);
      return v;
    } else {
      std::uint16_t b;
      std::memcpy(&b, static_cast<const char*>(base) + 2 * i, 2);
      if constexpr (T == DType::bf16) return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
      else return table[b];
    }
  }
};

/// Element i of a raw buffer of dtype T as fp32 (Loader's, one table lookup per process): the element
/// readers' load.
template <DType T>
inline float ld(const void* base, std::int64_t i) {
  static const Loader<T> load;
  return load(base, i);
}

/// Calls f.template operator()<KV>() with the KV dtype of `a` as a template argument.
template <typename F>
void dispatch_kv(const pacheck_kernel_args& a, F&& f) {
  switch (a.kv_dtype) {
    case PACHECK_DTYPE_F32: f.template operator()<DType::f32>(); return;
    case PACHECK_DTYPE_F16: f.template operator()<DType::f16>(); return;
    case PACHECK_DTYPE_BF16: f.template operator()<DType::bf16>(); return;
    case PACHECK_DTYPE_FP8_E4M3FN: f.template operator()<DType::fp8_e4m3fn>(); return;
    case PACHECK_DTYPE_FP8_E4M3FNUZ: f.template operator()<DType::fp8_e4m3fnuz>(); return;
    case PACHECK_DTYPE_FP8_E5M2: f.template operator()<DType::fp8_e5m2>(); return;
    default: throw std::invalid_argument("cpu kernel: unsupported kv dtype");
  }
}

/// Dequantisation scales of one call per KV head, [num_kv_heads] each: the per-head arrays when the call
/// has them, else the per-tensor k_scale / v_scale for every head. A K or V element of KV head g is
/// ld() * k[g] (resp. v[g]) for fp8 caches; other caches are read unscaled (their scales are 1).
struct Scales {
  std::vector<float> k, v;
  /// Per-slot tables (PACHECK_SCALE_FORM_PER_SLOT) or nullptr: [num_blocks, num_kv_heads, block_size].
  const float* k_slot = nullptr;
  const float* v_slot = nullptr;
  int G = 0, B = 0;
  explicit Scales(const pacheck_kernel_args& a)
      : k(a.k_scales_per_head ? std::vector<float>(a.k_scales_per_head, a.k_scales_per_head + a.num_kv_heads)
                              : std::vector<float>(a.num_kv_heads, a.k_scale)),
        v(a.v_scales_per_head ? std::vector<float>(a.v_scales_per_head, a.v_scales_per_head + a.num_kv_heads)
                              : std::vector<float>(a.num_kv_heads, a.v_scale)),
        k_slot(a.k_scales_per_slot),
        v_slot(a.v_scales_per_slot),
        G(a.num_kv_heads),
        B(a.block_size) {}
  /// The K (V) scale of slot `slot` of physical block `block`, KV head g: the per-slot table's entry, else
  /// the head's scale.
  float k_at(std::int64_t block, int g, int slot) const {
    return k_slot ? k_slot[slot_scale_offset(block, G, B, g, slot)] : k[static_cast<std::size_t>(g)];
  }
  float v_at(std::int64_t block, int g, int slot) const {
    return v_slot ? v_slot[slot_scale_offset(block, G, B, g, slot)] : v[static_cast<std::size_t>(g)];
  }
};

/// Query element (r, h, d) as fp32; r is the query row (= the sequence for plain decode, see query_rows).
inline float query(const pacheck_kernel_args& a, int r, int h, int d) {
  return load(a.query, r * a.q_stride_seq + h * a.q_stride_head + d, static_cast<DType>(a.q_dtype));
}

/// Writes output element (r, h, d) of query row r, rounded to the output dtype.
inline void store_out(const pacheck_kernel_args& a, int r, int h, int d, float v) {
  store(a.out, static_cast<std::size_t>(r * a.out_stride_seq + h * a.out_stride_head + d),
        static_cast<DType>(a.out_dtype), v);
}

/// The query rows [first, last) of sequence s: query_start_loc_host[s] .. [s + 1] with several query tokens
/// per sequence (kernel_abi.h), else the one row s.
struct QueryRows {
  int first, last;
};
inline QueryRows query_rows(const pacheck_kernel_args& a, int s) {
  if (a.query_start_loc_host) return {a.query_start_loc_host[s], a.query_start_loc_host[s + 1]};
  return {s, s + 1};
}
/// Keys query row r of sequence s sees, causally: its position p + 1, where the sequence's rows are its last
/// tokens (p = seq_len - 1 for its last row, and for the one row of plain decode).
inline int row_keys(const pacheck_kernel_args& a, int s, int r) {
  return a.seq_lens[s] - (query_rows(a, s).last - 1 - r);
}

/// The 16-bit dtype in which half-product kernels (vLLM's CUDA half2 dot, cpu.half_products) round P, V and
/// each product: the cache dtype for f16 and bf16 caches; for fp8 caches the query dtype when it is f16 or bf16
/// (vLLM's scalar_t, into which fp8 is decoded); f32 otherwise (plain fp32 products).
inline DType half_product_dtype(const pacheck_kernel_args& a) {
  const auto kv = static_cast<DType>(a.kv_dtype), q = static_cast<DType>(a.q_dtype);
  if (kv == DType::f16 || kv == DType::bf16) return kv;
  if (is_fp8(kv) && (q == DType::f16 || q == DType::bf16)) return q;
  return DType::f32;
}

/// x of the vllm key layout for the kv dtype (16 bytes per packed vector).
inline int pack_x(const pacheck_kernel_args& a) { return static_cast<int>(16 / dtype_size(static_cast<DType>(a.kv_dtype))); }

/// Physical block of logical block j of sequence s.
inline std::int64_t physical_block(const pacheck_kernel_args& a, int s, int j) {
  return a.block_tables[s * a.block_tables_stride + j];
}

/// -inf in fp32: the masked logit, and the running max before the first token.
inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// Base of the CPU kernels: device CPU, every case supported (they read any layout, dtype and shape, and
/// implement the sliding window, soft cap, ALiBi, sinks and several query tokens per sequence of
/// kernel_abi.h's "Attention variants").
class CpuKernel : public Kernel {
 public:
  pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
  Support supports(const Case&) const override { return Support::yes(); }
  unsigned variants() const override {
    return PACHECK_VARIANT_SLIDING_WINDOW | PACHECK_VARIANT_ALIBI | PACHECK_VARIANT_SOFT_CAP | PACHECK_VARIANT_SINKS |
           PACHECK_VARIANT_MULTI_QUERY;
  }
};

// ---- Attention variants (include/pacheck/kernel_abi.h, "Attention variants"), as a decode kernel applies
// them to the logit of key t of a query row that sees `len` keys (position p = len - 1: seq_lens[s] - 1 for
// the one row of plain decode; row_keys() for several query tokens). ----

/// Steps 2 and 3 of the ABI's order on an already scaled logit x = scale * q.k_t: the soft cap
/// c tanh(x / c) (fp32 std::tanh) when logits_soft_cap > 0, then + alibi_slopes[h] * (t - (len - 1))
/// when the call has slopes. x unchanged for plain decode.
inline float apply_variants(const pacheck_kernel_args& a, int len, int h, int t, float x) {
  if (a.logits_soft_cap > 0.0f) x = a.logits_soft_cap * std::tanh(x / a.logits_soft_cap);
  if (a.alibi_slopes) x += a.alibi_slopes[h] * static_cast<float>(t - (len - 1));
  return x;
}
/// Step 4: the first key a query row that sees `len` keys (0 .. len - 1, causal) sees: len - W with a
/// sliding window W shorter than that, else 0. Keys before it are never read.
inline int window_first(const pacheck_kernel_args& a, int len) {
  const int w = a.sliding_window;
  return w > 0 && len > w ? len - w : 0;
}
/// Step 5: the sink logit of query head h, or nullopt without sinks.
inline std::optional<float> sink_logit(const pacheck_kernel_args& a, int h) {
  if (!a.sinks) return std::nullopt;
  return a.sinks[h];
}

/// K/V of sequence `s` read through its block_tables row, token by token: token t lives in slot
/// t % block_size of physical block block_of(t); `x` is pack_x(a) (the vllm key layout's vector width).
/// k()/v() return element d of KV head g as fp32: fp8 elements dequantised with `sc`, other dtypes as stored.
struct SeqView {
  const pacheck_kernel_args& a;
  int s, x;
  const Scales& sc;
  int h = 0;    ///< the query head whose row is computed (ALiBi slope); for_each_query_head sets it
  int row = 0;  ///< the query/output row computed (query_rows); for_each_query_head sets it
  int len = 0;  ///< keys that row sees, 0 .. len - 1 (row_keys: its position + 1); for_each_query_head sets it
  std::int64_t block_of(int t) const { return physical_block(a, s, t / a.block_size); }
  template <DType KV>
  float k(int t, int g, int d) const {
    const float e = ld<KV>(a.key_cache, key_offset(a.layout, a.k_strides, x, block_of(t), g, t % a.block_size, d));
    if constexpr (is_fp8(KV)) return e * sc.k_at(block_of(t), g, t % a.block_size);
    else return e;
  }
  template <DType KV>
  float v(int t, int g, int d) const {
    const float e = ld<KV>(a.value_cache, value_offset(a.layout, a.v_strides, block_of(t), g, t % a.block_size, d));
    if constexpr (is_fp8(KV)) return e * sc.v_at(block_of(t), g, t % a.block_size);
    else return e;
  }
  /// Elements 0 .. n-1 of token t's K row of KV head g into dst[n]: k<KV>(t, g, d) for each d, bit for bit
  /// (the same load and the same one multiply by the scale). The block table entry, the row's offset and
  /// the scale are looked up once per row, not once per element: the CPU kernels' inner loops read rows.
  template <DType KV>
  void k_row(int t, int g, float* dst, int n) const {
    const std::int64_t blk = block_of(t);
    const int slot = t % a.block_size;
    const std::int64_t* ks = a.k_strides;
    const std::int64_t base = key_offset(a.layout, ks, x, blk, g, slot, 0);
    const Loader<KV> load;
    if (a.layout == PACHECK_LAYOUT_NHD || a.layout == PACHECK_LAYOUT_HND) {
      for (int d = 0; d < n; ++d) dst[d] = load(a.key_cache, base + d * ks[3]);
    } else {  // vllm and aiter keys: packed vectors of x elements (key_offset)
      for (int d0 = 0; d0 < n; d0 += x) {
        const std::int64_t vec = base + (d0 / x) * ks[2];
        for (int i = 0; i < x && d0 + i < n; ++i) dst[d0 + i] = load(a.key_cache, vec + i * ks[4]);
      }
    }
    if constexpr (is_fp8(KV)) {
      const float scale = sc.k_at(blk, g, slot);
      for (int d = 0; d < n; ++d) dst[d] *= scale;
    }
  }
  /// Elements 0 .. n-1 of token t's V row of KV head g into dst[n]: v<KV>(t, g, d) for each d, bit for bit.
  template <DType KV>
  void v_row(int t, int g, float* dst, int n) const {
    const std::int64_t blk = block_of(t);
    const int slot = t % a.block_size;
    const std::int64_t* vs = a.v_strides;
    const std::int64_t base = value_offset(a.layout, vs, blk, g, slot, 0);
    const std::int64_t step = a.layout == PACHECK_LAYOUT_VLLM ? vs[2] : vs[3];  // value_offset's d stride
    const Loader<KV> load;
    for (int d = 0; d < n; ++d) dst[d] = load(a.value_cache, base + d * step);
    if constexpr (is_fp8(KV)) {
      const float scale = sc.v_at(blk, g, slot);
      for (int d = 0; d < n; ++d) dst[d] *= scale;
    }
  }
};

/// A per-thread row buffer of at least n floats for SeqView::k_row / v_row (`which` keeps a K row and a V
/// row apart); valid until the next call with the same `which` on this thread.
inline float* row_scratch(int which, int n) {
  thread_local std::vector<float> rows[2];
  std::vector<float>& r = rows[which];
  if (static_cast<int>(r.size()) < n) r.resize(static_cast<std::size_t>(n));
  return r.data();
}
inline float* k_scratch(int n) { return row_scratch(0, n); }
inline float* v_scratch(int n) { return row_scratch(1, n); }

/// Scaled logit scale * (q . K_t) of token t against KV head g, summed in fp32 in dimension order; `q` is
/// the query row [head_size] in fp32. The soft cap and query head sv.h's ALiBi term follow (apply_variants).
template <DType KV>
float logit(const SeqView& sv, const std::vector<float>& q, int t, int g, float scale) {
  const int n = static_cast<int>(q.size());
  float* k = k_scratch(n);
  sv.k_row<KV>(t, g, k, n);
  float dot = 0;
  for (int d = 0; d < n; ++d) dot += q[static_cast<std::size_t>(d)] * k[d];
  return apply_variants(sv.a, sv.len, sv.h, t, dot * scale);
}

/// Online softmax state over the tokens seen so far (FlashAttention-2's m, l and O): running max `m`,
/// running exp-sum `l` and the UNnormalised accumulator acc = sum_t exp(s_t - m) V_t [head_size], in fp32.
/// add_tile() folds in tokens [t0, t1): acc and l are rescaled by exp(m_old - m_new) once per tile.
/// With `pv_dtype` f16 or bf16, p and V enter P.V rounded to it (Triton's tl.dot(p.to(v.dtype), v): the
/// products are exact in fp32 and summed in fp32) while l sums the fp32 p; f32 leaves them as they are.
struct OnlineSoftmax {
  float m = kNegInf, l = 0;
  std::vector<float> acc;
  std::vector<float> s;  ///< scratch: the tile's logits
  DType pv_dtype = DType::f32;

  explicit OnlineSoftmax(int head_size, DType pv = DType::f32) : acc(head_size, 0.0f), pv_dtype(pv) {}
  /// Starts from a sink logit (kernel_abi.h, "Attention variants"): m = sink, l = exp(sink - m) = 1 and no
  /// value row, as gpt-oss-style kernels seed their running max and sum; nullopt = no sink.
  void start_from_sink(std::optional<float> sink) {
    if (!sink) return;
    m = *sink;
    l = 1.0f;
  }
  template <DType KV>
  void add_tile(const SeqView& sv, int g, const std::vector<float>& q, float scale, int t0, int t1) {
    const bool round = pv_dtype != DType::f32;
    s.resize(t1 - t0);
    float m_new = m;
    for (int t = t0; t < t1; ++t) m_new = std::max(m_new, s[t - t0] = logit<KV>(sv, q, t, g, scale));
    const float alpha = std::exp(m - m_new);  // 0 before the first tile (m = -inf)
    l *= alpha;
    for (float& x : acc) x *= alpha;
    for (int t = t0; t < t1; ++t) {
      const float p = std::exp(s[t - t0] - m_new);
      l += p;
      const float pv = round ? round_to(p, pv_dtype) : p;
      const int n = static_cast<int>(acc.size());
      float* v = v_scratch(n);
      sv.v_row<KV>(t, g, v, n);
      for (int d = 0; d < n; ++d) acc[static_cast<std::size_t>(d)] += pv * (round ? round_to(v[d], pv_dtype) : v[d]);
    }
    m = m_new;
  }
  /// Folds in tokens [t0, t1) a tile of `tile` tokens at a time (add_tile).
  template <DType KV>
  void add_tokens(const SeqView& sv, int g, const std::vector<float>& q, float scale, int t0, int t1, int tile) {
    for (int t = t0; t < t1; t += tile) add_tile<KV>(sv, g, q, scale, t, std::min(t1, t + tile));
  }
  /// The output so far, divided by the exp-sum once: out[d] = acc[d] / l (`out` points at head_size floats).
  void normalised(float* out) const {
    for (std::size_t d = 0; d < acc.size(); ++d) out[d] = acc[d] / l;
  }
};

/// The loop every kernel of this folder shares: for each sequence s, query row r of it (query_rows) and
/// query head h, calls row.template operator()<KV>(sv, g, q, out) with the row's SeqView (sv.s = s,
/// sv.h = h, sv.row = r, sv.len = the keys it sees, row_keys), the KV head g = h / (num_heads /
/// num_kv_heads), the query row q [head_size] in fp32 and out [out_width] to fill, then stores out rounded
/// to the output dtype. KV is the cache dtype of `a` (dispatch_kv). out_width 0 means head_size; the MLA
/// kernels (kernels/cpu/mla_*.cpp) pass their V width, a prefix of the row.
template <typename Row>
void for_each_query_head(const pacheck_kernel_args& a, Row&& row, int out_width = 0) {
  dispatch_kv(a, [&]<DType KV>() {
    const int ratio = a.num_heads / a.num_kv_heads, D = a.head_size, O = out_width > 0 ? out_width : D;
    const Scales sc(a);
    std::vector<float> q(D), out(O);
    for (int s = 0; s < a.num_seqs; ++s) {
      const QueryRows rows = query_rows(a, s);
      for (int r = rows.first; r < rows.last; ++r) {
        for (int h = 0; h < a.num_heads; ++h) {
          const SeqView sv{a, s, pack_x(a), sc, h, r, row_keys(a, s, r)};
          for (int d = 0; d < D; ++d) q[d] = query(a, r, h, d);
          row.template operator()<KV>(sv, h / ratio, q, out);
          for (int d = 0; d < O; ++d) store_out(a, r, h, d, out[d]);
        }
      }
    }
  });
}

}  // namespace pacheck::cpu
