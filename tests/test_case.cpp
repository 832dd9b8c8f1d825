// The case model: validation names the field, and the case id round-trips.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "core/abi_fields.hpp"
#include "core/case.hpp"
#include "core/case_fields.hpp"
#include "core/cell.hpp"

namespace pacheck {
namespace {

/// The field named by the CaseError `c.validate()` throws, or "" if it does not throw.
std::string failing_field(const Case& c) {
  try {
    c.validate();
  } catch (const CaseError& e) {
    EXPECT_NE(std::string(e.what()).find(e.field), std::string::npos) << "what() names the field";
    EXPECT_FALSE(e.reason.empty());
    return e.field;
  }
  return "";
}

struct Invalid {
  const char* what;
  std::function<void(Case&)> edit;
  const char* field;
};

TEST(CaseValidation, DefaultCaseIsValid) {
  EXPECT_EQ(failing_field(Case{}), "");
  EXPECT_EQ(Case{}.gqa_ratio(), 4);
}

TEST(CaseValidation, EveryErrorNamesItsField) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<Invalid> cases = {
      {"num_heads 0", [](Case& c) { c.num_heads = 0; }, "num_heads"},
      {"num_kv_heads 0", [](Case& c) { c.num_kv_heads = 0; }, "num_kv_heads"},
      {"num_heads not a multiple of num_kv_heads", [](Case& c) { c.num_heads = 30; }, "num_heads"},
      {"head_size 0", [](Case& c) { c.head_size = 0; }, "head_size"},
      {"head_size 12 vs vllm bf16 x = 8",
       [](Case& c) {
         c.layout = Layout::vllm;
         c.head_size = 12;
       },
       "head_size"},
      {"head_size 6 vs vllm f32 x = 4",
       [](Case& c) {
         c.layout = Layout::vllm;
         c.kv_dtype = DType::f32;
         c.head_size = 6;
       },
       "head_size"},
      {"block_size 0", [](Case& c) { c.block_size = 0; }, "block_size"},
      {"block_size -4", [](Case& c) { c.block_size = -4; }, "block_size"},
      {"no sequences", [](Case& c) { c.seq_lens.clear(); }, "seq_lens"},
      {"seq_len 0", [](Case& c) { c.seq_lens = {16, 0, 3}; }, "seq_lens"},
      {"seq_len -1", [](Case& c) { c.seq_lens = {-1}; }, "seq_lens"},
      {"scale 0", [](Case& c) { c.scale = 0.0f; }, "scale"},
      {"scale < 0", [](Case& c) { c.scale = -0.1f; }, "scale"},
      {"scale NaN", [nan](Case& c) { c.scale = nan; }, "scale"},
      {"scale Inf", [inf](Case& c) { c.scale = inf; }, "scale"},
      {"spare_blocks 0", [](Case& c) { c.spare_blocks = 0; }, "spare_blocks"},
      {"padding_columns -1", [](Case& c) { c.padding_columns = -1; }, "padding_columns"},
      // The caps on sizes a case cannot meaningfully exceed (field_bounds).
      {"num_heads 2048", [](Case& c) { c.num_heads = 2048; }, "num_heads"},
      {"head_size 2048", [](Case& c) { c.head_size = 2048; }, "head_size"},
      {"block_size 65537", [](Case& c) { c.block_size = 65537; }, "block_size"},
      {"seq_len 2^24 + 1", [](Case& c) { c.seq_lens = {16, 1 << 24 | 1}; }, "seq_lens"},
      {"padding_columns 65537", [](Case& c) { c.padding_columns = 65537; }, "padding_columns"},
      {"padding_target -2", [](Case& c) { c.padding_target = -2; }, "padding_target"},
      // Default case: ceil(4090/16) = 256 blocks + 3 spare = 259 in the pool.
      {"padding_target past the pool", [](Case& c) { c.padding_target = 259; }, "padding_target"},
      // Issue 46: a batch past kMaxNumSeqs, and per-slot scales drawn from [lo, hi] with lo above hi.
      {"4097 sequences", [](Case& c) { c.seq_lens.assign(Case::kMaxNumSeqs + 1, 2); }, "seq_lens"},
      {"k_scale slot [2, 1]",
       [](Case& c) {
         c.kv_dtype = DType::fp8_e4m3fn;
         c.k_scale.slot = std::pair{2.0f, 1.0f};
       },
       "k_scale"},
  };
  for (const auto& inv : cases) {
    Case c;
    inv.edit(c);
    EXPECT_EQ(failing_field(c), inv.field) << inv.what;
  }
}

TEST(CaseValidation, BoundaryValuesAreAccepted) {
  Case c;
  c.padding_target = 258;  // last block of the 259-block pool
  EXPECT_EQ(failing_field(c), "");
  c = Case{};
  c.layout = Layout::vllm;
  c.head_size = 8;  // exactly one bf16 vector
  EXPECT_EQ(failing_field(c), "");
  c.layout = Layout::nhd;
  c.head_size = 3;  // nhd/hnd have vector width 1
  EXPECT_EQ(failing_field(c), "");
  c = Case{};
  c.block_size = 1;
  c.seq_lens = {1};
  c.padding_columns = 0;
  c.num_heads = c.num_kv_heads = 1;
  EXPECT_EQ(failing_field(c), "");
}

TEST(CaseModel, DerivedQuantities) {
  Case c;
  EXPECT_FLOAT_EQ(c.effective_scale(), 1.0f / std::sqrt(128.0f));
  c.scale = 0.25f;
  EXPECT_EQ(c.effective_scale(), 0.25f);
  c.seq_lens = {1, 16, 17, 32};
  EXPECT_EQ(c.blocks_for(0), 1);
  EXPECT_EQ(c.blocks_for(1), 1);
  EXPECT_EQ(c.blocks_for(2), 2);
  EXPECT_EQ(c.blocks_for(3), 2);
  EXPECT_TRUE(c.straddles());
  c.seq_lens = {16, 4096};
  EXPECT_FALSE(c.straddles()) << "4096 fills its final block exactly";
  c.seq_lens = {4090};
  EXPECT_TRUE(c.straddles()) << "4090 leaves six unwritten slots";
  EXPECT_EQ(layout_vector_width(Layout::vllm, DType::bf16), 8);
  EXPECT_EQ(layout_vector_width(Layout::vllm, DType::f32), 4);
  EXPECT_EQ(layout_vector_width(Layout::hnd, DType::bf16), 1);
}

TEST(CaseId, DefaultIdIsTheDocumentedOne) {
  EXPECT_EQ(Case{}.id(), "h32/8 d128 bs16 bf16 ctx4090 nhd seed7");
}

void expect_same_case(const Case& a, const Case& b) {
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.head_size, b.head_size);
  EXPECT_EQ(a.block_size, b.block_size);
  EXPECT_EQ(a.seq_lens, b.seq_lens);
  EXPECT_EQ(a.scale, b.scale);
  EXPECT_EQ(a.q_dtype, b.q_dtype);
  EXPECT_EQ(a.kv_dtype, b.kv_dtype);
  EXPECT_EQ(a.out_dtype, b.out_dtype);
  EXPECT_EQ(a.layout, b.layout);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.dist, b.dist);
  EXPECT_EQ(a.spare_blocks, b.spare_blocks);
  EXPECT_EQ(a.padding_columns, b.padding_columns);
  EXPECT_EQ(a.padding_target, b.padding_target);
}

TEST(CaseId, RoundTripsEveryField) {
  std::vector<Case> cases(7);
  cases[1].seq_lens = {1, 15, 16, 17, 4096};
  cases[1].layout = Layout::vllm;
  cases[1].kv_dtype = cases[1].q_dtype = cases[1].out_dtype = DType::f16;
  cases[2].q_dtype = DType::f32;
  cases[2].out_dtype = DType::f32;
  cases[2].dist = Dist::peaked;
  cases[2].scale = 0.0883883461356163f;
  cases[3].num_heads = 28;
  cases[3].num_kv_heads = 4;
  cases[3].head_size = 80;
  cases[3].block_size = 1;
  cases[3].layout = Layout::hnd;
  cases[3].seed = 18446744073709551ull;
  cases[3].dist = Dist::extreme;
  cases[4].spare_blocks = 9;
  cases[4].padding_columns = 0;
  cases[4].padding_target = 5;
  cases[4].dist = Dist::uniform;
  cases[5].kv_dtype = DType::f32;  // q and out stay bf16, so both get their own token
  cases[5].scale = 1e-3f;
  cases[6].seed = 0xFFFFFFFFFFFFFFFFull;  // the seed is 64-bit unsigned: the largest must round-trip too
  for (const Case& c : cases) {
    SCOPED_TRACE(c.id());
    const Case back = parse_case_id(c.id());
    expect_same_case(back, c);
    EXPECT_EQ(back.id(), c.id());
  }
  // Different cases have different ids.
  for (std::size_t i = 0; i < cases.size(); ++i)
    for (std::size_t j = i + 1; j < cases.size(); ++j) EXPECT_NE(cases[i].id(), cases[j].id());
}

TEST(CaseId, ParseErrorsNameTheToken) {
  auto field_of = [](const std::string& id) -> std::string {
    try {
      parse_case_id(id);
    } catch (const CaseError& e) {
      return e.field;
    }
    return "";
  };
  EXPECT_EQ(field_of("h32/8 d128 bs16 bf16 nhd seed7"), "case id");          // no ctx
  EXPECT_EQ(field_of("d128 bs16 bf16 ctx4090 nhd seed7"), "case id");        // no heads
  EXPECT_EQ(field_of("h32/8 d128 bs16 bf16 ctx4090 nhd seed7 wat"), "case id");
  EXPECT_EQ(field_of("h32/x d128 bs16 bf16 ctx4090 nhd seed7"), "num_kv_heads");
  EXPECT_EQ(field_of("h32/8 d128 bsq bf16 ctx4090 nhd seed7"), "block_size");
  EXPECT_EQ(field_of("h32/8 d128 bs16 bf16 ctx40,x nhd seed7"), "seq_lens");
  EXPECT_EQ(field_of("h32/8 d128 bs16 bf16 ctx4090 nhd seed7 q=fp9"), "q_dtype");
  EXPECT_EQ(field_of("h32/8 d128 bs16 bf16 ctx4090 nhd seed7 dist=flat"), "dist");
  EXPECT_EQ(field_of("h32/8 d128 bs16 bf16 ctx4090 nhd seed7 scale=abc"), "scale");
  // A well-formed id of an invalid case fails validation with the case field.
  EXPECT_EQ(field_of("h32/5 d128 bs16 bf16 ctx4090 nhd seed7"), "num_heads");
  EXPECT_EQ(field_of("h32/8 d12 bs16 bf16 ctx4090 vllm seed7"), "head_size");
  EXPECT_EQ(field_of("h32/8 d128 bs16 bf16 ctx0 nhd seed7"), "seq_lens");
}

// Numbers wider than the field are rejected, naming the field, not wrapped modulo 2^32 (ctx4294967396 ran
// as ctx100, d4294967424 as d128).
TEST(CaseId, OutOfRangeNumbersAreRejectedNotWrapped) {
  auto error_of = [](const std::string& id) -> std::string {
    try {
      parse_case_id(id);
    } catch (const CaseError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(error_of("h32/8 d128 bs16 bf16 ctx4294967396 vllm seed7"), "seq_lens: 4294967396 is out of range [1, 16777216]");
  EXPECT_EQ(error_of("h32/8 d128 bs16 bf16 ctx-4294967196 vllm seed7"), "seq_lens: -4294967196 is out of range [1, 16777216]");
  EXPECT_EQ(error_of("h32/8 d128 bs16 bf16 ctx17,99999999999999999999 vllm seed7"),
            "seq_lens: 99999999999999999999 is out of range [1, 16777216]");
  EXPECT_EQ(error_of("h32/8 d4294967424 bs16 bf16 ctx100 vllm seed7"), "head_size: 4294967424 is out of range [1, 1024]");
  EXPECT_EQ(error_of("h32/8 d-1 bs16 bf16 ctx100 vllm seed7"), "head_size: -1 is out of range [1, 1024]");
  EXPECT_EQ(error_of("h4294967328/8 d128 bs16 bf16 ctx100 vllm seed7"), "num_heads: 4294967328 is out of range [1, 1024]");
  EXPECT_EQ(error_of("h32/-8 d128 bs16 bf16 ctx100 vllm seed7"), "num_kv_heads: -8 is out of range [1, 1024]");
  EXPECT_EQ(error_of("h32/8 d128 bs4294967312 bf16 ctx100 vllm seed7"), "block_size: 4294967312 is out of range [1, 65536]");
  EXPECT_EQ(error_of("h32/8 d128 bs16 bf16 ctx100 vllm seed7 spare=4294967299"),
            "spare_blocks: 4294967299 is out of range [1, 2147483647]");
  EXPECT_EQ(error_of("h32/8 d128 bs16 bf16 ctx100 vllm seed7 padcols=-1"), "padding_columns: -1 is out of range [0, 65536]");
  EXPECT_EQ(error_of("h32/8 d128 bs16 bf16 ctx100 vllm seed7 padto=4294967295"),
            "padding_target: 4294967295 is out of range [-1, 2147483646]");
  EXPECT_EQ(error_of("h32/8 d128 bs16 bf16 ctx100 vllm seed-1"), "seed: -1 is out of range [0, 18446744073709551615]");
  EXPECT_EQ(error_of("h32/8 d128 bs16 bf16 ctx100 vllm seed18446744073709551616"),
            "seed: 18446744073709551616 is out of range [0, 18446744073709551615]");
  EXPECT_EQ(error_of("h32/8 d128 bs16 bf16 ctx100 vllm seed+7"), "seed: '+7' is not an unsigned 64-bit integer");
  // The largest values in range still parse.
  const Case big = parse_case_id("h1024/1024 d1024 bs65536 bf16 ctx16777216 nhd seed18446744073709551615");
  EXPECT_EQ(big.seq_lens, std::vector<int>{16777216});
  EXPECT_EQ(big.head_size, 1024);
}

// Issue 21: a field given twice ran with the last value ("d64 d32" ran d32, "seed7 seed9" seed9) and an empty
// length ("ctx30,") was dropped; each is an error naming the field.
TEST(CaseId, FieldGivenTwiceOrEmptyLengthIsRejected) {
  auto error_of = [](const std::string& id) -> std::pair<std::string, std::string> {
    try {
      parse_case_id(id);
    } catch (const CaseError& e) {
      return {e.field, e.what()};
    }
    return {"", "no error"};
  };
  const std::string base = "h4/2 d64 bs16 bf16 ctx30 vllm seed7";
  const std::pair<const char*, const char*> twice[] = {
      {"d32", "head_size"}, {"seed9", "seed"}, {"h8/2", "num_heads"}, {"bs32", "block_size"},
      {"ctx40", "seq_lens"}, {"f16", "kv_dtype"}, {"nhd", "layout"}, {"q=f32 q=f16", "q_dtype"},
      {"o=f32 o=f16", "out_dtype"}, {"dist=normal dist=peaked", "dist"}, {"scale=0.5 scale=0.25", "scale"},
      {"spare=2 spare=3", "spare_blocks"}, {"padcols=1 padcols=2", "padding_columns"},
      {"padto=1 padto=2", "padding_target"}, {"hiblk=31 hiblk=32", "high_block_ids"}};
  for (const auto& [extra, field] : twice) {
    SCOPED_TRACE(extra);
    const auto [f, what] = error_of(base + " " + extra);
    EXPECT_EQ(f, field);
    EXPECT_NE(what.find("given twice"), std::string::npos) << what;
  }
  EXPECT_EQ(error_of(base + " d32").second,
            "head_size: given twice ('d64' and 'd32') in 'h4/2 d64 bs16 bf16 ctx30 vllm seed7 d32'");
  const auto fp8 = error_of("h4/2 d64 bs16 fp8_e4m3fn ctx30 vllm seed7 ks=0.5 ks=0.25");
  EXPECT_EQ(fp8.first, "k_scale") << fp8.second;
  for (const char* ctx : {"ctx30,", "ctx,30", "ctx30,,40"}) {
    SCOPED_TRACE(ctx);
    const auto [f, what] = error_of(std::string("h4/2 d64 bs16 bf16 ") + ctx + " vllm seed7");
    EXPECT_EQ(f, "seq_lens");
    EXPECT_NE(what.find("is empty"), std::string::npos) << what;
  }
  EXPECT_EQ(error_of("h4/2 d64 bs16 bf16 ctx vllm seed7").first, "seq_lens");
  EXPECT_EQ(parse_case_id("h4/2 d64 bs16 bf16 ctx30,40 vllm seed7").seq_lens, (std::vector<int>{30, 40}));
}

// Issue 46: a list of ones is stored as plain decode, so its count was never checked: qlen=1,1 on three
// sequences ran as plain decode. A count other than 1 or num_seqs is refused whatever the values.
TEST(CaseId, QueryLensCountIsCheckedForAListOfOnes) {
  const std::string base = "h4/2 d64 bs16 bf16 ctx30,31,32 nhd seed7 ";
  try {
    parse_case_id(base + "qlen=1,1");
    ADD_FAILURE() << "qlen=1,1 on three sequences parsed";
  } catch (const CaseError& e) {
    EXPECT_EQ(e.field, "query_lens");
    EXPECT_EQ(e.reason, "'qlen=1,1' gives 2 values for 3 sequences: give 1 (every sequence) or 3 (one per sequence)");
  }
  EXPECT_THROW(parse_case_id(base + "qlen=2,2"), CaseError);  // caught by validate() as before
  for (const char* ones : {"qlen=1", "qlen=1,1,1"})
    EXPECT_TRUE(parse_case_id(base + ones).query_lens.empty()) << ones << ": plain decode keeps its id";
  EXPECT_EQ(parse_case_id(base + "qlen=1,2,1").query_lens, (std::vector<int>{1, 2, 1}));
  // A per-slot range of one value is allowed (every slot gets it).
  Case c;
  c.kv_dtype = DType::fp8_e4m3fn;
  c.k_scale.slot = std::pair{1.5f, 1.5f};
  EXPECT_EQ(failing_field(c), "");
  c.seq_lens.assign(Case::kMaxNumSeqs, 2);
  EXPECT_EQ(failing_field(c), "") << "kMaxNumSeqs sequences are allowed";
}

TEST(CellId, FaultGivenTwiceIsRejected) {
  auto error_of = [](const std::string& id) -> std::string {
    try {
      parse_cell_id(id);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string base = "h4/2 d64 bs16 bf16 ctx30 vllm seed7";
  EXPECT_NE(error_of(base + " V:nan@tail K:inf@tail").find("fault: given twice ('V:nan@tail' and 'K:inf@tail')"),
            std::string::npos);
  EXPECT_NE(error_of(base + " clean V:nan@tail").find("fault: given twice"), std::string::npos);
  EXPECT_NE(error_of("h4/2 d64 V:nan@tail bs16 bf16 ctx30 vllm seed7").find("fault: 'V:nan@tail' must be the last"),
            std::string::npos);
  EXPECT_NE(error_of(base + " d32 clean").find("head_size: given twice"), std::string::npos);
  const Cell ok = parse_cell_id(base + " V:nan@tail");
  EXPECT_EQ(ok.id(), base + " V:nan@tail");
}

TEST(CaseNames, LayoutsAndDistributionsParse) {
  for (Layout l : {Layout::vllm, Layout::nhd, Layout::hnd, Layout::aiter}) EXPECT_EQ(parse_layout(layout_name(l)), l);
  for (Dist d : {Dist::uniform, Dist::normal, Dist::peaked, Dist::extreme}) EXPECT_EQ(parse_dist(dist_name(d)), d);
  EXPECT_THROW(parse_layout("nchw"), std::invalid_argument);
  EXPECT_THROW(parse_dist("cauchy"), std::invalid_argument);
}

}  // namespace
}  // namespace pacheck


namespace pacheck {
namespace {
// ---- The case field table (core/case_fields.hpp) and the ABI field table (core/abi_fields.hpp) ------------

TEST(CaseFields, OneRowPerFieldNamedOnceWithAnIdTokenThatRoundTrips) {
  std::set<std::string_view> names;
  for (const CaseField& f : case_field_table()) {
    EXPECT_TRUE(names.insert(f.name).second) << f.name << " has two rows";
    ASSERT_TRUE(f.copy) << f.name;
    EXPECT_FALSE(f.suite_key.empty()) << f.name;
    if (!f.parse) continue;  // num_kv_heads: written by num_heads' token
    // The example token sets the field of the default case to a value the id writes back as that token.
    // fp8: ks= and vs= too; the MLA shape needs one latent KV head of the row's width.
    Case c = parse_case_id(f.suite_key == "mla" ? "h8/1 d576 bs16 bf16 ctx100 nhd seed7"
                                                : "h8/2 d64 bs16 fp8_e4m3fn q=bf16 o=bf16 ctx100 nhd seed7");
    const CaseField* of = case_field_of_token(f.example);
    ASSERT_EQ(of, &f) << f.example << " is not " << f.name << "'s token";
    f.parse(f, f.example.substr(f.token.size()), c);
    EXPECT_NO_THROW(c.validate()) << f.example;
    const std::string id = " " + c.id() + " ";
    EXPECT_NE(id.find(" " + std::string(f.example) + " "), std::string::npos) << f.example << " not in " << id;
    EXPECT_EQ(parse_case_id(c.id()).id(), c.id());
  }
  EXPECT_EQ(names.size(), 26u);
}

TEST(CaseFields, EveryAbiNameIsAFieldOfItsStructAndIsAllTheRowWrites) {
  const Case c = parse_case_id("h8/2 d64 bs16 fp8_e4m3fn q=bf16 o=bf16 ctx100,30 nhd seed7 ks=0.5 vs=0.3~3 win=16 "
                               "cap=30 alibi=geo sinks=-2~2 qlen=3");
  auto words = [](std::string_view text) {
    std::set<std::string> out;
    for (std::size_t start = 0; start < text.size();) {
      const auto space = std::min(text.find(' ', start), text.size());
      out.emplace(text.substr(start, space - start));
      start = space + 1;
    }
    return out;
  };
  for (const CaseField& f : case_field_table()) {
    for (auto [s, listed] : {std::pair{AbiStruct::kernel_args, words(f.abi_args)},
                             std::pair{AbiStruct::case_info, words(f.abi_info)}}) {
      for (const std::string& n : listed) EXPECT_TRUE(find_abi_field(s, n)) << f.name << ": " << n;
      if (!f.abi) continue;
      // Every field the row writes (found by the bytes it changed) is one it lists.
      std::vector<unsigned char> bytes(abi_struct_size(s), 0xAB);
      AbiWriter w(s, bytes.data());
      f.abi(c, w);
      for (const AbiField& af : abi_field_table()) {
        if (af.in != s) continue;
        const bool changed = std::any_of(bytes.begin() + af.offset, bytes.begin() + af.offset + af.size,
                                         [](unsigned char b) { return b != 0xAB; });
        EXPECT_TRUE(!changed || listed.count(std::string(af.name))) << f.name << " writes " << af.name << " unlisted";
      }
    }
  }
}

TEST(CaseFields, VariantsAndCaseFileGatesComeFromTheRows) {
  const Case plain = parse_case_id("h8/2 d64 bs16 bf16 ctx100 nhd seed7");
  EXPECT_EQ(case_variants(plain), 0u);
  EXPECT_FALSE(plain.has_variant());
  EXPECT_EQ(case_variants(parse_case_id("h8/2 d64 bs16 bf16 ctx100 nhd seed7 win=16 qlen=3")),
            PACHECK_VARIANT_SLIDING_WINDOW | PACHECK_VARIANT_MULTI_QUERY);
  unsigned all = 0;
  for (const CaseField& f : case_field_table()) all |= f.variant_bit;
  EXPECT_EQ(all, PACHECK_VARIANT_KNOWN);
  // The gates: several query tokens need format_version 3, but a version-1 export fails first for having a
  // variant at all (version 2's gate); per-slot tables need 4.
  const Case q = parse_case_id("h8/2 d64 bs16 bf16 ctx100 nhd seed7 qlen=3");
  EXPECT_EQ(case_file_gate(q, 3), nullptr);
  ASSERT_NE(case_file_gate(q, 2), nullptr);
  EXPECT_EQ(case_file_gate(q, 2)->version, 3);
  EXPECT_EQ(case_file_gate(q, 1)->carries, "an attention variant");
  const Case slot = parse_case_id("h8/2 d64 bs16 fp8_e4m3fn q=bf16 o=bf16 ctx100 vllm seed7 vs=slot0.25~4");
  ASSERT_NE(case_file_gate(slot, 3), nullptr);
  EXPECT_EQ(case_file_gate(slot, 3)->carries, "per-slot fp8 scale tables");
  EXPECT_EQ(case_file_gate(plain, 1), nullptr);
}

TEST(CaseFields, TheDescriptionListsEveryRow) {
  const std::string json = case_fields_json();
  for (const CaseField& f : case_field_table())
    EXPECT_NE(json.find("\"name\": \"" + std::string(f.name) + "\""), std::string::npos) << f.name;
}

TEST(AbiFields, OffsetsAreTheHeaders) {
  const AbiField* scale = find_abi_field(AbiStruct::kernel_args, "scale");
  ASSERT_NE(scale, nullptr);
  EXPECT_EQ(scale->offset, offsetof(pacheck_kernel_args, scale));
  EXPECT_EQ(scale->type, AbiType::f32);
  EXPECT_EQ(find_abi_field(AbiStruct::case_info, "has_sinks")->version, 2);
  EXPECT_EQ(find_abi_field(AbiStruct::kernel_args, "k_scales_per_slot")->version, 3);
  EXPECT_EQ(find_abi_field(AbiStruct::case_info, "num_query_tokens"), nullptr);
  pacheck_case_info info{};
  AbiWriter w(AbiStruct::case_info, &info);
  EXPECT_TRUE(w.set("logits_soft_cap", 30.0f));
  EXPECT_TRUE(w.set("sliding_window", 128));
  EXPECT_FALSE(w.set("num_query_tokens", 4));  // a pacheck_kernel_args field only
  EXPECT_EQ(info.logits_soft_cap, 30.0f);
  EXPECT_EQ(info.sliding_window, 128);
  EXPECT_THROW(w.set("seq_lens", 1), std::logic_error);  // a pointer
}

}  // namespace
}  // namespace pacheck
