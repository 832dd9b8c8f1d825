// Step 1 of a cell: a case's pre-paging tensors, its oracle and its clean paged cache, computed once and
// shared by every cell and kernel of the case; and the faulted copy of that cache a cell's call reads.
#pragma once

#include <cstdint>
#include <optional>

#include "core/case.hpp"
#include "core/fault.hpp"
#include "exec/run_options.hpp"
#include "oracle/oracle.hpp"
#include "paging/pager.hpp"

namespace pacheck {

/// Everything the runner computes for one case, shared by all cells and kernels of that case.
struct CaseData {
  Case c;
  PrePaging pre;
  OracleResult ref;                          ///< empty when made by prepare_inputs
  std::optional<double> emulation_rel_linf;  ///< filled for the calibrated policy
  PagedCache cache;                          ///< clean paged cache
};

/// The kernel inputs of `c` only: pre-paging tensors and the clean paged cache (an MLA case's: generate_mla and
/// page_mla, oracle/mla.hpp and paging/mla_pager.hpp), no oracle (for callers
/// that compare a kernel with itself or only capture its inputs, such as export). Throws CaseError for an
/// invalid case.
CaseData prepare_inputs(const Case& c);

/// prepare_inputs plus the oracle (mla_oracle for an MLA case) at opt.oracle_precision and, for the calibrated tolerance policy, the
/// low-precision emulation's rel_linf against it.
CaseData prepare_case(const Case& c, const RunOptions& opt);

/// Host memory (bytes) one case takes while its cells run in this process, by part; computed from the Case
/// alone, before anything is generated. With E = sum(seq_lens) * num_kv_heads * head_size (elements of
/// each of K and V before paging), P = (sum of blocks_for(s) + spare_blocks) * block_size * num_kv_heads *
/// head_size (elements of each pool, unused, tail and padding-target blocks included; the dedicated padding
/// block is one of the spares), kv = dtype_size(kv_dtype), N = num_seqs * num_heads * head_size (output
/// elements) and L = max_seq_len():
///  - pre_paging  = 4 N + 8 E (fp32 Q, K and V) + 2 E for fp8 codes
///  - paged_cache = 2 P kv + block tables (num_seqs * (longest blocks + padding_columns) * 4) + seq_lens
///                  + slot map (P / (num_kv_heads * head_size) bytes) + scales
///  - cell_copies = 2 P kv for the faulted copy of the cache, + 2 P kv for the backend's copies of the
///                  inputs (host memory on the CPU backend), + P kv for the input check's download of one
///                  pool, + 2 N * dtype_size(q_dtype) for the query bytes and their copy
///  - output      = N * (dtype_size(out_dtype) + 4 + 8 + 4) + 8 KiB: the guarded output, RawRun bits and
///                  values, the clean twin's bits
///  - oracle      = N * 8 + num_seqs * num_heads * 8 (result as double) + L * num_heads * s (logits, s = 4
///                  or 8 by precision) + for f64 2 * L * num_kv_heads * head_size * 8 (one sequence's K
///                  and V as double) + for the calibrated policy N * 8 + L * num_heads * 4 (emulation)
/// With Case::high_block_ids the pool is sparse and P counts its resident (live) blocks instead, bounded
/// by (blocks + spare_blocks) x (3 when the pool passes 2^32 elements, else 1) + 12 blocks
/// (PagedCache::resident_blocks: the window, up to 2 wrapped-offset blocks per window block, 12 more); the
/// slot map still spans every block of the pool (Case::pool_plan()'s num_blocks = ceil(2^B / (num_kv_heads x
/// head_size x block_size)) + ceil(blocks / 2) + spare_blocks). Untouched pages of the sparse pool and of its device copy are virtual only and not counted.
/// It counts every allocation pacheck makes for a case and a cell at once (the parts need not coexist, so
/// it errs high), not a kernel's own scratch memory. Values are doubles: no overflow for any valid case.
struct MemoryEstimate {
  double pre_paging = 0, paged_cache = 0, cell_copies = 0, output = 0, oracle = 0;
  double total() const { return pre_paging + paged_cache + cell_copies + output + oracle; }
};
/// The estimate above for case `c` judged with `precision` (the calibrated policy when `calibrated`).
/// Never throws: an invalid case gets the estimate of its fields as they are (seq_lens below 1 count 0).
MemoryEstimate estimate_case_memory(const Case& c, Precision precision = Precision::f64, bool calibrated = false);

/// A copy of a clean paged cache with one fault written into it.
struct FaultedCache {
  PagedCache cache;
  std::int64_t poisoned = 0;  ///< elements inject() wrote (0 for a clean fault or a region the case lacks)
};
/// `clean`, the paged cache of case `c`, with `fault` injected into a copy (faults/inject.hpp; for an MLA case
/// faults/mla_inject.hpp: the target names a part of the latent row).
FaultedCache faulted_cache(const Case& c, const PagedCache& clean, const FaultSpec& fault);

}  // namespace pacheck
