// pacheck export: a suite's kernel inputs as case files (interop/casefiles.hpp describes the format).
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/case_fields.hpp"
#include "core/files.hpp"
#include "core/version.hpp"
#include "faults/inject.hpp"
#include "interop/casefile_schema.hpp"
#include "interop/casefiles.hpp"

namespace pacheck {

namespace fs = std::filesystem;
using namespace casefile;

namespace {

/// A "kernel" that records what a kernel receives instead of computing: the export goes through the very
/// path (run_kernel_once, make_args) that feeds built-in and plugin kernels, so the exported bytes are the
/// bytes those kernels read, by construction.
class CaptureKernel final : public Kernel {
 public:
  std::string name() const override { return "export.capture"; }
  std::string description() const override { return "records its inputs for pacheck export"; }
  pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
  Support supports(const Case&) const override { return Support::yes(); }
  void run(const pacheck_kernel_args& a) const override {
    args = a;
    auto grab = [](const void* p, std::size_t bytes) {
      const auto* b = static_cast<const std::uint8_t*>(p);
      return p ? std::vector<std::uint8_t>(b, b + bytes) : std::vector<std::uint8_t>{};
    };
    // Per-slot scale tables as the kernel gets them: a `scales` fault's poison is in their unwritten entries.
    inputs.clear();
    for (const InputTensor& t : input_tensors()) inputs.push_back(grab(input_pointer(a, t), input_bytes(a, t)));
    const std::size_t out_bytes = query_rows(a) * static_cast<std::size_t>(a.num_heads) *
                                  static_cast<std::size_t>(out_width(a)) * dtype_size(static_cast<DType>(a.out_dtype));
    out = grab(a.out, out_bytes);  // the fill pattern, left untouched: that is what a runner should start from
    query_lens = query_lens_of(a);
    // The call's pointers are valid during the call only: keep a copy of query_start_loc for geometry_of, and
    // the per-slot tables' pointers only as "present" marks (the scale forms).
    if (a.query_start_loc_host) {
      query_start_loc.assign(a.query_start_loc_host, a.query_start_loc_host + a.num_seqs + 1);
      args.query_start_loc_host = query_start_loc.data();
    }
    args.query_start_loc = nullptr;
    if (a.k_scales_per_slot) args.k_scales_per_slot = reinterpret_cast<const float*>(input("k_scales_per_slot").data());
    if (a.v_scales_per_slot) args.v_scales_per_slot = reinterpret_cast<const float*>(input("v_scales_per_slot").data());
  }
  /// The bytes of input `name` (input_tensors()), empty when the call had none.
  const std::vector<std::uint8_t>& input(std::string_view name) const {
    for (std::size_t i = 0; i < input_tensors().size(); ++i)
      if (input_tensors()[i].name == name) return inputs[i];
    throw std::logic_error(fmt::format("export: no input tensor '{}'", name));
  }
  std::string sha() const {
    std::vector<Bytes> parts;
    for (const auto& b : inputs) parts.push_back({b.data(), b.size()});
    return hash_inputs(parts);
  }
  mutable pacheck_kernel_args args{};
  mutable std::vector<std::vector<std::uint8_t>> inputs;  ///< input_tensors() order
  mutable std::vector<std::uint8_t> out;
  mutable std::vector<std::int32_t> query_lens;       ///< [num_seqs], 1 each for plain decode
  mutable std::vector<std::int32_t> query_start_loc;  ///< [num_seqs + 1] with several query tokens, else empty
};

/// The safetensors file of one captured call of a format_version `version` export: the kernel inputs (an MLA
/// call's one latent cache as latent_cache), `out` (the fill pattern), the case fields' scalars that version
/// carries, query_lens and query_start_loc, and the metadata.
SafetensorsFile case_file_of(const Case& c, const FaultSpec& f, const CaptureKernel& cap, const std::string& sha,
                             int version) {
  const pacheck_kernel_args& a = cap.args;
  const std::int64_t S = a.num_seqs, H = a.num_heads, D = out_width(a);
  const auto T = static_cast<std::int64_t>(query_rows(a));  // query / out rows: num_query_tokens
  SafetensorsFile st;
  st.metadata = {{"format", kFormat},     {"pacheck", pacheck_version()}, {"case", c.id()},
                 {"fault", f.id()},       {"layout", std::string(layout_name(c.layout))},
                 {"inputs_sha256", sha},  {"kv_dtype", std::string(dtype_name(c.kv_dtype))},
                 {"k_scale_form", scale_form_name(c, c.k_scale)}, {"v_scale_form", scale_form_name(c, c.v_scale)}};
  const auto& inputs = input_tensors();
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].optional && file_name(a, inputs[i]))
      st.add(file_name(a, inputs[i]), inputs[i].dtype(a), file_shape(a, inputs[i]), cap.inputs[i].data());
  st.add("out", st_of(c.out_dtype), {T, H, D}, cap.out.data());
  // The case fields' scalars (scale, k_scale and v_scale, NaN with per-KV-head or per-slot scales: a kernel
  // must read the arrays; the variants' sliding_window and logits_soft_cap, 0 = none; format_version 5's MLA
  // shape, 0 for a multi-head call), typed as the ABI's.
  for (const CaseField& cf : case_field_table()) {
    if (cf.casefile_scalar.empty() || cf.casefile_version > version) continue;
    const AbiField* af = find_abi_field(AbiStruct::kernel_args, cf.casefile_scalar);
    st.add(std::string(cf.casefile_scalar), af->type == AbiType::f32 ? StDType::F32 : StDType::I32, {},
           reinterpret_cast<const unsigned char*>(&a) + af->offset);
  }
  // The optional inputs (per-head and per-slot fp8 scales, ALiBi slopes, sinks), present only when the call
  // has them, as a plugin kernel gets NULL for them otherwise; a `scales` fault's poison in the tables.
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].optional && !cap.inputs[i].empty())
      st.add(inputs[i].name, inputs[i].dtype(a), inputs[i].shape(a), cap.inputs[i].data());
  // Query tokens per sequence (format_version 3): always present, 1 each for plain decode, and their
  // prefix sums (the ABI's query_start_loc) so a runner need not compute them.
  std::vector<std::int32_t> qsl{0};
  for (std::int32_t q : cap.query_lens) qsl.push_back(qsl.back() + q);
  st.add("query_lens", StDType::I32, {S}, cap.query_lens.data());
  st.add("query_start_loc", StDType::I32, {S + 1}, qsl.data());
  return st;
}

/// Writes one captured call as a case file of a format_version `version` export and returns its manifest entry.
json write_case_file(const std::string& dir, const std::string& file, const Case& c, const FaultSpec& f,
                     const CaptureKernel& cap, const std::string& sha, int version) {
  const SafetensorsFile st = case_file_of(c, f, cap, sha, version);
  write_safetensors((fs::path(dir) / file).string(), st);
  const pacheck_kernel_args& a = cap.args;
  const auto T = static_cast<std::int64_t>(query_rows(a));
  json shapes = json::object();
  for (const auto& t : st.tensors) shapes[t.name] = t.shape;
  json entry = geometry_of(a);  // the shape fields as score reads them back; the scales as JSON numbers
  entry.update({{"file", file},
                {"inputs_sha256", sha},
                {"case", c.id()},
                {"fault", f.id()},
                {"kv_tensor_dtype", st_dtype_name(kv_st_of(c.kv_dtype))},
                {"num_query_tokens", T},
                {"shapes", shapes},
                {"output",
                 {{"file", file},
                  {"tensor", "out"},
                  {"dtype", st_dtype_name(st_of(c.out_dtype))},
                  {"shape", {T, a.num_heads, out_width(a)}}}}});
  // The case fields' scalars as JSON numbers (a NaN scale is null): a runner reading only the manifest sees them.
  // Those of a later format_version than the export's are left out (an older reader refuses them).
  for (const CaseField& cf : case_field_table()) {
    if (cf.casefile_scalar.empty()) continue;
    if (cf.casefile_version > version) {
      entry.erase(std::string(cf.casefile_scalar));
      continue;
    }
    const AbiField* af = find_abi_field(AbiStruct::kernel_args, cf.casefile_scalar);
    const unsigned char* at = reinterpret_cast<const unsigned char*>(&a) + af->offset;
    if (af->type == AbiType::f32) {
      float v;
      std::memcpy(&v, at, sizeof v);
      entry[std::string(cf.casefile_scalar)] = v;
    } else {
      std::int32_t v;
      std::memcpy(&v, at, sizeof v);
      entry[std::string(cf.casefile_scalar)] = v;
    }
  }
  return entry;
}

}  // namespace

std::vector<LeftOut> left_out_kinds(const ExportSummary& sum) {
  return {{"layout", sum.skipped_layout, "pinned to a layout other than the export's --kernel-layout, or not valid in it"},
          {"dtype", sum.skipped_dtype, "a query or output dtype safetensors has no tag for"},
          {"high_block_ids", sum.skipped_high_ids,
           "high block ids (hiblk=): their pools of 2^31 elements and more are not written to case files"},
          {"mla", sum.skipped_mla,
           fmt::format("MLA cells (mla=): a format_version {} export carries no latent cache; format_version {} added "
                       "it", sum.format_version, find_case_field("kv_lora_rank")->casefile_version)}};
}

namespace {

/// The suite's cells as `run` resolves them (layout, --seed, --filter), without those case files cannot
/// carry, which are counted in `sum` instead.
std::vector<Cell> exported_cells(const Suite& suite, const ExportOptions& opt, ExportSummary& sum) {
  std::vector<Cell> cells;
  for (const auto& sc : suite.cells) {
    Cell cell = sc.cell;
    if (sc.native_layout) cell.c.layout = opt.kernel_layout.value_or(Layout::vllm);
    if (opt.seed) cell.c.seed = *opt.seed;
    // --filter first, on the id the cell would have, so that only selected cells are counted as left out.
    if (opt.filter && !std::regex_search(cell.id(), *opt.filter)) continue;
    if (sc.native_layout) {
      // A native cell the kernel's layout cannot hold (aiter needs block_size % 16 == 0) is left out and
      // counted with the cells of other layouts, as `run` would decline it for a kernel of that layout.
      try {
        cell.c.validate();
      } catch (const CaseError&) {
        ++sum.skipped_layout;
        continue;
      }
    } else if (opt.kernel_layout && cell.c.layout != *opt.kernel_layout) {
      ++sum.skipped_layout;
      continue;
    }
    // A pool of high block ids is 4-16 GiB per cache, sparse in memory but not in a safetensors file: such
    // cells are left out and counted too (run them in-process or through a plugin).
    if (cell.c.high_block_ids != 0) {
      ++sum.skipped_high_ids;
      continue;
    }
    // MLA cells in an export older than format_version 5 (--format-version 4, for a runner that reads up to 4).
    if (cell.c.is_mla() && case_file_gate(cell.c, opt.format_version)) {
      ++sum.skipped_mla;
      continue;
    }
    if (!st_tag(cell.c.q_dtype) || !kv_tag(cell.c.kv_dtype) || !st_tag(cell.c.out_dtype)) {
      ++sum.skipped_dtype;
      continue;
    }
    cells.push_back(std::move(cell));
  }
  return cells;
}

/// The exported cells by case: each case is generated and paged once, its clean twin first among its faults.
struct CaseGroups {
  std::vector<std::string> order;                                             ///< case ids, export order
  std::map<std::string, std::pair<Case, std::vector<FaultSpec>>> by_case;     ///< case id -> case, faults
  std::set<std::string> clean_cells;  ///< case ids whose clean cell is itself exported (not a baseline only)
};
CaseGroups group_by_case(const std::vector<Cell>& cells) {
  CaseGroups g;
  for (const auto& cell : cells) {
    auto [it, fresh] = g.by_case.try_emplace(cell.c.id(), cell.c, std::vector<FaultSpec>{FaultSpec{}});
    if (fresh) g.order.push_back(it->first);
    auto& faults = it->second.second;
    bool have = false;
    for (const auto& f : faults) have = have || f.id() == cell.fault.id();
    if (!have) faults.push_back(cell.fault);
    if (cell.fault.clean()) g.clean_cells.insert(cell.c.id());
  }
  return g;
}

/// One cell per case, in export order: what --max-memory's preflight sizes.
std::vector<Cell> first_cells(const CaseGroups& g, const std::vector<Cell>& cells) {
  std::vector<Cell> firsts;
  for (const auto& id : g.order)
    for (const auto& cell : cells)
      if (cell.c.id() == id) {
        firsts.push_back(cell);
        break;
      }
  return firsts;
}

/// One call of a case, captured: its key, and its case file while it has a temporary name.
struct Captured {
  std::string key;   ///< call_key: geometry and input SHA-256
  std::string temp;  ///< its temporary file, empty when an earlier fault of the case made the same call
  json entry;        ///< manifest entry (file names set when numbered)
  bool clean = false;
};
using CapturedCases = std::vector<std::vector<Captured>>;  ///< per case (export order), per fault

/// Removes the temporary files of `captured` still in `dir`.
void remove_temps(const std::string& dir, const CapturedCases& captured) {
  std::error_code ec;
  for (const auto& per_case : captured)
    for (const auto& k : per_case)
      if (!k.temp.empty()) fs::remove(fs::path(dir) / k.temp, ec);
}

/// Case `ci` of `g`: generated once, every fault's call captured, each call that differs from the case's
/// earlier ones written to a temporary file in `dir`. Throws std::logic_error when a captured call is not
/// the one call_of predicts (score would refuse the export).
std::vector<Captured> capture_case(const CaseGroups& g, std::size_t ci, const std::string& dir, Backend& backend,
                                   int version) {
  const auto& [c, faults] = g.by_case.at(g.order[ci]);
  const CaseData data = prepare_inputs(c);  // no oracle: the export compares nothing
  const json expected = expected_geometry(c);
  std::vector<Captured> out;
  for (std::size_t fi = 0; fi < faults.size(); ++fi) {
    const FaultSpec& f = faults[fi];
    CaptureKernel cap;
    run_kernel_once(cap, backend, data, faulted_cache(data.c, data.cache, f).cache);
    const std::string sha = cap.sha();
    const json geometry = geometry_of(cap.args);
    if (const auto d = first_difference(geometry, expected))
      throw std::logic_error(fmt::format("export: cell '{}' gave the kernel {} {} but call_of predicts {}: "
                                         "score would refuse this export (interop/casefile_schema.cpp)",
                                         Cell{c, f}.id(), d->field, d->a, d->b));
    Captured k{call_key(geometry, sha), "", json(), f.clean()};
    if (std::none_of(out.begin(), out.end(), [&](const Captured& o) { return o.key == k.key; })) {
      k.temp = fmt::format(".export-{}-{}.safetensors.tmp", ci, fi);
      k.entry = write_case_file(dir, k.temp, c, f, cap, sha, version);
    }
    out.push_back(std::move(k));
  }
  return out;
}

/// Captures every case of `g` as files of format_version `version`, `threads` at a time; on an error removes the
/// temporary files and rethrows.
CapturedCases capture_cases(const CaseGroups& g, const std::string& dir, int threads, int version) {
  CapturedCases captured(g.order.size());
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex error_mu;
  std::exception_ptr error;
  auto worker = [&] {
    auto backend = make_cpu_backend();
    for (std::size_t ci; !failed && (ci = next++) < g.order.size();) {
      try {
        captured[ci] = capture_case(g, ci, dir, *backend, version);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  {
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
    worker();
    for (auto& t : pool) t.join();
  }
  if (error) {
    remove_temps(dir, captured);
    std::rethrow_exception(error);
  }
  return captured;
}

/// The files of an export, numbered in case order as a serial export would number them (a call met again in
/// a later case shares the earlier file), so the manifest and file names do not depend on the thread count.
struct NumberedFiles {
  json files = json::array();                   ///< manifest files[]
  std::map<std::string, std::string> of_cell;   ///< cell id -> its file
};
NumberedFiles number_files(const CaseGroups& g, CapturedCases& captured, const std::string& dir, ExportSummary& sum) {
  NumberedFiles out;
  std::map<std::string, std::string> file_of_call;  // call_key -> file
  for (std::size_t ci = 0; ci < g.order.size(); ++ci) {
    const auto& [c, faults] = g.by_case.at(g.order[ci]);
    for (std::size_t fi = 0; fi < faults.size(); ++fi) {
      Captured& k = captured[ci][fi];
      auto it = file_of_call.find(k.key);
      if (it == file_of_call.end()) {
        const std::string file = fmt::format("{:04}.safetensors", out.files.size());
        fs::rename(fs::path(dir) / k.temp, fs::path(dir) / file);
        k.temp.clear();
        k.entry["file"] = file;
        k.entry["output"]["file"] = file;
        out.files.push_back(std::move(k.entry));
        it = file_of_call.emplace(k.key, file).first;
        if (k.clean && !g.clean_cells.count(g.order[ci])) ++sum.baselines;
      } else if (!k.temp.empty()) {
        fs::remove(fs::path(dir) / k.temp);  // the same call as an earlier case's: its file serves
        k.temp.clear();
      }
      out.of_cell[Cell{c, faults[fi]}.id()] = it->second;
    }
  }
  return out;
}

/// manifest.json of an export (interop/casefiles.hpp describes it), written atomically into `dir`.
void write_manifest(const Suite& suite, const ExportOptions& opt, const std::vector<Cell>& cells,
                    const NumberedFiles& numbered, ExportSummary& sum, const std::string& dir) {
  json jcells = json::array();
  for (const auto& cell : cells) {
    const std::string base = Cell{cell.c, FaultSpec{}}.id();
    jcells.push_back({{"id", cell.id()},
                      {"case", cell.c.id()},
                      {"fault", cell.fault.id()},
                      {"straddle", cell.c.straddles()},
                      {"file", numbered.of_cell.at(cell.id())},
                      {"baseline", cell.fault.clean() ? json(nullptr) : json(numbered.of_cell.at(base))}});
  }
  // The selected cells case files could not carry: `score` prints them, so a user sees what the file route
  // left to `pacheck run`.
  json left_out = json::array();
  for (const auto& [kind, n, reason] : left_out_kinds(sum))
    if (n > 0) left_out.push_back({{"kind", kind}, {"cells", n}, {"reason", reason}});
  json manifest = {{"format", kFormat},
                   {"format_version", opt.format_version},
                   {"pacheck", pacheck_version()},
                   {"abi_version", PACHECK_ABI_VERSION},
                   {"suite", suite.name},
                   {"kernel_layout", opt.kernel_layout ? json(layout_name(*opt.kernel_layout)) : json(nullptr)},
                   {"left_out", left_out},
                   {"case_fields", json::parse(case_fields_json())["fields"]},
                   {"files", numbered.files},
                   {"cells", jcells}};
  sum.manifest = (fs::path(dir) / "manifest.json").string();
  try {
    // A temporary file renamed into place: a link planted at manifest.json is replaced, never written through.
    write_file_atomically(sum.manifest, manifest.dump(1) + "\n");
  } catch (const FileError& e) {
    throw CaseFilesError(fmt::format("--out: cannot write {}", e.what()));
  }
}

}  // namespace

ExportSummary export_cases(const Suite& suite, const std::string& dir, const ExportOptions& opt) {
  if (opt.format_version < kOldestExportFormatVersion || opt.format_version > kFormatVersion)
    throw CaseFilesError(fmt::format("--format-version: {} (this pacheck writes {} to {}; older versions lack "
                                     "tensors every export now holds)",
                                     opt.format_version, kOldestExportFormatVersion, kFormatVersion));
  ExportSummary sum;
  sum.format_version = opt.format_version;
  // Resolve cells as `run` would, then group them by case: each case is generated and paged once.
  const std::vector<Cell> cells = exported_cells(suite, opt, sum);
  const CaseGroups groups = group_by_case(cells);
  if (opt.preflight) opt.preflight(first_cells(groups, cells));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw CaseFilesError(fmt::format("{}: cannot create the directory: {}", dir, ec.message()));

  // In parallel over cases: generate each case once, capture every fault's call, and write each call that
  // differs from the case's earlier ones to a temporary file; then number the files in case order.
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = std::min<int>(static_cast<int>(std::max<std::size_t>(groups.order.size(), 1)),
                                    opt.threads > 0 ? opt.threads : hw);
  CapturedCases captured = capture_cases(groups, dir, threads, opt.format_version);
  NumberedFiles numbered;
  try {
    numbered = number_files(groups, captured, dir, sum);
  } catch (const fs::filesystem_error& e) {
    remove_temps(dir, captured);
    throw CaseFilesError(fmt::format("--out: cannot name a case file in {}: {}", dir, e.what()));
  }
  write_manifest(suite, opt, cells, numbered, sum, dir);
  sum.cells = static_cast<int>(cells.size());
  sum.files = static_cast<int>(numbered.files.size());
  return sum;
}

}  // namespace pacheck
