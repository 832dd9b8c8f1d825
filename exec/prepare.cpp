#include "exec/prepare.hpp"

#include <algorithm>
#include <cmath>

#include "faults/inject.hpp"
#include "faults/mla_inject.hpp"
#include "judge/comparator.hpp"
#include "oracle/mla.hpp"
#include "paging/mla_pager.hpp"

namespace pacheck {

CaseData prepare_inputs(const Case& c) {
  CaseData d;
  d.c = c;
  if (c.is_mla()) {  // the latent rows and their one paged cache (core/mla.hpp)
    const MlaCase mc = mla_case_of(c);
    d.pre = generate_mla(mc);
    d.cache = page_mla(mc, d.pre);
    return d;
  }
  d.pre = generate(c);
  d.cache = page(c, d.pre);
  return d;
}

CaseData prepare_case(const Case& c, const RunOptions& opt) {
  CaseData d = prepare_inputs(c);
  const bool calibrated = opt.tolerance.policy == TolerancePolicy::calibrated;
  if (c.is_mla()) {
    const MlaCase mc = mla_case_of(c);
    d.ref = mla_oracle(mc, d.pre, opt.oracle_precision);
    if (calibrated)
      d.emulation_rel_linf = compare(mla_emulate_low_precision(mc, d.pre), d.ref.out, mc.output_case(), c.out_dtype).rel_linf;
    return d;
  }
  d.ref = oracle(c, d.pre, opt.oracle_precision);
  if (calibrated) {
    const auto emu = emulate_low_precision(c, d.pre);
    d.emulation_rel_linf = compare(emu, d.ref.out, c, c.out_dtype).rel_linf;
  }
  return d;
}

MemoryEstimate estimate_case_memory(const Case& c, Precision precision, bool calibrated) {
  const double G = std::max(0, c.num_kv_heads), D = std::max(0, c.head_size), H = std::max(0, c.num_heads);
  const double bs = std::max(1, c.block_size), seqs = c.num_seqs();
  double tokens = 0, blocks = 0, longest_blocks = 0;
  for (int len : c.seq_lens) {
    const double l = std::max(0, len);
    tokens += l;
    const double b = std::ceil(l / bs);
    blocks += b;
    longest_blocks = std::max(longest_blocks, b);
  }
  const double E = tokens * G * D;
  double pool_blocks = blocks + std::max(0, c.spare_blocks);
  // Resident pool blocks: all of a dense pool; of a sparse one (high block ids) its live blocks
  // (PagedCache::resident_blocks): the window, at most 2 wrapped-offset blocks per window block past 2^32,
  // the block below the window, blocks 0 and last, a padding target and 8 sampled ones.
  double resident_blocks = pool_blocks;
  if (c.high_block_ids == 31 || c.high_block_ids == 32) {
    // Case::pool_plan(): num_blocks = ceil(2^B / E) + ceil(blocks / 2) + spare_blocks.
    const double Eb = std::max(1.0, G * D * bs);
    pool_blocks = std::ceil(std::ldexp(1.0, c.high_block_ids) / Eb) + std::ceil(blocks / 2) + std::max(0, c.spare_blocks);
    const bool wraps = pool_blocks * Eb > std::ldexp(1.0, 32);  // some window block's offset passes 2^32
    resident_blocks = resident_blocks * (wraps ? 3 : 1) + 12;
  }
  const double P = resident_blocks * bs * G * D;
  const double kv = static_cast<double>(dtype_size(c.kv_dtype));
  const double rows = c.num_query_tokens() > 0 ? c.num_query_tokens() : seqs;  // query/output rows
  const double N = rows * H * D;
  const double L = c.max_seq_len();
  MemoryEstimate m;
  m.pre_paging = 4 * N + 2 * 4 * E + (is_fp8(c.kv_dtype) ? 2 * E : 0);
  m.paged_cache = 2 * P * kv + seqs * (longest_blocks + std::max(0, c.padding_columns)) * 4 + seqs * 4 +
                  pool_blocks * bs + 2 * G * 4;
  m.cell_copies = 5 * P * kv + 2 * N * static_cast<double>(dtype_size(c.q_dtype));
  m.output = N * (static_cast<double>(dtype_size(c.out_dtype)) + 4 + 8 + 4) + 8192;
  m.oracle = N * 8 + rows * H * 8 + L * H * (precision == Precision::f64 ? 8 : 4) +
             (precision == Precision::f64 ? 2 * L * G * D * 8 : 0) + (calibrated ? N * 8 + L * H * 4 : 0);
  return m;
}

FaultedCache faulted_cache(const Case& c, const PagedCache& clean, const FaultSpec& fault) {
  FaultedCache f{clean, 0};
  f.poisoned = c.is_mla() ? inject_mla(f.cache, mla_case_of(c).m, fault) : inject(f.cache, fault);
  return f;
}

}  // namespace pacheck
