// The checks every MLA kernel gets, whatever its device (tests/test_mla.cpp for the CPU kernels,
// tests/test_gpu_mla.cpp for the GPU ones): an MLA case prepared as the runner prepares a case (pre-paging latent
// rows, the fp32 oracle, the paged latent cache), one call of a kernel on a backend over the clean or a faulted
// cache, and its verdict from judge() (judge/judge.hpp) as `pacheck run` judges a cell: NaN/Inf where the oracle
// is finite, a bitwise difference from the clean-cache run, the fixed tolerance, the bias check. An honest
// kernel must pass every cell it supports; a negative control must fail exactly its expected_failures() cells.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "exec/guarded_run.hpp"
#include "faults/mla_inject.hpp"
#include "judge/judge.hpp"
#include "judge/verdict.hpp"
#include "kernels/backend.hpp"
#include "kernels/mla_kernel.hpp"
#include "oracle/mla.hpp"
#include "paging/mla_pager.hpp"

namespace pacheck::mla_checks {

/// One MLA case, prepared once for all its cells.
struct MlaData {
  MlaCase mc;
  PrePaging pre;
  OracleResult ref;
  PagedCache cache;
};
inline MlaData prepare_mla(const MlaCase& mc) {
  MlaData d{mc, generate_mla(mc), {}, {}};
  d.ref = mla_oracle(mc, d.pre);
  d.cache = page_mla(mc, d.pre);
  return d;
}

/// `k` as judge() sees a kernel: its name, and no expected failures (the MLA checks compare them themselves).
class JudgedMla final : public Kernel {
 public:
  explicit JudgedMla(const MlaKernel& k) : k_(k) {}
  std::string name() const override { return k_.name(); }
  std::string description() const override { return k_.description(); }
  pacheck_device device() const override { return k_.device(); }
  Support supports(const Case&) const override { return Support::yes(); }
  void run(const pacheck_kernel_args&) const override { throw KernelError("JudgedMla runs nothing"); }

 private:
  const MlaKernel& k_;
};

/// The inputs of one MLA call on a backend: the query, the latent cache, block tables, seq_lens and
/// query_start_loc uploaded, the output filled with NaN (no guard regions: the integrity checks of the runner
/// come with the MLA cells of the suites), and the call's arguments over them.
struct MlaDeviceCall {
  Backend& b;
  const MlaData& d;
  std::vector<std::uint8_t> host_out;
  DeviceBuffer q, k, bt, sl, qsl, out;
  pacheck_kernel_args a{};
  MlaDeviceCall(Backend& backend, const MlaData& data, const PagedCache& cache)
      : b(backend),
        d(data),
        host_out(static_cast<std::size_t>(data.mc.c.num_query_tokens()) * data.mc.c.num_heads * data.mc.m.v_head_dim *
                 dtype_size(data.mc.c.out_dtype)),
        q(backend, data.pre.q.size() * dtype_size(data.mc.c.q_dtype)),
        k(backend, cache.key_cache.size()),
        bt(backend, cache.block_tables.size() * 4),
        sl(backend, cache.seq_lens.size() * 4),
        qsl(backend, cache.query_start_loc.size() * 4),
        out(backend, host_out.size()) {
    const std::vector<std::uint8_t> qb = query_bytes(d.mc.c, d.pre);
    b.upload(q.p, qb.data(), qb.size());
    b.upload(k.p, cache.key_cache.data(), cache.key_cache.size());
    b.upload(bt.p, cache.block_tables.data(), cache.block_tables.size() * 4);
    b.upload(sl.p, cache.seq_lens.data(), cache.seq_lens.size() * 4);
    if (!cache.query_start_loc.empty()) b.upload(qsl.p, cache.query_start_loc.data(), cache.query_start_loc.size() * 4);
    const std::size_t n = host_out.size() / dtype_size(d.mc.c.out_dtype);
    for (std::size_t i = 0; i < n; ++i) store(host_out.data(), i, d.mc.c.out_dtype, std::numeric_limits<float>::quiet_NaN());
    b.upload(out.p, host_out.data(), host_out.size());
    a = make_mla_args(d.mc, cache, q.p, k.p, static_cast<const std::int32_t*>(bt.p),
                      static_cast<const std::int32_t*>(sl.p), out.p,
                      cache.query_start_loc.empty() ? nullptr : static_cast<const std::int32_t*>(qsl.p));
    a.stream = b.stream();
  }
  /// Runs `kernel` once and returns its output as a RawRun.
  RawRun run(const MlaKernel& kernel) {
    kernel.run(a, mla_dims(d.mc.m));
    b.sync();
    b.download(host_out.data(), out.p, host_out.size());
    const DType od = d.mc.c.out_dtype;
    const std::size_t n = host_out.size() / dtype_size(od);
    RawRun r;
    r.bits.resize(n);
    r.out.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      r.bits[i] = load_bits(host_out.data(), i, od);
      r.out[i] = from_bits(r.bits[i], od);
    }
    return r;
  }
};

/// One call of `k` on `b` over `cache` (data.cache or a faulted copy of it).
inline RawRun run_mla_once(const MlaKernel& k, Backend& b, const MlaData& d, const PagedCache& cache) {
  MlaDeviceCall call(b, d, cache);
  return call.run(k);
}

/// The faults every MLA kernel test writes into each case's latent cache: NaN / +-Inf / finite garbage in the
/// rope part (K), the latent part (V) and the whole row (K+V), over the tail, every unwritten slot, other
/// sequences' slots, unused blocks and the padding target.
inline const std::vector<FaultSpec>& mla_faults() {
  static const std::vector<FaultSpec> f{
      {Poison::nan, Target::v, Region::tail},     {Poison::nan, Target::k, Region::tail},
      {Poison::pinf, Target::kv, Region::tail},   {Poison::nan, Target::kv, Region::all},
      {Poison::nan, Target::v, Region::others},   {Poison::nan, Target::kv, Region::unused},
      {Poison::ninf, Target::v, Region::padding}, {Poison::big, Target::kv, Region::all},
  };
  return f;
}

/// The names of `kernels`, in order: the parameter list of a test over them.
inline std::vector<std::string> mla_names(const std::vector<MlaKernelPtr>& kernels) {
  std::vector<std::string> n;
  for (const MlaKernelPtr& k : kernels) n.push_back(k->name());
  return n;
}
/// The kernel of `kernels` named `name`, or nullptr.
inline MlaKernelPtr find_mla(const std::vector<MlaKernelPtr>& kernels, const std::string& name) {
  for (const MlaKernelPtr& k : kernels)
    if (k->name() == name) return k;
  return nullptr;
}

/// Cells a check ran, and of them the ones a negative control had to fail (must_fail) and did (failed).
struct Count {
  int cells = 0, must_fail = 0, failed = 0;
};

/// Judges `run` of `k` on `cell` (clean_bits: the clean-cache run's output for a faulted cell) and expects a
/// failing verdict exactly where k.expected_failures() names the cell, a pass everywhere else.
inline CellResult expect_mla_verdict(const MlaKernel& k, const MlaCell& cell, const MlaData& d, const RawRun& run,
                                     const std::vector<std::uint32_t>* clean_bits, Count* count) {
  const JudgedMla judged(k);
  const CellResult r =
      judge(Cell{cell.mc.output_case(), cell.fault}, judged, d.ref, std::nullopt, run, clean_bits, Tolerance{});
  const auto pred = k.expected_failures();
  const bool must_fail = pred && (*pred)(cell);
  ++count->cells;
  if (must_fail) {
    ++count->must_fail;
    count->failed += is_failure(r.verdict);
    EXPECT_TRUE(is_failure(r.verdict)) << k.name() << " " << cell.id() << ": negative control blind (verdict "
                                       << verdict_name(r.verdict) << ")";
  } else {
    EXPECT_EQ(std::string(verdict_name(r.verdict)), "pass") << k.name() << " " << cell.id() << ": " << r.detail;
  }
  return r;
}

/// Runs `k` over the clean cache of `d` and over each fault of `faults` (skipping those the cache dtype
/// cannot hold), judging every cell (expect_mla_verdict).
inline void expect_mla_cells(const MlaKernel& k, Backend& b, const MlaData& d, const std::vector<FaultSpec>& faults,
                             Count* count) {
  const RawRun clean = run_mla_once(k, b, d, d.cache);
  expect_mla_verdict(k, MlaCell{d.mc, FaultSpec{}}, d, clean, nullptr, count);
  for (const FaultSpec& f : faults) {
    if (!poison_unsupported(f.poison, d.mc.c.kv_dtype).empty()) continue;
    PagedCache faulted = d.cache;
    inject_mla(faulted, d.mc.m, f);
    expect_mla_verdict(k, MlaCell{d.mc, f}, d, run_mla_once(k, b, d, faulted), &clean.bits, count);
  }
}

/// For a negative control, at the end of a test built to exercise it: some cell had to fail and every such
/// cell failed. Prints the counts. Nothing for honest kernels.
inline void expect_mla_control_caught(const MlaKernel& k, const Count& count, const char* what) {
  if (!k.is_negative_control()) return;
  EXPECT_GT(count.must_fail, 0) << k.name() << ": no cell of " << what << " reaches its planted fault";
  EXPECT_EQ(count.failed, count.must_fail) << k.name();
  std::printf("[ control  ] %s failed %d of the %d cells of %s it must fail (%d cells run)\n", k.name().c_str(),
              count.failed, count.must_fail, what, count.cells);
}

}  // namespace pacheck::mla_checks
