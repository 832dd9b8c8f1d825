// What the property tests expect of each kernel, as data over property_table() x the kernel registry:
//  - a registered CPU kernel that is not a negative control must hold every property (test_properties.cpp);
//  - a negative control or planted kernel must fail the properties of its rows in catches(), with a shrunk
//    counterexample that shows the fault's trigger (test_planted.cpp), and hold the rest: a registered
//    control every other property at the CI case count, a planted kernel the properties of planted_holds();
//  - a control whose fault the generators cannot reach is listed in unreached(), saying why;
//  - opt-in properties (overflow) are held by the kernels of opt_in_holds() and fail, at the limit their
//    design documents, the honest kernels of design_limits(); no other test runs them.
// Every control and planted kernel must appear in catches() or unreached() (Controls.EveryControlIsExpected),
// so a new one is never silently untested. A new property or correct kernel needs no edit here. Rows name
// properties as property_table() does ("tail-poison"); Controls.EveryControlIsExpected checks the names.
#pragma once

#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "faults/inject.hpp"
#include "properties/planted_kernels.hpp"
#include "properties/properties.hpp"

namespace pacheck::prop::test {

/// Cases, seed and size from RapidCheck's configuration (RC_PARAMS; test_main.cpp sets the CI defaults).
inline RunParams rc_params() {
  const auto& tp = rc::detail::configuration().testParams;
  RunParams p;
  p.seed = tp.seed;
  p.cases = tp.maxSuccess;
  p.max_size = tp.maxSize;
  return p;
}

/// A built-in (registry) or planted kernel by name; nullptr when neither has it.
inline KernelPtr kernel(const std::string& name) {
  KernelPtr k = Registry::global().find(name);
  return k ? k : find_planted_kernel(name);
}

/// The expected_failures() predicate of the negative control `name` (a registered or planted kernel).
inline std::function<bool(const Cell&)> kernel_expected_failures(const std::string& name) {
  const KernelPtr k = kernel(name);
  auto pred = k ? k->expected_failures() : std::nullopt;
  if (!pred) throw std::invalid_argument(name + " is no negative control");
  return *pred;
}

/// The verdict `pacheck repro` gives the counterexample's cell (the same run_cell it calls).
inline Verdict repro_verdict(const Cell& cell, const std::string& name) {
  auto backend = make_cpu_backend();
  return run_cell(cell, *kernel(name), *backend, RunOptions{}).first.verdict;
}

/// Runs the counterexample's printed `pacheck repro` line with the pacheck binary of this build
/// (PACHECK_BINARY): its exit status and stdout (stderr appended).
inline std::pair<int, std::string> run_repro_line(const Counterexample& cx) {
  const std::string prefix = "pacheck ";
  EXPECT_EQ(cx.repro.rfind(prefix, 0), 0u) << cx.repro;
  const std::string out = ::testing::TempDir() + "pacheck_test_planted_repro." + std::to_string(::getpid()) + ".out";
  const std::string cmd = std::string(PACHECK_BINARY) + " " + cx.repro.substr(prefix.size()) + " >" + out + " 2>&1";
  const int st = std::system(cmd.c_str());
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, text.str()};
}

inline int max_len(const Case& c) { return c.max_seq_len(); }

/// A property that `kernel` must fail, and what the shrunk counterexample must show (`seconds`: how long
/// the run took to fail and shrink).
struct Catch {
  std::string kernel;
  std::string property;  ///< its name in property_table() ("tail-poison")
  std::string shows;  ///< what the check asserts, in words (part of the test name)
  std::function<void(const Counterexample& cx, double seconds)> check;
  /// Cases to try (0: RapidCheck's max_success, 300 in CI): more for a fault whose trigger the generators draw
  /// rarely (a wrap past 2^32 that two pagings place differently).
  int cases = 0;
};

/// The check of a 32-bit block-offset control's counterexample: its case is placed at high block ids of at
/// least 2^`bits` elements (paging-invariance and batch-invariance shrink to a case so placed too).
inline std::function<void(const Counterexample&, double)> offset32_catch(std::string kernel, int bits) {
  return [kernel, bits](const Counterexample& cx, double) {
    EXPECT_GE(cx.cell.c.high_block_ids, bits) << kernel << ": " << cx.cell.id() << ": " << cx.what;
  };
}

/// The check of an fp8 scale control's counterexample: an fp8 cache whose scales are not all 1 (per KV head
/// with at least two KV heads when `per_head`), and `pacheck repro` fails it too.
inline std::function<void(const Counterexample&, double)> fp8_catch(std::string kernel, bool per_head) {
  return [kernel, per_head](const Counterexample& cx, double) {
    const Case& c = cx.cell.c;
    EXPECT_TRUE(is_fp8(c.kv_dtype)) << c.id();
    EXPECT_FALSE(c.k_scale.is_default() && c.v_scale.is_default()) << c.id();
    if (per_head) {
      EXPECT_TRUE(c.k_scale.per_head() || c.v_scale.per_head()) << c.id();
      EXPECT_GE(c.num_kv_heads, 2) << c.id();
    }
    EXPECT_TRUE(is_failure(repro_verdict(cx.cell, kernel))) << cx.cell.id();
  };
}

/// The check of a control whose fault needs logits far from zero: an offset distribution (far_below or
/// mixed_scales with three sequences or more when `below`: some row's logits all far below zero), or for
/// softmax without the max the extreme distribution too; and `pacheck repro` fails the cell.
inline std::function<void(const Counterexample&, double)> offset_catch(std::string kernel, bool below) {
  return [kernel, below](const Counterexample& cx, double) {
    const Case& c = cx.cell.c;
    if (below)
      EXPECT_TRUE(c.dist == Dist::far_below || (c.dist == Dist::mixed_scales && c.num_seqs() >= 3)) << c.id();
    else
      EXPECT_TRUE(offset_dist(c.dist) || c.dist == Dist::extreme) << c.id();
    if (cx.what.find("MHA expansion") == std::string::npos) EXPECT_TRUE(is_failure(repro_verdict(cx.cell, kernel))) << c.id();
  };
}

/// The check of cpu.carried_max's counterexample: rows of two sequences or more, or two query tokens or more,
/// whose logit scales differ (mixed_scales, or extreme); with `repro`, `pacheck repro` fails the cell.
inline std::function<void(const Counterexample&, double)> batch_catch(std::string kernel, bool repro) {
  return [kernel, repro](const Counterexample& cx, double) {
    const Case& c = cx.cell.c;
    EXPECT_GE(c.num_query_tokens(), 2) << c.id();
    EXPECT_TRUE(c.dist == Dist::mixed_scales || c.dist == Dist::extreme) << c.id();
    if (repro) EXPECT_TRUE(is_failure(repro_verdict(cx.cell, kernel))) << c.id();
  };
}

/// The check of an MLA control whose logits or V offset are wrong (cpu.mla_fixed_scale, cpu.mla_rope_dropped,
/// cpu.mla_rope_unscaled, cpu.mla_v_offset): an MLA case of the normal or uniform distribution (they decline
/// peaked, whose hot rows hide their faults), judged beyond tolerance of the oracle (tail-poison judges its cell
/// too: the clean cell fails as well, as `pacheck repro` shows); with `logits`, two keys or more (one key's
/// weight is 1 whatever its logit).
inline std::function<void(const Counterexample&, double)> mla_oracle_catch(std::string kernel, bool logits) {
  return [kernel, logits](const Counterexample& cx, double) {
    const Case& c = cx.cell.c;
    EXPECT_TRUE(c.is_mla()) << c.id();
    EXPECT_TRUE(c.dist == Dist::normal || c.dist == Dist::uniform) << c.id();
    if (logits) EXPECT_GE(max_len(c), 2) << "one key's weight is 1 whatever its logit: " << c.id();
    EXPECT_EQ(cx.what.rfind("fail: rel_linf", 0), 0u) << cx.what;
    Cell clean = cx.cell;
    clean.fault = FaultSpec{};
    EXPECT_TRUE(is_failure(repro_verdict(clean, kernel))) << "the clean cell fails: " << clean.id();
  };
}

/// The check of an MLA control that reads unwritten latent rows into P.V (cpu.mla_v_tail, cpu.mla_packed_tile):
/// an MLA cell with a NaN or Inf in the V prefix (target V or K+V; K, the rope part, is never read as V) that
/// the control's own expected_failures() claims, poisoned under `pacheck repro` too; with `batch`, two
/// sequences or more (the poison is in another sequence's slots).
inline std::function<void(const Counterexample&, double)> mla_read_catch(std::string kernel, bool batch) {
  return [kernel, batch](const Counterexample& cx, double) {
    const Cell& cell = cx.cell;
    EXPECT_TRUE(cell.c.is_mla()) << cell.id();
    EXPECT_NE(cell.fault.target, Target::k) << cell.id();
    EXPECT_TRUE(poison_is_nonfinite(cell.fault.poison)) << cell.id();
    if (batch) EXPECT_GE(cell.c.num_seqs(), 2) << cell.id();
    EXPECT_TRUE(kernel_expected_failures(kernel)(cell)) << "not a cell " << kernel << " claims: " << cell.id();
    EXPECT_EQ(repro_verdict(cell, kernel), Verdict::poisoned) << cell.id();
  };
}

/// Every expected catch. The rows are those of docs/PROPERTIES.md's planted-kernel table.
inline const std::vector<Catch>& catches() {
  static const std::vector<Catch> rows{
      // Acceptance of issue 5: the negative control is caught with a straddling length and a V poison, in
      // under a minute, and `pacheck repro` on the printed cell fails it too.
      {"cpu.vector_v", "tail-poison", "StraddlingLengthAndNonFiniteVPoison",
       [](const Counterexample& cx, double seconds) {
         EXPECT_TRUE(cx.cell.c.straddles()) << cx.cell.id();
         EXPECT_NE(cx.cell.fault.target, Target::k) << cx.cell.id();
         EXPECT_TRUE(poison_is_nonfinite(cx.cell.fault.poison)) << cx.cell.id();
         EXPECT_TRUE(poisons_v_tail(cx.cell)) << cx.cell.id();
         EXPECT_EQ(cx.cell.c.num_seqs(), 1) << "not shrunk: " << cx.cell.id();
         EXPECT_LT(seconds, 60.0);
         EXPECT_EQ(repro_verdict(cx.cell, "cpu.vector_v"), Verdict::poisoned);
       }},
      {"planted.off_by_one_block", "agreement", "AtAnAlignedLength",
       [](const Counterexample& cx, double) {
         const Case& c = cx.cell.c;
         EXPECT_TRUE(std::any_of(c.seq_lens.begin(), c.seq_lens.end(), [&](int len) { return len % c.block_size == 0; }))
             << c.id();
         EXPECT_TRUE(is_failure(repro_verdict(cx.cell, "planted.off_by_one_block")));
       }},
      {"planted.gqa_modulo", "agreement", "WithGqaAndSeveralKvHeads",
       [](const Counterexample& cx, double) {
         EXPECT_GE(cx.cell.c.gqa_ratio(), 2) << cx.cell.id();
         EXPECT_GE(cx.cell.c.num_kv_heads, 2) << cx.cell.id();
         EXPECT_TRUE(is_failure(repro_verdict(cx.cell, "planted.gqa_modulo")));
       }},
      {"planted.gqa_modulo", "gqa-expansion", "WithGqaAndSeveralKvHeads",
       [](const Counterexample& cx, double) {
         EXPECT_GE(cx.cell.c.gqa_ratio(), 2) << cx.cell.id();
         EXPECT_GE(cx.cell.c.num_kv_heads, 2) << cx.cell.id();
         EXPECT_NE(cx.what.find("MHA expansion"), std::string::npos) << cx.what;
       }},
      {"planted.split_kv_empty_partition", "agreement", "OnAShortSequenceAndTheReproLineRuns",
       [](const Counterexample& cx, double) {
         // Two sibling partitions of 8 x ceil(len / 8) tokens are both empty: 6 * ceil(len / 8) >= len at least.
         const Case& c = cx.cell.c;
         EXPECT_TRUE(std::any_of(c.seq_lens.begin(), c.seq_lens.end(), [](int len) { return 6 * ((len + 7) / 8) >= len; }))
             << c.id();
         EXPECT_EQ(cx.what.rfind("poisoned", 0), 0u) << cx.what;
         EXPECT_EQ(repro_verdict(cx.cell, "planted.split_kv_empty_partition"), Verdict::poisoned);
         // The printed repro line runs as printed: `pacheck repro` finds planted kernels too.
         const auto [rc, out] = run_repro_line(cx);
         EXPECT_EQ(rc, 1) << cx.repro << "\n" << out;
         EXPECT_NE(out.find("kernel    planted.split_kv_empty_partition on "), std::string::npos) << out;
         EXPECT_NE(out.find("verdict   poisoned"), std::string::npos) << out;
       }},
      {"planted.softmax_no_max", "agreement", "OnTheExtremeDistribution",
       [](const Counterexample& cx, double) {
         EXPECT_EQ(cx.cell.c.dist, Dist::extreme) << cx.cell.id();
         EXPECT_TRUE(is_failure(repro_verdict(cx.cell, "planted.softmax_no_max")));
       }},
      // exp(logit) overflows on the extreme logits the overflow distribution shares: caught by the opt-in
      // property too, under its own verdict (a clean dist=overflow cell).
      {"planted.softmax_no_max", "overflow", "WithItsOwnVerdict",
       [](const Counterexample& cx, double) {
         EXPECT_EQ(cx.cell.c.dist, Dist::overflow) << cx.cell.id();
         EXPECT_EQ(cx.what.rfind("overflow: ", 0), 0u) << cx.what;
         EXPECT_EQ(repro_verdict(cx.cell, "planted.softmax_no_max"), Verdict::overflow);
       }},
      // The remaining planted faults stay within tolerance of the oracle: only their metamorphic property
      // sees them (planted_holds() has the other half).
      {"planted.physical_block_order", "paging-invariance", "WithTwoBlocksToReorder",
       [](const Counterexample& cx, double) {
         EXPECT_GT(max_len(cx.cell.c), cx.cell.c.block_size) << "needs two blocks to reorder: " << cx.cell.id();
       }},
      {"planted.launch_order", "determinism", "WithThreeTokensOrMore",
       [](const Counterexample& cx, double) {
         EXPECT_GE(max_len(cx.cell.c), 3) << "reversing fewer than 3 addends rounds the same: " << cx.cell.id();
       }},
      {"planted.batch_split", "batch-invariance", "WithABatchOverSeveralPartitions",
       [](const Counterexample& cx, double) {
         EXPECT_GE(cx.cell.c.num_seqs(), 2) << cx.cell.id();
         EXPECT_GT(max_len(cx.cell.c), 16) << "one partition whatever the batch: " << cx.cell.id();
       }},
      {"planted.f16_staged_v", "exact-scaling", "WithAWiderCacheDtype",
       [](const Counterexample& cx, double) {
         // f16 caches hold nothing f16 staging can lose; the fault needs a wider cache dtype.
         EXPECT_NE(cx.cell.c.kv_dtype, DType::f16) << cx.cell.id();
         EXPECT_NE(cx.what.find("does not scale the output"), std::string::npos) << cx.what;
       }},
      // A kernel that ignores the softmax scale it is passed (the registered control cpu.fixed_scale): agreement
      // sees it on the generated cases with a non-default scale (one in four), scale-folding on any case of
      // two tokens or more, since its Q or K is scaled by 2^-e and the kernel does not undo that.
      {"cpu.fixed_scale", "agreement", "WithANonDefaultScaleAndTwoTokensOrMore",
       [](const Counterexample& cx, double) {
         const Case& c = cx.cell.c;
         EXPECT_TRUE(c.scale.has_value()) << "the default scale is the one it uses: " << c.id();
         EXPECT_NE(c.effective_scale(), 1.0f / std::sqrt(static_cast<float>(c.head_size))) << c.id();
         EXPECT_GE(max_len(c), 2) << "one token's softmax weight is 1 whatever the scale: " << c.id();
         EXPECT_TRUE(is_failure(repro_verdict(cx.cell, "cpu.fixed_scale")));
       }},
      // tail-poison judges its cell against the oracle too: the same wrong output, whatever the poison.
      {"cpu.fixed_scale", "tail-poison", "TheCellFailsWithANonDefaultScale",
       [](const Counterexample& cx, double) {
         const Case& c = cx.cell.c;
         EXPECT_TRUE(c.scale.has_value()) << c.id();
         EXPECT_GE(max_len(c), 2) << c.id();
         EXPECT_EQ(cx.what.rfind("fail: rel_linf", 0), 0u) << cx.what;
         Cell clean = cx.cell;
         clean.fault = FaultSpec{};
         EXPECT_TRUE(is_failure(repro_verdict(clean, "cpu.fixed_scale"))) << "the clean cell fails too: " << c.id();
       }},
      {"cpu.fixed_scale", "scale-folding", "WithTwoTokensOrMore",
       [](const Counterexample& cx, double) {
         EXPECT_GE(max_len(cx.cell.c), 2) << "one token's softmax weight is 1 whatever the scale: " << cx.cell.id();
         EXPECT_NE(cx.what.find("changes the output"), std::string::npos) << cx.what;
       }},
      // The accumulation faults of docs/TOLERANCE.md's measurements: agreement sees each beyond tolerance.
      {"planted.bf16_accumulator", "agreement", "WithTwoTokensOrAWiderOutput",
       [](const Counterexample& cx, double) {
         // One token into a bf16 output is one add rounded once, as the output is; a wider output loses bits.
         EXPECT_TRUE(max_len(cx.cell.c) >= 2 || cx.cell.c.out_dtype != DType::bf16) << cx.cell.id();
         EXPECT_TRUE(is_failure(repro_verdict(cx.cell, "planted.bf16_accumulator")));
       }},
      {"planted.f16_accumulator", "agreement", "WithTwoTokensOrAVF16CannotHold",
       [](const Counterexample& cx, double) {
         // Shrinks to a sum that loses bits, or to one token, whose weight is 1: the accumulator then holds V
         // rounded to f16 once. That is Inf for V past 65504, and for an f32 V into an f32 output up to
         // 2^-12 of max |V| (24 significand bits rounded to 11), four times the f32 limit 2^-14.
         const Case& c = cx.cell.c;
         const bool f32_v = c.kv_dtype == DType::f32 && c.out_dtype == DType::f32;
         EXPECT_TRUE(max_len(c) >= 2 || cx.what.find(" Inf of ") != std::string::npos || f32_v) << cx.what;
         double rel_linf = 0;
         if (max_len(c) == 1 && f32_v && std::sscanf(cx.what.c_str(), "fail: rel_linf %lf", &rel_linf) == 1)
           EXPECT_LE(rel_linf, 0x1p-12) << "more than one rounding of V to f16: " << cx.what;
         EXPECT_TRUE(is_failure(repro_verdict(cx.cell, "planted.f16_accumulator")));
       }},
      {"planted.drop_last_token", "agreement", "WithTwoTokensOrMore",
       [](const Counterexample& cx, double) {
         EXPECT_GE(max_len(cx.cell.c), 2) << "seq_len 1 keeps its token: " << cx.cell.id();
         EXPECT_TRUE(is_failure(repro_verdict(cx.cell, "planted.drop_last_token")));
       }},
      {"planted.exp2_no_log2e", "agreement", "WithTwoTokensOrMore",
       [](const Counterexample& cx, double) {
         EXPECT_GE(max_len(cx.cell.c), 2) << "one token's softmax weight is 1 at any temperature: " << cx.cell.id();
         EXPECT_TRUE(is_failure(repro_verdict(cx.cell, "planted.exp2_no_log2e")));
       }},
      // Attention variants (issue 19): the neutral forms catch a window boundary off by one and sinks that do
      // not survive being "no sink".
      {"planted.window_off_by_one", "neutral-variants", "AtAWindowEqualToTheLongestSeqLen",
       [](const Counterexample& cx, double) {
         EXPECT_EQ(cx.cell.c.sliding_window, max_len(cx.cell.c)) << cx.cell.id();
         EXPECT_GE(max_len(cx.cell.c), 2) << "a window of 1 is read right: " << cx.cell.id();
         EXPECT_NE(cx.what.find("beyond tolerance"), std::string::npos) << cx.what;
         EXPECT_TRUE(is_failure(repro_verdict(cx.cell, "planted.window_off_by_one")));
       }},
      {"planted.sinks_f16", "neutral-variants", "WithSinksAtMinus1e30",
       [](const Counterexample& cx, double) {
         EXPECT_FALSE(cx.cell.c.sinks.is_default()) << cx.cell.id();
         EXPECT_EQ(cx.cell.c.sinks.resolve(cx.cell.c.num_heads).at(0), -1e30f) << cx.cell.id();
         EXPECT_EQ(cx.what.find("0 non-finite"), std::string::npos) << cx.what;
         EXPECT_EQ(repro_verdict(cx.cell, "planted.sinks_f16"), Verdict::poisoned);
       }},
      // The planted causes of a difference from the clean twin (judge/cause.hpp): within tolerance, so only a
      // property that compares runs sees them. tail-poison has no fresh processes (execute_cell without a
      // server), so it names the leak from its re-runs; `pacheck repro` forks a server and names it too.
      {"planted.nondeterministic", "determinism", "RunsOfOneCaseDiffer",
       [](const Counterexample& cx, double) {
         EXPECT_NE(cx.what.find("differs from the first run"), std::string::npos) << cx.what;
       }},
      {"planted.stateful", "determinism", "TheSecondRunOnAShapeDiffers",
       [](const Counterexample& cx, double) {
         EXPECT_NE(cx.what.find("differs from the first run"), std::string::npos) << cx.what;
       }},
      {"planted.tail_leak", "tail-poison", "StraddlingLengthAndNonZeroVPoisonIsVariant",
       [](const Counterexample& cx, double) {
         EXPECT_TRUE(cx.cell.c.straddles()) << cx.cell.id();
         EXPECT_NE(cx.cell.fault.target, Target::k) << cx.cell.id();
         EXPECT_NE(cx.cell.fault.poison, Poison::zero) << cx.cell.id();
         EXPECT_EQ(cx.what.rfind("variant", 0), 0u) << cx.what;
         EXPECT_EQ(repro_verdict(cx.cell, "planted.tail_leak"), Verdict::variant);
       }},
      // Output truncation: every element within an ULP, so only the bias check of agreement's judge sees it,
      // on a cell with enough 16-bit elements that need rounding for a one-way excess to be significant.
      {"planted.truncating_output", "agreement", "BiasedOnASixteenBitOutputOfEnoughElements",
       [](const Counterexample& cx, double) {
         EXPECT_NE(cx.cell.c.out_dtype, DType::f32) << "an f32 output is stored as computed: " << cx.cell.id();
         EXPECT_NE(cx.what.find("rounds toward zero"), std::string::npos) << cx.what;
         EXPECT_EQ(repro_verdict(cx.cell, "planted.truncating_output"), Verdict::biased);
       }},
      // Issue 18 (FlashInfer #941): NaN in another sequence's tail leaks through a chunk of pages shared
      // across the sequence boundary; only a batch can show it, and the output that goes bad is that of a
      // sequence other than the one whose slot holds the poison.
      {"planted.cross_seq_chunk", "tail-poison", "NonFiniteVPoisonInAnotherSequenceOfABatch",
       [](const Counterexample& cx, double) {
         EXPECT_GE(cx.cell.c.num_seqs(), 2) << cx.cell.id();
         EXPECT_NE(cx.cell.fault.target, Target::k) << cx.cell.id();
         EXPECT_TRUE(poison_is_nonfinite(cx.cell.fault.poison)) << cx.cell.id();
         EXPECT_TRUE(is_failure(repro_verdict(cx.cell, "planted.cross_seq_chunk")));
       }},
      // Issue 18 (FlashInfer #3130, llama.cpp #24912): the registered controls cpu.int32_offset and
      // cpu.uint32_offset compute block_id x block stride in 32 bits. The generators place one case in 16 at
      // high block ids past 2^31 and one in 16 past 2^32: agreement, tail-poison, paging-invariance and
      // batch-invariance see the wrong block only on such cases (int32 past 2^31, uint32 past 2^32), and the
      // other properties, which compare the kernel with itself on equally placed pools, hold (measured with
      // seed 5: determinism, gqa-expansion, exact-scaling, scale-folding, neutral-variants).
      // Issue 19: cpu.qlen_no_causal lets every query token of a sequence see the whole context (no causal
      // mask among the query tokens). The generators give one case in 8 several query tokens (from size 10);
      // agreement and tail-poison (which judges the poisoned cell against the oracle too) compare with the
      // oracle's causal rows: the other properties compare the kernel with itself, and its mistake is the same
      // in both runs.
      {"cpu.qlen_no_causal", "agreement", "WithSeveralQueryTokensAndTheReproFails",
       [](const Counterexample& cx, double) {
         EXPECT_GE(cx.cell.c.max_query_len(), 2) << cx.cell.id();
         EXPECT_TRUE(is_failure(repro_verdict(cx.cell, "cpu.qlen_no_causal"))) << cx.cell.id();
       }},
      {"cpu.qlen_no_causal", "tail-poison", "WithSeveralQueryTokensAndTheReproFails",
       [](const Counterexample& cx, double) {
         EXPECT_GE(cx.cell.c.max_query_len(), 2) << cx.cell.id();
         EXPECT_TRUE(is_failure(repro_verdict(cx.cell, "cpu.qlen_no_causal"))) << cx.cell.id();
       }},
      {"cpu.int32_offset", "agreement", "OnHighBlockIds", offset32_catch("cpu.int32_offset", 31)},
      {"cpu.int32_offset", "tail-poison", "OnHighBlockIds", offset32_catch("cpu.int32_offset", 31)},
      {"cpu.int32_offset", "paging-invariance", "OnHighBlockIds", offset32_catch("cpu.int32_offset", 31)},
      {"cpu.int32_offset", "batch-invariance", "OnHighBlockIds", offset32_catch("cpu.int32_offset", 31)},
      {"cpu.uint32_offset", "agreement", "OnBlockIdsPast2To32", offset32_catch("cpu.uint32_offset", 32)},
      {"cpu.uint32_offset", "tail-poison", "OnBlockIdsPast2To32", offset32_catch("cpu.uint32_offset", 32)},
      // paging-invariance sees cpu.uint32_offset only when its two pagings wrap different blocks past 2^32 (one
      // case in 16 is placed past 2^32, and not every second paging moves a block across the wrap): at the CI
      // seed it held 300 cases once the generators drew query tokens and the aiter layout (2026-12-06), and
      // caught it at case 138 of another seed; 1,000 cases.
      {"cpu.uint32_offset", "paging-invariance", "OnBlockIdsPast2To32", offset32_catch("cpu.uint32_offset", 32), 1000},
      {"cpu.uint32_offset", "batch-invariance", "OnBlockIdsPast2To32", offset32_catch("cpu.uint32_offset", 32)},
      // fp8 controls (issue 18 item 5): gen_case moves one case in 8 to an fp8 cache, half of those with per-slot
      // tables and a quarter with per-KV-head scales (over two KV heads where the GQA ratio is even), and
      // gen_fault_for poisons the per-slot tables' unwritten entries (region `scales`) half the time.
      {"cpu.slot_scale_unmasked", "tail-poison", "NonFiniteVScaleOfAnUnwrittenSlot",
       [](const Counterexample& cx, double) {
         const Cell& cell = cx.cell;
         EXPECT_TRUE(cell.c.v_scale.per_slot()) << cell.id();
         EXPECT_EQ(cell.fault.region, Region::scales) << cell.id();
         EXPECT_NE(cell.fault.target, Target::k) << cell.id();
         EXPECT_TRUE(poison_is_nonfinite(cell.fault.poison)) << cell.id();
         EXPECT_TRUE(cell.c.straddles()) << cell.id();
         EXPECT_EQ(repro_verdict(cell, "cpu.slot_scale_unmasked"), Verdict::poisoned) << cell.id();
       },
       // Its trigger is about 1 case in 200 (per-slot tables, scales region, V, a non-finite poison, a
       // straddling length): 300 cases caught it at 8 seeds of 10 (seeds 1 to 10, no shrinking), 1,000 at 12 of
       // 12 (first at case 25 to 865).
       1000},
      {"cpu.fp8_head0_scale", "agreement", "WithPerKvHeadScalesAndSeveralKvHeads", fp8_catch("cpu.fp8_head0_scale", true)},
      {"cpu.fp8_head0_scale", "tail-poison", "WithPerKvHeadScalesAndSeveralKvHeads", fp8_catch("cpu.fp8_head0_scale", true)},
      {"cpu.fp8_scale_fault", "agreement", "OnAnFp8CacheWithAScaleOtherThan1", fp8_catch("cpu.fp8_scale_fault", false)},
      {"cpu.fp8_scale_fault", "tail-poison", "OnAnFp8CacheWithAScaleOtherThan1", fp8_catch("cpu.fp8_scale_fault", false)},
      // scale-folding's own fp8 cases (one in three) multiply k_scale by 2^-e, which the fault mishandles.
      {"cpu.fp8_scale_fault", "scale-folding", "OnAnFp8Cache",
       [](const Counterexample& cx, double) { EXPECT_TRUE(is_fp8(cx.cell.c.kv_dtype)) << cx.cell.id(); }},
      // Issue 45: logits far from zero. The generators give one case in 8 from size 10 an offset distribution
      // (far_below, far_above, mixed_scales), and the extreme distribution a quarter of the cases.
      {"cpu.sentinel_max", "agreement", "OnLogitsFarBelowZero", offset_catch("cpu.sentinel_max", true)},
      {"cpu.sentinel_max", "tail-poison", "OnLogitsFarBelowZero", offset_catch("cpu.sentinel_max", true)},
      {"cpu.softmax_no_max", "agreement", "OnLogitsFarFromZero", offset_catch("cpu.softmax_no_max", false)},
      {"cpu.softmax_no_max", "tail-poison", "OnLogitsFarFromZero", offset_catch("cpu.softmax_no_max", false)},
      // Both outputs NaN where the logits overflow exp(): the expansion is compared too and fails (NaN).
      {"cpu.softmax_no_max", "gqa-expansion", "OnLogitsFarFromZero", offset_catch("cpu.softmax_no_max", false)},
      {"cpu.carried_max", "agreement", "InABatchOfSequencesFarApart", batch_catch("cpu.carried_max", true)},
      {"cpu.carried_max", "tail-poison", "InABatchOfSequencesFarApart", batch_catch("cpu.carried_max", true)},
      {"cpu.carried_max", "batch-invariance", "InABatchOfSequencesFarApart", batch_catch("cpu.carried_max", false)},
      {"cpu.carried_max", "gqa-expansion", "InABatchOfSequencesFarApart", batch_catch("cpu.carried_max", false)},
      // Per-slot tables indexed by the logical block by an NHD/HND kernel: a per-slot case whose pool puts a
      // block away from its logical index.
      {"cpu.slot_scale_nhd", "agreement", "WithPerSlotTables",
       [](const Counterexample& cx, double) {
         EXPECT_TRUE(cx.cell.c.k_scale.per_slot()) << cx.cell.id();
         EXPECT_TRUE(is_failure(repro_verdict(cx.cell, "cpu.slot_scale_nhd"))) << cx.cell.id();
       }},
      {"cpu.slot_scale_nhd", "tail-poison", "WithPerSlotTables",
       [](const Counterexample& cx, double) { EXPECT_TRUE(cx.cell.c.k_scale.per_slot()) << cx.cell.id(); }},
      // Its scales follow the logical block, its K and V the physical one: another paging of the same case, or a
      // sequence run alone rather than in a batch, moves its blocks to other physical ids but leaves the table
      // rows it reads where they were, pairing K and V with other scales.
      {"cpu.slot_scale_nhd", "paging-invariance", "WithPerSlotTables",
       [](const Counterexample& cx, double) {
         EXPECT_TRUE(cx.cell.c.k_scale.per_slot()) << cx.cell.id();
         EXPECT_NE(cx.what.find("under another paging"), std::string::npos) << cx.what;
       }},
      {"cpu.slot_scale_nhd", "batch-invariance", "WithPerSlotTablesInABatch",
       [](const Counterexample& cx, double) {
         EXPECT_TRUE(cx.cell.c.k_scale.per_slot()) << cx.cell.id();
         EXPECT_GE(cx.cell.c.num_seqs(), 2) << cx.cell.id();
         EXPECT_NE(cx.what.find("differs bitwise from the batch"), std::string::npos) << cx.what;
       }},
      // e4m3fn codes of exponent 15: with_fp8's top-binade form (one fp8 case in 8, always e4m3fn), or a per-slot
      // table's smallest scales on extreme K. About 1 case in 100: 300 cases caught it at 12 seeds of 12 (seeds 13
      // to 24, first at case 10 to 181); 1,000 cases for margin (while the form took any fp8 encoding, about 1
      // case in 200, 1,000 cases missed it at 1 seed of 12).
      {"cpu.e4m3_ieee", "agreement", "OnAnE4m3fnCodeOfTheTopBinade",
       [](const Counterexample& cx, double) {
         EXPECT_EQ(cx.cell.c.kv_dtype, DType::fp8_e4m3fn) << cx.cell.id();
         EXPECT_TRUE(is_failure(repro_verdict(cx.cell, "cpu.e4m3_ieee"))) << cx.cell.id();
       },
       1000},
      // tail-poison judges its cell against the oracle too: the codes of the top binade decode to NaN whatever
      // the poison (the clean cell fails as well).
      {"cpu.e4m3_ieee", "tail-poison", "TheCellFailsOnAnE4m3fnCodeOfTheTopBinade",
       [](const Counterexample& cx, double) {
         EXPECT_EQ(cx.cell.c.kv_dtype, DType::fp8_e4m3fn) << cx.cell.id();
         Cell clean = cx.cell;
         clean.fault = FaultSpec{};
         EXPECT_TRUE(is_failure(repro_verdict(clean, "cpu.e4m3_ieee"))) << "the clean cell fails too: " << clean.id();
       },
       1000},
      // State across calls: determinism runs a case, then another of the same shape (logits far above zero),
      // then the first again, all on the same buffers, and the other once more on buffers of its own.
      {"cpu.replay_output", "determinism", "TheOtherCaseGetsTheFirstCasesOutput",
       [](const Counterexample& cx, double) {
         EXPECT_NE(cx.what.find("the other case, run on the first case's buffers"), std::string::npos) << cx.what;
       }},
      {"cpu.stale_max", "determinism", "ARunAfterLogitsFarAboveZero",
       [](const Counterexample& cx, double) {
         EXPECT_NE(cx.what.find("a run after another case on the same buffers"), std::string::npos) << cx.what;
         EXPECT_NE(cx.message.find("dist=far_above"), std::string::npos) << cx.message;
       }},
      // MLA controls (kernels/cpu/mla_reference.cpp, mla_reads.cpp): the generators draw an MLA kernel MLA cases
      // (gen_mla_case). The logit and V-offset faults are beyond tolerance of the oracle on normal and uniform
      // rows; the other properties compare the kernel with itself and hold.
      {"cpu.mla_fixed_scale", "agreement", "OnAnMlaCaseOfTwoKeysOrMore", mla_oracle_catch("cpu.mla_fixed_scale", true)},
      {"cpu.mla_fixed_scale", "tail-poison", "TheCellFailsOnAnMlaCase", mla_oracle_catch("cpu.mla_fixed_scale", true)},
      {"cpu.mla_rope_dropped", "agreement", "OnAnMlaCaseOfTwoKeysOrMore", mla_oracle_catch("cpu.mla_rope_dropped", true)},
      {"cpu.mla_rope_dropped", "tail-poison", "TheCellFailsOnAnMlaCase", mla_oracle_catch("cpu.mla_rope_dropped", true)},
      {"cpu.mla_rope_unscaled", "agreement", "OnAnMlaCaseOfTwoKeysOrMore",
       mla_oracle_catch("cpu.mla_rope_unscaled", true)},
      {"cpu.mla_rope_unscaled", "tail-poison", "TheCellFailsOnAnMlaCase", mla_oracle_catch("cpu.mla_rope_unscaled", true)},
      {"cpu.mla_v_offset", "agreement", "OnAnMlaCase", mla_oracle_catch("cpu.mla_v_offset", false)},
      {"cpu.mla_v_offset", "tail-poison", "TheCellFailsOnAnMlaCase", mla_oracle_catch("cpu.mla_v_offset", false)},
      // NaN in the V prefix of an unwritten slot multiplied by p = 0: only tail-poison writes poison. v_tail reads
      // its own final block's tail (a straddling length); packed_tile another sequence's slots through the
      // batch's packed page list (FlashInfer #942; in 10 seeds of 300 cases, caught at case 30 to 136).
      {"cpu.mla_v_tail", "tail-poison", "StraddlingLengthAndNonFiniteVPrefixPoison",
       [](const Counterexample& cx, double seconds) {
         EXPECT_TRUE(cx.cell.c.straddles()) << cx.cell.id();
         EXPECT_EQ(cx.cell.c.num_seqs(), 1) << "not shrunk: " << cx.cell.id();
         EXPECT_LT(seconds, 60.0);
         mla_read_catch("cpu.mla_v_tail", false)(cx, seconds);
       }},
      {"cpu.mla_packed_tile", "tail-poison", "NonFiniteVPrefixPoisonInAnotherSequenceOfABatch",
       mla_read_catch("cpu.mla_packed_tile", true)},
  };
  return rows;
}

/// Registered controls whose other properties are held at fewer cases than RapidCheck's max_success: outside
/// the cells their fault needs (fp8 caches) they compute what cpu.reference does, which holds every property
/// at the full count; a few cases keep the check that they are otherwise honest (and CI's time). The MLA
/// controls compute what cpu.mla_reference does but for their one change (kernels/cpu/mla_reference.cpp,
/// mla_reads.cpp), and the properties they hold compare them with themselves: 20 cases each.
inline int control_hold_cases(const std::string& kernel) {
  for (const char* k : {"cpu.slot_scale_unmasked", "cpu.fp8_head0_scale", "cpu.fp8_scale_fault", "cpu.sentinel_max",
                        "cpu.softmax_no_max", "cpu.carried_max", "cpu.p_f16_ftz", "cpu.e4m3_ieee", "cpu.slot_scale_nhd"})
    if (kernel == k) return 60;
  const KernelPtr k = Registry::global().find(kernel);
  if (k && k->takes_mla() && k->is_negative_control()) return 20;
  return 0;
}

/// Honest designs (fault-classes.md section 9) that fail an opt-in property where their design says they
/// do: an unnormalised fp32 sum of p x V overflows when V is near the bf16/f32 limit (dist=overflow), so
/// the overflow property names their documented range, not a fault. Rows as catches(); each must name a
/// registered kernel that is no negative control and an opt-in property (Controls.EveryControlIsExpected).
inline const std::vector<Catch>& design_limits() {
  auto overflows = [](const std::string& kernel) {
    return [kernel](const Counterexample& cx, double) {
      const Case& c = cx.cell.c;
      EXPECT_EQ(c.dist, Dist::overflow) << c.id();
      // f16 V (|V| <= 65504) cannot overflow an fp32 sum of a few thousand tokens: the range that gives out
      // is bf16's or f32's.
      EXPECT_NE(c.kv_dtype, DType::f16) << c.id();
      EXPECT_NE(c.out_dtype, DType::f16) << c.id();
      EXPECT_EQ(cx.what.rfind("overflow: ", 0), 0u) << cx.what;
      EXPECT_EQ(repro_verdict(cx.cell, kernel), Verdict::overflow);
    };
  };
  static const std::vector<Catch> rows{
      {"cpu.online", "overflow", "UnnormalisedAccumulatorAtTheBf16OrF32Limit", overflows("cpu.online")},
      {"cpu.two_pass", "overflow", "UnnormalisedSumAtTheBf16OrF32Limit", overflows("cpu.two_pass")},
  };
  return rows;
}

/// A property a planted kernel must hold for `cases` cases: its fault is one only another property sees.
struct Hold {
  std::string kernel;
  std::string property;  ///< its name in property_table() ("agreement")
  int cases;
};
inline const std::vector<Hold>& planted_holds() {
  static const std::vector<Hold> rows{
      {"planted.physical_block_order", "agreement", 100},
      {"planted.launch_order", "agreement", 100},
      {"planted.batch_split", "agreement", 100},
      {"planted.nondeterministic", "agreement", 100},
      {"planted.stateful", "agreement", 100},
      {"planted.tail_leak", "agreement", 100},
      {"planted.cross_seq_chunk", "agreement", 100},
  };
  return rows;
}

/// Opt-in properties that registered kernels must hold (cases 0: RapidCheck's max_success): the designs that
/// normalise before P.V, so no intermediate exceeds max|V|.
inline const std::vector<Hold>& opt_in_holds() {
  static const std::vector<Hold> rows{
      {"cpu.reference", "overflow", 0},
      {"cpu.half_products", "overflow", 0},
  };
  return rows;
}

/// Negative controls whose fault no generated cell can show, and why.
struct Unreached {
  std::string kernel;
  std::string why;
};
inline const std::vector<Unreached>& unreached() {
  static const std::vector<Unreached> rows{
      // Attention-variant controls (issue 19): caught on suites/variants.toml and gate (tests/test_variants.cpp,
      // selftest); the generators draw no attention variant, and neutral-variants draws only neutral ones.
      {"cpu.softcap_ratio",
       "its fault needs a logit soft cap and logits beyond 88.7 x the cap; the generators draw no soft cap, and "
       "neutral-variants' cap is at least 1e4 x every |logit|"},
      {"cpu.window_scratch",
       "its fault needs a sliding window shorter than the context by a 256-token partition; the generators draw "
       "no window, and neutral-variants' windows cover the whole context"},
      // Issue 45: P to f16 with flush-to-zero needs most of a row's weight below 2^-14: f16 P.V at contexts
      // past 16K with a flat softmax (gate's 20,000- and 32,768-token cells); the work bound keeps the
      // generated f16 cases far shorter.
      {"cpu.p_f16_ftz",
       "its fault needs f16 weights below 2^-14 carrying the mass of a row: a flat softmax past 16K tokens; the "
       "generated f16 cases are far shorter under the work bound"},
  };
  return rows;
}

/// True when catches() has a row for (kernel, the property named `property`).
inline bool caught(const std::string& kernel, std::string_view property) {
  return std::any_of(catches().begin(), catches().end(),
                     [&](const Catch& c) { return c.kernel == kernel && c.property == property; });
}

/// How GoogleTest prints a row: "planted.gqa_modulo agreement" (not the bytes of the struct).
inline void PrintTo(const Catch& c, std::ostream* os) { *os << c.kernel << " " << c.property; }
inline void PrintTo(const Hold& h, std::ostream* os) {
  *os << h.kernel << " " << h.property << (h.cases ? " x" + std::to_string(h.cases) : "");
}

/// "cpu.vector_v" + "tail-poison" -> "cpu_vector_v_tail_poison": a GoogleTest parameter name.
inline std::string param_name(const std::string& kernel, std::string_view property, const std::string& suffix = {}) {
  std::string s = kernel + "_" + std::string(property) + (suffix.empty() ? "" : "_" + suffix);
  std::replace_if(s.begin(), s.end(), [](char ch) { return !std::isalnum(static_cast<unsigned char>(ch)); }, '_');
  return s;
}

}  // namespace pacheck::prop::test
