// TF32 declarations (issue 16): a kernel whose fp32 dots read TF32 operands is judged against tf32_limit()
// on f32 outputs when it declares so (Kernel::tf32_products, PACHECK_KERNEL_TF32, --tf32), and an f32
// failure of TF32's size says so in its detail when it does not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "exec/runner.hpp"
#include "exec_fixtures.hpp"
#include "judge/comparator.hpp"

namespace pacheck {
namespace {

/// cpu.tf32's arithmetic without its declaration: what a Triton kernel with the default fp32 tl.dot is
/// until its author declares TF32.
class UndeclaredTf32 final : public Kernel {
 public:
  std::string name() const override { return "test.undeclared_tf32"; }
  std::string description() const override { return "cpu.tf32 without the declaration"; }
  pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
  Support supports(const Case&) const override { return Support::yes(); }
  void run(const pacheck_kernel_args& a) const override { Registry::global().find("cpu.tf32")->run(a); }
};

/// f32 cells of gate's shape (h8/2 d128) over lengths where TF32 errors reach ~1e-3.
Suite f32_suite() {
  Suite s;
  s.name = "tf32-test";
  for (int len : {1000, 4090}) {
    SuiteCell sc;
    sc.cell = Cell{Case{.num_heads = 8, .num_kv_heads = 2, .head_size = 128, .block_size = 16, .seq_lens = {len, 37},
                        .q_dtype = DType::f32, .kv_dtype = DType::f32, .out_dtype = DType::f32, .seed = 4},
                   FaultSpec{}};
    s.cells.push_back(sc);
  }
  return s;
}

RunSummary run_with(const Kernel& k, bool tf32_flag) {
  RunOptions o;
  o.threads = 2;
  o.tolerance.tf32 = tf32_flag;
  return run_suite(f32_suite(), {exec_test::unowned(&k)}, "cpu", o);
}

TEST(Tf32, TheLimitSitsBetweenF32AndBf16) {
  EXPECT_EQ(tf32_limit(), 0x1p-7);
  EXPECT_GT(tf32_limit(), fixed_limit(DType::f32));
  Tolerance t;
  EXPECT_EQ(t.limit(DType::f32, 0, /*tf32_products=*/true), tf32_limit());
  EXPECT_EQ(t.limit(DType::bf16, 0, /*tf32_products=*/true), fixed_limit(DType::bf16)) << "bf16's own limit is wider";
  EXPECT_EQ(t.limit(DType::f16, 0, /*tf32_products=*/true), tf32_limit()) << "f16 output of TF32 dots";
  t.policy = TolerancePolicy::calibrated;
  EXPECT_EQ(t.limit(DType::f32, 1e-7, true), tf32_limit()) << "the emulation models fp32 dots, not TF32";
  t.tf32 = true;
  EXPECT_NE(t.limit(DType::f16, 1e-7), tf32_limit())
      << "--tf32 is judge()'s to apply, only to cells with an f32 operand: an all-f16 cell keeps its limit";
}

TEST(Tf32, TheDeclaredKernelPassesItsF32Cells) {
  const KernelPtr k = Registry::global().find("cpu.tf32");
  ASSERT_TRUE(k);
  EXPECT_TRUE(k->tf32_products());
  const RunSummary s = run_with(*k, false);
  ASSERT_EQ(s.results.size(), 2u);
  for (const CellResult& r : s.results) {
    EXPECT_EQ(r.verdict, Verdict::pass) << r.cell_id << " " << r.detail;
    EXPECT_EQ(r.limit, tf32_limit());
    // Above the f32 limit: without the declaration these cells would fail.
    EXPECT_GT(r.metrics.rel_linf, fixed_limit(DType::f32)) << r.cell_id;
  }
}

TEST(Tf32, AnUndeclaredTf32KernelFailsWithAHintAndPassesUnderTheFlag) {
  const UndeclaredTf32 k;
  const RunSummary s = run_with(k, false);
  ASSERT_EQ(s.results.size(), 2u);
  for (const CellResult& r : s.results) {
    EXPECT_EQ(r.verdict, Verdict::fail) << r.cell_id;
    EXPECT_NE(r.detail.find("TF32 dot products"), std::string::npos) << r.detail;
    EXPECT_NE(r.detail.find("--tf32"), std::string::npos) << r.detail;
  }
  const RunSummary flagged = run_with(k, true);
  for (const CellResult& r : flagged.results) EXPECT_EQ(r.verdict, Verdict::pass) << r.cell_id << " " << r.detail;
}

/// cpu.reference over the first half of every sequence: an error far beyond what TF32 gives.
class HalfContext final : public Kernel {
 public:
  std::string name() const override { return "test.half_context"; }
  std::string description() const override { return "attends the first half of each sequence"; }
  pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
  Support supports(const Case&) const override { return Support::yes(); }
  void run(const pacheck_kernel_args& a) const override {
    std::vector<std::int32_t> lens(a.seq_lens, a.seq_lens + a.num_seqs);
    for (auto& l : lens) l = std::max(1, l / 2);
    pacheck_kernel_args b = a;
    b.seq_lens = lens.data();
    Registry::global().find("cpu.reference")->run(b);
  }
};

TEST(Tf32, AnF32FailureFarBeyondTf32GetsNoHint) {
  const HalfContext k;
  const RunSummary s = run_with(k, false);
  for (const CellResult& r : s.results) {
    EXPECT_EQ(r.verdict, Verdict::fail) << r.cell_id;
    EXPECT_GT(r.metrics.rel_linf, tf32_limit()) << r.cell_id;
    EXPECT_EQ(r.detail.find("TF32"), std::string::npos) << r.detail;
  }
}

/// cpu.reference with its largest f32 output element moved by 3e-5 of its magnitude: a failure under the
/// calibrated policy (limits of a few 1e-6 on these cells) far below any TF32 error.
class TinyF32Error final : public Kernel {
 public:
  std::string name() const override { return "test.tiny_f32_error"; }
  std::string description() const override { return "one element 3e-5 off"; }
  pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
  Support supports(const Case&) const override { return Support::yes(); }
  void run(const pacheck_kernel_args& a) const override {
    Registry::global().find("cpu.reference")->run(a);
    float* out = static_cast<float*>(a.out);
    const std::size_t n = static_cast<std::size_t>(a.num_seqs) * a.num_heads * a.head_size;
    std::size_t worst = 0;
    for (std::size_t i = 1; i < n; ++i)
      if (std::abs(out[i]) > std::abs(out[worst])) worst = i;
    out[worst] += 3e-5f * std::abs(out[worst]);
  }
};

// A fresh user's calibrated f32 failure at 7e-6 was told "the error is of the size TF32 dot products give".
TEST(Tf32, AnF32FailureFarBelowTf32GetsNoHint) {
  const TinyF32Error k;
  RunOptions o;
  o.threads = 2;
  o.tolerance.policy = TolerancePolicy::calibrated;
  const RunSummary s = run_suite(f32_suite(), {exec_test::unowned(&k)}, "cpu", o);
  for (const CellResult& r : s.results) {
    EXPECT_EQ(r.verdict, Verdict::fail) << r.cell_id << " " << r.detail;
    EXPECT_LT(r.metrics.rel_linf, tf32_hint_floor()) << r.cell_id;
    EXPECT_EQ(r.detail.find("TF32"), std::string::npos) << r.detail;
  }
}

}  // namespace
}  // namespace pacheck
