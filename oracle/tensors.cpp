#include "oracle/tensors.hpp"

#include <Random123/philox.h>
#include <Random123/uniform.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace pacheck {
namespace {

enum Stream : std::uint32_t { kQ = 1, kK = 2, kV = 3, kHot = 4, kSign = 5, kKSlotScale = 6, kVSlotScale = 7 };

/// Four independent 32-bit draws for coordinate (stream, seq, index). Inlined into the per-element loops.
inline __attribute__((always_inline)) r123::Philox4x32::ctr_type draw(std::uint64_t seed, Stream stream, std::uint32_t seq, std::uint64_t index) {
  r123::Philox4x32 rng;
  r123::Philox4x32::ctr_type ctr{{stream, seq, static_cast<std::uint32_t>(index),
                                  static_cast<std::uint32_t>(index >> 32)}};
  r123::Philox4x32::key_type key{{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)}};
  return rng(ctr, key);
}

float uniform01(std::uint32_t r) { return r123::u01<float>(r); }               // (0, 1]
float uniform_pm1(std::uint32_t r) { return r123::uneg11<float>(r); }           // [-1, 1]
float normal(std::uint32_t a, std::uint32_t b) {                                // Box-Muller
  const float u1 = uniform01(a), u2 = uniform01(b);
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853071795864f * u2);
}

struct ValueGen {
  const Case& c;
  /// Per KV head: B = min(largest finite value of the KV dtype (fp8: x the head's V scale) and of the
  /// output dtype, 3e38), the magnitude scale of V under "overflow"; "extreme" bounds it further per sequence.
  std::vector<float> v_full;

  float q(std::uint32_t seq, std::uint64_t i) const {
    auto r = draw(c.seed, kQ, seq, i);
    switch (c.dist) {
      case Dist::uniform: return uniform_pm1(r[0]);
      case Dist::normal: return normal(r[0], r[1]);
      case Dist::peaked: return 0.5f + uniform01(r[0]);
      case Dist::extreme:
      case Dist::overflow: return (r[2] & 1u) ? 64.0f : -64.0f;
    }
    return 0;
  }
  // Key element d of token t, KV head g of sequence seq; `i` is its flat pre-paging index.
  float k(std::uint32_t seq, std::uint64_t i, int t, int g) const {
    auto r = draw(c.seed, kK, seq, i);
    switch (c.dist) {
      case Dist::uniform: return uniform_pm1(r[0]);
      case Dist::normal: return normal(r[0], r[1]);
      case Dist::peaked: return is_hot(seq, t, g) ? 3.0f : 0.3f * normal(r[0], r[1]);
      case Dist::extreme:
      case Dist::overflow: return (r[2] & 1u) ? 64.0f : -64.0f;
    }
    return 0;
  }
  float v(std::uint32_t seq, std::uint64_t i, int g) const {
    auto r = draw(c.seed, kV, seq, i);
    switch (c.dist) {
      case Dist::uniform: return uniform_pm1(r[0]);
      case Dist::normal:
      case Dist::peaked: return normal(r[0], r[1]);
      case Dist::extreme:
      case Dist::overflow: {
        const float mag = v_scale(seq, g) * (0.25f + 0.25f * uniform01(r[0]));
        return (r[2] & 1u) ? mag : -mag;
      }
    }
    return 0;
  }
  /// |V| <= v_scale / 2 under extreme and overflow. Extreme: B is also at most FLT_MAX / seq_len, so
  /// |V| <= FLT_MAX / (2 seq_len) (times 1 + 2^-8 after rounding to bf16) and every unnormalised fp32 sum
  /// of p x V with p <= 1 (online, two-pass, a split-KV merge of num_partitions <= seq_len normalised
  /// partials) stays below FLT_MAX. Overflow: B alone, V near the dtype's limit whatever seq_len.
  float v_scale(std::uint32_t seq, int g) const {
    if (c.dist == Dist::overflow) return v_full[g];
    return std::min(v_full[g], std::numeric_limits<float>::max() / static_cast<float>(c.seq_lens[seq]));
  }
  // About one token in 500 (at least one per sequence and KV head) is hot under "peaked".
  bool is_hot(std::uint32_t seq, int t, int g) const {
    const int len = c.seq_lens[seq];
    auto r = draw(c.seed, kHot, seq, static_cast<std::uint64_t>(g));
    if (t == static_cast<int>(r[0] % static_cast<std::uint32_t>(len))) return true;
    auto rt = draw(c.seed, kHot, seq, (static_cast<std::uint64_t>(t) << 20) | static_cast<std::uint64_t>(g + 1));
    return rt[1] % 500u == 0;
  }
};

/// An fp8 element: the code of raw / scale and the value the cache then holds, decode(code) * scale.
struct Quantised {
  std::uint8_t code;
  float value;
};
Quantised quantise(float raw, float scale, DType kv) {
  const auto code = static_cast<std::uint8_t>(to_bits(raw / scale, kv));
  return {code, from_bits(code, kv) * scale};
}

/// The per-slot scale of token t, KV head g of sequence `seq` (KvScale::slot = {lo, hi}): lo * (hi/lo)^u.
float slot_scale(const Case& c, Stream stream, const std::pair<float, float>& lohi, std::uint32_t seq,
                 std::uint64_t index) {
  const double u = uniform01(draw(c.seed, stream, seq, index)[0]);
  const double lo = lohi.first, hi = lohi.second;
  return static_cast<float>(lo * std::pow(hi / lo, u));
}

}  // namespace

PrePaging generate(const Case& c, KvDraw draw) {
  c.validate();
  const int G = c.num_kv_heads;
  const bool fp8 = is_fp8(c.kv_dtype);
  const std::vector<float> ks = c.k_scale.resolve(G), vs = c.v_scale.resolve(G);
  std::vector<float> v_full(G);
  for (int g = 0; g < G; ++g) {
    const double kv_max = dtype_max_finite(c.kv_dtype) * (fp8 ? vs[g] : 1.0);
    v_full[g] = static_cast<float>(std::min({kv_max, dtype_max_finite(c.out_dtype), 3.0e38}));
  }
  ValueGen gen{c, std::move(v_full)};
  PrePaging p;
  const int H = c.num_heads, D = c.head_size;
  // Query row i of sequence s (of query_len rows) draws from index (query_len - 1 - i) * H * D + element, so
  // the last row (position seq_len - 1) holds the query a one-token case of the same seed has.
  const std::size_t HD = static_cast<std::size_t>(H) * D;
  p.q.resize(static_cast<std::size_t>(c.num_query_tokens()) * HD);
  for (int s = 0; s < c.num_seqs(); ++s) {
    const int ql = c.query_len(s), row0 = c.query_start(s);
    for (int r = 0; r < ql; ++r)
      for (std::size_t i = 0; i < HD; ++i)
        p.q[static_cast<std::size_t>(row0 + r) * HD + i] =
            round_to(gen.q(s, static_cast<std::uint64_t>(ql - 1 - r) * HD + i), c.q_dtype);
  }

  const bool with_v = draw == KvDraw::k_and_v;
  p.k.resize(c.num_seqs());
  if (with_v) p.v.resize(c.num_seqs());
  if (fp8) {
    p.k_codes.resize(c.num_seqs());
    if (with_v) p.v_codes.resize(c.num_seqs());
  }
  const bool k_slot = fp8 && c.k_scale.per_slot(), v_slot = with_v && fp8 && c.v_scale.per_slot();
  if (k_slot) p.k_slot_scales.resize(c.num_seqs());
  if (v_slot) p.v_slot_scales.resize(c.num_seqs());
  for (int s = 0; s < c.num_seqs(); ++s) {
    const std::size_t n = static_cast<std::size_t>(c.seq_lens[s]) * G * D;
    p.k[s].resize(n);
    if (with_v) p.v[s].resize(n);
    if (fp8) {
      p.k_codes[s].resize(n);
      if (with_v) p.v_codes[s].resize(n);
    }
    const std::size_t tg = static_cast<std::size_t>(c.seq_lens[s]) * G;
    if (k_slot) {
      p.k_slot_scales[s].resize(tg);
      for (std::size_t j = 0; j < tg; ++j) p.k_slot_scales[s][j] = slot_scale(c, kKSlotScale, *c.k_scale.slot, s, j);
    }
    if (v_slot) {
      p.v_slot_scales[s].resize(tg);
      for (std::size_t j = 0; j < tg; ++j) p.v_slot_scales[s][j] = slot_scale(c, kVSlotScale, *c.v_scale.slot, s, j);
    }
    // Element i = (t * G + g) * D + d, walked in that order (no division per element); slot j = t * G + g.
    std::size_t i = 0;
    for (int t = 0; t < c.seq_lens[s]; ++t)
      for (int g = 0; g < G; ++g)
        for (int d = 0; d < D; ++d, ++i) {
          const float rk = gen.k(s, i, t, g);
          if (fp8) {
            const std::size_t j = static_cast<std::size_t>(t) * G + g;
            const Quantised qk = quantise(rk, k_slot ? p.k_slot_scales[s][j] : ks[g], c.kv_dtype);
            p.k_codes[s][i] = qk.code;
            p.k[s][i] = qk.value;
            if (!with_v) continue;
            const Quantised qv = quantise(gen.v(s, i, g), v_slot ? p.v_slot_scales[s][j] : vs[g], c.kv_dtype);
            p.v_codes[s][i] = qv.code;
            p.v[s][i] = qv.value;
          } else {
            p.k[s][i] = round_to(rk, c.kv_dtype);
            if (with_v) p.v[s][i] = round_to(gen.v(s, i, g), c.kv_dtype);
          }
        }
  }
  return p;
}

}  // namespace pacheck
