// Suite files: the built-in suites load with the documented cell counts, and malformed files give errors
// naming file, line and field.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include <set>
#include <sstream>

#include "suites/suite.hpp"
#include "kernels/kernel.hpp"

namespace pacheck {
namespace {

TEST(BuiltinSuites, AllLoadWithExpectedCounts) {
  const auto names = list_suites();
  for (const char* want : {"tail-poison", "boundary", "sweep", "models", "gate", "fp8", "long-context", "pages",
                           "batches", "shapes", "pool"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  EXPECT_EQ(load_suite("tail-poison").cells.size(), 32u);  // 2 dtypes x 2 ratios x 4 faults x 2 lengths
  // 5 shapes x 6 lengths x {aligned, straddling}; issue 18: 2 dtypes x 8 lengths to 131,072, 6 pages x 2
  EXPECT_EQ(load_suite("sweep").cells.size(), 60u + 16u + 12u);
  EXPECT_EQ(load_suite("boundary").cells.size(), 48u);
  EXPECT_EQ(load_suite("scales").cells.size(), 16u);  // (2 + 1) groups' scales x lengths x dtypes x 2 faults
  // Issue 17: a kernel that takes one fp8 scale per cache must have fp8 cells it can run: per encoding,
  // per-tensor cells with NaN in the K and in the V tail at a straddling length, and their aligned twin.
  {
    const Suite fp8 = load_suite("fp8");
    for (const char* enc : {"fp8_e4m3fn", "fp8_e4m3fnuz", "fp8_e5m2"})
      for (const char* fault : {"K:nan@tail", "V:nan@tail"})
        for (bool straddle : {true, false}) {
          int n = 0;
          for (const auto& sc : fp8.cells) {
            const Case& c = sc.cell.c;
            if (dtype_name(c.kv_dtype) == enc && !c.k_scale.per_head() && !c.v_scale.per_head() &&
                sc.cell.fault.id() == fault && c.straddles() == straddle)
              ++n;
          }
          EXPECT_GE(n, 1) << enc << " " << fault << (straddle ? " straddling" : " aligned");
        }
  }
  const Suite gate = load_suite("gate");
  EXPECT_GT(gate.cells.size(), 32u + 48u);
  for (const auto& n : names) EXPECT_NO_THROW(load_suite(n)) << n;
}


TEST(BuiltinSuites, TailPoisonStraddlesExactlyAt4090) {
  for (const auto& sc : load_suite("tail-poison").cells)
    EXPECT_EQ(sc.cell.c.straddles(), sc.cell.c.seq_lens[0] == 4090) << sc.cell.id();
}

std::string error_of(const std::string& text) {
  try {
    parse_suite(text, "bad.toml");
  } catch (const SuiteError& e) {
    return e.what();
  }
  return "no error";
}

constexpr const char* kGood = R"(name = "x"
[[cells]]
heads = "8/2"
head_sizes = 64
block_sizes = 16
seq_lens = [17]
)";

// Each cell knows where it is written: the suite file and its [[cells]] group's header line (what GitHub
// annotations point at).
TEST(SuiteCells, CarryTheirFileAndGroupLine) {
  const std::string text = std::string(kGood) + "\n[[cells]]\nheads = \"4/4\"\nhead_sizes = 32\nblock_sizes = 8\nseq_lens = [9, 16]\n";
  const Suite s = parse_suite(text, "suites/mine.toml");
  ASSERT_EQ(s.cells.size(), 3u);
  for (const SuiteCell& c : s.cells) EXPECT_EQ(c.file, "suites/mine.toml");
  EXPECT_EQ(s.cells[0].line, 2);  // the first [[cells]]
  EXPECT_EQ(s.cells[1].line, 8);  // the second, after kGood's 6 lines and a blank one
  EXPECT_EQ(s.cells[2].line, 8);
}

TEST(SuiteErrors, NameFileLineAndField) {
  EXPECT_EQ(parse_suite(kGood, "good.toml").cells.size(), 1u);
  EXPECT_EQ(error_of(std::string(kGood) + "colour = \"red\"\n"), "bad.toml:7: cells.colour: unknown key (known: heads, head_sizes, block_sizes, dtypes, seq_lens, faults, layouts, dists, seeds, spare_blocks, padding_columns, padding_target, scale, scales, k_scale, v_scale, k_scale_range, v_scale_range, k_scale_slot, v_scale_slot, variants, high_block_ids, mla)");
  // Seed 002: per-slot scale tables. The key takes [lo, hi]; region `scales` needs a table for its cache.
  EXPECT_NE(error_of(std::string(kGood) + "dtypes = \"q=bf16,kv=fp8_e4m3fn,o=bf16\"\nk_scale_slot = [1]\n")
                .find("bad.toml:8: cells.k_scale_slot: must be [lo, hi]"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kGood) + "faults = [\"V:nan@scales\"]\n")
                .find("cells.faults: 'V:nan@scales': region 'scales' poisons the per-slot V scale table"),
            std::string::npos)
      << error_of(std::string(kGood) + "faults = [\"V:nan@scales\"]\n");
  // +Inf fits the fp32 scale tables of an e4m3fn cache (region scales), not the cache itself (region tail).
  const std::string slot_e4m3 = std::string(kGood) + "dtypes = \"q=bf16,kv=fp8_e4m3fn,o=bf16\"\nk_scale_slot = [0.25, 4]\n" +
                                "v_scale_slot = [0.25, 4]\n";
  EXPECT_EQ(error_of(slot_e4m3 + "faults = [\"K+V:+inf@scales\"]\n"), "no error");
  EXPECT_NE(error_of(slot_e4m3 + "faults = [\"V:+inf@tail\"]\n").find("has no Inf code"), std::string::npos);
  EXPECT_EQ(error_of(R"(name = "x"
[[cells]]
heads = "8/3"
head_sizes = 64
block_sizes = 16
seq_lens = [17]
)"), "bad.toml:3: cells.num_heads: 8 is not a multiple of num_kv_heads 3");
  EXPECT_EQ(error_of(R"(name = "x"
[[cells]]
heads = "8/2"
head_sizes = 64
seq_lens = [17]
)"), "bad.toml:2: cells.block_sizes: missing");
  EXPECT_EQ(error_of(R"(name = "x"
[[cells]]
heads = "8/2"
head_sizes = 64
block_sizes = 16
seq_lens = [17, 0]
)"), "bad.toml:6: cells.seq_lens: 0 is out of range [1, 16777216]");
  EXPECT_EQ(error_of(std::string(kGood) + "faults = [\"V:nan@tail\", \"W:nan@tail\"]\n"),
            "bad.toml:7: faults: unknown poison target 'W' (expected K, V or K+V)");
  EXPECT_EQ(error_of(std::string(kGood) + "dtypes = \"fp4\"\n"),
            "bad.toml:7: dtypes: unknown dtype 'fp4' (expected f32, f16, bf16, fp8_e4m3fn, fp8_e4m3fnuz or fp8_e5m2)");
  EXPECT_EQ(error_of("name = \"x\"\n[[cells]]\nheads = 8\n"), "bad.toml:3: cells.heads: must be a string or a non-empty array of strings");
  EXPECT_EQ(error_of("[[cells]]\nheads = \"8/2\"\n"), "bad.toml:1: name: missing");
  EXPECT_NE(error_of("name = \"x\"\nheads = [\n").find("bad.toml:"), std::string::npos);  // TOML syntax error
  EXPECT_EQ(error_of("name = \"x\"\n"), "bad.toml:1: cells: missing: a suite needs [[cells]] groups or an include");
}

/// A one-group suite with `key = value` set (replacing kGood's line when the key is there).
std::string group_with(const std::string& key, const std::string& value) {
  std::string out;
  bool replaced = false;
  std::istringstream in(kGood);
  for (std::string l; std::getline(in, l);) {
    if (l.starts_with(key + " = ")) {
      l = key + " = " + value;
      replaced = true;
    }
    out += l + "\n";
  }
  if (!replaced) out += key + " = " + value + "\n";
  return out;
}

// --- Issue 18: generated batches and the cells real kernels meet ----------------------------------------
TEST(SuiteGeneratedBatches, CycleRepeatsToCount) {
  const Suite s = parse_suite(group_with("seq_lens", "[{ cycle = [100, 96, 33], count = 8 }, [5, 6]]"), "g.toml");
  ASSERT_EQ(s.cells.size(), 2u);
  EXPECT_EQ(s.cells[0].cell.c.seq_lens, (std::vector<int>{100, 96, 33, 100, 96, 33, 100, 96}));
  EXPECT_EQ(s.cells[1].cell.c.seq_lens, (std::vector<int>{5, 6}));
  const Suite big = parse_suite(group_with("seq_lens", "[{ cycle = [17, 16], count = 256 }]"), "g.toml");
  ASSERT_EQ(big.cells.size(), 1u);
  EXPECT_EQ(big.cells[0].cell.c.num_seqs(), 256);
  // The id lists every length, so it round-trips through parse_case_id (what `pacheck repro` reads).
  EXPECT_EQ(parse_case_id(big.cells[0].cell.c.id()).seq_lens, big.cells[0].cell.c.seq_lens);
}

TEST(SuiteGeneratedBatches, BadTablesNameTheKeyAndReason) {
  EXPECT_EQ(error_of(group_with("seq_lens", "[{ cycle = [17], count = 0 }]")),
            "bad.toml:6: cells.seq_lens.count: 0 is out of range [1, 4096]");
  EXPECT_EQ(error_of(group_with("seq_lens", "[{ cycle = [17], count = 4097 }]")),
            "bad.toml:6: cells.seq_lens.count: 4097 is out of range [1, 4096]");
  EXPECT_EQ(error_of(group_with("seq_lens", "[{ cycle = [17], count = 2.5 }]")),
            "bad.toml:6: cells.seq_lens.count: must be an integer");
  EXPECT_EQ(error_of(group_with("seq_lens", "[{ cycle = [17] }]")),
            "bad.toml:6: cells.seq_lens.count: missing (the number of sequences)");
  EXPECT_EQ(error_of(group_with("seq_lens", "[{ count = 3 }]")),
            "bad.toml:6: cells.seq_lens.cycle: missing (e.g. { cycle = [1030, 1024], count = 255 })");
  EXPECT_EQ(error_of(group_with("seq_lens", "[{ cycle = [], count = 3 }]")),
            "bad.toml:6: cells.seq_lens.cycle: must be a non-empty array of integers");
  EXPECT_EQ(error_of(group_with("seq_lens", "[{ cycle = [17, 0], count = 3 }]")),
            "bad.toml:6: cells.seq_lens.cycle: 0 is out of range [1, 16777216]");
  EXPECT_EQ(error_of(group_with("seq_lens", "[{ cycle = [17], count = 3, step = 2 }]")),
            "bad.toml:6: cells.seq_lens.step: unknown key (known: cycle, count)");
  EXPECT_EQ(error_of(group_with("seq_lens", "[\"17\"]")),
            "bad.toml:6: cells.seq_lens: items must be integers, arrays of integers or { cycle = [N, ...], count = M } tables");
}

TEST(BuiltinSuites, Issue18AxesAreCovered) {
  // Lengths below, at and above 2^14, 2^15, 2^16, and 131,072 = 2^17 with a straddling twin below it:
  // per dtype (bf16 and f16) in long-context and sweep (sweep: no "above"); gate (one batch per dtype, to
  // stay cheap) over its two dtypes together, with a sequence of at least 131,066 tokens in each.
  for (const char* name : {"gate", "sweep", "long-context"}) {
    const bool per_dtype = std::string(name) != "gate";
    std::set<std::pair<int, DType>> lens;
    for (const auto& sc : load_suite(name).cells)
      for (int len : sc.cell.c.seq_lens) lens.insert({len, per_dtype ? sc.cell.c.kv_dtype : DType::f32});
    auto has = [&](int len, DType t) { return lens.count({len, per_dtype ? t : DType::f32}) > 0; };
    for (DType t : {DType::bf16, DType::f16})
      for (int p : {1 << 14, 1 << 15, 1 << 16, 1 << 17}) {
        EXPECT_TRUE(has(p, t)) << name << " " << p << " " << dtype_name(t);
        EXPECT_TRUE(has(p - 6, t)) << name << " " << p - 6 << " " << dtype_name(t);
        if (p < (1 << 17) && std::string(name) != "sweep") EXPECT_TRUE(has(p + 10, t)) << name << " " << p + 10;
      }
  }
  for (DType t : {DType::bf16, DType::f16}) {
    bool longest = false;
    for (const auto& sc : load_suite("gate").cells)
      longest |= sc.cell.c.kv_dtype == t && sc.cell.c.max_seq_len() >= (1 << 17) - 6;
    EXPECT_TRUE(longest) << dtype_name(t);
  }
  for (const char* name : {"gate", "pages"}) {
    std::set<int> blocks;
    for (const auto& sc : load_suite(name).cells) blocks.insert(sc.cell.c.block_size);
    for (int b : {1, 8, 16, 32, 64, 128, 256}) EXPECT_TRUE(blocks.count(b)) << name << " block " << b;
  }
  // FlashInfer #4347: pages above 128 from 6,144 tokens on, with keys neither in the first 4,096 nor the last page.
  bool past_4347 = false;
  for (const auto& sc : load_suite("gate").cells)
    for (int len : sc.cell.c.seq_lens) past_4347 |= sc.cell.c.block_size == 256 && len > 6144 && len - 256 > 4096;
  EXPECT_TRUE(past_4347);
  for (const char* name : {"gate", "batches"}) {
    std::set<int> sizes;
    for (const auto& sc : load_suite(name).cells) sizes.insert(sc.cell.c.num_seqs());
    for (int n : std::string(name) == "gate" ? std::vector<int>{9} : std::vector<int>{5, 8, 9, 33, 64, 255, 256})
      EXPECT_TRUE(sizes.count(n)) << name << " batch " << n;
  }
  for (const char* name : {"gate", "shapes"}) {
    std::set<int> heads, ratios;
    for (const auto& sc : load_suite(name).cells) heads.insert(sc.cell.c.head_size), ratios.insert(sc.cell.c.gqa_ratio());
    for (int d : {32, 80, 112, 192}) EXPECT_TRUE(heads.count(d)) << name << " head " << d;
    for (int r : {5, 6, 12}) EXPECT_TRUE(ratios.count(r)) << name << " GQA " << r;
  }
}
// Issue 18 item 2: high physical block ids. `pool` holds them in bf16, f16 and fp8, past 2^31 and 2^32, at
// straddling and aligned lengths, with a block that straddles the offset (E = 2560 does not divide 2^31);
// gate holds both offsets. The key is an axis (integer or list); another value is an error at its line.
TEST(BuiltinSuites, HighBlockIdsAreCovered) {
  std::set<std::string> seen;
  for (const auto& sc : load_suite("pool").cells) {
    const Case& c = sc.cell.c;
    ASSERT_NE(c.high_block_ids, 0) << sc.cell.id();
    seen.insert(fmt::format("{} {}", c.high_block_ids, dtype_name(c.kv_dtype)));
    seen.insert(fmt::format("{} {}", c.high_block_ids, c.straddles() ? "straddling" : "aligned"));
    const long long E = static_cast<long long>(c.num_kv_heads) * c.head_size * c.block_size;
    if ((1LL << c.high_block_ids) % E != 0) seen.insert(fmt::format("{} block straddles", c.high_block_ids));
  }
  for (int b : {31, 32}) {
    for (const char* what : {"bf16", "f16", "fp8_e4m3fn", "straddling", "aligned", "block straddles"})
      EXPECT_TRUE(seen.count(fmt::format("{} {}", b, what))) << b << " " << what;
    bool in_gate = false;
    for (const auto& sc : load_suite("gate").cells) in_gate |= sc.cell.c.high_block_ids == b;
    EXPECT_TRUE(in_gate) << "gate at 2^" << b;
  }
  const Suite two = parse_suite(group_with("high_block_ids", "[0, 32]"), "g.toml");
  ASSERT_EQ(two.cells.size() % 2, 0u);
  EXPECT_EQ(two.cells.front().cell.c.high_block_ids, 0);
  EXPECT_EQ(two.cells.back().cell.c.high_block_ids, 32);
  EXPECT_NE(two.cells.back().cell.id().find(" hiblk=32"), std::string::npos);
  try {
    parse_suite(group_with("high_block_ids", "30"), "bad.toml");
    ADD_FAILURE() << "no error";
  } catch (const SuiteError& e) {
    EXPECT_EQ(std::string(e.what()), "bad.toml:7: cells.high_block_ids: 30 is not 0 (a dense pool), 31 or 32 (block offsets past 2^31 / 2^32)");
  }
}
// --- end issue 18 --------------------------------------------------------------------------------------

// Integers wider than the field are rejected, not wrapped modulo 2^32 (4294967396 ran as ctx100).
TEST(SuiteErrors, IntegersOutOfRangeAreRejectedNotWrapped) {
  struct Bad {
    const char* key;
    const char* value;
    const char* error;
  };
  const Bad bad[] = {
      {"seq_lens", "[4294967396]", "bad.toml:6: cells.seq_lens: 4294967396 is out of range [1, 16777216]"},
      {"seq_lens", "[99999999999]", "bad.toml:6: cells.seq_lens: 99999999999 is out of range [1, 16777216]"},
      {"seq_lens", "[[17, 16777217]]", "bad.toml:6: cells.seq_lens: 16777217 is out of range [1, 16777216]"},
      {"seq_lens", "[0]", "bad.toml:6: cells.seq_lens: 0 is out of range [1, 16777216]"},
      {"head_sizes", "4294967424", "bad.toml:4: cells.head_sizes: 4294967424 is out of range [1, 1024]"},
      {"head_sizes", "2048", "bad.toml:4: cells.head_sizes: 2048 is out of range [1, 1024]"},
      {"block_sizes", "[16, 4294967312]", "bad.toml:5: cells.block_sizes: 4294967312 is out of range [1, 65536]"},
      {"heads", "\"4294967328/8\"", "bad.toml:3: cells.heads: num_heads 4294967328 is out of range [1, 1024]"},
      {"heads", "\"8/-2\"", "bad.toml:3: cells.heads: num_kv_heads -2 is out of range [1, 1024]"},
      {"seeds", "[1, -1]", "bad.toml:7: cells.seeds: -1 is out of range [0, 18446744073709551615]"},
      {"spare_blocks", "4294967296", "bad.toml:7: cells.spare_blocks: 4294967296 is out of range [1, 2147483647]"},
      {"padding_columns", "-4294967295", "bad.toml:7: cells.padding_columns: -4294967295 is out of range [0, 65536]"},
      {"padding_target", "4294967296", "bad.toml:7: cells.padding_target: 4294967296 is out of range [-1, 2147483646]"},
  };
  for (const Bad& b : bad) EXPECT_EQ(error_of(group_with(b.key, b.value)), b.error) << b.key << " = " << b.value;
  // The largest meaningful values still load.
  const Suite big = parse_suite(group_with("seq_lens", "[16777216]"), "good.toml");
  EXPECT_EQ(big.cells.at(0).cell.c.seq_lens, std::vector<int>{16777216});
  EXPECT_EQ(parse_suite(group_with("seeds", "9223372036854775807"), "good.toml").cells.at(0).cell.c.seed,
            9223372036854775807ull);
}

// A shape error points at the line of the key that holds the bad value, not at seq_lens.
TEST(SuiteErrors, ShapeErrorsPointAtTheOffendingKey) {
  EXPECT_EQ(error_of(group_with("block_sizes", "0")), "bad.toml:5: cells.block_sizes: 0 is out of range [1, 65536]");
  EXPECT_EQ(error_of(group_with("head_sizes", "0")), "bad.toml:4: cells.head_sizes: 0 is out of range [1, 1024]");
  EXPECT_EQ(error_of(group_with("heads", "[\"8/2\",\n  \"32/5\"]")),
            "bad.toml:4: cells.num_heads: 32 is not a multiple of num_kv_heads 5");
  EXPECT_EQ(error_of(group_with("head_sizes", "12") + "layouts = \"vllm\"\n"),
            "bad.toml:4: cells.head_size: 12 is not a multiple of the vllm layout's vector width 8 for bf16");
  EXPECT_EQ(error_of(group_with("dtypes", "\"q=fp8_e4m3fn,kv=bf16,o=bf16\"")),
            "bad.toml:7: cells.q_dtype: fp8_e4m3fn is a KV-cache dtype only; query and output must be f32, f16 or bf16");
  EXPECT_EQ(error_of(group_with("k_scale", "0.5")), "bad.toml:7: cells.k_scale: only fp8 KV caches take scales; kv_dtype is bf16");
  EXPECT_EQ(error_of(group_with("scale", "-1.0")), "bad.toml:7: cells.scale: must be finite and > 0, got -1");
  EXPECT_EQ(error_of(group_with("padding_target", "9")),
            "bad.toml:7: cells.padding_target: 9 is not -1 or a physical block in [0, 5)");
}

// Issue 18: the softmax scale is an axis written as where it comes from; the default and any value equal to
// it carry no id token, so the ids of every cell without a scale are as before.
TEST(SuiteScales, ItemsResolveAsDocumented) {
  const auto scales_of = [](const std::string& items, int head_size = 64) {
    std::vector<std::string> out;
    const std::string text = group_with("head_sizes", std::to_string(head_size)) + "scales = " + items + "\n";
    for (const SuiteCell& sc : parse_suite(text, "good.toml").cells)
      out.push_back(sc.cell.c.scale ? fmt::format("{}", *sc.cell.c.scale) : "default");
    return out;
  };
  EXPECT_EQ(scales_of("[\"default\", 0.0625, \"attention_multiplier:0.015625\"]"),
            (std::vector<std::string>{"default", "0.0625", "0.015625"}));
  // query_pre_attn_scalar N: N^-0.5 as the default computes it, so N = head_size is the default itself.
  EXPECT_EQ(scales_of("[\"query_pre_attn_scalar:168\"]", 128),
            (std::vector<std::string>{fmt::format("{}", 1.0f / std::sqrt(168.0f))}));
  EXPECT_EQ(scales_of("[\"query_pre_attn_scalar:128\", 0.08838834764831845]", 128),
            (std::vector<std::string>{"default"}));  // both are 128^-0.5 in fp32: one cell, no token
  EXPECT_EQ(scales_of("[0.125]", 64), (std::vector<std::string>{"default"}));
  const Suite s = parse_suite(group_with("head_sizes", "128") + "scales = [\"query_pre_attn_scalar:168\"]\n", "g.toml");
  EXPECT_EQ(s.cells.at(0).cell.id(), "h8/2 d128 bs16 bf16 ctx17 vllm seed7 scale=0.07715168 clean");
  EXPECT_EQ(parse_case_id(s.cells.at(0).cell.c.id()).scale, s.cells.at(0).cell.c.scale);
  // The older one-value key still reads, and a group without either has no scale token.
  EXPECT_EQ(scales_of("[0.5]"), (std::vector<std::string>{"0.5"}));
  EXPECT_EQ(parse_suite(group_with("scale", "0.5"), "g.toml").cells.at(0).cell.c.scale, 0.5f);
  EXPECT_EQ(parse_suite(kGood, "g.toml").cells.at(0).cell.id(), "h8/2 d64 bs16 bf16 ctx17 vllm seed7 clean");
}

TEST(SuiteScales, BadItemsNameTheLineAndTheForms) {
  EXPECT_EQ(error_of(group_with("scales", "[\"default\",\n  \"qpas:168\"]")),
            "bad.toml:8: cells.scales: 'qpas:168' is not \"default\", \"query_pre_attn_scalar:N\" (scale N^-0.5) or "
            "\"attention_multiplier:X\" (scale X); a plain scale is written as a TOML number");
  EXPECT_EQ(error_of(group_with("scales", "[\"query_pre_attn_scalar:-4\"]")),
            "bad.toml:7: cells.scales: 'query_pre_attn_scalar:-4': '-4' is not a finite number > 0");
  EXPECT_EQ(error_of(group_with("scales", "[\"attention_multiplier:1/128\"]")),
            "bad.toml:7: cells.scales: 'attention_multiplier:1/128': '1/128' is not a finite number > 0");
  EXPECT_EQ(error_of(group_with("scales", "[0.0]")), "bad.toml:7: cells.scale: must be finite and > 0, got 0");
  EXPECT_EQ(error_of(group_with("scales", "[]")).rfind("bad.toml:7: cells.scales: must be a non-empty array", 0), 0u);
  EXPECT_EQ(error_of(group_with("scales", "[true]")), "bad.toml:7: cells.scales: items must be numbers or strings");
  EXPECT_EQ(error_of(group_with("scale", "0.5") + "scales = [0.25]\n"),
            "bad.toml:8: cells.scales: give scale or scales, not both");
}

// A missing include is reported at the including file and line; a missing top-level suite has no ":0".
TEST(SuiteErrors, MissingIncludeIsReportedWhereItIsIncluded) {
  const std::string nope = error_of("name = \"x\"\n\ninclude = [\"tail-poison\",\n  \"nope\"]\n");
  EXPECT_TRUE(nope.starts_with("bad.toml:4: include: no suite named 'nope' (known: ")) << nope;
  EXPECT_EQ(error_of("name = \"x\"\ninclude = \"/no/such/dir/x.toml\"\n"),
            "bad.toml:2: include: '/no/such/dir/x.toml': cannot open: No such file or directory");
  // Only a regular file is read (/dev/zero used to grow until std::bad_alloc, a FIFO to wait for a writer).
  EXPECT_EQ(error_of("name = \"x\"\ninclude = \"/dev/zero\"\n"),
            "bad.toml:2: include: '/dev/zero': not a regular file (a character device)");
  try {
    load_suite("nosuch");
    FAIL() << "expected SuiteError";
  } catch (const SuiteError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find(":0"), std::string::npos) << what;
    EXPECT_NE(what.find("nosuch.toml: suite: no suite named 'nosuch' (known: "), std::string::npos) << what;
  }
}

// A directory given as a suite is named as one (it used to read as an empty file: "name: missing"; later
// "is a directory, not a suite file", now the reason every input file gives).
TEST(SuiteErrors, DirectoryIsNotASuiteFile) {
  const std::string dir = ::testing::TempDir();
  try {
    load_suite(dir);
    FAIL() << "expected SuiteError";
  } catch (const SuiteError& e) {
    EXPECT_NE(std::string(e.what()).find("': not a regular file (a directory)"), std::string::npos) << e.what();
    EXPECT_EQ(e.field, "suite");
  }
}

TEST(SuiteErrors, UnknownSuiteNameListsKnownOnes) {
  try {
    load_suite("no-such-suite");
    FAIL() << "expected SuiteError";
  } catch (const SuiteError& e) {
    EXPECT_NE(std::string(e.what()).find("no suite named 'no-such-suite' (known: "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("boundary, fp8, gate"), std::string::npos) << e.what();
  }
}

TEST(SuiteCells, NativeLayoutResolvesPerKernel) {
  const Suite s = parse_suite(kGood, "good.toml");
  ASSERT_TRUE(s.cells[0].native_layout);
  const KernelPtr ref = Registry::global().find("cpu.reference");
  EXPECT_EQ(s.cells[0].for_layouts(ref->layouts()).c.layout, ref->layouts().front());
  const Suite pinned = parse_suite(std::string(kGood) + "layouts = \"hnd\"\n", "p.toml");
  EXPECT_EQ(pinned.cells[0].for_layouts(ref->layouts()).c.layout, Layout::hnd);
}

// Found by tests/fuzz/fuzz_suite_toml under UBSan: toml++ 3.3's whitespace test reached
// __builtin_unreachable() for these characters (undefined behaviour; the release build happened to give a
// toml++ message). They are refused, naming the line, before toml++ sees them; inside strings and comments
// they are kept.
TEST(SuiteErrors, NonAsciiOutsideStringsIsRefusedBeforeTomlppSeesIt) {
  EXPECT_EQ(error_of("name = \"x\"\n[\xcc\xa1\n"), "bad.toml:2: toml: non-ASCII byte 0xCC outside a string or comment");
  EXPECT_EQ(error_of("name = \"x\" \xc3\xa9\n"), "bad.toml:1: toml: non-ASCII byte 0xC3 outside a string or comment");
  EXPECT_EQ(error_of("name = \"x\"\ncells = [\xc3\xa9]\n"),
            "bad.toml:2: toml: non-ASCII byte 0xC3 outside a string or comment");
  // A quote toml++ does not read as one (found by a long run of the fuzz target) opens no string here.
  EXPECT_EQ(error_of("name = \"x\"\nne.ads =0@tXai-l\"+|~+~V|V\xc6\xa6\n"),
            "bad.toml:2: toml: non-ASCII byte 0xC6 outside a string or comment");
  EXPECT_EQ(error_of("name = 'x\xc3\xa9"), "bad.toml:1: toml: non-ASCII byte 0xC3 in a string that does not end on its line");
  EXPECT_NE(error_of("name = \"x\"\ndescription = \"\"\"a\\\n\n  \xc2\xa7\"\"\"\n")
                .find("bad.toml:4: toml: non-ASCII byte 0xC2 right after a line-ending backslash"),
            std::string::npos);
  // A backslash before a non-ASCII character is no TOML escape; toml++ tests that character for whitespace
  // (the long fuzz run's second crash: an odd run of backslashes, then U+FCFF, in an unclosed `"""`).
  EXPECT_EQ(error_of("namion = \"\"\"\nE]]\nfau\\\\\\\\\\\\\\\xef\xb3\xbf" "65524\xff\xff]\n"),
            "bad.toml:3: toml: non-ASCII byte 0xEF right after a backslash (not a TOML escape)");
  // A NUL in an unclosed `"""`, then U+034C: the 10^6 fuzz run's third crash (2026-12-04). Control
  // characters are never valid TOML.
  EXPECT_EQ(error_of(std::string("iptn = [[[[[[[[+[\"\"\"\0[[[[[[[[0\xcd\x8c\x8b\x95\n", 35)),
            "bad.toml:1: toml: control character 0x00 (TOML allows none but tab and line ends)");
  // A quote inside a bare token opens no string to toml++ (the fourth crash of that run).
  EXPECT_EQ(error_of("name = 105-27T07:nlayoutnum_headste\"s.BBBBBBBBBBBBBi_sca\xc7\xbd" "BBBBbBBBBBBBBBB \xee =\"\"\""),
            "bad.toml:1: toml: non-ASCII byte 0xC7 outside a string or comment");
  EXPECT_EQ(error_of("name = \"x\"\nseq_lens = [1]\"\xc3\xa9\"\n"), "bad.toml:2: toml: non-ASCII byte 0xC3 outside a string or comment");
  EXPECT_EQ(error_of("name = \"x\"\n# a \x7f comment\n"), "bad.toml:2: toml: control character 0x7F (TOML allows none but tab and line ends)");
  EXPECT_EQ(error_of("name = \"a\\\xc3\xa9\"\n"), "bad.toml:1: toml: non-ASCII byte 0xC3 right after a backslash (not a TOML escape)");
  // Strings (all four kinds, with escaped and extra quotes) and comments may hold any UTF-8.
  const Suite s = parse_suite("name = \"\xc3\xa9\\\"\" # \xc2\xa7 \"\n"
                              "description = '''\xc3\xa9 '' \"\"\" \xcc\xa1'''\n"
                              "[[cells]] # \xc3\xa9\n"
                              "heads = [\"32/8\"] # '\n"
                              "head_sizes = 128\nblock_sizes = 16\nseq_lens = [7]\n",
                              "ok.toml");
  EXPECT_EQ(s.name, "\xc3\xa9\"");
  EXPECT_EQ(s.description, "\xc3\xa9 '' \"\"\" \xcc\xa1");
  EXPECT_EQ(s.cells.size(), 1u);
  EXPECT_EQ(parse_suite("name = \"x\"\ndescription = \"\"\"\"a\\\n  b\"\"\"\"\"\n[[cells]]\nheads = \"8/2\"\n"
                        "head_sizes = 64\nblock_sizes = 16\nseq_lens = [3]\n",
                        "ok.toml")
                .description,
            "\"ab\"\"");
}

// Issue 46: a few lines whose axes multiply into millions of cells grew without bound (about 1 KiB a cell);
// the group is refused before it is expanded, naming its line and the axes, and so is one whose cells hold
// too many sequences together. Groups before it count.
TEST(SuiteSize, AGroupOverTheCapIsRefusedBeforeExpanding) {
  std::string seeds;
  for (int i = 0; i < 1000; ++i) seeds += (i ? ", " : "") + std::to_string(i);
  std::string lens;
  for (int i = 1; i <= 1000; ++i) lens += (i > 1 ? ", " : "") + std::to_string(i);
  const std::string big = group_with("seq_lens", "[" + lens + "]") + "seeds = [" + seeds + "]\n";
  EXPECT_EQ(error_of(big), "bad.toml:2: cells: this group expands into 1000000 cells (seq_lens 1000 x seeds 1000), over "
                           "the 100000 a suite may hold: split it into several suites, or drop values from an axis");
  // 90 x 1000 = 90,000 cells fit; a second group of 20,000 does not.
  const std::string fits = group_with("seq_lens", "[" + lens + "]") + "seeds = [" + seeds.substr(0, seeds.find(", 90,")) + "]\n";
  EXPECT_EQ(parse_suite(fits, "fits.toml").cells.size(), 90000u);
  const std::string two = fits + "[[cells]]\nheads = \"8/2\"\nhead_sizes = 64\nblock_sizes = 16\nseq_lens = [" + lens +
                          "]\nseeds = [" + seeds.substr(0, seeds.find(", 20,")) + "]\n";
  EXPECT_NE(error_of(two).find("bad.toml:8: cells: this group expands into 20000 cells (seq_lens 1000 x seeds 20), "
                               "after 90000 cells before it"),
            std::string::npos)
      << error_of(two);
  // Sequences: 5,000 cells of 4,096-sequence batches.
  const std::string seqs = group_with("seq_lens", "[{ cycle = [1, 2], count = 4096 }]") + "seeds = [" +
                           seeds.substr(0, seeds.find(", 500,")) + "]\n";
  EXPECT_EQ(parse_suite(seqs, "seqs.toml").cells.size(), 500u);
  std::string many;
  for (int i = 0; i < 5000; ++i) many += (i ? ", " : "") + std::to_string(i);
  EXPECT_NE(error_of(group_with("seq_lens", "[{ cycle = [1, 2], count = 4096 }]") + "seeds = [" + many + "]\n")
                .find("hold 20480000 sequences, over the 16777216"),
            std::string::npos);
}

// Issue 46: `variants = [""]` ran as plain decode; an empty item is refused (plain decode is "none").
TEST(SuiteErrors, AnEmptyVariantItemIsRefused) {
  EXPECT_EQ(error_of(group_with("seq_lens", "[17]") + "variants = [\"none\", \" \"]\n"),
            "bad.toml:7: cells.variants: an empty item: write \"none\" for plain decode");
}

}  // namespace
}  // namespace pacheck
