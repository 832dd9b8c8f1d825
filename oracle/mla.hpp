// The MLA oracle: latent-attention decode from the pre-paging latent rows, never from the cache.
//
// An MLA decode is the decode of one KV head whose key row and value row are the same latent row, with the
// output cut to its first v_head_dim values (core/mla.hpp gives the formula). The oracle computes it that way:
// oracle() (oracle/oracle.hpp) on the MQA case of one KV head of head_size = row, K and V both the latent rows,
// then keeps the first v_head_dim values of each output row. Its products, softmax, fp32/fp64 paths and query
// rows are therefore those of the multi-head oracle, tested against closed forms there and here
// (tests/test_mla.cpp).
#pragma once

#include <vector>

#include "core/mla.hpp"
#include "oracle/oracle.hpp"
#include "oracle/tensors.hpp"

namespace pacheck {

/// The pre-paging tensors of an MLA case, in PrePaging's form:
///  - q: [num_query_tokens, num_heads, row] rounded to q_dtype (row = kv_lora_rank + qk_rope_head_dim);
///  - k[s]: the latent rows of sequence s, [seq_len, 1, row] rounded to kv_dtype (fp8: decode(code) x k_scale,
///    the value the cache holds), c_kv first then k_pe;
///  - k_codes[s]: fp8 codes of the same shape (fp8 only);
///  - v, v_codes, the slot-scale tables: empty. V is the first v_head_dim values of each row of k.
/// They are generate(mc.c, KvDraw::k_only): the Q and K an MQA case of the same fields and seed draws. Throws
/// CaseError if `mc` is invalid.
PrePaging generate_mla(const MlaCase& mc);

/// The oracle of an MLA case from its pre-paging tensors `p` (generate_mla), in fp32 or fp64:
///  - out: [num_query_tokens, num_heads, v_head_dim], out[r, h, :] = sum_{t <= pos} softmax_t(scale q[r, h, :] .
///    row_t) row_t[0 .. v_head_dim), for query row r at position pos of its sequence (causal, Case::query_pos);
///  - lse: [num_query_tokens, num_heads], the natural-log log-sum-exp of the scaled logits.
/// Throws CaseError for an invalid case, std::invalid_argument when `p` does not have the case's shapes.
OracleResult mla_oracle(const MlaCase& mc, const PrePaging& p, Precision precision = Precision::f32);

/// The low-precision emulation (emulate_low_precision, oracle/oracle.hpp) of an MLA case: [num_query_tokens,
/// num_heads, v_head_dim], the calibrated tolerance's reference kernel.
std::vector<double> mla_emulate_low_precision(const MlaCase& mc, const PrePaging& p);

}  // namespace pacheck
