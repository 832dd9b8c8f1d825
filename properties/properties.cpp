#include "properties/properties.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "core/table.hpp"
#include "exec/prepare.hpp"
#include "faults/inject.hpp"
#include "judge/comparator.hpp"
#include "oracle/mla.hpp"
#include "paging/mla_pager.hpp"
#include "report/text.hpp"

namespace pacheck::prop {
namespace {

namespace gen = rc::gen;

/// The counterexample of the most recent failing case on this thread. RapidCheck accepts every failing
/// shrink as the new minimum, so after a run the last failure recorded is the minimal one.
thread_local std::optional<Counterexample> t_last_failure;

void classify(const Case& c) {
  RC_TAG(c.straddles() ? "straddling" : "aligned", c.gqa_ratio() > 1 ? "GQA>1" : "GQA=1",
         multi_partition(c) ? "multi-partition" : "one partition", c.scale ? "scale set" : "default scale",
         // Issue 18's axes: large batches, long contexts, large pages.
         c.num_seqs() >= 5 ? "batch>=5" : "batch<5", c.max_seq_len() > 16384 ? "ctx>16K" : "ctx<=16K",
         c.block_size >= 128 ? "block>=128" : "block<128",
         c.high_block_ids ? "block ids>2^31" : "dense pool",
         // Issue 19: several query tokens per sequence (speculative decode).
         c.max_query_len() > 1 ? "qlen>1" : "qlen=1",
         // Seed 002: AITER's shuffled-V layout (gen_case: 1 in 8 of the cases with block_size % 16 == 0).
         c.layout == Layout::aiter ? "aiter layout" : "other layout",
         // Issue 18 item 5: fp8 caches (gen_case: 1 in 8 from size 10), per-slot scale tables among them.
         is_fp8(c.kv_dtype) ? "fp8 cache" : "no fp8", c.k_scale.per_slot() ? "per-slot scales" : "no per-slot");
  // Issue 45: real attention variants (gen_variant) and logits far from zero (the offset distributions).
  if (c.sliding_window > 0) RC_TAG("window");
  if (c.logits_soft_cap) RC_TAG("soft cap");
  if (!c.alibi_slopes.is_default()) RC_TAG("alibi");
  if (!c.sinks.is_default()) RC_TAG("sinks");
  if (offset_dist(c.dist)) RC_TAG("logits far from zero");
  if (c.is_mla()) RC_TAG("mla");  // an MLA kernel's cases (gen_mla_case), every one of them
}

std::string repro_line(const KernelUnderTest& t, const Cell& cell) {
  std::string line = fmt::format("{} repro '{}' --kernel {}", command_name(), cell.id(), t.kernel->name());
  if (t.kernel->device() != PACHECK_DEVICE_CPU) line += fmt::format(" --device {}", t.device);
  line += plugin_flag(t.kernel->name());  // a plugin kernel's line loads its library again
  // The verdict options the case was judged under (calibrated tolerance, f64 oracle, --tf32), if not the defaults.
  const std::string flags = judge_flags(t.options.tolerance, t.options.oracle_precision);
  return flags.empty() ? line : line + " " + flags;
}

/// When this thread's current run_property's budget share ends (none: a --cases run), and whether a case
/// has failed (from then on RapidCheck shrinks, which the deadline does not cut short).
thread_local std::optional<std::chrono::steady_clock::time_point> t_deadline;
thread_local bool t_failed = false;

/// Fails the current case: records the counterexample and throws RapidCheck's failure result (thrown
/// directly rather than through RC_FAIL so the description is our text, without RC_FAIL's wrapper).
[[noreturn]] void fail(Property p, const KernelUnderTest& t, const Cell& cell, const std::string& what,
                       const std::string& details = {}) {
  Counterexample cx;
  cx.cell = cell;
  cx.what = what;
  cx.repro = repro_line(t, cell);
  cx.message = fmt::format("{} does not hold for {}: {}\n  case   {}\n  cell   {}\n{}  repro  {}", property_name(p),
                           t.kernel->name(), what, cell.c.id(), cell.id(), details, cx.repro);
  t_last_failure = cx;
  t_failed = true;
  throw rc::detail::CaseResult(rc::detail::CaseResult::Type::Failure, cx.message);
}

/// Generated cases discarded by admit() in this thread's current run_property (PropertyRun::over_memory).
thread_local int t_over_memory = 0;

/// Cases of this thread's current run_property that held without checking anything (vacuous()), and those
/// skipped because its --budget share was spent (budget_spent()); PropertyRun::exercised and ::cases
/// leave both out.
thread_local int t_vacuous = 0;
thread_local int t_skipped = 0;
/// The tag of a case skipped past the deadline: counted in t_skipped and dropped from the distribution.
constexpr const char* kBudgetSpentTag = "budget spent";

/// Ends the current case as held without checking anything (a kernel that implements no variant, a GQA
/// ratio of 1): tagged `why`, and not counted as exercised (PropertyRun::exercised).
void vacuous(const char* why) {
  RC_TAG(why);
  ++t_vacuous;
}

/// True (and the case tagged kBudgetSpentTag and counted as skipped) when the running property's --budget
/// share is spent and no case has failed yet: the rest of its RapidCheck run draws nothing.
bool budget_spent() {
  if (!t_deadline || t_failed || std::chrono::steady_clock::now() < *t_deadline) return false;
  RC_TAG(kBudgetSpentTag);
  ++t_skipped;
  return true;
}

/// Discards the RapidCheck case (RC_DISCARD, not a failure) and counts it when `c`'s host memory estimate
/// exceeds t.max_case_bytes (0: no budget).
void admit(const KernelUnderTest& t, const Case& c) {
  if (t.max_case_bytes <= 0) return;
  const double need = estimate_case_memory(c, t.options.oracle_precision,
                                           t.options.tolerance.policy == TolerancePolicy::calibrated)
                          .total();
  if (need <= t.max_case_bytes) return;
  ++t_over_memory;
  RC_DISCARD("the case's memory estimate exceeds --max-memory");
}

/// Cases of this thread's current run_property discarded because the device ran out of memory
/// (PropertyRun::device_out_of_memory).
thread_local int t_device_oom = 0;

/// True for a non-fatal kernel error that says the device ran out of memory: CUDA's and HIP's "out of
/// memory" (cudaErrorMemoryAllocation, hipErrorOutOfMemory, through the backends' error strings) and
/// PyTorch's "CUDA out of memory". Other processes on the same GPU cause it as often as the case does (the
/// trust run's parallel fuzz jobs did on an H100), so it says nothing of the kernel's arithmetic.
bool device_out_of_memory(const KernelError& e) {
  if (e.fatal) return false;
  std::string what = e.what();
  std::transform(what.begin(), what.end(), what.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return what.find("out of memory") != std::string::npos;
}

/// Runs `body`, turning kernel and harness exceptions into a counterexample for `cell` (RapidCheck's own
/// results and generation failures pass through). A device out-of-memory error discards the case instead,
/// counted: a kernel that runs out on most cases (a leak) still fails, as RapidCheck gives up once discards
/// outnumber the cases that held by its max_discard_ratio.
template <typename F>
void guarded(Property p, const KernelUnderTest& t, const Cell& cell, F&& body) {
  admit(t, cell.c);  // before anything of the case is generated
  try {
    body();
  } catch (const rc::detail::CaseResult&) {
    throw;
  } catch (const rc::GenerationFailure&) {
    throw;
  } catch (const KernelError& e) {
    if (device_out_of_memory(e)) {
      ++t_device_oom;
      RC_DISCARD("the device ran out of memory");
    }
    fail(p, t, cell, fmt::format("kernel error: {}", e.what()));
  } catch (const std::exception& e) {
    fail(p, t, cell, fmt::format("exception: {}", e.what()));
  }
}

/// The pre-paging tensors of `c`: its latent rows for an MLA case (generate_mla: q and k, no v), else Q, K, V.
PrePaging inputs(const Case& c) { return c.is_mla() ? generate_mla(mla_case_of(c)) : generate(c); }

/// Case data without the oracle, for properties that compare the kernel with itself: `pre` paged as `c`
/// (an MLA case's latent rows into its one latent cache).
CaseData paged(const Case& c, PrePaging pre) {
  CaseData d;
  d.c = c;
  d.pre = std::move(pre);
  d.cache = c.is_mla() ? page_mla(mla_case_of(c), d.pre) : page(d.c, d.pre);
  return d;
}

/// The shape of `c`'s output rows ([num_query_tokens, num_heads, head_size] of the returned case): `c` itself,
/// or for an MLA case its output_case() (head_size = v_head_dim).
Case out_shape(const Case& c) { return c.is_mla() ? mla_case_of(c).output_case() : c; }

std::string where(const Case& c, std::int64_t flat) { return "(" + describe(index3(flat, out_shape(c))) + ")"; }

/// One kernel run with the runner's integrity checks; a guard, input or unwritten problem fails the case.
/// With `pool`, on its buffers (those of the previous call, when the sizes match).
RawRun run_checked(Property p, const KernelUnderTest& t, const Cell& shown, const CaseData& d, std::string_view which,
                   BufferPool* pool = nullptr) {
  RawRun r = run_kernel_once(*t.kernel, *t.backend, d, d.cache, pool);
  if (!r.guard_ok) fail(p, t, shown, fmt::format("oob_write on the {} run: {}", which, r.guard_detail));
  if (!r.inputs_ok) fail(p, t, shown, fmt::format("input_mutated on the {} run: {}", which, r.inputs_detail));
  if (r.unwritten > 0)
    fail(p, t, shown, fmt::format("unwritten on the {} run: {} elements, first at {}", which, r.unwritten,
                                  where(d.c, r.first_unwritten)));
  return r;
}

/// Elements [first, first + n) of `a` and `b` that differ bitwise: count and the first index.
struct BitDiff {
  std::int64_t count = 0, first = -1;
};
BitDiff diff_bits(const std::vector<std::uint32_t>& a, std::size_t a0, const std::vector<std::uint32_t>& b,
                  std::size_t b0, std::size_t n) {
  BitDiff d;
  for (std::size_t i = 0; i < n; ++i)
    if (a[a0 + i] != b[b0 + i]) {
      if (d.first < 0) d.first = static_cast<std::int64_t>(i);
      ++d.count;
    }
  return d;
}

double min_normal(DType t) { return t == DType::f16 ? 0x1p-14 : 0x1p-126; }

// ---- 1. Agreement ---------------------------------------------------------------------------------

/// Runs the clean `cell` as `pacheck run` does and fails `self` with the cell's verdict when it is a failure.
void judge_clean_cell(Property self, const KernelUnderTest& t, const Cell& cell) {
  guarded(self, t, cell, [&] {
    const CaseData data = prepare_case(cell.c, t.options);
    CleanTwin twin;
    const Execution e = execute_cell(data, *t.kernel, cell, *t.backend, twin, t.options.tolerance);
    e.rethrow();  // guarded() words kernel and harness errors
    const CellResult& r = e.result;
    if (is_failure(r.verdict))
      fail(self, t, cell, fmt::format("{}: {}", verdict_name(r.verdict), r.detail),
           fmt::format("  rel_linf {:.3e}  limit {:.3e}  max_abs {:.3e}  NaN {}  Inf {}\n", r.metrics.rel_linf, r.limit,
                       r.metrics.max_abs, r.metrics.nan_count, r.metrics.inf_count));
  });
}

void agreement(Property self, const KernelUnderTest& t) {
  const Cell cell = *gen_cell(t.space, false);
  classify(cell.c);
  judge_clean_cell(self, t, cell);
}

// ---- 2. Tail-poison invariance --------------------------------------------------------------------

void tail_poison(Property self, const KernelUnderTest& t) {
  Cell cell = *gen_cell(t.space, true);
  classify(cell.c);
  guarded(self, t, cell, [&] {
    const CaseData data = prepare_case(cell.c, t.options);
    FaultedCache faulted = faulted_cache(data.c, data.cache, cell.fault);
    if (faulted.poisoned == 0) {
      // The case has no slot of that region (an aligned length and `tail`, say): poison every unwritten
      // slot instead, which always exists (spare_blocks >= 1), so no case is vacuous.
      cell.fault.region = Region::all;
      faulted = faulted_cache(data.c, data.cache, cell.fault);
    }
    CleanTwin twin;
    ExecuteOptions how;
    how.faulted = &faulted;
    const Execution bad = execute_cell(data, *t.kernel, cell, *t.backend, twin, t.options.tolerance, how);
    bad.rethrow();
    if (is_failure(bad.result.verdict))
      fail(self, t, cell, fmt::format("{}: {}", verdict_name(bad.result.verdict), bad.result.detail),
           fmt::format("  fault  {} ({} poisoned elements); {} output elements differ bitwise from the clean run\n",
                       cell.fault.id(), bad.poisoned, bad.result.variant_elements));
  });
}

// ---- 3. Paging invariance -------------------------------------------------------------------------

void paging(Property self, const KernelUnderTest& t) {
  const Cell cell = *gen_cell(t.space, false);
  classify(cell.c);
  const Case& c = cell.c;
  // Another pool: the pager's permutation is drawn over the pool size, so other spare_blocks give
  // another permutation of physical blocks; padding columns and target vary independently. The
  // pre-paging values depend only on the seed and coordinates, so they are unchanged.
  const auto [spare, padcols, padto] =
      *gen::tuple(gen_uniform(1, 2 * c.spare_blocks + 9), gen_uniform(0, 5), gen_uniform(-1, 1 << 16));
  Case alt = c;
  alt.spare_blocks = spare;
  alt.padding_columns = padcols;
  if (alt.spare_blocks == c.spare_blocks && alt.padding_columns == c.padding_columns) ++alt.spare_blocks;
  std::int64_t pool = alt.spare_blocks;
  for (int s = 0; s < alt.num_seqs(); ++s) pool += alt.blocks_for(s);
  alt.padding_target = padto < 0 ? -1 : static_cast<int>(padto % pool);
  if (!t.kernel->supports(alt).ok) alt.padding_columns = c.padding_columns;
  RC_PRE(t.kernel->supports(alt).ok);
  admit(t, alt);
  guarded(self, t, cell, [&] {
    PrePaging pre = inputs(c);
    const CaseData a = paged(c, pre), b = paged(alt, std::move(pre));
    const RawRun ra = run_checked(self, t, cell, a, "first paging");
    const RawRun rb = run_checked(self, t, cell, b, "second paging");
    const BitDiff d = diff_bits(ra.bits, 0, rb.bits, 0, ra.bits.size());
    if (d.count > 0)
      fail(self, t, cell,
           fmt::format("{} of {} output elements differ bitwise under another paging; first at {}: {} vs {}", d.count,
                       ra.bits.size(), where(c, d.first), ra.out[d.first], rb.out[d.first]),
           fmt::format("  paged  {}\n", alt.id()));
  });
}

// ---- 4. Determinism -------------------------------------------------------------------------------

/// The contrasting case determinism runs between two runs of `c`: the same shape (buffer sizes), another
/// seed and, where the kernel takes it, logits far above zero (dist=far_above; a 16/32-bit cache), so state
/// a kernel keeps across calls (a running max, an output cached by address) meets inputs unlike its last.
Case contrast_case(const Case& c, const KernelUnderTest& t) {
  Case other = c;
  other.seed = c.seed + 1;
  other.dist = Dist::far_above;
  try {
    other.validate();
    if (t.kernel->supports(other).ok) return other;
  } catch (const CaseError&) {
  }
  other.dist = c.dist;
  return other;
}

void determinism(Property self, const KernelUnderTest& t) {
  const Cell cell = *gen_cell(t.space, false);
  classify(cell.c);
  guarded(self, t, cell, [&] {
    const CaseData a = paged(cell.c, inputs(cell.c));
    // Another case of the same shape in between, on the same buffers (an inference engine reuses its buffers
    // from step to step), exposes state carried from one call to the next: the third run of `a` must equal
    // the first, and the other case its own run on buffers of its own.
    const Case other = contrast_case(cell.c, t);
    const CaseData b = paged(other, inputs(other));
    BufferPool pool(*t.backend);
    const RawRun r1 = run_checked(self, t, cell, a, "first", &pool);
    const RawRun r2 = run_checked(self, t, cell, a, "second", &pool);
    const RawRun rb = run_checked(self, t, cell, b, "interleaved", &pool);
    const RawRun r3 = run_checked(self, t, cell, a, "third", &pool);
    const RawRun rb_own = run_checked(self, t, cell, b, "other case's own", nullptr);
    for (const auto& [x, y, when] : {std::tuple{&r1, &r2, "a second run right after the first, on the same buffers,"},
                                     std::tuple{&r1, &r3, "a run after another case on the same buffers"},
                                     std::tuple{&rb_own, &rb, "the other case, run on the first case's buffers,"}}) {
      const BitDiff d = diff_bits(x->bits, 0, y->bits, 0, x->bits.size());
      if (d.count > 0)
        fail(self, t, cell,
             fmt::format("{} differs from {} in {} of {} elements; first at {}: {} vs {}", when,
                         x == &r1 ? "the first run" : "its run on buffers of its own", d.count, x->bits.size(),
                         where(x == &r1 ? cell.c : other, d.first), x->out[d.first], y->out[d.first]),
             fmt::format("  other  {}\n", other.id()));
    }
  });
}

// ---- 5. Batch invariance --------------------------------------------------------------------------

/// Sequence `s` of `pre` (a case of `c`'s shapes) as the pre-paging tensors of a one-sequence case. An MLA
/// case's tensors have no v (V is the latent rows' prefix, in k).
PrePaging slice(const Case& c, const PrePaging& pre, int s) {
  const std::size_t row = static_cast<std::size_t>(c.num_heads) * c.head_size;
  const std::size_t first = static_cast<std::size_t>(c.query_start(s)) * row, rows = static_cast<std::size_t>(c.query_len(s));
  PrePaging one;
  one.q.assign(pre.q.begin() + static_cast<std::ptrdiff_t>(first), pre.q.begin() + static_cast<std::ptrdiff_t>(first + rows * row));
  one.k = {pre.k[s]};
  // V, and for fp8 caches the codes the pager writes and per-slot scales, follow their sequence.
  auto take = [s](const auto& from, auto& to) {
    if (!from.empty()) to = {from[static_cast<std::size_t>(s)]};
  };
  take(pre.v, one.v);
  take(pre.k_codes, one.k_codes);
  take(pre.v_codes, one.v_codes);
  take(pre.k_slot_scales, one.k_slot_scales);
  take(pre.v_slot_scales, one.v_slot_scales);
  return one;
}

void batch(Property self, const KernelUnderTest& t) {
  const Cell drawn = *gen_cell(t.space, false);
  Case b = drawn.c;
  if (b.num_seqs() < 2) {
    // A lone sequence gets companions of the same block size, so there is a batch to compare against.
    const int bs = b.block_size;
    const auto extra = *gen::withSize([bs](int size) {
      return gen::mapcat(gen_uniform(1, 4), [bs, size](int n) {
        return gen::container<std::vector<int>>(static_cast<std::size_t>(n), gen_seq_len(bs, size / 2));
      });
    });
    // Several query tokens: the companions keep the lone sequence's query_len where their length allows.
    if (b.max_query_len() > 1) {
      const int q = b.query_len(0);
      b.query_lens = {q};
      for (int len : extra) b.query_lens.push_back(std::min(q, len));
    }
    b.seq_lens.insert(b.seq_lens.end(), extra.begin(), extra.end());
  }
  RC_PRE(t.kernel->supports(b).ok);
  const Cell cell{b, {}};
  classify(b);
  guarded(self, t, cell, [&] {
    const PrePaging pre = inputs(b);
    const RawRun rb = run_checked(self, t, cell, paged(b, pre), "batch");
    // Output rows: [num_heads, out_head_size] per query token (an MLA case's are v_head_dim wide).
    const int D = b.out_head_size();
    const std::size_t row = static_cast<std::size_t>(b.num_heads) * D;
    const bool bitwise = t.kernel->batch_invariant();
    // Compares sequence `s` of the batch run with sequence `s2` of run `r` of case `c2`: its query_len(s)
    // output rows (one for plain decode), from query_start(s) in the batch and query_start(s2) in `r`.
    auto check = [&](const RawRun& r, const Case& c2, int s2, int s, const std::string& how) {
      const std::size_t n = static_cast<std::size_t>(b.query_len(s)) * row;
      const std::size_t at = static_cast<std::size_t>(b.query_start(s)) * row, at2 = static_cast<std::size_t>(c2.query_start(s2)) * row;
      if (bitwise) {
        const BitDiff d = diff_bits(rb.bits, at, r.bits, at2, n);
        if (d.count > 0)
          fail(self, t, cell,
               fmt::format("sequence {} (seq_len {}) {} differs bitwise from the batch in {} of {} elements; first at "
                           "query token {}, head {}, dim {}: {} vs {} in the batch",
                           s, b.seq_lens[s], how, d.count, n, d.first / row, (d.first % row) / D,
                           d.first % D, r.out[at2 + d.first], rb.out[at + d.first]),
               fmt::format("  {:<6} {}\n", how == "alone" ? "alone" : "other", c2.id()));
        return;
      }
      // Not declared batch invariant: within tolerance, and finite exactly where the batch is.
      std::vector<double> mine(r.out.begin() + at2, r.out.begin() + at2 + n);
      std::vector<double> ref(rb.out.begin() + at, rb.out.begin() + at + n);
      Case one = b;
      one.seq_lens = {b.seq_lens[s]};
      one.query_lens = b.query_len(s) > 1 ? std::vector<int>{b.query_len(s)} : std::vector<int>{};
      const Metrics m = compare(mine, ref, out_shape(one), b.out_dtype);
      const double limit = fixed_limit(b.out_dtype, one.max_seq_len());
      if (m.bad_nonfinite > 0 || !(m.rel_linf <= limit))
        fail(self, t, cell,
             fmt::format("sequence {} (seq_len {}) {} differs from the batch beyond tolerance: rel_linf {:.3e} > {:.3e}, "
                         "{} non-finite",
                         s, b.seq_lens[s], how, m.rel_linf, limit, m.bad_nonfinite),
             fmt::format("  other  {}\n", c2.id()));
    };
    // Each sequence alone is a call of its own: in a large batch (issue 18's 5 to 256 sequences) at most
    // kAloneChecked of them, spread evenly from the first to the last (every sequence of a batch up to that
    // size); the reversed batch below still checks every sequence against the batch.
    constexpr int kAloneChecked = 8;
    const int n = b.num_seqs();
    std::vector<int> alone_seqs;
    for (int i = 0; i < std::min(n, kAloneChecked); ++i)
      alone_seqs.push_back(n <= kAloneChecked ? i : static_cast<int>(static_cast<long long>(i) * (n - 1) / (kAloneChecked - 1)));
    for (int s : alone_seqs) {
      Case alone = b;
      alone.seq_lens = {b.seq_lens[s]};
      alone.query_lens = b.query_len(s) > 1 ? std::vector<int>{b.query_len(s)} : std::vector<int>{};
      if (alone.padding_target >= alone.spare_blocks + alone.blocks_for(0)) alone.padding_target = -1;
      const RawRun ra = run_checked(self, t, cell, paged(alone, slice(b, pre, s)), "alone");
      check(ra, alone, 0, s, "alone");
    }
    // The same sequences in reverse order: each output must follow its sequence.
    Case rev = b;
    std::reverse(rev.seq_lens.begin(), rev.seq_lens.end());
    std::reverse(rev.query_lens.begin(), rev.query_lens.end());  // one per sequence, or one for all (or none)
    PrePaging pre_rev;
    for (int s = b.num_seqs() - 1; s >= 0; --s) {
      const PrePaging one = slice(b, pre, s);
      pre_rev.q.insert(pre_rev.q.end(), one.q.begin(), one.q.end());
      pre_rev.k.push_back(one.k[0]);
      if (!one.v.empty()) pre_rev.v.push_back(one.v[0]);  // an MLA case has none
      for (auto [from, to] : {std::pair{&one.k_codes, &pre_rev.k_codes}, std::pair{&one.v_codes, &pre_rev.v_codes}})
        if (!from->empty()) to->push_back((*from)[0]);
      for (auto [from, to] : {std::pair{&one.k_slot_scales, &pre_rev.k_slot_scales},
                              std::pair{&one.v_slot_scales, &pre_rev.v_slot_scales}})
        if (!from->empty()) to->push_back((*from)[0]);
    }
    const RawRun rr = run_checked(self, t, cell, paged(rev, std::move(pre_rev)), "reversed batch");
    for (int s = 0; s < b.num_seqs(); ++s) check(rr, rev, b.num_seqs() - 1 - s, s, "in the reversed batch");
  });
}

// ---- 6. GQA expansion -----------------------------------------------------------------------------

void gqa_expansion(Property self, const KernelUnderTest& t) {
  // Ratio 1 is its own expansion; draw from the GQA ratios only (unless the kernel runs MHA alone).
  CaseSpace sp = t.space;
  sp.fp8_dtypes.clear();  // the MHA copy would need each KV head's fp8 codes and scales copied too (Domains)
  std::vector<int> gqa;
  for (int r : sp.gqa_ratios)
    if (r > 1) gqa.push_back(r);
  if (!gqa.empty()) sp.gqa_ratios = gqa;
  const Cell cell = *gen_cell(sp, false);
  classify(cell.c);
  const Case& c = cell.c;
  if (c.gqa_ratio() == 1) return vacuous("GQA ratio 1: its own MHA expansion");
  Case mha = c;
  mha.num_kv_heads = c.num_heads;
  RC_PRE(t.kernel->supports(mha).ok);
  admit(t, mha);
  guarded(self, t, cell, [&] {
    const PrePaging pre = generate(c);
    // Query head h reads KV head h / ratio; the MHA case gives each query head its own copy of it.
    const int ratio = c.gqa_ratio(), G = c.num_kv_heads, H = c.num_heads, D = c.head_size;
    PrePaging wide;
    wide.q = pre.q;
    for (int s = 0; s < c.num_seqs(); ++s) {
      const int len = c.seq_lens[s];
      std::vector<float> k(static_cast<std::size_t>(len) * H * D), v(k.size());
      for (int tok = 0; tok < len; ++tok)
        for (int h = 0; h < H; ++h)
          for (int d = 0; d < D; ++d) {
            const std::size_t src = (static_cast<std::size_t>(tok) * G + h / ratio) * D + d;
            const std::size_t dst = (static_cast<std::size_t>(tok) * H + h) * D + d;
            k[dst] = pre.k[s][src];
            v[dst] = pre.v[s][src];
          }
      wide.k.push_back(std::move(k));
      wide.v.push_back(std::move(v));
    }
    const RawRun rg = run_checked(self, t, cell, paged(c, pre), "GQA");
    const RawRun rm = run_checked(self, t, cell, paged(mha, std::move(wide)), "MHA");
    std::int64_t finiteness = 0, first = -1;
    for (std::size_t i = 0; i < rg.out.size(); ++i)
      if (std::isfinite(rg.out[i]) != std::isfinite(rm.out[i]) && finiteness++ == 0) first = static_cast<std::int64_t>(i);
    const Metrics m = compare(rg.out, rm.out, c, c.out_dtype);
    const double limit = fixed_limit(c.out_dtype, c.max_seq_len());
    if (finiteness > 0 || !(m.rel_linf <= limit)) {
      const std::int64_t at = first >= 0 ? first : m.worst.flat(c);
      fail(self, t, cell,
           fmt::format("GQA output differs from its MHA expansion: rel_linf {:.3e} (limit {:.3e}), {} elements finite in "
                       "one only; worst at {}: {} (GQA) vs {} (MHA)",
                       m.rel_linf, limit, finiteness, where(c, at), rg.out[at], rm.out[at]),
           fmt::format("  mha    {}\n", mha.id()));
    }
  });
}

// ---- 7. Exact scaling -----------------------------------------------------------------------------

/// Marks out_small[d] for every d of one query row whose split-KV partial falls below `partial_floor`: the
/// weights `p` (keys first..len - 1; V rows of KV head g of `v`, [tokens, G, D]) summed per partition of 2^4
/// to 2^10 tokens aligned at key 0 and at `first`, each partial sum_P p_t V_t[d] / sum_P p_t. A design that
/// stores its partials in the output dtype (vLLM v2's tmp_out, cpu.split_kv_tmp_out) rounds such a partial in
/// that dtype's subnormal range, where rounding does not commute with scaling by 2^e.
void small_partials(const std::vector<double>& p, const std::vector<float>& v, int G, int g, int D, int first,
                    int len, double partial_floor, char* out_small) {
  std::vector<double> num(static_cast<std::size_t>(D));
  for (int size = 16; size <= 1024; size *= 2)
    for (int origin : {0, first}) {
      for (int t0 = origin; t0 < len; t0 += size) {
        const int lo = std::max(t0, first), hi = std::min(len, t0 + size);
        double den = 0;
        std::fill(num.begin(), num.end(), 0.0);
        for (int t = lo; t < hi; ++t) {
          if (p[t] == 0) continue;
          den += p[t];
          const float* vt = &v[(static_cast<std::size_t>(t) * G + g) * D];
          for (int d = 0; d < D; ++d) num[d] += p[t] * vt[d];
        }
        if (den == 0) continue;
        for (int d = 0; d < D; ++d) {
          const double o = std::abs(num[d] / den);
          if (o != 0 && o < partial_floor) out_small[d] = 1;
        }
      }
      if (first == 0) break;  // one alignment
    }
}

/// Per output element (query row, head, dim) of case `c` (as RawRun::out: one row per query token, the
/// rows of sequence s from query_start(s)): whether some nonzero product p_t x V_t of its softmax weights and
/// values has magnitude below `floor`. Query token i of sequence s at position p sees keys first..p (causal;
/// first = Case::window_start_at(p) with a sliding window, else 0), whose logits take the soft cap and ALiBi
/// term as the oracle applies them, and a sink logit joins the denominator. p_t is the exact normalised
/// weight exp(s_t - m) / sum (fp64, from the pre-paging values), taken as 0 where fp32's exp(s_t - m) is 0
/// (s_t - m below -105, exp < 2^-151), as every kernel computes it in fp32.
/// With `partial_floor` > 0, an element is also small when the normalised partial output of some split-KV
/// partition, sum over the partition of p_t V_t / sum of its p_t, is nonzero and below `partial_floor`
/// (small_partial); partitions of 16 to 1024 tokens (powers of two), aligned at key 0 and at the window's
/// first key: where vLLM v2, FlashDecoding and the panel's split designs put them.
std::vector<char> small_products(const Case& c, const PrePaging& pre, double floor, double partial_floor = 0) {
  const int H = c.num_heads, G = c.num_kv_heads, D = c.head_size, ratio = c.gqa_ratio();
  const double scale = c.effective_scale();
  const std::vector<float> slopes = c.alibi_slopes.resolve(H), sinks = c.sinks.resolve(H);
  std::vector<char> small(static_cast<std::size_t>(c.num_query_tokens()) * H * D, 0);
  std::vector<double> p;
  for (int s = 0; s < c.num_seqs(); ++s) {
    const std::vector<float>& k = pre.k[s];
    const std::vector<float>& v = pre.v[s];
    for (int i = 0; i < c.query_len(s); ++i) {
      const int pos = c.query_pos(s, i), len = pos + 1, first = c.window_start_at(pos), row = c.query_start(s) + i;
      for (int h = 0; h < H; ++h) {
        const int g = h / ratio;
        const float* q = &pre.q[(static_cast<std::size_t>(row) * H + h) * D];
        p.assign(len, 0.0);
        double m = sinks.empty() ? -std::numeric_limits<double>::infinity() : sinks[h], sum = 0;
        for (int t = first; t < len; ++t) {
          const float* kt = &k[(static_cast<std::size_t>(t) * G + g) * D];
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += static_cast<double>(q[d]) * kt[d];
          double x = dot * scale;
          if (c.logits_soft_cap) x = *c.logits_soft_cap * std::tanh(x / *c.logits_soft_cap);
          if (!slopes.empty()) x += slopes[h] * static_cast<double>(t - pos);
          m = std::max(m, p[t] = x);
        }
        for (int t = first; t < len; ++t) sum += (p[t] = p[t] - m < -105 ? 0.0 : std::exp(p[t] - m));
        if (!sinks.empty()) sum += std::exp(sinks[h] - m);
        char* out_small = &small[(static_cast<std::size_t>(row) * H + h) * D];
        for (int t = first; t < len; ++t) {
          if (p[t] == 0) continue;
          const float* vt = &v[(static_cast<std::size_t>(t) * G + g) * D];
          for (int d = 0; d < D; ++d) {
            const double x = p[t] / sum * std::abs(static_cast<double>(vt[d]));
            if (x != 0 && x < floor) out_small[d] = 1;
          }
        }
        if (partial_floor > 0) small_partials(p, v, G, g, D, first, len, partial_floor, out_small);
      }
    }
  }
  return small;
}

/// True when every element of `v` times 2^e is exactly representable, finite and not subnormal.
bool scales_exactly(const PrePaging& pre, int e, DType t) {
  for (const auto& seq : pre.v)
    for (float x : seq) {
      const float y = std::ldexp(x, e);
      if (x != 0 && (!std::isfinite(y) || std::abs(y) < min_normal(t) || round_to(y, t) != y)) return false;
    }
  return true;
}

void scaling(Property self, const KernelUnderTest& t) {
  // No fp8 cache: V x 2^e would have to move into v_scale, which scale-folding checks for k_scale (Domains).
  CaseSpace sp = t.space;
  sp.fp8_dtypes.clear();
  const Cell cell = *gen_cell(sp, false);
  classify(cell.c);
  const Case& c = cell.c;
  const int magnitude = *gen_uniform(1, 17);
  const bool up = *gen_uniform(0, 2) == 0;
  // Scaling the extreme distribution's V (already near the dtype's largest value) up would overflow fp32
  // accumulators of correct kernels too; scale it down only.
  const int wanted = up && c.dist != Dist::extreme ? magnitude : -magnitude;
  guarded(self, t, cell, [&] {
    const PrePaging pre = generate(c);
    // The exponent actually used: the one drawn, else the nearest towards 0 (then the other sign) that
    // keeps every V element exact, so the scaled input is exactly 2^e V.
    std::optional<int> e;
    const int sign = wanted > 0 ? 1 : -1;
    for (int m = std::abs(wanted); m >= 1 && !e; --m)
      if (scales_exactly(pre, sign * m, c.kv_dtype)) e = sign * m;
    if (!e && c.dist != Dist::extreme && scales_exactly(pre, -sign, c.kv_dtype)) e = -sign;
    RC_PRE(e.has_value());
    PrePaging scaled = pre;
    for (auto& seq : scaled.v)
      for (float& x : seq) x = std::ldexp(x, *e);
    // The domain (docs/PROPERTIES.md, Domains): rounding commutes with scaling by 2^e only for normal
    // numbers, so an element is claimed only where every intermediate an honest design forms from V is
    // normal in both runs. The products p_t x V_t are the smallest: cpu.half_products (vLLM's CUDA dot())
    // rounds each to the KV dtype (f16: normal from 2^-14; bf16 and the fp32 products of every other design:
    // from 2^-126). An element with a nonzero product below twice that, in either run, is left to agreement
    // (V x 2^8 once moved such f16 products out of the subnormal range: h1/1 d64 bs8 f16 ctx511, 0.4402 vs
    // 0.4399). Wider-than-f16 caches keep nearly every element, so V staged through f16 is still caught.
    const DType product = c.kv_dtype == DType::f16 ? DType::f16 : DType::f32;
    const double floor = 2 * min_normal(product) * std::max(1.0, std::ldexp(1.0, -*e));
    // Split-KV partials stored in the output dtype (vLLM v2's tmp_out): one below twice f16's smallest normal
    // in either run is rounded in the subnormal range (f16 outputs: h1/1 d64 bs8 f32 o=f16, V x 2^1 gave
    // -1.9300e-04 for -1.9288e-04 on cpu.split_kv_tmp_out). bf16 and f32 outputs reach their subnormals only
    // below 2^-126, which no partial of the generated V nears.
    const double partial_floor =
        c.out_dtype == DType::f16 ? 2 * min_normal(DType::f16) * std::max(1.0, std::ldexp(1.0, -*e)) : 0.0;
    const std::vector<char> small = small_products(c, pre, floor, partial_floor);
    const RawRun r1 = run_checked(self, t, cell, paged(c, pre), "unscaled");
    const RawRun r2 = run_checked(self, t, cell, paged(c, std::move(scaled)), "scaled");
    // Elements whose value is a normal number of the output dtype before and after scaling must scale
    // exactly; others (non-finite, zero, subnormal or overflowing) are left to the agreement property. The
    // smallest normal itself is left out too: a true value just below it (subnormal) rounds onto it, and
    // 2^e times that true value need not round to 2^e times the smallest normal (cpu.split_kv, f16, seed 1).
    const DType od = c.out_dtype;
    std::int64_t checked = 0, wrong = 0, first = -1, unclaimed = 0;
    double expect_first = 0;
    for (std::size_t i = 0; i < r1.out.size(); ++i) {
      const double x = r1.out[i], y = std::ldexp(x, *e);
      if (!std::isfinite(x) || x == 0 || std::abs(x) <= min_normal(od) || std::abs(y) <= min_normal(od) ||
          std::abs(y) > dtype_max_finite(od))
        continue;
      if (small[i]) {
        ++unclaimed;
        continue;
      }
      ++checked;
      if (r2.bits[i] != to_bits(static_cast<float>(y), od) && wrong++ == 0) {
        first = static_cast<std::int64_t>(i);
        expect_first = y;
      }
    }
    if (unclaimed > 0) RC_TAG("subnormal products");
    if (wrong > 0)
      fail(self, t, cell,
           fmt::format("V x 2^{} does not scale the output by 2^{} exactly: {} of {} checked elements differ; first at {}: "
                       "expected {} (= 2^{} x {}), got {}",
                       *e, *e, wrong, checked, where(c, first), expect_first, *e, r1.out[first], r2.out[first]),
           fmt::format("  scale  V x 2^{}\n", *e));
  });
}

// ---- 8. Scale folding -----------------------------------------------------------------------------

/// Where scale-folding moves the factor 2^-e: into K (fp8 caches: into k_scale, the codes unchanged) or
/// into Q.
enum class FoldInto { k, q };

/// The inputs of scale-folding's second run for exponent e: scale x 2^e with K x 2^-e (fp8: k_scale x 2^-e,
/// the codes unchanged) or with Q x 2^-e, or nothing when some product a kernel may form could leave fp32's
/// normal range or a scaled K or Q element is not exact and normal in its dtype, so that an honest kernel's
/// logits might not be bitwise those of the case.
std::optional<std::pair<Case, PrePaging>> fold_scale(const Case& c, const PrePaging& pre, int e, FoldInto into) {
  // Every nonzero |q_d k_d|, |q_d scale|, |k_d scale| (and for fp8 |q_d k_scale|, |scale k_scale|), and
  // q_d k_d scale, before and after, stays inside [2^-90, 2^90]: a dot product's cancellation then leaves a
  // remainder far above fp32's subnormals, and no honest design (pre-scaled q, scale x log2e, fma, TF32,
  // split-KV) rounds differently, since rounding commutes with exact power-of-two scaling of normal numbers.
  constexpr double kLo = 0x1p-90, kHi = 0x1p90;
  struct Span {  // smallest and largest nonzero magnitude
    double lo = std::numeric_limits<double>::infinity(), hi = 0;
    void add(double x) { if (x != 0) lo = std::min(lo, std::abs(x)), hi = std::max(hi, std::abs(x)); }
    bool empty() const { return hi == 0; }
  };
  const bool fp8 = is_fp8(c.kv_dtype);
  Case folded = c;
  folded.scale = std::ldexp(c.effective_scale(), e);
  Span q, q2, k, k2, ks, ks2;
  // A scaled element must stay exact and normal in the dtype it is held in.
  auto exact = [&](float x, float y, DType held) {
    return x == 0 || (std::isfinite(y) && std::abs(y) >= min_normal(held) && round_to(y, held) == y);
  };
  for (float x : pre.q) {
    const float y = into == FoldInto::q ? std::ldexp(x, -e) : x;
    if (!exact(x, y, c.q_dtype)) return std::nullopt;
    q.add(x);
    q2.add(y);
  }
  // A K element stored in the cache dtype must stay exact and normal there; an fp8 cache keeps its codes, and
  // its dequantised values (fp32 products code x k_scale) must stay normal fp32.
  const DType held = fp8 ? DType::f32 : c.kv_dtype;
  const bool k_folded = into == FoldInto::k && !fp8;
  for (const auto& seq : pre.k)
    for (float x : seq) {
      const float y = k_folded ? std::ldexp(x, -e) : x;
      if (!exact(x, y, held)) return std::nullopt;
      k.add(x);
      k2.add(y);
    }
  if (fp8) {
    KvScale& f = folded.k_scale;
    if (into == FoldInto::k) {
      if (f.is_default()) f.values = {1.0f};
      for (float& v : f.values) v = std::ldexp(v, -e);
      if (f.range) f.range = std::pair{std::ldexp(f.range->first, -e), std::ldexp(f.range->second, -e)};
    }
    const std::vector<float> was = c.k_scale.resolve(c.num_kv_heads), now = f.resolve(c.num_kv_heads);
    for (std::size_t g = 0; g < was.size(); ++g) {
      const float want = into == FoldInto::k ? std::ldexp(was[g], -e) : was[g];
      if (now[g] != want || std::abs(now[g]) < min_normal(DType::f32)) return std::nullopt;
      ks.add(was[g]);
      ks2.add(now[g]);
    }
  }
  const double s1 = c.effective_scale(), s2 = *folded.scale;
  if (!(std::isfinite(s2) && s2 >= min_normal(DType::f32))) return std::nullopt;
  auto inside = [&](const Span& a, const Span& b, double by) {
    return a.empty() || b.empty() || (a.lo * b.lo * by >= kLo && a.hi * b.hi * by <= kHi);
  };
  const Span one{1, 1};
  for (const auto& [qq, kk, kss, s] : {std::tuple{&q, &k, &ks, s1}, std::tuple{&q2, &k2, &ks2, s2}})
    if (!inside(*qq, *kk, 1) || !inside(*qq, one, s) || !inside(*kk, one, s) || !inside(*qq, *kk, s) ||
        !inside(*qq, *kss, 1) || !inside(*kss, one, s))
      return std::nullopt;
  PrePaging scaled = pre;
  if (into == FoldInto::q)
    for (float& x : scaled.q) x = std::ldexp(x, -e);
  if (k_folded)
    for (auto& seq : scaled.k)
      for (float& x : seq) x = std::ldexp(x, -e);
  return std::pair{std::move(folded), std::move(scaled)};
}

void scale_folding(Property self, const KernelUnderTest& t) {
  // A quarter of the usual work bound: a scale a kernel ignores, doubles or drops on one path shows in any
  // case, and the smaller cases keep this property's share of CI time small (multi-partition lengths remain).
  CaseSpace sp = t.space;
  sp.max_work /= 4;
  sp.fp8_dtypes.clear();  // its own fp8 move below folds through k_scale
  Case c = *gen_case(sp);
  // One case in three is moved to an fp8 cache (when the kernel takes it) through the generators' with_fp8, with
  // scale 1, a per-tensor or a per-KV-head k_scale (forms 0..2), so the fold through k_scale is checked too.
  const auto [fp8, encoding, form] = *gen::tuple(gen_uniform(0, 3), gen_uniform(0, 3), gen_uniform(0, 3));
  if (fp8 == 2) c = with_fp8(t.space, c, std::array{DType::fp8_e4m3fn, DType::fp8_e5m2, DType::fp8_e4m3fnuz}[encoding], form);
  const int magnitude = *gen_uniform(1, 5);
  const int sign = *gen_uniform(0, 2) == 0 ? 1 : -1;
  // Half the cases move the factor into Q (q x 2^-e with scale x 2^e, issue 18), half into K or k_scale.
  const FoldInto into = *gen_uniform(0, 2) == 0 ? FoldInto::k : FoldInto::q;
  const Cell cell{c, {}};
  classify(c);
  if (into == FoldInto::q) RC_TAG("folded into Q");
  guarded(self, t, cell, [&] {
    const PrePaging pre = generate(c);
    // The exponent used: the one drawn, else smaller ones of its sign, else the other sign from 1 up.
    int e = 0;
    std::optional<std::pair<Case, PrePaging>> folded;
    for (int m = magnitude; m >= 1 && !folded; --m) folded = fold_scale(c, pre, e = sign * m, into);
    for (int m = 1; m <= 4 && !folded; ++m) folded = fold_scale(c, pre, e = -sign * m, into);
    RC_PRE(folded.has_value());
    const Case& f = folded->first;
    const RawRun r1 = run_checked(self, t, cell, paged(c, pre), "unfolded");
    const RawRun r2 = run_checked(self, t, cell, paged(f, std::move(folded->second)), "folded");
    const BitDiff d = diff_bits(r1.bits, 0, r2.bits, 0, r1.bits.size());
    const bool fp8_cache = is_fp8(c.kv_dtype);
    const char* what = into == FoldInto::q ? "Q" : fp8_cache ? "k_scale" : "K";
    if (d.count > 0)
      fail(self, t, cell,
           fmt::format("scale x 2^{} ({} -> {}) with {} x 2^{} changes the output: {} of {} elements differ bitwise; "
                       "first at {}: {} unfolded, {} folded",
                       e, c.effective_scale(), *f.scale, what, -e, d.count, r1.bits.size(), where(c, d.first),
                       r1.out[d.first], r2.out[d.first]),
           into == FoldInto::k && fp8_cache
               ? fmt::format("  folded scale={} ks={} (fp8 codes unchanged)\n", *f.scale, f.k_scale.text())
               : fmt::format("  folded scale={}, {} x 2^{}\n", *f.scale, what, -e));
  });
}

// ---- 9. Overflow (opt-in) ------------------------------------------------------------------------

/// Agreement on the overflow distribution: V near the dtype's limit (dist=overflow), where honest designs
/// that sum p x V unnormalised in fp32 overflow (fault-classes.md section 9 allows them; opt-in). A kernel
/// whose output is NaN/Inf where the oracle is finite fails with the verdict `overflow`.
void overflow(Property self, const KernelUnderTest& t) {
  CaseSpace sp = t.space;
  sp.fp8_dtypes.clear();  // dist=overflow's V is at the 16/32-bit output dtype's limit (Domains)
  sp.variants &= PACHECK_VARIANT_MULTI_QUERY;  // and its logits those of extreme, plain (query tokens stay)
  Cell cell = *gen_cell(sp, false);
  cell.c.dist = Dist::overflow;
  RC_PRE(t.kernel->supports(cell.c).ok);
  classify(cell.c);
  judge_clean_cell(self, t, cell);
}

// ---- 10. Neutral attention variants ---------------------------------------------------------------

/// Relative size of the soft cap against the bound on |logit| in neutral_variants: c >= 1e4 max|s| moves
/// c tanh(s / c) from s by at most s^3 / (3 c^2), a relative 3.3e-9 (far below fp32's half ULP, 6e-8).
constexpr double kNeutralCapFactor = 1e4;
/// The neutral sink logit: exp(-1e30 - m) is 0 in fp32 and fp64 for every finite running max m, so the
/// sink adds nothing to the denominator (and -1e30 is finite: a kernel starting its running max from it
/// gets exp(-1e30 - (-1e30)) = 1, then rescales it by exp(-1e30 - s) = 0 at the first real logit).
constexpr float kNeutralSink = -1e30f;

/// An upper bound on |scale q.k| over every query head and key of `c`: scale x max ||q row|| x max ||k row||
/// (Cauchy-Schwarz), from the pre-paging tensors (k already dequantised).
double logit_bound(const Case& c, const PrePaging& pre) {
  const std::size_t D = static_cast<std::size_t>(c.head_size);
  auto max_norm = [D](const std::vector<float>& x) {
    double best = 0;
    for (std::size_t i = 0; i + D <= x.size(); i += D) {
      double n = 0;
      for (std::size_t d = 0; d < D; ++d) n += static_cast<double>(x[i + d]) * x[i + d];
      best = std::max(best, std::sqrt(n));
    }
    return best;
  };
  double kmax = 0;
  for (const auto& k : pre.k) kmax = std::max(kmax, max_norm(k));
  return std::abs(static_cast<double>(c.effective_scale())) * max_norm(pre.q) * kmax;
}

/// A variant in its neutral form gives the output of the case without it (docs/PROPERTIES.md, Domains):
/// a sliding window W >= the longest seq_len (W = max_seq_len half the time: the boundary), ALiBi slopes
/// all 0, sinks at -1e30 (kNeutralSink), or a soft cap c >= 1e4 x a bound on |logit| (uniform, normal
/// and peaked distributions only: on extreme's logits of ~1e4 an fp32 logit has an ULP of 1e-3, and the
/// cap's roundings move the softmax beyond the limit). One variant per case, among those the kernel
/// declares (Kernel::variants); a kernel that implements none holds vacuously (tagged). The two outputs
/// must be bitwise equal or within the judge's fixed limit of each other (as batch-invariance compares
/// two runs): each is an honest evaluation of the same function (the cap changes it by 3.3e-9 relative).
void neutral_variants(Property self, const KernelUnderTest& t) {
  // A thirty-second of the work bound: each case runs the kernel twice, and the neutral forms' faults show
  // on short cases (300 cases on each of the 11 registered CPU kernels: 8.3 s of CPU together).
  CaseSpace space = t.space;
  space.max_work = std::max<std::int64_t>(1 << 14, t.space.max_work / 32);
  space.variants &= PACHECK_VARIANT_MULTI_QUERY;  // the plain case: the neutral variant is added to it below
  const Cell drawn = *gen_cell(space, false);
  std::vector<unsigned> kinds;
  for (unsigned v : {PACHECK_VARIANT_SLIDING_WINDOW, PACHECK_VARIANT_ALIBI, PACHECK_VARIANT_SOFT_CAP,
                     PACHECK_VARIANT_SINKS})
    if (t.kernel->variants() & v) kinds.push_back(v);
  if (kinds.empty()) return vacuous("no variant implemented");
  const unsigned kind = kinds[static_cast<std::size_t>(*gen_uniform(0, static_cast<int>(kinds.size())))];
  const Case plain = drawn.c;
  Case neutral = plain;
  using F = HeadValues::Form;
  switch (kind) {
    case PACHECK_VARIANT_SLIDING_WINDOW: {
      const int extra = *gen_uniform(0, 2) == 0 ? 0 : *gen_uniform(1, 65);
      neutral.sliding_window = plain.max_seq_len() + extra;
      RC_TAG(extra == 0 ? "window = max seq_len" : "window > max seq_len");
      break;
    }
    case PACHECK_VARIANT_ALIBI:
      neutral.alibi_slopes = HeadValues{F::values, {0.0f}, {}};
      RC_TAG("alibi slopes 0");
      break;
    case PACHECK_VARIANT_SINKS:
      neutral.sinks = HeadValues{F::values, {kNeutralSink}, {}};
      RC_TAG("sinks -1e30");
      break;
    default:
      RC_PRE(plain.dist != Dist::extreme && plain.dist != Dist::overflow && !offset_dist(plain.dist));
      neutral.logits_soft_cap = 1.0f;  // set from the logits below
      RC_TAG("soft cap >= 1e4 max|logit|");
  }
  classify(plain);
  if (!t.kernel->supports(neutral).ok) return vacuous("neutral case declined");
  guarded(self, t, Cell{neutral, {}}, [&] {
    PrePaging pre = generate(plain);
    if (kind == PACHECK_VARIANT_SOFT_CAP)
      neutral.logits_soft_cap = static_cast<float>(kNeutralCapFactor * std::max(logit_bound(plain, pre), 1.0));
    const Cell cell{neutral, {}};
    const CaseData a = paged(plain, pre), b = paged(neutral, std::move(pre));
    const RawRun ra = run_checked(self, t, cell, a, "plain");
    const RawRun rb = run_checked(self, t, cell, b, "neutral-variant");
    if (diff_bits(ra.bits, 0, rb.bits, 0, ra.bits.size()).count == 0) return;
    const Metrics m = compare(rb.out, ra.out, neutral, neutral.out_dtype);
    const double limit = fixed_limit(neutral.out_dtype, neutral.max_seq_len());
    if (m.bad_nonfinite > 0 || !(m.rel_linf <= limit))
      fail(self, t, cell,
           fmt::format("the neutral variant changes the output beyond tolerance: rel_linf {:.3e} > {:.3e}, {} "
                       "non-finite where the plain case's output is finite",
                       m.rel_linf, limit, m.bad_nonfinite),
           fmt::format("  plain  {}\n", plain.id()));
  });
}

/// Listens to RapidCheck silently, counting accepted shrinks.
class QuietListener final : public rc::detail::TestListener {
 public:
  int shrinks = 0;
  void onTestCaseFinished(const rc::detail::CaseDescription&) override {}
  void onShrinkTried(const rc::detail::CaseDescription&, bool accepted) override { shrinks += accepted; }
  void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}
};

}  // namespace
}  // namespace pacheck::prop

namespace rc::detail {
// Defined in librapidcheck (src/detail/Configuration.cpp) but not declared in its installed headers: the
// reproduce string format RC_PARAMS' "reproduce=" reads.
std::string reproduceMapToString(const std::unordered_map<std::string, Reproduce>& map);
std::unordered_map<std::string, Reproduce> stringToReproduceMap(const std::string& str);
}  // namespace rc::detail

namespace pacheck::prop {

namespace {
/// Every property: its name, its claim and its function. A row here (and its row in docs/PROPERTIES.md) is
/// all a new property needs; Property is a handle to its row.
constexpr PropertyInfo kProperties[] = {
    {"agreement", "within tolerance of the oracle, never NaN/Inf where the oracle is finite", agreement},
    {"tail-poison", "any poison in any unwritten region of K, V or both leaves the output bitwise identical",
     tail_poison},
    {"paging-invariance", "another block permutation, more spare blocks, other padding: a bitwise identical output",
     paging},
    {"determinism", "two runs of a case, also with another case in between, are bitwise identical", determinism},
    {"batch-invariance", "a sequence alone equals itself inside a batch and in a reversed batch", batch},
    {"gqa-expansion", "duplicating each KV head to make the case MHA gives the same output within tolerance",
     gqa_expansion, /*opt_in=*/false,
     /*not_mla=*/"the expansion of a latent cache's one KV head is a multi-head case, which an MLA kernel does not run"},
    {"exact-scaling", "V x 2^e gives the output x 2^e exactly", scaling, /*opt_in=*/false,
     /*not_mla=*/"V is a prefix of the latent row, so V x 2^e scales the keys and moves the logits too"},
    {"scale-folding",
     "scale x 2^e with K x 2^-e (fp8 caches: k_scale x 2^-e) or with Q x 2^-e gives a bitwise identical output",
     scale_folding, /*opt_in=*/false,
     /*not_mla=*/"its K fold scales the latent row, which is V too; the Q fold alone is not drawn for MLA cases"},
    {"neutral-variants",
     "a variant in its neutral form (window >= seq_len, ALiBi slopes 0, sinks -1e30, soft cap >= 1e4 max|logit|) "
     "gives the plain case's output within tolerance",
     neutral_variants, /*opt_in=*/false, /*not_mla=*/"MLA cases take no attention variant but several query tokens"},
    {"overflow",
     "opt-in: with V near the dtype's limit (dist=overflow) the output is finite where the oracle is, and within "
     "tolerance; unnormalised fp32 P.V sums (FlashAttention-2, two-pass, LSE merges) overflow here by design",
     overflow, /*opt_in=*/true,
     /*not_mla=*/"dist=overflow bounds V apart from K, and an MLA case's V is its key row (uniform, normal, peaked only)"},
};

/// property_table() as a name table of core/table.hpp (value: the row's address), for parse()'s lookup and
/// its error message.
struct NamedRow {
  const PropertyInfo* value;
  std::string_view name;
};
std::span<const NamedRow> named_rows() {
  static const std::vector<NamedRow> rows = [] {
    std::vector<NamedRow> v;
    for (const PropertyInfo& r : kProperties) v.push_back({&r, r.name});
    return v;
  }();
  return rows;
}
}  // namespace

std::string_view Property::name() const { return row_->name; }
std::span<const PropertyInfo> property_table() { return kProperties; }
std::string_view property_name(Property p) { return p.name(); }
Property parse_property(std::string_view s) { return *parse(named_rows(), s, "property"); }

const std::vector<Property>& all_properties() {
  static const std::vector<Property> all(std::begin(kProperties), std::end(kProperties));
  return all;
}

const std::vector<Property>& default_properties() {
  static const std::vector<Property> chosen = [] {
    std::vector<Property> v;
    for (const PropertyInfo& r : kProperties)
      if (!r.opt_in) v.push_back(r);
    return v;
  }();
  return chosen;
}

bool applies(Property p, const Kernel& k) { return !k.takes_mla() || p->not_mla.empty(); }

void check_applies(Property p, const Kernel& k) {
  if (applies(p, k)) return;
  std::string those;
  for (const PropertyInfo& r : kProperties)
    if (applies(r, k)) those += fmt::format("{}{}", those.empty() ? "" : ", ", r.name);
  throw std::invalid_argument(fmt::format("property '{}' does not apply to {}, an MLA decode kernel: {} (those that do: "
                                          "{})",
                                          p.name(), k.name(), p->not_mla, those));
}

std::vector<Property> default_properties_for(const Kernel& k) {
  std::vector<Property> v;
  for (Property p : default_properties())
    if (applies(p, k)) v.push_back(p);
  return v;
}

KernelUnderTest make_target(KernelPtr kernel, const std::string& device, RunOptions options) {
  if (!kernel) throw std::invalid_argument("make_target: null kernel");
  KernelUnderTest t;
  // A GPU kernel with no GPU named runs on the first device of its own kind: "cuda", or "hip" for a HIP kernel.
  t.device = kernel->device() == PACHECK_DEVICE_CPU ? "cpu"
             : device.empty() || device == "cpu"     ? device_kind_spec(kernel->device())
                                                     : device;
  t.backend = open_backend(t.device);
  t.device = t.backend->name();
  t.options = std::move(options);
  t.space = probe_space(kernel);
  t.kernel = std::move(kernel);
  return t;
}

void check_once(Property p, const KernelUnderTest& t) {
  if (budget_spent()) return;
  p->check(p, t);
}

PropertyRun run_property(Property p, const KernelUnderTest& t, const RunParams& params) {
  check_applies(p, *t.kernel);
  PropertyRun run{p};
  run.kernel = t.kernel->name();
  run.passed = true;
  t_over_memory = t_vacuous = t_skipped = t_device_oom = 0;
  t_failed = false;
  const auto start = std::chrono::steady_clock::now();
  t_deadline.reset();
  if (params.budget_seconds > 0) t_deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                          std::chrono::duration<double>(params.budget_seconds));
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  rc::detail::TestMetadata meta;
  meta.id = fmt::format("{}/{}", property_name(p), t.kernel->name());
  meta.description = meta.id;
  // RapidCheck's configuration is read only when RC_PARAMS is set: loading it otherwise draws and prints
  // a random seed that this run does not use.
  std::unordered_map<std::string, rc::detail::Reproduce> replay;
  if (std::getenv("RC_PARAMS")) replay = rc::detail::configuration().reproduce;
  if (!params.reproduce.empty()) {
    try {
      replay = rc::detail::stringToReproduceMap(params.reproduce);
    } catch (...) {
      throw std::invalid_argument(fmt::format(
          "--reproduce '{}': not a reproduce string printed by a failure (the text after its replay line's --reproduce)",
          params.reproduce));
    }
    if (!replay.count(meta.id))
      throw std::invalid_argument(fmt::format("the reproduce string is not for {} on {}", property_name(p), t.kernel->name()));
  }

  // One RapidCheck run of `cases` cases; a budget run is a sequence of short runs with fresh seeds, each
  // sweeping sizes 0..max_size, until the time is spent.
  auto once = [&](std::uint64_t seed, int cases) {
    rc::detail::TestParams tp;
    tp.seed = seed;
    tp.maxSuccess = cases;
    tp.maxSize = params.max_size;
    tp.disableShrinking = !params.shrink;
    t_last_failure.reset();
    QuietListener listener;
    const rc::detail::TestResult result =
        rc::detail::checkProperty(rc::detail::toProperty([&] { check_once(p, t); }), meta, tp, listener, replay);
    run.shrinks += listener.shrinks;
    if (result.is<rc::detail::SuccessResult>()) {
      const auto& ok = result.get<rc::detail::SuccessResult>();
      run.cases += ok.numSuccess;
      for (const auto& [tags, n] : ok.distribution)
        if (std::none_of(tags.begin(), tags.end(), [](const std::string& tag) {
              return tag == kBudgetSpentTag || tag == fmt::format("\"{}\"", kBudgetSpentTag);
            }))
          run.distribution[tags] += n;
      return true;
    }
    run.passed = false;
    std::ostringstream os;
    rc::detail::printResultMessage(result, os);
    run.message = os.str();
    if (result.is<rc::detail::FailureResult>()) {
      const auto& failure = result.get<rc::detail::FailureResult>();
      run.cases += failure.numSuccess;
      run.counterexample = t_last_failure;
      run.reproduce = rc::detail::reproduceMapToString({{meta.id, failure.reproduce}});
    }
    return false;
  };
  if (params.budget_seconds <= 0) {
    once(params.seed, params.cases);
  } else {
    // Chunks with fresh seeds until the share is spent; a chunk under way when it runs out skips its remaining
    // cases (budget_spent), so the share is overrun by at most one case (and by shrinking a failure).
    constexpr int kChunk = 25;
    for (std::uint64_t i = 0; elapsed() < params.budget_seconds; ++i)
      if (!once(params.seed + i * 0x9E3779B97F4A7C15ull, kChunk)) break;
  }
  t_deadline.reset();
  run.cases -= t_skipped;
  run.exercised = std::max(0, run.cases - t_vacuous);
  run.over_memory = t_over_memory;
  run.device_out_of_memory = t_device_oom;
  run.seconds = elapsed();
  return run;
}

std::string tag_summary(const rc::detail::Distribution& d) {
  int total = 0;
  std::map<std::string, int> per_tag;
  for (const auto& [tags, n] : d) {
    total += n;
    // RapidCheck stores each tag as its printed value: a string tag arrives quoted.
    for (std::string tag : tags) {
      if (tag.size() >= 2 && tag.front() == '"' && tag.back() == '"') tag = tag.substr(1, tag.size() - 2);
      per_tag[tag] += n;
    }
  }
  if (total == 0) return {};  // a run that failed before any case held has no distribution
  auto pct = [&](const std::string& tag) { return 100.0 * per_tag[tag] / total; };
  std::string out = fmt::format("straddling {:.0f}%, GQA>1 {:.0f}%, multi-partition {:.0f}%, scale set {:.0f}%, "
                                "batch>=5 {:.0f}%, ctx>16K {:.0f}%, block>=128 {:.0f}%, block ids>2^31 {:.0f}%, "
                                "qlen>1 {:.0f}%, aiter layout {:.0f}%",
                                pct("straddling"), pct("GQA>1"), pct("multi-partition"), pct("scale set"),
                                pct("batch>=5"), pct("ctx>16K"), pct("block>=128"), pct("block ids>2^31"),
                                pct("qlen>1"), pct("aiter layout"));
  // A tag a property adds beyond classify()'s pairs is shown by its name, as the share of cases that carry it.
  for (const auto& [tag, n] : per_tag)
    if (tag != "straddling" && tag != "aligned" && tag != "GQA>1" && tag != "GQA=1" && tag != "multi-partition" &&
        tag != "one partition" && tag != "scale set" && tag != "default scale" && tag != "batch>=5" &&
        tag != "batch<5" && tag != "ctx>16K" && tag != "ctx<=16K" && tag != "block>=128" && tag != "block<128" &&
        tag != "block ids>2^31" && tag != "dense pool" && tag != "qlen>1" && tag != "qlen=1" &&
        tag != "aiter layout" && tag != "other layout")
      out += fmt::format(", {} {:.0f}%", tag, pct(tag));
  return out;
}

}  // namespace pacheck::prop
