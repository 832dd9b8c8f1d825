// The plugin C ABI: every way a library can be refused (each planted in a test plugin built from
// tests/plugins/planted_plugin.c), the CLI's exit code 2 with nothing run, SHA-256 of loaded libraries,
// and plugin kernels receiving every verdict through the adapter.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/digest.hpp"
#include "core/dtype.hpp"
#include "core/mla.hpp"
#include "faults/mla_inject.hpp"
#include "kernels/plugin.hpp"
#include "exec/runner.hpp"
#include "report/text.hpp"
#include "suites/suite.hpp"

namespace pacheck {
namespace {

namespace fs = std::filesystem;

std::string plant(const std::string& name) {
  return std::string(PACHECK_TEST_PLUGIN_DIR) + "/libpacheck_test_plugin_" + name + ".so";
}

Registry builtins() {
  Registry r;
  register_cpu_kernels(r);
  return r;
}

struct AbiError {
  const char* plant;
  const char* problem;  ///< must appear in PluginError::problem
};

class PluginAbiError : public ::testing::TestWithParam<AbiError> {};

TEST_P(PluginAbiError, RefusedNamingTheLibraryAndTheProblemWithNothingRegistered) {
  Registry reg = builtins();
  const std::size_t before = reg.all().size();
  const std::string lib = plant(GetParam().plant);
  try {
    load_plugin(lib, reg);
    FAIL() << lib << " loaded";
  } catch (const PluginError& e) {
    EXPECT_EQ(e.library, lib);
    EXPECT_EQ(std::string(e.what()).rfind("plugin '" + lib + "': ", 0), 0u) << e.what();
    EXPECT_NE(e.problem.find(GetParam().problem), std::string::npos) << e.what();
  }
  EXPECT_EQ(reg.all().size(), before) << "a refused library must register nothing";
}

INSTANTIATE_TEST_SUITE_P(
    Plants, PluginAbiError,
    ::testing::Values(
        AbiError{"wrong_abi", "wrong ABI version: the library was built for pacheck kernel ABI 999, this pacheck loads ABI 1 to 4"},
        AbiError{"future_abi", "built for pacheck kernel ABI 5, this pacheck loads ABI 1 to 4"},
        AbiError{"zero_abi", "built for pacheck kernel ABI 0, this pacheck loads ABI 1 to 4"},
        AbiError{"no_register", "missing symbol 'pacheck_register_kernels'"},
        AbiError{"no_version", "missing symbol 'pacheck_plugin_abi_version'"},
        AbiError{"dup_builtin", "duplicate kernel name 'cpu.reference': already registered by a built-in kernel"},
        AbiError{"dup_self", "duplicate kernel name 'plug.twice': registered twice by this library"},
        AbiError{"null_name", "invalid descriptor: kernel #0: name is NULL"},
        AbiError{"bad_name", "name 'has space' has character ' '"},
        AbiError{"null_run", "invalid descriptor: kernel #0 ('plug.bad'): run is NULL"},
        AbiError{"bad_layout", "kernel #0 ('plug.bad'): layouts: 7 is not a pacheck_layout value"},
        AbiError{"empty_dtypes", "kv_dtypes: empty"},
        AbiError{"dup_dtype", "kernel #0 ('plug.bad'): kv_dtypes: bf16 listed twice"},
        AbiError{"null_array", "head_sizes: NULL with num_head_sizes = 2"},
        AbiError{"bad_head_size", "head_sizes: 0 is not > 0"},
        AbiError{"bad_device", "device: 9 is not a pacheck_device value"},
        AbiError{"small_struct", "struct_size 16 is smaller than the ABI v4 pacheck_kernel_desc"},
        AbiError{"v1_sized_desc", "is smaller than the ABI v4 pacheck_kernel_desc"},
        AbiError{"oversized_struct", "struct_size 100000 is larger than any pacheck_kernel_desc this pacheck knows"},
        AbiError{"v1_with_v2_fields", "declares ABI version 1 but sets scale_forms = 0x2, a version-2 field"},
        AbiError{"unknown_flag", "flags: unknown bits 0x80"},
        AbiError{"unknown_variant", "kernel #0 ('plug.bad'): variants: unknown bits 0x40 (known: 0x1f)"},
        AbiError{"unknown_scale_form", "kernel #0 ('plug.bad'): scale_forms: unknown bits 0x1 (known to ABI v4: 0xe"},
        AbiError{"null_desc", "descriptor pointer is NULL"},
        AbiError{"register_fails", "pacheck_register_kernels failed: planted: no device for this plugin"},
        AbiError{"no_kernels", "registered no kernel"}),
    [](const ::testing::TestParamInfo<AbiError>& i) { return std::string(i.param.plant); });

// Declaring version 1 with the version-2 header is fine while no version-2 field is set: the plugin loads
// and runs as a version-1 plugin.
TEST(Plugin, Version1DeclaredWithTheVersion2StructLoads) {
  Registry reg = builtins();
  const PluginInfo info = load_plugin(plant("v1_with_v2_size"), reg);
  EXPECT_EQ(info.abi_version, 1u);
  EXPECT_EQ(info.kernels, std::vector<std::string>{"plug.bad"});
}

TEST(Plugin, MissingFileAndNonLibraryAreRefused) {
  Registry reg = builtins();
  EXPECT_THROW(
      try { load_plugin("/nonexistent/libnothing.so", reg); } catch (const PluginError& e) {
        EXPECT_EQ(e.problem, "no such file");
        throw;
      },
      PluginError);
  const fs::path text = fs::temp_directory_path() / "pacheck_not_a_library.so";
  std::ofstream(text) << "not an ELF file\n";
  try {
    load_plugin(text.string(), reg);
    FAIL() << "a text file loaded";
  } catch (const PluginError& e) {
    EXPECT_EQ(e.problem.rfind("cannot load: ", 0), 0u) << e.what();
  }
}

TEST(Plugin, LoadsTheExampleAndRecordsItsSha256) {
  Registry reg = builtins();
  const PluginInfo info = load_plugin(PACHECK_EXAMPLE_PLUGIN, reg);
  EXPECT_EQ(info.abi_version, static_cast<std::uint32_t>(PACHECK_ABI_VERSION));
  EXPECT_EQ(info.kernels, std::vector<std::string>{"example.cpu_reference"});
  EXPECT_TRUE(fs::path(info.resolved_path).is_absolute());
  ASSERT_NE(reg.find("example.cpu_reference"), nullptr);
  EXPECT_EQ(reg.find("example.cpu_reference")->layouts().front(), Layout::nhd);  // the descriptor's order

  // The digest must be that of the file, computed independently by coreutils.
  FILE* p = popen(("sha256sum '" + info.resolved_path + "'").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[65] = {};
  ASSERT_EQ(std::fread(buf, 1, 64, p), 64u);
  pclose(p);
  EXPECT_EQ(info.sha256, std::string(buf));

  bool listed = false;
  for (const auto& l : loaded_plugins()) listed = listed || (l.path == PACHECK_EXAMPLE_PLUGIN && l.sha256 == info.sha256);
  EXPECT_TRUE(listed) << "loaded_plugins() must report the library for issue 8's fingerprint";

  // The same library again: its kernel name is now taken by a plugin, and the error says which.
  try {
    load_plugin(PACHECK_EXAMPLE_PLUGIN, reg);
    FAIL() << "loaded twice";
  } catch (const PluginError& e) {
    EXPECT_NE(e.problem.find("already registered by plugin '" + std::string(PACHECK_EXAMPLE_PLUGIN) + "'"),
              std::string::npos)
        << e.what();
  }
}

TEST(Sha256, MatchesTheFips180Vectors) {
  Sha256 empty;
  EXPECT_EQ(empty.hex(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  Sha256 abc;
  abc.update("a", 1);
  abc.update("bc", 2);  // incremental updates give the digest of the concatenation
  EXPECT_EQ(abc.hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

/// A one-case suite, small enough to run every plugin kernel in a test.
Suite small_suite() {
  return parse_suite(R"(
name = "plugin-test"
description = "one straddling and one long case"
[[cells]]
heads = "8/2"
head_sizes = [64, 128]
block_sizes = 16
dtypes = "bf16"
seq_lens = [37, 300]
faults = ["clean", "V:nan@tail"]
)",
                     "plugin-test.toml");
}

const CellResult& find(const RunSummary& s, const std::string& kernel, int head_size, int seq_len, bool clean) {
  for (const auto& r : s.results) {
    const std::string want = "d" + std::to_string(head_size) + " ";
    if (r.kernel == kernel && r.case_id.find(want) != std::string::npos &&
        r.case_id.find("ctx" + std::to_string(seq_len) + " ") != std::string::npos && (r.fault == "clean") == clean)
      return r;
  }
  throw std::runtime_error("no result for " + kernel);
}

TEST(Plugin, KernelsGetEveryVerdictThroughTheAdapter) {
  Registry reg = builtins();
  const PluginInfo info = load_plugin(plant("ok"), reg);
  ASSERT_EQ(info.kernels.size(), 10u);
  // PACHECK_KERNEL_TF32 reaches Kernel::tf32_products (the judge then uses tf32_limit for f32 outputs).
  ASSERT_TRUE(reg.find("plug.tf32"));
  EXPECT_TRUE(reg.find("plug.tf32")->tf32_products());
  EXPECT_FALSE(reg.find("plug.error")->tf32_products());
  std::vector<KernelPtr> ks;
  for (const auto& n : info.kernels)  // the ABI v2 kernels have tests of their own below
    if (n != "plug.tf32" && n != "plug.v2_probe" && n != "plug.per_tensor_scales" && n != "plug.supports_fails")
      ks.push_back(reg.find(n));
  RunOptions opt;
  opt.threads = 2;
  const RunSummary s = run_suite(small_suite(), ks, "cpu", opt);

  const CellResult& err = find(s, "plug.error", 128, 37, true);
  EXPECT_EQ(err.verdict, Verdict::error);
  EXPECT_NE(err.detail.find("plug.error returned PACHECK_ERROR: planted: the device is on fire"), std::string::npos) << err.detail;
  EXPECT_EQ(find(s, "plug.skip_last", 128, 37, true).verdict, Verdict::unwritten);
  EXPECT_EQ(find(s, "plug.write_past_end", 128, 37, true).verdict, Verdict::oob_write);
  EXPECT_EQ(find(s, "plug.mutate_input", 128, 37, true).verdict, Verdict::input_mutated);
  const CellResult& st = find(s, "plug.unknown_status", 64, 37, false);
  EXPECT_EQ(st.verdict, Verdict::error);
  EXPECT_NE(st.detail.find("unknown status 42"), std::string::npos) << st.detail;

  // Declines: by the descriptor's list (head_sizes = {64}) and by the supports callback (length > 100).
  const CellResult& by_list = find(s, "plug.picky", 128, 37, true);
  EXPECT_EQ(by_list.verdict, Verdict::declined);
  EXPECT_EQ(by_list.detail, "head_size 128: the plugin lists 64");
  // supports() that cannot answer: `error`, never a quiet decline (helper-25's finding, issue 17), in
  // process and when asked in a child process for an isolated kernel.
  for (bool isolated : {false, true}) {
    RunOptions o = opt;
    if (isolated) o.isolate = [](const Kernel&) { return true; };
    const RunSummary sf = run_suite(small_suite(), {reg.find("plug.supports_fails")}, "cpu", o);
    const CellResult& long_cell = find(sf, "plug.supports_fails", 64, 300, true);
    EXPECT_EQ(long_cell.verdict, Verdict::error) << isolated;
    EXPECT_EQ(long_cell.detail, "supports() failed: planted: cannot query the device") << isolated;
    const CellResult& short_cell = find(sf, "plug.supports_fails", 64, 37, true);
    EXPECT_EQ(short_cell.verdict, Verdict::error) << isolated;
    EXPECT_NE(short_cell.detail.find("supports() failed: returned unknown status 9"), std::string::npos) << short_cell.detail;
    EXPECT_EQ(sf.declined, 0) << isolated;
    EXPECT_EQ(sf.exit_code(), 1) << isolated;
  }
  const CellResult& by_callback = find(s, "plug.picky", 64, 300, true);
  EXPECT_EQ(by_callback.verdict, Verdict::declined);
  EXPECT_EQ(by_callback.detail, "planted: max_seq_len 300 > 100");
  EXPECT_EQ(find(s, "plug.picky", 64, 37, true).verdict, Verdict::error);  // accepted, then its run fails
  EXPECT_EQ(s.exit_code(), 1);
}

TEST(Plugin, TheExampleKernelPassesTheTailPoisonMatrix) {
  Registry reg = builtins();
  load_plugin(PACHECK_EXAMPLE_PLUGIN, reg);
  Suite suite = load_suite("tail-poison");
  std::vector<SuiteCell> keep;  // the bf16 GQA-4 half keeps the test short; it has every fault and length
  for (const auto& c : suite.cells)
    if (c.cell.c.kv_dtype == DType::bf16 && c.cell.c.gqa_ratio() == 4) keep.push_back(c);
  suite.cells = keep;
  ASSERT_EQ(suite.cells.size(), 8u);
  RunOptions opt;
  opt.threads = 2;
  const RunSummary s = run_suite(suite, {reg.find("example.cpu_reference")}, "cpu", opt);
  for (const auto& r : s.results) EXPECT_EQ(r.verdict, Verdict::pass) << r.cell_id << ": " << r.detail;
  EXPECT_EQ(s.passed, 8);
  EXPECT_EQ(s.exit_code(), 0);
}

/// Cells of every scale form: bf16 (none), fp8 with one scale per cache (per-tensor) and with a range of
/// per-KV-head scales, each clean and with NaN in the tail, at a straddling and an aligned length.
Suite scale_form_suite() {
  return parse_suite(R"(
name = "plugin-scale-forms"
description = "one cell group per fp8 scale form"
[[cells]]
heads = "8/2"
head_sizes = 64
block_sizes = 16
dtypes = "bf16"
seq_lens = [37, 32]
faults = ["clean", "V:nan@tail"]
[[cells]]
heads = "8/2"
head_sizes = 64
block_sizes = 16
dtypes = ["q=bf16,kv=fp8_e4m3fn,o=bf16", "q=bf16,kv=fp8_e5m2,o=bf16"]
seq_lens = [37, 32]
faults = ["clean", "V:nan@tail"]
k_scale = 0.5
v_scale = 2.0
[[cells]]
heads = "8/2"
head_sizes = 64
block_sizes = 16
dtypes = "q=bf16,kv=fp8_e4m3fn,o=bf16"
seq_lens = [37]
faults = ["clean"]
k_scale_range = [0.3, 3.0]
v_scale = 2.0
[[cells]]
heads = "8/2"
head_sizes = 64
block_sizes = 16
dtypes = "q=bf16,kv=fp8_e4m3fn,o=bf16"
seq_lens = [37]
faults = ["clean"]
k_scale = 0.5
v_scale_range = [3.0, 0.3]
)",
                     "plugin-scale-forms.toml");
}

// ABI v2 (issue 17): plug.v2_probe checks in supports() and in run() every version-2 field against what
// the header promises (host seq_lens equal to the device's, max_seq_len their maximum, the scale form and
// values of each cache, plain-decode variant fields) and fails the call naming the field otherwise. Each
// cell must therefore reach run() and end `fail` (the probe writes zeros), never `declined` or `error`.
TEST(PluginAbiV2, EveryVersion2FieldReachesTheKernelAsDocumented) {
  Registry reg = builtins();
  load_plugin(plant("ok"), reg);
  RunOptions opt;
  opt.threads = 2;
  const RunSummary s = run_suite(scale_form_suite(), {reg.find("plug.v2_probe")}, "cpu", opt);
  ASSERT_EQ(s.results.size(), 14u);
  for (const auto& r : s.results)
    EXPECT_EQ(r.verdict, Verdict::fail) << r.cell_id << ": " << verdict_name(r.verdict) << ": " << r.detail;
}

// scale_forms: a kernel that takes one scale per cache declines per-KV-head cells in pacheck, with a reason
// naming k_scale or v_scale, and runs every per-tensor and non-fp8 cell (v1 had no way to say it, so such
// cells became `error`).
TEST(PluginAbiV2, ScaleFormsDeclinePerHeadCellsNamingTheScale) {
  Registry reg = builtins();
  load_plugin(plant("ok"), reg);
  RunOptions opt;
  opt.threads = 2;
  const RunSummary s = run_suite(scale_form_suite(), {reg.find("plug.per_tensor_scales")}, "cpu", opt);
  ASSERT_EQ(s.results.size(), 14u);
  int declined = 0;
  for (const auto& r : s.results) {
    const bool k_per_head = r.case_id.find("ks=0.3~3") != std::string::npos;
    const bool v_per_head = r.case_id.find("vs=3~0.3") != std::string::npos;
    if (k_per_head || v_per_head) {
      ++declined;
      EXPECT_EQ(r.verdict, Verdict::declined) << r.cell_id;
      EXPECT_EQ(r.detail, std::string(k_per_head ? "k_scale" : "v_scale") +
                              ": per-KV-head scales; the plugin's scale_forms list per-tensor")
          << r.cell_id;
    } else {
      EXPECT_EQ(r.verdict, Verdict::fail) << r.cell_id << ": " << r.detail;  // zeros, judged
    }
  }
  EXPECT_EQ(declined, 2);
}

// ABI version 3 added PACHECK_LAYOUT_AITER. A registration compiled as version 1 or 2 that lists it is
// refused naming `layouts` and the version (it cannot have meant it); declared as version 3 it loads and
// the kernel's layouts carry aiter. A kernel that does not list it never gets aiter cells (declined,
// naming the layout): older plugins cannot list it, so they never see it.
pacheck_status register_aiter_kernel(pacheck_registrar* r) {
  static const pacheck_layout layouts[] = {PACHECK_LAYOUT_NHD, PACHECK_LAYOUT_AITER};
  static const pacheck_dtype dtypes[] = {PACHECK_DTYPE_BF16};
  pacheck_kernel_desc d{};
  d.struct_size = sizeof d;
  d.name = "linked.aiter_reader";
  d.device = PACHECK_DEVICE_CPU;
  d.layouts = layouts;
  d.num_layouts = 2;
  d.q_dtypes = d.kv_dtypes = d.out_dtypes = dtypes;
  d.num_q_dtypes = d.num_kv_dtypes = d.num_out_dtypes = 1;
  d.run = [](void*, const pacheck_kernel_args*, char*, size_t) { return PACHECK_OK; };
  return r->add_kernel(r, &d);
}
pacheck_status register_nhd_kernel(pacheck_registrar* r) {
  static const pacheck_layout layouts[] = {PACHECK_LAYOUT_NHD};
  static const pacheck_dtype dtypes[] = {PACHECK_DTYPE_BF16};
  pacheck_kernel_desc d{};
  d.struct_size = sizeof d;
  d.name = "linked.nhd_reader";
  d.device = PACHECK_DEVICE_CPU;
  d.layouts = layouts;
  d.num_layouts = 1;
  d.q_dtypes = d.kv_dtypes = d.out_dtypes = dtypes;
  d.num_q_dtypes = d.num_kv_dtypes = d.num_out_dtypes = 1;
  d.run = [](void*, const pacheck_kernel_args*, char*, size_t) { return PACHECK_OK; };
  return r->add_kernel(r, &d);
}

TEST(PluginAbiV3, TheAiterLayoutIsAVersion3Value) {
  for (std::uint32_t v : {1u, 2u}) {
    Registry reg = builtins();
    try {
      add_linked_kernels("linked-aiter", register_aiter_kernel, v, reg);
      ADD_FAILURE() << "a version-" << v << " registration listed PACHECK_LAYOUT_AITER and loaded";
    } catch (const PluginError& e) {
      EXPECT_NE(e.problem.find("layouts: 3 (PACHECK_LAYOUT_AITER) is a version-3 value"), std::string::npos) << e.what();
      EXPECT_NE(e.problem.find("ABI version " + std::to_string(v)), std::string::npos) << e.what();
    }
    EXPECT_FALSE(reg.find("linked.aiter_reader"));
  }
  Registry reg = builtins();
  add_linked_kernels("linked-aiter", register_aiter_kernel, 3, reg);
  ASSERT_TRUE(reg.find("linked.aiter_reader"));
  EXPECT_EQ(reg.find("linked.aiter_reader")->layouts(), (std::vector<Layout>{Layout::nhd, Layout::aiter}));
  add_linked_kernels("linked-nhd", register_nhd_kernel, 2, reg);
  Case c;
  c.q_dtype = c.kv_dtype = c.out_dtype = DType::bf16;
  c.block_size = 32;
  c.layout = Layout::aiter;
  EXPECT_TRUE(reg.find("linked.aiter_reader")->supports(c).ok);
  const Support no = reg.find("linked.nhd_reader")->supports(c);
  EXPECT_FALSE(no.ok);
  EXPECT_NE(no.reason.find("aiter"), std::string::npos) << no.reason;
}

// PACHECK_SCALE_FORM_PER_SLOT is a version-3 form too: a version-2 kernel whose scale_forms is 0 ("every
// form") takes per-tensor and per-KV-head scales only and declines a per-slot cell naming k_scale (it has no
// fields for the tables); declared as version 3, 0 means every form, PER_SLOT included.
pacheck_status register_fp8_kernel(pacheck_registrar* r) {
  static const pacheck_layout layouts[] = {PACHECK_LAYOUT_VLLM};
  static const pacheck_dtype qo[] = {PACHECK_DTYPE_BF16};
  static const pacheck_dtype kv[] = {PACHECK_DTYPE_FP8_E4M3FN};
  pacheck_kernel_desc d{};
  d.struct_size = sizeof d;
  d.name = "linked.fp8_reader";
  d.device = PACHECK_DEVICE_CPU;
  d.layouts = layouts;
  d.num_layouts = 1;
  d.q_dtypes = d.out_dtypes = qo;
  d.kv_dtypes = kv;
  d.num_q_dtypes = d.num_kv_dtypes = d.num_out_dtypes = 1;
  d.run = [](void*, const pacheck_kernel_args*, char*, size_t) { return PACHECK_OK; };
  return r->add_kernel(r, &d);
}

TEST(PluginAbiV3, PerSlotScalesReachOnlyVersion3Kernels) {
  Case c;
  c.q_dtype = c.out_dtype = DType::bf16;
  c.kv_dtype = DType::fp8_e4m3fn;
  c.layout = Layout::vllm;
  c.k_scale.slot = std::pair{0.5f, 2.0f};
  c.v_scale.slot = std::pair{0.25f, 4.0f};
  {
    Registry reg = builtins();
    add_linked_kernels("linked-fp8", register_fp8_kernel, 2, reg);
    const Support no = reg.find("linked.fp8_reader")->supports(c);
    EXPECT_FALSE(no.ok);
    EXPECT_NE(no.reason.find("k_scale: per-slot scales"), std::string::npos) << no.reason;
    Case per_tensor = c;
    per_tensor.k_scale = per_tensor.v_scale = KvScale{};
    EXPECT_TRUE(reg.find("linked.fp8_reader")->supports(per_tensor).ok);
  }
  Registry reg = builtins();
  add_linked_kernels("linked-fp8", register_fp8_kernel, 3, reg);
  EXPECT_TRUE(reg.find("linked.fp8_reader")->supports(c).ok) << reg.find("linked.fp8_reader")->supports(c).reason;
}

// ABI version 4: MLA decode through the plugin ABI. A linked MLA kernel written against the header alone (bf16
// latent cache in the NHD layout of one KV head, the logits over the whole row, V the first v_head_dim values),
// reading the latent shape from the version-4 fields; its planted twin reads V over the whole final block with
// the tail's weights 0 (0 x NaN). Both decline a multi-head case, and an MLA case whose fields do not arrive.
struct LinkedMla {
  bool v_tail = false;  ///< the planted fault
};

float linked_bf16(const void* base, std::int64_t i) {
  std::uint16_t b;
  std::memcpy(&b, static_cast<const char*>(base) + 2 * i, 2);
  return bf16_bits_to_f32(b);
}

/// One query row's output of a linked MLA kernel: `key_end` keys are visible; the V loop runs to `v_end`.
void linked_mla_row(const pacheck_kernel_args& a, int s, int row, int key_end, int v_end) {
  const int W = a.head_size, V = a.v_head_dim, B = a.block_size;
  auto elem = [&](int t, int d) {
    const std::int64_t b = a.block_tables[s * a.block_tables_stride + t / B];
    return linked_bf16(a.key_cache, b * a.k_strides[0] + (t % B) * a.k_strides[1] + d * a.k_strides[3]);
  };
  for (int h = 0; h < a.num_heads; ++h) {
    std::vector<double> p(static_cast<std::size_t>(v_end), 0.0);
    double m = -INFINITY, sum = 0;
    for (int t = 0; t < key_end; ++t) {
      double dot = 0;
      for (int d = 0; d < W; ++d) dot += double(linked_bf16(a.query, row * a.q_stride_seq + h * a.q_stride_head + d)) * elem(t, d);
      m = std::max(m, p[static_cast<std::size_t>(t)] = dot * a.scale);
    }
    for (int t = 0; t < key_end; ++t) sum += (p[static_cast<std::size_t>(t)] = std::exp(p[static_cast<std::size_t>(t)] - m));
    for (int i = 0; i < V; ++i) {
      double o = 0;
      for (int t = 0; t < v_end; ++t) o += p[static_cast<std::size_t>(t)] / sum * elem(t, i);
      const std::uint16_t bits = f32_to_bf16_bits(static_cast<float>(o));
      std::memcpy(static_cast<char*>(a.out) + 2 * (row * a.out_stride_seq + h * a.out_stride_head + i), &bits, 2);
    }
  }
}

pacheck_status linked_mla_run(void* user, const pacheck_kernel_args* a, char* error, size_t size) {
  if (a->kv_lora_rank != 512 || a->qk_rope_head_dim != 64 || a->v_head_dim != 512 || a->head_size != 576) {
    std::snprintf(error, size, "MLA fields did not arrive: kv_lora_rank %d, qk_rope_head_dim %d, v_head_dim %d",
                  a->kv_lora_rank, a->qk_rope_head_dim, a->v_head_dim);
    return PACHECK_ERROR;
  }
  const bool v_tail = static_cast<const LinkedMla*>(user)->v_tail;
  for (int s = 0; s < a->num_seqs; ++s) {
    const int first = a->query_start_loc_host ? a->query_start_loc_host[s] : s;
    const int rows = a->query_start_loc_host ? a->query_start_loc_host[s + 1] - first : 1, len = a->seq_lens_host[s];
    for (int i = 0; i < rows; ++i) {
      const int keys = len - rows + i + 1;
      linked_mla_row(*a, s, first + i, keys, v_tail ? (keys + a->block_size - 1) / a->block_size * a->block_size : keys);
    }
  }
  return PACHECK_OK;
}

pacheck_status linked_mla_supports(void*, const pacheck_case_info* info, char* reason, size_t size) {
  if (info->kv_lora_rank == 512 && info->qk_rope_head_dim == 64 && info->v_head_dim == 512) return PACHECK_OK;
  std::snprintf(reason, size, "kv_lora_rank %d, qk_rope_head_dim %d, v_head_dim %d: only 512+64", info->kv_lora_rank,
                info->qk_rope_head_dim, info->v_head_dim);
  return PACHECK_DECLINED;
}

pacheck_status register_mla_kernels(pacheck_registrar* r) {
  static const pacheck_layout layouts[] = {PACHECK_LAYOUT_NHD};
  static const pacheck_dtype bf16[] = {PACHECK_DTYPE_BF16};
  static LinkedMla honest{false}, planted{true};
  pacheck_status st = PACHECK_OK;
  for (auto [name, user] : {std::pair{"linked.mla", &honest}, std::pair{"linked.mla_v_tail", &planted}}) {
    pacheck_kernel_desc d{};
    d.struct_size = sizeof d;
    d.name = name;
    d.device = PACHECK_DEVICE_CPU;
    d.flags = PACHECK_KERNEL_MLA;
    d.layouts = layouts;
    d.num_layouts = 1;
    d.q_dtypes = d.kv_dtypes = d.out_dtypes = bf16;
    d.num_q_dtypes = d.num_kv_dtypes = d.num_out_dtypes = 1;
    d.variants = PACHECK_VARIANT_MULTI_QUERY;
    d.supports = linked_mla_supports;
    d.run = linked_mla_run;
    d.user_data = user;
    if (r->add_kernel(r, &d) != PACHECK_OK) st = PACHECK_ERROR;
  }
  return st;
}

Suite mla_plugin_suite() {
  const std::string group = "[[cells]]\nmla = \"512+64\"\nheads = \"16/1\"\nhead_sizes = 576\nblock_sizes = 16\n"
                            "layouts = \"nhd\"\ndtypes = \"bf16\"\nscales = [0.1352338]\n";
  return parse_suite("name = \"mla-plugin\"\ndescription = \"MLA cells for plugin kernels: DeepSeek-V3 at 16 heads, "
                     "a packed batch, an aligned length, 2 query tokens\"\n" + group +
                         "seq_lens = [[100, 5], [64]]\n"
                         "faults = [\"clean\", \"V:nan@tail\", \"K:nan@tail\", \"K+V:+inf@tail\", \"V:nan@others\"]\n" +
                         group + "seq_lens = [[100, 5]]\nvariants = [\"qlen=2\"]\nfaults = [\"clean\", \"V:nan@tail\"]\n",
                     "mla-plugin.toml");
}

TEST(PluginAbiV4, AnMlaKernelGetsTheLatentShapeAndFailsOnlyWhereItsPlantedFaultShows) {
  Registry reg = builtins();
  add_linked_kernels("linked-mla", register_mla_kernels, 4, reg);
  const Suite suite = mla_plugin_suite();
  std::set<std::string> v_tail_cells;
  for (const SuiteCell& sc : suite.cells)
    if (mla_poisons_v_tail(MlaCell{mla_case_of(sc.cell.c), sc.cell.fault})) v_tail_cells.insert(sc.cell.id());
  ASSERT_FALSE(v_tail_cells.empty());
  RunOptions opt;
  opt.threads = 2;
  const RunSummary honest = run_suite(suite, {reg.find("linked.mla")}, "cpu", opt);
  ASSERT_EQ(honest.results.size(), suite.cells.size());
  for (const auto& r : honest.results) EXPECT_EQ(r.verdict, Verdict::pass) << r.cell_id << ": " << r.detail;
  const RunSummary planted = run_suite(suite, {reg.find("linked.mla_v_tail")}, "cpu", opt);
  std::set<std::string> failed;
  for (const auto& r : planted.results)
    if (is_failure(r.verdict)) failed.insert(r.cell_id);
    else EXPECT_EQ(r.verdict, Verdict::pass) << r.cell_id << ": " << r.detail;
  EXPECT_EQ(failed, v_tail_cells);
  // An MLA kernel declines a multi-head cell, naming kv_lora_rank.
  const Support no = cell_support(*reg.find("linked.mla"), small_suite().cells.front().cell.c);
  EXPECT_FALSE(no.ok);
  EXPECT_NE(no.reason.find("kv_lora_rank 0"), std::string::npos) << no.reason;
}

// Plugins that do not set PACHECK_KERNEL_MLA (every plugin of versions 1 to 3) never see an MLA cell: each is
// declined naming kv_lora_rank, and run() is never called on one.
TEST(PluginAbiV4, PluginsWithoutTheMlaFlagNeverSeeAnMlaCell) {
  Registry reg = builtins();
  EXPECT_EQ(load_plugin(plant("v1_example"), reg).abi_version, 1u);
  RunOptions opt;
  opt.threads = 2;
  const Suite suite = mla_plugin_suite();
  const RunSummary s = run_suite(suite, {reg.find("example.cpu_reference")}, "cpu", opt);
  ASSERT_EQ(s.results.size(), suite.cells.size());
  for (const auto& r : s.results) {
    EXPECT_EQ(r.verdict, Verdict::declined) << r.cell_id;
    EXPECT_NE(r.detail.find("kv_lora_rank 512"), std::string::npos) << r.detail;
  }
  Registry current = builtins();
  EXPECT_EQ(load_plugin(PACHECK_EXAMPLE_PLUGIN, current).abi_version, static_cast<std::uint32_t>(PACHECK_ABI_VERSION));
  const Support no = cell_support(*current.find("example.cpu_reference"), suite.cells.front().cell.c);
  EXPECT_FALSE(no.ok);
  EXPECT_NE(no.reason.find("kv_lora_rank 512"), std::string::npos) << no.reason;
}

// PACHECK_KERNEL_MLA is a version-4 value: a library declaring version 3 that sets it is refused, naming the flag.
TEST(PluginAbiV4, TheMlaFlagIsAVersion4Value) {
  Registry reg = builtins();
  const std::size_t before = reg.all().size();
  try {
    add_linked_kernels("linked-mla", register_mla_kernels, 3, reg);
    ADD_FAILURE() << "a version-3 library setting PACHECK_KERNEL_MLA was accepted";
  } catch (const PluginError& e) {
    EXPECT_NE(e.problem.find("flags: 0x8 (PACHECK_KERNEL_MLA) is a version-4 value and the library declares ABI "
                             "version 3"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(reg.all().size(), before);
}

// A plugin compiled against the frozen version-1 header (tests/plugins/abi_v1/) still loads, is treated
// as version 1 (nothing past its v1 descriptor is read) and passes the tail-poison cells.
TEST(PluginAbiV2, AVersion1PluginStillLoadsAndPasses) {
  Registry reg = builtins();
  const PluginInfo info = load_plugin(plant("v1_example"), reg);
  EXPECT_EQ(info.abi_version, 1u);
  ASSERT_EQ(info.kernels, std::vector<std::string>{"example.cpu_reference"});
  RunOptions opt;
  opt.threads = 2;
  const RunSummary s = run_suite(small_suite(), {reg.find("example.cpu_reference")}, "cpu", opt);
  ASSERT_EQ(s.results.size(), 8u);
  for (const auto& r : s.results) EXPECT_EQ(r.verdict, Verdict::pass) << r.cell_id << ": " << r.detail;
}

// A C++ plugin built with -Wall -Wextra -Werror (tests/plugins/CMakeLists.txt; that it built at all is half
// the test) loads and passes its f32 NHD cells, reading the v2 host seq_lens.
TEST(PluginAbiV2, ACxxPluginBuiltWithoutWarningsLoadsAndPasses) {
  Registry reg = builtins();
  const PluginInfo info = load_plugin(plant("cxx"), reg);
  EXPECT_EQ(info.abi_version, static_cast<std::uint32_t>(PACHECK_ABI_VERSION));
  Suite suite = parse_suite(R"(
name = "plugin-cxx"
description = "f32 NHD"
[[cells]]
heads = "8/2"
head_sizes = 64
block_sizes = 16
dtypes = "f32"
layouts = "nhd"
seq_lens = [37, 32, 300]
faults = ["clean", "K+V:nan@tail", "K+V:nan@unused"]
)",
                            "plugin-cxx.toml");
  RunOptions opt;
  opt.threads = 2;
  const RunSummary s = run_suite(suite, {reg.find("cxx.reference")}, "cpu", opt);
  ASSERT_FALSE(s.results.empty());
  for (const auto& r : s.results) EXPECT_EQ(r.verdict, Verdict::pass) << r.cell_id << ": " << r.detail;
  // The strict C build of the example plugin loads too.
  Registry other = builtins();
  EXPECT_NO_THROW(load_plugin(plant("strict_c"), other));
}

struct Cli {
  int rc;
  std::string out, err;
};

Cli pacheck_cli(const std::string& args) {
  const fs::path dir = fs::temp_directory_path();
  // Per process: ctest runs these tests in parallel processes, which must not share the capture files.
  const std::string stem = "pacheck_test_plugin." + std::to_string(::getpid());
  const std::string out = (dir / (stem + ".out")).string(), err = (dir / (stem + ".err")).string();
  const int st = std::system((std::string(PACHECK_BINARY) + " " + args + " >" + out + " 2>" + err).c_str());
  auto slurp = [](const std::string& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, slurp(out), slurp(err)};
}

TEST(PluginCli, EveryLoadErrorExitsTwoWithNothingRun) {
  for (const char* p : {"wrong_abi", "no_register", "no_version", "dup_builtin", "null_run", "register_fails"}) {
    const Cli r = pacheck_cli("run --suite tail-poison --plugin " + plant(p));
    EXPECT_EQ(r.rc, 2) << p;
    EXPECT_NE(r.err.find("pacheck: error: plugin '" + plant(p) + "': "), std::string::npos) << p << ": " << r.err;
    EXPECT_EQ(r.out, "") << p << ": a refused plugin must stop the run before anything is printed or run";
  }
  const Cli missing = pacheck_cli("run --plugin /nonexistent/lib.so");
  EXPECT_EQ(missing.rc, 2);
  EXPECT_NE(missing.err.find("plugin '/nonexistent/lib.so': no such file"), std::string::npos) << missing.err;
}

TEST(PluginCli, RunWithAPluginTestsOnlyItsKernels) {
  const Cli r = pacheck_cli(std::string("run --suite tail-poison --filter 'h32/8 d128 bs16 bf16 ctx4090 .* V:nan@tail' ") +
                            "--plugin " + PACHECK_EXAMPLE_PLUGIN);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("kernels: example.cpu_reference\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 passed, 0 failed"), std::string::npos) << r.out;
}

// pacheck fuzz --plugin PATH loads the library before it resolves --kernel, so a plugin kernel can be fuzzed;
// an unknown kernel's message lists the plugin's kernels among the known ones.
TEST(PluginCli, FuzzLoadsThePluginBeforeResolvingTheKernel) {
  const std::string plugin = std::string("--plugin ") + PACHECK_EXAMPLE_PLUGIN;
  const Cli r = pacheck_cli("fuzz " + plugin + " --kernel example.cpu_reference --property agreement --cases 20 --seed 7");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("pacheck fuzz: example.cpu_reference on cpu, seed 7, 20 cases per property"), std::string::npos)
      << r.out << r.err;
  EXPECT_NE(r.out.find("1 properties held, 0 not exercised, 0 failed"), std::string::npos) << r.out;
  const Cli unknown = pacheck_cli("fuzz " + plugin + " --kernel example.nope --cases 1");
  EXPECT_EQ(unknown.rc, 2) << unknown.out << unknown.err;
  EXPECT_NE(unknown.err.find("--kernel: no kernel named 'example.nope'"), std::string::npos) << unknown.err;
  EXPECT_NE(unknown.err.find("example.cpu_reference"), std::string::npos) << unknown.err;
  const Cli refused = pacheck_cli("fuzz --plugin " + plant("wrong_abi") + " --kernel example.cpu_reference --cases 1");
  EXPECT_EQ(refused.rc, 2) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("plugin '" + plant("wrong_abi") + "': "), std::string::npos) << refused.err;
}

/// The filter of the one tail-poison cell the CLI tests below run (every layout: each kernel gets its own).
const std::string kOneCell = "--suite tail-poison --filter 'h32/8 d128 bs16 bf16 ctx4090 .* V:nan@tail'";

// Issue 17: a built-in kernel in-process and a plugin kernel of the same device isolated (the default) in
// one run. On the CPU this always worked; the run must keep giving both kernels' results now that the
// isolated children are forked before the in-process lanes.
TEST(PluginCli, ABuiltInAndAPluginCpuKernelRunTogetherWithDefaultIsolation) {
  const Cli r = pacheck_cli("run " + kOneCell + " --kernel cpu.reference --kernel example.cpu_reference --plugin " +
                            PACHECK_EXAMPLE_PLUGIN + " --format tap");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("ok 1 - cpu.reference h32/8 d128 bs16 bf16 ctx4090 vllm seed7 V:nan@tail\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ok 2 - example.cpu_reference h32/8 d128 bs16 bf16 ctx4090 nhd seed7 V:nan@tail\n"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("2 passed, 0 failed"), std::string::npos) << r.out;
}

// The GPU form of the same run: gpu.paged_v1 opens the device in pacheck's process, the example CUDA plugin
// runs in children. Before issue 17's fix every plugin cell was `error: cannot open the device: cuda:
// select device 0: cudaErrorInitializationError` (the children were forked after the parent opened CUDA).
TEST(PluginCli, ABuiltInAndAPluginGpuKernelRunTogetherWithDefaultIsolation) {
#ifndef PACHECK_EXAMPLE_CUDA_PLUGIN
  GTEST_SKIP() << "this build has no CUDA compiler, so no example CUDA plugin (examples/plugin/example_cuda_plugin.cu)";
#else
  // Asked as pacheck asks, in a child: this test process must not open the device either.
  const Cli devices = pacheck_cli("list devices");
  if (devices.out.find("cuda  built      0 device(s)") != std::string::npos || devices.out.find("cuda  built") == std::string::npos)
    GTEST_SKIP() << "needs a CUDA device; pacheck list devices says: " << devices.out;
  const Cli r = pacheck_cli("run " + kOneCell + " --device cuda --kernel gpu.paged_v1 --kernel example.cuda_reference --plugin " +
                            PACHECK_EXAMPLE_CUDA_PLUGIN + " --format tap");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("cudaErrorInitializationError"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ok 1 - gpu.paged_v1 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ok 2 - example.cuda_reference "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 passed, 0 failed"), std::string::npos) << r.out;
#endif
}

// `list kernels --plugin LIB` lists the library's kernels beside the built-in ones, marked with the library.
TEST(PluginCli, ListKernelsShowsThePluginsKernels) {
  const Cli r = pacheck_cli(std::string("list kernels --plugin ") + PACHECK_EXAMPLE_PLUGIN);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("cpu.reference "), std::string::npos) << r.out;
  const auto at = r.out.find("example.cpu_reference ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
  EXPECT_NE(line.find(std::string("[plugin ") + PACHECK_EXAMPLE_PLUGIN + "]"), std::string::npos) << line;
  const Cli refused = pacheck_cli(std::string("list kernels --plugin ") + plant("wrong_abi"));
  EXPECT_EQ(refused.rc, 2) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("plugin '" + plant("wrong_abi") + "': "), std::string::npos) << refused.err;
}

// The repro line printed for a plugin cell carries --plugin LIB, and pasted into a shell it runs the cell.
TEST(PluginCli, APluginCellsReproLineLoadsItsLibraryAndRuns) {
  Registry reg;
  load_plugin(PACHECK_EXAMPLE_PLUGIN, reg);  // recorded in loaded_plugins(), where repro_command looks
  CellResult r;
  r.kernel = "example.cpu_reference";
  r.cell_id = "h32/8 d128 bs16 bf16 ctx4090 nhd seed7 V:nan@tail";
  const std::string line = repro_command(r, "");
  EXPECT_EQ(line, "pacheck repro '" + r.cell_id + "' --kernel example.cpu_reference --plugin " + PACHECK_EXAMPLE_PLUGIN);
  CellResult builtin = r;
  builtin.kernel = "cpu.reference";
  EXPECT_EQ(repro_command(builtin, "").find("--plugin"), std::string::npos) << repro_command(builtin, "");
  const Cli pasted = pacheck_cli(line.substr(std::string("pacheck ").size()));
  EXPECT_EQ(pasted.rc, 0) << pasted.out << pasted.err;
  EXPECT_NE(pasted.out.find("kernel    example.cpu_reference on "), std::string::npos) << pasted.out;
  EXPECT_NE(pasted.out.find("verdict   pass"), std::string::npos) << pasted.out;
}

// With no --kernel, the kernels are the plugin's: a GPU one on the CPU device is refused naming --plugin and
// the library, never the --kernel the user did not pass.
TEST(PluginCli, AGpuPluginKernelOnTheCpuNamesThePluginNotKernel) {
#ifndef PACHECK_EXAMPLE_CUDA_PLUGIN
  GTEST_SKIP() << "this build has no CUDA compiler, so no example CUDA plugin (examples/plugin/example_cuda_plugin.cu)";
#else
  for (const char* command : {"run", "bench"}) {
    const Cli r = pacheck_cli(std::string(command) + " --device cpu --plugin " + PACHECK_EXAMPLE_CUDA_PLUGIN);
    EXPECT_EQ(r.rc, 2) << command << ": " << r.out << r.err;
    EXPECT_EQ(r.err.find("--kernel"), std::string::npos) << command << ": " << r.err;
    EXPECT_NE(r.err.find(std::string("--plugin ") + PACHECK_EXAMPLE_CUDA_PLUGIN +
                         ": its kernel example.cuda_reference is a GPU kernel but --device is cpu"),
              std::string::npos)
        << command << ": " << r.err;
  }
  // A --kernel the user did give is named, as before.
  const Cli named = pacheck_cli(std::string("run --device cpu --kernel example.cuda_reference --plugin ") +
                                PACHECK_EXAMPLE_CUDA_PLUGIN);
  EXPECT_EQ(named.rc, 2) << named.out << named.err;
  EXPECT_NE(named.err.find("--kernel: example.cuda_reference is a GPU kernel but --device is cpu"), std::string::npos)
      << named.err;
#endif
}

}  // namespace
}  // namespace pacheck
