// GPU decode kernels against the oracle on the GPU backend this binary links (CUDA, or HIP in a hipcc build:
// docs/HIP.md): case -> pre-paging tensors -> paged cache -> (fault) -> upload -> kernel -> download ->
// judge. Without a device every test that runs a kernel skips, saying why ("needs a cuda device; no CUDA
// device: ..."); the checks that need none (registration, declines, stride limits) run everywhere.
//
// The generic tests are parameterised over Registry::global() (tests/kernel_checks.hpp): every GPU kernel of
// the registration table (kernels/gpu/gpu_kernels.cpp), honest kernels and negative controls told apart by
// is_negative_control(), so a kernel added to the table is tested here without editing this file. Each cell
// is judged as `pacheck run` judges it: an honest kernel must pass, a negative control must fail exactly the
// cells its expected_failures() names. Declined cells are skipped and counted (a kernel that declines every
// cell of a test fails it).
//
// What each test proves:
//  - GpuKernel.RegisteredAndAcceptsTheCommonCases (no device): every GPU kernel has this backend's device,
//    a description, accepts f32/f16/bf16 x head 64/128/256 x GQA 1..16, and declines other head sizes,
//    mixed dtypes and layouts it does not read with the field named.
//  - GpuAccuracy: every GPU kernel within the fixed rel_linf limit of its dtype over head 64/128/256, GQA
//    1..16, f32/f16/bf16, block sizes 8..256 (and 24 where the kernel takes it), straddling and aligned
//    lengths, single- and multi-partition lengths, peaked and extreme logits.
//  - GpuTailPoison: poison in every unwritten region leaves honest kernels bitwise unchanged and fails each
//    negative control exactly on the cells it names (gpu.paged_v1_tail_fault: poisons_v_tail());
//    gpu.slot_scale_unmasked must pass them (its fault needs per-slot fp8 scales: tests/test_gpu_aiter.cpp).
//  - GpuInvariance (honest kernels): paging invariance, batch invariance, determinism, query/out strides.
//  - GpuFp8Kernel: fp8 KV caches (docs/FP8.md) with per-head and per-tensor scales: every GPU kernel agrees
//    with the oracle, and the negative controls are caught exactly on NaN/Inf V-tail poison (e4m3fnuz's
//    0x7F = 240 is finite and stays harmless).
// Tests of one design, on the kernels that have it (named):
//  - declines of the paged kernels' block sizes and gpu.paged_v1's context bound; the warp-split kernels'
//    32-bit row addressing limits (no device needed);
//  - fp8 dtype declines of the paged and warp-split kernels; the device decode of all 256 codes per
//    encoding through the kernels' load16 + expand16 path equals core/fp8.cpp bit for bit; the warp-split
//    kernels at fp8 in both their basic and pipelined forms;
//  - a fault inside a kernel (illegal address) is reported as a fatal KernelError (death test);
//  - Bench (PACHECK_GPU_BENCH=1 only): bandwidth of each kernel at 64 x 8192 x 32/8 x 128 bf16 against the
//    device-to-device copy bandwidth measured in the same run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <sys/wait.h>

#include "core/fp8.hpp"
#include "exec/runner.hpp"
#include "faults/inject.hpp"
#include "judge/comparator.hpp"
#include "kernels/backend.hpp"
#include "kernels/kernel.hpp"
#include "paging/layout.hpp"
#include "tests/kernel_checks.hpp"
#ifdef PACHECK_HAVE_GPU
#include "kernels/gpu/launch.hpp"
#endif

namespace pacheck {
namespace {

using kernel_checks::Count;
using kernel_checks::expect_clean_run;
using kernel_checks::Kinds;

using kernel_checks::gpu_kind;
/// How the backend says it found no device: "no CUDA device" / "no HIP device".
std::string no_device() { return gpu_kind() == "hip" ? "no HIP device" : "no CUDA device"; }

/// The parameter lists of the registry-driven tests: the registered kernels of this binary's GPU kind.
std::vector<std::string> gpu_kernels(Kinds which) { return kernel_checks::registered(gpu_kind(), which); }

/// The GPU backend, opened once (kernel_checks::test_gpu).
kernel_checks::TestGpu& gpu() { return kernel_checks::test_gpu(); }

/// Skips a test that runs a kernel where there is no device, with the backend's reason.
#define REQUIRE_GPU()                                                                  \
  do {                                                                                 \
    if (!gpu().backend) GTEST_SKIP() << "needs a " << gpu_kind() << " device; " << gpu().why; \
  } while (0)

KernelPtr kernel(const std::string& name) { return Registry::global().find(name); }

Case make_case(const Kernel& k, int heads, int kv_heads, int d, int bs, DType dt, std::vector<int> lens) {
  Case c;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_size = d;
  c.block_size = bs;
  c.q_dtype = c.kv_dtype = c.out_dtype = dt;
  c.seq_lens = std::move(lens);
  c.layout = k.layouts().front();
  return c;
}

RawRun run(const Kernel& k, const CaseData& d, const PagedCache& cache) {
  return run_kernel_once(k, *gpu().backend, d, cache);
}


std::int64_t differing(const std::vector<std::uint32_t>& a, const std::vector<std::uint32_t>& b) {
  if (a.size() != b.size()) return -1;
  std::int64_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}


/// "worst at (seq, head, dim): out X, oracle Y" for failure messages.
std::string worst_element(const Case& c, const Metrics& m, const RawRun& r, const CaseData& d) {
  if (m.worst.seq < 0) return "no worst element";
  const auto i = static_cast<std::size_t>(m.worst.flat(c));
  char buf[200];
  std::snprintf(buf, sizeof buf, "worst at (%s): out %.6g, oracle %.6g; nan %lld", describe(m.worst).c_str(), r.out[i],
                d.ref.out[i], static_cast<long long>(m.nan_count));
  return buf;
}

/// The largest rel_linf seen per (kernel, dtype), printed at the end of the accuracy test for reports.
std::map<std::string, double>& worst_rel_linf() {
  static std::map<std::string, double> m;
  return m;
}

/// Runs `k` on the clean cell of case `c` when it supports it and judges it (kernel_checks::expect_verdict),
/// with the worst element in the message of a failure; keeps the largest rel_linf under `key` for the
/// summary lines. A cell the kernel declines is counted in `declined` (the first one printed with its reason).
void expect_clean_cell(const Kernel& k, const Case& c, const std::string& key, Count* count, int* declined) {
  const Support s = k.supports(c);
  if (!s.ok) {
    if (*declined == 0) std::printf("[ declined ] %s %s: %s\n", k.name().c_str(), c.id().c_str(), s.reason.c_str());
    ++*declined;
    return;
  }
  SCOPED_TRACE(c.id());
  const CaseData data = prepare_case(c, RunOptions{});
  const RawRun r = run(k, data, data.cache);
  const CellResult res = kernel_checks::expect_verdict(k, Cell{c, FaultSpec{}}, data, r, nullptr, count);
  if (res.verdict != Verdict::pass && !res.expected_fail) ADD_FAILURE() << worst_element(c, res.metrics, r, data);
  double& w = worst_rel_linf()[key];
  w = std::max(w, res.metrics.rel_linf);
}

/// The end of a registry-driven test: the kernel ran some cell, and its declines are reported.
void expect_ran(const Kernel& k, const Count& count, int declined, const char* what) {
  kernel_checks::expect_ran(k, count, what);
  if (declined > 0) std::printf("[ declined ] %s declined %d cells of %s\n", k.name().c_str(), declined, what);
}

/// True when `k` is a V-tail negative control: its expected_failures() is poisons_v_tail itself, or
/// poisons_v_tail_or_window (the same cells where there is no sliding window, as in this file's cases).
bool plants_v_tail_fault(const Kernel& k) {
  const auto expected = k.expected_failures();
  if (!expected) return false;
  const auto* f = expected->target<bool (*)(const Cell&)>();
  return f && (*f == &poisons_v_tail || *f == &poisons_v_tail_or_window);
}

// ---------------------------------------------------------------------------------------------------
// Registration and declines: no device needed.

// The parameter lists are the registry's: in a GPU build there are honest GPU kernels and negative
// controls; in a build without a GPU backend there is none, and the parameterised tests have no instance.
TEST(GpuKernels, ParameterListsComeFromTheRegistry) {
#ifndef PACHECK_HAVE_GPU
  EXPECT_TRUE(gpu_kernels(Kinds::all).empty());
  GTEST_SKIP() << "no CUDA device: this pacheck was built without a GPU backend, so no GPU kernel is registered";
#else
  const std::vector<std::string> all = gpu_kernels(Kinds::all), honest = gpu_kernels(Kinds::honest),
                                 controls = gpu_kernels(Kinds::controls);
  EXPECT_FALSE(honest.empty());
  EXPECT_FALSE(controls.empty());
  EXPECT_EQ(all.size(), honest.size() + controls.size());
  for (const KernelPtr& k : Registry::global().all()) {
    if (k->name().rfind("gpu.", 0) == 0 && !k->takes_mla()) {  // the MLA ones: tests/test_gpu_mla.cpp
      EXPECT_NE(std::find(all.begin(), all.end(), k->name()), all.end()) << k->name() << " is missing from the lists";
    }
  }
#endif
}

/// Base of the registry-driven tests that run a kernel: skips without a device (with the backend's reason)
/// and looks up the kernel named by the parameter (`k`); `count` and `declined` collect what the test ran.
class GpuKernelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    REQUIRE_GPU();
    k = kernel_checks::registered_kernel(GetParam());
    ASSERT_TRUE(k);
  }
  KernelPtr k;
  Count count;
  int declined = 0;
};

class GpuKernel : public ::testing::TestWithParam<std::string> {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GpuKernel);

// common_support (kernels/gpu/gpu_kernels.cpp) is every GPU kernel's: the dtypes, head sizes and GQA ratios
// below are accepted in the kernel's layout, and the rest declined naming the field.
TEST_P(GpuKernel, RegisteredAndAcceptsTheCommonCases) {
  const KernelPtr k = kernel_checks::registered_kernel(GetParam());
  ASSERT_TRUE(k);
  EXPECT_EQ(device_kind_spec(k->device()), gpu_kind());
  EXPECT_FALSE(k->description().empty());
  ASSERT_FALSE(k->layouts().empty());
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (int d : {64, 128, 256})
      for (int ratio : {1, 2, 3, 4, 8, 16}) {
        const Case c = make_case(*k, 2 * ratio, 2, d, 16, dt, {100, 17});
        EXPECT_TRUE(k->supports(c).ok) << c.id() << ": " << k->supports(c).reason;
      }
  const Case c = make_case(*k, 32, 8, 128, 16, DType::bf16, {4090});
  Case bad = c;
  bad.head_size = 96;
  EXPECT_NE(k->supports(bad).reason.find("head_size 96"), std::string::npos) << k->supports(bad).reason;
  bad = c;
  bad.q_dtype = DType::f32;
  EXPECT_NE(k->supports(bad).reason.find("q_dtype"), std::string::npos) << k->supports(bad).reason;
  for (Layout other : {Layout::vllm, Layout::nhd, Layout::hnd, Layout::aiter}) {
    const std::vector<Layout> reads = k->layouts();
    if (std::find(reads.begin(), reads.end(), other) != reads.end()) continue;
    bad = c;
    bad.layout = other;
    EXPECT_NE(k->supports(bad).reason.find("layout " + std::string(layout_name(other))), std::string::npos)
        << k->supports(bad).reason;
  }
  // Seed 002's shuffled-V layout: a kernel that lists it (the paged kernels but half_products) takes its fp8
  // cells at 32-token blocks, where its V differs from vllm's; any other declines it naming the layout.
  Case aiter = c;
  aiter.layout = Layout::aiter;
  aiter.kv_dtype = DType::fp8_e4m3fn;
  aiter.block_size = 32;
  const std::vector<Layout> reads = k->layouts();
  if (std::find(reads.begin(), reads.end(), Layout::aiter) != reads.end()) {
    EXPECT_TRUE(k->supports(aiter).ok) << aiter.id() << ": " << k->supports(aiter).reason;
  } else {
    EXPECT_FALSE(k->supports(aiter).ok);
    EXPECT_NE(k->supports(aiter).reason.find("layout aiter"), std::string::npos) << k->supports(aiter).reason;
  }
}

INSTANTIATE_TEST_SUITE_P(All, GpuKernel, ::testing::ValuesIn(gpu_kernels(Kinds::all)), kernel_checks::kernel_param_name);

// The block sizes of each design: the paged kernels (vllm) take powers of two 8..256; the warp-split
// kernels (nhd rows are per token) any block size. gpu.paged_v1 holds a whole context's logits in shared
// memory; gpu.paged_v2 does not.
TEST(GpuKernels, BlockSizeAndContextLimitsOfEachDesign) {
#ifndef PACHECK_HAVE_GPU
  GTEST_SKIP() << "no CUDA device: this pacheck was built without the CUDA backend";
#else
  for (const char* name : {"gpu.paged_v1", "gpu.paged_v1_tail_fault", "gpu.paged_v2"}) {
    const KernelPtr k = kernel(name);
    ASSERT_TRUE(k) << name << " is not registered";
    const Case c = make_case(*k, 32, 8, 128, 24, DType::bf16, {4090});
    EXPECT_NE(k->supports(c).reason.find("block_size 24"), std::string::npos) << k->supports(c).reason;
  }
  for (const char* name : {"gpu.warp_split", "gpu.warp_split_gqa"}) {
    const KernelPtr k = kernel(name);
    ASSERT_TRUE(k) << name << " is not registered";
    const Case c = make_case(*k, 32, 8, 128, 24, DType::bf16, {4090});
    EXPECT_TRUE(k->supports(c).ok) << k->supports(c).reason;
  }
  Case longc = make_case(*kernel("gpu.paged_v1"), 8, 8, 128, 16, DType::bf16, {1 << 20});
  EXPECT_NE(kernel("gpu.paged_v1")->supports(longc).reason.find("seq_lens"), std::string::npos);
  EXPECT_TRUE(kernel("gpu.paged_v2")->supports(longc).ok);
  EXPECT_TRUE(kernel("gpu.paged_v1_tail_fault")->is_negative_control());
#endif
}

// The warp-split kernels address K/V rows with 32-bit byte strides (NhdRows in warp_split.cu): a cache whose
// block stride reaches 4 GiB, or whose slot offsets within a block reach 2 GiB, is declined by the launcher
// with the field named, before any device call (so no device is needed; nothing is launched).
TEST(GpuKernels, WarpSplitDeclinesStridesBeyondItsAddressing) {
#ifndef PACHECK_HAVE_GPU
  GTEST_SKIP() << "no CUDA device: this pacheck was built without the CUDA backend";
#else
  const CacheStrides st = make_strides(PACHECK_LAYOUT_NHD, 2, 128, 16, 8);
  auto args = [&] {
    pacheck_kernel_args a{};
    a.struct_size = sizeof a;
    a.num_seqs = 1;
    a.num_heads = 8;
    a.num_kv_heads = 2;
    a.head_size = 128;
    a.block_size = 16;
    a.num_blocks = 1;
    a.max_blocks_per_seq = 1;
    a.layout = PACHECK_LAYOUT_NHD;
    a.q_dtype = a.kv_dtype = a.out_dtype = PACHECK_DTYPE_BF16;
    for (int i = 0; i < 5; ++i) {
      a.k_strides[i] = st.k[i];
      a.v_strides[i] = st.v[i];
    }
    a.scale = a.k_scale = a.v_scale = 1.f;
    return a;
  };
  for (const char* name : {"gpu.warp_split", "gpu.warp_split_gqa"}) {
    const KernelPtr k = kernel(name);
    auto reason = [&](const pacheck_kernel_args& a) -> std::string {
      try {
        k->run(a);
      } catch (const KernelError& e) {
        return e.what();
      }
      return "launched";
    };
    pacheck_kernel_args a = args();
    a.k_strides[0] = (std::int64_t{1} << 31) + 8;  // 4 GiB + 16 bytes of bf16 per block
    EXPECT_NE(reason(a).find("block strides"), std::string::npos) << name << ": " << reason(a);
    a = args();
    a.v_strides[0] = -a.v_strides[0];
    EXPECT_NE(reason(a).find("block strides"), std::string::npos) << name << ": " << reason(a);
    a = args();
    a.k_strides[0] = (std::int64_t{1} << 31) - 8;   // just under 4 GiB: accepted, so the slot check speaks
    a.v_strides[1] = std::int64_t{1} << 27;          // 256 MiB per slot x 15 slots > 2 GiB
    EXPECT_NE(reason(a).find("slot strides"), std::string::npos) << name << ": " << reason(a);
    EXPECT_EQ(reason(a).find(name), 0u) << "the reason names the kernel: " << reason(a);
  }
#endif
}

TEST(GpuBackend, AbsentDeviceIsAReasonNotAnError) {
  const auto st = backend_status();
  const auto it = std::find_if(st.begin(), st.end(), [](const BackendStatus& s) { return s.kind == gpu_kind(); });
  ASSERT_NE(it, st.end());
  if (it->devices == 0) {
    if (it->built) {
      EXPECT_EQ(it->detail.rfind(no_device(), 0), 0u) << it->detail;
    }
    EXPECT_FALSE(gpu().backend);
    EXPECT_EQ(gpu().why.rfind(no_device(), 0), 0u) << gpu().why;
  } else {
    EXPECT_TRUE(gpu().backend) << gpu().why;
  }
}

// `pacheck list devices` shows every kind, built or not; device specs of either GPU kind parse the same way,
// and a kind this binary lacks is a "no <runtime> device" reason, not an unknown device.
TEST(GpuBackend, EveryKindListedAndSpecsOfBothKindsParsed) {
  std::vector<std::string> kinds;
  for (const auto& s : backend_status()) kinds.push_back(s.kind);
  EXPECT_EQ(kinds, (std::vector<std::string>{"cpu", "cuda", "hip"}));
  for (const std::string kind : {"cuda", "hip"}) {
    EXPECT_THROW(open_backend(kind + ":x"), std::invalid_argument) << kind;
    EXPECT_THROW(open_backend(kind + ":-1"), std::invalid_argument) << kind;
    const std::string none = kind == "hip" ? "no HIP device" : "no CUDA device";
    for (const std::string& spec : {kind, kind + ":0"}) {
      try {
        open_backend(spec);  // succeeds only where such a device exists
      } catch (const std::runtime_error& e) {
        EXPECT_EQ(std::string(e.what()).rfind(none, 0), 0u) << spec << ": " << e.what();
      }
    }
  }
  EXPECT_THROW(open_backend("rocm"), std::invalid_argument);
  EXPECT_EQ(device_kind_spec(PACHECK_DEVICE_CUDA), "cuda");
  EXPECT_EQ(device_kind_spec(PACHECK_DEVICE_HIP), "hip");
  EXPECT_EQ(device_kind_spec(PACHECK_DEVICE_CPU), "cpu");
}

// ---------------------------------------------------------------------------------------------------
// Backend.

TEST(GpuBackend, DescribesCopiesAndTimes) {
  REQUIRE_GPU();
  Backend& b = *gpu().backend;
  EXPECT_EQ(b.name(), gpu_kind() + ":0");
  const std::string desc = b.description();
  EXPECT_NE(desc.find(gpu_kind() == "hip" ? " gfx" : " sm_"), std::string::npos) << desc;
  EXPECT_NE(desc.find("driver"), std::string::npos) << desc;
  std::printf("[ device   ] %s\n", desc.c_str());

  std::vector<std::uint8_t> host(1 << 20), back(1 << 20);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<std::uint8_t>(i * 37 + 11);
  void* p = b.alloc(host.size());
  b.upload(p, host.data(), host.size());
  b.download(back.data(), p, back.size());
  b.release(p);
  EXPECT_EQ(host, back);
  const double ms = b.time_ms([] {});
  EXPECT_GE(ms, 0.0);
  const double gbs = b.copy_bandwidth_gbs(std::size_t{256} << 20, 5);
  EXPECT_GT(gbs, 1.0);
  std::printf("[ copy bw  ] %.0f GB/s (256 MiB device-to-device, read + write)\n", gbs);
}

// An illegal address ends the context: sync() must say so with a fatal KernelError. Run in a child
// process (gtest's threadsafe death test re-executes the binary), since the context is lost afterwards.
// On AMD the ROCm runtime may instead abort the process on the GPU memory fault ("Memory access fault by
// GPU node-N ..."): also a loud failure, and the runner's isolated children report it as a crash.
void provoke_illegal_address() {
  auto b = open_backend(gpu_kind());
  const KernelPtr k = kernel("gpu.warp_split");
  Case c = make_case(*k, 8, 8, 128, 16, DType::bf16, {64});
  CaseData d = prepare_case(c, RunOptions{});
  PagedCache bad = d.cache;
  for (auto& e : bad.block_tables) e = 1 << 28;  // 2^28 blocks x 32 KiB: far outside the pool
  try {
    run_kernel_once(*k, *b, d, bad);
  } catch (const KernelError& e) {
    std::fprintf(stderr, "caught: %s (fatal=%d)\n", e.what(), e.fatal ? 1 : 0);
    std::exit(e.fatal ? 0 : 2);
  }
  std::exit(3);
}

TEST(GpuBackendDeathTest, IllegalAddressIsFatal) {
  REQUIRE_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  if (gpu_kind() == "hip") {
    EXPECT_EXIT(provoke_illegal_address(), [](int st) { return st == 0 || WIFSIGNALED(st); },
                "caught: |Memory access fault");
  } else {
    EXPECT_EXIT(provoke_illegal_address(), ::testing::ExitedWithCode(0), "caught: ");
  }
}

// ---------------------------------------------------------------------------------------------------
// Accuracy against the oracle.

class GpuAccuracy : public GpuKernelTest {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GpuAccuracy);

TEST_P(GpuAccuracy, WithinFixedLimitOverShapes) {
  const int small_blocks[] = {8, 16, 32};
  const int large_blocks[] = {64, 128, 256};
  int idx = 0;
  for (int d : {64, 128, 256}) {
    for (int ratio : {1, 2, 4, 8, 16}) {
      for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
        ++idx;
        int bs = (idx % 4 == 3) ? large_blocks[idx % 3] : small_blocks[idx % 3];
        const int kv = ratio == 16 ? 1 : 2;
        // A block size that is not a power of two, for the kernels that take one (nhd rows are per token).
        if (idx % 7 == 0 && k->supports(make_case(*k, kv * ratio, kv, d, 24, dt, {100})).ok) bs = 24;
        // Lengths: 1 token; one short of a block; a partition edge; straddling multi-partition lengths;
        // an aligned multi-partition length.
        std::vector<int> lens = {1, bs - 1, 512, 515 + 7 * (idx % 5), 1024 + bs * (idx % 3), 1537 + idx};
        Case c = make_case(*k, kv * ratio, kv, d, bs, dt, lens);
        c.seed = 100 + idx;
        if (idx % 5 == 1) c.scale = 0.05f;  // args.scale is honoured, not assumed 1/sqrt(d)
        if (idx % 6 == 2) c.dist = Dist::uniform;
        expect_clean_cell(*k, c, GetParam() + " " + std::string(dtype_name(dt)), &count, &declined);
      }
    }
  }
  EXPECT_EQ(count.cells + declined, 45);
  expect_ran(*k, count, declined, "the accuracy grid");
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const std::string key = GetParam() + " " + std::string(dtype_name(dt));
    std::printf("[ rel_linf ] %-24s %-5s max %.3e (limit %.3e)\n", GetParam().c_str(), std::string(dtype_name(dt)).c_str(),
                worst_rel_linf()[key], fixed_limit(dt));
  }
}

TEST_P(GpuAccuracy, PeakedAndExtremeLogits) {
  for (Dist dist : {Dist::peaked, Dist::extreme}) {
    for (DType dt : {DType::f32, DType::bf16}) {
      Case c = make_case(*k, 16, 4, 128, 16, dt, {1, 33, 700, 2049});
      c.dist = dist;
      expect_clean_cell(*k, c, GetParam() + " " + std::string(dtype_name(dt)), &count, &declined);
    }
  }
  expect_ran(*k, count, declined, "the peaked and extreme cells");
}

INSTANTIATE_TEST_SUITE_P(All, GpuAccuracy, ::testing::ValuesIn(gpu_kernels(Kinds::all)), kernel_checks::kernel_param_name);

// ---------------------------------------------------------------------------------------------------
// Tail poison: honest kernels are bitwise blind to every unwritten slot; each negative control fails exactly
// where its expected_failures() says.

class GpuTailPoison : public GpuKernelTest {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GpuTailPoison);

TEST_P(GpuTailPoison, BitwiseUnchangedOrCaughtExactly) {
  for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
    for (const std::vector<int>& lens : {std::vector<int>{4090}, std::vector<int>{4096},
                                         std::vector<int>{4090, 1000, 33, 517}, std::vector<int>{1, 15, 17}}) {
      Case c = make_case(*k, 8, 2, 128, 16, dt, lens);
      if (!k->supports(c).ok) {
        ++declined;
        continue;
      }
      SCOPED_TRACE(c.id());
      CaseData data = prepare_case(c, RunOptions{});
      kernel_checks::expect_poison_sweep(*k, *gpu().backend, data,
                                         {Poison::nan, Poison::pinf, Poison::ninf, Poison::big, Poison::max_finite},
                                         &count);
    }
  }
  expect_ran(*k, count, declined, "the tail-poison cells");
  // The V-tail controls meet their fault here; gpu.slot_scale_unmasked's needs per-slot fp8 scale tables
  // (tests/test_gpu_aiter.cpp), and passes these cells.
  if (count.must_fail > 0 || plants_v_tail_fault(*k))
    kernel_checks::expect_control_caught(*k, count, "the tail-poison cells");
}

INSTANTIATE_TEST_SUITE_P(All, GpuTailPoison, ::testing::ValuesIn(gpu_kernels(Kinds::all)), kernel_checks::kernel_param_name);

// ---------------------------------------------------------------------------------------------------
// Invariances (honest kernels).

/// Moves every physical block b to perm[b] (a fresh permutation) and rewrites the block table to match.
PagedCache permute_blocks(const PagedCache& pc, std::uint64_t seed) {
  std::vector<int> perm(pc.num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(perm.begin(), perm.end(), rng);
  PagedCache out = pc;
  const std::size_t esz = dtype_size(pc.kv_dtype);
  const std::size_t kb = static_cast<std::size_t>(pc.strides.k[0]) * esz, vb = static_cast<std::size_t>(pc.strides.v[0]) * esz;
  EXPECT_EQ(pc.key_cache.size(), kb * pc.num_blocks);
  EXPECT_EQ(pc.value_cache.size(), vb * pc.num_blocks);
  for (int b = 0; b < pc.num_blocks; ++b) {
    std::memcpy(out.key_cache.data() + perm[b] * kb, pc.key_cache.data() + b * kb, kb);
    std::memcpy(out.value_cache.data() + perm[b] * vb, pc.value_cache.data() + b * vb, vb);
    for (int s = 0; s < pc.block_size; ++s)
      out.slot_map[static_cast<std::size_t>(perm[b]) * pc.block_size + s] = pc.slot_map[static_cast<std::size_t>(b) * pc.block_size + s];
  }
  for (auto& e : out.block_tables) e = perm[e];
  if (pc.padding_block >= 0) out.padding_block = perm[pc.padding_block];
  return out;
}

class GpuInvariance : public GpuKernelTest {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GpuInvariance);

TEST_P(GpuInvariance, PagingBatchAndRepeat) {
  for (DType dt : {DType::bf16, DType::f32}) {
    Case c = make_case(*k, 16, 4, 128, 16, dt, {1000, 33, 517, 4090});
    SCOPED_TRACE(c.id());
    CaseData data = prepare_case(c, RunOptions{});
    // Poison every unwritten slot, so a kernel that reads a block it should not is also caught here.
    PagedCache poisoned = data.cache;
    inject(poisoned, FaultSpec{Poison::nan, Target::kv, Region::all});
    const RawRun base = run(*k, data, poisoned);
    expect_clean_run(base);

    // Same cache, run again: deterministic.
    EXPECT_EQ(differing(run(*k, data, poisoned).bits, base.bits), 0) << "two identical runs differ";

    // Physical blocks permuted.
    for (std::uint64_t seed : {1u, 2u}) {
      const RawRun r = run(*k, data, permute_blocks(poisoned, seed));
      EXPECT_EQ(differing(r.bits, base.bits), 0) << "block permutation " << seed << " changed the output";
    }

    // Spare blocks and padding columns changed: the pager draws another permutation of a larger pool.
    Case c2 = c;
    c2.spare_blocks = 11;
    c2.padding_columns = 5;
    CaseData data2 = prepare_case(c2, RunOptions{});
    const RawRun r2 = run(*k, data2, data2.cache);
    EXPECT_EQ(differing(r2.bits, base.bits), 0) << "spare blocks / padding columns changed the output";

    // Sequence 0 alone vs in the batch (its Q/K/V depend only on its own coordinates).
    Case alone = c;
    alone.seq_lens = {c.seq_lens[0]};
    CaseData data_a = prepare_case(alone, RunOptions{});
    const RawRun ra = run(*k, data_a, data_a.cache);
    const std::size_t row = static_cast<std::size_t>(c.num_heads) * c.head_size;
    ASSERT_EQ(ra.bits.size(), row);
    EXPECT_TRUE(std::equal(ra.bits.begin(), ra.bits.end(), base.bits.begin())) << "batch composition changed sequence 0";
  }
}

INSTANTIATE_TEST_SUITE_P(All, GpuInvariance, ::testing::ValuesIn(gpu_kernels(Kinds::honest)),
                         kernel_checks::kernel_param_name);

#ifdef PACHECK_HAVE_GPU
/// Device buffer for the manual-argument tests and the bench.
struct Buf {
  Backend& b;
  void* p;
  Buf(Backend& be, std::size_t n) : b(be), p(be.alloc(n)) {}
  ~Buf() { b.release(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

// ---------------------------------------------------------------------------------------------------
// fp8 KV caches.

const DType kFp8[] = {DType::fp8_e4m3fn, DType::fp8_e4m3fnuz, DType::fp8_e5m2};
const std::vector<std::string> kPagedKernels = {"gpu.paged_v1", "gpu.paged_v1_tail_fault", "gpu.paged_v2"};
const std::vector<std::string> kWarpSplitKernels = {"gpu.warp_split", "gpu.warp_split_gqa"};

/// A vllm-layout case with an fp8 cache, q/out `qo`, and per-KV-head scales K 0.3 -> 3, V 3 -> 0.3 (the fp8
/// suite's), so a kernel that reads the NaN scalar, or head 0's scale for every head, fails.
Case fp8_case(DType kv, DType qo, int heads, int kv_heads, int d, int bs, std::vector<int> lens) {
  Case c;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_size = d;
  c.block_size = bs;
  c.q_dtype = c.out_dtype = qo;
  c.kv_dtype = kv;
  c.seq_lens = std::move(lens);
  c.layout = Layout::vllm;
  c.k_scale.range = std::make_pair(0.3f, 3.0f);
  c.v_scale.range = std::make_pair(3.0f, 0.3f);
  return c;
}

// supports() is host code: checked without a device.
TEST(GpuFp8, KernelsAcceptFp8AndDeclineBadDtypesWithAReason) {
  for (DType kv : kFp8) {
    for (DType qo : {DType::bf16, DType::f16}) {
      const Case c = fp8_case(kv, qo, 32, 8, 128, 16, {4090, 17});
      for (const auto& name : kPagedKernels) {
        const Support s = kernel(name)->supports(c);
        EXPECT_TRUE(s.ok) << name << " " << c.id() << ": " << s.reason;
      }
      for (const auto& name : kWarpSplitKernels) {
        Case n = c;
        n.layout = Layout::nhd;
        Support s = kernel(name)->supports(n);
        EXPECT_TRUE(s.ok) << name << " " << n.id() << ": " << s.reason;
        n.block_size = 8;  // each token is its own row in nhd: no block-size limit at fp8
        s = kernel(name)->supports(n);
        EXPECT_TRUE(s.ok) << name << " " << n.id() << ": " << s.reason;
      }
    }
    for (const auto& name : kWarpSplitKernels) {
      const KernelPtr k = kernel(name);
      Case bad = fp8_case(kv, DType::f32, 32, 8, 128, 16, {100});
      bad.layout = Layout::nhd;
      EXPECT_NE(k->supports(bad).reason.find("q_dtype f32"), std::string::npos) << k->supports(bad).reason;
      bad.q_dtype = DType::bf16;
      bad.out_dtype = DType::f16;
      EXPECT_NE(k->supports(bad).reason.find("out_dtype f16"), std::string::npos) << k->supports(bad).reason;
      bad = fp8_case(kv, DType::bf16, 32, 8, 96, 16, {100});
      bad.layout = Layout::nhd;
      EXPECT_NE(k->supports(bad).reason.find("head_size 96"), std::string::npos) << k->supports(bad).reason;
      bad = fp8_case(kv, DType::bf16, 32, 8, 128, 16, {100});  // vllm layout: declined for the layout
      EXPECT_NE(k->supports(bad).reason.find("layout vllm"), std::string::npos) << k->supports(bad).reason;
    }
    for (const auto& name : kPagedKernels) {
      const KernelPtr k = kernel(name);
      Case bad = fp8_case(kv, DType::f32, 32, 8, 128, 16, {100});  // f32 query and output
      EXPECT_NE(k->supports(bad).reason.find("q_dtype f32"), std::string::npos) << k->supports(bad).reason;
      bad = fp8_case(kv, DType::bf16, 32, 8, 128, 16, {100});
      bad.out_dtype = DType::f16;  // q and out differ
      EXPECT_NE(k->supports(bad).reason.find("out_dtype f16"), std::string::npos) << k->supports(bad).reason;
      bad = fp8_case(kv, DType::bf16, 32, 8, 128, 8, {100});  // a 16-token V vector would leave the block
      EXPECT_NE(k->supports(bad).reason.find("block_size 8"), std::string::npos) << k->supports(bad).reason;
      bad = fp8_case(kv, DType::bf16, 32, 8, 96, 16, {100});
      EXPECT_NE(k->supports(bad).reason.find("head_size 96"), std::string::npos) << k->supports(bad).reason;
    }
  }
}

// The decode the kernels run (16-byte load, expand16) on the device, all 256 codes, against the oracle.
TEST(GpuFp8, DeviceDecodeOfAllCodesMatchesTheOracle) {
  REQUIRE_GPU();
  Backend& b = *gpu().backend;
  std::vector<std::uint8_t> codes(256);
  std::iota(codes.begin(), codes.end(), 0);
  Buf dc(b, codes.size()), df(b, codes.size() * 4);
  b.upload(dc.p, codes.data(), codes.size());
  for (DType kv : kFp8) {
    SCOPED_TRACE(dtype_name(kv));
    const gpu::LaunchResult r =
        gpu::decode_fp8_codes(static_cast<pacheck_dtype>(kv), dc.p, static_cast<float*>(df.p), 256, b.stream());
    ASSERT_TRUE(r.ok()) << r.error;
    b.sync();
    std::vector<std::uint32_t> got(256);
    b.download(got.data(), df.p, got.size() * 4);
    const Fp8 e = static_cast<Fp8>(static_cast<std::uint8_t>(kv));
    int wrong = 0;
    for (int c = 0; c < 256; ++c) {
      const float want = fp8_decode(static_cast<std::uint8_t>(c), e);
      std::uint32_t wb;
      std::memcpy(&wb, &want, 4);
      if (got[c] != wb) {
        ++wrong;
        ADD_FAILURE() << "code 0x" << std::hex << c << ": device bits 0x" << got[c] << ", oracle 0x" << wb;
      }
    }
    EXPECT_EQ(wrong, 0);
  }
  EXPECT_FALSE(gpu::decode_fp8_codes(PACHECK_DTYPE_BF16, dc.p, static_cast<float*>(df.p), 256, b.stream()).ok());
}

class GpuFp8Kernel : public GpuKernelTest {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GpuFp8Kernel);

// Every encoding x {bf16, f16} x head 64/128/256, block sizes 16/32/128, per-head and per-tensor scales,
// lengths of one token, straddling and aligned, and (for split-KV kernels) several partitions, in the
// kernel's layout: within the fixed limit of the output dtype (the quantisation is in the oracle's inputs:
// docs/FP8.md).
TEST_P(GpuFp8Kernel, AgreesWithTheOracle) {
  int idx = 0;
  for (DType kv : kFp8) {
    for (DType qo : {DType::bf16, DType::f16}) {
      for (int d : {64, 128, 256}) {
        ++idx;
        const int bs = idx % 3 == 0 ? 128 : (idx % 3 == 1 ? 16 : 32);
        Case c = fp8_case(kv, qo, 16, 4, d, bs, {1, bs - 1, 700, 1537 + idx});
        c.layout = k->layouts().front();
        c.seed = 300 + idx;
        if (idx % 4 == 2) {  // per tensor: the scalars are read, no arrays
          c.k_scale = KvScale{{0.5f}, std::nullopt};
          c.v_scale = KvScale{{2.0f}, std::nullopt};
        }
        if (idx % 5 == 3) c.dist = Dist::extreme;
        expect_clean_cell(*k, c, GetParam() + " " + std::string(dtype_name(kv)) + "/" + std::string(dtype_name(qo)),
                          &count, &declined);
      }
    }
  }
  EXPECT_EQ(count.cells + declined, 18);
  expect_ran(*k, count, declined, "the fp8 cells");
  for (const auto& [key, v] : worst_rel_linf())
    if (key.rfind(GetParam() + " fp8", 0) == 0) std::printf("[ rel_linf ] %-40s max %.3e\n", key.c_str(), v);
}

// NaN (each encoding's own code) and e5m2's Inf in the V tail of a straddling length fail a V-tail control
// exactly where poisons_v_tail() says, and nowhere else; honest kernels stay bitwise unchanged.
// e4m3fnuz's 0x7F (= 240, finite: poison 'max') must stay harmless, and its NaN 0x80 must be caught.
TEST_P(GpuFp8Kernel, TailPoisonUnchangedOrCaughtExactly) {
  for (DType kv : kFp8) {
    for (const std::vector<int>& lens : {std::vector<int>{4090}, std::vector<int>{4096}, std::vector<int>{4090, 17, 1}}) {
      Case c = fp8_case(kv, DType::bf16, 8, 2, 128, 16, lens);
      c.layout = k->layouts().front();
      if (!k->supports(c).ok) {
        ++declined;
        continue;
      }
      SCOPED_TRACE(c.id());
      CaseData data = prepare_case(c, RunOptions{});
      kernel_checks::expect_poison_sweep(
          *k, *gpu().backend, data,
          {Poison::nan, Poison::pinf, Poison::ninf, Poison::big, Poison::max_finite, Poison::zero}, &count);
    }
  }
  expect_ran(*k, count, declined, "the fp8 tail-poison cells");
  if (count.must_fail > 0 || plants_v_tail_fault(*k))
    kernel_checks::expect_control_caught(*k, count, "the fp8 tail-poison cells");
  // Per encoding: NaN in V and K+V at tail and all, for the two straddling length sets (2 x 2 x 2 = 8),
  // plus e5m2's +Inf and -Inf (16 more).
  if (plants_v_tail_fault(*k)) {
    EXPECT_EQ(count.must_fail, 3 * 8 + 16);
  }
}

INSTANTIATE_TEST_SUITE_P(All, GpuFp8Kernel, ::testing::ValuesIn(gpu_kernels(Kinds::all)),
                         kernel_checks::kernel_param_name);


/// Sets PACHECK_WARP_SPLIT_PIPELINE for its lifetime (restoring the previous value): the launcher reads it at
/// every launch, so one process runs both forms of the warp-split kernels.
class PipelineForm {
 public:
  explicit PipelineForm(const char* v) {
    if (const char* old = std::getenv("PACHECK_WARP_SPLIT_PIPELINE")) old_ = old;
    if (v) setenv("PACHECK_WARP_SPLIT_PIPELINE", v, 1);
    else unsetenv("PACHECK_WARP_SPLIT_PIPELINE");
  }
  ~PipelineForm() {
    if (old_) setenv("PACHECK_WARP_SPLIT_PIPELINE", old_->c_str(), 1);
    else unsetenv("PACHECK_WARP_SPLIT_PIPELINE");
  }
  PipelineForm(const PipelineForm&) = delete;
  PipelineForm& operator=(const PipelineForm&) = delete;

 private:
  std::optional<std::string> old_;
};

class GpuFp8WarpSplit : public GpuKernelTest {};

// gpu.warp_split / gpu.warp_split_gqa (nhd) at fp8: every encoding x {bf16, f16} x head 64/128/256, with the
// per-KV-head scales of fp8_case (every third case per tensor), GQA ratios 1, 2, 4, 8 and 16 (query-head
// tiles 1..8 for gpu.warp_split_gqa, several tiles at 16), block sizes 8, 16, 32 and 24 (nhd reads each token
// as its own row: no fp8 block-size limit), one-token, straddling and multi-partition lengths, in both
// forms of the kernel (the basic form and the pipelined cp.async form, forced with
// PACHECK_WARP_SPLIT_PIPELINE), within the fixed limit of the output dtype.
TEST_P(GpuFp8WarpSplit, AgreesWithTheOracleInBothForms) {
  int idx = 0, ran = 0;
  const int kv_heads_of[] = {4, 2, 1, 8, 1};  // with 16 query heads: ratios 4, 8, 16, 2, 16
  for (DType kv : kFp8) {
    for (DType qo : {DType::bf16, DType::f16}) {
      for (int d : {64, 128, 256}) {
        ++idx;
        const int bs = idx % 4 == 0 ? 8 : (idx % 4 == 1 ? 16 : (idx % 4 == 2 ? 32 : 24));
        const int heads = idx % 7 == 0 ? 4 : 16;  // ratio 1 now and then (4 / 4)
        const int kvh = heads == 4 ? 4 : kv_heads_of[idx % 5];
        Case c = fp8_case(kv, qo, heads, kvh, d, bs, {1, bs - 1, 700, 1537 + idx});
        c.layout = Layout::nhd;
        c.seed = 700 + idx;
        if (idx % 3 == 2) {  // per tensor: the scalars are read, no arrays
          c.k_scale = KvScale{{0.5f}, std::nullopt};
          c.v_scale = KvScale{{2.0f}, std::nullopt};
        }
        if (idx % 5 == 3) c.dist = Dist::extreme;
        const Support s = k->supports(c);
        ASSERT_TRUE(s.ok) << c.id() << ": " << s.reason;
        SCOPED_TRACE(c.id());
        CaseData data = prepare_case(c, RunOptions{});
        for (const char* form : {"0", "1"}) {
          SCOPED_TRACE(std::string("PACHECK_WARP_SPLIT_PIPELINE=") + form);
          const PipelineForm pf(form);
          const RawRun r = run(*k, data, data.cache);
          expect_clean_run(r);
          const Metrics m = compare(r.out, data.ref.out, c, c.out_dtype);
          EXPECT_EQ(m.bad_nonfinite, 0);
          EXPECT_LE(m.rel_linf, fixed_limit(qo)) << worst_element(c, m, r, data);
          double& w = worst_rel_linf()[GetParam() + (form[0] == '1' ? " pipelined " : " basic ") +
                                       std::string(dtype_name(kv)) + "/" + std::string(dtype_name(qo))];
          w = std::max(w, m.rel_linf);
          ++ran;
        }
      }
    }
  }
  EXPECT_EQ(ran, 36);
  for (const auto& [key, v] : worst_rel_linf())
    if (key.rfind(GetParam() + " ", 0) == 0 && key.find(" fp8") != std::string::npos)
      std::printf("[ rel_linf ] %-48s max %.3e\n", key.c_str(), v);
}

// Nothing past seq_len is read at fp8 either: NaN/Inf/max poison in every unwritten region (tail of the
// final block and the spare/padding blocks) leaves the output bitwise unchanged, in both forms.
TEST_P(GpuFp8WarpSplit, PoisonPastSeqLenLeavesTheOutputUnchanged) {
  for (DType kv : kFp8) {
    Case c = fp8_case(kv, DType::bf16, 8, 2, 128, 16, {4090, 17, 1});
    c.layout = Layout::nhd;
    SCOPED_TRACE(c.id());
    CaseData data = prepare_case(c, RunOptions{});
    for (const char* form : {"0", "1"}) {
      SCOPED_TRACE(std::string("PACHECK_WARP_SPLIT_PIPELINE=") + form);
      const PipelineForm pf(form);
      kernel_checks::expect_poison_sweep(*k, *gpu().backend, data, {Poison::nan, Poison::pinf, Poison::max_finite},
                                         &count);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, GpuFp8WarpSplit, ::testing::ValuesIn(kWarpSplitKernels), kernel_checks::kernel_param_name);

// Query and output with padded strides (not the contiguous ones make_args writes) give the same bits.
// Query and output with padded strides (not the contiguous ones make_args writes) give the same bits.
TEST_P(GpuInvariance, HonoursQueryAndOutStrides) {
  Backend& b = *gpu().backend;
  Case c = make_case(*k, 8, 2, 64, 16, DType::bf16, {70, 600});
  CaseData data = prepare_case(c, RunOptions{});
  const RawRun base = run(*k, data, data.cache);

  const int S = c.num_seqs(), H = c.num_heads, D = c.head_size;
  const std::int64_t qh = D + 24, qs = H * qh + 40, oh = D + 8, os = H * oh + 16;  // elements
  std::vector<std::uint8_t> q(static_cast<std::size_t>(S * qs) * 2, 0xFF), o(static_cast<std::size_t>(S * os) * 2, 0xFF);
  for (int s = 0; s < S; ++s)
    for (int h = 0; h < H; ++h)
      for (int d = 0; d < D; ++d)
        store(q.data(), s * qs + h * qh + d, c.q_dtype, data.pre.q[(static_cast<std::size_t>(s) * H + h) * D + d]);
  Buf dq(b, q.size()), dout(b, o.size()), dk(b, data.cache.key_cache.size()), dv(b, data.cache.value_cache.size()),
      dbt(b, data.cache.block_tables.size() * 4), dsl(b, data.cache.seq_lens.size() * 4);
  b.upload(dq.p, q.data(), q.size());
  b.upload(dout.p, o.data(), o.size());
  b.upload(dk.p, data.cache.key_cache.data(), data.cache.key_cache.size());
  b.upload(dv.p, data.cache.value_cache.data(), data.cache.value_cache.size());
  b.upload(dbt.p, data.cache.block_tables.data(), data.cache.block_tables.size() * 4);
  b.upload(dsl.p, data.cache.seq_lens.data(), data.cache.seq_lens.size() * 4);
  pacheck_kernel_args a = make_args(c, data.cache, dq.p, dk.p, dv.p, static_cast<const std::int32_t*>(dbt.p),
                                    static_cast<const std::int32_t*>(dsl.p), dout.p);
  a.q_stride_head = qh;
  a.q_stride_seq = qs;
  a.out_stride_head = oh;
  a.out_stride_seq = os;
  a.stream = b.stream();
  k->run(a);
  b.sync();
  b.download(o.data(), dout.p, o.size());
  std::int64_t diff = 0, pad_touched = 0;
  for (int s = 0; s < S; ++s)
    for (int h = 0; h < H; ++h)
      for (int d = 0; d < oh; ++d) {
        const std::uint32_t bits = load_bits(o.data(), s * os + h * oh + d, c.out_dtype);
        if (d < D) diff += bits != base.bits[(static_cast<std::size_t>(s) * H + h) * D + d];
        else pad_touched += bits != 0xFFFFu;
      }
  EXPECT_EQ(diff, 0);
  EXPECT_EQ(pad_touched, 0) << "wrote between output rows";
}

// ---------------------------------------------------------------------------------------------------
// Bench: only with PACHECK_GPU_BENCH=1 (ci/gpu-check.sh sets it). Bytes counted are the KV cache bytes of
// the context (K and V, each read once), against the device-to-device copy bandwidth measured here.

struct BenchShape {
  int num_seqs = 64, ctx = 8192, heads = 32, kv_heads = 8, head = 128, block = 16;
};

struct Timing {
  double median = 0, min = 0, max = 0;
};

Timing time_kernel(Backend& b, const Kernel& k, const pacheck_kernel_args& a, int reps) {
  for (int i = 0; i < 3; ++i) k.run(a);
  b.sync();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) ms.push_back(b.time_ms([&] { k.run(a); }));
  b.sync();
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front(), ms.back()};
}

TEST(GpuBench, DecodeBandwidth) {
  REQUIRE_GPU();
  const char* on = std::getenv("PACHECK_GPU_BENCH");
  if (!on || std::string(on) != "1") GTEST_SKIP() << "set PACHECK_GPU_BENCH=1 to run the bandwidth bench";
  Backend& b = *gpu().backend;
  const double copy_gbs = b.copy_bandwidth_gbs(std::size_t{2} << 30, 10);
  std::printf("[ bench    ] device: %s\n", b.description().c_str());
  std::printf("[ bench    ] copy bandwidth (2 GiB D2D, read+write, median of 10): %.0f GB/s\n", copy_gbs);

  auto bench_shape = [&](const BenchShape& sh, const std::vector<std::string>& names, bool cross_check,
                         const char* tag = "") {
    const int bpseq = (sh.ctx + sh.block - 1) / sh.block;
    const int num_blocks = sh.num_seqs * bpseq + 1;
    const std::size_t elems = static_cast<std::size_t>(num_blocks) * sh.block * sh.kv_heads * sh.head;
    const std::size_t kv_bytes = static_cast<std::size_t>(sh.num_seqs) * sh.ctx * sh.kv_heads * sh.head * 2 * 2;
    Buf kc(b, elems * 2), vc(b, elems * 2), q(b, static_cast<std::size_t>(sh.num_seqs) * sh.heads * sh.head * 2);
    Buf out(b, static_cast<std::size_t>(sh.num_seqs) * sh.heads * sh.head * 2);
    ASSERT_TRUE(gpu::fill_uniform(kc.p, elems, PACHECK_DTYPE_BF16, 1, 1.f, b.stream()).ok());
    ASSERT_TRUE(gpu::fill_uniform(vc.p, elems, PACHECK_DTYPE_BF16, 2, 1.f, b.stream()).ok());
    ASSERT_TRUE(gpu::fill_uniform(q.p, static_cast<std::size_t>(sh.num_seqs) * sh.heads * sh.head, PACHECK_DTYPE_BF16, 3, 1.f,
                                  b.stream()).ok());
    std::vector<std::int32_t> bt(static_cast<std::size_t>(sh.num_seqs) * bpseq), sl(sh.num_seqs, sh.ctx);
    std::iota(bt.begin(), bt.end(), 1);
    std::mt19937_64 rng(42);
    std::shuffle(bt.begin(), bt.end(), rng);  // physical ids unlike logical ones
    Buf dbt(b, bt.size() * 4), dsl(b, sl.size() * 4);
    b.upload(dbt.p, bt.data(), bt.size() * 4);
    b.upload(dsl.p, sl.data(), sl.size() * 4);
    b.sync();

    std::map<std::string, std::vector<std::uint16_t>> outs;
    for (const auto& name : names) {
      const KernelPtr k = kernel(name);
      const pacheck_layout layout = name.find("paged") != std::string::npos ? PACHECK_LAYOUT_VLLM : PACHECK_LAYOUT_NHD;
      pacheck_kernel_args a{};
      a.struct_size = sizeof a;
      a.num_seqs = sh.num_seqs;
      a.num_heads = sh.heads;
      a.num_kv_heads = sh.kv_heads;
      a.head_size = sh.head;
      a.block_size = sh.block;
      a.num_blocks = num_blocks;
      a.max_blocks_per_seq = bpseq;
      a.layout = layout;
      a.q_dtype = a.kv_dtype = a.out_dtype = PACHECK_DTYPE_BF16;
      a.query = q.p;
      a.q_stride_head = sh.head;
      a.q_stride_seq = static_cast<std::int64_t>(sh.heads) * sh.head;
      a.key_cache = kc.p;
      a.value_cache = vc.p;
      const CacheStrides st = make_strides(layout, sh.kv_heads, sh.head, sh.block, 8);
      for (int i = 0; i < 5; ++i) {
        a.k_strides[i] = st.k[i];
        a.v_strides[i] = st.v[i];
      }
      a.block_tables = static_cast<const std::int32_t*>(dbt.p);
      a.block_tables_stride = bpseq;
      a.seq_lens = static_cast<const std::int32_t*>(dsl.p);
      a.out = out.p;
      a.out_stride_head = sh.head;
      a.out_stride_seq = static_cast<std::int64_t>(sh.heads) * sh.head;
      a.scale = 1.f / std::sqrt(static_cast<float>(sh.head));
      a.k_scale = a.v_scale = 1.f;
      a.stream = b.stream();
      const Timing t = time_kernel(b, *k, a, 20);
      const double gbs = static_cast<double>(kv_bytes) / (t.median * 1e6);
      std::printf("[ bench    ] %-20s%s h%d/%d d%d bs%d ctx%d x%d bf16 P%-5d %8.3f ms (min %.3f max %.3f)  %6.0f GB/s  %5.1f%% of copy\n",
                  name.c_str(), tag, sh.heads, sh.kv_heads, sh.head, sh.block, sh.ctx, sh.num_seqs,
                  name.find("warp") != std::string::npos ? gpu::warp_split_partition_size() : (name == "gpu.paged_v2" ? 512 : 0),
                  t.median, t.min, t.max, gbs, 100.0 * gbs / copy_gbs);
      if (cross_check) {
        std::vector<std::uint16_t> host(static_cast<std::size_t>(sh.num_seqs) * sh.heads * sh.head);
        b.download(host.data(), out.p, host.size() * 2);
        outs[name] = std::move(host);
      }
    }
    // Kernels reading the same layout must agree (within bf16 output rounding and summation order).
    auto agree = [&](const std::string& x, const std::string& y) {
      if (!outs.count(x) || !outs.count(y)) return;
      double worst = 0, scale = 0;
      std::int64_t nonfinite = 0;
      for (std::size_t i = 0; i < outs[x].size(); ++i) {
        const float fx = from_bits(outs[x][i], DType::bf16), fy = from_bits(outs[y][i], DType::bf16);
        if (!std::isfinite(fx) || !std::isfinite(fy)) ++nonfinite;
        worst = std::max(worst, static_cast<double>(std::fabs(fx - fy)));
        scale = std::max(scale, static_cast<double>(std::fabs(fy)));
      }
      std::printf("[ bench    ] %s vs %s: rel_linf %.3e, non-finite %lld\n", x.c_str(), y.c_str(), worst / scale,
                  static_cast<long long>(nonfinite));
      EXPECT_EQ(nonfinite, 0);
      EXPECT_LE(worst / scale, 2 * fixed_limit(DType::bf16));
    };
    agree("gpu.paged_v1", "gpu.paged_v2");
    agree("gpu.warp_split", "gpu.warp_split_gqa");
  };

  BenchShape target;
  bench_shape(target, {"gpu.paged_v1", "gpu.paged_v2", "gpu.warp_split", "gpu.warp_split_gqa"}, true);
  // Partition size of the warp-split kernels (a build constant; 512 by default).
  const int default_p = gpu::warp_split_partition_size();
  for (int p : {256, 1024, 2048}) {
    gpu::set_warp_split_partition_size(p);
    bench_shape(target, {"gpu.warp_split", "gpu.warp_split_gqa"}, false);
  }
  gpu::set_warp_split_partition_size(default_p);
  // A/B in the same run: both warp-split kernels in each form (by default gpu.warp_split runs the basic
  // form and gpu.warp_split_gqa the pipelined one: kernels/gpu/warp_split.cu, use_pipeline).
  setenv("PACHECK_WARP_SPLIT_PIPELINE", "0", 1);
  bench_shape(target, {"gpu.warp_split", "gpu.warp_split_gqa"}, false, " basic");
  setenv("PACHECK_WARP_SPLIT_PIPELINE", "1", 1);
  bench_shape(target, {"gpu.warp_split", "gpu.warp_split_gqa"}, false, " pipelined");
  // gpu.warp_split's head slots per block (1: a block per query head; 4: the four warps serve the four query
  // heads of a GQA-4 group, reading the same rows together) in each form.
  for (const char* form : {"0", "1"}) {
    setenv("PACHECK_WARP_SPLIT_PIPELINE", form, 1);
    for (const char* slots : {"1", "2", "4"}) {
      setenv("PACHECK_WARP_SPLIT_SLOTS", slots, 1);
      const std::string tag = std::string(form[0] == '1' ? " pipelined" : " basic") + " slots" + slots;
      bench_shape(target, {"gpu.warp_split"}, false, tag.c_str());
    }
  }
  unsetenv("PACHECK_WARP_SPLIT_SLOTS");
  unsetenv("PACHECK_WARP_SPLIT_PIPELINE");
  // The basic form's exp2 and reciprocal: single-instruction (default) vs accurate.
  setenv("PACHECK_WARP_SPLIT_FAST", "0", 1);
  bench_shape(target, {"gpu.warp_split"}, true, " accurate-exp2");
  unsetenv("PACHECK_WARP_SPLIT_FAST");
  // Other GQA ratios at the same token count.
  for (int kv : {32, 4, 2}) {
    BenchShape sh;
    sh.kv_heads = kv;
    bench_shape(sh, {"gpu.warp_split", "gpu.warp_split_gqa"}, false);
  }
}
#endif  // PACHECK_HAVE_GPU

}  // namespace
}  // namespace pacheck
