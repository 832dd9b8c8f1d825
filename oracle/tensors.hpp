// Pre-paging tensors: the Q, K and V a decode case is made of, before any paging.
#pragma once

#include <cstdint>
#include <vector>

#include "core/case.hpp"

namespace pacheck {

/// The inputs of a case before paging, as fp32 values already rounded to their dtypes (so upcasting a
/// stored bf16/f16 element gives exactly the value here).
///  - q: [num_query_tokens, num_heads, head_size], rounded to q_dtype: sequence s owns rows
///    Case::query_start(s) .. + query_len(s) - 1 (one row per sequence for plain decode), row i of it the
///    query token at position Case::query_pos(s, i); the last row of a sequence is the query a one-token
///    case of the same seed has.
///  - k[s], v[s]: [seq_len_s, num_kv_heads, head_size] per sequence s, rounded to kv_dtype. For an fp8
///    kv_dtype they are the dequantised values a kernel reads: for element i of KV head g,
///    k[s][i] = fp8_decode(k_codes[s][i]) * k_scale_g, with k_codes[s][i] = fp8_encode(raw / k_scale_g)
///    (likewise V), so the oracle sees exactly what the cache holds and quantisation is not kernel error.
///  - k_codes[s], v_codes[s]: fp8 only (empty otherwise), same shape: the codes the pager writes.
///  - k_slot_scales[s], v_slot_scales[s]: per-slot scales only (KvScale::slot; empty otherwise):
///    [seq_len_s, num_kv_heads], the scale of token t of KV head g at t * num_kv_heads + g,
///    lo * (hi / lo)^u with u = Philox (0, 1] of (seed, cache, s, t * num_kv_heads + g), in double, rounded
///    to fp32. k[s] and v[s] are dequantised with them (k_scale_g above is then the token's scale). The
///    pager pages them into the [num_blocks, num_kv_heads, block_size] tables kernels read; the oracle
///    never reads those tables.
struct PrePaging {
  std::vector<float> q;
  std::vector<std::vector<float>> k, v;
  std::vector<std::vector<std::uint8_t>> k_codes, v_codes;
  std::vector<std::vector<float>> k_slot_scales, v_slot_scales;
};

/// What generate() draws besides Q: K and V (a decode case), or K alone (an MLA case's latent rows, whose V is a
/// prefix of the same rows: oracle/mla.hpp); with k_only, v, v_codes and v_slot_scales stay empty.
enum class KvDraw { k_and_v, k_only };

/// Generates the pre-paging tensors of `c` from `c.seed` with Philox4x32-10 (Random123, Salmon et al.,
/// SC'11), keyed by the seed and counted by (tensor, sequence, element index). Each value depends only on
/// its coordinates (and its sequence's seq_len: peaked's hot keys, extreme's bound on V), never on thread
/// count, generation order or the other sequences of the batch (nor on `draw`: K is the same either way).
/// Throws CaseError if `c` is invalid.
PrePaging generate(const Case& c, KvDraw draw = KvDraw::k_and_v);

}  // namespace pacheck
