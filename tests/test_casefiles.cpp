// Case files: the strict safetensors reader (every malformation gets an error naming the file and the
// tensor, never a crash), export -> foreign runner -> score giving exactly `run`'s verdicts, and each
// verdict score can give (variant across exported poison variants, unwritten, error) on planted outputs.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>

#include "faults/inject.hpp"
#include "interop/casefiles.hpp"
#include "interop/safetensors.hpp"

namespace pacheck {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// ---------------------------------------------------------------------------------------------------
// The reader

/// A file image: 8-byte length (the header's, unless `claimed` is given), header text, `data` bytes.
std::vector<std::uint8_t> image(const std::string& header, std::size_t data, std::optional<std::uint64_t> claimed = {}) {
  const std::uint64_t n = claimed.value_or(header.size());
  std::vector<std::uint8_t> b(8);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<std::uint8_t>(n >> (8 * i));
  for (char ch : header) b.push_back(static_cast<std::uint8_t>(ch));
  for (std::size_t i = 0; i < data; ++i) b.push_back(static_cast<std::uint8_t>(i * 37 + 1));
  return b;
}

SafetensorsFile sample() {
  SafetensorsFile f;
  f.metadata = {{"case", "h8/2 d64"}, {"fault", "V:nan@tail"}};
  const float f32[6] = {1, -2, 3.5f, 0, 1e-3f, -7};
  const std::uint16_t h16[4] = {0x3C00, 0xC000, 0x7E00, 0x0001};
  const std::uint8_t f8[5] = {0x00, 0x7E, 0x7F, 0x80, 0xFF};
  const std::int32_t i32[2] = {-1, 123456};
  const float scalar = 0.125f;
  f.add("f32", StDType::F32, {2, 3}, f32);
  f.add("f16", StDType::F16, {4}, h16);
  f.add("bf16", StDType::BF16, {2, 2}, h16);
  f.add("e4m3", StDType::F8_E4M3, {5}, f8);
  f.add("e5m2", StDType::F8_E5M2, {1, 5}, f8);
  f.add("u8", StDType::U8, {5}, f8);  // raw codes (fp8 e4m3fnuz caches)
  f.add("i32", StDType::I32, {2}, i32);
  f.add("scalar", StDType::F32, {}, &scalar);
  f.add("empty", StDType::F16, {0, 4}, nullptr);
  return f;
}

TEST(Safetensors, RoundTripsEveryDtypeShapeAndMetadata) {
  const SafetensorsFile f = sample();
  const fs::path p = fs::temp_directory_path() / ("pacheck_st_" + std::to_string(getpid()) + ".safetensors");
  write_safetensors(p.string(), f);
  const SafetensorsFile g = read_safetensors(p.string());
  EXPECT_EQ(g.metadata, f.metadata);
  ASSERT_EQ(g.tensors.size(), f.tensors.size());
  for (std::size_t i = 0; i < f.tensors.size(); ++i) {
    const StTensor* t = g.find(f.tensors[i].name);
    ASSERT_NE(t, nullptr) << f.tensors[i].name;
    EXPECT_EQ(t->dtype, f.tensors[i].dtype);
    EXPECT_EQ(t->shape, f.tensors[i].shape);
    EXPECT_EQ(t->data, f.tensors[i].data);
  }
  // The data section starts 8-byte aligned, as the reference writer lays it out.
  const auto bytes = serialize_safetensors(f);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  EXPECT_EQ(n % 8, 0u);
  fs::remove(p);
}

struct Malformed {
  const char* name;
  std::vector<std::uint8_t> bytes;
  const char* tensor;   ///< "" when the error is about the file as a whole
  const char* problem;  ///< substring of SafetensorsError::problem
};

std::vector<Malformed> malformed_files() {
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::vector<std::uint8_t> truncated_data = image(ok, 8);
  truncated_data.resize(truncated_data.size() - 3);
  std::vector<std::uint8_t> truncated_header = image(ok, 8);
  truncated_header.resize(8 + ok.size() / 2);
  std::string bad_utf8 = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"k":"x)";
  bad_utf8 += "\xff\"}}";
  return {
      {"shorter_than_length", {1, 2, 3, 4, 5}, "", "truncated: 5 bytes"},
      {"truncated_header", truncated_header, "", "truncated: header length"},
      {"truncated_data", truncated_data, "a", "outside the data section"},
      {"huge_header_length", image(ok, 8, 1ull << 62), "", "exceeds the 104857600-byte limit"},
      {"length_past_end", image(ok, 8, ok.size() + 9), "", "truncated: header length"},
      {"overlapping_offsets",
       image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
       "b", "overlap tensor 'a'"},
      {"wrong_dtype_size", image(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "a",
       "holds 8 bytes but shape [3] of F32 (4 bytes each) needs 12"},
      {"bf16_as_f32_size", image(R"({"a":{"dtype":"BF16","shape":[4],"data_offsets":[0,16]}})", 16), "a",
       "holds 16 bytes but shape [4] of BF16 (2 bytes each) needs 8"},
      {"unknown_dtype", image(R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8), "a",
       "unknown dtype 'F64' (known: F32, F16, BF16, F8_E4M3, F8_E5M2, I32, U8)"},
      {"negative_dimension", image(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), "a",
       "shape entry -1 is not an integer >= 0"},
      {"fractional_dimension", image(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4), "a",
       "is not an integer >= 0"},
      {"element_count_overflow",
       image(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4), "a",
       "more elements than fit in 64 bits"},
      {"byte_count_overflow", image(R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,4]}})", 4),
       "a", "overflows 64 bits"},
      {"offsets_reversed", image(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8), "a", "end before they begin"},
      {"offsets_not_pair", image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8), "a", "is not two integers"},
      {"hole", image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", 12),
       "b", "hole: bytes [4, 8)"},
      {"trailing_bytes", image(ok, 12), "", "data section has 12 bytes but the tensors cover 8"},
      {"duplicate_name",
       image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
       "a", "key appears twice"},
      {"duplicate_field", image(R"({"a":{"dtype":"F32","dtype":"F16","shape":[2],"data_offsets":[0,8]}})", 8), "dtype",
       "key appears twice"},
      {"missing_field", image(R"({"a":{"dtype":"F32","shape":[2]}})", 8), "a", "missing field 'data_offsets'"},
      {"unknown_field", image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"stride":[1]}})", 8), "a",
       "unknown field 'stride'"},
      {"entry_not_object", image(R"({"a":[1,2]})", 0), "a", "entry is not a JSON object"},
      {"empty_name", image(R"({"":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8), "", "empty tensor name"},
      {"metadata_not_string", image(R"({"__metadata__":{"k":1}})", 0), "", "__metadata__ value of 'k' is not a string"},
      {"not_json", image("{nope", 0), "", "header is not valid JSON"},
      {"not_utf8", image(bad_utf8, 8), "", "header is not valid JSON"},
      {"not_object", image("[1,2]", 0), "", "header is not a JSON object"},
  };
}

TEST(Safetensors, EveryMalformationIsAnErrorNamingFileAndTensor) {
  for (const auto& m : malformed_files()) {
    SCOPED_TRACE(m.name);
    try {
      parse_safetensors(m.bytes.data(), m.bytes.size(), "bad.safetensors");
      ADD_FAILURE() << m.name << " parsed";
    } catch (const SafetensorsError& e) {
      EXPECT_EQ(e.file, "bad.safetensors");
      EXPECT_EQ(e.tensor, m.tensor) << e.what();
      EXPECT_NE(e.problem.find(m.problem), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("bad.safetensors: ", 0), 0u) << e.what();
    }
  }
}

TEST(Safetensors, EveryTruncationOfAValidFileIsAnErrorNotACrash) {
  const auto bytes = serialize_safetensors(sample());
  for (std::size_t n = 0; n < bytes.size(); ++n)
    EXPECT_THROW(parse_safetensors(bytes.data(), n, "cut.safetensors"), SafetensorsError) << "prefix of " << n;
  EXPECT_NO_THROW(parse_safetensors(bytes.data(), bytes.size(), "whole.safetensors"));
}

TEST(Safetensors, ReadingAFileNamesItsPath) {
  const fs::path p = fs::temp_directory_path() / ("pacheck_st_trunc_" + std::to_string(getpid()) + ".safetensors");
  auto bytes = serialize_safetensors(sample());
  bytes.resize(bytes.size() - 1);
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  try {
    read_safetensors(p.string());
    FAIL() << "read a truncated file";
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(e.file, p.string());
    EXPECT_EQ(e.tensor, "empty");  // the last tensor in offset order now ends past the data section
  }
  EXPECT_THROW(read_safetensors((fs::temp_directory_path() / "pacheck_no_such.safetensors").string()), SafetensorsError);
  fs::remove(p);
}

// ---------------------------------------------------------------------------------------------------
// Export -> a foreign runner (written here in C++, from the case files alone) -> score

Suite small_suite() {
  return parse_suite(R"(
name = "casefiles-test"
description = "straddling, aligned and mixed lengths; poisons that change the inputs and one that does not"
[[cells]]
heads = "8/2"
head_sizes = 64
block_sizes = 16
dtypes = ["bf16", "f16"]
seq_lens = [[37, 5], [32]]
faults = ["clean", "V:nan@tail", "K+V:+inf@all", "V:zero@tail"]
)",
                     "casefiles-test.toml");
}

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("pacheck_cf_" + std::to_string(getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

json manifest(const fs::path& cases) {
  std::ifstream in(cases / "manifest.json");
  return json::parse(in);
}

/// A foreign runner: builds pacheck_kernel_args from a case file and its manifest entry only, runs
/// `kernel` (cpu.reference unless named) on it, or `mla_kernel` (cpu.mla_reference unless named) on the file of
/// an MLA call (format_version 5: latent_cache as both caches, the MLA scalars from the file), lets `plant`
/// tamper with the output bytes, and writes the output file.
void run_foreign(const fs::path& cases, const fs::path& outputs,
                 const std::function<void(const json& entry, std::vector<std::uint8_t>& out)>& plant = {},
                 const std::string& kernel = "cpu.reference", const std::string& mla_kernel = "cpu.mla_reference") {
  const KernelPtr k = Registry::global().find(kernel), mk = Registry::global().find(mla_kernel);
  fs::create_directories(outputs);
  const json m = manifest(cases);  // a named copy: ranging over a temporary's member would dangle
  for (const auto& e : m["files"]) {
    const SafetensorsFile in = read_safetensors((cases / e["file"].get<std::string>()).string());
    pacheck_kernel_args a{};
    a.struct_size = sizeof a;
    a.num_seqs = e["num_seqs"];
    a.num_heads = e["num_heads"];
    a.num_kv_heads = e["num_kv_heads"];
    a.head_size = e["head_size"];
    a.block_size = e["block_size"];
    a.num_blocks = e["num_blocks"];
    a.max_blocks_per_seq = e["max_blocks_per_seq"];
    a.layout = static_cast<pacheck_layout>(parse_layout(e["layout"].get<std::string>()));
    a.q_dtype = static_cast<pacheck_dtype>(parse_dtype(e["q_dtype"].get<std::string>()));
    a.kv_dtype = static_cast<pacheck_dtype>(parse_dtype(e["kv_dtype"].get<std::string>()));
    a.out_dtype = static_cast<pacheck_dtype>(parse_dtype(e["out_dtype"].get<std::string>()));
    const json& st = e["strides"];
    a.query = in.find("query")->data.data();
    a.q_stride_seq = st["query"][0];
    a.q_stride_head = st["query"][1];
    auto i32 = [&](const char* n) {
      std::int32_t v = 0;
      if (const StTensor* t = in.find(n)) std::memcpy(&v, t->data.data(), 4);
      return v;
    };
    // An MLA call (format_version 5): one latent cache, handed as both caches (kernel_abi.h, "MLA decode").
    a.kv_lora_rank = i32("kv_lora_rank");
    a.qk_rope_head_dim = i32("qk_rope_head_dim");
    a.v_head_dim = i32("v_head_dim");
    const bool mla = a.kv_lora_rank > 0;
    a.key_cache = in.find(mla ? "latent_cache" : "key_cache")->data.data();
    a.value_cache = in.find(mla ? "latent_cache" : "value_cache")->data.data();
    for (std::size_t i = 0; i < st["key_cache"].size(); ++i) a.k_strides[i] = st["key_cache"][i];
    for (std::size_t i = 0; i < st["value_cache"].size(); ++i) a.v_strides[i] = st["value_cache"][i];
    a.block_tables = reinterpret_cast<const std::int32_t*>(in.find("block_tables")->data.data());
    a.block_tables_stride = st["block_tables"][0];
    a.seq_lens = reinterpret_cast<const std::int32_t*>(in.find("seq_lens")->data.data());
    std::vector<std::uint8_t> out = in.find("out")->data;
    a.out = out.data();
    a.out_stride_seq = st["out"][0];
    a.out_stride_head = st["out"][1];
    auto scalar = [&](const char* n) {
      float v;
      std::memcpy(&v, in.find(n)->data.data(), 4);
      return v;
    };
    a.scale = scalar("scale");
    a.k_scale = scalar("k_scale");
    a.v_scale = scalar("v_scale");
    if (const StTensor* t = in.find("k_scales_per_head")) a.k_scales_per_head = reinterpret_cast<const float*>(t->data.data());
    if (const StTensor* t = in.find("v_scales_per_head")) a.v_scales_per_head = reinterpret_cast<const float*>(t->data.data());
    // Per-slot scale tables (format_version 4), as the file holds them.
    if (const StTensor* t = in.find("k_scales_per_slot")) a.k_scales_per_slot = reinterpret_cast<const float*>(t->data.data());
    if (const StTensor* t = in.find("v_scales_per_slot")) a.v_scales_per_slot = reinterpret_cast<const float*>(t->data.data());
    // Attention variants (format_version 2): the scalars always, the per-head tensors when present.
    std::memcpy(&a.sliding_window, in.find("sliding_window")->data.data(), 4);
    a.logits_soft_cap = scalar("logits_soft_cap");
    if (const StTensor* t = in.find("alibi_slopes")) a.alibi_slopes = reinterpret_cast<const float*>(t->data.data());
    if (const StTensor* t = in.find("sinks")) a.sinks = reinterpret_cast<const float*>(t->data.data());
    // Query tokens (format_version 3): query and out have num_query_tokens rows; query_start_loc as the ABI
    // wants it (NULL and max_query_len 1 for plain decode).
    a.num_query_tokens = e["num_query_tokens"];
    const std::vector<std::int32_t> ql = e["query_lens"];
    a.max_query_len = *std::max_element(ql.begin(), ql.end());
    if (a.max_query_len > 1)
      a.query_start_loc = a.query_start_loc_host =
          reinterpret_cast<const std::int32_t*>(in.find("query_start_loc")->data.data());
    if (mla)
      mk->run_case(a, parse_case_id(e["case"].get<std::string>()));
    else
      k->run(a);
    if (plant) plant(e, out);
    SafetensorsFile o;
    const StTensor* proto = in.find("out");
    o.add("out", proto->dtype, proto->shape, out.data());
    write_safetensors((outputs / e["file"].get<std::string>()).string(), o);
  }
}

std::map<std::string, const CellResult*> by_cell(const RunSummary& s) {
  std::map<std::string, const CellResult*> m;
  for (const auto& r : s.results) m[r.cell_id] = &r;
  return m;
}

/// Scores `outs` (run_foreign's reference outputs of `cases`, exported from `suite`) and runs `suite` on
/// cpu.reference (and cpu.mla_reference, for its MLA cells: `mla`): score must give run's verdict and rel_linf
/// cell for cell, and pass.
void expect_score_equals_run(const fs::path& cases, const fs::path& outs, const Suite& suite, bool mla = false) {
  ScoreOptions so;
  so.run.threads = 2;
  const RunSummary scored = score_cases(cases.string(), outs.string(), so);
  RunOptions ro;
  ro.threads = 2;
  std::vector<KernelPtr> kernels = {Registry::global().find("cpu.reference")};
  if (mla) kernels.push_back(Registry::global().find("cpu.mla_reference"));
  const RunSummary ran = run_suite(suite, kernels, "cpu", ro);
  EXPECT_EQ(scored.results.size(), ran.results.size());
  const auto want = by_cell(ran);
  for (const auto& r : scored.results) {
    if (!want.count(r.cell_id)) {
      ADD_FAILURE() << "scored a cell run has not: " << r.cell_id;
      continue;
    }
    EXPECT_EQ(r.verdict, want.at(r.cell_id)->verdict) << r.cell_id << ": " << r.detail;
    EXPECT_EQ(r.metrics.rel_linf, want.at(r.cell_id)->metrics.rel_linf) << r.cell_id;
  }
  EXPECT_EQ(scored.exit_code(), 0);
}

/// The bad-input tests' rows: a name, the text the refusal must contain, and the tampering.
struct BadEdit {
  std::string name, want;
  std::function<void(SafetensorsFile&, json&)> edit;
};

/// Removes tensor `name` from `f` (a bad-input test's tampering).
void drop_tensor(SafetensorsFile& f, const char* name) {
  f.tensors.erase(std::remove_if(f.tensors.begin(), f.tensors.end(), [&](const StTensor& t) { return t.name == name; }),
                  f.tensors.end());
}

/// A copy of export directory `cases` in fresh_dir(`dir`) whose case file `file` and manifest went through
/// `edit` (the bad-input tests' tampering).
fs::path tampered_copy(const fs::path& cases, const std::string& file, const std::string& dir,
                       const std::function<void(SafetensorsFile&, json&)>& edit) {
  const fs::path d = fresh_dir(dir);
  fs::copy(cases, d, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  SafetensorsFile f = read_safetensors((d / file).string());
  json m = manifest(d);
  edit(f, m);
  write_safetensors((d / file).string(), f);
  std::ofstream(d / "manifest.json") << m.dump();
  return d;
}

class CaseFiles : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cases_ = fresh_dir("cases");
    summary_ = export_cases(small_suite(), cases_.string(), {});
  }
  static RunSummary score(const fs::path& outputs, ScoreOptions so = {}) {
    so.run.threads = 2;
    return score_cases(cases_.string(), outputs.string(), so);
  }
  static inline fs::path cases_;
  static inline ExportSummary summary_;
};

// Issue 18: a cell of high block ids has a pool of 4-16 GiB per cache, sparse in memory only: export leaves
// such cells out and counts them, and exports the suite's other cells.
TEST_F(CaseFiles, ExportLeavesOutHighBlockIdCellsAndCountsThem) {
  const Suite suite = parse_suite(R"(
name = "pool-casefiles"
[[cells]]
heads = "4/1"
head_sizes = 64
block_sizes = 16
dtypes = "bf16"
seq_lens = [37]
high_block_ids = [0, 31, 32]
faults = ["clean", "V:nan@tail"]
)",
                                  "pool.toml");
  const fs::path cases = fresh_dir("pool");
  const ExportSummary sum = export_cases(suite, cases.string(), {});
  EXPECT_EQ(sum.cells, 2);
  EXPECT_EQ(sum.skipped_high_ids, 4);
  for (const auto& c : manifest(cases)["cells"])
    EXPECT_EQ(c["case"].get<std::string>().find("hiblk="), std::string::npos);
  // The manifest records what was left out (format_version 3), and score hands it on for the CLI to print.
  const json left = manifest(cases)["left_out"];
  ASSERT_EQ(left.size(), 1u) << left.dump();
  EXPECT_EQ(left[0]["kind"], "high_block_ids");
  EXPECT_EQ(left[0]["cells"], 4);
  const fs::path outs = fresh_dir("pool_outs");
  run_foreign(cases, outs);
  std::vector<LeftOut> scored_left;
  EXPECT_EQ(score_cases(cases.string(), outs.string(), {}, nullptr, &scored_left).exit_code(), 0);
  ASSERT_EQ(scored_left.size(), 1u);
  EXPECT_EQ(scored_left[0].kind, "high_block_ids");
  EXPECT_EQ(scored_left[0].cells, 4);
  EXPECT_NE(scored_left[0].reason.find("high block ids"), std::string::npos);
}

Suite variants_suite() {
  return parse_suite(R"(
name = "variants-casefiles"
[[cells]]
heads = "4/2"
head_sizes = 64
block_sizes = 16
dtypes = "bf16"
seq_lens = [[37, 20]]
variants = ["none", "win=8", "win=64", "cap=5", "alibi=geo", "sinks=-1~1", "win=7 cap=5 alibi=geo sinks=-1~1"]
faults = ["clean", "V:nan@tail"]
[[cells]]
heads = "4/2"
head_sizes = 64
block_sizes = 16
dtypes = "bf16"
seq_lens = [[37, 20]]
variants = ["win=8", "win=7 cap=5 alibi=geo sinks=-1~1"]
faults = ["V:nan@window"]
)",
                     "variants.toml");
}

// Case files carry the attention variants (format_version 2; issue 19 item 5): every variant cell is
// exported with its scalars and per-head tensors, a runner built from the files alone gets run's verdicts,
// a runner that ignores the window is caught on exactly the cells whose window hides some key, and a
// window of 8 and none over the same bytes are two calls, never one shared file.
TEST(CaseFilesVariants, ExportCarriesThemAndScoreJudgesThemAsRun) {
  const fs::path cases = fresh_dir("variants");
  const ExportSummary sum = export_cases(variants_suite(), cases.string(), {});
  const json m = manifest(cases);
  EXPECT_EQ(m["format_version"], 5);
  int window_cells = 0;
  for (const auto& c : m["cells"]) window_cells += c["case"].get<std::string>().find("win=") != std::string::npos;
  EXPECT_GT(window_cells, 0);
  EXPECT_EQ(sum.cells, static_cast<int>(m["cells"].size()));
  std::set<std::string> files_of_plain, files_of_window;
  for (const auto& e : m["files"]) {
    const SafetensorsFile f = read_safetensors((cases / e["file"].get<std::string>()).string());
    const Case c = parse_case_id(e["case"].get<std::string>());
    std::int32_t w;
    std::memcpy(&w, f.expect("sliding_window", StDType::I32, {}).data.data(), 4);
    EXPECT_EQ(w, c.sliding_window) << e["case"];
    EXPECT_EQ(e["sliding_window"], c.sliding_window) << e["case"];
    EXPECT_EQ(e["logits_soft_cap"].get<float>(), c.logits_soft_cap.value_or(0.0f)) << e["case"];
    EXPECT_EQ(f.find("alibi_slopes") != nullptr, !c.alibi_slopes.is_default()) << e["case"];
    EXPECT_EQ(f.find("sinks") != nullptr, !c.sinks.is_default()) << e["case"];
    if (const StTensor* t = f.find("alibi_slopes")) {
      const std::vector<float> want = c.alibi_slopes.resolve(c.num_heads);
      ASSERT_EQ(t->data.size(), want.size() * 4);
      EXPECT_EQ(std::memcmp(t->data.data(), want.data(), t->data.size()), 0) << e["case"];
    }
    if (e["fault"] == "clean" && !c.has_variant()) files_of_plain.insert(e["inputs_sha256"].get<std::string>());
    if (e["fault"] == "clean" && c.sliding_window == 8 && !c.logits_soft_cap) files_of_window.insert(e["inputs_sha256"].get<std::string>());
  }
  // The window changes no byte of the inputs: only the geometry keeps the two calls apart.
  EXPECT_FALSE(files_of_plain.empty());
  EXPECT_EQ(files_of_plain, files_of_window);

  const fs::path outs = fresh_dir("variants_ref");
  run_foreign(cases, outs);
  expect_score_equals_run(cases, outs, variants_suite());
  ScoreOptions so;
  so.run.threads = 2;

  // A planted runner: computes as if there were no window. It fails exactly the cells whose window hides
  // some key of some sequence (win=8 and win=7 at lengths 37 and 20; win=64 hides none) and passes the rest.
  const fs::path bad = fresh_dir("variants_nowindow");
  {
    const fs::path cases_nw = fresh_dir("variants_nw_cases");
    fs::copy(cases, cases_nw, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    const json mm = manifest(cases_nw);
    for (const auto& e : mm["files"]) {
      const fs::path p = cases_nw / e["file"].get<std::string>();
      SafetensorsFile f = read_safetensors(p.string());
      for (auto& t : f.tensors)
        if (t.name == "sliding_window") std::fill(t.data.begin(), t.data.end(), 0);
      write_safetensors(p.string(), f);
    }
    run_foreign(cases_nw, bad);
  }
  const RunSummary planted = score_cases(cases.string(), bad.string(), so);
  int failed = 0;
  for (const auto& r : planted.results) {
    const Cell cell = parse_cell_id(r.cell_id);
    bool hides = false;
    for (int s = 0; s < cell.c.num_seqs(); ++s) hides = hides || cell.c.window_start(s) > 0;
    EXPECT_EQ(counts_as_failure(planted, r), hides) << r.cell_id << ": " << verdict_name(r.verdict) << " " << r.detail;
    failed += hides;
  }
  EXPECT_GT(failed, 0);
}

// The reader validates the variant fields (format_version 2): each bad value is refused before anything is
// scored, naming the file and the tensor or field (the CLI exits 2 on it, as on every case-file error).
TEST(CaseFilesVariants, BadVariantFieldsAreInputErrorsNamingTheField) {
  const Suite suite = parse_suite(R"(
name = "variants-bad"
[[cells]]
heads = "4/2"
head_sizes = 64
block_sizes = 16
dtypes = "bf16"
seq_lens = [37]
variants = ["win=8 cap=5 alibi=geo sinks=-1~1"]
faults = ["clean"]
)",
                                  "variants-bad.toml");
  const fs::path cases = fresh_dir("variants_bad");
  export_cases(suite, cases.string(), {});
  const std::string first = manifest(cases)["files"][0]["file"];
  const fs::path outs = fresh_dir("variants_bad_outs");
  run_foreign(cases, outs);
  ASSERT_EQ(score_cases(cases.string(), outs.string(), {}).exit_code(), 0);

  auto tampered = [&](const std::string& name, const std::function<void(SafetensorsFile&, json&)>& edit) {
    return tampered_copy(cases, first, "variants_bad_" + name, edit);
  };
  auto set_f32 = [](SafetensorsFile& f, const char* name, float v) {
    for (auto& t : f.tensors)
      if (t.name == name) std::memcpy(t.data.data(), &v, 4);
  };
  auto drop = drop_tensor;
  using Bad = BadEdit;
  const std::vector<Bad> bad = {
      {"negative_window", "tensor 'sliding_window': -3 is negative",
       [](SafetensorsFile& f, json& m) {
         for (auto& t : f.tensors)
           if (t.name == "sliding_window") {
             const std::int32_t w = -3;
             std::memcpy(t.data.data(), &w, 4);
           }
         m["files"][0]["sliding_window"] = -3;
       }},
      {"nan_cap", "tensor 'logits_soft_cap': nan is not a finite number >= 0",
       [&](SafetensorsFile& f, json&) { set_f32(f, "logits_soft_cap", std::nanf("")); }},
      {"entry_window", "field 'sliding_window' is 9 but its file holds 8",
       [](SafetensorsFile&, json& m) { m["files"][0]["sliding_window"] = 9; }},
      {"other_window", "field 'sliding_window' is 16 but its case",
       [](SafetensorsFile& f, json& m) {
         for (auto& t : f.tensors)
           if (t.name == "sliding_window") {
             const std::int32_t w = 16;
             std::memcpy(t.data.data(), &w, 4);
           }
         m["files"][0]["sliding_window"] = 16;
       }},
      {"no_alibi", "tensor 'alibi_slopes' missing", [&](SafetensorsFile& f, json&) { drop(f, "alibi_slopes"); }},
      {"inf_sink", "tensor 'sinks': head 0 is inf (every value must be finite)",
       [&](SafetensorsFile& f, json&) { set_f32(f, "sinks", INFINITY); }},
      {"no_window_scalar", "sliding_window", [&](SafetensorsFile& f, json&) { drop(f, "sliding_window"); }},
      {"version_1", "has an attention variant, which a format_version 1 export cannot carry",
       [](SafetensorsFile&, json& m) { m["format_version"] = 1; }},
  };
  for (const auto& b : bad) {
    const fs::path d = tampered(b.name, b.edit);
    try {
      score_cases(d.string(), outs.string(), {});
      ADD_FAILURE() << b.name << ": scored";
    } catch (const std::runtime_error& e) {  // CaseFilesError or SafetensorsError: both exit 2 in the CLI
      EXPECT_NE(std::string(e.what()).find(b.want), std::string::npos) << b.name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(d.string()), std::string::npos) << b.name << ": " << e.what();
    }
  }
}

Suite qlen_suite() {
  return parse_suite(R"(
name = "qlen-casefiles"
[[cells]]
heads = "4/1"
head_sizes = 64
block_sizes = 16
dtypes = "bf16"
seq_lens = [[37, 20]]
variants = ["none", "qlen=4", "qlen=3,1", "qlen=2 win=8", "cap=50"]
faults = ["clean", "V:nan@tail"]
)",
                     "qlen.toml");
}

// Several query tokens per sequence (qlen=, format_version 3): export writes every such cell (query and out
// [num_query_tokens, num_heads, head_size], query_lens, query_start_loc), a runner built from the files alone
// gets run's verdicts on every output row, and a runner that gives each query row its sequence's last row
// (no causal mask among the new tokens) fails exactly the cells with a sequence of several query tokens.
TEST(CaseFilesQueryLen, ExportCarriesThemAndScoreJudgesEveryRowAsRun) {
  const fs::path cases = fresh_dir("qlen");
  const ExportSummary sum = export_cases(qlen_suite(), cases.string(), {});
  EXPECT_EQ(sum.cells, 10);
  const json m = manifest(cases);
  EXPECT_EQ(m["format_version"], 5);
  EXPECT_TRUE(m["left_out"].empty()) << m["left_out"].dump();
  int qlen_files = 0;
  for (const auto& e : m["files"]) {
    const Case c = parse_case_id(e["case"].get<std::string>());
    const SafetensorsFile f = read_safetensors((cases / e["file"].get<std::string>()).string());
    const std::int64_t T = c.num_query_tokens();
    EXPECT_EQ(e["num_query_tokens"], T) << e["case"];
    EXPECT_EQ(f.find("query")->shape, (std::vector<std::int64_t>{T, 4, 64})) << e["case"];
    EXPECT_EQ(f.find("out")->shape, (std::vector<std::int64_t>{T, 4, 64})) << e["case"];
    EXPECT_EQ(e["output"]["shape"], json({T, 4, 64})) << e["case"];
    std::vector<std::int32_t> ql(2), qsl(3);
    std::memcpy(ql.data(), f.expect("query_lens", StDType::I32, {2}).data.data(), 8);
    std::memcpy(qsl.data(), f.expect("query_start_loc", StDType::I32, {3}).data.data(), 12);
    EXPECT_EQ(ql, (std::vector<std::int32_t>{c.query_len(0), c.query_len(1)})) << e["case"];
    EXPECT_EQ(e["query_lens"], json(ql)) << e["case"];
    EXPECT_EQ(qsl, (std::vector<std::int32_t>{0, ql[0], ql[0] + ql[1]})) << e["case"];
    qlen_files += c.max_query_len() > 1;
  }
  EXPECT_GT(qlen_files, 0);

  const fs::path outs = fresh_dir("qlen_ref");
  run_foreign(cases, outs);
  expect_score_equals_run(cases, outs, qlen_suite());
  ScoreOptions so;
  so.run.threads = 2;

  // Planted: every query row of a sequence gets the output of the sequence's last row (the decode row), as
  // a kernel that ignores the causal mask among the new tokens would come close to.
  const fs::path bad = fresh_dir("qlen_nocausal");
  run_foreign(cases, bad, [](const json& e, std::vector<std::uint8_t>& out) {
    const std::vector<int> ql = e["query_lens"];
    const std::size_t row = out.size() / e["num_query_tokens"].get<std::size_t>();
    std::size_t start = 0;
    for (int q : ql) {
      for (int i = 0; i + 1 < q; ++i)
        std::memcpy(out.data() + (start + i) * row, out.data() + (start + q - 1) * row, row);
      start += static_cast<std::size_t>(q);
    }
  });
  const RunSummary planted = score_cases(cases.string(), bad.string(), so);
  int failed = 0;
  for (const auto& r : planted.results) {
    const bool several = parse_cell_id(r.cell_id).c.max_query_len() > 1;
    EXPECT_EQ(counts_as_failure(planted, r), several) << r.cell_id << ": " << verdict_name(r.verdict) << " " << r.detail;
    failed += several;
  }
  EXPECT_GT(failed, 0);

  // A runner that writes only the first num_seqs rows (one per sequence, as a version-2 runner would)
  // leaves rows unwritten: every row is guarded, as in `pacheck run`.
  const fs::path short_rows = fresh_dir("qlen_short");
  run_foreign(cases, short_rows, [&](const json& e, std::vector<std::uint8_t>& out) {
    const std::size_t row = out.size() / e["num_query_tokens"].get<std::size_t>();
    const SafetensorsFile f = read_safetensors((cases / e["file"].get<std::string>()).string());
    const auto& fill = f.find("out")->data;
    std::memcpy(out.data() + e["num_seqs"].get<std::size_t>() * row, fill.data() + e["num_seqs"].get<std::size_t>() * row,
                out.size() - e["num_seqs"].get<std::size_t>() * row);
  });
  for (const auto& r : score_cases(cases.string(), short_rows.string(), so).results) {
    const bool several = parse_cell_id(r.cell_id).c.max_query_len() > 1;
    EXPECT_EQ(r.verdict == Verdict::unwritten, several) << r.cell_id << ": " << verdict_name(r.verdict) << " " << r.detail;
  }

  // score --cell: only the named cell, and an unknown id is an input error naming it.
  ScoreOptions one = so;
  const std::string id = m["cells"][3]["id"];
  one.cells = {id};
  const RunSummary single = score_cases(cases.string(), outs.string(), one);
  ASSERT_EQ(single.results.size(), 1u);
  EXPECT_EQ(single.results[0].cell_id, id);
  one.cells = {"h4/1 no such cell"};
  try {
    score_cases(cases.string(), outs.string(), one);
    ADD_FAILURE() << "scored an unknown --cell";
  } catch (const CaseFilesError& e) {
    EXPECT_NE(std::string(e.what()).find("--cell 'h4/1 no such cell': no such cell"), std::string::npos) << e.what();
  }
}

// The reader validates query_lens (format_version 3): each bad value is refused before anything is scored,
// naming the file and the tensor or field (the CLI exits 2 on it, as on every case-file error).
TEST(CaseFilesQueryLen, BadQueryLensAreInputErrorsNamingTheField) {
  const Suite suite = parse_suite(R"(
name = "qlen-bad"
[[cells]]
heads = "4/1"
head_sizes = 64
block_sizes = 16
dtypes = "bf16"
seq_lens = [[37, 5]]
variants = ["qlen=3,2"]
faults = ["clean"]
)",
                                  "qlen-bad.toml");
  const fs::path cases = fresh_dir("qlen_bad");
  export_cases(suite, cases.string(), {});
  const std::string first = manifest(cases)["files"][0]["file"];
  const fs::path outs = fresh_dir("qlen_bad_outs");
  run_foreign(cases, outs);
  ASSERT_EQ(score_cases(cases.string(), outs.string(), {}).exit_code(), 0);

  auto tampered = [&](const std::string& name, const std::function<void(SafetensorsFile&, json&)>& edit) {
    return tampered_copy(cases, first, "qlen_bad_" + name, edit);
  };
  auto set_i32 = [](SafetensorsFile& f, const char* name, std::vector<std::int32_t> v) {
    for (auto& t : f.tensors)
      if (t.name == name) std::memcpy(t.data.data(), v.data(), v.size() * 4);
  };
  using Bad = BadEdit;
  const std::vector<Bad> bad = {
      {"zero", "tensor 'query_lens': sequence 1 has 0 query tokens (1 to 8)",
       [&](SafetensorsFile& f, json&) { set_i32(f, "query_lens", {3, 0}); }},
      {"nine", "tensor 'query_lens': sequence 0 has 9 query tokens (1 to 8)",
       [&](SafetensorsFile& f, json&) { set_i32(f, "query_lens", {9, 2}); }},
      {"past_seq_len", "tensor 'query_lens': sequence 1 has 6 query tokens, more than its seq_lens entry 5",
       [&](SafetensorsFile& f, json&) { set_i32(f, "query_lens", {3, 6}); }},
      {"sum", "tensor 'query_lens': sums to 4 query tokens but tensor 'query' has 5 rows",
       [&](SafetensorsFile& f, json&) { set_i32(f, "query_lens", {2, 2}); }},
      {"start_loc", "tensor 'query_start_loc': entry 1 is 2 but the prefix sum of query_lens is 3",
       [&](SafetensorsFile& f, json&) { set_i32(f, "query_start_loc", {0, 2, 5}); }},
      {"entry", "field 'query_lens' is [2,3] but its file holds [3,2]",
       [](SafetensorsFile&, json& m) { m["files"][0]["query_lens"] = {2, 3}; }},
      {"entry_tokens", "field 'num_query_tokens' is 4 but its file's query_lens sum to 5",
       [](SafetensorsFile&, json& m) { m["files"][0]["num_query_tokens"] = 4; }},
      {"other_case", "field 'query_lens' is [2,3] but its case",
       [&](SafetensorsFile& f, json& m) {
         set_i32(f, "query_lens", {2, 3});
         set_i32(f, "query_start_loc", {0, 2, 5});
         m["files"][0]["query_lens"] = {2, 3};
       }},
      {"missing", "query_lens", [](SafetensorsFile& f, json&) {
         f.tensors.erase(std::remove_if(f.tensors.begin(), f.tensors.end(),
                                        [](const StTensor& t) { return t.name == "query_lens"; }),
                         f.tensors.end());
       }},
      {"version_2", "has several query tokens per sequence (query_lens), which a format_version 2 export cannot carry",
       [](SafetensorsFile&, json& m) { m["format_version"] = 2; }},
  };
  for (const auto& b : bad) {
    const fs::path d = tampered(b.name, b.edit);
    try {
      score_cases(d.string(), outs.string(), {});
      ADD_FAILURE() << b.name << ": scored";
    } catch (const std::runtime_error& e) {  // CaseFilesError or SafetensorsError: both exit 2 in the CLI
      EXPECT_NE(std::string(e.what()).find(b.want), std::string::npos) << b.name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(d.string()), std::string::npos) << b.name << ": " << e.what();
    }
  }
}

TEST_F(CaseFiles, ExportWritesEveryCellAndSharesFilesOfIdenticalInputs) {
  EXPECT_EQ(summary_.cells, 16);
  const json m = manifest(cases_);
  EXPECT_EQ(m["format"], "pacheck-cases");
  EXPECT_EQ(m["cells"].size(), 16u);
  EXPECT_EQ(static_cast<int>(m["files"].size()), summary_.files);
  for (const auto& c : m["cells"]) {
    const std::string fault = c["fault"];
    if (fault == "clean") EXPECT_TRUE(c["baseline"].is_null());
    // A zero poison writes +0 over zeros: the same bytes as the clean cache, so the same file.
    if (fault == "V:zero@tail") EXPECT_EQ(c["file"], c["baseline"]) << c["id"];
    if (fault == "K+V:+inf@all") EXPECT_NE(c["file"], c["baseline"]) << c["id"];
    // V:nan@tail changes the bytes only where a final block has an unwritten tail.
    if (fault == "V:nan@tail") EXPECT_EQ(c["file"] != c["baseline"], c["straddle"].get<bool>()) << c["id"];
  }
  for (const auto& e : m["files"]) {
    const SafetensorsFile f = read_safetensors((cases_ / e["file"].get<std::string>()).string());
    for (const char* t : {"query", "key_cache", "value_cache", "block_tables", "seq_lens", "out", "scale", "k_scale", "v_scale"})
      EXPECT_NE(f.find(t), nullptr) << e["file"] << " lacks " << t;
    EXPECT_EQ(e["layout"], "vllm");  // unpinned cells resolve as `run` resolves them for built-ins
    EXPECT_EQ(f.metadata.at("inputs_sha256"), e["inputs_sha256"]);
  }
}

TEST_F(CaseFiles, ScoringReferenceOutputsGivesRunsVerdicts) {
  const fs::path outs = fresh_dir("ref");
  run_foreign(cases_, outs);
  const RunSummary scored = score(outs);
  RunOptions ro;
  ro.threads = 2;
  const RunSummary ran = run_suite(small_suite(), {Registry::global().find("cpu.reference")}, "cpu", ro);
  ASSERT_EQ(scored.results.size(), ran.results.size());
  const auto want = by_cell(ran);
  for (const auto& r : scored.results) {
    ASSERT_TRUE(want.count(r.cell_id)) << r.cell_id;
    EXPECT_EQ(r.verdict, want.at(r.cell_id)->verdict) << r.cell_id << ": " << r.detail;
    EXPECT_EQ(r.metrics.rel_linf, want.at(r.cell_id)->metrics.rel_linf) << r.cell_id;  // same bits, same metrics
    EXPECT_EQ(r.kernel, "foreign");
  }
  EXPECT_EQ(scored.passed, 16);
  EXPECT_EQ(scored.exit_code(), 0);
}

TEST_F(CaseFiles, AnOutputThatChangesUnderPoisonIsVariantAgainstTheExportedCleanVariant) {
  // One ULP in element 0 of every output computed from poisoned inputs: within tolerance, but not bitwise
  // invariant under the poison, which is what the tail-poison invariance check exists to catch.
  const json m = manifest(cases_);
  std::set<std::string> poisoned_files;
  for (const auto& c : m["cells"])
    if (!c["baseline"].is_null() && c["file"] != c["baseline"]) poisoned_files.insert(c["file"]);
  ASSERT_FALSE(poisoned_files.empty());
  const fs::path outs = fresh_dir("variant");
  run_foreign(cases_, outs, [&](const json& e, std::vector<std::uint8_t>& out) {
    if (poisoned_files.count(e["file"])) out[0] ^= 1;
  });
  const RunSummary s = score(outs);
  for (const auto& c : m["cells"]) {
    const CellResult* r = by_cell(s).at(c["id"]);
    const bool changed = poisoned_files.count(c["file"]) > 0;
    EXPECT_EQ(r->verdict, changed ? Verdict::variant : Verdict::pass) << c["id"] << ": " << r->detail;
    if (changed) EXPECT_EQ(r->variant_elements, 1) << c["id"];
  }
  EXPECT_EQ(s.exit_code(), 1);
}

TEST_F(CaseFiles, UnwrittenMissingAndMalformedOutputsGetTheirVerdicts) {
  const json m = manifest(cases_);
  const std::string skip = m["files"][0]["file"], missing = m["files"][1]["file"], cut = m["files"][2]["file"],
                    wrong = m["files"][3]["file"];
  const fs::path outs = fresh_dir("planted");
  run_foreign(cases_, outs, [&](const json& e, std::vector<std::uint8_t>& out) {
    if (e["file"] == skip) {  // leave the last element as the file's fill pattern: never written
      const SafetensorsFile in = read_safetensors((cases_ / skip).string());
      const auto& fill = in.find("out")->data;
      std::copy(fill.end() - 2, fill.end(), out.end() - 2);
    }
  });
  fs::remove(outs / missing);
  fs::resize_file(outs / cut, fs::file_size(outs / cut) - 5);
  {
    SafetensorsFile f32;
    std::vector<float> z(1 * 8 * 64);
    f32.add("out", StDType::F32, {1, 8, 64}, z.data());
    write_safetensors((outs / wrong).string(), f32);
  }
  const RunSummary s = score(outs);
  for (const auto& c : m["cells"]) {
    const CellResult* r = by_cell(s).at(c["id"]);
    const std::string f = c["file"], base = c["baseline"].is_null() ? f : c["baseline"].get<std::string>();
    // A cell's own output decides first; a broken clean baseline makes its poisoned cells errors too.
    if (f == missing || base == missing) {
      EXPECT_EQ(r->verdict, Verdict::error) << c["id"];
      EXPECT_NE(r->detail.find("no output file"), std::string::npos) << r->detail;
    } else if (f == cut || base == cut) {
      EXPECT_EQ(r->verdict, Verdict::error) << c["id"];
      EXPECT_NE(r->detail.find((outs / cut).string()), std::string::npos) << r->detail;
    } else if (f == wrong || base == wrong) {
      EXPECT_EQ(r->verdict, Verdict::error) << c["id"];
      EXPECT_NE(r->detail.find("tensor 'out': dtype F32, expected"), std::string::npos) << r->detail;
    } else if (f == skip) {
      EXPECT_EQ(r->verdict, Verdict::unwritten) << c["id"] << ": " << r->detail;
    }
  }
  EXPECT_EQ(s.exit_code(), 1);
}

// Issue 17: a poisoned cell whose own output exists but whose clean twin has none used to show only the
// twin's "no output file" message, naming the twin's file as if it were the cell's own.
TEST_F(CaseFiles, APoisonedCellWhoseCleanTwinHasNoOutputSaysItIsTheTwin) {
  const json m = manifest(cases_);
  std::string twin_file;
  for (const auto& c : m["cells"])
    if (!c["baseline"].is_null() && c["file"] != c["baseline"]) {
      twin_file = c["baseline"];
      break;
    }
  ASSERT_FALSE(twin_file.empty());
  const fs::path outs = fresh_dir("no_twin");
  run_foreign(cases_, outs);
  fs::remove(outs / twin_file);
  const RunSummary s = score(outs);
  int own = 0, through_twin = 0;
  for (const auto& c : m["cells"]) {
    const CellResult* r = by_cell(s).at(c["id"]);
    // The clean cell itself, and every poisoned cell of its case (a zero poison shares the twin's file).
    const bool is_twin = c["file"] == twin_file && c["baseline"].is_null();
    const bool uses_twin = !c["baseline"].is_null() && c["baseline"] == twin_file;
    if (!is_twin && !uses_twin) {
      EXPECT_EQ(r->verdict, Verdict::pass) << c["id"] << ": " << r->detail;
      continue;
    }
    EXPECT_EQ(r->verdict, Verdict::error) << c["id"];
    EXPECT_NE(r->detail.find((outs / twin_file).string() + ": no output file"), std::string::npos) << r->detail;
    if (is_twin) {
      ++own;
      EXPECT_EQ(r->detail.find("clean twin"), std::string::npos) << c["id"] << ": " << r->detail;
    } else {
      ++through_twin;
      EXPECT_EQ(r->detail.rfind("the clean twin '" + c["case"].get<std::string>() + " clean' (", 0), 0u)
          << c["id"] << ": " << r->detail;
    }
  }
  EXPECT_GE(own, 1);
  EXPECT_GE(through_twin, 1);
}

// Issue 17: a runner had no way to say "declined": a missing output is `error` and fails the run. A decline
// note in place of every output of a case declines its cells with the runner's reason; one for only part
// of a case, or beside an output, is a runner error.
TEST_F(CaseFiles, ADeclineNoteDeclinesAWholeCaseAndIsAnErrorOtherwise) {
  const json m = manifest(cases_);
  std::map<std::string, std::vector<std::string>> files_of_case;
  for (const auto& e : m["files"]) files_of_case[e["case"]].push_back(e["file"]);
  std::string whole, part;  // a case declined in full, and one with a file of several declined
  for (const auto& [c, files] : files_of_case) {
    if (whole.empty()) whole = c;
    else if (part.empty() && files.size() > 1) part = c;
  }
  ASSERT_FALSE(part.empty());
  const std::string both = files_of_case.rbegin()->first;  // a third case: an output and a note for one file
  ASSERT_NE(both, whole);
  ASSERT_NE(both, part);
  const fs::path outs = fresh_dir("declines");
  run_foreign(cases_, outs);
  auto note = [&](const std::string& file, const std::string& text) { std::ofstream(outs / (file + ".declined")) << text; };
  for (const auto& f : files_of_case[whole]) {
    fs::remove(outs / f);
    note(f, "kv_dtype bf16 not supported by this kernel\r\nsecond line ignored\n");
  }
  const std::string part_file = files_of_case[part].back();
  fs::remove(outs / part_file);
  note(part_file, "");
  note(files_of_case[both].front(), "odd");
  const RunSummary s = score(outs);
  int declined = 0;
  for (const auto& c : m["cells"]) {
    const CellResult* r = by_cell(s).at(c["id"]);
    const std::string cs = c["case"], f = c["file"], base = c["baseline"].is_null() ? f : c["baseline"].get<std::string>();
    if (cs == whole) {
      ++declined;
      EXPECT_EQ(r->verdict, Verdict::declined) << c["id"];
      EXPECT_EQ(r->detail, "declined by the runner: kv_dtype bf16 not supported by this kernel (" +
                               (outs / files_of_case[whole].front()).string() + ".declined)")
          << "the first declined file of the case names the reason";
    } else if (cs == part && (f == part_file || base == part_file)) {
      EXPECT_EQ(r->verdict, Verdict::error) << c["id"];
      EXPECT_NE(r->detail.find("declined by the runner: no reason given"), std::string::npos) << r->detail;
      EXPECT_NE(r->detail.find("declines all of them or none"), std::string::npos) << r->detail;
    } else if (cs == both && (f == files_of_case[both].front() || base == files_of_case[both].front())) {
      EXPECT_EQ(r->verdict, Verdict::error) << c["id"];
      EXPECT_NE(r->detail.find("both an output and a decline note"), std::string::npos) << r->detail;
    } else {
      EXPECT_EQ(r->verdict, Verdict::pass) << c["id"] << ": " << r->detail;
    }
  }
  EXPECT_GE(declined, 2);
  EXPECT_EQ(s.declined, declined);
  EXPECT_EQ(s.exit_code(), 1);  // the runner errors fail the run; the declines alone would not
  // Declines alone: exit 0.
  const fs::path only = fresh_dir("declines_only");
  run_foreign(cases_, only);
  for (const auto& f : files_of_case[whole]) {
    fs::remove(only / f);
    std::ofstream(only / (f + ".declined")) << "no\n";
  }
  const RunSummary s2 = score(only);
  EXPECT_EQ(s2.declined, declined);
  EXPECT_EQ(s2.exit_code(), 0);
  // A note that is not a small regular file is an input error, named.
  fs::remove(only / (files_of_case[whole][0] + ".declined"));
  fs::create_directory(only / (files_of_case[whole][0] + ".declined"));
  try {
    score(only);
    FAIL() << "a directory as a decline note was accepted";
  } catch (const CaseFilesError& e) {
    EXPECT_NE(std::string(e.what()).find("--outputs: decline note of"), std::string::npos) << e.what();
  }
}

TEST_F(CaseFiles, BrokenCaseDirectoriesAreInputErrors) {
  const fs::path outs = fresh_dir("ok_outputs");
  run_foreign(cases_, outs);
  auto copy_cases = [](const std::string& name) {
    const fs::path d = fresh_dir(name);
    fs::copy(cases_, d, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    return d;
  };
  const std::string first = manifest(cases_)["files"][0]["file"];

  const fs::path tampered = copy_cases("tampered");
  {  // one bit of the paged key cache, as a disk error or a hand edit would change it

    SafetensorsFile f = read_safetensors((tampered / first).string());
    for (auto& t : f.tensors)
      if (t.name == "key_cache") t.data[t.data.size() / 2] ^= 1;
    write_safetensors((tampered / first).string(), f);
  }
  try {
    score_cases(tampered.string(), outs.string(), {});
    FAIL() << "scored tampered inputs";
  } catch (const CaseFilesError& e) {
    EXPECT_NE(std::string(e.what()).find("inputs changed since export"), std::string::npos) << e.what();
  }

  const fs::path truncated = copy_cases("truncated");
  fs::resize_file(truncated / first, 100);
  try {
    score_cases(truncated.string(), outs.string(), {});
    FAIL() << "scored a truncated case file";
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(e.file, (truncated / first).string());
  }

  const fs::path bad_json = copy_cases("bad_json");
  std::ofstream(bad_json / "manifest.json") << "{\"format\": \"pacheck-cases\", ";
  EXPECT_THROW(score_cases(bad_json.string(), outs.string(), {}), CaseFilesError);

  const fs::path escape = copy_cases("escape");
  json m = manifest(escape);
  m["files"][0]["file"] = "../../etc/passwd";
  std::ofstream(escape / "manifest.json") << m.dump();
  EXPECT_THROW(score_cases(escape.string(), outs.string(), {}), CaseFilesError);

  EXPECT_THROW(score_cases(fresh_dir("empty").string(), outs.string(), {}), CaseFilesError);

  // Found by tests/fuzz/fuzz_manifest: a "format" that is not a string escaped as nlohmann's
  // "[json.exception.type_error.302] type must be string, but is number", naming neither file nor field
  // (seen with pacheck score before the fix); a huge format_version was read through get<int>() (undefined
  // behaviour under UBSan).
  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {R"({"format": 1})", "manifest.json: not a pacheck case manifest (format is not \"pacheck-cases\")"},
           {R"({"format": "pacheck-cases", "format_version": 1e300})", "manifest.json: format_version 1e+300 (this pacheck reads 1 to 5; a newer export needs a newer pacheck)"},
           {R"({"format": "pacheck-cases", "format_version": 6})", "manifest.json: format_version 6 (this pacheck reads 1 to 5; a newer export needs a newer pacheck)"},
           {R"({"format": "pacheck-cases", "format_version": "1"})", "manifest.json: field 'format_version': must be a number, not \"1\""},
           // Fresh-user audit: a missing field was nlohmann's "[json.exception.out_of_range.403] key ... not
           // found", and format_version 0 said a newer export needs a newer pacheck.
           {R"({"format": "pacheck-cases"})", "manifest.json: field 'format_version' is missing"},
           {R"({"format": "pacheck-cases", "format_version": 0})", "manifest.json: format_version 0 (this pacheck reads 1 to 5; no export writes it)"},
           {R"({"format": "pacheck-cases", "format_version": 3})", "manifest.json: field 'files' is missing"}}) {
    const fs::path d = copy_cases("bad_format");
    std::ofstream(d / "manifest.json") << text;
    try {
      score_cases(d.string(), outs.string(), {});
      ADD_FAILURE() << "scored " << text;
    } catch (const CaseFilesError& e) {
      EXPECT_EQ(e.what(), (d / want).string()) << text;
    }
  }
}

// parse_manifest is what score_cases reads manifest.json with: an export's manifest reads back whole.
TEST_F(CaseFiles, ParseManifestReadsAnExportsManifest) {
  const json written = manifest(cases_);
  const Manifest m = parse_manifest(written.dump(), "m.json");
  EXPECT_EQ(m.suite, written["suite"]);
  ASSERT_EQ(m.files.size(), written["files"].size());
  ASSERT_EQ(m.cells.size(), written["cells"].size());
  for (std::size_t i = 0; i < m.files.size(); ++i) {
    EXPECT_EQ(m.files[i].file, written["files"][i]["file"]);
    EXPECT_EQ(m.files[i].c.id(), written["files"][i]["case"]);
    EXPECT_EQ(m.files[i].where, fmt::format("m.json: files[{}]", i));
  }
  for (std::size_t i = 0; i < m.cells.size(); ++i) {
    EXPECT_EQ(m.cells[i].cell.id(), written["cells"][i]["id"]);
    EXPECT_EQ(m.cells[i].baseline, written["cells"][i]["baseline"]);
  }
}

// Issue 17: export was single-threaded. Cases are now generated in parallel and numbered in case order
// afterwards: every thread count writes the same manifest and the same bytes under the same names, and
// leaves no temporary file.
TEST(CaseFilesExport, ParallelExportWritesTheSameFilesAsSerial) {
  const Suite suite = parse_suite(R"(
name = "parallel-export"
[[cells]]
heads = ["8/2", "4/4"]
head_sizes = 64
block_sizes = [16, 32]
dtypes = ["bf16", "f16"]
seq_lens = [[37, 5], [32], 100]
faults = ["clean", "V:nan@tail", "K+V:+inf@all", "V:zero@tail"]
)",
                                  "parallel-export.toml");
  auto export_with = [&](int threads) {
    const fs::path d = fresh_dir("parallel_" + std::to_string(threads));
    ExportOptions eo;
    eo.threads = threads;
    const ExportSummary s = export_cases(suite, d.string(), eo);
    std::map<std::string, std::string> bytes;
    for (const auto& e : fs::directory_iterator(d)) {
      std::ifstream in(e.path(), std::ios::binary);
      bytes[e.path().filename().string()] = std::string(std::istreambuf_iterator<char>(in), {});
    }
    return std::make_pair(s, bytes);
  };
  const auto [serial, serial_files] = export_with(1);
  EXPECT_EQ(serial.cells, 96);
  for (int threads : {2, 5}) {
    const auto [par, par_files] = export_with(threads);
    EXPECT_EQ(par.files, serial.files) << threads;
    EXPECT_EQ(par.baselines, serial.baselines) << threads;
    ASSERT_EQ(par_files.size(), serial_files.size()) << threads;
    for (const auto& [name, b] : serial_files) {
      ASSERT_TRUE(par_files.count(name)) << name << " missing with " << threads << " threads";
      // The manifest names the directory nowhere, so it too must be byte-identical.
      EXPECT_TRUE(par_files.at(name) == b) << name << " differs with " << threads << " threads";
    }
    for (const auto& [name, b] : par_files) EXPECT_EQ(name.find(".tmp"), std::string::npos) << name;
  }
}

TEST(CaseFilesExport, KernelLayoutPinsUnpinnedCellsAndScoresLikeRun) {
  const fs::path cases = fresh_dir("hnd"), outs = fresh_dir("hnd_out");
  ExportOptions eo;
  eo.kernel_layout = Layout::hnd;
  export_cases(small_suite(), cases.string(), eo);
  const json m = manifest(cases);
  for (const auto& e : m["files"]) {
    EXPECT_EQ(e["layout"], "hnd");
    EXPECT_EQ(e["shapes"]["key_cache"].size(), 4u);  // [num_blocks, num_kv_heads, block_size, head_size]
    EXPECT_EQ(e["shapes"]["key_cache"][1], 2);
    EXPECT_EQ(e["shapes"]["key_cache"][2], 16);
  }
  run_foreign(cases, outs);
  ScoreOptions so;
  so.run.threads = 2;
  const RunSummary s = score_cases(cases.string(), outs.string(), so);
  EXPECT_EQ(s.passed, 16);
  for (const auto& r : s.results) EXPECT_NE(r.cell_id.find(" hnd "), std::string::npos) << r.cell_id;
}

TEST(CaseFilesExport, Fp8CachesCarryTheirTagsAndPerHeadScales) {
  Suite suite;
  try {
    suite = parse_suite(R"(
name = "fp8-casefiles"
[[cells]]
heads = "8/2"
head_sizes = 64
block_sizes = 16
dtypes = ["q=bf16,kv=fp8_e4m3fn,o=bf16", "q=bf16,kv=fp8_e4m3fnuz,o=bf16", "q=f16,kv=fp8_e5m2,o=f16"]
seq_lens = [37]
k_scale_range = [0.5, 2.0]
v_scale_range = [2.0, 0.5]
faults = ["clean", "V:nan@tail"]
)",
                        "fp8.toml");
  } catch (const std::exception& e) {
    GTEST_SKIP() << "this build's suites have no fp8 KV or per-head scales yet: " << e.what();
  }
  const fs::path cases = fresh_dir("fp8"), outs = fresh_dir("fp8_out");
  const ExportSummary sum = export_cases(suite, cases.string(), {});
  EXPECT_EQ(sum.cells, 6);
  EXPECT_EQ(sum.skipped_dtype, 0);  // e4m3fnuz too, as U8 (docs/FP8.md)
  const json m = manifest(cases);
  const std::map<std::string, StDType> tag = {
      {"fp8_e4m3fn", StDType::F8_E4M3}, {"fp8_e4m3fnuz", StDType::U8}, {"fp8_e5m2", StDType::F8_E5M2}};
  std::set<std::string> kinds;
  for (const auto& e : m["files"]) {
    const SafetensorsFile f = read_safetensors((cases / e["file"].get<std::string>()).string());
    const std::string kv = e["kv_dtype"];
    kinds.insert(kv);
    EXPECT_EQ(f.find("key_cache")->dtype, tag.at(kv)) << kv;
    EXPECT_EQ(f.find("value_cache")->dtype, tag.at(kv)) << kv;
    EXPECT_EQ(e["kv_tensor_dtype"], st_dtype_name(tag.at(kv)));
    EXPECT_EQ(f.metadata.at("kv_dtype"), kv);
    ASSERT_NE(f.find("k_scales_per_head"), nullptr);
    EXPECT_EQ(f.find("k_scales_per_head")->shape, std::vector<std::int64_t>{2});
    ASSERT_NE(f.find("v_scales_per_head"), nullptr);
    float ks;  // per-head arrays given: the scalar is NaN, so a runner reading it fails loudly
    std::memcpy(&ks, f.find("k_scale")->data.data(), 4);
    EXPECT_TRUE(std::isnan(ks));
  }
  EXPECT_EQ(kinds.size(), 3u);
  run_foreign(cases, outs);
  ScoreOptions so;
  so.run.threads = 2;
  const RunSummary s = score_cases(cases.string(), outs.string(), so);
  EXPECT_EQ(s.passed, 6);
  EXPECT_EQ(s.exit_code(), 0);

  // A U8 cache whose metadata names another encoding is an input error, not a silent misreading.
  for (const auto& e : m["files"]) {
    if (e["kv_dtype"] != "fp8_e4m3fnuz") continue;
    const std::string path = (cases / e["file"].get<std::string>()).string();
    SafetensorsFile f = read_safetensors(path);
    f.metadata["kv_dtype"] = "fp8_e4m3fn";
    write_safetensors(path, f);
    EXPECT_THROW(score_cases(cases.string(), outs.string(), so), CaseFilesError);
    break;
  }
}

// ---------------------------------------------------------------------------------------------------
// The commands' exit codes

/// stdout and stderr of `pacheck ARGS` (a shell command line after the binary).
std::string cli_output(const std::string& args) {
  std::string out;
  FILE* p = popen((std::string(PACHECK_BINARY) + " " + args + " 2>&1").c_str(), "r");
  if (!p) return out;
  char buf[4096];
  for (std::size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  pclose(p);
  return out;
}

int cli(const std::string& args) {
  const int st = std::system((std::string(PACHECK_BINARY) + " " + args + " >/dev/null 2>&1").c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(CaseFilesCli, ExitCodes) {
  const fs::path cases = fresh_dir("cli_cases"), outs = fresh_dir("cli_outs"), bad = fresh_dir("cli_bad");
  const std::string filter = "--filter 'h32/8 d128 bs16 bf16 ctx4090 vllm seed7 (clean|V:nan@tail)'";
  EXPECT_EQ(cli("export --suite tail-poison " + filter + " --out " + cases.string()), 0);
  run_foreign(cases, outs);
  EXPECT_EQ(cli("score --cases " + cases.string() + " --outputs " + outs.string()), 0);
  EXPECT_EQ(cli("score --cases " + cases.string() + " --outputs " + outs.string() + " --negative-control"), 3)
      << "a correct runner scored as the V-tail negative control is not caught: instrument blind";
  run_foreign(cases, bad, [](const json& e, std::vector<std::uint8_t>& out) {
    if (e["fault"] != "clean") out[0] ^= 1;  // changes under the poison: variant
  });
  EXPECT_EQ(cli("score --cases " + cases.string() + " --outputs " + bad.string()), 1);
  // The failure list's repro line is the `pacheck score --cell` command for the cell (it named kernel
  // `foreign`, which `pacheck repro` cannot load), and pasted it scores that cell alone, failing it again.
  {
    const std::string out = cli_output("score --cases " + cases.string() + " --outputs " + bad.string());
    EXPECT_EQ(out.find("--kernel foreign"), std::string::npos) << out;
    const std::string want = "pacheck score --cases " + cases.string() + " --outputs " + bad.string() + " --cell '";
    const auto at = out.rfind(want);
    ASSERT_NE(at, std::string::npos) << out;
    const std::string line = out.substr(at, out.find('\n', at) - at);
    const std::string again = cli_output(line.substr(std::string("pacheck ").size()) + "; echo exit=$?");
    EXPECT_NE(again.find("exit=1"), std::string::npos) << again;
    const std::string id = line.substr(line.find("--cell '") + 8, line.rfind('\'') - line.find("--cell '") - 8);
    EXPECT_NE(again.find(id), std::string::npos) << again;
  }
  EXPECT_EQ(cli("score --cases " + fresh_dir("cli_nothing").string() + " --outputs " + outs.string()), 2);
  EXPECT_EQ(cli("score --cases " + cases.string() + " --outputs /nonexistent/outputs"), 2);
  // Cells the export left out are named by score, so the file route's gap shows (issue 19 audit).
  {
    const fs::path dir = fresh_dir("cli_pool"), pool_outs = fresh_dir("cli_pool_outs");
    std::ofstream(dir / "pool.toml") << "name = \"pool\"\n[[cells]]\nheads = \"4/1\"\nhead_sizes = 64\nblock_sizes = 16\n"
                                        "dtypes = \"bf16\"\nseq_lens = [37]\nhigh_block_ids = [0, 31]\nfaults = [\"clean\"]\n";
    EXPECT_EQ(cli("export --suite " + (dir / "pool.toml").string() + " --out " + (dir / "cases").string()), 0);
    run_foreign(dir / "cases", pool_outs);
    const std::string out = cli_output("score --cases " + (dir / "cases").string() + " --outputs " + pool_outs.string());
    EXPECT_NE(out.find("pacheck: not scored: the export left out 1 cell(s) of suite pool (high_block_ids: high block "
                       "ids"), std::string::npos) << out;
  }
  EXPECT_EQ(cli("export --suite tail-poison --kernel-layout nchw --out " + fresh_dir("cli_x").string()), 2);
  EXPECT_EQ(cli("export --suite tail-poison --filter 'matches nothing' --out " + fresh_dir("cli_y").string()), 2);
}

// ---------------------------------------------------------------------------------------------------
// Files are keyed by call (geometry and bytes), not by bytes alone (issue 16, deliverable 6)

/// Gemma-2-9B's h16/8 d256 and gemma-3-27b's h32/16 d128 at the same lengths and seed: num_kv_heads x
/// head_size and num_heads x head_size agree, so the two calls have byte-identical inputs and differ only
/// in their geometry.
Suite same_bytes_suite() {
  std::string toml = "name = \"same-bytes\"\n";
  for (const auto& [heads, head_size] : {std::pair{"16/8", "256"}, std::pair{"32/16", "128"}})
    toml += std::string("[[cells]]\nheads = \"") + heads + "\"\nhead_sizes = " + head_size +
            "\nblock_sizes = 16\ndtypes = \"bf16\"\nseq_lens = [[37, 5], [32]]\nfaults = [\"clean\", \"V:nan@tail\"]\n";
  return parse_suite(toml, "same-bytes.toml");
}

/// Runs the foreign runner (cpu.reference) on the export in `cases`, writing into `outs`, and scores it.
RunSummary score_reference_outputs(const fs::path& cases, const fs::path& outs) {
  run_foreign(cases, outs);
  ScoreOptions so;
  so.run.threads = 2;
  return score_cases(cases.string(), outs.string(), so);
}

/// files[i] of `m` by file name.
std::map<std::string, json> files_by_name(const json& m) {
  std::map<std::string, json> out;
  for (const auto& e : m["files"]) out[e["file"]] = e;
  return out;
}

TEST(CaseFilesKey, TwoGeometriesOfIdenticalInputBytesGetTheirOwnFilesAndOracles) {
  const fs::path cases = fresh_dir("same_bytes"), outs = fresh_dir("same_bytes_out");
  const ExportSummary sum = export_cases(same_bytes_suite(), cases.string(), {});
  EXPECT_EQ(sum.cells, 8);
  const json m = manifest(cases);
  const auto files = files_by_name(m);
  // Per geometry: the straddling batch's clean and V:nan@tail variants, and the aligned batch's one file
  // (its tail poison writes no slot).
  EXPECT_EQ(sum.files, 6);
  EXPECT_EQ(files.size(), 6u);
  std::map<std::string, std::string> sha_of_clean;  // case id -> inputs_sha256 of its clean file
  for (const auto& c : m["cells"]) {
    const json& e = files.at(c["file"]);
    const Case cs = parse_case_id(c["case"]);
    EXPECT_EQ(e["case"], c["case"]) << c["id"];  // no file crosses a geometry
    EXPECT_EQ(e["num_heads"], cs.num_heads) << c["id"];
    EXPECT_EQ(e["head_size"], cs.head_size) << c["id"];
    if (c["fault"] == "clean") sha_of_clean[c["case"]] = e["inputs_sha256"];
  }
  // The premise: the two geometries' inputs are byte-identical, so a key of bytes alone would merge them.
  for (const char* lens : {"ctx37,5", "ctx32"}) {
    const std::string d256 = std::string("h16/8 d256 bs16 bf16 ") + lens + " vllm seed7";
    const std::string d128 = std::string("h32/16 d128 bs16 bf16 ") + lens + " vllm seed7";
    ASSERT_TRUE(sha_of_clean.count(d256) && sha_of_clean.count(d128)) << lens;
    EXPECT_EQ(sha_of_clean.at(d256), sha_of_clean.at(d128)) << lens;
  }

  const RunSummary scored = score_reference_outputs(cases, outs);
  RunOptions ro;
  ro.threads = 2;
  const RunSummary ran = run_suite(same_bytes_suite(), {Registry::global().find("cpu.reference")}, "cpu", ro);
  const auto want = by_cell(ran);
  ASSERT_EQ(scored.results.size(), 8u);
  for (const auto& r : scored.results) {
    EXPECT_EQ(r.verdict, Verdict::pass) << r.cell_id << ": " << r.detail;
    ASSERT_TRUE(want.count(r.cell_id)) << r.cell_id;
    EXPECT_EQ(r.metrics.rel_linf, want.at(r.cell_id)->metrics.rel_linf) << r.cell_id;  // its own oracle
  }
  EXPECT_EQ(scored.passed, 8);
  EXPECT_EQ(scored.exit_code(), 0);
}

TEST(CaseFilesKey, TheSameCallTwiceSharesOneFile) {
  Suite suite = parse_suite(R"(
name = "same-call"
[[cells]]
heads = "8/2"
head_sizes = 64
block_sizes = 16
dtypes = "bf16"
seq_lens = [[32]]
faults = ["clean", "V:nan@tail", "V:zero@tail"]
)",
                            "same-call.toml");
  ASSERT_EQ(suite.cells.size(), 3u);
  suite.cells.push_back(suite.cells[0]);  // the clean cell listed twice
  const fs::path cases = fresh_dir("same_call"), outs = fresh_dir("same_call_out");
  const ExportSummary sum = export_cases(suite, cases.string(), {});
  EXPECT_EQ(sum.cells, 4);
  // An aligned length: neither tail poison writes a slot, so all four cells make one call.
  EXPECT_EQ(sum.files, 1);
  const json m = manifest(cases);
  ASSERT_EQ(m["files"].size(), 1u);
  for (const auto& c : m["cells"]) EXPECT_EQ(c["file"], m["files"][0]["file"]) << c["id"];
  const RunSummary s = score_reference_outputs(cases, outs);
  EXPECT_EQ(s.passed, 4);
  EXPECT_EQ(s.exit_code(), 0);
}

/// The message of the CaseFilesError score_cases throws for `cases` (fails the test when it scores).
std::string score_refusal(const fs::path& cases, const fs::path& outs) {
  try {
    score_cases(cases.string(), outs.string(), {});
  } catch (const CaseFilesError& e) {
    return e.what();
  }
  ADD_FAILURE() << "scored " << cases;
  return "";
}

TEST(CaseFilesKey, ScoreRefusesAFileClaimedByCellsOfAnotherCall) {
  const fs::path cases = fresh_dir("shared_across"), outs = fresh_dir("shared_across_out");
  export_cases(same_bytes_suite(), cases.string(), {});
  run_foreign(cases, outs);
  // Rewrite the manifest as an export keyed by bytes alone wrote it: every cell points at the first file
  // of its inputs_sha256 (the d256 geometry's, which comes first), and the files no cell claims are gone.
  json m = manifest(cases);
  std::map<std::string, std::string> first_file_of_sha;
  for (const auto& e : m["files"]) first_file_of_sha.try_emplace(e["inputs_sha256"], e["file"]);
  const auto files = files_by_name(m);
  std::set<std::string> claimed_files;
  std::string claimed;  // the file the first cell of the other geometry claims
  for (auto& c : m["cells"]) {
    for (const char* key : {"file", "baseline"})
      if (!c[key].is_null()) c[key] = first_file_of_sha.at(files.at(c[key])["inputs_sha256"]);
    claimed_files.insert(c["file"]);
    if (claimed.empty() && files.at(c["file"])["case"] != c["case"]) claimed = c["file"];
  }
  json kept = json::array();
  for (const auto& e : m["files"])
    if (claimed_files.count(e["file"])) kept.push_back(e);
  m["files"] = kept;
  ASSERT_FALSE(claimed.empty());
  EXPECT_EQ(kept.size(), 3u);
  std::ofstream(cases / "manifest.json") << m.dump(1);

  const std::string what = score_refusal(cases, outs);
  EXPECT_NE(what.find((cases / "manifest.json").string() + ": cells["), std::string::npos) << what;
  EXPECT_NE(what.find("cell 'h32/16 d128"), std::string::npos) << what;          // the cell
  EXPECT_NE(what.find("file '" + claimed + "'"), std::string::npos) << what;     // the file
  EXPECT_NE(what.find("field 'num_heads' is 16"), std::string::npos) << what;    // the field
  EXPECT_NE(what.find("gives a kernel 32"), std::string::npos) << what;
  EXPECT_NE(what.find("export again"), std::string::npos) << what;
  EXPECT_EQ(cli("score --cases " + cases.string() + " --outputs " + outs.string()), 2)
      << "an export that shares files across calls is an input error";

  // A files[i] entry whose own fields are not its case's call (what a runner would read the bytes with).
  const fs::path edited = fresh_dir("edited_entry");
  export_cases(same_bytes_suite(), edited.string(), {});
  json e = manifest(edited);
  e["files"][0]["num_blocks"] = e["files"][0]["num_blocks"].get<int>() + 1;
  std::ofstream(edited / "manifest.json") << e.dump(1);
  const std::string what2 = score_refusal(edited, outs);
  EXPECT_NE(what2.find("files[0]: file '" + e["files"][0]["file"].get<std::string>() + "': field 'num_blocks'"),
            std::string::npos)
      << what2;
}

// ---------------------------------------------------------------------------------------------------
// Per-slot fp8 scale tables (format_version 4; issue 18 item 5, seed 002)

/// Per-slot K and V tables in the aiter layout at 16- and 32-token blocks, e4m3fn and e4m3fnuz, a straddling
/// and an aligned batch, poison in the unwritten slots' entries (region `scales`) and in the caches' tails;
/// and a per-tensor K scale beside a per-slot V table in the vllm layout.
Suite per_slot_suite() {
  return parse_suite(R"(
name = "slot-casefiles"
[[cells]]
heads = "8/2"
head_sizes = 64
block_sizes = [16, 32]
dtypes = ["q=bf16,kv=fp8_e4m3fn,o=bf16", "q=bf16,kv=fp8_e4m3fnuz,o=bf16"]
seq_lens = [[37, 20], [64]]
layouts = ["aiter"]
faults = ["clean", "V:nan@scales", "K:nan@scales", "K+V:nan@scales", "V:1e4@scales", "K+V:nan@tail"]
k_scale_slot = [0.5, 2.0]
v_scale_slot = [0.25, 4.0]
[[cells]]
heads = "8/2"
head_sizes = 64
block_sizes = 16
dtypes = "q=bf16,kv=fp8_e4m3fn,o=bf16"
seq_lens = [[37, 20]]
layouts = ["vllm"]
faults = ["clean", "V:nan@scales"]
k_scale = 0.5
v_scale_slot = [0.25, 4.0]
)",
                     "slot-casefiles.toml");
}

/// The F32 values of tensor `name` of `f`.
std::vector<float> f32_values(const SafetensorsFile& f, const char* name) {
  const StTensor* t = f.find(name);
  std::vector<float> v(t ? t->data.size() / 4 : 0);
  if (t) std::memcpy(v.data(), t->data.data(), t->data.size());
  return v;
}

// Export writes the per-slot tables of every cell (nothing is left out any more), each file's tables the
// bytes its kernel got: the pager's per-token scales in the written slots, the cell's poison in every other
// entry of a `scales` fault's table (1 in a clean table); the scale forms in the file's metadata and the
// manifest entry. A runner built from the files alone gets run's verdicts; one that applies the V scales
// across the whole final block (cpu.slot_scale_unmasked) fails exactly the cells that control must fail.
TEST(CaseFilesPerSlot, ExportCarriesTheTablesAsInjectedAndScoreJudgesThemAsRun) {
  const Suite suite = per_slot_suite();
  const fs::path cases = fresh_dir("slot");
  const ExportSummary sum = export_cases(suite, cases.string(), {});
  EXPECT_EQ(sum.cells, 50);
  const json m = manifest(cases);
  EXPECT_EQ(m["format_version"], 5);
  EXPECT_TRUE(m["left_out"].empty()) << m["left_out"].dump();
  int poisoned_tables = 0;
  for (const auto& e : m["files"]) {
    const std::string where = e["file"].get<std::string>() + " (" + e["case"].get<std::string>() + " " +
                              e["fault"].get<std::string>() + ")";
    const Case c = parse_case_id(e["case"].get<std::string>());
    const FaultSpec fault = parse_fault(e["fault"].get<std::string>());
    const SafetensorsFile f = read_safetensors((cases / e["file"].get<std::string>()).string());
    const int N = e["num_blocks"], G = e["num_kv_heads"], B = e["block_size"];
    // The written slots, from the file's block_tables and seq_lens.
    std::vector<bool> written(static_cast<std::size_t>(N) * B, false);
    const StTensor* bt = f.find("block_tables");
    const std::int64_t cols = bt->shape[1];
    for (int s = 0; s < c.num_seqs(); ++s)
      for (int t = 0; t < c.seq_lens[s]; ++t) {
        std::int32_t block;
        std::memcpy(&block, bt->data.data() + 4 * (s * cols + t / B), 4);
        written[static_cast<std::size_t>(block) * B + t % B] = true;
      }
    for (const bool k : {true, false}) {
      const char* name = k ? "k_scales_per_slot" : "v_scales_per_slot";
      const char* form_key = k ? "k_scale_form" : "v_scale_form";
      const bool per_slot = (k ? c.k_scale : c.v_scale).per_slot();
      const std::string form = per_slot ? "per_slot" : "per_tensor";
      EXPECT_EQ(e[form_key], form) << where;
      EXPECT_EQ(f.metadata.at(form_key), form) << where;
      ASSERT_EQ(f.find(name) != nullptr, per_slot) << where << " " << name;
      if (!per_slot) continue;
      EXPECT_EQ(f.find(name)->dtype, StDType::F32);
      EXPECT_EQ(f.find(name)->shape, (std::vector<std::int64_t>{N, G, B})) << where;
      EXPECT_EQ(e["shapes"][name], json({N, G, B})) << where;
      const float lo = k ? 0.5f : 0.25f, hi = k ? 2.0f : 4.0f;
      const bool poisoned = fault.region == Region::scales && (k ? fault.target != Target::v : fault.target != Target::k);
      poisoned_tables += poisoned;
      std::uint32_t bits = poison_bits(fault.poison, DType::f32);
      float poison;
      std::memcpy(&poison, &bits, 4);
      const std::vector<float> v = f32_values(f, name);
      for (int b = 0; b < N; ++b)
        for (int g = 0; g < G; ++g)
          for (int slot = 0; slot < B; ++slot) {
            const float x = v[(static_cast<std::size_t>(b) * G + g) * B + slot];
            if (written[static_cast<std::size_t>(b) * B + slot]) {
              ASSERT_TRUE(x >= lo && x <= hi) << where << " " << name << " block " << b << " slot " << slot << ": " << x;
            } else if (poisoned) {
              ASSERT_TRUE(std::isnan(poison) ? std::isnan(x) : x == poison)
                  << where << " " << name << " unwritten block " << b << " slot " << slot << ": " << x;
            } else {
              ASSERT_EQ(x, 1.0f) << where << " " << name << " unwritten block " << b << " slot " << slot;
            }
          }
    }
    float scalar;  // a per-slot table replaces the scalar, which is NaN so a runner reading it fails loudly
    std::memcpy(&scalar, f.find("v_scale")->data.data(), 4);
    EXPECT_TRUE(std::isnan(scalar)) << where;
  }
  EXPECT_GT(poisoned_tables, 0);

  const fs::path outs = fresh_dir("slot_ref");
  run_foreign(cases, outs);
  expect_score_equals_run(cases, outs, suite);

  // Planted: the V scales of the final block applied to every slot after masking (0 x NaN).
  const fs::path bad = fresh_dir("slot_unmasked");
  run_foreign(cases, bad, {}, "cpu.slot_scale_unmasked");
  ScoreOptions so;
  so.run.threads = 2;
  const RunSummary planted = score_cases(cases.string(), bad.string(), so);
  const auto must_fail = *Registry::global().find("cpu.slot_scale_unmasked")->expected_failures();
  int failed = 0;
  for (const auto& r : planted.results) {
    const bool want = must_fail(parse_cell_id(r.cell_id));
    EXPECT_EQ(counts_as_failure(planted, r), want) << r.cell_id << ": " << verdict_name(r.verdict) << " " << r.detail;
    failed += want;
  }
  EXPECT_GT(failed, 0);
  EXPECT_EQ(planted.exit_code(), 1);
}

// A per-slot case file missing a table, with a table of the wrong shape or dtype, one its case does not
// have, forms that are not its case's, tables in a version-3 export, or an edited entry is refused before
// anything is scored, naming the file and the tensor or field (the CLI: exit 2, as every case-file error).
TEST(CaseFilesPerSlot, BadTablesAreInputErrorsNamingFileAndTensor) {
  const Suite suite = parse_suite(R"(
name = "slot-bad"
[[cells]]
heads = "4/1"
head_sizes = 64
block_sizes = 16
dtypes = "q=bf16,kv=fp8_e4m3fn,o=bf16"
seq_lens = [37]
faults = ["clean"]
k_scale = 0.5
v_scale_slot = [0.25, 4.0]
)",
                                  "slot-bad.toml");
  const fs::path cases = fresh_dir("slot_bad");
  export_cases(suite, cases.string(), {});
  const std::string first = manifest(cases)["files"][0]["file"];
  const fs::path outs = fresh_dir("slot_bad_outs");
  run_foreign(cases, outs);
  ASSERT_EQ(score_cases(cases.string(), outs.string(), {}).exit_code(), 0);

  auto tensor = [](SafetensorsFile& f, const char* name) -> StTensor& {
    for (auto& t : f.tensors)
      if (t.name == name) return t;
    throw std::logic_error(std::string("no tensor ") + name);
  };
  auto drop = drop_tensor;
  using Bad = BadEdit;
  const std::vector<Bad> bad = {
      {"missing", "tensor 'v_scales_per_slot' missing: its case", [&](SafetensorsFile& f, json&) { drop(f, "v_scales_per_slot"); }},
      {"shape", "v_scales_per_slot",
       [&](SafetensorsFile& f, json&) {
         StTensor& t = tensor(f, "v_scales_per_slot");
         t.shape = {t.shape[0], t.shape[1] * t.shape[2]};  // the same bytes, [num_blocks, num_kv_heads x block_size]
       }},
      {"dtype", "v_scales_per_slot", [&](SafetensorsFile& f, json&) { tensor(f, "v_scales_per_slot").dtype = StDType::I32; }},
      {"unexpected", "tensor 'k_scales_per_slot': its case",
       [&](SafetensorsFile& f, json&) {
         StTensor t = tensor(f, "v_scales_per_slot");
         t.name = "k_scales_per_slot";
         f.tensors.push_back(t);
       }},
      {"entry_form", "field 'v_scale_form' is \"per_tensor\" but its case",
       [](SafetensorsFile& f, json& m) {
         m["files"][0]["v_scale_form"] = "per_tensor";
         f.metadata["v_scale_form"] = "per_tensor";
       }},
      {"metadata_form", "metadata v_scale_form 'per_kv_head' but field 'v_scale_form'",
       [](SafetensorsFile& f, json&) { f.metadata["v_scale_form"] = "per_kv_head"; }},
      {"no_entry_form", "field 'k_scale_form' is missing", [](SafetensorsFile&, json& m) { m["files"][0].erase("k_scale_form"); }},
      {"entry_changed", "inputs changed since export",
       [&](SafetensorsFile& f, json&) {
         StTensor& t = tensor(f, "v_scales_per_slot");
         const float x = 3.0f;
         std::memcpy(t.data.data(), &x, 4);
       }},
      {"version_3", "has per-slot fp8 scale tables, which a format_version 3 export cannot carry",
       [](SafetensorsFile&, json& m) { m["format_version"] = 3; }},
  };
  for (const auto& b : bad) {
    const fs::path d = tampered_copy(cases, first, "slot_bad_" + b.name, b.edit);
    try {
      score_cases(d.string(), outs.string(), {});
      ADD_FAILURE() << b.name << ": scored";
    } catch (const std::runtime_error& e) {  // CaseFilesError or SafetensorsError: both exit 2 in the CLI
      EXPECT_NE(std::string(e.what()).find(b.want), std::string::npos) << b.name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(d.string()), std::string::npos) << b.name << ": " << e.what();
    }
    if (b.name == "missing" || b.name == "dtype") {
      const std::string out = cli_output("score --cases " + d.string() + " --outputs " + outs.string() + " 2>&1; echo exit=$?");
      EXPECT_NE(out.find("exit=2"), std::string::npos) << b.name << ": " << out;
      EXPECT_NE(out.find("v_scales_per_slot"), std::string::npos) << b.name << ": " << out;
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// MLA cells (format_version 5; issue 44 item 4)

/// MLA cells beside multi-head ones (a mixed suite, as gate is): a small latent shape whose V (24) is a shorter
/// prefix than its latent part (32), straddling and aligned batches, poison in each part of the tail and in the
/// other sequence's slots, several query tokens, and an fp8 latent cache with a per-tensor scale.
Suite mla_suite() {
  return parse_suite(R"(
name = "mla-casefiles"
[[cells]]
mla = "32+16,v24"
heads = "4/1"
head_sizes = 48
block_sizes = 16
layouts = "nhd"
dtypes = "bf16"
seq_lens = [[37, 5], [32]]
scales = [0.125]
variants = ["none", "qlen=3"]
faults = ["clean", "V:nan@tail", "K:nan@tail", "K+V:+inf@tail", "V:nan@others"]
[[cells]]
mla = "32+16"
heads = "4/1"
head_sizes = 48
block_sizes = 16
layouts = "nhd"
dtypes = "q=bf16,kv=fp8_e4m3fn,o=bf16"
seq_lens = [[37, 5]]
scales = [0.125]
k_scale = 0.5
faults = ["clean", "V:nan@tail"]
[[cells]]
heads = "4/2"
head_sizes = 64
block_sizes = 16
dtypes = "bf16"
seq_lens = [[37, 5]]
faults = ["clean", "V:nan@tail"]
)",
                     "mla-casefiles.toml");
}

/// The I32 scalar `name` of case file `f`.
std::int32_t i32_scalar(const SafetensorsFile& f, const char* name) {
  std::int32_t v;
  std::memcpy(&v, f.expect(name, StDType::I32, {}).data.data(), 4);
  return v;
}

// Export writes every MLA cell: its file holds the latent cache once (latent_cache [num_blocks, block_size, R],
// no key_cache / value_cache), the three MLA scalars (0 in a multi-head file), out [T, H, v_head_dim]; the entry
// restates the scalars. A runner built from the files alone (cpu.mla_reference on the MLA files) gets run's
// verdicts, reported under a kernel of each kind; one that reads V over the whole final block (cpu.mla_v_tail)
// fails exactly the cells poisons_v_tail names, and scored as the negative control it is caught there.
TEST(CaseFilesMla, ExportCarriesTheLatentCacheAndScoreJudgesItAsRun) {
  const Suite suite = mla_suite();
  const fs::path cases = fresh_dir("mla");
  const ExportSummary sum = export_cases(suite, cases.string(), {});
  EXPECT_EQ(sum.cells, 24);
  EXPECT_EQ(sum.skipped_mla, 0);
  const json m = manifest(cases);
  EXPECT_EQ(m["format_version"], 5);
  EXPECT_TRUE(m["left_out"].empty()) << m["left_out"].dump();
  int mla_files = 0;
  for (const auto& e : m["files"]) {
    const Case c = parse_case_id(e["case"].get<std::string>());
    const SafetensorsFile f = read_safetensors((cases / e["file"].get<std::string>()).string());
    const std::int64_t T = c.num_query_tokens(), N = e["num_blocks"];
    EXPECT_EQ(i32_scalar(f, "kv_lora_rank"), c.kv_lora_rank) << e["case"];
    EXPECT_EQ(i32_scalar(f, "qk_rope_head_dim"), c.qk_rope_head_dim) << e["case"];
    EXPECT_EQ(i32_scalar(f, "v_head_dim"), c.v_head_dim) << e["case"];
    for (const char* k : {"kv_lora_rank", "qk_rope_head_dim", "v_head_dim"})
      EXPECT_EQ(e[k], i32_scalar(f, k)) << e["case"] << " " << k;
    EXPECT_EQ(f.find("out")->shape, (std::vector<std::int64_t>{T, c.num_heads, c.out_head_size()})) << e["case"];
    EXPECT_EQ(e["output"]["shape"], json({T, c.num_heads, c.out_head_size()})) << e["case"];
    if (!c.is_mla()) {
      EXPECT_EQ(f.find("latent_cache"), nullptr) << e["case"];
      continue;
    }
    ++mla_files;
    EXPECT_EQ(f.find("key_cache"), nullptr) << e["case"];
    EXPECT_EQ(f.find("value_cache"), nullptr) << e["case"];
    const StTensor* lat = f.find("latent_cache");
    ASSERT_NE(lat, nullptr) << e["case"];
    EXPECT_EQ(lat->shape, (std::vector<std::int64_t>{N, c.block_size, 48})) << e["case"];
    EXPECT_EQ(e["kv_tensor_dtype"], std::string(st_dtype_name(lat->dtype))) << e["case"];
    EXPECT_EQ(f.find("query")->shape, (std::vector<std::int64_t>{T, c.num_heads, 48})) << e["case"];
  }
  EXPECT_GT(mla_files, 0);

  const fs::path outs = fresh_dir("mla_ref");
  run_foreign(cases, outs);
  expect_score_equals_run(cases, outs, suite, true);
  ScoreOptions so;
  so.run.threads = 2;
  std::set<std::string> kernels;
  for (const auto& r : score_cases(cases.string(), outs.string(), so).results) {
    kernels.insert(r.kernel);
    EXPECT_EQ(r.kernel, parse_cell_id(r.cell_id).c.is_mla() ? "foreign.mla" : "foreign") << r.cell_id;
  }
  EXPECT_EQ(kernels, (std::set<std::string>{"foreign", "foreign.mla"}));

  // Planted: the MLA files through cpu.mla_v_tail (weights 0 past the keys, V read over the whole final block),
  // the multi-head ones through its multi-head form, cpu.vector_v (the same predicate on cells without a window).
  const fs::path bad = fresh_dir("mla_v_tail");
  run_foreign(cases, bad, {}, "cpu.vector_v", "cpu.mla_v_tail");
  const RunSummary planted = score_cases(cases.string(), bad.string(), so);
  int failed = 0;
  for (const auto& r : planted.results) {
    const bool want = poisons_v_tail(parse_cell_id(r.cell_id));
    EXPECT_EQ(counts_as_failure(planted, r), want) << r.cell_id << ": " << verdict_name(r.verdict) << " " << r.detail;
    failed += want;
  }
  EXPECT_GT(failed, 0);
  ScoreOptions control = so;
  control.negative_control = true;
  EXPECT_EQ(score_cases(cases.string(), bad.string(), control).exit_code(), 0);
}

// --format-version 4 (for a runner that reads up to 4): the MLA cells are left out, counted, with the reason
// in the manifest's left_out; the files and entries carry no MLA scalar; score reads the export as before and
// names what was left out.
TEST(CaseFilesMla, AFormatVersion4ExportLeavesThemOut) {
  const fs::path cases = fresh_dir("mla_v4");
  ExportOptions eo;
  eo.format_version = 4;
  const ExportSummary sum = export_cases(mla_suite(), cases.string(), eo);
  EXPECT_EQ(sum.cells, 2);
  EXPECT_EQ(sum.skipped_mla, 22);
  const json m = manifest(cases);
  EXPECT_EQ(m["format_version"], 4);
  ASSERT_EQ(m["left_out"].size(), 1u) << m["left_out"].dump();
  EXPECT_EQ(m["left_out"][0]["kind"], "mla");
  EXPECT_EQ(m["left_out"][0]["cells"], 22);
  EXPECT_NE(m["left_out"][0]["reason"].get<std::string>().find(
                "a format_version 4 export carries no latent cache; format_version 5 added it"),
            std::string::npos)
      << m["left_out"].dump();
  for (const auto& e : m["files"]) {
    const SafetensorsFile f = read_safetensors((cases / e["file"].get<std::string>()).string());
    for (const char* k : {"kv_lora_rank", "qk_rope_head_dim", "v_head_dim"}) {
      EXPECT_EQ(f.find(k), nullptr) << e["file"] << " " << k;
      EXPECT_FALSE(e.contains(k)) << e["file"] << " " << k;
    }
  }
  const fs::path outs = fresh_dir("mla_v4_outs");
  run_foreign(cases, outs);
  std::vector<LeftOut> left;
  EXPECT_EQ(score_cases(cases.string(), outs.string(), {}, nullptr, &left).exit_code(), 0);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].kind, "mla");
  EXPECT_EQ(left[0].cells, 22);
  ExportOptions bad;
  bad.format_version = 3;
  EXPECT_THROW(export_cases(mla_suite(), fresh_dir("mla_v3").string(), bad), CaseFilesError);
  const std::string out = cli_output("export --suite gate --filter mla= --format-version 4 --out " +
                                     fresh_dir("mla_cli_v4").string() + " 2>&1; echo exit=$?");
  EXPECT_NE(out.find("4 MLA cells (a format_version 4 export carries no latent cache; format_version 5 added it)"),
            std::string::npos) << out;
  EXPECT_NE(out.find("exit=2"), std::string::npos) << out;
}

// The reader validates the MLA fields (format_version 5): each bad value is refused before anything is scored,
// naming the file and the tensor or field (the CLI exits 2 on it, as on every case-file error).
TEST(CaseFilesMla, BadMlaFieldsAreInputErrorsNamingTheField) {
  const Suite suite = parse_suite(R"(
name = "mla-bad"
[[cells]]
mla = "32+16,v24"
heads = "4/1"
head_sizes = 48
block_sizes = 16
layouts = "nhd"
dtypes = "bf16"
seq_lens = [[37, 5]]
scales = [0.125]
faults = ["clean"]
)",
                                  "mla-bad.toml");
  const fs::path cases = fresh_dir("mla_bad");
  export_cases(suite, cases.string(), {});
  const std::string first = manifest(cases)["files"][0]["file"];
  const fs::path outs = fresh_dir("mla_bad_outs");
  run_foreign(cases, outs);
  ASSERT_EQ(score_cases(cases.string(), outs.string(), {}).exit_code(), 0);

  auto set_i32 = [](SafetensorsFile& f, const char* name, std::int32_t v) {
    for (auto& t : f.tensors)
      if (t.name == name) std::memcpy(t.data.data(), &v, 4);
  };
  auto rename = [](SafetensorsFile& f, const char* from, const char* to) {
    for (auto& t : f.tensors)
      if (t.name == from) t.name = to;
  };
  const std::vector<BadEdit> bad = {
      {"entry_rank", "field 'kv_lora_rank' is 48 but its file holds 32",
       [](SafetensorsFile&, json& m) { m["files"][0]["kv_lora_rank"] = 48; }},
      {"entry_rope", "field 'qk_rope_head_dim' is 0 but its file holds 16",
       [](SafetensorsFile&, json& m) { m["files"][0]["qk_rope_head_dim"] = 0; }},
      {"entry_v", "field 'v_head_dim' is 32 but its file holds 24",
       [](SafetensorsFile&, json& m) { m["files"][0]["v_head_dim"] = 32; }},
      {"no_entry_v", "field 'v_head_dim' is missing", [](SafetensorsFile&, json& m) { m["files"][0].erase("v_head_dim"); }},
      {"other_v", "field 'v_head_dim' is 32 but its case",
       [&](SafetensorsFile& f, json& m) {
         set_i32(f, "v_head_dim", 32);
         m["files"][0]["v_head_dim"] = 32;
       }},
      {"negative_rope", "tensor 'qk_rope_head_dim': -1 is not an integer in [0, 1024]",
       [&](SafetensorsFile& f, json&) { set_i32(f, "qk_rope_head_dim", -1); }},
      {"no_rank", "kv_lora_rank", [](SafetensorsFile& f, json&) { drop_tensor(f, "kv_lora_rank"); }},
      {"no_latent", "latent_cache", [](SafetensorsFile& f, json&) { drop_tensor(f, "latent_cache"); }},
      {"as_key_cache", "tensor 'key_cache': its case",
       [&](SafetensorsFile& f, json&) { rename(f, "latent_cache", "key_cache"); }},
      {"latent_dtype", "dtype F16 (kv_dtype bf16 is stored as BF16)",
       [](SafetensorsFile& f, json&) {
         for (auto& t : f.tensors)
           if (t.name == "latent_cache") t.dtype = StDType::F16;
       }},
      {"latent_changed", "inputs changed since export",
       [](SafetensorsFile& f, json&) {
         for (auto& t : f.tensors)
           if (t.name == "latent_cache") t.data[5] ^= 1;
       }},
      {"output_width", "field 'output.shape' is [2,4,48] but its case",
       [](SafetensorsFile&, json& m) { m["files"][0]["output"]["shape"] = {2, 4, 48}; }},
      {"version_4", "has an MLA latent cache, which a format_version 4 export cannot carry",
       [](SafetensorsFile&, json& m) { m["format_version"] = 4; }},
  };
  for (const auto& b : bad) {
    const fs::path d = tampered_copy(cases, first, "mla_bad_" + b.name, b.edit);
    try {
      score_cases(d.string(), outs.string(), {});
      ADD_FAILURE() << b.name << ": scored";
    } catch (const std::runtime_error& e) {  // CaseFilesError or SafetensorsError: both exit 2 in the CLI
      EXPECT_NE(std::string(e.what()).find(b.want), std::string::npos) << b.name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(d.string()), std::string::npos) << b.name << ": " << e.what();
    }
    if (b.name == "entry_rank") {
      const std::string out =
          cli_output("score --cases " + d.string() + " --outputs " + outs.string() + " 2>&1; echo exit=$?");
      EXPECT_NE(out.find("exit=2"), std::string::npos) << out;
      EXPECT_NE(out.find("field 'kv_lora_rank'"), std::string::npos) << out;
    }
  }
  // An output of the latent row's width (a runner that wrote head_size values per head) is the file's error.
  const fs::path wide = fresh_dir("mla_bad_wide");
  {
    SafetensorsFile o;
    const std::vector<std::uint8_t> bytes(2 * 4 * 48 * 2, 0);
    o.add("out", StDType::BF16, {2, 4, 48}, bytes.data());
    write_safetensors((wide / first).string(), o);
  }
  for (const auto& r : score_cases(cases.string(), wide.string(), {}).results) {
    EXPECT_EQ(r.verdict, Verdict::error) << r.cell_id;
    EXPECT_NE(r.detail.find("out"), std::string::npos) << r.detail;
  }
}

}  // namespace
}  // namespace pacheck
