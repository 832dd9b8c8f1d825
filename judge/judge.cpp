#include "judge/judge.hpp"

#include <fmt/format.h>

namespace pacheck {

namespace {
std::string where(const Case& c, std::int64_t flat) {
  const std::int64_t D = c.head_size, H = c.num_heads;
  return fmt::format("(seq {}, head {}, dim {})", flat / (H * D), (flat / D) % H, flat % D);
}
}  // namespace

CellResult judge(const Cell& cell, const Kernel& k, const OracleResult& ref, std::optional<double> emulation_rel_linf,
                 const RawRun& run, const std::vector<std::uint32_t>* clean_bits, const Tolerance& tolerance) {
  const Case& c = cell.c;
  CellResult r;
  r.kernel = k.name();
  r.cell_id = cell.id();
  r.case_id = c.id();
  r.fault = cell.fault.id();
  r.straddle = c.straddles();
  r.seconds = run.ms / 1000.0;
  if (auto pred = k.expected_failures()) r.expected_fail = (*pred)(cell);
  r.metrics = compare(run.out, ref.out, c, c.out_dtype);
  r.limit = tolerance.limit(c.out_dtype, emulation_rel_linf.value_or(0.0));
  r.margin = r.limit > 0 ? r.metrics.rel_linf / r.limit : 0;
  if (clean_bits) {
    for (std::size_t i = 0; i < run.bits.size(); ++i)
      if (run.bits[i] != (*clean_bits)[i]) ++r.variant_elements;
  }
  const Index3& w = r.metrics.worst;
  if (!run.guard_ok) {
    r.verdict = Verdict::oob_write;
    r.detail = run.guard_detail;
  } else if (!run.inputs_ok) {
    r.verdict = Verdict::input_mutated;
    r.detail = run.inputs_detail;
  } else if (run.unwritten > 0) {
    r.verdict = Verdict::unwritten;
    r.detail = fmt::format("{} of {} output elements never written, first at {}", run.unwritten, run.bits.size(),
                           where(c, run.first_unwritten));
  } else if (r.metrics.bad_nonfinite > 0) {
    r.verdict = Verdict::poisoned;
    r.detail = fmt::format("{} NaN, {} Inf of {} elements where the oracle is finite; first at (seq {}, head {}, dim {})",
                           r.metrics.nan_count, r.metrics.inf_count, r.metrics.elements, w.seq, w.head, w.dim);
  } else if (r.variant_elements > 0) {
    r.verdict = Verdict::variant;
    r.detail = fmt::format("{} elements differ bitwise from the clean-cache run", r.variant_elements);
  } else if (!(r.metrics.rel_linf <= r.limit)) {
    r.verdict = Verdict::fail;
    r.detail = fmt::format("rel_linf {:.3e} > limit {:.3e}, worst at (seq {}, head {}, dim {})", r.metrics.rel_linf,
                           r.limit, w.seq, w.head, w.dim);
  } else {
    r.verdict = Verdict::pass;
  }
  return r;
}

}  // namespace pacheck
