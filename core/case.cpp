#include "core/case.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>

#include "core/table.hpp"

namespace pacheck {

namespace {
const Case kDefaults{};  // not constexpr: std::vector is not a constant expression in GCC 12
}

namespace {
constexpr LayoutInfo kLayouts[] = {
    {Layout::vllm, "vllm", true, 1},
    {Layout::nhd, "nhd", false, 1},
    {Layout::hnd, "hnd", false, 1},
    {Layout::aiter, "aiter", true, kAiterSlotGroup},
};
constexpr DistInfo kDists[] = {
    {Dist::uniform, "uniform", "Q, K and V ~ U(-1, 1)"},
    {Dist::normal, "normal", "Q, K and V ~ N(0, 1)"},
    {Dist::peaked, "peaked", "Q in [0.5, 1.5], K ~ N(0, 0.3) but a few hot keys at +3: attention concentrates on them"},
    {Dist::extreme, "extreme",
     "Q, K = +-64 (logits spread to about +-4e3*sqrt(head_size)), V = +-[0.25, 0.5] x the largest finite value, "
     "bounded by FLT_MAX / seq_len so no unnormalised fp32 P.V sum overflows"},
    {Dist::overflow, "overflow",
     "Q, K as extreme, V = +-[0.25, 0.5] x the largest finite value whatever seq_len: unnormalised fp32 P.V sums "
     "may overflow (the opt-in overflow property)"},
    {Dist::far_below, "far_below",
     "every logit of a row below -65536 (one dominant key): a running max started at a finite sentinel gives zeros"},
    {Dist::far_above, "far_above",
     "every logit of a row above +65536 (one dominant key): a softmax without the max subtracted overflows"},
    {Dist::mixed_scales, "mixed_scales",
     "sequence s's logits offset by +65536, 0 or -65536 for s % 3 = 0, 1, 2: a max carried from one sequence "
     "to the next gives zeros"},
};
}  // namespace

std::span<const LayoutInfo> layout_table() { return kLayouts; }
std::string_view layout_name(Layout l) { return name_of(layout_table(), l); }
Layout parse_layout(std::string_view s) { return parse(layout_table(), s, "layout"); }

int layout_vector_width(Layout l, DType kv_dtype) {
  const LayoutInfo* r = find_row(layout_table(), l);
  return r && r->packed_key ? static_cast<int>(16 / dtype_size(kv_dtype)) : 1;
}

std::span<const DistInfo> dist_table() { return kDists; }
std::string_view dist_name(Dist d) { return name_of(dist_table(), d); }
Dist parse_dist(std::string_view s) { return parse(dist_table(), s, "distribution"); }

std::vector<float> KvScale::resolve(int num_kv_heads) const {
  const auto G = static_cast<std::size_t>(std::max(num_kv_heads, 0));
  if (slot) return std::vector<float>(G, std::min(slot->first, slot->second));
  if (range) {
    std::vector<float> out(G);
    const double a = range->first, b = range->second;
    for (std::size_t g = 0; g < G; ++g)
      out[g] = static_cast<float>(G == 1 ? a : a + (b - a) * static_cast<double>(g) / static_cast<double>(G - 1));
    return out;
  }
  if (values.empty()) return std::vector<float>(G, 1.0f);
  if (values.size() == 1) return std::vector<float>(G, values[0]);
  return values;
}

std::string KvScale::text() const {
  if (slot) return fmt::format("slot{}~{}", slot->first, slot->second);
  if (range) return fmt::format("{}~{}", range->first, range->second);
  if (values.empty()) return "1";
  return fmt::format("{}", fmt::join(values, ","));
}

namespace {
float parse_float(std::string_view t, std::string_view whole) {
  float v = 0;
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || ec != std::errc() || p != t.data() + t.size())
    throw std::invalid_argument(fmt::format("'{}' in scale '{}' is not a number", t, whole));
  return v;
}
}  // namespace

KvScale KvScale::parse(std::string_view text) {
  KvScale k;
  if (text.starts_with("slot")) {
    const std::string_view r = text.substr(4);
    const auto tilde = r.find('~');
    if (tilde == std::string_view::npos)
      throw std::invalid_argument(fmt::format("scale '{}': per-slot scales are written slotLO~HI (e.g. slot0.25~4)", text));
    k.slot = std::pair{parse_float(r.substr(0, tilde), text), parse_float(r.substr(tilde + 1), text)};
    return k;
  }
  if (const auto tilde = text.find('~'); tilde != std::string_view::npos) {
    k.range = std::pair{parse_float(text.substr(0, tilde), text), parse_float(text.substr(tilde + 1), text)};
    return k;
  }
  while (true) {
    const auto comma = text.find(',');
    k.values.push_back(parse_float(text.substr(0, comma), text));
    if (comma == std::string_view::npos) break;
    text = text.substr(comma + 1);
  }
  return k;
}

// ---- Attention variants: per-query-head values (issue 19) ----
std::vector<float> HeadValues::resolve(int num_heads) const {
  const auto H = static_cast<std::size_t>(std::max(num_heads, 0));
  switch (form) {
    case Form::none: return {};
    case Form::values: return values.size() == 1 ? std::vector<float>(H, values[0]) : values;
    case Form::range: {
      std::vector<float> out(H);
      const double a = range.first, b = range.second;
      for (std::size_t h = 0; h < H; ++h)
        out[h] = static_cast<float>(H == 1 ? a : a + (b - a) * static_cast<double>(h) / static_cast<double>(H - 1));
      return out;
    }
    case Form::geometric: {
      std::vector<float> out(H);
      for (std::size_t h = 0; h < H; ++h)
        out[h] = static_cast<float>(std::exp2(-8.0 * static_cast<double>(h + 1) / static_cast<double>(H)));
      return out;
    }
    case Form::dominant: return std::vector<float>(H, kDominantSink);
  }
  return {};
}

std::string HeadValues::text() const {
  switch (form) {
    case Form::none: return "none";
    case Form::values: return fmt::format("{}", fmt::join(values, ","));
    case Form::range: return fmt::format("{}~{}", range.first, range.second);
    case Form::geometric: return "geo";
    case Form::dominant: return "dominant";
  }
  return "?";
}

HeadValues HeadValues::parse(std::string_view text) {
  HeadValues v;
  if (text == "none") return v;
  if (text == "geo") {
    v.form = Form::geometric;
    return v;
  }
  if (text == "dominant") {
    v.form = Form::dominant;
    return v;
  }
  // A '~' after the first character is a range ("-2~3"); a leading '-' is a sign.
  if (const auto tilde = text.find('~'); tilde != std::string_view::npos) {
    v.form = Form::range;
    v.range = {parse_float(text.substr(0, tilde), text), parse_float(text.substr(tilde + 1), text)};
    return v;
  }
  v.form = Form::values;
  while (true) {
    const auto comma = text.find(',');
    v.values.push_back(parse_float(text.substr(0, comma), text));
    if (comma == std::string_view::npos) break;
    text = text.substr(comma + 1);
  }
  return v;
}

CaseError::CaseError(std::string f, std::string r)
    : std::invalid_argument(fmt::format("{}: {}", f, r)), field(std::move(f)), reason(std::move(r)) {}

FieldBounds field_bounds(std::string_view field) {
  constexpr long long kIntMax = std::numeric_limits<int>::max();
  if (field == "num_heads" || field == "num_kv_heads") return {1, 1024};
  if (field == "head_size") return {1, 1024};
  if (field == "block_size") return {1, 65536};
  if (field == "seq_lens") return {1, 1 << 24};
  if (field == "spare_blocks") return {1, kIntMax};
  if (field == "padding_columns") return {0, 65536};
  if (field == "padding_target") return {-1, kIntMax - 1};
  if (field == "high_block_ids") return {0, 32};
  throw std::logic_error(fmt::format("field_bounds: '{}' is not an integer field of a case", field));
}

int checked_field(std::string_view field, long long v) {
  const FieldBounds b = field_bounds(field);
  if (v < b.lo || v > b.hi) throw CaseError(std::string(field), fmt::format("{} is out of range [{}, {}]", v, b.lo, b.hi));
  return static_cast<int>(v);
}

std::uint64_t parse_seed(std::string_view text) {
  const bool digits = !text.empty() && std::all_of(text.begin() + (text.front() == '-' ? 1 : 0), text.end(),
                                                   [](char ch) { return ch >= '0' && ch <= '9'; });
  if (!digits || text == "-")
    throw CaseError("seed", fmt::format("'{}' is not an unsigned 64-bit integer", text));
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.front() == '-' || ec != std::errc() || p != text.data() + text.size())
    throw CaseError("seed", fmt::format("{} is out of range [0, {}]", text, std::numeric_limits<std::uint64_t>::max()));
  return v;
}

float Case::effective_scale() const {
  return scale ? *scale : 1.0f / std::sqrt(static_cast<float>(head_size));
}

bool Case::straddles() const {
  for (int len : seq_lens)
    if (len % block_size != 0) return true;
  return false;
}

void Case::validate() const {
  if (num_heads < 1) throw CaseError("num_heads", fmt::format("must be >= 1, got {}", num_heads));
  if (num_kv_heads < 1) throw CaseError("num_kv_heads", fmt::format("must be >= 1, got {}", num_kv_heads));
  if (num_heads % num_kv_heads != 0)
    throw CaseError("num_heads", fmt::format("{} is not a multiple of num_kv_heads {}", num_heads, num_kv_heads));
  if (head_size < 1) throw CaseError("head_size", fmt::format("must be >= 1, got {}", head_size));
  const int vw = layout_vector_width(layout, kv_dtype);
  if (head_size % vw != 0)
    throw CaseError("head_size", fmt::format("{} is not a multiple of the {} layout's vector width {} for {}",
                                             head_size, layout_name(layout), vw, dtype_name(kv_dtype)));
  if (block_size < 1) throw CaseError("block_size", fmt::format("must be >= 1, got {}", block_size));
  if (const LayoutInfo* li = find_row(layout_table(), layout); li && block_size % li->block_multiple != 0)
    throw CaseError("block_size",
                    fmt::format("{} is not a multiple of {}: the {} layout stores V in groups of {} slots "
                                "([num_blocks, num_kv_heads, block_size / {}, head_size, {}])",
                                block_size, li->block_multiple, layout_name(layout), li->block_multiple,
                                li->block_multiple, li->block_multiple));
  if (seq_lens.empty()) throw CaseError("seq_lens", "needs at least one sequence");
  if (seq_lens.size() > kMaxNumSeqs)
    throw CaseError("seq_lens", fmt::format("{} sequences, more than {} (a decode batch)", seq_lens.size(), kMaxNumSeqs));
  for (std::size_t i = 0; i < seq_lens.size(); ++i)
    if (seq_lens[i] < 1)
      throw CaseError("seq_lens", fmt::format("seq_len of sequence {} is {}, must be >= 1", i, seq_lens[i]));
  if (scale && !(std::isfinite(*scale) && *scale > 0))
    throw CaseError("scale", fmt::format("must be finite and > 0, got {}", *scale));
  for (auto [t, field] : {std::pair{q_dtype, "q_dtype"}, std::pair{out_dtype, "out_dtype"}})
    if (is_fp8(t))
      throw CaseError(field, fmt::format("{} is a KV-cache dtype only; query and output must be f32, f16 or bf16",
                                         dtype_name(t)));
  for (auto [ks, field] : {std::pair{&k_scale, "k_scale"}, std::pair{&v_scale, "v_scale"}}) {
    if (ks->is_default()) continue;
    if (!is_fp8(kv_dtype))
      throw CaseError(field, fmt::format("only fp8 KV caches take scales; kv_dtype is {}", dtype_name(kv_dtype)));
    std::vector<float> given = ks->values;
    if (ks->range) given = {ks->range->first, ks->range->second};
    if (ks->slot) {
      given = {ks->slot->first, ks->slot->second};
      // Not `!(lo <= hi)`: a NaN bound is refused below, as not finite.
      if (ks->slot->first > ks->slot->second)
        throw CaseError(field, fmt::format("{}: low {} is above high {} (per-slot scales are drawn between [lo, hi])",
                                           ks->text(), ks->slot->first, ks->slot->second));
      if (high_block_ids != 0)
        throw CaseError(field, fmt::format("{}: per-slot scale tables are dense [num_blocks, num_kv_heads, block_size]; "
                                           "high_block_ids {} (a pool of 2^{} elements) is not modelled with them",
                                           ks->text(), high_block_ids, high_block_ids));
    }
    for (float v : given)
      if (!(std::isfinite(v) && v > 0)) throw CaseError(field, fmt::format("{} must be finite and > 0, got {}", ks->text(), v));
    if (!ks->range && !ks->slot && ks->values.size() != 1 && ks->values.size() != static_cast<std::size_t>(num_kv_heads))
      throw CaseError(field, fmt::format("{} values for {} KV heads: give 1 (per tensor) or {} (per KV head)",
                                         ks->values.size(), num_kv_heads, num_kv_heads));
  }
  if (offset_dist(dist) && is_fp8(kv_dtype))
    throw CaseError("dist", fmt::format("dist={} needs a 16/32-bit cache (its keys carry a power of two up to 2^15); "
                                        "kv_dtype is {}", dist_name(dist), dtype_name(kv_dtype)));
  if (offset_dist(dist) && effective_scale() < 0x1p-14f)
    throw CaseError("scale", fmt::format("dist={} needs a softmax scale >= 2^-14 (its offset 65536 / scale is a "
                                         "power of two of at most 2^30, split between q and k, f16's range); got {}",
                                         dist_name(dist), effective_scale()));
  // Attention variants (issue 19).
  if (sliding_window < 0)
    throw CaseError("sliding_window", fmt::format("must be >= 1 tokens (0 = none), got {}", sliding_window));
  if (logits_soft_cap && !(std::isfinite(*logits_soft_cap) && *logits_soft_cap > 0))
    throw CaseError("logits_soft_cap", fmt::format("must be finite and > 0, got {}", *logits_soft_cap));
  for (auto [hv, field] : {std::pair{&alibi_slopes, "alibi_slopes"}, std::pair{&sinks, "sinks"}}) {
    using F = HeadValues::Form;
    if (hv->is_default()) continue;
    const bool alibi = hv == &alibi_slopes;
    if (alibi && (hv->form == F::range || hv->form == F::dominant))
      throw CaseError(field, fmt::format("'{}': ALiBi slopes are geo or explicit values", hv->text()));
    if (!alibi && hv->form == F::geometric)
      throw CaseError(field, "'geo' is a form of ALiBi slopes; sinks are values, a range LO~HI or dominant");
    if (hv->form == F::values && hv->values.size() != 1 && hv->values.size() != static_cast<std::size_t>(num_heads))
      throw CaseError(field, fmt::format("{} values for {} query heads: give 1 or {}", hv->values.size(), num_heads,
                                         num_heads));
    std::vector<float> given = hv->values;
    if (hv->form == F::range) given = {hv->range.first, hv->range.second};
    for (float x : given) {
      if (!std::isfinite(x)) throw CaseError(field, fmt::format("{}: {} is not finite", hv->text(), x));
      if (alibi && x < 0) throw CaseError(field, fmt::format("{}: slope {} is negative (slopes are >= 0)", hv->text(), x));
    }
    if (hv->form == F::dominant &&
        (dist == Dist::extreme || dist == Dist::overflow || dist == Dist::far_above || dist == Dist::mixed_scales) &&
        !(logits_soft_cap && *logits_soft_cap <= 1000.0f))
      throw CaseError(field, fmt::format("dominant sinks (1e4) are not above the {} distribution's logits; "
                                         "give logits_soft_cap <= 1000 or another dist", dist_name(dist)));
  }
  if (!query_lens.empty()) {
    if (query_lens.size() != 1 && query_lens.size() != seq_lens.size())
      throw CaseError("query_lens", fmt::format("{} values for {} sequences: give 1 (every sequence) or {} (one per "
                                                "sequence)", query_lens.size(), seq_lens.size(), seq_lens.size()));
    for (int s = 0; s < num_seqs(); ++s) {
      const int ql = query_len(s);
      if (ql < 1 || ql > kMaxQueryLen)
        throw CaseError("query_lens", fmt::format("query_len of sequence {} is {}, must be 1 to {}", s, ql, kMaxQueryLen));
      if (ql > seq_lens[s])
        throw CaseError("query_lens", fmt::format("query_len of sequence {} is {}, more than its seq_len {} (the query "
                                                  "tokens are the last query_len tokens of the context)",
                                                  s, ql, seq_lens[s]));
    }
  }
  if (spare_blocks < 1) throw CaseError("spare_blocks", fmt::format("must be >= 1, got {}", spare_blocks));
  if (padding_columns < 0)
    throw CaseError("padding_columns", fmt::format("must be >= 0, got {}", padding_columns));
  // The caps (field_bounds) on sizes a case cannot meaningfully exceed; the lower bounds are checked above.
  checked_field("num_heads", num_heads);
  checked_field("num_kv_heads", num_kv_heads);
  checked_field("head_size", head_size);
  checked_field("block_size", block_size);
  for (int len : seq_lens) checked_field("seq_lens", len);
  checked_field("padding_columns", padding_columns);
  if (high_block_ids != 0 && high_block_ids != 31 && high_block_ids != 32)
    throw CaseError("high_block_ids", fmt::format("{} is not 0 (a dense pool), 31 or 32 (offsets past 2^31 / 2^32)",
                                                  high_block_ids));
  const PoolPlan plan = pool_plan();
  const long long pool = plan.num_blocks;
  if (pool > (1LL << 31) - 1)
    throw CaseError(high_block_ids ? "high_block_ids" : "seq_lens",
                    high_block_ids ? fmt::format("offsets past 2^{} need {} blocks of {} elements, more than 2^31 - 1",
                                                 high_block_ids, pool,
                                                 static_cast<long long>(num_kv_heads) * head_size * block_size)
                                   : std::string("the pool would need more than 2^31 blocks"));
  if (padding_target < -1 || padding_target >= pool)
    throw CaseError("padding_target",
                    fmt::format("{} is not -1 or a physical block in [0, {})", padding_target, pool));
}

Case::PoolPlan Case::pool_plan() const {
  PoolPlan p;
  for (int s = 0; s < num_seqs(); ++s) p.needed += blocks_for(s);
  const long long window = p.needed + spare_blocks;
  if (high_block_ids == 0) {
    p.num_blocks = window;
    return p;
  }
  const long long E = static_cast<long long>(std::max(1, num_kv_heads)) * std::max(1, head_size) * std::max(1, block_size);
  const long long first_high = ((1LL << high_block_ids) + E - 1) / E;
  p.window_first = std::max(0LL, first_high - p.needed / 2);
  p.num_blocks = p.window_first + window;
  return p;
}

std::string Case::id() const {
  std::string out = fmt::format("h{}/{} d{} bs{} {}", num_heads, num_kv_heads, head_size, block_size,
                                dtype_name(kv_dtype));
  if (q_dtype != kv_dtype) out += fmt::format(" q={}", dtype_name(q_dtype));
  if (out_dtype != kv_dtype) out += fmt::format(" o={}", dtype_name(out_dtype));
  out += " ctx";
  for (std::size_t i = 0; i < seq_lens.size(); ++i) out += fmt::format("{}{}", i ? "," : "", seq_lens[i]);
  out += fmt::format(" {} seed{}", layout_name(layout), seed);
  if (dist != kDefaults.dist) out += fmt::format(" dist={}", dist_name(dist));
  if (scale) out += fmt::format(" scale={}", *scale);
  if (!k_scale.is_default()) out += fmt::format(" ks={}", k_scale.text());
  if (!v_scale.is_default()) out += fmt::format(" vs={}", v_scale.text());
  if (sliding_window > 0) out += fmt::format(" win={}", sliding_window);
  if (logits_soft_cap) out += fmt::format(" cap={}", *logits_soft_cap);
  if (!alibi_slopes.is_default()) out += fmt::format(" alibi={}", alibi_slopes.text());
  if (!sinks.is_default()) out += fmt::format(" sinks={}", sinks.text());
  if (!query_lens.empty()) out += fmt::format(" qlen={}", fmt::join(query_lens, ","));
  if (spare_blocks != kDefaults.spare_blocks) out += fmt::format(" spare={}", spare_blocks);
  if (padding_columns != kDefaults.padding_columns) out += fmt::format(" padcols={}", padding_columns);
  if (padding_target != kDefaults.padding_target) out += fmt::format(" padto={}", padding_target);
  if (high_block_ids != 0) out += fmt::format(" hiblk={}", high_block_ids);
  return out;
}

namespace {

/// An integer field of an id: range-checked against field_bounds() before it is narrowed to int, so
/// "ctx4294967396" is an error rather than ctx100.
int to_int(std::string_view text, std::string_view field) {
  long long v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc::result_out_of_range && p == text.data() + text.size()) {
    const FieldBounds b = field_bounds(field);
    throw CaseError(std::string(field), fmt::format("{} is out of range [{}, {}]", text, b.lo, b.hi));
  }
  if (ec != std::errc() || p != text.data() + text.size())
    throw CaseError(std::string(field), fmt::format("'{}' is not an integer", text));
  return checked_field(field, v);
}

}  // namespace

const char* variant_token_field(std::string_view t) {
  if (t.starts_with("win=")) return "sliding_window";
  if (t.starts_with("cap=")) return "logits_soft_cap";
  if (t.starts_with("alibi=")) return "alibi_slopes";
  if (t.starts_with("sinks=")) return "sinks";
  if (t.starts_with("qlen=")) return "query_lens";
  return nullptr;
}

void apply_variant_token(std::string_view t, Case& c) {
  if (t.starts_with("win=")) {
    long long w = 0;
    const std::string_view n = t.substr(4);
    auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), w);
    if (n.empty() || ec != std::errc() || p != n.data() + n.size() || w < 1 || w > (1 << 24))
      throw CaseError("sliding_window", fmt::format("'{}' is not a window of 1 to {} tokens", n, 1 << 24));
    c.sliding_window = static_cast<int>(w);
  } else if (t.starts_with("cap=")) {
    float v = 0;
    const std::string_view n = t.substr(4);
    auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), v);
    if (n.empty() || ec != std::errc() || p != n.data() + n.size())
      throw CaseError("logits_soft_cap", fmt::format("'{}' is not a number", n));
    c.logits_soft_cap = v;
  } else if (t.starts_with("alibi=") || t.starts_with("sinks=")) {
    const bool alibi = t[0] == 'a';
    const char* field = alibi ? "alibi_slopes" : "sinks";
    try {
      (alibi ? c.alibi_slopes : c.sinks) = HeadValues::parse(t.substr(6));
    } catch (const std::invalid_argument& e) {
      throw CaseError(field, e.what());
    }
  } else if (t.starts_with("qlen=")) {
    // N (every sequence) or N,N,... (one per sequence); each 1 to kMaxQueryLen (the count and the bound by
    // seq_len are Case::validate()'s). A list of ones is plain decode and stored as none.
    const std::string_view list = t.substr(5);
    std::vector<int> lens;
    for (std::size_t start = 0; start <= list.size();) {
      const auto comma = std::min(list.find(',', start), list.size());
      const std::string_view n = list.substr(start, comma - start);
      long long q = 0;
      auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), q);
      if (n.empty() || ec != std::errc() || p != n.data() + n.size())
        throw CaseError("query_lens", fmt::format("'{}' in '{}' is not a query_len (an integer 1 to {})", n, t,
                                                  Case::kMaxQueryLen));
      if (q < 1 || q > Case::kMaxQueryLen)
        throw CaseError("query_lens", fmt::format("query_len {} in '{}' is out of range [1, {}]", q, t, Case::kMaxQueryLen));
      lens.push_back(static_cast<int>(q));
      start = comma + 1;
    }
    const bool all_one = std::all_of(lens.begin(), lens.end(), [](int q) { return q == 1; });
    c.query_lens = all_one ? std::vector<int>{} : std::move(lens);
  } else {
    throw CaseError("case id", fmt::format("'{}' is not an attention-variant token (win=, cap=, alibi=, sinks=, qlen=)", t));
  }
}

Case parse_case_id(const std::string& id) {
  Case c;
  std::istringstream in(id);
  std::string tok;
  bool have_heads = false, have_ctx = false;
  auto dtype_of = [](std::string_view v, const char* field) {
    try {
      return parse_dtype(v);
    } catch (const std::invalid_argument& e) {
      throw CaseError(field, e.what());
    }
  };
  // The token each field was read from: a field given twice ("d64 d32", "seed7 seed9") is an error naming
  // it, not "the last one wins".
  std::map<std::string, std::string, std::less<>> seen;
  auto once = [&](const char* field, std::string_view token) {
    const auto [it, fresh] = seen.emplace(field, std::string(token));
    if (!fresh)
      throw CaseError(field, fmt::format("given twice ('{}' and '{}') in '{}'", it->second, token, id));
  };
  while (in >> tok) {
    std::string_view t = tok;
    if (t.starts_with("h") && t.find('/') != std::string_view::npos) {
      once("num_heads", t);
      auto slash = t.find('/');
      c.num_heads = to_int(t.substr(1, slash - 1), "num_heads");
      c.num_kv_heads = to_int(t.substr(slash + 1), "num_kv_heads");
      have_heads = true;
    } else if (t.starts_with("bs")) {
      once("block_size", t);
      c.block_size = to_int(t.substr(2), "block_size");
    } else if (t.starts_with("d") && t.size() > 1 && std::isdigit(static_cast<unsigned char>(t[1]))) {
      once("head_size", t);
      c.head_size = to_int(t.substr(1), "head_size");
    } else if (t.starts_with("ctx")) {
      once("seq_lens", t);
      c.seq_lens.clear();
      const std::string_view lens = t.substr(3);
      // Every comma separates two lengths: "ctx30," and "ctx,30" have an empty entry, not one length.
      for (std::size_t start = 0; start <= lens.size();) {
        const auto comma = std::min(lens.find(',', start), lens.size());
        const std::string_view entry = lens.substr(start, comma - start);
        if (entry.empty() && !lens.empty())
          throw CaseError("seq_lens", fmt::format("entry {} of '{}' is empty (lengths are N[,N...])",
                                                  c.seq_lens.size(), t));
        if (!entry.empty()) c.seq_lens.push_back(to_int(entry, "seq_lens"));
        start = comma + 1;
      }
      have_ctx = true;
    } else if (t.starts_with("seed")) {
      once("seed", t);
      c.seed = parse_seed(t.substr(4));
    } else if (t.starts_with("q=")) {
      once("q_dtype", t);
      c.q_dtype = dtype_of(t.substr(2), "q_dtype");
    } else if (t.starts_with("o=")) {
      once("out_dtype", t);
      c.out_dtype = dtype_of(t.substr(2), "out_dtype");
    } else if (t.starts_with("dist=")) {
      once("dist", t);
      try {
        c.dist = parse_dist(t.substr(5));
      } catch (const std::invalid_argument& e) {
        throw CaseError("dist", e.what());
      }
    } else if (t.starts_with("scale=")) {
      once("scale", t);
      try {
        c.scale = std::stof(std::string(t.substr(6)));
      } catch (const std::exception&) {
        throw CaseError("scale", fmt::format("'{}' is not a number", t.substr(6)));
      }
    } else if (t.starts_with("ks=") || t.starts_with("vs=")) {
      const char* field = t[0] == 'k' ? "k_scale" : "v_scale";
      once(field, t);
      try {
        (t[0] == 'k' ? c.k_scale : c.v_scale) = KvScale::parse(t.substr(3));
      } catch (const std::invalid_argument& e) {
        throw CaseError(field, e.what());
      }
    } else if (const char* vf = variant_token_field(t)) {
      once(vf, t);
      apply_variant_token(t, c);
    } else if (t.starts_with("spare=")) {
      once("spare_blocks", t);
      c.spare_blocks = to_int(t.substr(6), "spare_blocks");
    } else if (t.starts_with("padcols=")) {
      once("padding_columns", t);
      c.padding_columns = to_int(t.substr(8), "padding_columns");
    } else if (t.starts_with("padto=")) {
      once("padding_target", t);
      c.padding_target = to_int(t.substr(6), "padding_target");
    } else if (t.starts_with("hiblk=")) {
      once("high_block_ids", t);
      c.high_block_ids = to_int(t.substr(6), "high_block_ids");
    } else if (find_name(layout_table(), t)) {
      once("layout", t);
      c.layout = parse_layout(t);
    } else {
      // The KV dtype token carries no prefix; anything else is an error.
      DType kv{};
      try {
        kv = parse_dtype(t);
      } catch (const std::invalid_argument&) {
        throw CaseError("case id", fmt::format("unrecognised token '{}' in '{}'", t, id));
      }
      once("kv_dtype", t);
      {
        bool q_same = c.q_dtype == c.kv_dtype, o_same = c.out_dtype == c.kv_dtype;
        c.kv_dtype = kv;
        if (q_same) c.q_dtype = kv;
        if (o_same) c.out_dtype = kv;
      }
    }
  }
  if (!have_heads) throw CaseError("case id", fmt::format("no 'hQ/KV' heads token in '{}'", id));
  if (!have_ctx) throw CaseError("case id", fmt::format("no 'ctxN[,N...]' token in '{}'", id));
  // A list of ones is stored as none (plain decode), so validate() cannot see its count: check it here.
  if (const auto q = seen.find("query_lens"); q != seen.end()) {
    const auto given = static_cast<std::size_t>(std::count(q->second.begin(), q->second.end(), ',')) + 1;
    if (given != 1 && given != c.seq_lens.size())
      throw CaseError("query_lens", fmt::format("'{}' gives {} values for {} sequences: give 1 (every sequence) or {} "
                                                "(one per sequence)",
                                                q->second, given, c.seq_lens.size(), c.seq_lens.size()));
  }
  c.validate();
  return c;
}

}  // namespace pacheck
