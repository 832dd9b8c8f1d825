#include "properties/planted_kernels.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>

#include "kernels/cpu/cpu_common.hpp"

namespace pacheck::prop {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// K and V of sequence s (seq_len `len`), read through its block table as fp32: the built-in kernels'
/// cpu::SeqView with the KV dtype fixed, so fp8 caches are dequantised with their scales as there.
template <DType KV>
struct SeqKV {
  cpu::SeqView view;
  int len;
  std::int64_t block(int t) const { return view.block_of(t); }
  float k(int t, int g, int d) const { return view.k<KV>(t, g, d); }
  float v(int t, int g, int d) const { return view.v<KV>(t, g, d); }
};

/// Calls row(seq, h, q, out) for every sequence and query head; `out` (head_size) is then stored.
template <typename Row>
void for_each_row(const pacheck_kernel_args& a, Row&& row) {
  const cpu::Scales scales(a);
  cpu::dispatch_kv(a, [&]<DType KV>() {
    std::vector<float> q(a.head_size), out(a.head_size);
    for (int s = 0; s < a.num_seqs; ++s) {
      const SeqKV<KV> seq{{a, s, cpu::pack_x(a), scales}, a.seq_lens[s]};
      for (int h = 0; h < a.num_heads; ++h) {
        for (int d = 0; d < a.head_size; ++d) q[d] = cpu::query(a, s, h, d);
        row(seq, h, q, out);
        for (int d = 0; d < a.head_size; ++d) cpu::store_out(a, s, h, d, out[d]);
      }
    }
  });
}

struct AttendOptions {
  bool subtract_max = true;  ///< false: the softmax fault of planted.softmax_no_max
  bool v_through_f16 = false;  ///< true: the staging fault of planted.f16_staged_v
  /// f16 or bf16: the P.V accumulator is rounded to it after every add (planted.{bf16,f16}_accumulator).
  std::optional<DType> acc_dtype;
  /// true: exp2(s - m) where exp(s - m) belongs, the log2(e) factor of an exp2-based softmax left out
  /// (planted.exp2_no_log2e): the softmax runs at temperature ln 2.
  bool exp2_without_log2e = false;
};

/// Softmax(scale q.K) V over `tokens`, accumulated in the order given: fp32, the weights normalised before
/// P.V (a convex combination, as the built-in kernels: no Inf for V near the fp32 limit).
template <class Seq>
void attend(const Seq& seq, int g, const std::vector<float>& q, float scale, const std::vector<int>& tokens,
            std::vector<float>& out, AttendOptions o = {}) {
  const int D = static_cast<int>(q.size());
  std::vector<float> logit(tokens.size());
  float m = kNegInf;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    float dot = 0;
    for (int d = 0; d < D; ++d) dot += q[d] * seq.k(tokens[i], g, d);
    logit[i] = dot * scale;
    m = std::max(m, logit[i]);
  }
  if (!o.subtract_max) m = 0;
  float sum = 0;
  for (std::size_t i = 0; i < tokens.size(); ++i)
    sum += (logit[i] = o.exp2_without_log2e ? std::exp2(logit[i] - m) : std::exp(logit[i] - m));
  std::fill(out.begin(), out.end(), 0.0f);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const float w = logit[i] / sum;
    for (int d = 0; d < D; ++d) {
      const float v = seq.v(tokens[i], g, d);
      out[d] += w * (o.v_through_f16 ? round_to(v, DType::f16) : v);
      if (o.acc_dtype) out[d] = round_to(out[d], *o.acc_dtype);
    }
  }
}

std::vector<int> iota_tokens(int len) {
  std::vector<int> t(len);
  std::iota(t.begin(), t.end(), 0);
  return t;
}

/// Partial softmax state of one split-KV partition: running max, exp-sum, normalised P.V (sum (p / l) V; 0
/// for an empty partition).
struct Partial {
  float m = kNegInf, l = 0;
  std::vector<float> o;
};

template <class Seq>
Partial partial(const Seq& seq, int g, const std::vector<float>& q, float scale, int t0, int t1) {
  Partial p;
  p.o.assign(q.size(), 0.0f);
  std::vector<float> logit;
  for (int t = t0; t < t1; ++t) {
    float dot = 0;
    for (std::size_t d = 0; d < q.size(); ++d) dot += q[d] * seq.k(t, g, static_cast<int>(d));
    logit.push_back(dot * scale);
    p.m = std::max(p.m, logit.back());
  }
  for (int t = t0; t < t1; ++t) p.l += (logit[t - t0] = std::exp(logit[t - t0] - p.m));
  for (int t = t0; t < t1; ++t) {
    const float w = logit[t - t0] / p.l;
    for (std::size_t d = 0; d < q.size(); ++d) p.o[d] += w * seq.v(t, g, static_cast<int>(d));
  }
  return p;
}

/// A planted kernel runs every case except the attention variants it does not implement (variants(): none
/// unless it says otherwise), which it declines naming the field, as a registered kernel does: the
/// generators then leave them out of its case space (probe_space), e.g. several query tokens per sequence.
class Planted : public Kernel {
 public:
  pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
  Support supports(const Case& c) const override {
    if (std::optional<Support> no = variant_decline(c, variants(), name())) return *no;
    return Support::yes();
  }
};

/// Boundary and stepping class: the final block's token count is taken as seq_len % block_size, which
/// is 0 when seq_len is a multiple of block_size, so an aligned sequence loses its whole last block.
class OffByOneBlock final : public Planted {
 public:
  std::string name() const override { return "planted.off_by_one_block"; }
  std::string description() const override {
    return "final block holds seq_len % block_size tokens (0 when aligned): drops the last block (agreement)";
  }
  void run(const pacheck_kernel_args& a) const override {
    for_each_row(a, [&](const auto& seq, int h, const std::vector<float>& q, std::vector<float>& out) {
      const int bs = a.block_size, nblocks = (seq.len + bs - 1) / bs;
      std::vector<int> tokens;
      for (int j = 0; j < nblocks; ++j) {
        const int count = j == nblocks - 1 ? seq.len % bs : bs;  // the fault: should be (len - 1) % bs + 1
        for (int i = 0; i < count; ++i) tokens.push_back(j * bs + i);
      }
      attend(seq, h / (a.num_heads / a.num_kv_heads), q, a.scale, tokens, out);
    });
  }
};

/// GQA mapping fault: query head h reads KV head h % num_kv_heads (interleaved) instead of the grouped
/// h / (num_heads / num_kv_heads). Identical when the ratio or num_kv_heads is 1.
class GqaModulo final : public Planted {
 public:
  std::string name() const override { return "planted.gqa_modulo"; }
  std::string description() const override {
    return "query head h reads KV head h % num_kv_heads, not h / ratio (agreement, GQA expansion)";
  }
  void run(const pacheck_kernel_args& a) const override {
    for_each_row(a, [&](const auto& seq, int h, const std::vector<float>& q, std::vector<float>& out) {
      attend(seq, h % a.num_kv_heads, q, a.scale, iota_tokens(seq.len), out);
    });
  }
};

/// Merge fault: every sequence is split into 8 partitions of ceil(seq_len / 8) tokens, so short sequences
/// leave trailing partitions empty (m = -inf, l = 0); a pairwise tree merge rescales both sides by
/// exp(m_i - max(m_a, m_b)) without guarding the case where both are empty: -inf - -inf = NaN.
class SplitKvEmptyPartition final : public Planted {
 public:
  std::string name() const override { return "planted.split_kv_empty_partition"; }
  std::string description() const override {
    return "8 fixed partitions; the tree merge of two empty partitions computes -inf - -inf (agreement)";
  }
  void run(const pacheck_kernel_args& a) const override {
    constexpr int kParts = 8;
    for_each_row(a, [&](const auto& seq, int h, const std::vector<float>& q, std::vector<float>& out) {
      const int g = h / (a.num_heads / a.num_kv_heads), P = (seq.len + kParts - 1) / kParts;
      std::vector<Partial> parts;
      for (int i = 0; i < kParts; ++i)
        parts.push_back(partial(seq, g, q, a.scale, std::min(seq.len, i * P), std::min(seq.len, (i + 1) * P)));
      for (int width = 1; width < kParts; width *= 2)
        for (int i = 0; i + width < kParts; i += 2 * width) {
          Partial& x = parts[i];
          const Partial& y = parts[i + width];
          const float M = std::max(x.m, y.m);
          const float sx = std::exp(x.m - M), sy = std::exp(y.m - M);  // the fault: no empty-partition guard
          const float wx = sx * x.l, wy = sy * y.l, l = wx + wy;
          for (std::size_t d = 0; d < x.o.size(); ++d) x.o[d] = (wx / l) * x.o[d] + (wy / l) * y.o[d];
          x.l = l;
          x.m = M;
        }
      out = parts[0].o;
    });
  }
};

/// Softmax fault: exp(logit) without subtracting the row max. Exact enough for moderate logits, but
/// logits past ~88 overflow fp32 exp to Inf (Inf / Inf = NaN), as the extreme distribution produces.
class SoftmaxNoMax final : public Planted {
 public:
  std::string name() const override { return "planted.softmax_no_max"; }
  std::string description() const override {
    return "softmax without max subtraction: exp overflows on extreme logits (agreement)";
  }
  void run(const pacheck_kernel_args& a) const override {
    for_each_row(a, [&](const auto& seq, int h, const std::vector<float>& q, std::vector<float>& out) {
      attend(seq, h / (a.num_heads / a.num_kv_heads), q, a.scale, iota_tokens(seq.len), out, {.subtract_max = false});
    });
  }
};

/// Paging-dependent rounding: tokens are accumulated in the order of their physical block ids (as a
/// kernel that walks the pool would), so the same sequence paged differently rounds differently. Within
/// tolerance of the oracle; only the paging-invariance property sees it.
class PhysicalBlockOrder final : public Planted {
 public:
  std::string name() const override { return "planted.physical_block_order"; }
  std::string description() const override {
    return "accumulates P.V in physical-block order: output depends on the permutation (paging invariance)";
  }
  void run(const pacheck_kernel_args& a) const override {
    for_each_row(a, [&](const auto& seq, int h, const std::vector<float>& q, std::vector<float>& out) {
      std::vector<int> tokens = iota_tokens(seq.len);
      std::stable_sort(tokens.begin(), tokens.end(), [&](int x, int y) { return seq.block(x) < seq.block(y); });
      attend(seq, h / (a.num_heads / a.num_kv_heads), q, a.scale, tokens, out);
    });
  }
};

/// Nondeterministic reduction order: a launch counter (standing in for atomics or a persistent work
/// queue) makes odd launches accumulate the tokens in reverse. Within tolerance; two runs of the same
/// case differ bitwise, which only the determinism property checks.
class LaunchOrder final : public Planted {
 public:
  std::string name() const override { return "planted.launch_order"; }
  std::string description() const override {
    return "odd launches accumulate tokens in reverse: runs differ bitwise (determinism)";
  }
  void run(const pacheck_kernel_args& a) const override {
    const bool reverse = launches_.fetch_add(1) % 2 == 1;
    for_each_row(a, [&](const auto& seq, int h, const std::vector<float>& q, std::vector<float>& out) {
      std::vector<int> tokens = iota_tokens(seq.len);
      if (reverse) std::reverse(tokens.begin(), tokens.end());
      attend(seq, h / (a.num_heads / a.num_kv_heads), q, a.scale, tokens, out);
    });
  }

 private:
  mutable std::atomic<unsigned> launches_{0};
};

/// Batch-dependent split: the split-KV partition length is a quarter of the batch's longest sequence
/// (at least 16 tokens), as kernels that size their grid from max_seq_len do, while the kernel still
/// declares itself batch invariant. A sequence alone and in a batch rounds differently.
class BatchSplit final : public Planted {
 public:
  std::string name() const override { return "planted.batch_split"; }
  std::string description() const override {
    return "split-KV partition length from the batch's longest sequence: batch-dependent bits (batch invariance)";
  }
  void run(const pacheck_kernel_args& a) const override {
    const int longest = *std::max_element(a.seq_lens, a.seq_lens + a.num_seqs);
    const int P = std::max(16, (longest + 3) / 4);
    for_each_row(a, [&](const auto& seq, int h, const std::vector<float>& q, std::vector<float>& out) {
      const int g = h / (a.num_heads / a.num_kv_heads);
      std::vector<Partial> parts;
      float M = kNegInf;
      for (int t0 = 0; t0 < seq.len; t0 += P) {
        parts.push_back(partial(seq, g, q, a.scale, t0, std::min(seq.len, t0 + P)));
        M = std::max(M, parts.back().m);
      }
      float denom = 0;
      for (const Partial& p : parts) denom += std::exp(p.m - M) * p.l;
      std::fill(out.begin(), out.end(), 0.0f);
      for (const Partial& p : parts) {
        const float w = std::exp(p.m - M) * p.l / denom;
        for (std::size_t d = 0; d < out.size(); ++d) out[d] += w * p.o[d];
      }
    });
  }
};

/// Dtype staging fault: V is converted to f16 before P.V (as a kernel feeding an f16-only matrix unit
/// would). Exact for bf16 values of ordinary magnitude, so agreement on the usual distributions passes;
/// V scaled past 65504 overflows to Inf and V scaled below 2^-14 loses bits in f16's subnormals, which
/// the exact-scaling property exposes.
class F16StagedV final : public Planted {
 public:
  std::string name() const override { return "planted.f16_staged_v"; }
  std::string description() const override {
    return "V staged through f16 before P.V: large V overflows, tiny V loses bits (exact scaling)";
  }
  void run(const pacheck_kernel_args& a) const override {
    for_each_row(a, [&](const auto& seq, int h, const std::vector<float>& q, std::vector<float>& out) {
      attend(seq, h / (a.num_heads / a.num_kv_heads), q, a.scale, iota_tokens(seq.len), out, {.v_through_f16 = true});
    });
  }
};

/// Accumulation faults of the tolerance measurements (docs/TOLERANCE.md): a 16-bit P.V accumulator
/// (planted.bf16_accumulator, planted.f16_accumulator: each add rounded to the dtype, so the sum loses bits
/// as it grows), the last token dropped (planted.drop_last_token: an off-by-one mask `t < seq_len - 1`),
/// and an exp2-based softmax without its log2(e) factor (planted.exp2_no_log2e).
class AccumulationFault final : public Planted {
 public:
  enum class What { bf16_acc, f16_acc, drop_last, exp2_no_log2e };
  explicit AccumulationFault(What w) : what_(w) {}
  std::string name() const override {
    switch (what_) {
      case What::bf16_acc: return "planted.bf16_accumulator";
      case What::f16_acc: return "planted.f16_accumulator";
      case What::drop_last: return "planted.drop_last_token";
      case What::exp2_no_log2e: break;
    }
    return "planted.exp2_no_log2e";
  }
  std::string description() const override {
    switch (what_) {
      case What::bf16_acc: return "P.V accumulator rounded to bf16 after every add";
      case What::f16_acc: return "P.V accumulator rounded to f16 after every add";
      case What::drop_last: return "attends tokens 0 .. seq_len - 2: the last token dropped (seq_len 1 kept)";
      case What::exp2_no_log2e: break;
    }
    return "exp2(s - max) without the log2(e) factor: softmax at temperature ln 2";
  }
  void run(const pacheck_kernel_args& a) const override {
    AttendOptions o;
    if (what_ == What::bf16_acc) o.acc_dtype = DType::bf16;
    if (what_ == What::f16_acc) o.acc_dtype = DType::f16;
    o.exp2_without_log2e = what_ == What::exp2_no_log2e;
    for_each_row(a, [&](const auto& seq, int h, const std::vector<float>& q, std::vector<float>& out) {
      const int len = what_ == What::drop_last ? std::max(1, seq.len - 1) : seq.len;
      attend(seq, h / (a.num_heads / a.num_kv_heads), q, a.scale, iota_tokens(len), out, o);
    });
  }

 private:
  What what_;
};

// ---- Causes of a difference from the clean twin (judge/cause.hpp): one planted kernel per verdict. Each
// moves one output element by one unit in the last place, so every tolerance passes and only the bitwise
// comparison with the clean twin (and the properties that compare runs) sees it.

/// `v`'s other neighbour in `t`: the representable value on the far side of `v` from its round-to-nearest
/// (away from zero when `v` is representable), as a kernel that rounds one element the wrong way stores it.
/// Within one unit in the last place of `v`; non-finite values are returned as they are.
float other_neighbour(float v, DType t) {
  if (!std::isfinite(v)) return v;
  const float r = round_to(v, t);
  const std::uint32_t b = to_bits(r, t);
  // Sign-magnitude encodings: one code up is one step away from zero, one down one step toward it.
  const bool away = std::fabs(v) >= std::fabs(r) || b == 0 || b == (1u << (8 * dtype_size(t) - 1));
  const float o = from_bits(away ? b + 1 : b - 1, t);
  return std::isfinite(o) ? o : from_bits(b - 1, t);
}

/// Attention as the built-in kernels compute it, with one element (flat index `target` of [num_seqs,
/// num_heads, head_size]; -1: none) rounded the wrong way.
void attend_moving(const pacheck_kernel_args& a, std::int64_t target) {
  const DType out_dtype = static_cast<DType>(a.out_dtype);
  std::int64_t row = 0;
  for_each_row(a, [&](const auto& seq, int h, const std::vector<float>& q, std::vector<float>& out) {
    attend(seq, h / (a.num_heads / a.num_kv_heads), q, a.scale, iota_tokens(seq.len), out);
    const std::int64_t first = row++ * a.head_size;
    if (target >= first && target < first + a.head_size)
      out[target - first] = other_neighbour(out[target - first], out_dtype);
  });
}

/// Nondeterminism (atomics, scheduling): in 7 calls of 8, drawn from std::random_device, one element drawn
/// from it too is rounded the wrong way. The draw is entropy, not process state: two processes forked from
/// one state draw apart, as two launches of an atomics-ordered reduction do.
class Nondeterministic final : public Planted {
 public:
  std::string name() const override { return "planted.nondeterministic"; }
  std::string description() const override {
    return "in 7 calls of 8 (std::random_device) one random element rounds the wrong way: runs differ (determinism)";
  }
  void run(const pacheck_kernel_args& a) const override {
    std::random_device entropy;
    const bool moves = entropy() % 8 != 0;
    const std::int64_t n = static_cast<std::int64_t>(a.num_seqs) * a.num_heads * a.head_size;
    const std::int64_t target = static_cast<std::int64_t>(entropy() % static_cast<std::uint64_t>(n));
    attend_moving(a, moves ? target : -1);
  }
};

/// Stale scratch memory: the kernel keeps a scratch buffer across calls and reallocates it (zeroed) only
/// when the call's shape (heads, head_size, seq_lens) changes; a reused buffer leaks into element 0, which
/// rounds the wrong way. Deterministic given the history: the first call on a shape is right, the following
/// ones on it are not, whatever the inputs' values (poison included).
class Stateful final : public Planted {
 public:
  std::string name() const override { return "planted.stateful"; }
  std::string description() const override {
    return "scratch kept across calls of one shape leaks into element 0: the output depends on the previous call "
           "(determinism)";
  }
  void run(const pacheck_kernel_args& a) const override {
    std::vector<int> shape{a.num_heads, a.num_kv_heads, a.head_size};
    shape.insert(shape.end(), a.seq_lens, a.seq_lens + a.num_seqs);
    bool stale;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stale = shape == scratch_shape_;
      scratch_shape_ = std::move(shape);
    }
    attend_moving(a, stale ? 0 : -1);
  }

 private:
  mutable std::mutex mu_;
  mutable std::vector<int> scratch_shape_;  ///< shape of the scratch buffer the last call left
};

/// A poison leak within tolerance: reads the first unwritten tail slot of each straddling sequence (V,
/// KV head 0, dim 0), as a vector load across the final block does, and when it is not zero rounds that
/// sequence's first output element the wrong way. Zero tails (clean caches, the `zero` poison) leak nothing;
/// every other V poison of `tail` or `all` moves one element by one unit in the last place.
class TailLeak final : public Planted {
 public:
  std::string name() const override { return "planted.tail_leak"; }
  std::string description() const override {
    return "a non-zero V tail slot moves one output element by one ULP: poison leaks within tolerance (tail-poison)";
  }
  void run(const pacheck_kernel_args& a) const override {
    const DType out_dtype = static_cast<DType>(a.out_dtype);
    for_each_row(a, [&](const auto& seq, int h, const std::vector<float>& q, std::vector<float>& out) {
      attend(seq, h / (a.num_heads / a.num_kv_heads), q, a.scale, iota_tokens(seq.len), out);
      if (h == 0 && seq.len % a.block_size != 0 && seq.v(seq.len, 0, 0) != 0.0f)  // NaN != 0 too
        out[0] = other_neighbour(out[0], out_dtype);
    });
  }
};

// --- Issue 18: a leak across sequences (FlashInfer #941) --------------------------------------------
/// Cross-sequence leak: the kernel walks the batch's pages as one flat list (sequence 0's pages, then
/// sequence 1's, ..., as a CSR kv_indices array) in chunks of kChunk pages, and each sequence attends
/// over every chunk that holds one of its pages. Its own tokens are masked at seq_len as they should be,
/// but a page of another sequence inside the chunk is masked through its weight only: p = 0 multiplies
/// that page's V over all its slots, its unwritten tail included. Finite poison leaks nothing (0 x 1e4 =
/// 0); NaN or Inf in another sequence's tail or a page shared by the chunk turns this sequence's output
/// into NaN. A sequence alone in the batch is computed exactly as cpu.reference would.
class CrossSeqChunk final : public Planted {
 public:
  static constexpr int kChunk = 4;
  std::string name() const override { return "planted.cross_seq_chunk"; }
  std::string description() const override {
    return "pages walked in flat chunks of 4 across sequences: another sequence's V multiplied by p = 0 (NaN leaks, tail-poison)";
  }
  void run(const pacheck_kernel_args& a) const override {
    const int bs = a.block_size;
    std::vector<int> first_page(static_cast<std::size_t>(a.num_seqs) + 1, 0);  // flat offset of each sequence
    for (int s = 0; s < a.num_seqs; ++s) first_page[s + 1] = first_page[s] + (a.seq_lens[s] + bs - 1) / bs;
    for_each_row(a, [&](const auto& seq, int h, const std::vector<float>& q, std::vector<float>& out) {
      const int g = h / (a.num_heads / a.num_kv_heads), s = seq.view.s;
      attend(seq, g, q, a.scale, iota_tokens(seq.len), out);
      const int lo = first_page[s] / kChunk * kChunk, hi = (first_page[s + 1] + kChunk - 1) / kChunk * kChunk;
      for (int flat = lo; flat < std::min(hi, first_page[a.num_seqs]); ++flat) {
        if (flat >= first_page[s] && flat < first_page[s + 1]) continue;  // its own page: masked at seq_len
        const int other = static_cast<int>(std::upper_bound(first_page.begin(), first_page.end(), flat) - first_page.begin()) - 1;
        auto foreign = seq;  // the other sequence's page, every slot of it, weighted by p = 0
        foreign.view.s = other;
        for (int slot = 0; slot < bs; ++slot)
          for (int d = 0; d < a.head_size; ++d) out[d] += 0.0f * foreign.v((flat - first_page[other]) * bs + slot, g, d);
      }
    });
  }
};
// --- end cross-sequence leak -------------------------------------------------------------------------

/// Output rounding toward zero (tt-metal #19882: a packer that truncates fp32 to bf16): the fp32 result
/// of each element is stored as its neighbour toward zero in the output dtype instead of its nearest. Each
/// element moves by less than one ULP, inside every rel_linf limit, but all of them move toward zero: a
/// signed mean of about -0.5 ULP (the bias check, docs/TOLERANCE.md "Bias"). f32 outputs are stored as
/// computed (nothing to truncate).
class TruncatingOutput final : public Planted {
 public:
  std::string name() const override { return "planted.truncating_output"; }
  std::string description() const override {
    return "rounds the output toward zero instead of to nearest even: every element within an ULP, all biased (bias)";
  }
  void run(const pacheck_kernel_args& a) const override {
    const DType out_dtype = static_cast<DType>(a.out_dtype);
    for_each_row(a, [&](const auto& seq, int h, const std::vector<float>& q, std::vector<float>& out) {
      attend(seq, h / (a.num_heads / a.num_kv_heads), q, a.scale, iota_tokens(seq.len), out);
      if (out_dtype == DType::f32) return;
      for (float& v : out) {
        const float r = round_to(v, out_dtype);
        // Nearest went away from zero: step back one code (sign-magnitude: one down is toward zero).
        if (std::isfinite(v) && std::fabs(r) > std::fabs(v)) v = from_bits(to_bits(r, out_dtype) - 1, out_dtype);
        else v = r;
      }
    });
  }
};

/// Every attention variant (kernel_abi.h): the variant planted kernels take the cells of all four.
constexpr unsigned kAllVariants =
    PACHECK_VARIANT_SLIDING_WINDOW | PACHECK_VARIANT_ALIBI | PACHECK_VARIANT_SOFT_CAP | PACHECK_VARIANT_SINKS;

/// Sliding-window boundary class: the window W read as W - 1 positions (keys j with p - j < W - 1, the
/// query's own included), as when vLLM's W is handed to an API whose window_size_left = W - 1 already
/// counts the query, minus one again. Exact for W = 1 and for every W above seq_len; at W = seq_len the
/// first token is dropped, so a window equal to the longest sequence is not the no-window output.
/// Otherwise the online softmax of cpu.online, variants included.
class WindowOffByOne final : public Planted {
 public:
  std::string name() const override { return "planted.window_off_by_one"; }
  std::string description() const override {
    return "sliding window of W read as W - 1 positions: at W = seq_len the first token is dropped";
  }
  unsigned variants() const override { return kAllVariants; }
  void run(const pacheck_kernel_args& a) const override {
    cpu::for_each_query_head(a, [&]<DType KV>(const cpu::SeqView& sv, int g, const std::vector<float>& q,
                                              std::vector<float>& out) {
      const int len = a.seq_lens[sv.s], w = a.sliding_window;
      const int first = w > 1 && len > w - 1 ? len - (w - 1) : cpu::window_first(a, sv.s);  // the fault
      cpu::OnlineSoftmax st(a.head_size);
      st.start_from_sink(cpu::sink_logit(a, sv.h));
      st.add_tokens<KV>(sv, g, q, a.scale, first, len, 32);
      st.normalised(out.data());
    });
  }
};

/// Sink class: the sink logits staged through f16 (a model's sinks buffer kept in the KV dtype), and the
/// online softmax seeded from the sink as m = sink, l = exp(sink - m). A sink below f16's range (-1e30:
/// "no sink") becomes -inf, and l = exp(-inf - (-inf)) = NaN reaches every output of the head. Sinks inside
/// f16's range only lose bits. Otherwise cpu.online's online softmax.
class SinksF16 final : public Planted {
 public:
  std::string name() const override { return "planted.sinks_f16"; }
  std::string description() const override {
    return "sink logits staged through f16 and the running max seeded from them: -1e30 -> -inf, exp(-inf + inf) = NaN";
  }
  unsigned variants() const override { return kAllVariants; }
  void run(const pacheck_kernel_args& a) const override {
    cpu::for_each_query_head(a, [&]<DType KV>(const cpu::SeqView& sv, int g, const std::vector<float>& q,
                                              std::vector<float>& out) {
      const int len = a.seq_lens[sv.s];
      cpu::OnlineSoftmax st(a.head_size);
      if (const std::optional<float> sink = cpu::sink_logit(a, sv.h)) {
        st.m = round_to(*sink, DType::f16);  // the fault: -1e30 rounds to -inf in f16
        st.l = std::exp(st.m - st.m);
      }
      st.add_tokens<KV>(sv, g, q, a.scale, cpu::window_first(a, sv.s), len, 32);
      st.normalised(out.data());
    });
  }
};

}  // namespace

namespace {
/// A new instance of every planted kernel, in planted_kernels()'s order.
std::vector<KernelPtr> make_planted_kernels() {
  return {
      std::make_shared<OffByOneBlock>(),      std::make_shared<GqaModulo>(),
      std::make_shared<SplitKvEmptyPartition>(), std::make_shared<SoftmaxNoMax>(),
      std::make_shared<PhysicalBlockOrder>(), std::make_shared<LaunchOrder>(),
      std::make_shared<BatchSplit>(),         std::make_shared<F16StagedV>(),
      std::make_shared<AccumulationFault>(AccumulationFault::What::bf16_acc),
      std::make_shared<AccumulationFault>(AccumulationFault::What::f16_acc),
      std::make_shared<AccumulationFault>(AccumulationFault::What::drop_last),
      std::make_shared<AccumulationFault>(AccumulationFault::What::exp2_no_log2e),
      std::make_shared<Nondeterministic>(),
      std::make_shared<Stateful>(),           std::make_shared<TailLeak>(),
      std::make_shared<TruncatingOutput>(),
      std::make_shared<CrossSeqChunk>(),
      std::make_shared<WindowOffByOne>(),     std::make_shared<SinksF16>(),
  };
}
}  // namespace

const std::vector<KernelPtr>& planted_kernels() {
  static const std::vector<KernelPtr> all = make_planted_kernels();
  return all;
}

KernelPtr new_planted_kernel(const std::string& name) {
  for (auto& k : make_planted_kernels())
    if (k->name() == name) return k;
  return nullptr;
}

KernelPtr find_planted_kernel(const std::string& name) {
  for (const auto& k : planted_kernels())
    if (k->name() == name) return k;
  return nullptr;
}

}  // namespace pacheck::prop
