#include "core/mla.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <stdexcept>

#include "core/table.hpp"

namespace pacheck {
namespace {

/// Public config.json values (Hugging Face: deepseek-ai/DeepSeek-V3, deepseek-ai/DeepSeek-V2-Lite,
/// moonshotai/Kimi-K2-Instruct); see mla_models() for the scales they give.
constexpr MlaModel kModels[] = {
    {"deepseek-v3", 128, 512, 64, 128, 40.0, 1.0},
    {"deepseek-v2-lite", 16, 512, 64, 128, 40.0, 0.707},
    {"kimi-k2", 64, 512, 64, 128, 32.0, 1.0},
};

/// The widest latent row and V a case may ask for: Case::head_size's bound.
constexpr int kMaxRow = 1024;

int shape_int(std::string_view text, const char* field) {
  int v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size())
    throw CaseError(field, fmt::format("'{}' is not an integer", text));
  return v;
}

}  // namespace

std::string MlaShape::text() const {
  std::string out = fmt::format("{}+{}", kv_lora_rank, qk_rope_head_dim);
  if (v_head_dim != kv_lora_rank) out += fmt::format(",v{}", v_head_dim);
  return out;
}

MlaShape MlaShape::parse(std::string_view text) {
  const auto plus = text.find('+');
  if (plus == std::string_view::npos)
    throw CaseError("kv_lora_rank", fmt::format("'{}' is not KV_LORA_RANK+QK_ROPE_HEAD_DIM[,vV_HEAD_DIM]", text));
  MlaShape m;
  m.kv_lora_rank = shape_int(text.substr(0, plus), "kv_lora_rank");
  std::string_view rest = text.substr(plus + 1);
  const auto comma = rest.find(',');
  m.qk_rope_head_dim = shape_int(rest.substr(0, comma), "qk_rope_head_dim");
  m.v_head_dim = m.kv_lora_rank;
  if (comma != std::string_view::npos) {
    const std::string_view v = rest.substr(comma + 1);
    if (!v.starts_with("v")) throw CaseError("v_head_dim", fmt::format("'{}' is not vV_HEAD_DIM", v));
    m.v_head_dim = shape_int(v.substr(1), "v_head_dim");
  }
  return m;
}

void MlaShape::validate() const {
  if (kv_lora_rank < 1 || kv_lora_rank > kMaxRow)
    throw CaseError("kv_lora_rank", fmt::format("{} is out of range [1, {}]", kv_lora_rank, kMaxRow));
  if (qk_rope_head_dim < 0 || qk_rope_head_dim > kMaxRow)
    throw CaseError("qk_rope_head_dim", fmt::format("{} is out of range [0, {}]", qk_rope_head_dim, kMaxRow));
  if (row() > kMaxRow)
    throw CaseError("qk_rope_head_dim", fmt::format("kv_lora_rank + qk_rope_head_dim = {} exceeds {}", row(), kMaxRow));
  if (v_head_dim < 1 || v_head_dim > kv_lora_rank)
    throw CaseError("v_head_dim", fmt::format("{} is out of range [1, kv_lora_rank = {}]: V is a prefix of the latent "
                                              "part of the row",
                                              v_head_dim, kv_lora_rank));
}

double yarn_softmax_scale(int qk_head_dim, double factor, double mscale_all_dim) {
  const double m = factor <= 1.0 || mscale_all_dim == 0.0 ? 1.0 : 0.1 * mscale_all_dim * std::log(factor) + 1.0;
  return m * m / std::sqrt(static_cast<double>(qk_head_dim));
}

double MlaModel::softmax_scale() const {
  return yarn_softmax_scale(qk_nope_head_dim + qk_rope_head_dim, yarn_factor, mscale_all_dim);
}

std::span<const MlaModel> mla_models() { return kModels; }

const MlaModel& mla_model(std::string_view name) {
  std::string names;
  for (const MlaModel& m : kModels) {
    if (m.name == name) return m;
    names += (names.empty() ? "" : ", ") + std::string(m.name);
  }
  throw std::invalid_argument(fmt::format("MLA model '{}' is not one of {}", name, names));
}

void check_mla_case(const Case& c) {
  if (!c.is_mla()) {
    if (c.qk_rope_head_dim != 0 || c.v_head_dim != 0)
      throw CaseError(c.qk_rope_head_dim != 0 ? "qk_rope_head_dim" : "v_head_dim",
                      "is set without kv_lora_rank (an MLA shape is the token mla=R+P[,vV])");
    return;
  }
  const MlaShape m{c.kv_lora_rank, c.qk_rope_head_dim, c.v_head_dim};
  m.validate();
  if (c.num_kv_heads != 1)
    throw CaseError("num_kv_heads", fmt::format("{}: an MLA cache has one latent row per token (MQA), num_kv_heads 1",
                                                c.num_kv_heads));
  if (c.head_size != m.row())
    throw CaseError("head_size", fmt::format("{} is not the latent row kv_lora_rank + qk_rope_head_dim = {}", c.head_size,
                                             m.row()));
  if (c.layout != Layout::nhd)
    throw CaseError("layout", fmt::format("{}: the latent cache is [num_blocks, block_size, 1, row], layout nhd",
                                          layout_name(c.layout)));
  if (c.dist != Dist::uniform && c.dist != Dist::normal && c.dist != Dist::peaked)
    throw CaseError("dist", fmt::format("{}: MLA cases take uniform, normal and peaked (V is the key row itself, so "
                                        "V cannot be bounded apart from K)",
                                        dist_name(c.dist)));
  if (c.sliding_window > 0 || c.logits_soft_cap || !c.alibi_slopes.is_default() || !c.sinks.is_default()) {
    const char* field = c.sliding_window > 0 ? "sliding_window"
                        : c.logits_soft_cap  ? "logits_soft_cap"
                        : !c.alibi_slopes.is_default() ? "alibi_slopes"
                                                       : "sinks";
    throw CaseError(field, "MLA cases take several query tokens per sequence and no other attention variant");
  }
  if (!c.v_scale.is_default())
    throw CaseError("v_scale", fmt::format("{}: an MLA cache is one tensor; its scale is k_scale", c.v_scale.text()));
  if (c.k_scale.per_head() || c.k_scale.per_slot())
    throw CaseError("k_scale", fmt::format("{}: the latent cache takes a per-tensor scale", c.k_scale.text()));
}

Case MlaCase::as_case() const {
  Case out = c;
  out.kv_lora_rank = m.kv_lora_rank;
  out.qk_rope_head_dim = m.qk_rope_head_dim;
  out.v_head_dim = m.v_head_dim;
  return out;
}

void MlaCase::validate() const {
  as_case().validate();
  m.validate();
}

std::string MlaCase::id() const { return as_case().id(); }

Case MlaCase::output_case() const {
  Case out = c;
  out.head_size = m.v_head_dim;
  out.kv_lora_rank = out.qk_rope_head_dim = out.v_head_dim = 0;
  return out;
}

MlaCase mla_case_of(const Case& c) {
  if (!c.is_mla()) throw CaseError("kv_lora_rank", fmt::format("'{}' is no MLA case (no mla=R+P token)", c.id()));
  return {c, MlaShape{c.kv_lora_rank, c.qk_rope_head_dim, c.v_head_dim}};
}

MlaCase make_mla_case(const MlaModel& model, int num_heads, std::vector<int> seq_lens, int block_size, DType kv_dtype,
                      std::uint64_t seed) {
  MlaCase mc;
  mc.m = model.shape();
  Case& c = mc.c;
  c.num_heads = num_heads;
  c.num_kv_heads = 1;
  c.head_size = mc.m.row();
  c.block_size = block_size;
  c.seq_lens = std::move(seq_lens);
  c.scale = static_cast<float>(model.softmax_scale());
  c.q_dtype = c.out_dtype = DType::bf16;
  c.kv_dtype = kv_dtype;
  c.layout = Layout::nhd;
  c.seed = seed;
  c.kv_lora_rank = mc.m.kv_lora_rank;
  c.qk_rope_head_dim = mc.m.qk_rope_head_dim;
  c.v_head_dim = mc.m.v_head_dim;
  mc.validate();
  return mc;
}

std::string MlaCell::id() const { return mc.id() + " " + fault.id(); }

RowColumns mla_target_columns(const MlaShape& m, Target t) {
  switch (t) {
    case Target::k: return {m.kv_lora_rank, m.row()};
    case Target::v: return {0, m.kv_lora_rank};
    case Target::kv: return {0, m.row()};
  }
  return {};
}

}  // namespace pacheck
