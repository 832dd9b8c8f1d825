// Every CPU kernel of the registry (kernels/cpu/cpu_kernels.cpp) against the oracle, on the CPU backend. The
// parameter lists come from Registry::global() (tests/kernel_checks.hpp): a kernel added to the registration
// table is tested here without editing this file; an honest kernel must pass every cell, a negative control
// must fail exactly the cells its expected_failures() names.
//
// What each test proves, for every CPU kernel:
//  - ExtremeVAtItsBoundDoesNotOverflow: the inputs that once broke them (found by the property tests).
//  - TailPoisonBitwiseUnchangedOrCaughtExactly: NaN, +-Inf, big and max-finite poison in K, V and K+V, in the
//    final block's tail and in every unwritten slot, in each layout the kernel reads, at straddling and
//    aligned lengths, f32/f16/bf16: honest kernels stay bitwise unchanged; cpu.vector_v is caught exactly on
//    the cells poisons_v_tail() names.
//  - CpuRows.RowReadersEqualTheElementReadersBitForBit: the row readers the kernels' inner loops use return
//    what the element readers do, bit for bit, in every layout and cache dtype.
//  - Fp8CachesAgreeOrAreCaughtExactly: the three fp8 encodings with per-head and per-tensor scales, clean and
//    under tail poison: honest kernels agree with the oracle, the fp8 scale controls fail exactly on the
//    cells where their wrong scale is material.
// And, for the checks themselves: a kernel registered only in this test binary (cpu.split_kv_p64) is picked
// up by the parameter lists, and the checks fail a kernel that hides its fault or claims one it lacks.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/case.hpp"
#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_common.hpp"
#include "kernels/kernel.hpp"
#include "oracle/tensors.hpp"
#include "paging/pager.hpp"
#include "tests/kernel_checks.hpp"

namespace pacheck {
namespace {

using kernel_checks::Count;
using kernel_checks::Kinds;

// A kernel registered in this test binary only, as a new row of the registration table would be: a split-KV
// kernel with 64-token partitions (several partitions at every length below, so its merge runs everywhere).
// It runs in every parameterised test below because the parameter lists are read from the registry.
const bool kExtraKernelRegistered = [] {
  Registry::global().add(make_cpu_split_kv(64));
  return true;
}();

Backend& cpu_backend() {
  static const std::unique_ptr<Backend> b = make_cpu_backend();
  return *b;
}

TEST(CpuKernels, ParameterListsComeFromTheRegistry) {
  ASSERT_TRUE(kExtraKernelRegistered);
  const std::vector<std::string> all = kernel_checks::registered("cpu", Kinds::all);
  const std::vector<std::string> honest = kernel_checks::registered("cpu", Kinds::honest);
  const std::vector<std::string> controls = kernel_checks::registered("cpu", Kinds::controls);
  EXPECT_EQ(all.size(), honest.size() + controls.size());
  EXPECT_FALSE(honest.empty());
  EXPECT_FALSE(controls.empty());
  EXPECT_NE(std::find(honest.begin(), honest.end(), "cpu.split_kv_p64"), honest.end());
  for (const std::string& name : controls) EXPECT_TRUE(Registry::global().find(name)->is_negative_control()) << name;
  for (const std::string& name : honest) EXPECT_FALSE(Registry::global().find(name)->is_negative_control()) << name;
}

class CpuKernel : public ::testing::TestWithParam<std::string> {};

// dist=extreme makes many keys tie at the max logit with bf16/f32 V as large as FLT_MAX / (2 seq_len): the
// cells that once overflowed an unnormalised fp32 sum of p x V (when V reached 1.7e38, now dist=overflow,
// opt-in) must stay finite on every honest design, normalised or not (docs/PROPERTIES.md, Domains); ctx1500
// gives cpu.split_kv three partitions and cpu.split_kv_lse six, so their merges are exercised too.
TEST_P(CpuKernel, ExtremeVAtItsBoundDoesNotOverflow) {
  const KernelPtr k = kernel_checks::registered_kernel(GetParam());
  ASSERT_TRUE(k);
  Count count;
  for (const char* id : {"h1/1 d32 bs1 bf16 ctx511 vllm seed40952 dist=extreme spare=1 padcols=0",
                         "h1/1 d32 bs1 bf16 ctx1500 vllm seed40952 dist=extreme spare=1 padcols=0",
                         "h2/1 d64 bs16 f32 ctx1500,77 vllm seed3 dist=extreme"}) {
    const CaseData data = prepare_case(parse_case_id(id), RunOptions{});
    const CellResult r = kernel_checks::expect_clean_cell(*k, cpu_backend(), data, &count);
    if (!r.expected_fail) {
      EXPECT_EQ(r.metrics.inf_count, 0) << id;
    }
  }
  kernel_checks::expect_ran(*k, count, "the extreme-V cells");
}

/// h4/2 d64 cases at block_size 16 in `layout`: one straddling length, one aligned, and a batch of a
/// one-token, a one-short-of-a-block and a straddling multi-block sequence.
std::vector<Case> poison_cases(DType dt, Layout layout) {
  std::vector<Case> cases;
  for (const std::vector<int>& lens : {std::vector<int>{517}, std::vector<int>{512}, std::vector<int>{1, 15, 130}}) {
    Case c;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_size = 64;
    // aiter at 32-token blocks, where its shuffled V differs from vllm's (at 16 they are the same bytes).
    c.block_size = layout == Layout::aiter ? 32 : 16;
    c.q_dtype = c.kv_dtype = c.out_dtype = dt;
    c.seq_lens = lens;
    c.layout = layout;
    cases.push_back(c);
  }
  return cases;
}

TEST_P(CpuKernel, TailPoisonBitwiseUnchangedOrCaughtExactly) {
  const KernelPtr k = kernel_checks::registered_kernel(GetParam());
  ASSERT_TRUE(k);
  Count count;
  for (Layout layout : k->layouts())
    for (DType dt : {DType::bf16, DType::f16, DType::f32})
      for (const Case& c : poison_cases(dt, layout)) {
        if (!k->supports(c).ok) continue;
        SCOPED_TRACE(c.id());
        const CaseData data = prepare_case(c, RunOptions{});
        kernel_checks::expect_poison_sweep(*k, cpu_backend(), data,
                                           {Poison::nan, Poison::pinf, Poison::ninf, Poison::big, Poison::max_finite},
                                           &count);
      }
  kernel_checks::expect_ran(*k, count, "the tail-poison cells");
  // The V-tail controls (cpu.vector_v) meet their fault here; the fp8 scale controls fail only fp8 cells.
  if (count.must_fail > 0) kernel_checks::expect_control_caught(*k, count, "the tail-poison cells");
}

/// An fp8 case in `layout` with per-KV-head scales K 0.3 -> 3 and V 3 -> 0.3 (the fp8 suite's), or per-tensor
/// scales K 0.5, V 2 with `per_tensor`.
Case fp8_case(DType kv, DType qo, Layout layout, bool per_tensor) {
  Case c = poison_cases(qo, layout)[0];
  c.num_heads = 8;
  c.num_kv_heads = 4;
  c.kv_dtype = kv;
  c.seq_lens = {517, 33};
  if (per_tensor) {
    c.k_scale = KvScale{{0.5f}, std::nullopt};
    c.v_scale = KvScale{{2.0f}, std::nullopt};
  } else {
    c.k_scale.range = std::make_pair(0.3f, 3.0f);
    c.v_scale.range = std::make_pair(3.0f, 0.3f);
  }
  return c;
}

// cpu.fp8_head0_scale must fail the per-head cells and pass the per-tensor ones (every head has head 0's
// scale there); cpu.fp8_scale_fault fails both (its last head's scales are 1, never the right ones here).
TEST_P(CpuKernel, Fp8CachesAgreeOrAreCaughtExactly) {
  const KernelPtr k = kernel_checks::registered_kernel(GetParam());
  ASSERT_TRUE(k);
  Count count;
  for (DType kv : {DType::fp8_e4m3fn, DType::fp8_e4m3fnuz, DType::fp8_e5m2})
    for (DType qo : {DType::bf16, DType::f16})
      for (bool per_tensor : {false, true}) {
        const Case c = fp8_case(kv, qo, k->layouts().front(), per_tensor);
        if (!k->supports(c).ok) continue;
        SCOPED_TRACE(c.id());
        const CaseData data = prepare_case(c, RunOptions{});
        kernel_checks::expect_poison_sweep(*k, cpu_backend(), data, {Poison::nan, Poison::pinf, Poison::max_finite},
                                           &count);
      }
  kernel_checks::expect_ran(*k, count, "the fp8 cells");
  // The fp8 controls meet their fault here; another control's fault (cpu.fixed_scale's) is not an fp8 one.
  if (count.must_fail > 0 || k->name().starts_with("cpu.fp8_"))
    kernel_checks::expect_control_caught(*k, count, "the fp8 cells");
}

// Issue 18: every kernel computes with the softmax scale it is passed. On the model-derived scales of
// suites/scales.toml (Gemma-3's 168^-0.5 and Gemma-2's 144^-0.5 at head 128, Granite's 1/head_size) and
// twice the default, in every distribution the generators draw, an honest kernel agrees with the oracle and
// stays bitwise clean under tail poison; cpu.fixed_scale (1/sqrt(head_size) instead) fails exactly the cells
// its expected_failures() names: those of 16 or more tokens with normal or uniform values.
TEST_P(CpuKernel, SoftmaxScalesAgreeOrAreCaughtExactly) {
  const KernelPtr k = kernel_checks::registered_kernel(GetParam());
  ASSERT_TRUE(k);
  Count count;
  for (int head : {64, 128})
    for (float scale : {1.0f / std::sqrt(168.0f), 1.0f / std::sqrt(144.0f), 1.0f / static_cast<float>(head),
                        2.0f / std::sqrt(static_cast<float>(head))})
      for (Dist dist : {Dist::normal, Dist::uniform, Dist::peaked, Dist::extreme}) {
        Case c = poison_cases(DType::bf16, k->layouts().front())[head == 64 ? 0 : 2];
        c.head_size = head;
        c.dist = dist;
        c.scale = scale;
        if (!k->supports(c).ok) continue;
        // Gemma-2's scale at head 128 is 1.06 x the default: uniform cells there are between the ratios where
        // cpu.fixed_scale always passes and always fails (reference.cpp, fixed_scale_fails).
        const double ratio = std::sqrt(static_cast<double>(head)) * scale;
        if (k->name() == "cpu.fixed_scale" && dist == Dist::uniform && ratio > 1 / 1.1 && ratio < 1.1) continue;
        SCOPED_TRACE(c.id());
        const CaseData data = prepare_case(c, RunOptions{});
        kernel_checks::expect_poison_sweep(*k, cpu_backend(), data, {Poison::nan}, &count);
      }
  kernel_checks::expect_ran(*k, count, "the softmax-scale cells");
  if (count.must_fail > 0 || k->name() == "cpu.fixed_scale")
    kernel_checks::expect_control_caught(*k, count, "the softmax-scale cells");
}

// Issue 18: physical block ids whose element offset passes 2^31 (int32) and 2^32 (uint32) in a sparse pool,
// at a straddling and an aligned length, clean and under NaN in the tail and in every live unwritten slot.
// An honest kernel (64-bit offsets) agrees and stays bitwise clean; cpu.int32_offset fails every such cell
// and cpu.uint32_offset exactly those past 2^32 (expected_failures()); the other controls as ever.
TEST_P(CpuKernel, HighBlockIdsAgreeOrAreCaughtExactly) {
  const KernelPtr k = kernel_checks::registered_kernel(GetParam());
  ASSERT_TRUE(k);
  Count count;
  for (int hiblk : {31, 32})
    for (int len : {100, 96}) {
      Case c;
      c.num_heads = 4;
      c.num_kv_heads = 2;
      c.head_size = 64;
      c.block_size = 16;
      c.seq_lens = {len, 37};
      c.kv_dtype = c.q_dtype = c.out_dtype = hiblk == 31 ? DType::bf16 : DType::f16;
      c.layout = k->layouts().front();
      c.high_block_ids = hiblk;
      if (!k->supports(c).ok) continue;
      SCOPED_TRACE(c.id());
      const CaseData data = prepare_case(c, RunOptions{});
      ASSERT_TRUE(data.cache.sparse());
      kernel_checks::expect_poison_sweep(*k, cpu_backend(), data, {Poison::nan}, &count);
    }
  kernel_checks::expect_ran(*k, count, "the high-block-id cells");
  if (count.must_fail > 0 || k->name().find("32_offset") != std::string::npos)
    kernel_checks::expect_control_caught(*k, count, "the high-block-id cells");
}

INSTANTIATE_TEST_SUITE_P(All, CpuKernel, ::testing::ValuesIn(kernel_checks::registered("cpu", Kinds::all)),
                         kernel_checks::kernel_param_name);

/// `inner` under another name, claiming the negative-control flag `expected` instead of its own.
class Relabelled final : public Kernel {
 public:
  Relabelled(KernelPtr inner, std::optional<std::function<bool(const Cell&)>> expected)
      : inner_(std::move(inner)), expected_(std::move(expected)) {}
  std::string name() const override { return "test.relabelled_" + inner_->name(); }
  std::string description() const override { return inner_->description(); }
  pacheck_device device() const override { return inner_->device(); }
  Support supports(const Case& c) const override { return inner_->supports(c); }
  void run(const pacheck_kernel_args& a) const override { inner_->run(a); }
  std::optional<std::function<bool(const Cell&)>> expected_failures() const override { return expected_; }

 private:
  KernelPtr inner_;
  std::optional<std::function<bool(const Cell&)>> expected_;
};

/// cpu.reference handed the aiter cache as if it were vllm's: the value cache addressed with the vllm
/// formula ([n, G, D, B]) over the same bytes (key cache unchanged, it is vllm's). A kernel that ignores
/// the shuffled V layout (seed 002) in this way.
class VllmReadsAiter final : public Kernel {
 public:
  std::string name() const override { return "test.vllm_reads_aiter"; }
  std::string description() const override { return "reads the aiter V cache with vllm's V formula"; }
  pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
  Support supports(const Case&) const override { return Support::yes(); }
  void run(const pacheck_kernel_args& a) const override {
    pacheck_kernel_args b = a;
    const int x = static_cast<int>(16 / dtype_size(static_cast<DType>(a.kv_dtype)));
    const CacheStrides st = make_strides(PACHECK_LAYOUT_VLLM, a.num_kv_heads, a.head_size, a.block_size, x);
    b.layout = PACHECK_LAYOUT_VLLM;
    for (int i = 0; i < 5; ++i) b.v_strides[i] = st.v[i];
    Registry::global().find("cpu.reference")->run(b);
  }
};

// The aiter layout's check can fail: a kernel that reads its V with vllm's formula passes at 16-token blocks
// (the same bytes, as seed 002 relies on) and fails at 32 and 64, where the shuffled V puts other tokens
// there.
TEST(CpuKernelChecks, AiterVReadAsVllmPassesAtBlock16AndFailsAbove) {
  const VllmReadsAiter k;
  for (int bs : {16, 32, 64}) {
    Case c = poison_cases(DType::bf16, Layout::aiter)[0];
    c.block_size = bs;
    const CaseData data = prepare_case(c, RunOptions{});
    const RawRun r = run_kernel_once(k, cpu_backend(), data, data.cache);
    const CellResult res = judge(Cell{c, FaultSpec{}}, k, data.ref, data.emulation_rel_linf, r, nullptr, Tolerance{});
    if (bs == 16) EXPECT_EQ(res.verdict, Verdict::pass) << c.id() << ": " << res.detail;
    else EXPECT_TRUE(is_failure(res.verdict)) << c.id() << ": " << verdict_name(res.verdict);
  }
}

/// The messages of the failures `check` reports, intercepted: they do not fail the calling test.
template <class F>
std::vector<std::string> failures_of(F&& check) {
  ::testing::TestPartResultArray results;
  {
    const ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
    check();
  }
  std::vector<std::string> messages;
  for (int i = 0; i < results.size(); ++i) messages.push_back(results.GetTestPartResult(i).message());
  return messages;
}

// The checks can fail: cpu.vector_v's fault passed off as an honest kernel is reported on the 4 cells where
// NaN reaches the V tail (V and K+V, at the tail and everywhere), its output "poisoned" where it should be
// unchanged; cpu.vector_v_masked passed off as a V-tail control is reported blind on the same 4 cells.
TEST(CpuKernelChecks, FailAKernelThatHidesItsFaultOrClaimsOneItLacks) {
  const CaseData data = prepare_case(poison_cases(DType::bf16, Layout::vllm)[0], RunOptions{});
  const Relabelled hidden(Registry::global().find("cpu.vector_v"), std::nullopt);
  Count count;
  const std::vector<std::string> hidden_failures =
      failures_of([&] { kernel_checks::expect_poison_sweep(hidden, cpu_backend(), data, {Poison::nan}, &count); });
  EXPECT_EQ(hidden_failures.size(), 4u);
  for (const std::string& m : hidden_failures) EXPECT_NE(m.find("poisoned"), std::string::npos) << m;

  const Relabelled claimed(Registry::global().find("cpu.vector_v_masked"),
                           std::function<bool(const Cell&)>(poisons_v_tail));
  Count claimed_count;
  const std::vector<std::string> claimed_failures = failures_of(
      [&] { kernel_checks::expect_poison_sweep(claimed, cpu_backend(), data, {Poison::nan}, &claimed_count); });
  EXPECT_EQ(claimed_failures.size(), 4u);
  for (const std::string& m : claimed_failures) EXPECT_NE(m.find("negative control blind"), std::string::npos) << m;
  EXPECT_EQ(claimed_count.must_fail, 4);
  EXPECT_EQ(claimed_count.failed, 0);
}

// SeqView's row readers (k_row, v_row: what the CPU kernels' inner loops read) against its element readers
// (k, v), bit for bit, over every layout, the 32- and 16-bit caches and fp8 with per-head and per-slot
// scales, every token and KV head including the final block's tail. The kernels' outputs are unchanged by
// the row readers only if this holds.
TEST(CpuRows, RowReadersEqualTheElementReadersBitForBit) {
  int combos = 0;
  for (Layout layout : {Layout::vllm, Layout::nhd, Layout::hnd, Layout::aiter})
    for (DType kv : {DType::f32, DType::f16, DType::bf16, DType::fp8_e4m3fn, DType::fp8_e5m2}) {
      Case c;
      c.num_heads = 4;
      c.num_kv_heads = 2;
      c.head_size = 64;
      c.block_size = 16;
      c.seq_lens = {37, 5};
      c.layout = layout;
      c.kv_dtype = kv;
      c.q_dtype = c.out_dtype = DType::bf16;
      if (is_fp8(kv)) {
        c.k_scale.slot = std::pair{0.25f, 4.0f};
        c.v_scale.values = {1.7f, 0.4f};
      }
      try {
        c.validate();
      } catch (const CaseError&) {
        continue;  // a layout that does not take this dtype
      }
      const PagedCache pc = page(c, generate(c));
      std::vector<float> out(static_cast<std::size_t>(c.num_seqs()) * c.num_heads * c.head_size);
      const pacheck_kernel_args a =
          make_args(c, pc, nullptr, pc.key_cache.data(), pc.value_cache.data(), pc.block_tables.data(), pc.seq_lens.data(),
                    out.data(), pc.k_per_head ? pc.k_scales.data() : nullptr, pc.v_per_head ? pc.v_scales.data() : nullptr,
                    nullptr, nullptr, nullptr, pc.k_slot_scales.empty() ? nullptr : pc.k_slot_scales.data(),
                    pc.v_slot_scales.empty() ? nullptr : pc.v_slot_scales.data());
      const cpu::Scales sc(a);
      std::vector<float> row(static_cast<std::size_t>(c.head_size));
      int differ = 0;
      for (int s = 0; s < c.num_seqs(); ++s) {
        const cpu::SeqView sv{a, s, cpu::pack_x(a), sc};
        const int blocks = (c.seq_lens[s] + c.block_size - 1) / c.block_size;
        cpu::dispatch_kv(a, [&]<DType KV>() {
          for (int t = 0; t < blocks * c.block_size; ++t)  // the tail slots too, as cpu.vector_v reads them
            for (int g = 0; g < c.num_kv_heads; ++g) {
              sv.k_row<KV>(t, g, row.data(), c.head_size);
              for (int d = 0; d < c.head_size; ++d)
                differ += std::bit_cast<std::uint32_t>(row[d]) != std::bit_cast<std::uint32_t>(sv.k<KV>(t, g, d));
              sv.v_row<KV>(t, g, row.data(), c.head_size);
              for (int d = 0; d < c.head_size; ++d)
                differ += std::bit_cast<std::uint32_t>(row[d]) != std::bit_cast<std::uint32_t>(sv.v<KV>(t, g, d));
            }
        });
      }
      EXPECT_EQ(differ, 0) << c.id();
      ++combos;
    }
  EXPECT_GE(combos, 16) << "every layout with the 32- and 16-bit caches, and fp8 where the layout takes it";
}

}  // namespace
}  // namespace pacheck
