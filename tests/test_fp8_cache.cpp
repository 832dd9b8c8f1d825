// fp8 KV caches end to end: scales in the case model and suites, the dequantised pre-paging values and
// the codes the pager writes, scales through make_args and the runner, CPU kernels and the two fp8
// negative controls, and the acceptance run of suites/fp8.toml.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "paging/pager.hpp"
#include "core/fp8.hpp"
#include "report/report.hpp"
#include "exec/runner.hpp"

namespace pacheck {
namespace {

constexpr DType kFp8[] = {DType::fp8_e4m3fn, DType::fp8_e4m3fnuz, DType::fp8_e5m2};

Case fp8_case(DType kv, Layout layout = Layout::nhd, std::vector<int> lens = {37, 16, 5}) {
  Case c;
  c.num_heads = 8;
  c.num_kv_heads = 4;
  c.head_size = 32;  // a multiple of the vllm fp8 vector width x = 16
  c.block_size = 16;
  c.seq_lens = std::move(lens);
  c.layout = layout;
  c.kv_dtype = kv;
  c.q_dtype = c.out_dtype = DType::bf16;
  c.k_scale.range = std::pair{0.3f, 3.0f};
  c.v_scale.values = {1.7f, 0.4f, 3.0f, 0.9f};
  return c;
}

std::string field_of(const Case& c) {
  try {
    c.validate();
  } catch (const CaseError& e) {
    return e.field;
  }
  return "";
}

TEST(KvScale, FormsResolveAndIdsRoundTrip) {
  KvScale s;
  EXPECT_TRUE(s.is_default());
  EXPECT_EQ(s.resolve(3), (std::vector<float>{1, 1, 1}));
  s.values = {0.5f};
  EXPECT_FALSE(s.per_head());
  EXPECT_EQ(s.resolve(2), (std::vector<float>{0.5f, 0.5f}));
  s.range = std::pair{0.3f, 3.0f};
  s.values.clear();
  EXPECT_TRUE(s.per_head());
  const std::vector<float> r = s.resolve(4);
  EXPECT_EQ(r.front(), 0.3f);
  EXPECT_EQ(r.back(), 3.0f);
  EXPECT_EQ(r[1], static_cast<float>(0.3 + 2.7 / 3));
  EXPECT_EQ(s.resolve(1), std::vector<float>{0.3f});
  for (const char* text : {"0.5", "0.3~3", "3~0.3", "1.7,0.4,3,0.9"}) EXPECT_EQ(KvScale::parse(text).text(), text);
  EXPECT_THROW(KvScale::parse("0.3~"), std::invalid_argument);
  EXPECT_THROW(KvScale::parse("1,,2"), std::invalid_argument);

  const Case c = fp8_case(DType::fp8_e4m3fnuz);
  EXPECT_EQ(c.id(), "h8/4 d32 bs16 fp8_e4m3fnuz q=bf16 o=bf16 ctx37,16,5 nhd seed7 ks=0.3~3 vs=1.7,0.4,3,0.9");
  const Case back = parse_case_id(c.id());
  EXPECT_EQ(back.k_scale, c.k_scale);
  EXPECT_EQ(back.v_scale, c.v_scale);
  EXPECT_EQ(back.kv_dtype, DType::fp8_e4m3fnuz);
  EXPECT_EQ(back.q_dtype, DType::bf16);
  EXPECT_EQ(back.id(), c.id());
  Case other = c;
  other.k_scale.range = std::pair{3.0f, 0.3f};
  EXPECT_NE(other.id(), c.id());
}

TEST(KvScale, ValidationNamesTheField) {
  EXPECT_EQ(field_of(fp8_case(DType::fp8_e5m2)), "");
  Case c = fp8_case(DType::fp8_e5m2);
  c.kv_dtype = DType::bf16;
  EXPECT_EQ(field_of(c), "k_scale") << "only fp8 caches take scales";
  c = fp8_case(DType::fp8_e5m2);
  c.v_scale.values = {1, 2, 3};
  EXPECT_EQ(field_of(c), "v_scale") << "3 values for 4 KV heads";
  c.v_scale.values = {1, 0, 1, 1};
  EXPECT_EQ(field_of(c), "v_scale");
  c = fp8_case(DType::fp8_e5m2);
  c.k_scale.range = std::pair{0.3f, std::numeric_limits<float>::infinity()};
  EXPECT_EQ(field_of(c), "k_scale");
  c = fp8_case(DType::fp8_e5m2);
  c.q_dtype = DType::fp8_e5m2;
  EXPECT_EQ(field_of(c), "q_dtype");
  c = fp8_case(DType::fp8_e5m2);
  c.out_dtype = DType::fp8_e4m3fn;
  EXPECT_EQ(field_of(c), "out_dtype");
  c = fp8_case(DType::fp8_e5m2, Layout::vllm);
  c.head_size = 24;  // not a multiple of x = 16
  EXPECT_EQ(field_of(c), "head_size");
}

TEST(Fp8PrePaging, ValuesAreTheDequantisedCodes) {
  for (DType kv : kFp8) {
    const Case c = fp8_case(kv);
    const PrePaging p = generate(c);
    const std::vector<float> ks = c.k_scale.resolve(c.num_kv_heads), vs = c.v_scale.resolve(c.num_kv_heads);
    ASSERT_EQ(p.k_codes.size(), p.k.size());
    std::int64_t differ_from_raw_rounding = 0;
    for (int s = 0; s < c.num_seqs(); ++s)
      for (std::size_t i = 0; i < p.k[s].size(); ++i) {
        const int g = static_cast<int>((i / c.head_size) % c.num_kv_heads);
        ASSERT_EQ(p.k[s][i], from_bits(p.k_codes[s][i], kv) * ks[g]) << dtype_name(kv) << " K " << s << "," << i;
        ASSERT_EQ(p.v[s][i], from_bits(p.v_codes[s][i], kv) * vs[g]) << dtype_name(kv) << " V " << s << "," << i;
        ASSERT_TRUE(std::isfinite(p.k[s][i]) && std::isfinite(p.v[s][i]));
        differ_from_raw_rounding += p.k[s][i] != round_to(p.k[s][i] / ks[g], kv);
      }
    EXPECT_GT(differ_from_raw_rounding, 0) << "the scales matter: values are not plain fp8 values";
    // Generation is deterministic, and the codes do not depend on anything but the case.
    const PrePaging again = generate(c);
    EXPECT_EQ(again.k_codes, p.k_codes);
    EXPECT_EQ(again.v, p.v);
  }
}

TEST(Fp8PrePaging, ExtremeValuesFillTheRangeWithoutSaturating) {
  for (DType kv : kFp8) {
    Case c = fp8_case(kv);
    c.dist = Dist::extreme;
    const PrePaging p = generate(c);
    const std::vector<float> vs = c.v_scale.resolve(c.num_kv_heads);
    const Fp8Format& f = fp8_format(static_cast<Fp8>(static_cast<std::uint8_t>(kv)));
    float top = 0;
    for (int s = 0; s < c.num_seqs(); ++s)
      for (std::size_t i = 0; i < p.v[s].size(); ++i) {
        const int g = static_cast<int>((i / c.head_size) % c.num_kv_heads);
        const float unscaled = std::fabs(p.v[s][i] / vs[g]);
        EXPECT_LT(unscaled, f.max_finite) << dtype_name(kv);
        top = std::max(top, unscaled);
      }
    EXPECT_GT(top, 0.4f * f.max_finite) << dtype_name(kv);
  }
}

TEST(Fp8Pager, StoresTheCodesAndGathersTheValues) {
  for (DType kv : kFp8)
    for (Layout l : {Layout::vllm, Layout::nhd, Layout::hnd, Layout::aiter}) {
      const Case c = fp8_case(kv, l);
      const PrePaging p = generate(c);
      const PagedCache pc = page(c, p);
      EXPECT_EQ(pc.key_cache.size(), static_cast<std::size_t>(pc.elements())) << "one byte per element";
      EXPECT_EQ(pc.x, 16);
      EXPECT_EQ(pc.k_scales, c.k_scale.resolve(4));
      EXPECT_TRUE(pc.k_per_head && pc.v_per_head);
      for (int s = 0; s < c.num_seqs(); ++s) {
        const auto [k, v] = gather(pc, s);
        EXPECT_EQ(k, p.k[s]) << dtype_name(kv) << " " << layout_name(l);
        EXPECT_EQ(v, p.v[s]) << dtype_name(kv) << " " << layout_name(l);
      }
      // The first token of sequence 0 sits at its block's slot 0 as the raw code.
      const int block = pc.block_tables[0];
      EXPECT_EQ(pc.key_cache[static_cast<std::size_t>(pc.key_offset(block, 1, 0, 3))], p.k_codes[0][1 * 32 + 3]);
      PrePaging no_codes = p;
      no_codes.k_codes.clear();
      EXPECT_THROW(page(c, no_codes), std::invalid_argument);
    }
}

TEST(Fp8Args, PerTensorScalarsAndPerHeadArrays) {
  Case c = fp8_case(DType::fp8_e4m3fn);
  c.k_scale = KvScale{{0.5f}, std::nullopt};
  PagedCache pc = page(c, generate(c));
  const float vdev[4] = {1, 2, 3, 4};
  pacheck_kernel_args a = make_args(c, pc, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, vdev);
  EXPECT_EQ(a.k_scale, 0.5f);
  EXPECT_EQ(a.k_scales_per_head, nullptr);
  EXPECT_TRUE(std::isnan(a.v_scale)) << "the scalar is NaN when the per-head array is the scale";
  EXPECT_EQ(a.v_scales_per_head, vdev);
  EXPECT_THROW(make_args(c, pc, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr), std::invalid_argument);
  Case both = fp8_case(DType::fp8_e4m3fn);  // K and V per head
  PagedCache pb = page(both, generate(both));
  const float kdev[4] = {4, 3, 2, 1};
  a = make_args(both, pb, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, kdev, vdev);
  EXPECT_TRUE(std::isnan(a.k_scale) && std::isnan(a.v_scale));
  EXPECT_EQ(a.k_scales_per_head, kdev);
  EXPECT_THROW(make_args(both, pb, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, vdev), std::invalid_argument);
  Case b = c;
  b.kv_dtype = DType::bf16;
  b.k_scale = b.v_scale = KvScale{};
  const pacheck_kernel_args ab = make_args(b, page(b, generate(b)), nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
  EXPECT_EQ(ab.k_scale, 1.0f);
  EXPECT_EQ(ab.v_scale, 1.0f);
}

// ---- runner, kernels and controls ------------------------------------------------------------------

Suite suite_of(std::vector<Case> cases, std::vector<FaultSpec> faults) {
  Suite s;
  s.name = "fp8-test";
  for (const Case& c : cases)
    for (const FaultSpec& f : faults) {
      SuiteCell sc;
      sc.cell = Cell{c, f};
      sc.native_layout = false;
      s.cells.push_back(sc);
    }
  return s;
}

RunSummary run(const Suite& s, const std::vector<std::string>& names) {
  std::vector<KernelPtr> ks;
  for (const auto& n : names) ks.push_back(Registry::global().find(n));
  RunOptions o;
  o.threads = 2;
  // The tests below also check that a control passes the cells outside its expected failures: the audit
  // that --controls-everywhere runs (by default those cells are not_run).
  o.controls_everywhere = true;
  return run_suite(s, ks, "cpu", o);
}

const FaultSpec kClean{};
const FaultSpec kVNan{Poison::nan, Target::v, Region::tail};
const FaultSpec kKVMax{Poison::max_finite, Target::kv, Region::tail};

TEST(Fp8Kernels, CorrectCpuKernelsPassEveryEncodingLayoutAndScaleForm) {
  std::vector<Case> cases;
  for (DType kv : kFp8)
    for (Layout l : {Layout::vllm, Layout::nhd, Layout::hnd, Layout::aiter}) cases.push_back(fp8_case(kv, l));
  Case per_tensor = fp8_case(DType::fp8_e5m2);
  per_tensor.k_scale = KvScale{{0.25f}, std::nullopt};
  per_tensor.v_scale = KvScale{{2.5f}, std::nullopt};
  cases.push_back(per_tensor);
  Case f16 = fp8_case(DType::fp8_e4m3fn);
  f16.q_dtype = f16.out_dtype = DType::f16;
  cases.push_back(f16);
  const RunSummary s = run(suite_of(cases, {kClean, kVNan, kKVMax}),
                           {"cpu.reference", "cpu.vector_v_masked", "cpu.split_kv"});
  for (const auto& r : s.results) {
    EXPECT_EQ(r.verdict, Verdict::pass) << r.kernel << " " << r.cell_id << " " << r.detail;
    EXPECT_GT(r.metrics.max_abs, 0.0) << "bf16/f16 output rounding leaves some error";
    EXPECT_GT(r.metrics.mean_abs, 0.0);
    EXPECT_LE(r.metrics.mean_abs, r.metrics.max_abs);
  }
  EXPECT_EQ(s.exit_code(), 0);
  // The report carries max and mean absolute error with rel_linf for fp8 cells.
  const nlohmann::json j = to_json(s.results.front());
  EXPECT_GT(j.at("metrics").at("max_abs").get<double>(), 0.0);
  EXPECT_GT(j.at("metrics").at("mean_abs").get<double>(), 0.0);
  EXPECT_TRUE(j.at("metrics").contains("rel_linf"));
}

TEST(Fp8Kernels, E4m3fnuzMaxIsFiniteAndItsNanIs0x80) {
  // cpu.vector_v multiplies p = 0 by every V of the final block: a non-finite tail value poisons it, a
  // finite one does not. With e4m3fnuz's 0x7F = 240 in the tail it must stay clean; with 0x80 it must not.
  Case c = fp8_case(DType::fp8_e4m3fnuz, Layout::vllm, {37});
  const Suite s = suite_of({c}, {FaultSpec{Poison::max_finite, Target::v, Region::tail}, kVNan});
  const RunSummary r = run(s, {"cpu.vector_v"});
  ASSERT_EQ(r.results.size(), 2u);
  EXPECT_EQ(r.results[0].verdict, Verdict::pass) << r.results[0].detail;
  EXPECT_FALSE(r.results[0].expected_fail);
  EXPECT_EQ(r.results[1].verdict, Verdict::poisoned);
  EXPECT_TRUE(r.results[1].expected_fail);
  // The same bit pattern 0x7F in an e4m3fn cache is NaN: poison 'nan' there writes 0x7F and is caught.
  PagedCache pc = page(c, generate(c));
  inject(pc, FaultSpec{Poison::max_finite, Target::v, Region::tail});
  std::int64_t n7f = 0;
  for (std::uint8_t b : pc.value_cache) n7f += b == 0x7F;
  EXPECT_GT(n7f, 0);
  c.kv_dtype = DType::fp8_e4m3fn;
  const RunSummary fn = run(suite_of({c}, {kVNan}), {"cpu.vector_v"});
  EXPECT_EQ(fn.results[0].verdict, Verdict::poisoned);
  EXPECT_EQ(poison_bits(Poison::nan, DType::fp8_e4m3fn), 0x7Fu);
}

TEST(Fp8Controls, Head0ScaleIsCaughtOnlyWhereHeadsDiffer) {
  Case per_head = fp8_case(DType::fp8_e4m3fn);
  Case per_tensor = per_head;
  per_tensor.k_scale = KvScale{{0.5f}, std::nullopt};
  per_tensor.v_scale = KvScale{{2.0f}, std::nullopt};
  Case same = per_head;  // per-head arrays whose heads agree
  same.k_scale = KvScale{{1.5f, 1.5f, 1.5f, 1.5f}, std::nullopt};
  same.v_scale = KvScale{{0.7f, 0.7f, 0.7f, 0.7f}, std::nullopt};
  const RunSummary s = run(suite_of({per_head, per_tensor, same}, {kClean}), {"cpu.fp8_head0_scale"});
  ASSERT_EQ(s.results.size(), 3u);
  EXPECT_TRUE(s.results[0].expected_fail);
  EXPECT_EQ(s.results[0].verdict, Verdict::fail) << s.results[0].detail;
  for (int i : {1, 2}) {
    EXPECT_FALSE(s.results[i].expected_fail);
    EXPECT_EQ(s.results[i].verdict, Verdict::pass) << s.results[i].cell_id << " " << s.results[i].detail;
  }
  EXPECT_EQ(s.kernels[0].control, ControlOutcome::caught);
  EXPECT_EQ(s.exit_code(), 0);
}

TEST(Fp8Controls, ScaleFaultsAreCaught) {
  const Case c = fp8_case(DType::fp8_e5m2);
  const Suite suite = suite_of({c}, {kClean, kVNan});
  struct Row { const char* name; ScaleFault f; };
  for (const Row& row : {Row{"zero_v_h0", ScaleFault{Target::v, 0, 0.0f}}, Row{"zero_k_h2", ScaleFault{Target::k, 2, 0.0f}},
                         Row{"omitted_last", ScaleFault{Target::kv, -1, 1.0f}}, Row{"wrong_v_h1", ScaleFault{Target::v, 1, 0.6f}}}) {
    const KernelPtr k = make_cpu_scale_fault(std::string("test.") + row.name, row.f);
    const RunSummary s = run_suite(suite, {k}, "cpu", RunOptions{});
    EXPECT_EQ(s.kernels[0].control, ControlOutcome::caught) << row.name;
    EXPECT_EQ(s.kernels[0].caught, 2) << row.name;
    for (const auto& r : s.results) EXPECT_TRUE(r.verdict == Verdict::fail) << row.name << " " << verdict_name(r.verdict);
  }
  // A "fault" that sets a scale to its own value changes nothing: not expected to fail, and passes.
  const float own = c.v_scale.resolve(4)[1];
  RunOptions everywhere;
  everywhere.controls_everywhere = true;
  const KernelPtr noop = make_cpu_scale_fault("test.noop", ScaleFault{Target::v, 1, own});
  const RunSummary s = run_suite(suite, {noop}, "cpu", everywhere);
  EXPECT_EQ(s.kernels[0].control, ControlOutcome::not_exercised);
  EXPECT_EQ(s.results[0].verdict, Verdict::pass);
  // By default it is not run on them at all: not exercised, not vacuous, exit 0.
  const RunSummary d = run_suite(suite, {noop}, "cpu", RunOptions{});
  EXPECT_EQ(d.kernels[0].control, ControlOutcome::not_exercised);
  EXPECT_EQ(d.not_run, 2);
  EXPECT_EQ(d.exit_code(), 0);
  // Applying a fault: head -1 is the last head, a head past the end changes nothing.
  std::vector<float> k{1, 2, 3}, v{4, 5, 6};
  ScaleFault{Target::kv, -1, 0.0f}.apply(k, v);
  EXPECT_EQ(k, (std::vector<float>{1, 2, 0}));
  EXPECT_EQ(v, (std::vector<float>{4, 5, 0}));
  ScaleFault{Target::k, 7, 0.0f}.apply(k, v);
  EXPECT_EQ(k, (std::vector<float>{1, 2, 0}));
  EXPECT_EQ(ScaleFault{}.id(), "K+V:scale=1@hlast");
}

/// A kernel that runs cpu.reference and then writes into the per-head K scales it was given.
class WritesScales final : public Kernel {
 public:
  std::string name() const override { return "test.writes_scales"; }
  std::string description() const override { return "planted: writes k_scales_per_head"; }
  pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
  Support supports(const Case&) const override { return Support::yes(); }
  void run(const pacheck_kernel_args& a) const override {
    Registry::global().find("cpu.reference")->run(a);
    if (a.k_scales_per_head) const_cast<float*>(a.k_scales_per_head)[1] = 0.0f;
  }
};

TEST(Fp8Runner, PerHeadScalesAreCheckedInputs) {
  const Suite s = suite_of({fp8_case(DType::fp8_e4m3fn)}, {kClean});
  const WritesScales k;
  const RunSummary r = run_suite(s, {KernelPtr(&k, [](const Kernel*) {})}, "cpu", RunOptions{});
  ASSERT_EQ(r.results.size(), 1u);
  EXPECT_EQ(r.results[0].verdict, Verdict::input_mutated);
  EXPECT_NE(r.results[0].detail.find("k_scales_per_head"), std::string::npos) << r.results[0].detail;
}

TEST(Fp8Suites, ScaleKeysAndFaultChecks) {
  const std::string head = "name = \"x\"\n[[cells]]\nheads = \"8/4\"\nhead_sizes = 32\nblock_sizes = 16\nseq_lens = [17]\n";
  const std::string fp8 = head + "dtypes = \"q=bf16,kv=fp8_e4m3fn,o=bf16\"\n";
  auto one = [](const std::string& text) { return parse_suite(text, "t.toml").cells.at(0).cell.c; };
  EXPECT_EQ(one(fp8 + "k_scale = 0.5\n").k_scale.values, std::vector<float>{0.5f});
  EXPECT_EQ(one(fp8 + "v_scale = [1, 2, 3.5, 4]\n").v_scale.values, (std::vector<float>{1, 2, 3.5f, 4}));
  EXPECT_EQ(one(fp8 + "k_scale_range = [0.3, 3]\n").k_scale.range, (std::pair{0.3f, 3.0f}));
  auto error = [](const std::string& text) -> std::string {
    try {
      parse_suite(text, "t.toml");
    } catch (const SuiteError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(error(fp8 + "k_scale = 0.5\nk_scale_range = [1, 2]\n"), "t.toml:9: cells.k_scale_range: give k_scale or k_scale_range, not both");
  EXPECT_EQ(error(fp8 + "v_scale_range = [1, 2, 3]\n"),
            "t.toml:8: cells.v_scale_range: must be [first, last]: the scales of KV head 0 and of the last KV head");
  EXPECT_EQ(error(fp8 + "v_scale = [1, 2]\n"),
            "t.toml:8: cells.v_scale: 2 values for 4 KV heads: give 1 (per tensor) or 4 (per KV head)");
  EXPECT_EQ(error(head + "k_scale = 2\n"), "t.toml:7: cells.k_scale: only fp8 KV caches take scales; kv_dtype is bf16");
  EXPECT_EQ(error(head + "dtypes = \"fp8_e5m2\"\n"),
            "t.toml:7: cells.q_dtype: fp8_e5m2 is a KV-cache dtype only; query and output must be f32, f16 or bf16");
  const std::string inf = error(fp8 + "faults = [\"clean\", \"V:+inf@tail\"]\n");
  EXPECT_NE(inf.find("t.toml:8: cells.faults: fault V:+inf@tail cannot be written into a fp8_e4m3fn cache"), std::string::npos) << inf;
  EXPECT_NO_THROW(parse_suite(head + "dtypes = \"q=bf16,kv=fp8_e5m2,o=bf16\"\nfaults = \"K+V:-inf@all\"\n", "t.toml"));
}

TEST(Fp8Suites, Fp8SuiteShape) {
  const Suite s = load_suite("fp8");
  int enc[3] = {0, 0, 0}, per_head = 0;
  for (const auto& sc : s.cells) {
    const Case& c = sc.cell.c;
    ASSERT_TRUE(is_fp8(c.kv_dtype)) << sc.cell.id();
    EXPECT_FALSE(is_fp8(c.q_dtype) || is_fp8(c.out_dtype));
    ++enc[static_cast<int>(c.kv_dtype) - 3];
    if (c.k_scale.per_head() && c.v_scale.per_head()) {
      ++per_head;
      for (const KvScale* k : {&c.k_scale, &c.v_scale})
        for (float v : k->resolve(c.num_kv_heads)) {
          EXPECT_GE(v, 0.3f);
          EXPECT_LE(v, 3.0f);
          EXPECT_NE(v, 1.0f) << "non-unit scales";
        }
    }
  }
  for (int e : enc) EXPECT_GE(e, 60);
  EXPECT_GT(per_head, static_cast<int>(s.cells.size()) * 3 / 4);
  int gate_fp8 = 0;
  for (const auto& sc : load_suite("gate").cells) gate_fp8 += is_fp8(sc.cell.c.kv_dtype);
  EXPECT_GE(gate_fp8, 18);
}

TEST(Fp8Acceptance, Fp8SuitePassesAndCatchesTheControls) {
  // The whole suite except the 4090/4096-token cells (the CLI runs those; docs/FP8.md has the numbers).
  Suite s = load_suite("fp8");
  std::erase_if(s.cells, [](const SuiteCell& sc) { return sc.cell.c.seq_lens[0] >= 4090; });
  ASSERT_GT(s.cells.size(), 150u);
  const RunSummary r = run(s, {"cpu.reference", "cpu.vector_v", "cpu.vector_v_masked", "cpu.split_kv",
                               "cpu.fp8_head0_scale", "cpu.fp8_scale_fault"});
  for (const auto& k : r.kernels) {
    EXPECT_EQ(k.failed, 0) << k.kernel;
    EXPECT_EQ(k.missed, 0) << k.kernel;
    if (k.kernel.starts_with("cpu.fp8_") || k.kernel == "cpu.vector_v") EXPECT_EQ(k.control, ControlOutcome::caught) << k.kernel;
  }
  EXPECT_EQ(r.exit_code(), 0);
}

}  // namespace
}  // namespace pacheck
