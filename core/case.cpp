#include "core/case.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>

#include "core/case_fields.hpp"
#include "core/table.hpp"

namespace pacheck {

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
  if (const CaseField* f = find_case_field(field); f && f->hi >= f->lo) return {f->lo, f->hi};
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

bool Case::has_variant() const { return case_variants(*this) != 0; }

bool Case::straddles() const {
  for (int len : seq_lens)
    if (len % block_size != 0) return true;
  return false;
}

void Case::validate() const {
  // Each field's own checks (core/case_fields.cpp), in table order, then the caps on sizes a case cannot
  // meaningfully exceed (field_bounds), then the pool the whole case implies.
  for (const CaseField& f : case_field_table())
    if (f.check) f.check(*this);
  for (const CaseField& f : case_field_table())
    if (f.bound) f.bound(f, *this);
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
  // Every field's token in table order (core/case_fields.cpp), defaults left out.
  std::string out;
  for (const CaseField& f : case_field_table()) {
    if (!f.id_text) continue;
    const std::string text = f.id_text(*this);
    if (text.empty()) continue;
    if (!out.empty()) out += ' ';
    out += f.token;
    out += text;
  }
  return out;
}

namespace {

/// The variant row `token` belongs to (suite key "variants"), or nullptr.
const CaseField* variant_row(std::string_view token) {
  const CaseField* f = case_field_of_token(token);
  return f && f->suite_key == "variants" ? f : nullptr;
}

}  // namespace

const char* variant_token_field(std::string_view t) {
  const CaseField* f = variant_row(t);
  return f ? f->name.data() : nullptr;
}

void apply_variant_token(std::string_view t, Case& c) {
  const CaseField* f = variant_row(t);
  if (!f) {
    std::string prefixes;
    for (const CaseField& row : case_field_table())
      if (row.suite_key == "variants") prefixes += fmt::format("{}{}", prefixes.empty() ? "" : ", ", row.token);
    throw CaseError("case id", fmt::format("'{}' is not an attention-variant token ({})", t, prefixes));
  }
  f->parse(*f, t.substr(f->token.size()), c);
}

Case parse_case_id(const std::string& id) {
  Case c;
  std::istringstream in(id);
  std::string tok;
  // The token each field was read from: a field given twice ("d64 d32", "seed7 seed9") is an error naming
  // it, not "the last one wins".
  std::map<std::string_view, std::string> seen;
  while (in >> tok) {
    const CaseField* f = case_field_of_token(tok);
    if (!f) throw CaseError("case id", fmt::format("unrecognised token '{}' in '{}'", tok, id));
    const auto [it, fresh] = seen.emplace(f->name, tok);
    if (!fresh)
      throw CaseError(std::string(f->name), fmt::format("given twice ('{}' and '{}') in '{}'", it->second, tok, id));
    f->parse(*f, std::string_view(tok).substr(f->token.size()), c);
  }
  for (const CaseField& f : case_field_table())
    if (!f.required.empty() && !seen.count(f.name))
      throw CaseError("case id", fmt::format("no {} token in '{}'", f.required, id));
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
