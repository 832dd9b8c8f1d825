// The decode case: the shape, dtypes, layout, lengths and seed of one paged-attention decode call.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace pacheck {

/// Paged KV-cache layout. Shapes are documented on `pacheck_layout` in include/pacheck/kernel_abi.h.
enum class Layout : std::uint8_t {
  vllm = PACHECK_LAYOUT_VLLM,
  nhd = PACHECK_LAYOUT_NHD,
  hnd = PACHECK_LAYOUT_HND,
  aiter = PACHECK_LAYOUT_AITER,  ///< K as vllm, V shuffled [blocks, G, block_size/16, D, 16]; block_size % 16 == 0
};
/// One row of layout_table().
struct LayoutInfo {
  Layout value;
  std::string_view name;  ///< as case ids and suite files spell it ("vllm")
  bool packed_key;        ///< the key cache packs head_size in vectors of 16 bytes (layout_vector_width)
  int block_multiple;     ///< block_size must be a multiple of this (16 for aiter's V groups, else 1)
};
/// Slots per V group of the aiter layout (value_cache [.., block_size / 16, head_size, 16]).
inline constexpr int kAiterSlotGroup = 16;
/// vllm, nhd, hnd, aiter.
std::span<const LayoutInfo> layout_table();
std::string_view layout_name(Layout l);  ///< "vllm", "nhd", "hnd", "aiter"
/// Parses "vllm", "nhd", "hnd" or "aiter"; throws std::invalid_argument listing them otherwise.
Layout parse_layout(std::string_view s);
/// Elements per packed vector of the layout's key cache: x = 16 bytes / element size for `vllm` and
/// `aiter` (same key cache), 1 for `nhd` and `hnd`. head_size must be a multiple of it.
int layout_vector_width(Layout l, DType kv_dtype);

/// Distribution of the pre-paging Q, K and V values.
///  - uniform: U(-1, 1) for Q, K and V.
///  - normal:  N(0, 1) for Q, K and V.
///  - peaked:  Q in [0.5, 1.5], K ~ N(0, 0.3) except a few "hot" keys per sequence and KV head set to +3,
///             so attention concentrates on them (logit gap of ~3 * sqrt(head_size)).
///  - extreme: Q = +-64 and K = +-64 with random signs, so logits spread to about +-4e3*sqrt(head_size)
///             in both signs, with ties at the max logit; V = +-[0.25, 0.5] x B, where B is the least of the
///             largest finite values of the KV and output dtypes, 3e38 and FLT_MAX / seq_len of the sequence:
///             |V| <= FLT_MAX / (2 seq_len), so no unnormalised fp32 sum of p x V (p <= 1), in any order
///             and any split-KV merge, can overflow (docs/PROPERTIES.md, Domains). bf16/f32 V reach 1e35 at
///             seq_len 1000; f16 V fills f16's range. fp8 KV: the KV term is the encoding's max x the head's
///             V scale, so V fills the fp8 range without saturating.
///  - overflow: Q and K as extreme; V = +-[0.25, 0.5] x min(largest finite value of the KV and output
///             dtypes, 3e38), whatever seq_len (0.22-0.44 of the maximum for bf16 and f32): V near the
///             dtype's limit, where a correct kernel that sums p x V unnormalised in fp32 overflows. Only the
///             opt-in `overflow` property and cells that name it draw it; the generators leave it out.
///  - far_below, far_above, mixed_scales: every logit of a row offset far from zero (fault-classes.md
///             section 4 and 7: a running max started at a finite sentinel such as -5e4, a softmax without
///             the max subtracted, a max carried from one sequence or call to the next). Element 0 of each
///             query row is +-2^qa and of every key 2^kb, with 2^(qa + kb) x scale = O in [65536, 131072)
///             (the smallest such power of two for the case's scale), so each logit is O plus the rest; the
///             other elements are integers: q = 1, k in {-1, 0, 1}, except one hot key per sequence and KV
///             head (at the first query token's position, seen by every query row and window) whose k = h,
///             the smallest power of two >= 2 with (h - 1)(head_size - 1) x scale >= 40: its weight is
///             within e^-40 of 1 and the output is its V (~ N(0, 1), from other draws in each of the three).
///             The dots are then exact in fp32 in any
///             order (while 2^(qa + kb) < 2^24), so honest designs differ only by rounding scale x dot.
///             far_below: O < 0 in every sequence; far_above: O > 0; mixed_scales: sequence s has O > 0,
///             0 (no offset) and O < 0 for s % 3 = 0, 1, 2, so logit scales differ by orders of magnitude
///             between neighbouring sequences. 16/32-bit caches only (K carries 2^kb).
enum class Dist : std::uint8_t { uniform, normal, peaked, extreme, overflow, far_below, far_above, mixed_scales };
/// True for the distributions whose logits are offset far from zero (far_below, far_above, mixed_scales).
inline bool offset_dist(Dist d) { return d == Dist::far_below || d == Dist::far_above || d == Dist::mixed_scales; }
/// One row of dist_table().
struct DistInfo {
  Dist value;
  std::string_view name;     ///< as case ids ("dist=peaked") and suite files spell it
  std::string_view meaning;  ///< one line for `pacheck list distributions` (the list above, shortened)
};
/// uniform, normal, peaked, extreme, overflow, far_below, far_above, mixed_scales.
std::span<const DistInfo> dist_table();
std::string_view dist_name(Dist d);  ///< "uniform", "normal", "peaked", "extreme", "overflow", ...
/// Parses a name written by dist_name(); throws std::invalid_argument listing the names otherwise.
Dist parse_dist(std::string_view s);

/// Dequantisation scale of an fp8 K or V cache: the stored code c of KV head g means
/// fp8_decode(c) * scale_g (fp32 product). Three forms, with the id text after "ks=" / "vs=":
///  - per tensor: `values` holds one value for every head ("0.5");
///  - per KV head, explicit: `values` holds num_kv_heads values, head 0 first ("0.5,1,2,4");
///  - per KV head, range: `range` = {first, last}, spaced linearly from head 0 to head num_kv_heads - 1,
///    scale_g = first + (last - first) * g / (num_kv_heads - 1) in double, rounded to fp32 ("0.3~3").
///  - per slot (seed 002: AITER's per-slot scale tables): `slot` = {lo, hi}: token p of sequence s, KV head
///    g, has its own scale lo * (hi / lo)^u, u in (0, 1] a Philox draw of (seed, cache, s, p, g)
///    (oracle/tensors.cpp, PrePaging::k_slot_scales), rounded to fp32 ("slot0.25~4"). Kernels get the
///    paged table (pacheck_kernel_args::k_scales_per_slot, PACHECK_SCALE_FORM_PER_SLOT); the oracle reads
///    the per-token scales before paging. Not with high_block_ids (the table is dense).
/// The default (no values, no range) is per tensor 1 and is left out of ids. Only fp8 caches take
/// scales other than the default.
struct KvScale {
  std::vector<float> values;
  std::optional<std::pair<float, float>> range;
  std::optional<std::pair<float, float>> slot;  ///< per slot: {lo, hi} of the log-uniform per-token scales

  bool is_default() const { return values.empty() && !range && !slot; }
  /// True when kernels get per-slot tables (pacheck_kernel_args::k_scales_per_slot).
  bool per_slot() const { return slot.has_value(); }
  /// True when kernels get a per-head array (pacheck_kernel_args::k_scales_per_head).
  bool per_head() const { return range.has_value() || values.size() > 1; }
  /// The scale of each KV head, [num_kv_heads] (all equal for a per-tensor scale; per slot: the smallest
  /// scale a token may get, min(lo, hi), for every head: the bound the generator keeps V within).
  std::vector<float> resolve(int num_kv_heads) const;
  /// The id text ("0.5", "0.5,1,2,4", "0.3~3", "slot0.25~4"); "1" for the default.
  std::string text() const;
  /// Parses text(); throws std::invalid_argument naming the text.
  static KvScale parse(std::string_view text);
  bool operator==(const KvScale&) const = default;
};

/// Per-query-head values of an attention variant (ALiBi slopes, sink logits), [num_heads] fp32 once resolved.
/// Forms, with the id text after "alibi=" / "sinks=":
///  - none (the default, left out of ids);
///  - explicit: `values` holds 1 value (every head) or num_heads values, head 0 first ("0.5,0.25");
///  - range (sinks): `range` = {first, last}, spaced linearly from query head 0 to head num_heads - 1 as
///    KvScale's range is ("-2~3");
///  - geometric (ALiBi, "geo"): slope_h = 2^(-8 (h + 1) / num_heads), the ALiBi paper's geometric sequence
///    (Press et al., ICLR 2022, section 3: 1/2, 1/4, ..., 1/256 for 8 heads), in double, rounded to fp32,
///    for any num_heads (the paper's interleaving for non-powers of two is not used);
///  - dominant (sinks, "dominant"): every head's sink logit is kDominantSink = 1e4, far above every real
///    logit of the normal, uniform and peaked distributions, so every real weight exp(s_j - 1e4) underflows
///    to 0 in fp32 and fp64 and the output is 0 (Case::validate refuses it with the extreme and overflow
///    distributions unless a soft cap <= 1000 bounds the logits).
struct HeadValues {
  enum class Form : std::uint8_t { none, values, range, geometric, dominant };
  static constexpr float kDominantSink = 1e4f;
  Form form = Form::none;
  std::vector<float> values;
  std::pair<float, float> range{0.0f, 0.0f};

  bool is_default() const { return form == Form::none; }
  /// The value of each query head, [num_heads]; empty for Form::none.
  std::vector<float> resolve(int num_heads) const;
  /// The id text ("geo", "dominant", "-2~3", "0.5,0.25"); "none" for Form::none.
  std::string text() const;
  /// Parses text(); throws std::invalid_argument naming the text.
  static HeadValues parse(std::string_view text);
  bool operator==(const HeadValues&) const = default;
};

/// A bad value in a case. `field` is the case field's name (e.g. "num_kv_heads"), `reason` why it is bad.
struct CaseError : std::invalid_argument {
  CaseError(std::string field, std::string reason);
  std::string field, reason;
};

/// Inclusive bounds of an integer field of a Case. validate() enforces them; the parsers of suite files and
/// case ids check a wider integer against them before narrowing it to int, so 4294967396 is rejected
/// rather than wrapped to 100. The upper bounds are caps on what a decode case can meaningfully ask for
/// (and what the host can allocate), not limits of any kernel:
///  - num_heads, num_kv_heads: [1, 1024]
///  - head_size: [1, 1024]
///  - block_size: [1, 65536]
///  - seq_lens (each sequence): [1, 16777216] (16M tokens)
///  - spare_blocks: [1, 2^31 - 1]; padding_columns: [0, 65536]; padding_target: [-1, 2^31 - 2]
///    (validate() also needs padding_target < pool size and the pool below 2^31 blocks)
///  - seed: [0, 2^64 - 1]
///  - high_block_ids: 0, 31 or 32 (validate() refuses the rest and a pool of 2^31 blocks or more)
///  - kv_lora_rank, qk_rope_head_dim, v_head_dim: [0, 1024] (0 = not MLA; core/mla.hpp's MlaShape::validate
///    needs kv_lora_rank >= 1, v_head_dim in [1, kv_lora_rank] and a row of at most 1024 for an MLA case)
struct FieldBounds {
  long long lo, hi;
};
/// The bounds of the integer field `field` ("num_heads", "num_kv_heads", "head_size", "block_size",
/// "seq_lens", "spare_blocks", "padding_columns", "padding_target", "high_block_ids", "kv_lora_rank",
/// "qk_rope_head_dim", "v_head_dim": the rows of
/// core/case_fields.cpp that have bounds); throws std::logic_error for another name.
FieldBounds field_bounds(std::string_view field);
/// `v` as an int after checking it against field_bounds(field); throws CaseError(field, "V is out of range
/// [LO, HI]").
int checked_field(std::string_view field, long long v);
/// Parses a seed as a case id writes it: decimal digits only, in [0, 2^64 - 1]. Throws CaseError("seed", ...)
/// saying whether the text is not a number, negative or too large.
std::uint64_t parse_seed(std::string_view text);

/// One decode call. `seq_lens.size()` is num_seqs. Paging options say how the pager lays the pool out.
struct Case {
  int num_heads = 32;     ///< query heads
  int num_kv_heads = 8;   ///< KV heads (GQA ratio = num_heads / num_kv_heads)
  int head_size = 128;    ///< elements per head
  int block_size = 16;    ///< tokens per KV block
  std::vector<int> seq_lens{4090};  ///< context tokens per sequence, each >= 1; 1 to kMaxNumSeqs sequences
  /// The most sequences a case may batch: a decode batch (vLLM's default max_num_seqs is 256; 4096 leaves room).
  static constexpr std::size_t kMaxNumSeqs = 4096;
  std::optional<float> scale;       ///< softmax scale; default 1/sqrt(head_size)
  DType q_dtype = DType::bf16;
  DType kv_dtype = DType::bf16;
  DType out_dtype = DType::bf16;
  Layout layout = Layout::nhd;
  std::uint64_t seed = 7;
  Dist dist = Dist::normal;
  KvScale k_scale;  ///< fp8 KV only: dequantisation scale of the key cache
  KvScale v_scale;  ///< fp8 KV only: dequantisation scale of the value cache

  // Attention variants (include/pacheck/kernel_abi.h, "Attention variants", gives the formula and order).
  int sliding_window = 0;           ///< W > 0: a query at position p sees keys j with p - j < W; 0 = none
  std::optional<float> logits_soft_cap;///< logit soft cap c > 0: s = c * tanh(s / c); none by default
  HeadValues alibi_slopes;          ///< ALiBi slope per query head: s += slope_h * (j - p); forms explicit, geometric
  HeadValues sinks;                 ///< sink logit per query head (denominator only); forms explicit, range, dominant
  /// Query tokens per sequence (speculative / chunked decode; kernel_abi.h's query_start_loc): empty = one
  /// token per sequence (plain decode, the default); one value = that many for every sequence; num_seqs values
  /// = one per sequence. Each query_len is 1 to kMaxQueryLen and at most its seq_len: the query tokens are
  /// the LAST query_len(s) tokens of the seq_lens[s] context (vLLM's convention), row i of sequence s at
  /// position seq_lens[s] - query_len(s) + i, causal among themselves (a row sees keys j <= its position).
  /// A list of ones is stored as empty (plain decode keeps its id).
  std::vector<int> query_lens;
  static constexpr int kMaxQueryLen = 8;
  /// True when the case uses some attention variant (window, soft cap, ALiBi, sinks or several query tokens:
  /// the case field table's variant rows, core/case_fields.hpp's case_variants()).
  bool has_variant() const;
  /// Query tokens of sequence `s` (1 for plain decode).
  int query_len(int s) const {
    if (query_lens.empty()) return 1;
    return query_lens.size() == 1 ? query_lens[0] : query_lens[static_cast<std::size_t>(s)];
  }
  /// The largest query_len(s) (1 for plain decode).
  int max_query_len() const {
    int m = 1;
    for (int q : query_lens) m = q > m ? q : m;
    return m;
  }
  /// Rows of the query and output tensors: the sum of query_len(s) over the sequences (num_seqs for decode).
  int num_query_tokens() const {
    int n = 0;
    for (int s = 0; s < num_seqs(); ++s) n += query_len(s);
    return n;
  }
  /// The first query/output row of sequence `s`: query_start_loc[s] = sum of query_len over sequences < s.
  int query_start(int s) const {
    int n = 0;
    for (int i = 0; i < s; ++i) n += query_len(i);
    return n;
  }
  /// Position in its sequence of query row `i` (0-based) of sequence `s`: seq_lens[s] - query_len(s) + i.
  int query_pos(int s, int i) const { return seq_lens[s] - query_len(s) + i; }
  /// First key position a query row at position `p` sees: max(0, p + 1 - W) with a window W, else 0.
  int window_start_at(int p) const { return sliding_window > 0 && p + 1 > sliding_window ? p + 1 - sliding_window : 0; }
  /// First key position some query row of sequence `s` sees: that of its first query row (the one furthest
  /// back), max(0, seq_len - query_len + 1 - W) with a window, else 0. Keys before it are seen by no row.
  int window_start(int s) const { return window_start_at(query_pos(s, 0)); }

  // Paging of the pool (see paging/pager.hpp).
  int spare_blocks = 3;        ///< blocks in the pool beyond those the sequences need (>= 1)
  int padding_columns = 2;     ///< block-table columns past the longest sequence's last block (>= 0)
  int padding_target = -1;     ///< physical block padding entries point at; -1 = a dedicated spare block
  /// High physical block ids (issue 18; FlashInfer #3130, llama.cpp #24912): 0 = a dense pool of the blocks
  /// the sequences need plus the spares; 31 or 32 = the sequences' blocks and the spares sit in a window of
  /// physical ids around the first block whose element offset (id x elements per block, K and V caches alike)
  /// reaches 2^31 (int32 overflows) or 2^32 (uint32 wraps): about half the sequences' blocks below it, the
  /// rest above (pool_plan()). The pool is then sparse in host memory (paging/pool_buffer.hpp). Id "hiblk=31".
  int high_block_ids = 0;

  // Multi-head latent attention (core/mla.hpp): one latent row of kv_lora_rank + qk_rope_head_dim values per
  // token, shared by every query head (num_kv_heads 1, head_size = the row), V its first v_head_dim values.
  // kv_lora_rank 0 = a multi-head case (the default, left out of ids); MLA cases have the id token
  // "mla=R+P[,vV]" (MlaShape::text) and run on MLA kernels only (kernels/mla_kernel.hpp).
  int kv_lora_rank = 0;       ///< latent values at the start of each row (c_kv); 0 = not MLA
  int qk_rope_head_dim = 0;   ///< decoupled RoPE key values after them (k_pe)
  int v_head_dim = 0;         ///< output values per head: V is the first v_head_dim values of the row
  /// True for an MLA case (kv_lora_rank > 0).
  bool is_mla() const { return kv_lora_rank > 0; }
  /// Values per output row and head: v_head_dim for an MLA case, else head_size. Output and oracle tensors are
  /// [num_query_tokens, num_heads, out_head_size()].
  int out_head_size() const { return is_mla() ? v_head_dim : head_size; }

  /// Where the pager puts the pool's blocks: `num_blocks` physical blocks, of which the sequences' blocks
  /// and the spares are a permutation of [window_first, num_blocks). Dense pools: window_first 0.
  /// With high_block_ids = B: elements per block E = num_kv_heads x head_size x block_size (the block stride
  /// of every layout), first_high = ceil(2^B / E), window_first = first_high - floor(needed / 2): the
  /// window's first floor(needed / 2) ids have offsets below 2^B, the other ceil(needed / 2) + spare_blocks
  /// at or above it (with E not dividing 2^B, block first_high - 1 straddles 2^B); the seed's permutation
  /// says which sequence gets which. `needed` = the blocks the sequences occupy.
  struct PoolPlan {
    long long num_blocks = 0, window_first = 0, needed = 0;
  };
  PoolPlan pool_plan() const;

  int num_seqs() const { return static_cast<int>(seq_lens.size()); }
  /// The longest sequence, tokens (0 when there is none).
  int max_seq_len() const {
    int m = 0;
    for (int len : seq_lens) m = len > m ? len : m;
    return m;
  }
  int gqa_ratio() const { return num_heads / num_kv_heads; }
  float effective_scale() const;
  /// Blocks sequence `s` occupies: ceil(seq_lens[s] / block_size).
  int blocks_for(int s) const { return (seq_lens[s] + block_size - 1) / block_size; }
  /// True when some sequence ends inside a block (seq_len % block_size != 0).
  bool straddles() const;

  /// Checks every field (each row's check of core/case_fields.cpp in table order, then the bounds of
  /// field_bounds, then the pool the case implies); throws CaseError naming the first bad field and why.
  void validate() const;

  /// Stable, human-readable id, e.g. "h32/8 d128 bs16 bf16 ctx4090 nhd seed7". It is also the filter
  /// key and the name printed in reports. Non-default dtypes per tensor, distribution and paging options
  /// are appended ("q=f32", "dist=peaked", "pad=5", "ks=0.3~3"), so two different cases never share an id.
  /// Attention variants add "win=W", "cap=C", "alibi=FORM", "sinks=FORM" (HeadValues::text) and
  /// "qlen=N[,N...]" (query_lens) after the fp8 scales; a case without them keeps the id it always had. An MLA
  /// case ends with "mla=R+P[,vV]" (e.g. "h16/1 d576 bs64 bf16 ctx4090 nhd seed7 scale=0.13523 mla=512+64"). The
  /// tokens and their order are the rows of core/case_fields.cpp (`pacheck list fields`).
  std::string id() const;
};

/// The case field an attention-variant id token sets ("win=128" -> "sliding_window", "cap=", "alibi=",
/// "sinks=", "qlen=" -> "query_lens": the rows of core/case_fields.cpp whose suite key is "variants"), or
/// nullptr when `token` is not one.
const char* variant_token_field(std::string_view token);
/// Sets the attention-variant field of `c` that `token` names ("win=128", "cap=50", "alibi=geo",
/// "sinks=-2~2", "sinks=dominant"; HeadValues for the forms; "qlen=4" = 4 query tokens in every sequence,
/// "qlen=1,4,2" one per sequence, as ctx lists seq_lens). Throws CaseError naming the field when the
/// value cannot be read; the value's range is checked by Case::validate().
void apply_variant_token(std::string_view token, Case& c);

/// Parses an id written by Case::id() back into a Case (used by `pacheck repro`).
/// Throws CaseError naming the token that could not be read.
Case parse_case_id(const std::string& id);

}  // namespace pacheck
