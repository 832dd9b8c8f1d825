#include "core/case_fields.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/mla.hpp"
#include "core/table.hpp"

namespace pacheck {

namespace {

const Case kFieldDefaults{};  // not constexpr: std::vector is not a constant expression in GCC 12
constexpr long long kIntMax = std::numeric_limits<int>::max();

// ---- Generic pieces of rows: a member read, written, printed and parsed -----------------------------------

template <auto M>
void copy_member(const Case& from, Case& to) {
  to.*M = from.*M;
}

/// An integer of an id token, range-checked against the row's bounds before it is narrowed to int, so
/// "ctx4294967396" is an error rather than ctx100.
int id_int(std::string_view text, const CaseField& f) {
  long long v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc::result_out_of_range && p == text.data() + text.size())
    throw CaseError(std::string(f.name), fmt::format("{} is out of range [{}, {}]", text, f.lo, f.hi));
  if (ec != std::errc() || p != text.data() + text.size())
    throw CaseError(std::string(f.name), fmt::format("'{}' is not an integer", text));
  return checked_field(f.name, v);
}

/// An int member: always printed, or printed only when it differs from the default (`optional`).
template <auto M, bool optional>
std::string int_text(const Case& c) {
  if (optional && c.*M == kFieldDefaults.*M) return {};
  return fmt::format("{}", c.*M);
}
template <auto M>
void parse_int(const CaseField& f, std::string_view text, Case& c) {
  c.*M = id_int(text, f);
}
/// validate()'s bound check of an int member (field_bounds).
template <auto M>
void bound_int(const CaseField& f, const Case& c) {
  checked_field(f.name, c.*M);
}

/// A float member that is optional (std::optional<float>): fp32's shortest round-trip text, none = left out.
template <auto M>
std::string float_text(const Case& c) {
  return c.*M ? fmt::format("{}", *(c.*M)) : std::string();
}
template <auto M>
void parse_float(const CaseField& f, std::string_view text, Case& c) {
  float v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size())
    throw CaseError(std::string(f.name), fmt::format("'{}' is not a number", text));
  c.*M = v;
}

/// A member read with its type's own parser (KvScale, HeadValues), whose std::invalid_argument becomes a
/// CaseError naming the field.
template <auto M, auto Parse>
void parse_with(const CaseField& f, std::string_view text, Case& c) {
  try {
    c.*M = Parse(text);
  } catch (const std::invalid_argument& e) {
    throw CaseError(std::string(f.name), e.what());
  }
}

template <auto M>
std::string kv_scale_text(const Case& c) {
  return (c.*M).is_default() ? std::string() : (c.*M).text();
}
template <auto M>
std::string head_values_text(const Case& c) {
  return (c.*M).is_default() ? std::string() : (c.*M).text();
}

std::string dtype_text(DType t) { return std::string(dtype_name(t)); }
DType id_dtype(std::string_view text, const CaseField& f) {
  try {
    return parse_dtype(text);
  } catch (const std::invalid_argument& e) {
    throw CaseError(std::string(f.name), e.what());
  }
}

// ---- Checks (Case::validate calls them in table order) ------------------------------------------------------

void check_heads(const Case& c) {
  if (c.num_heads < 1) throw CaseError("num_heads", fmt::format("must be >= 1, got {}", c.num_heads));
}
void check_kv_heads(const Case& c) {
  if (c.num_kv_heads < 1) throw CaseError("num_kv_heads", fmt::format("must be >= 1, got {}", c.num_kv_heads));
  if (c.num_heads % c.num_kv_heads != 0)
    throw CaseError("num_heads", fmt::format("{} is not a multiple of num_kv_heads {}", c.num_heads, c.num_kv_heads));
}
void check_head_size(const Case& c) {
  if (c.head_size < 1) throw CaseError("head_size", fmt::format("must be >= 1, got {}", c.head_size));
  const int vw = layout_vector_width(c.layout, c.kv_dtype);
  if (c.head_size % vw != 0)
    throw CaseError("head_size", fmt::format("{} is not a multiple of the {} layout's vector width {} for {}",
                                             c.head_size, layout_name(c.layout), vw, dtype_name(c.kv_dtype)));
}
void check_block_size(const Case& c) {
  if (c.block_size < 1) throw CaseError("block_size", fmt::format("must be >= 1, got {}", c.block_size));
  if (const LayoutInfo* li = find_row(layout_table(), c.layout); li && c.block_size % li->block_multiple != 0)
    throw CaseError("block_size",
                    fmt::format("{} is not a multiple of {}: the {} layout stores V in groups of {} slots "
                                "([num_blocks, num_kv_heads, block_size / {}, head_size, {}])",
                                c.block_size, li->block_multiple, layout_name(c.layout), li->block_multiple,
                                li->block_multiple, li->block_multiple));
}
/// Query and output are f32, f16 or bf16: fp8 is a KV-cache encoding only.
template <auto M>
void check_not_fp8(const Case& c) {
  const DType t = c.*M;
  if (is_fp8(t))
    throw CaseError(M == &Case::q_dtype ? "q_dtype" : "out_dtype",
                    fmt::format("{} is a KV-cache dtype only; query and output must be f32, f16 or bf16", dtype_name(t)));
}
void check_seq_lens(const Case& c) {
  if (c.seq_lens.empty()) throw CaseError("seq_lens", "needs at least one sequence");
  if (c.seq_lens.size() > Case::kMaxNumSeqs)
    throw CaseError("seq_lens",
                    fmt::format("{} sequences, more than {} (a decode batch)", c.seq_lens.size(), Case::kMaxNumSeqs));
  for (std::size_t i = 0; i < c.seq_lens.size(); ++i)
    if (c.seq_lens[i] < 1)
      throw CaseError("seq_lens", fmt::format("seq_len of sequence {} is {}, must be >= 1", i, c.seq_lens[i]));
}
void check_scale(const Case& c) {
  if (c.scale && !(std::isfinite(*c.scale) && *c.scale > 0))
    throw CaseError("scale", fmt::format("must be finite and > 0, got {}", *c.scale));
  if (offset_dist(c.dist) && c.effective_scale() < 0x1p-14f)
    throw CaseError("scale", fmt::format("dist={} needs a softmax scale >= 2^-14 (its offset 65536 / scale is a "
                                         "power of two of at most 2^30, split between q and k, f16's range); got {}",
                                         dist_name(c.dist), c.effective_scale()));
}
/// The offset distributions' keys carry a power of two up to 2^15, which an fp8 cache cannot hold.
void check_dist(const Case& c) {
  if (offset_dist(c.dist) && is_fp8(c.kv_dtype))
    throw CaseError("dist", fmt::format("dist={} needs a 16/32-bit cache (its keys carry a power of two up to 2^15); "
                                        "kv_dtype is {}", dist_name(c.dist), dtype_name(c.kv_dtype)));
}
/// An fp8 cache's dequantisation scale (KvScale's forms; per-slot tables are dense, so not with high block ids).
template <auto M>
void check_kv_scale(const Case& c) {
  const KvScale& ks = c.*M;
  const char* field = M == &Case::k_scale ? "k_scale" : "v_scale";
  if (ks.is_default()) return;
  if (!is_fp8(c.kv_dtype))
    throw CaseError(field, fmt::format("only fp8 KV caches take scales; kv_dtype is {}", dtype_name(c.kv_dtype)));
  std::vector<float> given = ks.values;
  if (ks.range) given = {ks.range->first, ks.range->second};
  if (ks.slot) {
    given = {ks.slot->first, ks.slot->second};
    // Not `!(lo <= hi)`: a NaN bound is refused below, as not finite.
    if (ks.slot->first > ks.slot->second)
      throw CaseError(field, fmt::format("{}: low {} is above high {} (per-slot scales are drawn between [lo, hi])",
                                         ks.text(), ks.slot->first, ks.slot->second));
    if (c.high_block_ids != 0)
      throw CaseError(field, fmt::format("{}: per-slot scale tables are dense [num_blocks, num_kv_heads, block_size]; "
                                         "high_block_ids {} (a pool of 2^{} elements) is not modelled with them",
                                         ks.text(), c.high_block_ids, c.high_block_ids));
  }
  for (float v : given)
    if (!(std::isfinite(v) && v > 0)) throw CaseError(field, fmt::format("{} must be finite and > 0, got {}", ks.text(), v));
  if (!ks.range && !ks.slot && ks.values.size() != 1 && ks.values.size() != static_cast<std::size_t>(c.num_kv_heads))
    throw CaseError(field, fmt::format("{} values for {} KV heads: give 1 (per tensor) or {} (per KV head)",
                                       ks.values.size(), c.num_kv_heads, c.num_kv_heads));
}
void check_window(const Case& c) {
  if (c.sliding_window < 0)
    throw CaseError("sliding_window", fmt::format("must be >= 1 tokens (0 = none), got {}", c.sliding_window));
}
void check_cap(const Case& c) {
  if (c.logits_soft_cap && !(std::isfinite(*c.logits_soft_cap) && *c.logits_soft_cap > 0))
    throw CaseError("logits_soft_cap", fmt::format("must be finite and > 0, got {}", *c.logits_soft_cap));
}
/// ALiBi slopes (geo or explicit, each >= 0) and sinks (explicit, a range or dominant) per query head.
template <auto M>
void check_head_values(const Case& c) {
  using F = HeadValues::Form;
  const HeadValues& hv = c.*M;
  const bool alibi = M == &Case::alibi_slopes;
  const char* field = alibi ? "alibi_slopes" : "sinks";
  if (hv.is_default()) return;
  if (alibi && (hv.form == F::range || hv.form == F::dominant))
    throw CaseError(field, fmt::format("'{}': ALiBi slopes are geo or explicit values", hv.text()));
  if (!alibi && hv.form == F::geometric)
    throw CaseError(field, "'geo' is a form of ALiBi slopes; sinks are values, a range LO~HI or dominant");
  if (hv.form == F::values && hv.values.size() != 1 && hv.values.size() != static_cast<std::size_t>(c.num_heads))
    throw CaseError(field, fmt::format("{} values for {} query heads: give 1 or {}", hv.values.size(), c.num_heads,
                                       c.num_heads));
  std::vector<float> given = hv.values;
  if (hv.form == F::range) given = {hv.range.first, hv.range.second};
  for (float x : given) {
    if (!std::isfinite(x)) throw CaseError(field, fmt::format("{}: {} is not finite", hv.text(), x));
    if (alibi && x < 0) throw CaseError(field, fmt::format("{}: slope {} is negative (slopes are >= 0)", hv.text(), x));
  }
  if (hv.form == F::dominant &&
      (c.dist == Dist::extreme || c.dist == Dist::overflow || c.dist == Dist::far_above || c.dist == Dist::mixed_scales) &&
      !(c.logits_soft_cap && *c.logits_soft_cap <= 1000.0f))
    throw CaseError(field, fmt::format("dominant sinks (1e4) are not above the {} distribution's logits; "
                                       "give logits_soft_cap <= 1000 or another dist", dist_name(c.dist)));
}
void check_query_lens(const Case& c) {
  if (c.query_lens.empty()) return;
  if (c.query_lens.size() != 1 && c.query_lens.size() != c.seq_lens.size())
    throw CaseError("query_lens", fmt::format("{} values for {} sequences: give 1 (every sequence) or {} (one per "
                                              "sequence)", c.query_lens.size(), c.seq_lens.size(), c.seq_lens.size()));
  for (int s = 0; s < c.num_seqs(); ++s) {
    const int ql = c.query_len(s);
    if (ql < 1 || ql > Case::kMaxQueryLen)
      throw CaseError("query_lens", fmt::format("query_len of sequence {} is {}, must be 1 to {}", s, ql, Case::kMaxQueryLen));
    if (ql > c.seq_lens[s])
      throw CaseError("query_lens", fmt::format("query_len of sequence {} is {}, more than its seq_len {} (the query "
                                                "tokens are the last query_len tokens of the context)",
                                                s, ql, c.seq_lens[s]));
  }
}
void check_spare(const Case& c) {
  if (c.spare_blocks < 1) throw CaseError("spare_blocks", fmt::format("must be >= 1, got {}", c.spare_blocks));
}
void check_padding_columns(const Case& c) {
  if (c.padding_columns < 0)
    throw CaseError("padding_columns", fmt::format("must be >= 0, got {}", c.padding_columns));
}

// ---- Tokens with a shape of their own ----------------------------------------------------------------------

void parse_heads(const CaseField&, std::string_view t, Case& c) {
  const auto slash = t.find('/');
  c.num_heads = id_int(t.substr(0, slash), *find_case_field("num_heads"));
  c.num_kv_heads = id_int(t.substr(slash + 1), *find_case_field("num_kv_heads"));
}
/// The kv dtype carries no prefix; a q or out dtype equal to it follows it (the id leaves such out).
void parse_kv_dtype(const CaseField& f, std::string_view t, Case& c) {
  const DType kv = id_dtype(t, f);
  const bool q_same = c.q_dtype == c.kv_dtype, o_same = c.out_dtype == c.kv_dtype;
  c.kv_dtype = kv;
  if (q_same) c.q_dtype = kv;
  if (o_same) c.out_dtype = kv;
}
std::string seq_lens_text(const Case& c) { return fmt::format("{}", fmt::join(c.seq_lens, ",")); }
void parse_seq_lens(const CaseField& f, std::string_view lens, Case& c) {
  c.seq_lens.clear();
  // Every comma separates two lengths: "ctx30," and "ctx,30" have an empty entry, not one length.
  for (std::size_t start = 0; start <= lens.size();) {
    const auto comma = std::min(lens.find(',', start), lens.size());
    const std::string_view entry = lens.substr(start, comma - start);
    if (entry.empty() && !lens.empty())
      throw CaseError("seq_lens", fmt::format("entry {} of 'ctx{}' is empty (lengths are N[,N...])", c.seq_lens.size(), lens));
    if (!entry.empty()) c.seq_lens.push_back(id_int(entry, f));
    start = comma + 1;
  }
}
void parse_scale(const CaseField&, std::string_view t, Case& c) {
  try {
    c.scale = std::stof(std::string(t));
  } catch (const std::exception&) {
    throw CaseError("scale", fmt::format("'{}' is not a number", t));
  }
}
void parse_window(const CaseField&, std::string_view n, Case& c) {
  long long w = 0;
  auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), w);
  if (n.empty() || ec != std::errc() || p != n.data() + n.size() || w < 1 || w > (1 << 24))
    throw CaseError("sliding_window", fmt::format("'{}' is not a window of 1 to {} tokens", n, 1 << 24));
  c.sliding_window = static_cast<int>(w);
}
/// N (every sequence) or N,N,... (one per sequence); each 1 to kMaxQueryLen (the count and the bound by
/// seq_len are the row's check). A list of ones is plain decode and stored as none.
void parse_query_lens(const CaseField&, std::string_view list, Case& c) {
  std::vector<int> lens;
  for (std::size_t start = 0; start <= list.size();) {
    const auto comma = std::min(list.find(',', start), list.size());
    const std::string_view n = list.substr(start, comma - start);
    long long q = 0;
    auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), q);
    if (n.empty() || ec != std::errc() || p != n.data() + n.size())
      throw CaseError("query_lens", fmt::format("'{}' in 'qlen={}' is not a query_len (an integer 1 to {})", n, list,
                                                Case::kMaxQueryLen));
    if (q < 1 || q > Case::kMaxQueryLen)
      throw CaseError("query_lens", fmt::format("query_len {} in 'qlen={}' is out of range [1, {}]", q, list,
                                                Case::kMaxQueryLen));
    lens.push_back(static_cast<int>(q));
    start = comma + 1;
  }
  const bool all_one = std::all_of(lens.begin(), lens.end(), [](int q) { return q == 1; });
  c.query_lens = all_one ? std::vector<int>{} : std::move(lens);
}
std::string query_lens_text(const Case& c) {
  return c.query_lens.empty() ? std::string() : fmt::format("{}", fmt::join(c.query_lens, ","));
}

// ---- ABI values (AbiWriter sets each in whichever of pacheck_kernel_args / pacheck_case_info has it) ----

/// The scale form of one cache of `c` as the ABI names it, and the per-tensor scalar the case info gets:
/// NaN for per-head and per-slot forms (a kernel must read the arrays), 1 for a cache that is not fp8.
template <auto M, bool K>
void abi_kv_scale(const Case& c, AbiWriter& w) {
  const KvScale& s = c.*M;
  const pacheck_scale_form form = !is_fp8(c.kv_dtype) ? PACHECK_SCALE_FORM_NONE
                                  : s.per_slot()      ? PACHECK_SCALE_FORM_PER_SLOT
                                  : s.per_head()      ? PACHECK_SCALE_FORM_PER_KV_HEAD
                                                      : PACHECK_SCALE_FORM_PER_TENSOR;
  const float scalar = form == PACHECK_SCALE_FORM_PER_KV_HEAD || form == PACHECK_SCALE_FORM_PER_SLOT
                           ? std::numeric_limits<float>::quiet_NaN()
                       : form == PACHECK_SCALE_FORM_NONE ? 1.0f
                                                         : s.resolve(c.num_kv_heads).at(0);
  w.set(K ? "k_scale_form" : "v_scale_form", form);
  w.set(K ? "k_scale" : "v_scale", scalar);
}

bool uses_window(const Case& c) { return c.sliding_window > 0; }
bool uses_cap(const Case& c) { return c.logits_soft_cap.has_value(); }
bool uses_alibi(const Case& c) { return !c.alibi_slopes.is_default(); }
bool uses_sinks(const Case& c) { return !c.sinks.is_default(); }
bool uses_query_lens(const Case& c) { return c.max_query_len() > 1; }
bool uses_slot_scales(const Case& c) { return is_fp8(c.kv_dtype) && (c.k_scale.per_slot() || c.v_scale.per_slot()); }
bool is_mla_case(const Case& c) { return c.is_mla(); }
/// The case-file format_version that added MLA cells: the latent cache and the three MLA scalars.
constexpr int kMlaCaseFileVersion = 5;
constexpr std::string_view kMlaCarries = "an MLA latent cache", kMlaCaches = "MLA latent caches";
/// The case-file MLA scalars (kv_lora_rank, qk_rope_head_dim, v_head_dim): integers in the rows' bounds [0, 1024],
/// all 0 in a multi-head file (interop's reader refuses the rest; the case then checks their combination).
std::string mla_dim_problem(double v) {
  return v >= 0 && v <= 1024 && v == std::floor(v) ? std::string()
                                                    : fmt::format("{} is not an integer in [0, 1024] (0 = no MLA)", v);
}
constexpr std::string_view kVariantCarries = "an attention variant", kVariants = "attention variants";
/// The case-file variant scalars: 0 = none, else the value (interop's reader refuses the rest).
std::string window_problem(double v) {
  return v < 0 ? fmt::format("{} is negative (0 = no window, W > 0 = the last W positions)", static_cast<int>(v))
               : std::string();
}
std::string cap_problem(double v) {
  const auto f = static_cast<float>(v);
  if (std::isfinite(f) && f >= 0.0f) return {};
  return fmt::format("{} is not a finite number >= 0 (0 = no cap)", std::isnan(f) ? std::string("nan") : fmt::format("{}", f));
}

/// The MLA shape token "mla=R+P[,vV]" (MlaShape::text); empty for a multi-head case.
std::string mla_text(const Case& c) {
  return c.is_mla() ? MlaShape{c.kv_lora_rank, c.qk_rope_head_dim, c.v_head_dim}.text() : std::string();
}
void parse_mla(const CaseField&, std::string_view t, Case& c) {
  const MlaShape m = MlaShape::parse(t);
  c.kv_lora_rank = m.kv_lora_rank;
  c.qk_rope_head_dim = m.qk_rope_head_dim;
  c.v_head_dim = m.v_head_dim;
}
constexpr std::string_view kMlaForm = "mla=R+P[,vV]";

bool matches_heads(std::string_view t) { return t.starts_with("h") && t.find('/') != std::string_view::npos; }
bool matches_head_size(std::string_view t) {  // d64; d-64 too, so that its error names head_size
  return t.starts_with("d") && t.size() > 1 && ((t[1] >= '0' && t[1] <= '9') || t[1] == '-');
}
bool matches_dtype(std::string_view t) { return find_name(dtype_table(), t) != nullptr; }
bool matches_layout(std::string_view t) { return find_name(layout_table(), t) != nullptr; }

// clang-format off
const CaseField kCaseFields[] = {
    {.name = "num_heads", .token = "h", .token_form = "hQ/KV", .example = "h8/2", .suite_key = "heads",
     .lo = 1, .hi = 1024, .required = "'hQ/KV' heads",
     .id_text = [](const Case& c) { return fmt::format("{}/{}", c.num_heads, c.num_kv_heads); },
     .matches = matches_heads, .parse = parse_heads, .check = check_heads, .bound = bound_int<&Case::num_heads>,
     .copy = copy_member<&Case::num_heads>, .abi_version = 1, .abi_args = "num_heads", .abi_info = "num_heads",
     .abi = [](const Case& c, AbiWriter& w) { w.set("num_heads", c.num_heads); }, .casefile = "num_heads"},
    {.name = "num_kv_heads", .token_form = "hQ/KV", .suite_key = "heads", .lo = 1, .hi = 1024,
     .check = check_kv_heads, .bound = bound_int<&Case::num_kv_heads>, .copy = copy_member<&Case::num_kv_heads>,
     .abi_version = 1, .abi_args = "num_kv_heads", .abi_info = "num_kv_heads",
     .abi = [](const Case& c, AbiWriter& w) { w.set("num_kv_heads", c.num_kv_heads); }, .casefile = "num_kv_heads"},
    {.name = "head_size", .token = "d", .token_form = "dN", .example = "d64", .suite_key = "head_sizes", .lo = 1,
     .hi = 1024, .id_text = int_text<&Case::head_size, false>, .matches = matches_head_size,
     .parse = parse_int<&Case::head_size>, .check = check_head_size, .bound = bound_int<&Case::head_size>,
     .copy = copy_member<&Case::head_size>, .abi_version = 1, .abi_args = "head_size", .abi_info = "head_size",
     .abi = [](const Case& c, AbiWriter& w) { w.set("head_size", c.head_size); }, .casefile = "head_size"},
    {.name = "block_size", .token = "bs", .token_form = "bsN", .example = "bs32", .suite_key = "block_sizes", .lo = 1,
     .hi = 65536, .id_text = int_text<&Case::block_size, false>,
     .parse = parse_int<&Case::block_size>, .check = check_block_size, .bound = bound_int<&Case::block_size>,
     .copy = copy_member<&Case::block_size>, .abi_version = 1, .abi_args = "block_size", .abi_info = "block_size",
     .abi = [](const Case& c, AbiWriter& w) { w.set("block_size", c.block_size); }, .casefile = "block_size"},
    {.name = "kv_dtype", .token_form = "DTYPE", .example = "f16", .suite_key = "dtypes",
     .id_text = [](const Case& c) { return dtype_text(c.kv_dtype); }, .matches = matches_dtype,
     .parse = parse_kv_dtype, .copy = copy_member<&Case::kv_dtype>, .abi_version = 1, .abi_args = "kv_dtype",
     .abi_info = "kv_dtype", .abi = [](const Case& c, AbiWriter& w) { w.set("kv_dtype", static_cast<int>(c.kv_dtype)); },
     .casefile = "kv_dtype kv_tensor_dtype key_cache value_cache"},
    {.name = "q_dtype", .token = "q=", .token_form = "q=DTYPE", .example = "q=f32", .suite_key = "dtypes",
     .id_text = [](const Case& c) { return c.q_dtype == c.kv_dtype ? std::string() : dtype_text(c.q_dtype); },
     .parse = [](const CaseField& f, std::string_view t, Case& c) { c.q_dtype = id_dtype(t, f); },
     .check = check_not_fp8<&Case::q_dtype>, .copy = copy_member<&Case::q_dtype>, .abi_version = 1,
     .abi_args = "q_dtype", .abi_info = "q_dtype",
     .abi = [](const Case& c, AbiWriter& w) { w.set("q_dtype", static_cast<int>(c.q_dtype)); },
     .casefile = "q_dtype query"},
    {.name = "out_dtype", .token = "o=", .token_form = "o=DTYPE", .example = "o=f32", .suite_key = "dtypes",
     .id_text = [](const Case& c) { return c.out_dtype == c.kv_dtype ? std::string() : dtype_text(c.out_dtype); },
     .parse = [](const CaseField& f, std::string_view t, Case& c) { c.out_dtype = id_dtype(t, f); },
     .check = check_not_fp8<&Case::out_dtype>, .copy = copy_member<&Case::out_dtype>, .abi_version = 1,
     .abi_args = "out_dtype", .abi_info = "out_dtype",
     .abi = [](const Case& c, AbiWriter& w) { w.set("out_dtype", static_cast<int>(c.out_dtype)); },
     .casefile = "out_dtype out"},
    {.name = "seq_lens", .kind = FieldKind::per_sequence, .token = "ctx", .token_form = "ctxN[,N...]",
     .example = "ctx100,33", .suite_key = "seq_lens", .lo = 1, .hi = 1 << 24,
     .required = "'ctxN[,N...]'", .id_text = seq_lens_text, .parse = parse_seq_lens, .check = check_seq_lens,
     .bound = [](const CaseField& f, const Case& c) { for (int len : c.seq_lens) checked_field(f.name, len); },
     .copy = copy_member<&Case::seq_lens>, .abi_version = 1, .abi_args = "num_seqs seq_lens seq_lens_host max_seq_len",
     .abi_info = "num_seqs seq_lens max_seq_len",
     .abi = [](const Case& c, AbiWriter& w) {
       w.set("num_seqs", c.num_seqs());
       w.set("max_seq_len", c.max_seq_len());
     },
     .casefile = "seq_lens num_seqs"},
    {.name = "layout", .token_form = "LAYOUT", .example = "hnd", .suite_key = "layouts",
     .id_text = [](const Case& c) { return std::string(layout_name(c.layout)); }, .matches = matches_layout,
     .parse = [](const CaseField&, std::string_view t, Case& c) { c.layout = parse_layout(t); },
     .copy = copy_member<&Case::layout>, .abi_version = 1, .abi_args = "layout k_strides v_strides",
     .abi_info = "layout", .abi = [](const Case& c, AbiWriter& w) { w.set("layout", static_cast<int>(c.layout)); },
     .casefile = "layout x strides"},
    {.name = "seed", .token = "seed", .token_form = "seedN", .example = "seed3", .suite_key = "seeds",
     .id_text = [](const Case& c) { return fmt::format("{}", c.seed); },
     .parse = [](const CaseField&, std::string_view t, Case& c) { c.seed = parse_seed(t); },
     .copy = copy_member<&Case::seed>, .casefile = "case"},
    {.name = "dist", .token = "dist=", .token_form = "dist=NAME", .example = "dist=peaked", .suite_key = "dists",
     .id_text = [](const Case& c) { return c.dist == kFieldDefaults.dist ? std::string() : std::string(dist_name(c.dist)); },
     .parse = [](const CaseField&, std::string_view t, Case& c) {
       try {
         c.dist = parse_dist(t);
       } catch (const std::invalid_argument& e) {
         throw CaseError("dist", e.what());
       }
     },
     .check = check_dist, .copy = copy_member<&Case::dist>, .casefile = "case"},
    {.name = "scale", .token = "scale=", .token_form = "scale=S", .example = "scale=0.0625", .suite_key = "scales",
     .id_text = float_text<&Case::scale>, .parse = parse_scale, .check = check_scale, .copy = copy_member<&Case::scale>,
     .abi_version = 1, .abi_args = "scale", .abi_info = "scale",
     .abi = [](const Case& c, AbiWriter& w) { w.set("scale", c.effective_scale()); }, .casefile = "scale",
     .casefile_scalar = "scale"},
    {.name = "k_scale", .kind = FieldKind::per_slot, .token = "ks=", .token_form = "ks=SCALE", .example = "ks=0.5",
     .suite_key = "k_scale", .id_text = kv_scale_text<&Case::k_scale>,
     .parse = parse_with<&Case::k_scale, &KvScale::parse>, .check = check_kv_scale<&Case::k_scale>,
     .copy = copy_member<&Case::k_scale>, .abi_version = 1, .abi_args = "k_scale k_scales_per_head k_scales_per_slot",
     .abi_info = "k_scale_form k_scale k_scales_per_head", .abi = abi_kv_scale<&Case::k_scale, true>,
     .casefile = "k_scale k_scales_per_head k_scales_per_slot k_scale_form", .casefile_scalar = "k_scale",
     .gates = {{4, "per-slot fp8 scale tables", "per-slot scale tables", "k_scales_per_slot", uses_slot_scales}}},
    {.name = "v_scale", .kind = FieldKind::per_slot, .token = "vs=", .token_form = "vs=SCALE", .example = "vs=0.5",
     .suite_key = "v_scale", .id_text = kv_scale_text<&Case::v_scale>,
     .parse = parse_with<&Case::v_scale, &KvScale::parse>, .check = check_kv_scale<&Case::v_scale>,
     .copy = copy_member<&Case::v_scale>, .abi_version = 1, .abi_args = "v_scale v_scales_per_head v_scales_per_slot",
     .abi_info = "v_scale_form v_scale v_scales_per_head", .abi = abi_kv_scale<&Case::v_scale, false>,
     .casefile = "v_scale v_scales_per_head v_scales_per_slot v_scale_form", .casefile_scalar = "v_scale",
     .gates = {{4, "per-slot fp8 scale tables", "per-slot scale tables", "v_scales_per_slot", uses_slot_scales}}},
    {.name = "sliding_window", .token = "win=", .token_form = "win=W", .example = "win=16", .suite_key = "variants",
     .id_text = [](const Case& c) { return c.sliding_window > 0 ? fmt::format("{}", c.sliding_window) : std::string(); },
     .parse = parse_window, .check = check_window, .copy = copy_member<&Case::sliding_window>, .uses = uses_window,
     .abi_version = 2, .abi_args = "sliding_window", .abi_info = "sliding_window",
     .abi = [](const Case& c, AbiWriter& w) { w.set("sliding_window", c.sliding_window); },
     .variant_bit = PACHECK_VARIANT_SLIDING_WINDOW, .variant_lacks = "does not implement a sliding window",
     .casefile = "sliding_window", .casefile_version = 2, .casefile_scalar = "sliding_window",
     .casefile_problem = window_problem, .gates = {{2, kVariantCarries, kVariants, "sliding_window", uses_window}}},
    {.name = "logits_soft_cap", .token = "cap=", .token_form = "cap=C", .example = "cap=30", .suite_key = "variants",
     .id_text = float_text<&Case::logits_soft_cap>, .parse = parse_float<&Case::logits_soft_cap>, .check = check_cap,
     .copy = copy_member<&Case::logits_soft_cap>, .uses = uses_cap, .abi_version = 2, .abi_args = "logits_soft_cap",
     .abi_info = "logits_soft_cap",
     .abi = [](const Case& c, AbiWriter& w) { w.set("logits_soft_cap", c.logits_soft_cap.value_or(0.0f)); },
     .variant_bit = PACHECK_VARIANT_SOFT_CAP, .variant_lacks = "does not implement a logit soft cap",
     .casefile = "logits_soft_cap", .casefile_version = 2, .casefile_scalar = "logits_soft_cap",
     .casefile_problem = cap_problem, .gates = {{2, kVariantCarries, kVariants, "logits_soft_cap", uses_cap}}},
    {.name = "alibi_slopes", .kind = FieldKind::per_head, .token = "alibi=", .token_form = "alibi=FORM",
     .example = "alibi=geo", .suite_key = "variants", .id_text = head_values_text<&Case::alibi_slopes>,
     .parse = parse_with<&Case::alibi_slopes, &HeadValues::parse>, .check = check_head_values<&Case::alibi_slopes>,
     .copy = copy_member<&Case::alibi_slopes>, .uses = uses_alibi, .abi_version = 2, .abi_args = "alibi_slopes",
     .abi_info = "has_alibi", .abi = [](const Case& c, AbiWriter& w) { w.set("has_alibi", uses_alibi(c)); },
     .variant_bit = PACHECK_VARIANT_ALIBI, .variant_lacks = "does not implement ALiBi", .casefile = "alibi_slopes",
     .casefile_version = 2, .gates = {{2, kVariantCarries, kVariants, "alibi_slopes", uses_alibi}}},
    {.name = "sinks", .kind = FieldKind::per_head, .token = "sinks=", .token_form = "sinks=FORM",
     .example = "sinks=-2~2", .suite_key = "variants", .id_text = head_values_text<&Case::sinks>,
     .parse = parse_with<&Case::sinks, &HeadValues::parse>, .check = check_head_values<&Case::sinks>,
     .copy = copy_member<&Case::sinks>, .uses = uses_sinks, .abi_version = 2, .abi_args = "sinks",
     .abi_info = "has_sinks", .abi = [](const Case& c, AbiWriter& w) { w.set("has_sinks", uses_sinks(c)); },
     .variant_bit = PACHECK_VARIANT_SINKS, .variant_lacks = "does not implement attention sinks", .casefile = "sinks",
     .casefile_version = 2, .gates = {{2, kVariantCarries, kVariants, "sinks", uses_sinks}}},
    {.name = "query_lens", .kind = FieldKind::per_sequence, .token = "qlen=", .token_form = "qlen=N[,N...]",
     .example = "qlen=3", .suite_key = "variants", .id_text = query_lens_text, .parse = parse_query_lens,
     .check = check_query_lens, .copy = copy_member<&Case::query_lens>, .uses = uses_query_lens, .abi_version = 2,
     .abi_args = "max_query_len num_query_tokens query_start_loc query_start_loc_host",
     .abi_info = "max_query_len query_lens",
     .abi = [](const Case& c, AbiWriter& w) {
       w.set("max_query_len", c.max_query_len());
       w.set("num_query_tokens", c.num_query_tokens());
     },
     .variant_bit = PACHECK_VARIANT_MULTI_QUERY, .variant_lacks = "takes one query token per sequence (no query_start_loc)",
     .decline_subject = [](const Case& c) { return fmt::format("query_len {}", c.max_query_len()); },
     .casefile = "query_lens query_start_loc num_query_tokens", .casefile_version = 3,
     .gates = {{2, kVariantCarries, kVariants, "", uses_query_lens},
               {3, "several query tokens per sequence (query_lens)", "several query tokens per sequence",
                "query_lens query_start_loc", uses_query_lens}}},
    {.name = "spare_blocks", .token = "spare=", .token_form = "spare=N", .example = "spare=5",
     .suite_key = "spare_blocks", .lo = 1, .hi = kIntMax, .id_text = int_text<&Case::spare_blocks, true>,
     .parse = parse_int<&Case::spare_blocks>, .check = check_spare, .copy = copy_member<&Case::spare_blocks>,
     .abi_args = "num_blocks", .casefile = "num_blocks"},
    {.name = "padding_columns", .token = "padcols=", .token_form = "padcols=N", .example = "padcols=4",
     .suite_key = "padding_columns", .lo = 0, .hi = 65536,
     .id_text = int_text<&Case::padding_columns, true>, .parse = parse_int<&Case::padding_columns>,
     .check = check_padding_columns, .bound = bound_int<&Case::padding_columns>,
     .copy = copy_member<&Case::padding_columns>, .abi_args = "max_blocks_per_seq block_tables",
     .casefile = "max_blocks_per_seq block_tables"},
    {.name = "padding_target", .token = "padto=", .token_form = "padto=N", .example = "padto=0",
     .suite_key = "padding_target", .lo = -1, .hi = kIntMax - 1, .id_text = int_text<&Case::padding_target, true>,
     .parse = parse_int<&Case::padding_target>, .copy = copy_member<&Case::padding_target>,
     .abi_args = "block_tables", .casefile = "block_tables"},
    {.name = "high_block_ids", .token = "hiblk=", .token_form = "hiblk=B", .example = "hiblk=31",
     .suite_key = "high_block_ids", .lo = 0, .hi = 32, .id_text = int_text<&Case::high_block_ids, true>,
     .parse = parse_int<&Case::high_block_ids>, .copy = copy_member<&Case::high_block_ids>,
     .abi_args = "num_blocks block_tables"},
    // MLA (core/mla.hpp): one token for the three; ABI version 4 carries them (only kernels with
    // PACHECK_KERNEL_MLA get MLA cells: Kernel::takes_mla), case files from format_version 5 (the latent cache
    // as latent_cache, and each field's I32 scalar, 0 in a multi-head file); an older export leaves MLA cells out.
    {.name = "kv_lora_rank", .token = "mla=", .token_form = kMlaForm, .example = "mla=512+64", .suite_key = "mla",
     .lo = 0, .hi = 1024, .id_text = mla_text, .parse = parse_mla, .check = check_mla_case,
     .bound = bound_int<&Case::kv_lora_rank>, .copy = copy_member<&Case::kv_lora_rank>, .abi_version = 4,
     .abi_args = "kv_lora_rank", .abi_info = "kv_lora_rank",
     .abi = [](const Case& c, AbiWriter& w) { w.set("kv_lora_rank", c.kv_lora_rank); },
     .casefile = "kv_lora_rank latent_cache", .casefile_version = kMlaCaseFileVersion, .casefile_scalar = "kv_lora_rank",
     .casefile_problem = mla_dim_problem,
     .gates = {{kMlaCaseFileVersion, kMlaCarries, kMlaCaches, "kv_lora_rank latent_cache", is_mla_case}}},
    {.name = "qk_rope_head_dim", .token_form = kMlaForm, .suite_key = "mla", .lo = 0, .hi = 1024,
     .bound = bound_int<&Case::qk_rope_head_dim>, .copy = copy_member<&Case::qk_rope_head_dim>, .abi_version = 4,
     .abi_args = "qk_rope_head_dim", .abi_info = "qk_rope_head_dim",
     .abi = [](const Case& c, AbiWriter& w) { w.set("qk_rope_head_dim", c.qk_rope_head_dim); },
     .casefile = "qk_rope_head_dim", .casefile_version = kMlaCaseFileVersion, .casefile_scalar = "qk_rope_head_dim",
     .casefile_problem = mla_dim_problem,
     .gates = {{kMlaCaseFileVersion, kMlaCarries, kMlaCaches, "qk_rope_head_dim", is_mla_case}}},
    {.name = "v_head_dim", .token_form = kMlaForm, .suite_key = "mla", .lo = 0, .hi = 1024,
     .bound = bound_int<&Case::v_head_dim>, .copy = copy_member<&Case::v_head_dim>, .abi_version = 4,
     .abi_args = "v_head_dim", .abi_info = "v_head_dim",
     .abi = [](const Case& c, AbiWriter& w) { w.set("v_head_dim", c.v_head_dim); },
     .casefile = "v_head_dim", .casefile_version = kMlaCaseFileVersion, .casefile_scalar = "v_head_dim",
     .casefile_problem = mla_dim_problem,
     .gates = {{kMlaCaseFileVersion, kMlaCarries, kMlaCaches, "v_head_dim", is_mla_case}}},
};
// clang-format on

}  // namespace

std::string_view field_kind_name(FieldKind k) {
  switch (k) {
    case FieldKind::scalar: return "scalar";
    case FieldKind::per_head: return "per_head";
    case FieldKind::per_sequence: return "per_sequence";
    case FieldKind::per_slot: return "per_slot";
  }
  return "?";
}

std::span<const CaseField> case_field_table() { return kCaseFields; }

const CaseField* find_case_field(std::string_view name) {
  for (const CaseField& f : kCaseFields)
    if (f.name == name) return &f;
  return nullptr;
}

const CaseField* case_field_of_token(std::string_view token) {
  for (const CaseField& f : kCaseFields) {
    if (!f.parse) continue;
    if (f.matches ? f.matches(token) : !f.token.empty() && token.starts_with(f.token)) return &f;
  }
  return nullptr;
}

unsigned case_variants(const Case& c) {
  unsigned v = 0;
  for (const CaseField& f : kCaseFields)
    if (f.variant_bit && f.uses(c)) v |= f.variant_bit;
  return v;
}

void write_case_abi(const Case& c, AbiWriter& w) {
  for (const CaseField& f : kCaseFields)
    if (f.abi) f.abi(c, w);
}

const CaseFileGate* case_file_gate(const Case& c, int format_version) {
  const CaseFileGate* first = nullptr;
  for (const CaseField& f : kCaseFields)
    for (const CaseFileGate& g : f.gates)
      if (g.needs && g.version > format_version && (!first || g.version < first->version) && g.needs(c)) first = &g;
  return first;
}

std::string case_fields_json() {
  auto words = [](std::string_view text) {
    nlohmann::json out = nlohmann::json::array();
    for (std::size_t start = 0; start < text.size();) {
      const auto space = std::min(text.find(' ', start), text.size());
      if (space > start) out.push_back(std::string(text.substr(start, space - start)));
      start = space + 1;
    }
    return out;
  };
  nlohmann::json fields = nlohmann::json::array();
  for (const CaseField& f : kCaseFields) {
    nlohmann::json gates = nlohmann::json::array();
    for (const CaseFileGate& g : f.gates)
      if (g.needs) gates.push_back({{"version", g.version}, {"carries", g.carries}, {"feature", g.feature}, {"tensors", words(g.tensors)}});
    fields.push_back({{"name", f.name},
                      {"kind", field_kind_name(f.kind)},
                      {"token", f.token},
                      {"token_form", f.token_form},
                      {"example", f.example},
                      {"suite_key", f.suite_key},
                      {"bounds", f.hi >= f.lo ? nlohmann::json::array({f.lo, f.hi}) : nlohmann::json()},
                      {"abi_version", f.abi_version},
                      {"abi_args", words(f.abi_args)},
                      {"abi_info", words(f.abi_info)},
                      {"variant_bit", f.variant_bit},
                      {"casefile", words(f.casefile)},
                      {"casefile_version", f.casefile_version},
                      {"casefile_scalar", f.casefile_scalar},
                      {"gates", gates}});
  }
  return nlohmann::json{{"fields", fields}}.dump(1);
}

}  // namespace pacheck
