#include "oracle/mla.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace pacheck {
namespace {

void check_mla_shapes(const MlaCase& mc, const PrePaging& p) {
  mc.validate();
  const Case& c = mc.c;
  const std::size_t W = static_cast<std::size_t>(mc.m.row()), H = c.num_heads;
  const std::size_t rows = static_cast<std::size_t>(c.num_query_tokens());
  if (p.q.size() != rows * H * W)
    throw std::invalid_argument(fmt::format("mla oracle: q has {} elements, num_query_tokens*num_heads*row = {}",
                                            p.q.size(), rows * H * W));
  if (p.k.size() != static_cast<std::size_t>(c.num_seqs()))
    throw std::invalid_argument(
        fmt::format("mla oracle: {} latent sequences for num_seqs = {}", p.k.size(), c.num_seqs()));
  for (int s = 0; s < c.num_seqs(); ++s)
    if (p.k[s].size() != static_cast<std::size_t>(c.seq_lens[s]) * W)
      throw std::invalid_argument(fmt::format("mla oracle: sequence {} has {} latent values, seq_len*row = {}", s,
                                              p.k[s].size(), static_cast<std::size_t>(c.seq_lens[s]) * W));
}

/// The MQA decode of sequence `s` alone: one KV head of head_size = row whose K and V are both its latent rows.
/// Paging options go back to their defaults (a padding target or high block ids of the batch may not fit a
/// pool of one sequence; the oracle reads no pool).
struct OneSequence {
  Case c;
  PrePaging p;
};
OneSequence one_sequence(const MlaCase& mc, const PrePaging& p, int s) {
  OneSequence o;
  o.c = mc.c;
  o.c.seq_lens = {mc.c.seq_lens[s]};
  const int ql = mc.c.query_len(s);
  o.c.query_lens = ql > 1 ? std::vector<int>{ql} : std::vector<int>{};
  const Case defaults;
  o.c.spare_blocks = defaults.spare_blocks;
  o.c.padding_columns = defaults.padding_columns;
  o.c.padding_target = defaults.padding_target;
  o.c.high_block_ids = defaults.high_block_ids;
  const std::size_t HW = static_cast<std::size_t>(mc.c.num_heads) * mc.m.row();
  const auto first = p.q.begin() + static_cast<std::ptrdiff_t>(mc.c.query_start(s) * HW);
  o.p.q.assign(first, first + static_cast<std::ptrdiff_t>(ql * HW));
  o.p.k = {p.k[s]};
  o.p.v = {p.k[s]};  // V is the same rows; the output keeps their first v_head_dim values
  return o;
}

/// Copies rows of `full` ([n, num_heads, row]) into `out` ([.., num_heads, v_head_dim]) from output row `r0` on,
/// keeping the first v_head_dim values of each head.
void keep_v_prefix(const MlaCase& mc, const std::vector<double>& full, int r0, std::vector<double>& out) {
  const std::size_t W = mc.m.row(), V = mc.m.v_head_dim, H = mc.c.num_heads;
  const std::size_t heads = full.size() / W;
  for (std::size_t i = 0; i < heads; ++i)
    std::copy_n(full.begin() + static_cast<std::ptrdiff_t>(i * W), V,
                out.begin() + static_cast<std::ptrdiff_t>((r0 * H + i) * V));
}

}  // namespace

PrePaging generate_mla(const MlaCase& mc) {
  mc.validate();
  return generate(mc.c, KvDraw::k_only);
}

OracleResult mla_oracle(const MlaCase& mc, const PrePaging& p, Precision precision) {
  check_mla_shapes(mc, p);
  const Case& c = mc.c;
  OracleResult r;
  r.precision = precision;
  r.out.assign(static_cast<std::size_t>(c.num_query_tokens()) * c.num_heads * mc.m.v_head_dim, 0.0);
  r.lse.assign(static_cast<std::size_t>(c.num_query_tokens()) * c.num_heads, 0.0);
  for (int s = 0; s < c.num_seqs(); ++s) {
    const OneSequence one = one_sequence(mc, p, s);
    const OracleResult rs = oracle(one.c, one.p, precision);
    keep_v_prefix(mc, rs.out, c.query_start(s), r.out);
    std::copy(rs.lse.begin(), rs.lse.end(), r.lse.begin() + static_cast<std::ptrdiff_t>(c.query_start(s) * c.num_heads));
  }
  return r;
}

std::vector<double> mla_emulate_low_precision(const MlaCase& mc, const PrePaging& p) {
  check_mla_shapes(mc, p);
  const Case& c = mc.c;
  std::vector<double> out(static_cast<std::size_t>(c.num_query_tokens()) * c.num_heads * mc.m.v_head_dim, 0.0);
  for (int s = 0; s < c.num_seqs(); ++s) {
    const OneSequence one = one_sequence(mc, p, s);
    keep_v_prefix(mc, emulate_low_precision(one.c, one.p), c.query_start(s), out);
  }
  return out;
}

}  // namespace pacheck
