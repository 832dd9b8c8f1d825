// GPU kernels on attention-variant cells (issue 19): for every registered GPU kernel, each variant cell is
// either declined with a reason naming the variant's field (a variant the kernel does not list in
// Kernel::variants()) or run and judged as `pacheck run` judges it: the oracle's fixed tolerance on the
// clean cache, bitwise unchanged under NaN/Inf poison in the unwritten slots. Declines need no device; the
// runs skip without one ("needs a cuda device; ..."). In a build without a GPU backend no GPU kernel is
// registered and the parameterised tests have no instance.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/case.hpp"
#include "exec/runner.hpp"
#include "kernels/backend.hpp"
#include "kernels/kernel.hpp"
#include "tests/kernel_checks.hpp"

namespace pacheck {
namespace {

using kernel_checks::Kinds;

using kernel_checks::gpu_kind;

/// The GPU backend, opened once (kernel_checks::test_gpu).
kernel_checks::TestGpu& gpu() { return kernel_checks::test_gpu(); }

/// Variant cases on head 128 (every GPU kernel's) in the kernel's layout: each variant alone (windows whose
/// edge falls inside a block and on one, at PR #47188's length), all four together, bf16 and f16.
std::vector<Case> variant_cases(const Kernel& k) {
  std::vector<Case> out;
  for (const char* id : {"h8/2 d128 bs16 bf16 ctx4090,37 vllm seed7 win=128",
                         "h8/2 d128 bs16 bf16 ctx1000,37 vllm seed7 win=100",
                         "h8/2 d128 bs16 bf16 ctx1000,37 vllm seed7 cap=30",
                         "h8/2 d128 bs16 bf16 ctx1030,33 vllm seed7 dist=extreme cap=50",
                         "h8/8 d128 bs16 bf16 ctx1030,33 vllm seed7 alibi=geo",
                         "h8/2 d128 bs16 f16 ctx1000,37 vllm seed7 sinks=-2~2",
                         "h8/2 d128 bs16 bf16 ctx1000,37 vllm seed7 sinks=dominant",
                         "h8/2 d128 bs16 bf16 ctx1000,37 vllm seed7 win=100 cap=50 alibi=geo sinks=-1~1",
                         // Several query tokens: no GPU kernel lists PACHECK_VARIANT_MULTI_QUERY, so each declines
                         // naming query_len (and a window first where it has none).
                         "h8/2 d128 bs16 bf16 ctx1030,37 vllm seed7 qlen=4",
                         "h8/2 d128 bs16 bf16 ctx1030,37 vllm seed7 cap=50 qlen=8,2"}) {
    Case c = parse_case_id(id);
    c.layout = k.layouts().front();
    out.push_back(c);
  }
  return out;
}

/// The case field of the first PACHECK_VARIANT_* bit in `bits` (variant_decline's order).
std::string field_of(unsigned bits) {
  if (bits & PACHECK_VARIANT_SLIDING_WINDOW) return "sliding_window";
  if (bits & PACHECK_VARIANT_SOFT_CAP) return "logits_soft_cap";
  if (bits & PACHECK_VARIANT_ALIBI) return "alibi_slopes";
  if (bits & PACHECK_VARIANT_SINKS) return "sinks";
  if (bits & PACHECK_VARIANT_MULTI_QUERY) return "query_len";
  return "";
}

class GpuVariants : public ::testing::TestWithParam<std::string> {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GpuVariants);

// No device needed: a variant the kernel does not list is declined first, naming its field; a cell the
// kernel accepts needs only variants it lists.
TEST_P(GpuVariants, UnlistedVariantsAreDeclinedNamingTheField) {
  const KernelPtr k = kernel_checks::registered_kernel(GetParam());
  ASSERT_TRUE(k);
  for (const Case& c : variant_cases(*k)) {
    const unsigned missing = case_variants(c) & ~k->variants();
    const Support s = k->supports(c);
    if (missing) {
      EXPECT_FALSE(s.ok) << c.id();
      EXPECT_EQ(s.reason.rfind(field_of(missing) + " ", 0), 0u) << c.id() << ": " << s.reason;
    } else if (!s.ok) {
      ADD_FAILURE() << k->name() << " lists every variant of " << c.id() << " but declines it: " << s.reason;
    }
  }
}

// With a device: every variant cell the kernel accepts agrees with the oracle and stays bitwise clean under
// NaN and +Inf in the unwritten slots (a negative control: fails exactly its expected cells).
TEST_P(GpuVariants, AcceptedVariantCellsAgreeAndStayClean) {
  if (!gpu().backend) GTEST_SKIP() << "needs a " << gpu_kind() << " device; " << gpu().why;
  const KernelPtr k = kernel_checks::registered_kernel(GetParam());
  ASSERT_TRUE(k);
  kernel_checks::Count count;
  for (const Case& c : variant_cases(*k)) {
    if (!k->supports(c).ok) continue;
    SCOPED_TRACE(c.id());
    const CaseData data = prepare_case(c, RunOptions{});
    kernel_checks::expect_poison_sweep(*k, *gpu().backend, data, {Poison::nan, Poison::pinf}, &count);
  }
  if (count.cells == 0) GTEST_SKIP() << k->name() << " implements no attention variant (it declines every cell)";
  std::printf("[ variants ] %s ran %d variant cells\n", k->name().c_str(), count.cells);
}

INSTANTIATE_TEST_SUITE_P(All, GpuVariants, ::testing::ValuesIn(kernel_checks::registered(gpu_kind(), Kinds::all)),
                         kernel_checks::kernel_param_name);

}  // namespace
}  // namespace pacheck
