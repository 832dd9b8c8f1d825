// MLA cells as first-class cells: the MLA rows of the case-field table (ids, validate, suite key `mla`), the
// kind check every caller asks (cell_support), and MLA cells through run_suite's cell pipeline (exec/): the
// honest CPU MLA kernels pass, each MLA negative control fails exactly its expected cells, and a multi-head
// kernel declines them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/case_fields.hpp"
#include "core/mla.hpp"
#include "exec/runner.hpp"
#include "kernels/kernel.hpp"
#include "suites/suite.hpp"

namespace pacheck {
namespace {

/// The CaseError field of validating (or parsing) what `f` does, or "accepted".
template <class F>
std::string refused_field(F&& f) {
  try {
    f();
  } catch (const CaseError& e) {
    return e.field;
  }
  return "accepted";
}

Case v3_case() { return make_mla_case(mla_model("deepseek-v3"), 16, {100, 37}, 64).as_case(); }

TEST(MlaFields, RowsOfTheTableAndTheirToken) {
  for (const char* name : {"kv_lora_rank", "qk_rope_head_dim", "v_head_dim"}) {
    const CaseField* f = find_case_field(name);
    ASSERT_NE(f, nullptr) << name;
    EXPECT_EQ(f->suite_key, "mla") << name;
    EXPECT_EQ(field_bounds(name).hi, 1024) << name;
  }
  EXPECT_EQ(case_field_of_token("mla=512+64"), find_case_field("kv_lora_rank"));
  EXPECT_NE(case_fields_json().find("\"kv_lora_rank\""), std::string::npos);
}

TEST(MlaFields, IdRoundTripsThroughTheTable) {
  const Case c = v3_case();
  EXPECT_TRUE(c.is_mla());
  EXPECT_EQ(c.out_head_size(), 512);
  const std::string id = c.id();
  EXPECT_NE(id.find("h16/1 d576 bs64 bf16 ctx100,37 nhd"), std::string::npos) << id;
  EXPECT_TRUE(id.ends_with(" mla=512+64")) << id;
  const Case back = parse_case_id(id);
  EXPECT_EQ(back.id(), id);
  EXPECT_EQ(back.kv_lora_rank, 512);
  EXPECT_EQ(back.qk_rope_head_dim, 64);
  EXPECT_EQ(back.v_head_dim, 512);
  Case v = c;
  v.v_head_dim = 256;
  EXPECT_TRUE(v.id().ends_with(" mla=512+64,v256")) << v.id();
  EXPECT_EQ(parse_case_id(v.id()).v_head_dim, 256);
  EXPECT_FALSE(Case{}.is_mla());
  EXPECT_EQ(Case{}.id().find("mla="), std::string::npos);  // multi-head ids are unchanged
}

TEST(MlaFields, ValidateNamesTheField) {
  const Case good = v3_case();
  EXPECT_EQ(refused_field([&] { good.validate(); }), "accepted");
  const auto edited = [&](auto&& edit) {
    Case c = good;
    edit(c);
    return refused_field([&] { c.validate(); });
  };
  EXPECT_EQ(edited([](Case& c) { c.num_heads = 32, c.num_kv_heads = 2; }), "num_kv_heads");
  EXPECT_EQ(edited([](Case& c) { c.head_size = 512; }), "head_size");  // not the row 512 + 64
  EXPECT_EQ(edited([](Case& c) { c.qk_rope_head_dim = 1000, c.head_size = 1024; }), "qk_rope_head_dim");  // row > 1024
  EXPECT_EQ(edited([](Case& c) { c.v_head_dim = 513; }), "v_head_dim");  // V wider than the latent part
  EXPECT_EQ(edited([](Case& c) { c.layout = Layout::vllm; }), "layout");
  EXPECT_EQ(edited([](Case& c) { c.kv_lora_rank = 0; }), "qk_rope_head_dim");  // a rope width without a latent part
  EXPECT_EQ(edited([](Case& c) { c.sliding_window = 128; }), "sliding_window");
  EXPECT_EQ(refused_field([] { parse_case_id("h16/1 d576 bs64 bf16 ctx100 nhd seed7 mla=512+x"); }), "qk_rope_head_dim");
  EXPECT_EQ(refused_field([] { parse_case_id("h16/1 d576 bs64 bf16 ctx100 nhd seed7 mla=1024+64"); }), "qk_rope_head_dim");
}

TEST(MlaFields, SuiteKeyAndErrorsAtTheLine) {
  const Suite s = parse_suite(R"(name = "m"
[[cells]]
mla = ["512+64", "512+64,v256"]
heads = "16/1"
head_sizes = 576
block_sizes = 64
layouts = "nhd"
seq_lens = [100]
)",
                              "m.toml");
  ASSERT_EQ(s.cells.size(), 2u);
  EXPECT_EQ(s.cells[0].cell.c.kv_lora_rank, 512);
  EXPECT_EQ(s.cells[1].cell.c.v_head_dim, 256);
  const auto error_of = [](const std::string& text) {
    try {
      parse_suite(text, "bad.toml");
    } catch (const SuiteError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string two_kv = error_of("name = \"m\"\n[[cells]]\nmla = \"512+64\"\nheads = \"16/2\"\nhead_sizes = 576\n"
                                      "block_sizes = 64\nlayouts = \"nhd\"\nseq_lens = [100]\n");
  EXPECT_NE(two_kv.find("bad.toml:4"), std::string::npos) << two_kv;
  EXPECT_NE(two_kv.find("num_kv_heads"), std::string::npos) << two_kv;
  const std::string bad_shape = error_of("name = \"m\"\n[[cells]]\nmla = \"512+64,v600\"\nheads = \"16/1\"\n"
                                         "head_sizes = 576\nblock_sizes = 64\nlayouts = \"nhd\"\nseq_lens = [100]\n");
  EXPECT_NE(bad_shape.find("bad.toml:3"), std::string::npos) << bad_shape;
  EXPECT_NE(bad_shape.find("v_head_dim"), std::string::npos) << bad_shape;
}

TEST(MlaFields, KernelsDeclineTheOtherKind) {
  const KernelPtr mha = Registry::global().find("cpu.reference"), mla = Registry::global().find("cpu.mla_reference");
  ASSERT_TRUE(mha && mla);
  EXPECT_TRUE(mla->takes_mla());
  EXPECT_FALSE(mha->takes_mla());
  const Support a = cell_support(*mha, v3_case());
  EXPECT_FALSE(a.ok);
  EXPECT_FALSE(a.failed);
  EXPECT_TRUE(a.reason.starts_with("kv_lora_rank 512")) << a.reason;
  const Support b = cell_support(*mla, Case{});
  EXPECT_FALSE(b.ok);
  EXPECT_TRUE(b.reason.starts_with("kv_lora_rank 0")) << b.reason;
  EXPECT_TRUE(cell_support(*mla, v3_case()).ok);
}

/// A small MLA suite: two page sizes, a straddling batch and an aligned length, tail and other-sequence poison.
Suite small_mla_suite() {
  return parse_suite(R"(name = "mla-small"
[[cells]]
mla = "512+64"
heads = "16/1"
head_sizes = 576
block_sizes = [16, 64]
layouts = "nhd"
seq_lens = [[100, 37], 128]
scales = [0.1352338]
faults = ["clean", "V:nan@tail", "K:nan@tail", "V:nan@others", "K+V:nan@unused"]
)",
                     "mla-small.toml");
}

TEST(MlaCells, RunThroughTheCellPipeline) {
  std::vector<KernelPtr> honest, controls;
  for (const KernelPtr& k : Registry::global().all())
    if (k->takes_mla() && k->device() == PACHECK_DEVICE_CPU) (k->is_negative_control() ? controls : honest).push_back(k);
  ASSERT_GE(honest.size(), 5u);
  ASSERT_GE(controls.size(), 6u);
  std::vector<KernelPtr> kernels = honest;
  kernels.insert(kernels.end(), controls.begin(), controls.end());
  kernels.push_back(Registry::global().find("cpu.reference"));
  const RunSummary s = run_suite(small_mla_suite(), kernels, "cpu", RunOptions{});
  EXPECT_FALSE(s.blind);
  EXPECT_EQ(s.failed, 0);
  for (const KernelSummary& k : s.kernels) {
    if (k.kernel == "cpu.reference") {
      EXPECT_EQ(k.passed + k.failed, 0) << "a multi-head kernel ran an MLA cell";
      EXPECT_GT(k.declined, 0);
      continue;
    }
    EXPECT_EQ(k.failed, 0) << k.kernel;
    EXPECT_EQ(k.missed, 0) << k.kernel;
    std::printf("[ mla cells] %s: %d passed, %d caught, %d not run\n", k.kernel.c_str(), k.passed, k.caught, k.not_run);
  }
  int caught_tail = 0;
  for (const CellResult& r : s.results) {
    if (r.kernel == "cpu.mla_v_tail" && r.expected_fail) caught_tail += is_failure(r.verdict);
    if (r.kernel == "cpu.mla_reference") EXPECT_EQ(r.verdict, Verdict::pass) << r.cell_id << ": " << r.detail;
  }
  EXPECT_GT(caught_tail, 0);  // the 0 x NaN control fails straddling V-tail cells through the pipeline
}

}  // namespace
}  // namespace pacheck
