// estimate_case_memory (exec/prepare.hpp) against what preparing and running a cell really allocates: every
// operator new of this executable is counted (live bytes and their peak), and the cell runs on a CPU backend
// whose device buffers are taken from operator new too, so the peak covers the case, the faulted copy, the
// uploaded inputs and the guarded output. The estimate must be at least the peak and at most twice it.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "exec/runner.hpp"

namespace {

std::atomic<long long> g_live{0}, g_peak{0};
constexpr std::size_t kHeader = 64;  // keeps every block 64-byte aligned and holds its size

void* counted_alloc(std::size_t n) {
  void* raw = std::malloc(n + kHeader);
  if (!raw) throw std::bad_alloc();
  *static_cast<std::size_t*>(raw) = n;
  const long long live = g_live += static_cast<long long>(n);
  for (long long p = g_peak.load(); live > p && !g_peak.compare_exchange_weak(p, live);) {
  }
  return static_cast<char*>(raw) + kHeader;
}
void counted_free(void* p) noexcept {
  if (!p) return;
  void* raw = static_cast<char*>(p) - kHeader;
  g_live -= static_cast<long long>(*static_cast<std::size_t*>(raw));
  std::free(raw);
}

}  // namespace

void* operator new(std::size_t n) { return counted_alloc(n); }
void* operator new[](std::size_t n) { return counted_alloc(n); }
void* operator new(std::size_t n, std::align_val_t a) {
  if (static_cast<std::size_t>(a) > kHeader) throw std::bad_alloc();
  return counted_alloc(n);
}
void* operator new[](std::size_t n, std::align_val_t a) { return operator new(n, a); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { counted_free(p); }

namespace pacheck {
namespace {

/// The CPU backend with its buffers from operator new, so that they are counted.
class CountedCpuBackend final : public Backend {
 public:
  CountedCpuBackend() : cpu_(make_cpu_backend()) {}
  std::string name() const override { return cpu_->name(); }
  pacheck_device device() const override { return cpu_->device(); }
  std::string description() const override { return cpu_->description(); }
  void* alloc(std::size_t bytes) override { return ::operator new(bytes, std::align_val_t{64}); }
  void release(void* p) override { ::operator delete(p, std::align_val_t{64}); }
  void upload(void* dst, const void* src, std::size_t bytes) override { cpu_->upload(dst, src, bytes); }
  void download(void* dst, const void* src, std::size_t bytes) override { cpu_->download(dst, src, bytes); }
  void sync() override { cpu_->sync(); }
  void* stream() override { return cpu_->stream(); }
  double time_ms(const std::function<void()>& fn) override { return cpu_->time_ms(fn); }
  double copy_bandwidth_gbs(std::size_t bytes, int reps) override { return cpu_->copy_bandwidth_gbs(bytes, reps); }

 private:
  std::unique_ptr<Backend> cpu_;
};

/// Peak bytes allocated above what was live before, while `cell` is prepared and run on `kernel`.
long long measured_peak(const Cell& cell, const Kernel& kernel, const RunOptions& opt) {
  CountedCpuBackend backend;
  const long long base = g_live.load();
  g_peak = base;
  {
    const CaseData data = prepare_case(cell.c, opt);
    CleanTwin twin;
    const Execution e = execute_cell(data, kernel, cell, backend, twin, opt.tolerance);
    EXPECT_EQ(e.error, ExecError::none) << e.result.detail;
  }
  return g_peak.load() - base;
}

struct Variant {
  const char* id;
  Precision precision;
  bool calibrated;
};

TEST(MemoryEstimate, CoversTheRealAllocationsOfACellWithinTwice) {
  const KernelPtr kernel = Registry::global().find("cpu.reference");
  ASSERT_TRUE(kernel);
  for (const Variant& v : {Variant{"h8/2 d64 bs16 bf16 ctx1000,333 nhd seed7 V:nan@tail", Precision::f32, false},
                           Variant{"h8/2 d64 bs16 bf16 ctx1000,333 nhd seed7 V:nan@tail", Precision::f64, true},
                           Variant{"h4/4 d128 bs32 f32 ctx4000 nhd seed3 clean", Precision::f32, false},
                           Variant{"h16/2 d64 bs16 fp8_e4m3fn q=bf16 o=bf16 ctx777,50,3 nhd seed1 K:nan@unused", Precision::f32, false}}) {
    SCOPED_TRACE(v.id);
    const Cell cell = parse_cell_id(v.id);
    RunOptions opt;
    opt.oracle_precision = v.precision;
    if (v.calibrated) opt.tolerance.policy = TolerancePolicy::calibrated;
    const double estimate = estimate_case_memory(cell.c, v.precision, v.calibrated).total();
    const long long peak = measured_peak(cell, *kernel, opt);
    ASSERT_GT(peak, 0);
    EXPECT_GE(estimate, static_cast<double>(peak));
    EXPECT_LE(estimate, 2.0 * static_cast<double>(peak));
    std::printf("%s: estimate %.0f, peak %lld (%.2fx)\n", v.id, estimate, peak, estimate / static_cast<double>(peak));
  }
}

TEST(MemoryEstimate, GrowsWithTheUnusedBlocksAndPaddingOfThePool) {
  Case c;
  c.seq_lens = {100};
  const MemoryEstimate base = estimate_case_memory(c);
  c.spare_blocks = 1000;
  const MemoryEstimate spare = estimate_case_memory(c);
  // 997 more blocks of block_size x num_kv_heads x head_size bf16 elements, in K and V.
  EXPECT_DOUBLE_EQ(spare.paged_cache - base.paged_cache, 997.0 * 16 * 8 * 128 * 2 * 2 + 997.0 * 16);
  EXPECT_EQ(spare.pre_paging, base.pre_paging);
}

TEST(MemoryEstimate, APlanCountsItsLargestCaseOncePerWorker) {
  Suite suite;
  suite.name = "mem";
  for (const char* id : {"h4/2 d32 bs16 f32 ctx100 nhd seed7 clean", "h4/2 d32 bs16 f32 ctx5000 nhd seed7 clean",
                         "h4/2 d32 bs16 f32 ctx5000 nhd seed7 V:nan@tail", "h4/2 d32 bs16 f32 ctx300 nhd seed7 clean"}) {
    SuiteCell sc;
    sc.cell = parse_cell_id(id);
    sc.native_layout = false;
    suite.cells.push_back(sc);
  }
  const KernelPtr kernel = Registry::global().find("cpu.reference");
  RunOptions opt;
  opt.threads = 8;
  const MemoryPlan m = plan_memory(suite, {kernel}, opt);
  EXPECT_EQ(m.cell_id, "h4/2 d32 bs16 f32 ctx5000 nhd seed7 clean");
  EXPECT_EQ(m.cases, 3u);
  EXPECT_EQ(m.concurrent, 3);  // 8 threads, but only 3 distinct cases
  EXPECT_DOUBLE_EQ(m.total(), 3 * estimate_case_memory(parse_cell_id(m.cell_id).c).total());
  opt.filter = std::regex("ctx100 ");
  EXPECT_EQ(plan_memory(suite, {kernel}, opt).concurrent, 1);
}

/// Resident bytes of this process (/proc/self/statm: resident pages).
long long resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return -1;
  long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * 4096 : -1;
}

// Issue 18: a cell of high block ids has a pool of 2 x 8 GiB virtual (2^32 bf16 elements per cache); the
// estimate counts its live blocks, and the process's resident memory after preparing the case and running a
// faulted cell on the real CPU backend (sparse faulted copy, zeroed device mappings) stays within it.
TEST(MemoryEstimate, HighBlockIdsCountResidentNotVirtualBytes) {
  const KernelPtr kernel = Registry::global().find("cpu.reference");
  ASSERT_TRUE(kernel);
  const Cell cell = parse_cell_id("h8/2 d128 bs16 bf16 ctx1000,37 nhd seed7 hiblk=32 K+V:nan@unused");
  const MemoryEstimate m = estimate_case_memory(cell.c);
  EXPECT_LT(m.total(), 512.0 * (1 << 20)) << "the estimate counts live blocks";
  const std::unique_ptr<Backend> backend = make_cpu_backend();
  const long long before = resident_bytes();
  long long during = 0;
  std::size_t virtual_pool = 0;
  {
    const CaseData data = prepare_case(cell.c, RunOptions{});
    virtual_pool = data.cache.key_cache.size() + data.cache.value_cache.size();
    CleanTwin twin;
    const Execution e = execute_cell(data, *kernel, cell, *backend, twin, Tolerance{});
    EXPECT_EQ(e.error, ExecError::none) << e.result.detail;
    EXPECT_EQ(e.result.verdict, Verdict::pass) << e.result.detail;
    during = resident_bytes() - before;
  }
  EXPECT_GE(virtual_pool, std::size_t{16} << 30);
  EXPECT_LT(static_cast<double>(during), m.total());
  // The slot map spans the whole pool (pool_plan's num_blocks, spares included) and every spare of the
  // window is live: a pool with 5,000 spare blocks counts them.
  for (const char* id : {"h8/2 d128 bs16 bf16 ctx1000 nhd seed7 spare=5000 hiblk=31",
                         "h8/2 d128 bs16 bf16 ctx1000 nhd seed7 spare=5000 hiblk=32"}) {
    const Case c = parse_case_id(id);
    const PagedCache pc = page(c, generate(c));
    const double live = static_cast<double>(pc.key_cache.live_bytes() + pc.value_cache.live_bytes());
    EXPECT_GE(estimate_case_memory(c).paged_cache, live + static_cast<double>(pc.slot_map.size())) << id;
  }
  std::printf("hiblk=32 cell: pool %.1f GiB virtual, estimate %.1f MiB, resident growth %.1f MiB\n",
              static_cast<double>(virtual_pool) / (1 << 30), m.total() / (1 << 20), static_cast<double>(during) / (1 << 20));
}

}  // namespace
}  // namespace pacheck
