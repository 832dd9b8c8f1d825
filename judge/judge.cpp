#include "judge/judge.hpp"

#include <fmt/format.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace pacheck {

namespace {
std::string where(const Case& c, std::int64_t flat) {
  const Index3 at = index3(flat, c);
  if (at.token >= 0)
    return fmt::format("(seq {} query token {} at position {}, head {}, dim {})", at.seq, at.token,
                       c.query_pos(at.seq, at.token), at.head, at.dim);
  return fmt::format("(seq {}, head {}, dim {})", at.seq, at.head, at.dim);
}
/// Issue 18: in a batch, which sequences' outputs hold NaN/Inf where the oracle's are finite:
/// "; in sequences 0, 3 (2 of 8)" (the first 8 listed, then "and N more"); empty for one sequence or none.
/// Region `others` leaves sequence 0 reading nothing poisoned, so "sequences 0" there is a leak across
/// sequences. `out` and `ref` are [num_query_tokens, num_heads, head_size]: sequence s owns rows
/// query_start(s) .. query_start(s + 1) - 1.
std::string nonfinite_sequences(const Case& c, const std::vector<double>& out, const std::vector<double>& ref) {
  if (c.num_seqs() < 2) return {};
  const std::size_t per_row = static_cast<std::size_t>(c.num_heads) * c.head_size;
  std::vector<int> seqs;
  for (int s = 0; s < c.num_seqs(); ++s)
    for (std::size_t i = static_cast<std::size_t>(c.query_start(s)) * per_row;
         i < static_cast<std::size_t>(c.query_start(s) + c.query_len(s)) * per_row && i < out.size() && i < ref.size();
         ++i)
      if (!std::isfinite(out[i]) && std::isfinite(ref[i])) {
        seqs.push_back(s);
        break;
      }
  if (seqs.empty()) return {};
  std::string list;
  for (std::size_t i = 0; i < seqs.size() && i < 8; ++i) list += fmt::format("{}{}", i ? ", " : "", seqs[i]);
  if (seqs.size() > 8) list += fmt::format(" and {} more", seqs.size() - 8);
  return fmt::format("; in sequence{} {} ({} of {})", seqs.size() > 1 ? "s" : "", list, seqs.size(), c.num_seqs());
}
}  // namespace

CellResult judge(const Cell& cell, const Kernel& k, const OracleResult& ref, std::optional<double> emulation_rel_linf,
                 const RawRun& run, const std::vector<std::uint32_t>* clean_bits, const Tolerance& tolerance,
                 const Cause* cause) {
  // The output's shape: an MLA case's rows are v_head_dim wide (Case::out_head_size), not the latent row.
  Case c = cell.c;
  c.head_size = c.out_head_size();
  CellResult r;
  r.kernel = k.name();
  r.cell_id = cell.id();
  r.case_id = cell.c.id();
  r.fault = cell.fault.id();
  r.straddle = c.straddles();
  r.seconds = run.ms / 1000.0;
  if (auto pred = k.expected_failures()) r.expected_fail = (*pred)(cell);
  r.metrics = compare(run.out, ref.out, c, c.out_dtype);
  // TF32 concerns dots with an f32 operand: q or the (non-fp8) cache in f32.
  const bool f32_operands = c.q_dtype == DType::f32 || c.kv_dtype == DType::f32;
  const bool tf32 = (k.tf32_products() || tolerance.tf32) && f32_operands;
  r.limit = tolerance.limit(c.out_dtype, emulation_rel_linf.value_or(0.0), tf32, c.max_seq_len());
  r.margin = r.limit > 0 ? r.metrics.rel_linf / r.limit : 0;
  if (clean_bits) {
    for (std::size_t i = 0; i < run.bits.size(); ++i)
      if (run.bits[i] != (*clean_bits)[i]) ++r.variant_elements;
  }
  const Index3& w = r.metrics.worst;
  // Every check that fails names its verdict; the cell gets the one that comes first in verdict_table()
  // (judge/verdict.hpp: the precedence order, defined there once), pass when none fails.
  std::vector<std::pair<Verdict, std::string>> found;
  if (!run.guard_ok) found.emplace_back(Verdict::oob_write, run.guard_detail);
  if (!run.inputs_ok) found.emplace_back(Verdict::input_mutated, run.inputs_detail);
  if (run.unwritten > 0)
    found.emplace_back(Verdict::unwritten, fmt::format("{} of {} output elements never written, first at {}", run.unwritten,
                                                       run.bits.size(), where(c, run.first_unwritten)));
  // On a clean cell of the overflow distribution (V near the dtype's limit), NaN/Inf where the oracle is
  // finite is the kernel's fp32 range giving out, not poison reaching the output: its own verdict.
  const bool overflow = c.dist == Dist::overflow && cell.fault.clean();
  if (r.metrics.bad_nonfinite > 0)
    found.emplace_back(overflow ? Verdict::overflow : Verdict::poisoned, fmt::format("{} NaN, {} Inf of {} elements where the oracle is finite; first at "
                                                      "({}){}",
                                                      r.metrics.nan_count, r.metrics.inf_count, r.metrics.elements,
                                                      describe(w), nonfinite_sequences(c, run.out, ref.out)));
  if (r.variant_elements > 0) {
    if (cause) found.emplace_back(cause->verdict, cause->detail);
    else found.emplace_back(Verdict::variant,
                            fmt::format("{} elements differ bitwise from the clean-cache run", r.variant_elements));
  }
  if (!(r.metrics.rel_linf <= r.limit)) {
    std::string detail = fmt::format("rel_linf {:.3e} > limit {:.3e}, worst at ({})", r.metrics.rel_linf, r.limit,
                                     describe(w));
    // An error of TF32's size on a cell with f32 operands: the likeliest cause is TF32 dots the kernel does
    // not declare. Not below tf32_hint_floor(): an error that small (a calibrated limit's f32 failure at 7e-6)
    // is no TF32 error, and the hint would send its author the wrong way.
    if (f32_operands && !tf32 && r.metrics.rel_linf >= tf32_hint_floor() && r.metrics.rel_linf <= tf32_limit())
      detail += fmt::format("; the error is of the size TF32 dot products give (TF32 limit {:.3e}): if the kernel "
                            "reads f32 operands as TF32 (Triton's default fp32 tl.dot on NVIDIA), declare it "
                            "(PACHECK_KERNEL_TF32, or --tf32)",
                            tf32_limit());
    found.emplace_back(Verdict::fail, std::move(detail));
  }
  // A systematic one-way rounding of the output (bf16/f16; nothing to measure where the output is not finite).
  // Its domain (docs/TOLERANCE.md "Bias"): uniform and normal inputs, where the rows' probabilities differ
  // (peaked and extreme give every row one dominant or tied weight, rounded the same way in every row), and
  // no TF32 operands.
  const bool bias_domain = (c.dist == Dist::uniform || c.dist == Dist::normal) && !tf32;
  if (r.metrics.bad_nonfinite == 0 && bias_domain)
    if (std::string bias = bias_finding(r.metrics); !bias.empty()) found.emplace_back(Verdict::biased, std::move(bias));
  r.verdict = Verdict::pass;
  for (auto& [v, detail] : found)
    if (verdict_rank(v) < verdict_rank(r.verdict)) {
      r.verdict = v;
      r.detail = std::move(detail);
    }
  return r;
}

}  // namespace pacheck
