// The GPU MLA kernels (kernels/gpu/mla_decode.cu) over MLA cells on the device (tests/mla_checks.hpp):
// gpu.mla_decode passes every cell, gpu.mla_decode_tail_fault fails exactly the cells mla_poisons_v_tail() names.
// Skipped where the build has no GPU backend or the machine no device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "tests/kernel_checks.hpp"
#include "tests/mla_checks.hpp"

namespace pacheck {
namespace {

using mla_checks::Count;

/// The GPU backend, opened once (kernel_checks::test_gpu).
kernel_checks::TestGpu& gpu() { return kernel_checks::test_gpu(); }

MlaKernelPtr gpu_mla(const std::string& name) { return mla_checks::find_mla(gpu_mla_kernels(), name); }

/// DeepSeek-V3 at 128 and 16 heads per rank, V2-Lite, Kimi-K2; page sizes 1, 16, 32, 64; straddling and aligned
/// lengths to 4,100 tokens; batches to 8; fp8 latent caches (e4m3fn, e5m2) with a per-tensor scale; 2 and 4
/// query tokens per sequence; uniform and peaked rows.
std::vector<MlaCase> gpu_cases() {
  const MlaModel &v3 = mla_model("deepseek-v3"), &lite = mla_model("deepseek-v2-lite"), &k2 = mla_model("kimi-k2");
  std::vector<MlaCase> out{
      make_mla_case(v3, 128, {4100, 37}, 64),
      make_mla_case(v3, 16, {1000, 1, 64, 513, 77, 2048, 31, 300}, 64),
      make_mla_case(lite, 16, {32, 10, 20, 700}, 16),
      make_mla_case(k2, 64, {64, 96, 1024}, 32),
      make_mla_case(v3, 16, {33, 17, 250}, 1),
      make_mla_case(v3, 128, {1500, 21}, 64, DType::fp8_e4m3fn),
      make_mla_case(v3, 16, {45, 900}, 16, DType::fp8_e5m2),
      make_mla_case(v3, 16, {500, 23}, 16),
      make_mla_case(k2, 64, {600, 21}, 64),
      make_mla_case(v3, 128, {2000, 30}, 64),
      make_mla_case(k2, 16, {300, 41}, 32),
  };
  out[5].c.k_scale = KvScale::parse("0.5");
  out[6].c.k_scale = KvScale::parse("2");
  out[7].c.query_lens = {2};
  out[10].c.query_lens = {4, 1};
  out[8].c.dist = Dist::uniform;
  out[9].c.dist = Dist::peaked;
  return out;
}

class GpuMlaKernels : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuMlaKernels, PassEveryCellOrFailExactlyTheExpectedOnes) {
  if (!gpu().backend) GTEST_SKIP() << "needs a GPU device; " << gpu().why;
  const MlaKernelPtr k = gpu_mla(GetParam());
  ASSERT_TRUE(k);
  Count count;
  for (const MlaCase& mc : gpu_cases()) {
    if (!k->supports(mc).ok) continue;
    const mla_checks::MlaData d = mla_checks::prepare_mla(mc);
    mla_checks::expect_mla_cells(*k, *gpu().backend, d, mla_checks::mla_faults(), &count);
  }
  EXPECT_GT(count.cells, 0);
  mla_checks::expect_mla_control_caught(*k, count, "the GPU MLA cells");
}

// The GPU kernel and the CPU reference on one long context of DeepSeek-V3 at 128 heads (32,768 tokens, FlashMLA's
// page 64): both within the fixed tolerance of the oracle, and the tail-fault twin caught on its V tail.
TEST_P(GpuMlaKernels, LongContext32K) {
  if (!gpu().backend) GTEST_SKIP() << "needs a GPU device; " << gpu().why;
  const MlaKernelPtr k = gpu_mla(GetParam());
  const mla_checks::MlaData d = mla_checks::prepare_mla(make_mla_case(mla_model("deepseek-v3"), 128, {32767}, 64));
  Count count;
  mla_checks::expect_mla_cells(*k, *gpu().backend, d, {{Poison::nan, Target::v, Region::tail}}, &count);
  EXPECT_EQ(count.cells, 2);
  if (k->is_negative_control()) EXPECT_EQ(count.failed, 1);
}

INSTANTIATE_TEST_SUITE_P(All, GpuMlaKernels, ::testing::ValuesIn(mla_checks::mla_names(gpu_mla_kernels())),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param.substr(4); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GpuMlaKernels);

// Timing of gpu.mla_decode (PACHECK_GPU_BENCH=1): DeepSeek-V3 at 128 query heads per rank, bf16, FlashMLA's page
// 64: one sequence of 32,767 tokens, and 64 sequences of 1,024. Each case is first judged against the oracle
// (pass); then the median of 5 timed calls after one warm-up, and the latent cache's bytes over that time (each
// call reads them at least once; the kernel reads them once per group of 4 heads, from L2 after the first).
TEST(GpuMlaBench, DeepSeekV3At128Heads) {
  const char* on = std::getenv("PACHECK_GPU_BENCH");
  if (!on || std::string(on) != "1") GTEST_SKIP() << "set PACHECK_GPU_BENCH=1 to run the MLA bench";
  if (!gpu().backend) GTEST_SKIP() << "needs a GPU device; " << gpu().why;
  const MlaKernelPtr k = gpu_mla("gpu.mla_decode");
  const MlaModel& v3 = mla_model("deepseek-v3");
  for (const MlaCase& mc : {make_mla_case(v3, 128, {32767}, 64), make_mla_case(v3, 128, std::vector<int>(64, 1024), 64)}) {
    const mla_checks::MlaData d = mla_checks::prepare_mla(mc);
    Count count;
    mla_checks::expect_mla_cells(*k, *gpu().backend, d, {}, &count);
    mla_checks::MlaDeviceCall call(*gpu().backend, d, d.cache);
    call.run(*k);
    std::vector<double> ms;
    for (int i = 0; i < 5; ++i) ms.push_back(gpu().backend->time_ms([&] { k->run(call.a, mla_dims(mc.m)); }));
    std::sort(ms.begin(), ms.end());
    double tokens = 0;
    for (int len : mc.c.seq_lens) tokens += len;
    const double bytes = tokens * mc.m.row() * dtype_size(mc.c.kv_dtype);
    std::printf("[ bench    ] gpu.mla_decode %s on %s: %.3f ms (median of 5), latent cache %.1f MB, %.2f GB/s\n",
                mc.id().c_str(), gpu().backend->description().c_str(), ms[2], bytes / 1e6, bytes / (ms[2] * 1e6));
    EXPECT_GT(ms[2], 0.0);
  }
}

TEST(GpuMlaKernels, BuildsWithAGpuBackendListBoth) {
  if (gpu_backend_kind().empty()) {
    EXPECT_TRUE(gpu_mla_kernels().empty());
    GTEST_SKIP() << "this pacheck was built without a GPU backend";
  }
  EXPECT_EQ(mla_checks::mla_names(gpu_mla_kernels()), (std::vector<std::string>{"gpu.mla_decode", "gpu.mla_decode_tail_fault"}));
}

}  // namespace
}  // namespace pacheck
