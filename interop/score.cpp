// pacheck score: the outputs a foreign runner wrote for an export, replayed through the ordinary runner
// (interop/casefiles.hpp describes the format and the checks).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "core/case_fields.hpp"
#include "core/files.hpp"
#include "faults/inject.hpp"
#include "interop/casefile_schema.hpp"
#include "core/digest.hpp"
#include "interop/casefiles.hpp"

namespace pacheck {

namespace fs = std::filesystem;
using namespace casefile;

std::string inputs_sha256(const pacheck_kernel_args& a) {
  std::vector<Bytes> parts;
  for (const InputTensor& t : input_tensors()) parts.push_back({input_pointer(a, t), input_bytes(a, t)});
  return hash_inputs(parts);
}

namespace {


/// One foreign output, or why there is none.
struct Output {
  std::vector<std::uint8_t> bytes;  ///< [num_query_tokens, num_heads, out_head_size] in the case's out dtype
  std::string error;                ///< non-empty: the cells using it get verdict `error` with this
  bool declined = false;            ///< the runner wrote a decline note for the file instead of an output
};

/// What the runner declined of one case: the cells of a case whose every file was declined are `declined`
/// with the first file's reason; a case declined only in part is a runner error (its files are one call
/// geometry, differing only in poisoned bytes, so a decline cannot depend on the file).
struct CaseDecline {
  int files = 0, declined = 0;
  std::string reason;  ///< "declined by the runner: REASON (PATH)" of the first declined file
};

/// The first line of a decline note, without trailing blanks and carriage return; "no reason given" when
/// empty.
std::string decline_reason(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
  return line.empty() ? std::string("no reason given") : line;
}

/// What a foreign runner wrote for an export: the outputs by call key, what it declined by case id, and the
/// case id of each call key. Shared by the replay kernels of one score (multi-head and MLA).
struct Replayed {
  std::map<std::string, Output> outputs;
  std::map<std::string, CaseDecline> declines;
  std::map<std::string, std::string> case_of_call;
};

/// Stands in for the foreign kernel: "runs" a call by copying the output the foreign runner computed for
/// exactly this call (matched by call_key: geometry and input SHA-256), so run_suite judges it like any
/// kernel's output. One kernel takes one kind of cell (Kernel::takes_mla): score replays an export's
/// multi-head cells and its MLA cells through one each.
class ReplayKernel final : public Kernel {
 public:
  ReplayKernel(std::string name, std::shared_ptr<const Replayed> replayed, bool mla, bool control)
      : name_(std::move(name)), r_(std::move(replayed)), mla_(mla), control_(control) {}
  std::string name() const override { return name_; }
  std::string description() const override {
    return mla_ ? "MLA outputs of a foreign runner, replayed from case files"
                : "outputs of a foreign runner, replayed from case files";
  }
  pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
  bool takes_mla() const override { return mla_; }
  /// Every attention variant of the case field table (case files carry them all): the runner declines what
  /// its kernel cannot take.
  unsigned variants() const override {
    unsigned v = 0;
    for (const CaseField& f : case_field_table()) v |= f.variant_bit;
    return v;
  }
  Support supports(const Case& c) const override {
    const auto it = r_->declines.find(c.id());
    if (it != r_->declines.end() && it->second.declined == it->second.files) return Support::no(it->second.reason);
    return Support::yes();
  }
  std::optional<std::function<bool(const Cell&)>> expected_failures() const override {
    if (!control_) return std::nullopt;
    return std::function<bool(const Cell&)>(poisons_v_tail);
  }
  void run(const pacheck_kernel_args& a) const override {
    auto it = r_->outputs.find(call_key(geometry_of(a), inputs_sha256(a)));
    if (it == r_->outputs.end())
      throw KernelError("no exported case file holds the inputs pacheck regenerated for this cell (case files from "
                        "another pacheck version or edited?)");
    const Output& o = it->second;
    if (!o.error.empty()) throw KernelError(o.error);
    if (o.declined) {
      // supports() lets a case through only when the runner declined part of its files.
      const auto d = r_->declines.find(case_of(a));
      const bool known = d != r_->declines.end();
      throw KernelError(fmt::format("{}, but the runner wrote outputs for {} other case file(s) of the same case: the "
                                    "files of a case are one call (shapes, dtypes, scales), so a runner declines all "
                                    "of them or none",
                                    known ? d->second.reason : "declined by the runner",
                                    known ? d->second.files - d->second.declined : 0));
    }
    // A row of out: head_size values, or an MLA call's v_head_dim.
    const std::size_t row = static_cast<std::size_t>(out_width(a)) * dtype_size(static_cast<DType>(a.out_dtype));
    const std::size_t esz = dtype_size(static_cast<DType>(a.out_dtype));
    // Every output row: num_query_tokens of them with several query tokens per sequence.
    const auto rows = static_cast<std::int64_t>(query_rows(a));
    for (std::int64_t s = 0; s < rows; ++s)
      for (int h = 0; h < a.num_heads; ++h)
        std::memcpy(static_cast<std::uint8_t*>(a.out) + (s * a.out_stride_seq + h * a.out_stride_head) * esz,
                    o.bytes.data() + (static_cast<std::size_t>(s) * a.num_heads + h) * row, row);
  }

 private:
  std::string case_of(const pacheck_kernel_args& a) const {
    const auto it = r_->case_of_call.find(call_key(geometry_of(a), inputs_sha256(a)));
    return it == r_->case_of_call.end() ? std::string() : it->second;
  }
  std::string name_;
  std::shared_ptr<const Replayed> r_;
  bool mla_, control_;
};

/// Checks the per-slot scale table `name` (k_scales_per_slot or v_scales_per_slot) of case file `in` against
/// case `c` (whose call is `call`) before its bytes are hashed: present exactly when the case has per-slot
/// scales for that cache (an fp8 case with ks=/vs=slotLO~HI), F32 [num_blocks, num_kv_heads, block_size]
/// (an export older than format_version 4 has none: check_no_later_tensors). Its values are not checked here:
/// the unwritten slots' entries hold whatever poison the cell's fault put there, and inputs_sha256 holds
/// every entry to the export. Throws CaseFilesError (missing, unexpected) or SafetensorsError (dtype,
/// shape) naming the file and the tensor.
void check_slot_table(const SafetensorsFile& in, const char* name, const Case& c, const pacheck_kernel_args& call) {
  const bool k = name[0] == 'k';
  const bool want = is_fp8(c.kv_dtype) && (k ? c.k_scale : c.v_scale).per_slot();
  const StTensor* t = in.find(name);
  if (!t && !want) return;
  if (!t)
    throw CaseFilesError(fmt::format("{}: tensor '{}' missing: its case '{}' has per-slot {} scales ({}) and its "
                                     "kernel reads a [num_blocks, num_kv_heads, block_size] F32 table",
                                     in.path, name, c.id(), k ? "K" : "V", (k ? c.k_scale : c.v_scale).text()));
  if (!want)
    throw CaseFilesError(fmt::format("{}: tensor '{}': its case '{}' has no per-slot {} scales", in.path, name, c.id(),
                                     k ? "K" : "V"));
  in.expect(name, StDType::F32, {call.num_blocks, call.num_kv_heads, call.block_size});
}

/// The query tokens of each sequence of case file `in` (its "where" in the manifest: `where`, its entry:
/// `entry`), checked: format_version 3 files hold query_lens [num_seqs] I32, each 1 to Case::kMaxQueryLen
/// and at most its sequence's seq_lens entry, summing to the rows of `query`; query_start_loc [num_seqs + 1]
/// I32, their prefix sums from 0; and the entry's "query_lens" and "num_query_tokens", which must say the
/// same. Older files have neither tensor (one query token per sequence). Throws CaseFilesError naming the
/// file or entry and the tensor or field, SafetensorsError for a tensor that is missing or of another dtype
/// or shape.
std::vector<std::int32_t> read_query_lens(const SafetensorsFile& in, const json& entry, const std::string& where,
                                          std::int64_t S, int format_version) {
  std::vector<std::int32_t> q(static_cast<std::size_t>(S), 1);
  if (format_version < 3) return q;  // check_no_later_tensors refused its tensors
  const StTensor& ql = in.expect("query_lens", StDType::I32, {S});
  const StTensor& lens = in.expect("seq_lens", StDType::I32, {S});
  std::memcpy(q.data(), ql.data.data(), q.size() * 4);
  std::int64_t sum = 0;
  for (std::int64_t s = 0; s < S; ++s) {
    std::int32_t L;
    std::memcpy(&L, lens.data.data() + 4 * s, 4);
    if (q[s] < 1 || q[s] > Case::kMaxQueryLen)
      throw CaseFilesError(fmt::format("{}: tensor 'query_lens': sequence {} has {} query tokens (1 to {})", in.path, s,
                                       q[s], Case::kMaxQueryLen));
    if (q[s] > L)
      throw CaseFilesError(fmt::format("{}: tensor 'query_lens': sequence {} has {} query tokens, more than its seq_lens "
                                       "entry {} (the query tokens are the last query_len tokens of the context)",
                                       in.path, s, q[s], L));
    sum += q[s];
  }
  const StTensor* query = in.find("query");
  const std::int64_t rows = query && !query->shape.empty() ? query->shape[0] : -1;
  if (sum != rows)
    throw CaseFilesError(fmt::format("{}: tensor 'query_lens': sums to {} query tokens but tensor 'query' has {} rows",
                                     in.path, sum, rows));
  const StTensor& qsl = in.expect("query_start_loc", StDType::I32, {S + 1});
  std::int32_t want = 0;
  for (std::int64_t s = 0; s <= S; ++s) {
    std::int32_t v;
    std::memcpy(&v, qsl.data.data() + 4 * s, 4);
    if (v != want)
      throw CaseFilesError(fmt::format("{}: tensor 'query_start_loc': entry {} is {} but the prefix sum of query_lens "
                                       "is {}", in.path, s, v, want));
    if (s < S) want += q[s];
  }
  const json eq = manifest_field<json>(entry, "query_lens", where);
  if (eq != json(q))
    throw CaseFilesError(fmt::format("{}: field 'query_lens' is {} but its file holds {}", where, eq.dump(), json(q).dump()));
  const json en = manifest_field<json>(entry, "num_query_tokens", where);
  if (!en.is_number_integer() || en.get<std::int64_t>() != sum)
    throw CaseFilesError(fmt::format("{}: field 'num_query_tokens' is {} but its file's query_lens sum to {}", where,
                                     en.dump(), sum));
  return q;
}

/// Checks the per-query-head variant tensor `name` (alibi_slopes or sinks) of case file `in` against case
/// `c`: present exactly when the case has that variant (`values`, resolved, non-empty), F32 [num_heads],
/// every value finite. Throws SafetensorsError (dtype, shape) or CaseFilesError naming the file, the tensor
/// and the reason. The values themselves are held to the case's through inputs_sha256.
void check_head_tensor(const SafetensorsFile& in, const char* name, const std::vector<float>& values, const Case& c) {
  const StTensor* t = in.find(name);
  if (!t && values.empty()) return;
  if (!t)
    throw CaseFilesError(fmt::format("{}: tensor '{}' missing: its case '{}' has {}", in.path, name, c.id(),
                                     std::string_view(name) == "sinks" ? "sinks" : "ALiBi slopes"));
  if (values.empty())
    throw CaseFilesError(fmt::format("{}: tensor '{}': its case '{}' has no {}", in.path, name, c.id(),
                                     std::string_view(name) == "sinks" ? "sinks" : "ALiBi slopes"));
  in.expect(name, StDType::F32, {c.num_heads});
  for (std::size_t h = 0; h < values.size(); ++h) {
    float v;
    std::memcpy(&v, t->data.data() + 4 * h, sizeof v);
    if (!std::isfinite(v))
      throw CaseFilesError(fmt::format("{}: tensor '{}': head {} is {} (every value must be finite)", in.path, name, h,
                                       scalar_text(v)));
  }
}


/// The geometry of files[i] as a runner reads it: the entry's shape fields; the file's case-field scalars
/// (core/case_fields.hpp's casefile_scalar: scale, k_scale and v_scale F32, and from format_version 2
/// sliding_window I32 and logits_soft_cap F32, which an older file lacks and which then mean 0), each
/// checked by its row's casefile_problem and, for a row that has one, equal to the entry's field of the
/// same name, which restates it for runners that read the manifest; `query_lens` (read_query_lens); and the
/// scale forms: the entry's (format_version 4, equal to the file's __metadata__ keys of the same names when it
/// has them), or for an older file the form its tensors give (per_kv_head with k_scales_per_head /
/// v_scales_per_head, else per_tensor for an fp8 kv_dtype, else none). Throws CaseFilesError naming `where`
/// and a missing or bad field, SafetensorsError for a scalar tensor that is missing or not a scalar of its
/// type.
json file_geometry(const json& entry, const SafetensorsFile& in, const std::string& where, int format_version,
                   const std::vector<std::int32_t>& query_lens) {
  json g = json::object();
  for (const std::string& k : shape_fields()) g[k] = manifest_field<json>(entry, k.c_str(), where);
  std::vector<std::pair<const CaseField*, double>> scalars;  // the rows' values, in table order
  for (const CaseField& f : case_field_table()) {
    if (f.casefile_scalar.empty()) continue;
    const std::string name(f.casefile_scalar);
    const bool f32 = find_abi_field(AbiStruct::kernel_args, name)->type == AbiType::f32;
    double v = 0;
    if (f.casefile_version <= format_version) {
      const StTensor& t = in.expect(name, f32 ? StDType::F32 : StDType::I32, {});
      float x;
      std::int32_t i;
      std::memcpy(f32 ? static_cast<void*>(&x) : static_cast<void*>(&i), t.data.data(), 4);
      v = f32 ? static_cast<double>(x) : static_cast<double>(i);
    }
    g[name] = f32 ? json(scalar_text(static_cast<float>(v))) : json(static_cast<std::int32_t>(v));
    scalars.emplace_back(&f, v);
  }
  for (const auto& [f, v] : scalars)
    if (f->casefile_problem && f->casefile_version <= format_version)
      if (const std::string why = f->casefile_problem(v); !why.empty())
        throw CaseFilesError(fmt::format("{}: tensor '{}': {}", in.path, f->casefile_scalar, why));
  std::vector<json> restated;
  for (const auto& [f, v] : scalars)
    if (f->casefile_problem && f->casefile_version <= format_version)
      restated.push_back(manifest_field<json>(entry, std::string(f->casefile_scalar).c_str(), where));
  std::size_t r = 0;
  for (const auto& [f, v] : scalars) {
    if (!f->casefile_problem || f->casefile_version > format_version) continue;
    const json& e = restated[r++];
    const json& held = g[std::string(f->casefile_scalar)];
    const bool same = held.is_string() ? e.is_number() && scalar_text(e.get<float>()) == held.get<std::string>()
                                       : e.is_number_integer() && e.get<std::int64_t>() == held.get<std::int64_t>();
    if (!same)
      throw CaseFilesError(fmt::format("{}: field '{}' is {} but its file holds {}", where, f->casefile_scalar, e.dump(),
                                       held.is_string() ? held.get<std::string>() : held.dump()));
  }
  g["query_lens"] = query_lens;
  // Scale forms: a version-4 entry states them (and the file's __metadata__, when it has the key, must say
  // the same); an older file's follow from its per-head tensors and its kv dtype (it has no per-slot tables).
  const std::string kv = manifest_field<std::string>(entry, "kv_dtype", where);
  bool fp8 = false;
  try {
    fp8 = is_fp8(parse_dtype(kv));
  } catch (const std::invalid_argument&) {
    // An unknown kv_dtype name is reported by the field comparison against the case (first_difference).
  }
  for (const char* k : {"k_scale_form", "v_scale_form"}) {
    const char which = k[0];  // 'k' or 'v'
    const std::string derived =
        scale_form_name(fp8, false, in.find(which == 'k' ? "k_scales_per_head" : "v_scales_per_head") != nullptr);
    const std::string form = format_version >= 4 ? manifest_field<std::string>(entry, k, where) : derived;
    if (auto it = in.metadata.find(k); it != in.metadata.end() && it->second != form)
      throw CaseFilesError(fmt::format("{}: metadata {} '{}' but field '{}' of {} is '{}'", in.path, k, it->second, k,
                                       where, form));
    g[k] = form;
  }
  return g;
}

/// Checks that case file `in` holds the caches of its case `c` (whose call is `call`) and no other: a multi-head
/// case no latent_cache, an MLA case neither key_cache nor value_cache (its one latent cache is latent_cache); and
/// then the required inputs under their file names (file_name): query, the caches, block_tables, seq_lens.
/// Throws CaseFilesError (unexpected) or SafetensorsError (missing) naming the file, the tensor and the case.
void check_cache_tensors(const SafetensorsFile& in, const Case& c, const pacheck_kernel_args& call) {
  for (const char* name : {"key_cache", "value_cache", "latent_cache"}) {
    bool held = false;
    for (const InputTensor& t : input_tensors())
      held = held || (file_name(call, t) && std::string_view(file_name(call, t)) == name);
    if (!held && in.find(name))
      throw CaseFilesError(fmt::format("{}: tensor '{}': its case '{}' is {} (its file holds {})", in.path, name, c.id(),
                                       c.is_mla() ? "an MLA case" : "a multi-head case",
                                       c.is_mla() ? "one latent cache, 'latent_cache'" : "'key_cache' and 'value_cache'"));
  }
  for (const InputTensor& t : input_tensors())
    if (!t.optional && file_name(call, t) && !in.find(file_name(call, t)))
      throw SafetensorsError(in.path, file_name(call, t), "missing");
}

/// Reads and checks the input file of manifest entry `mf` (every check score_cases documents) and returns the
/// geometry of its call and the rows of its query and out.
struct CheckedFile {
  json geometry;
  std::int64_t rows = 0;  ///< num_query_tokens
};
CheckedFile check_case_file(const Manifest& m, const ManifestFile& mf, const std::string& cases_dir) {
  const std::string& where = mf.where;
  const Case& c = mf.c;
  const std::int64_t S = c.num_seqs(), H = c.num_heads, D = c.head_size;
  const pacheck_kernel_args call = call_of(c);
  const std::string cpath = (fs::path(cases_dir) / mf.file).string();
  std::string cbytes;
  try {
    cbytes = read_regular_file(cpath, kCaseFileLimit);
  } catch (const FileError& err) {
    throw CaseFilesError(fmt::format("--cases: {}: cannot read {}", where, err.what()));
  }
  const SafetensorsFile in = parse_safetensors(reinterpret_cast<const std::uint8_t*>(cbytes.data()), cbytes.size(), cpath);
  cbytes = std::string();  // the tensors hold their own copies
  check_case_version(c, m.format_version, where);
  check_no_later_tensors(in, mf.entry, where, m.format_version);
  check_cache_tensors(in, c, call);
  in.expect("seq_lens", StDType::I32, {S});
  const std::vector<std::int32_t> query_lens = read_query_lens(in, mf.entry, where, S, m.format_version);
  std::int64_t T = 0;  // rows of query and out: num_query_tokens
  for (std::int32_t q : query_lens) T += q;
  check_head_tensor(in, "alibi_slopes", c.alibi_slopes.resolve(c.num_heads), c);
  check_head_tensor(in, "sinks", c.sinks.resolve(c.num_heads), c);
  check_slot_table(in, "k_scales_per_slot", c, call);
  check_slot_table(in, "v_scales_per_slot", c, call);
  // The file's inputs in input_tensors() order, as the call hashes them (an MLA call's latent cache once).
  std::vector<Bytes> parts;
  for (const InputTensor& t : input_tensors()) {
    const char* name = file_name(call, t);
    const StTensor* st = name ? in.find(name) : nullptr;
    parts.push_back(st ? Bytes{st->data.data(), st->data.size()} : Bytes{nullptr, 0});
  }
  in.expect("query", st_of(c.q_dtype), {T, H, D});
  // The caches' bytes mean what the case's kv dtype says: their tag must be its storage tag, and a file
  // that names its kv dtype (every export does; U8 caches depend on it) must name the case's.
  for (const char* name : {"key_cache", "value_cache", "latent_cache"}) {
    const StDType want = kv_st_of(c.kv_dtype);
    if (const StTensor* t = in.find(name); t && t->dtype != want)
      throw SafetensorsError(in.path, name, fmt::format("dtype {} (kv_dtype {} is stored as {})", st_dtype_name(t->dtype),
                                                        dtype_name(c.kv_dtype), st_dtype_name(want)));
  }
  if (auto it = in.metadata.find("kv_dtype"); it != in.metadata.end() && it->second != dtype_name(c.kv_dtype))
    throw CaseFilesError(fmt::format("{}: metadata kv_dtype '{}' but the case's kv dtype is {}", in.path, it->second,
                                     dtype_name(c.kv_dtype)));
  in.expect("out", st_of(c.out_dtype), {T, H, c.out_head_size()});
  const std::string got = hash_inputs(parts);
  if (got != mf.inputs_sha256)
    throw CaseFilesError(
        fmt::format("{}: inputs changed since export (SHA-256 {} , manifest says {})", in.path, got, mf.inputs_sha256));
  // The entry's fields are what a runner reads the bytes with: they must be the call the file's case makes.
  CheckedFile out{file_geometry(mf.entry, in, where, m.format_version, query_lens), T};
  if (const auto d = first_difference(out.geometry, expected_geometry(c)))
    throw CaseFilesError(fmt::format("{}: file '{}': field '{}' is {} but its case '{}' gives a kernel {}", where,
                                     mf.file, d->field, d->a, c.id(), d->b));
  // The pool tensors, block_tables and seq_lens in the call's shapes (query's rows were checked above: call_of
  // carries no query_start_loc).
  for (const InputTensor& t : input_tensors())
    if (!t.optional && file_name(call, t) && std::string_view(t.name) != "query")
      in.expect(file_name(call, t), t.dtype(call), file_shape(call, t));
  return out;
}

/// The runner's output for case file `mf` in `outputs_dir` (T rows of the case's out dtype), its decline
/// note counted in `cd`, or why there is neither: an output and a note for one file, or a missing or
/// malformed output, is the Output's error (its cells get verdict `error`); an unreadable note or output
/// (a FIFO, a directory, too large) throws CaseFilesError.
Output read_output(const std::string& outputs_dir, const ManifestFile& mf, std::int64_t T, CaseDecline& cd) {
  const Case& c = mf.c;
  const std::int64_t H = c.num_heads, D = c.out_head_size();
  Output o;
  const std::string opath = (fs::path(outputs_dir) / mf.file).string();
  const std::string dpath = opath + kDeclineSuffix;
  std::error_code ec;
  ++cd.files;
  const bool has_output = fs::exists(fs::symlink_status(opath, ec));
  if (fs::exists(fs::symlink_status(dpath, ec))) {
    std::string note;
    try {
      note = read_regular_file(dpath, kDeclineNoteLimit);
    } catch (const FileError& err) {
      throw CaseFilesError(fmt::format("--outputs: decline note of {}: cannot read {}", mf.where, err.what()));
    }
    if (has_output) {
      o.error = fmt::format("{}: the runner wrote both an output and a decline note ({}) for {}: it must write one "
                            "of them", opath, dpath, mf.file);
    } else {
      o.declined = true;
      if (cd.declined++ == 0) cd.reason = fmt::format("declined by the runner: {} ({})", decline_reason(note), dpath);
    }
    return o;
  }
  if (!has_output) {
    o.error = fmt::format("{}: no output file (the runner did not write one for {})", opath, mf.file);
    return o;
  }
  // An output holds one [T, H, D] tensor: anything much larger is not one, and is refused before it is read
  // (a sparse 10 GiB file used to be read whole). A FIFO, directory or device is an input error too.
  const std::uint64_t out_bytes = static_cast<std::uint64_t>(T * H * D) * dtype_size(c.out_dtype);
  const ReadLimit limit{8 + kMaxSafetensorsHeader + out_bytes, "an output file of this case"};
  std::string obytes;
  try {
    obytes = read_regular_file(opath, limit);
  } catch (const FileError& err) {
    throw CaseFilesError(fmt::format("--outputs: output of {}: cannot read {}", mf.where, err.what()));
  }
  try {
    const SafetensorsFile out = parse_safetensors(reinterpret_cast<const std::uint8_t*>(obytes.data()), obytes.size(), opath);
    o.bytes = out.expect("out", st_of(c.out_dtype), {T, H, D}).data;
  } catch (const SafetensorsError& err) {
    o.error = err.what();
  }
  return o;
}

/// The manifest's cells as a suite (layouts fixed by the export), each claiming (file, baseline) only files
/// whose geometry is the call its case makes: exports before files were keyed by call shared files between
/// geometries of identical bytes (h16/8 d256 and h32/16 d128), which would judge a cell against the wrong
/// oracle.
Suite suite_of(const Manifest& m, const std::string& mpath, const std::map<std::string, json>& geometry_of_file) {
  for (const ManifestCell& mc : m.cells) {
    const json expected = expected_geometry(mc.cell.c);
    for (const char* key : {"file", "baseline"}) {
      const json& f = key == std::string_view("file") ? mc.file : mc.baseline;
      if (f.is_null()) continue;
      const auto it = f.is_string() ? geometry_of_file.find(f.get<std::string>()) : geometry_of_file.end();
      if (it == geometry_of_file.end())
        throw CaseFilesError(fmt::format("{}: {} {} is not a file of files[]", mc.where, key, f.dump()));
      if (const auto d = first_difference(it->second, expected))
        throw CaseFilesError(fmt::format(
            "{}: cell '{}' claims {} '{}', whose field '{}' is {} but the cell's case gives a kernel {}: a case file "
            "is shared only by cells of the same call (shapes, dtypes, layout, strides, scales and input bytes); "
            "this export shares it across calls, as pacheck export did before it keyed files by call: export again",
            mc.where, mc.cell.id(), key, it->first, d->field, d->a, d->b));
    }
  }
  return manifest_suite(m, mpath);
}

/// Keeps only the cells of `suite` named in `ids` (`--cell`; their clean twins' outputs stay loaded: a
/// poisoned cell is judged against them); an id the manifest does not hold is a CaseFilesError naming it.
void keep_cells(Suite& suite, const std::vector<std::string>& ids, const std::string& mpath) {
  if (ids.empty()) return;
  std::set<std::string> known;
  for (const auto& sc : suite.cells) known.insert(sc.cell.id());
  for (const auto& id : ids)
    if (!known.count(id))
      throw CaseFilesError(fmt::format("--cell '{}': no such cell in {} ({} cells; the ids are the manifest's "
                                       "cells[j].id, as score prints them)", id, mpath, known.size()));
  const std::set<std::string> keep(ids.begin(), ids.end());
  suite.cells.erase(std::remove_if(suite.cells.begin(), suite.cells.end(),
                                   [&](const SuiteCell& sc) { return !keep.count(sc.cell.id()); }),
                    suite.cells.end());
}

/// The kernels a score replays `r` through (negative controls when `control`): one for the multi-head cells of
/// `suite`, named kernel_name, and one for its MLA cells (Kernel::takes_mla), named kernel_name too when the
/// suite has no multi-head cell, else kMlaKernelSuffix appended (a kernel takes one kind of cell: run pairs each
/// with its own kind). A suite of neither kind (an empty --cell selection) gets the multi-head one. Throws
/// CaseFilesError when a name breaks the kernel name rule (too long).
std::vector<KernelPtr> replay_kernels(const Suite& suite, const std::string& kernel_name, bool control,
                                      std::shared_ptr<const Replayed> r) {
  const CellKinds kinds = cell_kinds(suite);
  std::vector<KernelPtr> kernels;
  if (kinds.mha || !kinds.mla) {
    if (const std::string why = kernel_name_problem(kernel_name); !why.empty())
      throw CaseFilesError(fmt::format("--kernel-name: the outputs are reported as '{}': {}", kernel_name, why));
    kernels.push_back(std::make_shared<ReplayKernel>(kernel_name, r, false, control));
  }
  if (kinds.mla) {
    const std::string name = score_kernel_name(kernel_name, true, kinds.mha);
    if (const std::string why = kernel_name_problem(name); !why.empty())
      throw CaseFilesError(fmt::format("--kernel-name: the export's MLA cells are reported as '{}': {}", name, why));
    kernels.push_back(std::make_shared<ReplayKernel>(name, r, true, control));
  }
  return kernels;
}

/// What the runner wrote in `outputs_dir` for every file of the export (the files passed check_case_file:
/// `checked` holds each one's geometry and query rows, by file name).
std::shared_ptr<const Replayed> replay_outputs(const Manifest& m, const std::string& outputs_dir,
                                               const std::map<std::string, CheckedFile>& checked) {
  auto replayed = std::make_shared<Replayed>();  // outputs and case ids by call_key, declines by case id
  for (const ManifestFile& mf : m.files) {
    const CheckedFile& c = checked.at(mf.file);
    const std::string key = call_key(c.geometry, mf.inputs_sha256);
    replayed->case_of_call[key] = mf.c.id();
    replayed->outputs[key] = read_output(outputs_dir, mf, c.rows, replayed->declines[mf.c.id()]);
  }
  return replayed;
}

}  // namespace

std::string score_kernel_name(const std::string& name, bool mla, bool mixed) {
  return mla && mixed ? name + kMlaKernelSuffix : name;
}

RunSummary score_cases(const std::string& cases_dir, const std::string& outputs_dir, const ScoreOptions& opt,
                       std::string* suite_name, std::vector<LeftOut>* left_out, std::string* manifest_sha256) {
  const std::string mpath = (fs::path(cases_dir) / "manifest.json").string();
  std::string mtext;
  try {
    mtext = read_regular_file(mpath, kManifestLimit);
  } catch (const FileError& e) {
    throw CaseFilesError(
        fmt::format("--cases: cannot read {} (is '{}' a directory written by pacheck export?)", e.what(), cases_dir));
  }
  const Manifest m = parse_manifest(mtext, mpath);
  if (manifest_sha256) *manifest_sha256 = sha256_of(mtext);
  if (!outputs_dir.empty() && !fs::is_directory(outputs_dir))
    throw CaseFilesError(fmt::format("{}: no such directory (--outputs)", outputs_dir));
  if (!opt.control_outputs.empty() && !fs::is_directory(opt.control_outputs))
    throw CaseFilesError(fmt::format("{}: no such directory (--control-outputs)", opt.control_outputs));

  // Every exported input must still be what the manifest says it is: a replay keyed by call (geometry and
  // SHA-256) would otherwise silently score outputs of different inputs.
  std::map<std::string, CheckedFile> checked;    // files[i].file -> its checks' findings
  std::map<std::string, json> geometry_of_file;  // files[i].file -> its geometry
  for (const ManifestFile& mf : m.files) {
    const CheckedFile& c = checked[mf.file] = check_case_file(m, mf, cases_dir);
    geometry_of_file[mf.file] = c.geometry;
  }
  Suite suite = suite_of(m, mpath, geometry_of_file);
  keep_cells(suite, opt.cells, mpath);
  if (suite_name) *suite_name = suite.name;
  if (left_out) *left_out = m.left_out;
  std::vector<KernelPtr> kernels =
      replay_kernels(suite, opt.kernel_name, opt.negative_control, replay_outputs(m, outputs_dir, checked));
  if (!opt.control_outputs.empty())
    for (KernelPtr& k : replay_kernels(suite, opt.kernel_name + kControlKernelSuffix, true,
                                       replay_outputs(m, opt.control_outputs, checked)))
      kernels.push_back(std::move(k));
  RunOptions ro = opt.run;
  ro.filter.reset();
  ro.seed.reset();
  // The runner already wrote a control's outputs for every cell, and judging them costs little: a replayed
  // control is judged on every cell (it must pass those outside its expected failures), as before not_run.
  ro.controls_everywhere = true;
  if (opt.preflight) opt.preflight(suite, kernels, ro);
  return run_suite(suite, kernels, "cpu", ro);
}

}  // namespace pacheck
