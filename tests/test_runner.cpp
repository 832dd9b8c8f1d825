// The runner's verdicts, each produced by a kernel planted to produce it, and the negative-control logic.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "exec/runner.hpp"
#include "exec_fixtures.hpp"

namespace pacheck {
namespace {

/// A CPU kernel that runs cpu.reference and then plants one fault.
class Planted : public Kernel {
 public:
  enum class What { none, write_past_output, skip_element, write_input, decline, throw_error, drop_last_token,
                    leak_v_tail, nan_everywhere };
  explicit Planted(What w, std::string name, bool control = false) : what_(w), name_(std::move(name)), control_(control) {}
  std::string name() const override { return name_; }
  std::string description() const override { return "planted fault"; }
  pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
  Support supports(const Case&) const override {
    return what_ == What::decline ? Support::no("declines everything") : Support::yes();
  }
  std::optional<std::function<bool(const Cell&)>> expected_failures() const override {
    if (!control_) return std::nullopt;
    return std::function<bool(const Cell&)>(poisons_v_tail);
  }
  void run(const pacheck_kernel_args& a) const override {
    static const KernelPtr ref = Registry::global().find("cpu.reference");
    const DType out = static_cast<DType>(a.out_dtype);
    const std::size_t n = static_cast<std::size_t>(a.num_seqs) * a.num_heads * a.head_size;
    switch (what_) {
      case What::drop_last_token: {
        // Off by one: every sequence loses its last token.
        std::vector<std::int32_t> lens(a.seq_lens, a.seq_lens + a.num_seqs);
        for (auto& l : lens) l = std::max(1, l - 1);
        pacheck_kernel_args b = a;
        b.seq_lens = lens.data();
        ref->run(b);
        return;
      }
      case What::skip_element: {
        // Computes everything into scratch but copies back all elements except the last one.
        std::vector<std::uint8_t> scratch(n * dtype_size(out));
        pacheck_kernel_args b = a;
        b.out = scratch.data();
        ref->run(b);
        std::memcpy(a.out, scratch.data(), (n - 1) * dtype_size(out));
        return;
      }
      case What::throw_error: throw KernelError("planted launch failure");
      default: ref->run(a);
    }
    switch (what_) {
      case What::write_past_output: store(a.out, n, out, 1.0f); break;
      case What::write_input: std::memset(const_cast<void*>(a.key_cache), 0x11, 4); break;
      case What::nan_everywhere: store(a.out, 0, out, NAN); break;
      case What::leak_v_tail: {
        // Adds a tiny multiple of the first tail V element of sequence 0: finite stale data moves an output.
        const int len = a.seq_lens[0];
        if (len % a.block_size == 0) break;
        const std::int64_t block = a.block_tables[(len - 1) / a.block_size];
        const float v = load(a.value_cache, value_offset(a.layout, a.v_strides, block, 0, len % a.block_size, 0),
                             static_cast<DType>(a.kv_dtype));
        store(a.out, 0, out, load(a.out, 0, out) + 1e-6f * v);
        break;
      }
      default: break;
    }
  }

 private:
  What what_;
  std::string name_;
  bool control_;
};

Suite small_suite(std::vector<FaultSpec> faults, std::vector<int> lens = {37, 48}) {
  return exec_test::two_sequence_suite(lens, faults);  // the second sequence is aligned: only `len` decides straddling
}

const FaultSpec kClean{};
const FaultSpec kVNanTail{Poison::nan, Target::v, Region::tail};
const FaultSpec kV1e4Tail{Poison::big, Target::v, Region::tail};

RunSummary run_one(const Kernel* k, const Suite& s, int threads = 2) {
  RunOptions o;
  o.threads = threads;
  return run_suite(s, {KernelPtr(k, [](const Kernel*) {})}, "cpu", o);
}

Verdict only_verdict(const RunSummary& s) {
  EXPECT_FALSE(s.results.empty());
  for (const auto& r : s.results) EXPECT_EQ(r.verdict, s.results.front().verdict) << r.cell_id << " " << r.detail;
  return s.results.front().verdict;
}

TEST(Verdicts, EachPlantedKernelGetsItsVerdict) {
  const Suite suite = small_suite({kClean});
  struct Row { Planted::What what; Verdict v; };
  for (Row row : {Row{Planted::What::none, Verdict::pass}, Row{Planted::What::write_past_output, Verdict::oob_write},
                  Row{Planted::What::skip_element, Verdict::unwritten}, Row{Planted::What::write_input, Verdict::input_mutated},
                  Row{Planted::What::decline, Verdict::declined}, Row{Planted::What::throw_error, Verdict::error},
                  Row{Planted::What::drop_last_token, Verdict::fail}, Row{Planted::What::nan_everywhere, Verdict::poisoned}}) {
    Planted k(row.what, "planted");
    const RunSummary s = run_one(&k, suite);
    EXPECT_EQ(only_verdict(s), row.v) << static_cast<int>(row.what);
    EXPECT_EQ(s.exit_code(), row.v == Verdict::pass ? 0 : 1);
  }
}

TEST(Verdicts, FiniteStaleTailIsVariantEvenWithinTolerance) {
  Planted k(Planted::What::leak_v_tail, "planted.leak");
  const RunSummary s = run_one(&k, small_suite({kClean, kV1e4Tail}, {37}));
  ASSERT_EQ(s.results.size(), 2u);
  EXPECT_EQ(s.results[0].verdict, Verdict::pass);     // clean tail: zeros leak nothing
  EXPECT_EQ(s.results[1].verdict, Verdict::variant);  // 1e4 in the tail moves one element
  EXPECT_LT(s.results[1].metrics.rel_linf, s.results[1].limit);
  EXPECT_EQ(s.results[1].variant_elements, 1);
}

TEST(Verdicts, AllDeclinedIsNotAPass) {
  Planted k(Planted::What::decline, "planted.decline");
  const RunSummary s = run_one(&k, small_suite({kClean}));
  EXPECT_TRUE(s.vacuous);
  EXPECT_EQ(s.exit_code(), 1);
}

TEST(NegativeControl, CaughtWhenItsCellsFail) {
  const KernelPtr vv = Registry::global().find("cpu.vector_v");
  const RunSummary s = run_suite(small_suite({kClean, kVNanTail}), {vv}, "cpu", RunOptions{});
  ASSERT_EQ(s.kernels.size(), 1u);
  EXPECT_EQ(s.kernels[0].control, ControlOutcome::caught);
  EXPECT_EQ(s.kernels[0].caught, 1);  // only ctx 37 straddles with V poisoned; 48 is aligned
  EXPECT_EQ(s.exit_code(), 0);
}

TEST(NegativeControl, BlindWhenAControlPasses) {
  // A correct kernel that claims to be a tail-read control is not caught: the run must be invalid (exit 3).
  Planted k(Planted::What::none, "planted.fake_control", /*control=*/true);
  const RunSummary s = run_one(&k, small_suite({kClean, kVNanTail}));
  EXPECT_TRUE(s.blind);
  EXPECT_EQ(s.kernels[0].control, ControlOutcome::blind);
  EXPECT_EQ(s.exit_code(), 3);
}

// A negative control runs only on the cells its expected_failures() marks; the others are settled as
// not_run, counted and reported, never dropped.
TEST(NegativeControl, NotRunOutsideItsExpectedCells) {
  const KernelPtr vv = Registry::global().find("cpu.vector_v");
  const Suite suite = small_suite({kClean, kVNanTail, kV1e4Tail}, {17, 37, 48});
  const RunSummary s = run_suite(suite, {vv}, "cpu", RunOptions{});
  ASSERT_EQ(s.results.size(), suite.cells.size()) << "every cell accounted for";
  int not_run = 0, caught = 0;
  for (const CellResult& r : s.results) {
    if (r.expected_fail) {
      ++caught;
      EXPECT_TRUE(is_failure(r.verdict)) << r.cell_id;
    } else {
      ++not_run;
      EXPECT_EQ(r.verdict, Verdict::not_run) << r.cell_id;
      EXPECT_EQ(r.detail, kNotRunDetail);
      EXPECT_EQ(r.seconds, 0) << "no kernel call";
    }
  }
  EXPECT_EQ(caught, 2) << "ctx 17 and 37 straddle with NaN in the V tail";
  EXPECT_EQ(s.kernels[0].not_run, not_run);
  EXPECT_EQ(s.not_run, not_run);
  EXPECT_EQ(s.kernels[0].caught, 2);
  EXPECT_EQ(s.kernels[0].passed, 0);
  EXPECT_EQ(s.verdicts[verdict_rank(Verdict::not_run)], not_run);
  EXPECT_EQ(s.kernels[0].control, ControlOutcome::caught);
  EXPECT_FALSE(s.vacuous);
  EXPECT_EQ(s.exit_code(), 0);
}

// --controls-everywhere (an audit): the control runs on every cell, passes those outside its expected
// failures, and is caught on exactly the same cells with the same verdicts as in a default run.
TEST(NegativeControl, EverywhereGivesTheSameCaughtSet) {
  std::vector<KernelPtr> controls = Registry::global().negative_controls(PACHECK_DEVICE_CPU);
  ASSERT_GE(controls.size(), 2u);
  const Suite suite = small_suite({kClean, kVNanTail, kV1e4Tail, {Poison::nan, Target::k, Region::tail}}, {17, 48});
  RunOptions everywhere;
  everywhere.controls_everywhere = true;
  const RunSummary a = run_suite(suite, controls, "cpu", RunOptions{});
  const RunSummary b = run_suite(suite, controls, "cpu", everywhere);
  ASSERT_EQ(a.results.size(), b.results.size());
  int expected = 0;
  for (std::size_t i = 0; i < a.results.size(); ++i) {
    const CellResult &x = a.results[i], &y = b.results[i];
    ASSERT_EQ(x.cell_id, y.cell_id);
    ASSERT_EQ(x.kernel, y.kernel);
    EXPECT_EQ(x.expected_fail, y.expected_fail);
    if (x.verdict == Verdict::declined) {
      EXPECT_EQ(y.verdict, Verdict::declined) << x.kernel << " " << x.cell_id;
    } else if (x.expected_fail) {
      ++expected;
      EXPECT_EQ(x.verdict, y.verdict) << x.kernel << " " << x.cell_id;
      EXPECT_EQ(cell_outcome(a, x), CellOutcome::caught) << x.kernel << " " << x.cell_id;
    } else {
      EXPECT_EQ(x.verdict, Verdict::not_run) << x.kernel << " " << x.cell_id;
      EXPECT_EQ(cell_outcome(b, y), CellOutcome::passed) << "a control passes the cells outside its expected "
                                                            "failures: "
                                                         << y.kernel << " " << y.cell_id << " " << verdict_name(y.verdict);
    }
  }
  EXPECT_GT(expected, 0);
  EXPECT_EQ(a.caught, b.caught);
  EXPECT_EQ(b.not_run, 0);
  EXPECT_EQ(a.not_run + a.caught + a.declined, static_cast<int>(a.results.size()));
  for (std::size_t k = 0; k < a.kernels.size(); ++k) EXPECT_EQ(a.kernels[k].control, b.kernels[k].control) << a.kernels[k].kernel;
  EXPECT_EQ(a.exit_code(), b.exit_code());
}

// A control with no cell of the selection that can show its fault is "not exercised": not vacuous, not a
// failure (exit 0), as when the selection holds none of its planted cells.
TEST(NegativeControl, OnlyNotRunCellsIsNotExercisedNotVacuous) {
  const KernelPtr vv = Registry::global().find("cpu.vector_v");
  const RunSummary s = run_suite(small_suite({kClean}), {vv}, "cpu", RunOptions{});
  ASSERT_EQ(s.results.size(), 2u);
  EXPECT_EQ(s.kernels[0].not_run, 2);
  EXPECT_EQ(s.kernels[0].control, ControlOutcome::not_exercised);
  EXPECT_FALSE(s.kernels[0].vacuous);
  EXPECT_FALSE(s.vacuous);
  EXPECT_EQ(s.exit_code(), 0);
}

// A control that declines every selected cell (cpu.fp8_scale_fault on per-slot scale cells) is not exercised
// either: a declined cell is never planted, so the run is not vacuous for it and exits 0 (fresh-user audit:
// `run --suite aiter --filter slot --with-controls` exited 1 with "NO CELL RAN" on such a control). A kernel
// under test that declines everything is still vacuous.
TEST(NegativeControl, DecliningEveryCellIsNotExercisedNotVacuous) {
  Planted control(Planted::What::decline, "planted.declining_control", /*control=*/true);
  const KernelPtr ref = Registry::global().find("cpu.reference");
  const RunSummary s = run_suite(small_suite({kClean, kVNanTail}), {ref, exec_test::unowned(&control)}, "cpu", RunOptions{});
  ASSERT_EQ(s.kernels.size(), 2u);
  EXPECT_GE(s.kernels[1].declined, 1) << "its V-tail cells are run, and declined";
  EXPECT_EQ(s.kernels[1].caught + s.kernels[1].missed, 0);
  EXPECT_EQ(s.kernels[1].control, ControlOutcome::not_exercised);
  EXPECT_FALSE(s.kernels[1].vacuous);
  EXPECT_FALSE(s.vacuous);
  EXPECT_EQ(s.exit_code(), 0);
  Planted user(Planted::What::decline, "planted.declining_kernel");
  EXPECT_TRUE(run_suite(small_suite({kClean}), {exec_test::unowned(&user)}, "cpu", RunOptions{}).vacuous);
}

// The audit finds a control whose planted fault shows outside its declared expected failures; the default
// run does not run it there.
TEST(NegativeControl, EverywhereFindsAFaultOutsideTheExpectedCells) {
  Planted k(Planted::What::nan_everywhere, "planted.nan_control", /*control=*/true);
  const Suite suite = small_suite({kClean, kVNanTail});
  RunOptions everywhere;
  everywhere.controls_everywhere = true;
  const RunSummary a = run_suite(suite, {exec_test::unowned(&k)}, "cpu", RunOptions{});
  const RunSummary b = run_suite(suite, {exec_test::unowned(&k)}, "cpu", everywhere);
  EXPECT_EQ(a.kernels[0].caught, 1);
  EXPECT_EQ(a.kernels[0].not_run, 3);
  EXPECT_EQ(a.exit_code(), 0);
  EXPECT_EQ(b.kernels[0].caught, 1);
  EXPECT_EQ(b.kernels[0].failed, 3) << "poisoned outside its expected failures";
  EXPECT_EQ(b.exit_code(), 1);
}

TEST(Runner, ResultsIndependentOfThreadCount) {
  const KernelPtr k = Registry::global().find("cpu.split_kv");
  const Suite suite = small_suite({kClean, kVNanTail, kV1e4Tail}, {1, 15, 16, 17, 600});
  RunOptions one, two;
  one.threads = 1;
  two.threads = 2;
  const RunSummary a = run_suite(suite, {k}, "cpu", one), b = run_suite(suite, {k}, "cpu", two);
  ASSERT_EQ(a.results.size(), b.results.size());
  for (std::size_t i = 0; i < a.results.size(); ++i) {
    EXPECT_EQ(a.results[i].cell_id, b.results[i].cell_id);
    EXPECT_EQ(a.results[i].verdict, b.results[i].verdict);
    EXPECT_EQ(a.results[i].metrics.rel_linf, b.results[i].metrics.rel_linf);
  }
}

TEST(Runner, FilterAndShardSelectCells) {
  const KernelPtr k = Registry::global().find("cpu.reference");
  const Suite suite = small_suite({kClean, kVNanTail}, {17, 33, 64});
  RunOptions o;
  o.filter = std::regex("ctx33,");
  EXPECT_EQ(run_suite(suite, {k}, "cpu", o).results.size(), 2u);
  RunOptions s0, s1;
  s0.shard_count = s1.shard_count = 2;
  s1.shard_index = 1;
  const auto a = run_suite(suite, {k}, "cpu", s0), b = run_suite(suite, {k}, "cpu", s1);
  EXPECT_EQ(a.results.size() + b.results.size(), suite.cells.size());
  RunOptions bad;
  bad.shard_count = 2;
  bad.shard_index = 2;
  EXPECT_THROW(run_suite(suite, {k}, "cpu", bad), std::invalid_argument);
}

TEST(Runner, UnknownDeviceIsAnError) {
  EXPECT_THROW(open_backend("tpu:0"), std::invalid_argument);
  EXPECT_THROW(open_backend("cuda:all"), std::invalid_argument) << "one backend is one device";
}

// Issue 8: --device cuda:all. The spec expands to one backend spec per device present.
TEST(AllDevices, ExpandsToOneSpecPerDevice) {
  EXPECT_TRUE(is_all_devices_spec("cuda:all"));
  EXPECT_TRUE(is_all_devices_spec("hip:all"));
  for (const char* s : {"cuda", "cuda:0", "cuda:1", "hip", "cpu", "all", "cuda:al", "cpu:all", "tpu:all"})
    EXPECT_FALSE(is_all_devices_spec(s)) << s;
  EXPECT_EQ(expand_device_spec("cuda:all", 2, "no CUDA device: x"), (std::vector<std::string>{"cuda:0", "cuda:1"}));
  EXPECT_EQ(expand_device_spec("hip:all", 3, ""), (std::vector<std::string>{"hip:0", "hip:1", "hip:2"}));
  EXPECT_EQ(expand_device_spec("cuda:all", 1, ""), (std::vector<std::string>{"cuda:0"}));
  for (const char* s : {"cpu", "cuda", "cuda:1", "hip:0"})
    EXPECT_EQ(expand_device_spec(s, 8, ""), (std::vector<std::string>{s})) << "not an :all spec: unchanged";
  try {
    expand_device_spec("cuda:all", 0, "no CUDA device: cudaErrorNoDevice");
    ADD_FAILURE() << "cuda:all with no device expanded";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "no CUDA device: cudaErrorNoDevice") << "the same message as a plain 'cuda'";
  }
  EXPECT_THROW(expand_device_spec("tpu:all", 2, ""), std::invalid_argument);
  EXPECT_THROW(expand_device_spec("cuda:all", -1, ""), std::invalid_argument);
}

// GPU cases go round-robin over the devices by position: the same suite always puts the same case on
// the same device, and every device gets a share.
TEST(AllDevices, GpuCasesAreSpreadRoundRobinByPosition) {
  EXPECT_THROW(gpu_device_for(0, 0), std::invalid_argument);
  std::vector<int> per_device(2, 0);
  for (std::size_t i = 0; i < 9; ++i) ++per_device[gpu_device_for(i, 2)];
  EXPECT_EQ(per_device, (std::vector<int>{5, 4}));
  for (std::size_t i = 0; i < 20; ++i) EXPECT_EQ(gpu_device_for(i, 1), 0u);
  EXPECT_EQ(gpu_device_for(7, 4), 3u);
  EXPECT_EQ(gpu_device_for(8, 4), 0u);
}

/// A GPU kernel of the linked GPU runtime's kind that is never run where no device exists.
class NoopGpu final : public Kernel {
 public:
  std::string name() const override { return "test.noop_gpu"; }
  std::string description() const override { return "GPU kernel that writes nothing"; }
  pacheck_device device() const override {
    return gpu_backend_kind() == "hip" ? PACHECK_DEVICE_HIP : PACHECK_DEVICE_CUDA;
  }
  Support supports(const Case&) const override { return Support::yes(); }
  void run(const pacheck_kernel_args&) const override {}
};

// Where no GPU exists, cuda:all fails exactly as cuda does: the parent's open error for an in-process
// kernel, the same per-cell error for an isolated one.
TEST(AllDevices, NoDeviceFailsAsThePlainKindDoes) {
  const KernelPtr k = std::make_shared<NoopGpu>();
  const std::string kind = device_kind_spec(k->device());
  try {
    const auto specs = resolve_device_specs(kind + ":all");
    GTEST_SKIP() << specs.size() << " " << kind << " device(s) present: this test is for machines without one";
  } catch (const std::runtime_error&) {
  }
  const Suite suite = small_suite({kClean, kVNanTail}, {17});
  RunOptions o;
  o.threads = 2;
  std::string plain, all;
  try {
    run_suite(suite, {k}, kind, o);
  } catch (const std::runtime_error& e) {
    plain = e.what();
  }
  try {
    run_suite(suite, {k}, kind + ":all", o);
  } catch (const std::runtime_error& e) {
    all = e.what();
  }
  EXPECT_NE(plain, "");
  EXPECT_EQ(all, plain);
  o.isolate = [](const Kernel&) { return true; };
  const RunSummary a = run_suite(suite, {k}, kind, o), b = run_suite(suite, {k}, kind + ":all", o);
  ASSERT_EQ(a.results.size(), b.results.size());
  for (std::size_t i = 0; i < a.results.size(); ++i) {
    EXPECT_EQ(a.results[i].verdict, Verdict::error);
    EXPECT_EQ(b.results[i].verdict, a.results[i].verdict);
    EXPECT_EQ(b.results[i].detail, a.results[i].detail);
  }
}

TEST(Runner, EachResultNamesTheDeviceThatRanIt) {
  const KernelPtr k = Registry::global().find("cpu.reference");
  RunOptions o;
  o.threads = 2;
  for (const auto& r : run_suite(small_suite({kClean, kVNanTail}, {17, 33}), {k}, "cpu", o).results)
    EXPECT_EQ(r.device, "cpu") << r.cell_id;
  o.isolate = [](const Kernel&) { return true; };
  for (const auto& r : run_suite(small_suite({kClean}, {17}), {k}, "cpu", o).results)
    EXPECT_EQ(r.device, "cpu") << "isolated: " << r.cell_id << " " << r.detail;
}

}  // namespace
}  // namespace pacheck
