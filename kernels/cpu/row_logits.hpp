// The logits a case's query rows see, for the expected failures of negative controls whose fault shows only
// where logits lie far apart (a finite sentinel, no max subtraction, a max carried across sequences or
// calls, probabilities flushed to zero): computed from the pre-paging tensors, never from a kernel.
#pragma once

#include <functional>
#include <vector>

#include "core/case.hpp"
#include "oracle/tensors.hpp"

namespace pacheck::cpu {

/// Calls f(s, row, h, first, logits) for every query row (sequence s, output row `row`) and query head h of
/// `c`: logits[t - first] for the keys first .. p the row sees (causal, p its position; first its window's
/// left edge), each scale x q.k in fp64 from `pre`, then the soft cap and the ALiBi term as the oracle
/// applies them. Sinks are not logits of keys and are left out. Rows in the order the kernels of this folder
/// compute them: sequence, then query row, then head.
void for_each_row_logits(const Case& c, const PrePaging& pre,
                         const std::function<void(int s, int row, int h, int first, const std::vector<double>&)>& f);

/// The largest logit of every query row and head of `c`, [num_query_tokens, num_heads] (for_each_row_logits,
/// generated from c.seed); computed once per case id in a process.
const std::vector<double>& row_max_logits(const Case& c);

/// ln of the smallest positive fp32 (the subnormal 2^-149): exp(x) of fp32 is 0 below about -103.97, so a
/// row whose every logit lies that far below a running max gets l = 0.
inline constexpr double kExpUnderflow = -103.97;

}  // namespace pacheck::cpu
