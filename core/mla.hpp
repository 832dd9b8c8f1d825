// Multi-head latent attention (MLA) decode cases: the latent cache of DeepSeek-V2/V3-family models (DeepSeek-V2,
// V3, R1, Kimi K2) with the projections absorbed, as paged MLA decode kernels (FlashMLA, FlashInfer's MLA
// wrapper, vLLM's and SGLang's Triton MLA decode, CUTLASS MLA, AITER MLA) read it.
//
// An MLA case is a Case of one KV head whose head_size is the latent row, plus its MlaShape. Its oracle, pager,
// faults and kernels live beside the multi-head ones (oracle/mla.hpp, paging/mla_pager.hpp,
// faults/mla_inject.hpp, kernels/mla_kernel.hpp).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/case.hpp"
#include "core/fault.hpp"

namespace pacheck {

/// The latent shape of an MLA decode call. Each token has one row of row() = kv_lora_rank + qk_rope_head_dim
/// values in the cache: the compressed KV c_kv (kv_lora_rank values, after its RMSNorm) first, then the decoupled
/// RoPE key k_pe (qk_rope_head_dim values), as vLLM's concat_and_cache_mla and FlashMLA store it. With W_UK
/// absorbed into the query, every query head h has a query row q_h of the same width (q_nope W_UK, then q_pe), and
///   logit(h, t) = scale * (q_h . row_t)                  over all row() values,
///   out[h, :]   = sum_t softmax_t(logit(h, .)) row_t[0 .. v_head_dim)
/// V is the first v_head_dim values of the same rows (with W_UV applied after the kernel, v_head_dim =
/// kv_lora_rank), not a second cache. One latent row is shared by every query head: MQA, one "KV head".
/// Bounds: kv_lora_rank and v_head_dim in [1, 1024] with v_head_dim <= kv_lora_rank; qk_rope_head_dim in
/// [0, 1024]; row() <= 1024 (Case::head_size's bound).
struct MlaShape {
  int kv_lora_rank = 512;
  int qk_rope_head_dim = 64;
  int v_head_dim = 512;

  /// Values per latent row and per query head: kv_lora_rank + qk_rope_head_dim (576 for DeepSeek-V3).
  int row() const { return kv_lora_rank + qk_rope_head_dim; }
  /// The id text: "512+64", or "512+64,v256" when v_head_dim differs from kv_lora_rank.
  std::string text() const;
  /// Parses text(); throws CaseError naming the field ("kv_lora_rank", "qk_rope_head_dim", "v_head_dim").
  static MlaShape parse(std::string_view text);
  /// Checks the bounds above; throws CaseError naming the first bad field.
  void validate() const;
  bool operator==(const MlaShape&) const = default;
};

/// The MLA attention of a published model as its config.json gives it (Hugging Face model repositories).
/// The softmax scale is that of the models' own attention code (modeling_deepseek.py's DeepseekV2Attention /
/// DeepseekV3Attention, and DeepSeek-V3's inference/model.py): qk_head_dim^-0.5 x mscale^2, with qk_head_dim =
/// qk_nope_head_dim + qk_rope_head_dim (192, not the 576 of the absorbed row) and the YaRN mscale =
/// 0.1 x mscale_all_dim x ln(rope_scaling.factor) + 1 (yarn_get_mscale; 1 when factor <= 1 or mscale_all_dim = 0).
struct MlaModel {
  std::string_view name;   ///< as suites and ids spell it: "deepseek-v3", "deepseek-v2-lite", "kimi-k2"
  int num_heads;           ///< num_attention_heads of the whole model (a rank holds num_heads / tp of them)
  int kv_lora_rank;        ///< config kv_lora_rank
  int qk_rope_head_dim;    ///< config qk_rope_head_dim
  int qk_nope_head_dim;    ///< config qk_nope_head_dim (enters the scale only: it is absorbed into the query)
  double yarn_factor;      ///< config rope_scaling.factor
  double mscale_all_dim;   ///< config rope_scaling.mscale_all_dim
  /// The softmax scale above, in double (an MLA case stores it rounded to fp32 in Case::scale).
  double softmax_scale() const;
  MlaShape shape() const { return {kv_lora_rank, qk_rope_head_dim, kv_lora_rank}; }
};

/// The published MLA models pacheck's suites draw shapes from (public config.json values):
///  - deepseek-v3 (DeepSeek-V3 / R1): 128 heads, kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim 128,
///    rope_scaling yarn factor 40, mscale_all_dim 1.0: scale 192^-0.5 x 1.36889^2 = 0.135234;
///  - deepseek-v2-lite: 16 heads, 512 / 64 / 128, factor 40, mscale_all_dim 0.707: scale 0.114721;
///  - kimi-k2 (Kimi-K2-Instruct, model_type kimi_k2 on the DeepSeek-V3 architecture): 64 heads, 512 / 64 / 128,
///    factor 32, mscale_all_dim 1.0: scale 0.130862.
std::span<const MlaModel> mla_models();
/// The model named `name`; throws std::invalid_argument listing the names otherwise.
const MlaModel& mla_model(std::string_view name);

/// YaRN's attention scaling as DeepSeek's code applies it to the softmax scale: qk_head_dim^-0.5 x m^2 with
/// m = 0.1 x mscale_all_dim x ln(factor) + 1 (m = 1 for factor <= 1 or mscale_all_dim = 0).
double yarn_softmax_scale(int qk_head_dim, double factor, double mscale_all_dim);

/// An MLA decode case: `c` carries everything but the latent shape, as one KV head whose head_size is the row:
/// num_kv_heads 1, head_size m.row(), layout nhd ([num_blocks, block_size, 1, row]: vLLM's [num_blocks,
/// block_size, row] and FlashMLA's [num_blocks, 64, 1, row] are this one layout, paging/mla_pager.hpp), the
/// softmax scale explicit (Case::scale; MLA's is not 1 / sqrt(row)). MLA cases take the uniform, normal and peaked
/// distributions (extreme and overflow bound V apart from K, and MLA's V is the key row itself), several query
/// tokens per sequence (speculative decoding) and no other attention variant, and one fp8 scale: the latent
/// cache's k_scale, per tensor (v_scale stays default; V is read from the same cache with the same scale).
/// `c` with its MLA fields (Case::kv_lora_rank, qk_rope_head_dim, v_head_dim) set from `m`: the Case the
/// case-field table, ids, suites and the cell pipeline see.
struct MlaCase {
  Case c;
  MlaShape m;

  /// `c` with its MLA fields set from `m`.
  Case as_case() const;
  /// as_case().validate() (check_mla_case gives the rules above), then m.validate() (a shape of
  /// kv_lora_rank 0 is no MLA case); throws CaseError naming the field.
  void validate() const;
  /// as_case().id(), e.g. "h16/1 d576 bs64 bf16 ctx4090 nhd seed7 scale=0.13523 mla=512+64" (the MLA token last).
  std::string id() const;
  /// The shape of the output as the comparator reads it: `c` with head_size = v_head_dim and no MLA fields
  /// ([num_query_tokens, num_heads, v_head_dim] rows).
  Case output_case() const;
};

/// The MlaCase of an MLA Case (c.is_mla()): `c` itself and the shape of its MLA fields. Throws
/// CaseError("kv_lora_rank", ...) for a multi-head case.
MlaCase mla_case_of(const Case& c);

/// The rules of an MLA case above, for the case-field table's kv_lora_rank row (Case::validate): nothing for a
/// multi-head case (and a qk_rope_head_dim or v_head_dim without kv_lora_rank is refused); else MlaShape's
/// bounds, num_kv_heads 1, head_size = the row, layout nhd, the uniform/normal/peaked distributions, no
/// attention variant but several query tokens, a per-tensor k_scale and no v_scale. Throws CaseError naming
/// the field.
void check_mla_case(const Case& c);

/// An MLA case of `model` with `num_heads` query heads per rank (model.num_heads / tensor-parallel ranks), the
/// model's latent shape and softmax scale, the given lengths, block size and latent-cache dtype (query and
/// output bf16), nhd layout and `seed`; the other fields as Case's defaults. Throws CaseError as validate().
MlaCase make_mla_case(const MlaModel& model, int num_heads, std::vector<int> seq_lens, int block_size,
                      DType kv_dtype = DType::bf16, std::uint64_t seed = 7);

/// One MLA cell: a case and the fault written into its latent cache. For MLA the fault's target names a part
/// of the latent row (mla_target_columns): K the rope part (read by the logits only), V the latent part (read by
/// the logits, and its first v_head_dim values by P.V), K+V the whole row.
struct MlaCell {
  MlaCase mc;
  FaultSpec fault;
  /// "<case id> <fault id>", as Cell::id().
  std::string id() const;
};

/// Values [first, last) of a latent row that a fault of target `t` poisons (see MlaCell).
struct RowColumns {
  int first = 0, last = 0;
};
RowColumns mla_target_columns(const MlaShape& m, Target t);

}  // namespace pacheck
