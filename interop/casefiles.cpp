#include "interop/casefiles.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <thread>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "faults/inject.hpp"
#include "core/digest.hpp"
#include "core/files.hpp"
#include "core/version.hpp"
#include "interop/safetensors.hpp"

namespace pacheck {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kFormatVersion = kManifestFormatVersion;
constexpr const char* kFormat = kManifestFormat;

/// The safetensors tag of an element type, or nullopt when the format has none (fp8 e4m3fnuz: the format
/// knows only the OCP fp8 encodings; caches of it are stored with kv_tag's U8). Mapped by name so the
/// export follows whatever dtypes the build has.
std::optional<StDType> st_tag(DType t) {
  const std::string_view n = dtype_name(t);
  if (n == "f32") return StDType::F32;
  if (n == "f16") return StDType::F16;
  if (n == "bf16") return StDType::BF16;
  if (n == "fp8_e4m3fn") return StDType::F8_E4M3;
  if (n == "fp8_e5m2") return StDType::F8_E5M2;
  return std::nullopt;
}

StDType st_of(DType t) {
  if (auto tag = st_tag(t)) return *tag;
  throw CaseFilesError(fmt::format("dtype {} has no safetensors tag", dtype_name(t)));
}

/// The tag key_cache / value_cache are stored with: st_tag, or U8 for an fp8 encoding the format cannot
/// tag (e4m3fnuz), whose name the file's metadata key "kv_dtype" and the manifest's "kv_dtype" then give.
std::optional<StDType> kv_tag(DType t) {
  if (auto tag = st_tag(t)) return tag;
  if (is_fp8(t)) return StDType::U8;
  return std::nullopt;
}
StDType kv_st_of(DType t) {
  if (auto tag = kv_tag(t)) return *tag;
  throw CaseFilesError(fmt::format("kv dtype {} has no safetensors storage", dtype_name(t)));
}

/// Byte sizes of the buffers of one call, as run_kernel_once uploads them.
struct Sizes {
  std::size_t query, key_cache, value_cache, block_tables, seq_lens, out;
  std::size_t k_scales, v_scales;  ///< [num_kv_heads] fp32 per-head scales, 0 bytes when absent
  std::size_t alibi, sinks;        ///< [num_heads] fp32 ALiBi slopes / sink logits, 0 bytes when absent
  std::size_t k_slot, v_slot;      ///< [num_blocks, num_kv_heads, block_size] fp32 per-slot tables, 0 when absent
};
/// Rows of `query` and `out` in a call: num_query_tokens with several query tokens per sequence (version 2's
/// query_start_loc), else one per sequence.
std::size_t query_rows(const pacheck_kernel_args& a) {
  return static_cast<std::size_t>(a.query_start_loc_host && a.num_query_tokens > 0 ? a.num_query_tokens : a.num_seqs);
}

/// query_lens of a call: from query_start_loc_host when set, else 1 for each sequence.
std::vector<std::int32_t> query_lens_of(const pacheck_kernel_args& a) {
  std::vector<std::int32_t> q(static_cast<std::size_t>(a.num_seqs), 1);
  if (a.query_start_loc_host)
    for (int s = 0; s < a.num_seqs; ++s) q[s] = a.query_start_loc_host[s + 1] - a.query_start_loc_host[s];
  return q;
}

Sizes sizes_of(const pacheck_kernel_args& a) {
  const auto T = query_rows(a);
  const auto S = static_cast<std::size_t>(a.num_seqs), H = static_cast<std::size_t>(a.num_heads),
             D = static_cast<std::size_t>(a.head_size), N = static_cast<std::size_t>(a.num_blocks);
  const std::size_t table = N * static_cast<std::size_t>(a.num_kv_heads) * static_cast<std::size_t>(a.block_size) * 4;
  const std::size_t kv = dtype_size(static_cast<DType>(a.kv_dtype));
  // The pager's pools are contiguous: dimension 0 (the block) strides over one whole block.
  return {T * H * D * dtype_size(static_cast<DType>(a.q_dtype)),
          N * static_cast<std::size_t>(a.k_strides[0]) * kv,
          N * static_cast<std::size_t>(a.v_strides[0]) * kv,
          S * static_cast<std::size_t>(a.max_blocks_per_seq) * 4,
          S * 4,
          T * H * D * dtype_size(static_cast<DType>(a.out_dtype)),
          a.k_scales_per_head ? static_cast<std::size_t>(a.num_kv_heads) * 4 : 0,
          a.v_scales_per_head ? static_cast<std::size_t>(a.num_kv_heads) * 4 : 0,
          a.alibi_slopes ? H * 4 : 0,
          a.sinks ? H * 4 : 0,
          a.k_scales_per_slot ? table : 0,
          a.v_scales_per_slot ? table : 0};
}

/// One input buffer of a call, in host memory.
struct Bytes {
  const void* p;
  std::size_t n;
};

/// SHA-256 of the inputs of one call, in ABI order. Per-head scales, ALiBi slopes, sinks and the per-slot
/// scale tables take part only when present, so a case without them hashes exactly its five tensors (and
/// every case of an older export hashes as it did).
std::string hash_inputs(const std::vector<Bytes>& parts) {
  Sha256 h;
  for (const auto& b : parts)
    if (b.n) h.update(b.p, b.n);
  return h.hex();
}

/// Shapes of the pool tensors, per pacheck_layout (include/pacheck/kernel_abi.h).
std::vector<std::int64_t> key_shape(const pacheck_kernel_args& a, int x) {
  switch (a.layout) {
    case PACHECK_LAYOUT_VLLM: return {a.num_blocks, a.num_kv_heads, a.head_size / x, a.block_size, x};
    case PACHECK_LAYOUT_NHD: return {a.num_blocks, a.block_size, a.num_kv_heads, a.head_size};
    case PACHECK_LAYOUT_HND: return {a.num_blocks, a.num_kv_heads, a.block_size, a.head_size};
    case PACHECK_LAYOUT_AITER: return {a.num_blocks, a.num_kv_heads, a.head_size / x, a.block_size, x};
  }
  return {};
}
std::vector<std::int64_t> value_shape(const pacheck_kernel_args& a) {
  switch (a.layout) {
    case PACHECK_LAYOUT_VLLM: return {a.num_blocks, a.num_kv_heads, a.head_size, a.block_size};
    case PACHECK_LAYOUT_NHD: return {a.num_blocks, a.block_size, a.num_kv_heads, a.head_size};
    case PACHECK_LAYOUT_HND: return {a.num_blocks, a.num_kv_heads, a.block_size, a.head_size};
    case PACHECK_LAYOUT_AITER: return {a.num_blocks, a.num_kv_heads, a.block_size / 16, a.head_size, 16};
  }
  return {};
}

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
    const Sizes n = sizes_of(a);
    auto grab = [](const void* p, std::size_t bytes) {
      const auto* b = static_cast<const std::uint8_t*>(p);
      return std::vector<std::uint8_t>(b, b + bytes);
    };
    query = grab(a.query, n.query);
    key_cache = grab(a.key_cache, n.key_cache);
    value_cache = grab(a.value_cache, n.value_cache);
    block_tables = grab(a.block_tables, n.block_tables);
    seq_lens = grab(a.seq_lens, n.seq_lens);
    k_scales = a.k_scales_per_head ? grab(a.k_scales_per_head, n.k_scales) : std::vector<std::uint8_t>{};
    v_scales = a.v_scales_per_head ? grab(a.v_scales_per_head, n.v_scales) : std::vector<std::uint8_t>{};
    alibi = a.alibi_slopes ? grab(a.alibi_slopes, n.alibi) : std::vector<std::uint8_t>{};
    sinks = a.sinks ? grab(a.sinks, n.sinks) : std::vector<std::uint8_t>{};
    // Per-slot scale tables as the kernel gets them: a `scales` fault's poison is in their unwritten entries.
    k_slot = a.k_scales_per_slot ? grab(a.k_scales_per_slot, n.k_slot) : std::vector<std::uint8_t>{};
    v_slot = a.v_scales_per_slot ? grab(a.v_scales_per_slot, n.v_slot) : std::vector<std::uint8_t>{};
    out = grab(a.out, n.out);  // the fill pattern, left untouched: that is what a runner should start from
    query_lens = query_lens_of(a);
    // The call's pointers are valid during the call only: keep a copy of query_start_loc for geometry_of.
    if (a.query_start_loc_host) {
      query_start_loc.assign(a.query_start_loc_host, a.query_start_loc_host + a.num_seqs + 1);
      args.query_start_loc_host = query_start_loc.data();
    }
    args.query_start_loc = nullptr;
    // Kept only as "present" marks for geometry_of (the scale forms): the tables' bytes are in k_slot / v_slot.
    if (a.k_scales_per_slot) args.k_scales_per_slot = reinterpret_cast<const float*>(k_slot.data());
    if (a.v_scales_per_slot) args.v_scales_per_slot = reinterpret_cast<const float*>(v_slot.data());
  }
  mutable pacheck_kernel_args args{};
  mutable std::vector<std::uint8_t> query, key_cache, value_cache, block_tables, seq_lens, k_scales, v_scales, alibi,
      sinks, k_slot, v_slot, out;
  mutable std::vector<std::int32_t> query_lens;  ///< [num_seqs], 1 each for plain decode
  mutable std::vector<std::int32_t> query_start_loc;  ///< [num_seqs + 1] with several query tokens, else empty
  std::string sha() const {
    return hash_inputs({{query.data(), query.size()},
                        {key_cache.data(), key_cache.size()},
                        {value_cache.data(), value_cache.size()},
                        {block_tables.data(), block_tables.size()},
                        {seq_lens.data(), seq_lens.size()},
                        {k_scales.data(), k_scales.size()},
                        {v_scales.data(), v_scales.size()},
                        {alibi.data(), alibi.size()},
                        {sinks.data(), sinks.size()},
                        {k_slot.data(), k_slot.size()},
                        {v_slot.data(), v_slot.size()}});
  }
};

json strides_json(const pacheck_kernel_args& a) {
  const bool aiter = a.layout == PACHECK_LAYOUT_AITER;
  const int k_rank = a.layout == PACHECK_LAYOUT_VLLM || aiter ? 5 : 4;
  const int v_rank = aiter ? 5 : 4;
  return {{"query", {a.q_stride_seq, a.q_stride_head, 1}},
          {"key_cache", std::vector<std::int64_t>(a.k_strides, a.k_strides + k_rank)},
          {"value_cache", std::vector<std::int64_t>(a.v_strides, a.v_strides + v_rank)},
          {"block_tables", {a.block_tables_stride, 1}},
          {"out", {a.out_stride_seq, a.out_stride_head, 1}}};
}

/// The scalar fields of a call that no buffer holds, in a geometry: softmax scale and the per-tensor
/// dequantisation scales (NaN when the case has per-KV-head scales).
constexpr const char* kScalarFields[] = {"scale", "k_scale", "v_scale"};
/// The other fields of a geometry, each spelled and valued as the manifest's files[i] entry has it.
constexpr const char* kShapeFields[] = {"num_seqs",   "num_heads", "num_kv_heads",       "head_size",
                                        "block_size", "num_blocks", "max_blocks_per_seq", "layout",
                                        "x",          "q_dtype",    "kv_dtype",           "out_dtype",
                                        "strides"};
/// The attention-variant fields of a geometry: sliding_window (I32, 0 = none) and logits_soft_cap (F32, 0 =
/// none), read from the case file's scalar tensors of those names like kScalarFields (format_version 2; a
/// version-1 file has neither and means 0), and query_lens ([num_seqs] I32, format_version 3; an older file
/// has none and means 1 per sequence).
constexpr const char* kVariantFields[] = {"sliding_window", "logits_soft_cap", "query_lens"};
/// How each fp8 cache's scale is given (format_version 4; include/pacheck/kernel_abi.h's pacheck_scale_form):
/// "none" (not fp8), "per_tensor" (the scalar k_scale / v_scale), "per_kv_head" (k_scales_per_head /
/// v_scales_per_head) or "per_slot" (k_scales_per_slot / v_scales_per_slot). A version-4 entry and its
/// file's __metadata__ state them; for older files they follow from the tensors present and the kv dtype.
constexpr const char* kScaleFormFields[] = {"k_scale_form", "v_scale_form"};

/// The name of a scale form as kScaleFormFields spell it (the Python module's CaseInfo uses the same names).
std::string scale_form_name(bool fp8, bool per_slot, bool per_head) {
  if (!fp8) return "none";
  return per_slot ? "per_slot" : per_head ? "per_kv_head" : "per_tensor";
}
/// The scale form of one cache of case `c` (`s`: its k_scale or v_scale).
std::string scale_form_name(const Case& c, const KvScale& s) {
  return scale_form_name(is_fp8(c.kv_dtype), s.per_slot(), s.per_head());
}

/// A scale as a geometry holds it: fp32's shortest round-trip text, and "nan" for every NaN (the per-head
/// case's scalars), so that equal calls compare equal.
std::string scalar_text(float v) { return std::isnan(v) ? std::string("nan") : fmt::format("{}", v); }

/// Everything of one call a kernel reads besides the bytes of its buffers: the kShapeFields (num_seqs,
/// num_heads, num_kv_heads, head_size, block_size, num_blocks, max_blocks_per_seq, layout, x, q/kv/out
/// dtype, strides in elements of query, key_cache, value_cache, block_tables and out), the
/// kScalarFields (as scalar_text) and the kVariantFields (sliding_window as an int, logits_soft_cap as
/// scalar_text; a window of 128 and none over the same bytes are two calls) and the kScaleFormFields (from
/// which scale pointers the call has: per-slot tables, per-head arrays, or neither). Two calls with equal geometries and equal inputs_sha256 are the same
/// call to any kernel, so they may share a case file and its output; h16/8 d256 and h32/16 d128 at the
/// same lengths and seed have byte-identical inputs and differ only here.
json geometry_of(const pacheck_kernel_args& a) {
  const auto layout = static_cast<Layout>(a.layout);
  const auto kv = static_cast<DType>(a.kv_dtype);
  // The values in kShapeFields order (its names are the one spelling of them), then kScalarFields'.
  const json values[] = {a.num_seqs,
                         a.num_heads,
                         a.num_kv_heads,
                         a.head_size,
                         a.block_size,
                         a.num_blocks,
                         a.max_blocks_per_seq,
                         layout_name(layout),
                         layout_vector_width(layout, kv),
                         dtype_name(static_cast<DType>(a.q_dtype)),
                         dtype_name(kv),
                         dtype_name(static_cast<DType>(a.out_dtype)),
                         strides_json(a)};
  const float scalars[] = {a.scale, a.k_scale, a.v_scale};
  static_assert(sizeof values / sizeof values[0] == sizeof kShapeFields / sizeof kShapeFields[0]);
  static_assert(sizeof scalars / sizeof scalars[0] == sizeof kScalarFields / sizeof kScalarFields[0]);
  json g = json::object();
  for (std::size_t i = 0; i < std::size(kShapeFields); ++i) g[kShapeFields[i]] = values[i];
  for (std::size_t i = 0; i < std::size(kScalarFields); ++i) g[kScalarFields[i]] = scalar_text(scalars[i]);
  g["sliding_window"] = a.sliding_window;
  g["logits_soft_cap"] = scalar_text(a.logits_soft_cap);
  g["query_lens"] = query_lens_of(a);
  static_assert(std::size(kVariantFields) == 3);
  const bool fp8 = is_fp8(static_cast<DType>(a.kv_dtype));
  g["k_scale_form"] = scale_form_name(fp8, a.k_scales_per_slot != nullptr, a.k_scales_per_head != nullptr);
  g["v_scale_form"] = scale_form_name(fp8, a.v_scales_per_slot != nullptr, a.v_scales_per_head != nullptr);
  static_assert(std::size(kScaleFormFields) == 2);
  return g;
}

/// The call a suite cell of case `c` gives a kernel, without generating its inputs: make_args over a pool
/// of the pager's dimensions (paging/pager.hpp: num_blocks = the blocks the sequences need +
/// spare_blocks, max_blocks_per_seq = the longest sequence's blocks + padding_columns) and the case's
/// scales (suite cells carry no scale fault). Buffer pointers are null. export_cases checks it against
/// every call it captures, so `score` can hold a manifest's cells to it.
pacheck_kernel_args call_of(const Case& c) {
  PagedCache pool;
  for (int s = 0; s < c.num_seqs(); ++s) {
    pool.num_blocks += c.blocks_for(s);
    pool.max_blocks_per_seq = std::max(pool.max_blocks_per_seq, c.blocks_for(s));
  }
  pool.num_blocks += c.spare_blocks;
  pool.max_blocks_per_seq += c.padding_columns;
  pool.strides = make_strides(static_cast<pacheck_layout>(c.layout), c.num_kv_heads, c.head_size, c.block_size,
                              layout_vector_width(Layout::vllm, c.kv_dtype));
  pool.k_scales = c.k_scale.resolve(c.num_kv_heads);
  pool.v_scales = c.v_scale.resolve(c.num_kv_heads);
  pool.k_per_head = c.k_scale.per_head();
  pool.v_per_head = c.v_scale.per_head();
  const std::vector<float> alibi = c.alibi_slopes.resolve(c.num_heads), sinks = c.sinks.resolve(c.num_heads);
  if (c.max_query_len() > 1)
    for (int s = 0; s <= c.num_seqs(); ++s) pool.query_start_loc.push_back(c.query_start(s));
  // Per-slot scales (fp8 only, as the pager): make_args sets the scalar to NaN when the cache has a table.
  // One entry stands for the table: make_args reads no more than whether it is there.
  if (is_fp8(c.kv_dtype) && c.k_scale.per_slot()) pool.k_slot_scales.assign(1, 1.0f);
  if (is_fp8(c.kv_dtype) && c.v_scale.per_slot()) pool.v_slot_scales.assign(1, 1.0f);
  pacheck_kernel_args a = make_args(c, pool, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                    pool.k_scales.data(), pool.v_scales.data(), alibi.data(), sinks.data(),
                                    pool.query_start_loc.data(), pool.k_slot_scales.data(), pool.v_slot_scales.data());
  a.k_scales_per_head = a.v_scales_per_head = nullptr;  // the pointers into `pool` die with it
  a.alibi_slopes = a.sinks = nullptr;
  a.query_start_loc = a.query_start_loc_host = nullptr;
  a.k_scales_per_slot = a.v_scales_per_slot = nullptr;
  return a;
}

/// The geometry of the call a cell of case `c` makes: geometry_of(call_of(c)) with the case's query_lens and
/// scale forms (call_of's query_start_loc and scale pointers died with its pool).
json expected_geometry(const Case& c) {
  json g = geometry_of(call_of(c));
  std::vector<std::int32_t> q;
  for (int s = 0; s < c.num_seqs(); ++s) q.push_back(c.query_len(s));
  g["query_lens"] = q;
  g["k_scale_form"] = scale_form_name(c, c.k_scale);  // call_of's scale pointers died with its pool too
  g["v_scale_form"] = scale_form_name(c, c.v_scale);
  return g;
}

/// The first field (in kShapeFields then kScalarFields order) in which geometries `a` and `b` differ: its
/// name ("strides.TENSOR" for a stride) and both values as JSON text; nullopt when they are equal.
struct FieldDiff {
  std::string field, a, b;
};
std::optional<FieldDiff> first_difference(const json& a, const json& b) {
  std::vector<std::string> order(std::begin(kShapeFields), std::end(kShapeFields));
  order.insert(order.end(), std::begin(kScalarFields), std::end(kScalarFields));
  order.insert(order.end(), std::begin(kVariantFields), std::end(kVariantFields));
  order.insert(order.end(), std::begin(kScaleFormFields), std::end(kScaleFormFields));
  for (const auto& k : order) {
    const json& va = a.at(k);
    const json& vb = b.at(k);
    if (va == vb) continue;
    if (va.is_object() && vb.is_object())  // strides: name the tensor
      for (const auto& [t, s] : va.items())
        if (!vb.contains(t) || vb.at(t) != s) return FieldDiff{k + "." + t, s.dump(), vb.value(t, json()).dump()};
    return FieldDiff{k, va.dump(), vb.dump()};
  }
  return std::nullopt;
}

/// The key cells share a file (and its output) by: their geometry and the SHA-256 of their input bytes.
std::string call_key(const json& geometry, const std::string& sha) { return geometry.dump() + " " + sha; }

/// Writes one captured call as a case file and returns its manifest entry.
json write_case_file(const std::string& dir, const std::string& file, const Case& c, const FaultSpec& f,
                     const CaptureKernel& cap, const std::string& sha) {
  const pacheck_kernel_args& a = cap.args;
  const int x = layout_vector_width(c.layout, c.kv_dtype);
  const std::int64_t S = a.num_seqs, H = a.num_heads, D = a.head_size;
  const auto T = static_cast<std::int64_t>(query_rows(a));  // query / out rows: num_query_tokens
  SafetensorsFile st;
  st.metadata = {{"format", kFormat},     {"pacheck", pacheck_version()}, {"case", c.id()},
                 {"fault", f.id()},       {"layout", std::string(layout_name(c.layout))},
                 {"inputs_sha256", sha},  {"kv_dtype", std::string(dtype_name(c.kv_dtype))},
                 {"k_scale_form", scale_form_name(c, c.k_scale)}, {"v_scale_form", scale_form_name(c, c.v_scale)}};
  st.add("query", st_of(c.q_dtype), {T, H, D}, cap.query.data());
  st.add("key_cache", kv_st_of(c.kv_dtype), key_shape(a, x), cap.key_cache.data());
  st.add("value_cache", kv_st_of(c.kv_dtype), value_shape(a), cap.value_cache.data());
  st.add("block_tables", StDType::I32, {S, a.max_blocks_per_seq}, cap.block_tables.data());
  st.add("seq_lens", StDType::I32, {S}, cap.seq_lens.data());
  st.add("out", st_of(c.out_dtype), {T, H, D}, cap.out.data());
  st.add("scale", StDType::F32, {}, &a.scale);
  // With per-KV-head scales the scalars are NaN (make_args): a kernel must read the arrays.
  st.add("k_scale", StDType::F32, {}, &a.k_scale);
  st.add("v_scale", StDType::F32, {}, &a.v_scale);
  if (!cap.k_scales.empty()) st.add("k_scales_per_head", StDType::F32, {a.num_kv_heads}, cap.k_scales.data());
  if (!cap.v_scales.empty()) st.add("v_scales_per_head", StDType::F32, {a.num_kv_heads}, cap.v_scales.data());
  // Attention variants (format_version 2): the two scalars always (0 = none), the per-query-head tensors
  // only when the case has them, as a plugin kernel gets NULL for them otherwise.
  st.add("sliding_window", StDType::I32, {}, &a.sliding_window);
  st.add("logits_soft_cap", StDType::F32, {}, &a.logits_soft_cap);
  if (!cap.alibi.empty()) st.add("alibi_slopes", StDType::F32, {H}, cap.alibi.data());
  if (!cap.sinks.empty()) st.add("sinks", StDType::F32, {H}, cap.sinks.data());
  // Query tokens per sequence (format_version 3): always present, 1 each for plain decode, and their
  // prefix sums (the ABI's query_start_loc) so a runner need not compute them.
  std::vector<std::int32_t> qsl{0};
  for (std::int32_t q : cap.query_lens) qsl.push_back(qsl.back() + q);
  st.add("query_lens", StDType::I32, {S}, cap.query_lens.data());
  st.add("query_start_loc", StDType::I32, {S + 1}, qsl.data());
  // Per-slot fp8 scale tables (format_version 4), present only for a per_slot scale form: the bytes the
  // kernel got, a `scales` fault's poison in the unwritten slots' entries included.
  const std::vector<std::int64_t> table{a.num_blocks, a.num_kv_heads, a.block_size};
  if (!cap.k_slot.empty()) st.add("k_scales_per_slot", StDType::F32, table, cap.k_slot.data());
  if (!cap.v_slot.empty()) st.add("v_scales_per_slot", StDType::F32, table, cap.v_slot.data());
  write_safetensors((fs::path(dir) / file).string(), st);

  json shapes = json::object();
  for (const auto& t : st.tensors) shapes[t.name] = t.shape;
  json entry = geometry_of(a);  // the shape fields as score reads them back; the scales as JSON numbers
  entry.update({{"file", file},
                {"inputs_sha256", sha},
                {"case", c.id()},
                {"fault", f.id()},
                {"kv_tensor_dtype", st_dtype_name(kv_st_of(c.kv_dtype))},
                {"scale", a.scale},
                {"k_scale", a.k_scale},
                {"v_scale", a.v_scale},
                {"sliding_window", a.sliding_window},
                {"logits_soft_cap", a.logits_soft_cap},
                {"num_query_tokens", T},
                {"shapes", shapes},
                {"output",
                 {{"file", file}, {"tensor", "out"}, {"dtype", st_dtype_name(st_of(c.out_dtype))}, {"shape", {T, H, D}}}}});
  return entry;
}

}  // namespace

std::string inputs_sha256(const pacheck_kernel_args& a) {
  const Sizes n = sizes_of(a);
  return hash_inputs({{a.query, n.query},
                      {a.key_cache, n.key_cache},
                      {a.value_cache, n.value_cache},
                      {a.block_tables, n.block_tables},
                      {a.seq_lens, n.seq_lens},
                      {a.k_scales_per_head, n.k_scales},
                      {a.v_scales_per_head, n.v_scales},
                      {a.alibi_slopes, n.alibi},
                      {a.sinks, n.sinks},
                      {a.k_scales_per_slot, n.k_slot},
                      {a.v_scales_per_slot, n.v_slot}});
}

std::vector<LeftOut> left_out_kinds(const ExportSummary& sum) {
  return {{"layout", sum.skipped_layout, "pinned to a layout other than the export's --kernel-layout, or not valid in it"},
          {"dtype", sum.skipped_dtype, "a query or output dtype safetensors has no tag for"},
          {"high_block_ids", sum.skipped_high_ids,
           "high block ids (hiblk=): their pools of 2^31 elements and more are not written to case files"}};
}

ExportSummary export_cases(const Suite& suite, const std::string& dir, const ExportOptions& opt) {
  ExportSummary sum;
  // Resolve cells as `run` would, then group them by case: each case is generated and paged once.
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
    if (!st_tag(cell.c.q_dtype) || !kv_tag(cell.c.kv_dtype) || !st_tag(cell.c.out_dtype)) {
      ++sum.skipped_dtype;
      continue;
    }
    cells.push_back(std::move(cell));
  }
  std::vector<std::string> case_order;
  std::map<std::string, std::pair<Case, std::vector<FaultSpec>>> groups;
  for (const auto& cell : cells) {
    auto [it, fresh] = groups.try_emplace(cell.c.id(), cell.c, std::vector<FaultSpec>{FaultSpec{}});
    if (fresh) case_order.push_back(it->first);
    auto& faults = it->second.second;
    bool have = false;
    for (const auto& f : faults) have = have || f.id() == cell.fault.id();
    if (!have) faults.push_back(cell.fault);
  }
  std::set<std::string> clean_cells;
  for (const auto& cell : cells)
    if (cell.fault.clean()) clean_cells.insert(cell.c.id());
  if (opt.preflight) {
    std::vector<Cell> firsts;  // one cell per case, in export order
    for (const auto& id : case_order)
      for (const auto& cell : cells)
        if (cell.c.id() == id) {
          firsts.push_back(cell);
          break;
        }
    opt.preflight(firsts);
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw CaseFilesError(fmt::format("{}: cannot create the directory: {}", dir, ec.message()));

  // Phase 1, in parallel over cases: generate each case once, capture every fault's call, and write each
  // call that differs from the case's earlier ones to a temporary file. Phase 2, in case order: number the
  // files as a serial export would (a call met again in a later case shares the earlier file), so the
  // manifest and file names do not depend on the thread count.
  struct Captured {
    std::string key;          ///< call_key: geometry and input SHA-256
    std::string temp;         ///< its temporary file, empty when an earlier fault of the case made the same call
    json entry;               ///< manifest entry (file names set in phase 2)
    bool clean = false;
  };
  std::vector<std::vector<Captured>> captured(case_order.size());
  const int threads = std::min<int>(static_cast<int>(std::max<std::size_t>(case_order.size(), 1)),
                                    opt.threads > 0 ? opt.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex error_mu;
  std::exception_ptr error;
  auto remove_temps = [&] {
    for (const auto& per_case : captured)
      for (const auto& k : per_case)
        if (!k.temp.empty()) fs::remove(fs::path(dir) / k.temp, ec);
  };
  auto worker = [&] {
    auto backend = make_cpu_backend();
    for (std::size_t ci; !failed && (ci = next++) < case_order.size();) {
      try {
        const auto& [c, faults] = groups.at(case_order[ci]);
        const CaseData data = prepare_inputs(c);  // no oracle: the export compares nothing
        const json expected = expected_geometry(c);
        std::vector<Captured>& out = captured[ci];
        for (std::size_t fi = 0; fi < faults.size(); ++fi) {
          const FaultSpec& f = faults[fi];
          CaptureKernel cap;
          run_kernel_once(cap, *backend, data, faulted_cache(data.cache, f).cache);
          const std::string sha = cap.sha();
          const json geometry = geometry_of(cap.args);
          if (const auto d = first_difference(geometry, expected))
            throw std::logic_error(fmt::format("export: cell '{}' gave the kernel {} {} but call_of predicts {}: "
                                               "score would refuse this export (interop/casefiles.cpp)",
                                               Cell{c, f}.id(), d->field, d->a, d->b));
          Captured k{call_key(geometry, sha), "", json(), f.clean()};
          if (std::none_of(out.begin(), out.end(), [&](const Captured& o) { return o.key == k.key; })) {
            k.temp = fmt::format(".export-{}-{}.safetensors.tmp", ci, fi);
            k.entry = write_case_file(dir, k.temp, c, f, cap, sha);
          }
          out.push_back(std::move(k));
        }
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
    remove_temps();
    std::rethrow_exception(error);
  }

  json files = json::array();
  std::map<std::string, std::string> file_of_call;     // call_key -> file
  std::map<std::string, std::string> file_of_variant;  // cell id -> file
  try {
    for (std::size_t ci = 0; ci < case_order.size(); ++ci) {
      const auto& [c, faults] = groups.at(case_order[ci]);
      for (std::size_t fi = 0; fi < faults.size(); ++fi) {
        Captured& k = captured[ci][fi];
        auto it = file_of_call.find(k.key);
        if (it == file_of_call.end()) {
          const std::string file = fmt::format("{:04}.safetensors", files.size());
          fs::rename(fs::path(dir) / k.temp, fs::path(dir) / file);
          k.temp.clear();
          k.entry["file"] = file;
          k.entry["output"]["file"] = file;
          files.push_back(std::move(k.entry));
          it = file_of_call.emplace(k.key, file).first;
          if (k.clean && !clean_cells.count(case_order[ci])) ++sum.baselines;
        } else if (!k.temp.empty()) {
          fs::remove(fs::path(dir) / k.temp);  // the same call as an earlier case's: its file serves
          k.temp.clear();
        }
        file_of_variant[Cell{c, faults[fi]}.id()] = it->second;
      }
    }
  } catch (const fs::filesystem_error& e) {
    remove_temps();
    throw CaseFilesError(fmt::format("--out: cannot name a case file in {}: {}", dir, e.what()));
  }

  json jcells = json::array();
  for (const auto& cell : cells) {
    const std::string base = Cell{cell.c, FaultSpec{}}.id();
    jcells.push_back({{"id", cell.id()},
                      {"case", cell.c.id()},
                      {"fault", cell.fault.id()},
                      {"straddle", cell.c.straddles()},
                      {"file", file_of_variant.at(cell.id())},
                      {"baseline", cell.fault.clean() ? json(nullptr) : json(file_of_variant.at(base))}});
  }
  // The selected cells case files could not carry: `score` prints them, so a user sees what the file route
  // left to `pacheck run`.
  json left_out = json::array();
  for (const auto& [kind, n, reason] : left_out_kinds(sum))
    if (n > 0) left_out.push_back({{"kind", kind}, {"cells", n}, {"reason", reason}});
  json manifest = {{"format", kFormat},
                   {"format_version", kFormatVersion},
                   {"pacheck", pacheck_version()},
                   {"abi_version", PACHECK_ABI_VERSION},
                   {"suite", suite.name},
                   {"kernel_layout", opt.kernel_layout ? json(layout_name(*opt.kernel_layout)) : json(nullptr)},
                   {"left_out", left_out},
                   {"files", files},
                   {"cells", jcells}};
  sum.manifest = (fs::path(dir) / "manifest.json").string();
  try {
    // A temporary file renamed into place: a link planted at manifest.json is replaced, never written through.
    write_file_atomically(sum.manifest, manifest.dump(1) + "\n");
  } catch (const FileError& e) {
    throw CaseFilesError(fmt::format("--out: cannot write {}", e.what()));
  }
  sum.cells = static_cast<int>(cells.size());
  sum.files = static_cast<int>(files.size());
  return sum;
}

namespace {

/// One foreign output, or why there is none.
struct Output {
  std::vector<std::uint8_t> bytes;  ///< [num_seqs, num_heads, head_size] in the case's out dtype
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

/// Stands in for the foreign kernel: "runs" a call by copying the output the foreign runner computed for
/// exactly this call (matched by call_key: geometry and input SHA-256), so run_suite judges it like any
/// kernel's output.
class ReplayKernel final : public Kernel {
 public:
  /// `outputs` by call key; `declines` by case id; `case_of_call` the case id of each call key.
  ReplayKernel(std::string name, std::map<std::string, Output> outputs, std::map<std::string, CaseDecline> declines,
               std::map<std::string, std::string> case_of_call, bool control)
      : name_(std::move(name)),
        outputs_(std::move(outputs)),
        declines_(std::move(declines)),
        case_of_call_(std::move(case_of_call)),
        control_(control) {}
  std::string name() const override { return name_; }
  std::string description() const override { return "outputs of a foreign runner, replayed from case files"; }
  pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
  /// Every variant a case file carries (format_version 2, query_lens from 3): the runner declines what its
  /// kernel cannot take.
  unsigned variants() const override {
    return PACHECK_VARIANT_SLIDING_WINDOW | PACHECK_VARIANT_SOFT_CAP | PACHECK_VARIANT_ALIBI | PACHECK_VARIANT_SINKS |
           PACHECK_VARIANT_MULTI_QUERY;
  }
  Support supports(const Case& c) const override {
    const auto it = declines_.find(c.id());
    if (it != declines_.end() && it->second.declined == it->second.files) return Support::no(it->second.reason);
    return Support::yes();
  }
  std::optional<std::function<bool(const Cell&)>> expected_failures() const override {
    if (!control_) return std::nullopt;
    return std::function<bool(const Cell&)>(poisons_v_tail);
  }
  void run(const pacheck_kernel_args& a) const override {
    auto it = outputs_.find(call_key(geometry_of(a), inputs_sha256(a)));
    if (it == outputs_.end())
      throw KernelError("no exported case file holds the inputs pacheck regenerated for this cell (case files from "
                        "another pacheck version or edited?)");
    const Output& o = it->second;
    if (!o.error.empty()) throw KernelError(o.error);
    if (o.declined) {
      // supports() lets a case through only when the runner declined part of its files.
      const auto d = declines_.find(case_of(a));
      throw KernelError(fmt::format("{}, but the runner wrote outputs for {} other case file(s) of the same case: the "
                                    "files of a case are one call (shapes, dtypes, scales), so a runner declines all "
                                    "of them or none",
                                    d != declines_.end() ? d->second.reason : "declined by the runner",
                                    d != declines_.end() ? d->second.files - d->second.declined : 0));
    }
    const std::size_t row = static_cast<std::size_t>(a.head_size) * dtype_size(static_cast<DType>(a.out_dtype));
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
    const auto it = case_of_call_.find(call_key(geometry_of(a), inputs_sha256(a)));
    return it == case_of_call_.end() ? std::string() : it->second;
  }
  std::string name_;
  std::map<std::string, Output> outputs_;
  std::map<std::string, CaseDecline> declines_;  ///< by case id
  std::map<std::string, std::string> case_of_call_;
  bool control_;
};

/// The geometry of files[i] as a runner reads it: the entry's kShapeFields, the file's F32 scalars
/// scale, k_scale and v_scale, and (format_version 2) its variant scalars sliding_window (I32, >= 0) and
/// logits_soft_cap (F32, finite, >= 0; 0 = none), which must equal the entry's fields of the same names.
/// A version-1 file has no variant scalars: both are 0. The kScaleFormFields: the entry's (format_version 4,
/// equal to the file's __metadata__ keys of the same names when it has them), or for an older file the form
/// its tensors give (per_kv_head with k_scales_per_head / v_scales_per_head, else per_tensor for an fp8
/// kv_dtype, else none). Throws CaseFilesError naming `where` and a missing
/// or bad field, SafetensorsError for a scalar tensor that is missing or not a scalar of its type.
json geometry_of(const json& entry, const SafetensorsFile& in, const std::string& where, int format_version,
                 const std::vector<std::int32_t>& query_lens) {
  json g = json::object();
  for (const char* k : kShapeFields) g[k] = manifest_field<json>(entry, k, where);
  for (const char* k : kScalarFields) {
    float v;
    std::memcpy(&v, in.expect(k, StDType::F32, {}).data.data(), sizeof v);
    g[k] = scalar_text(v);
  }
  std::int32_t window = 0;
  float cap = 0.0f;
  if (format_version >= 2) {
    std::memcpy(&window, in.expect("sliding_window", StDType::I32, {}).data.data(), sizeof window);
    std::memcpy(&cap, in.expect("logits_soft_cap", StDType::F32, {}).data.data(), sizeof cap);
    if (window < 0)
      throw CaseFilesError(fmt::format("{}: tensor 'sliding_window': {} is negative (0 = no window, W > 0 = the last W "
                                       "positions)", in.path, window));
    if (!std::isfinite(cap) || cap < 0.0f)
      throw CaseFilesError(fmt::format("{}: tensor 'logits_soft_cap': {} is not a finite number >= 0 (0 = no cap)",
                                       in.path, scalar_text(cap)));
    // The entry restates them for runners that read the manifest: it must say what the file holds.
    const json ew = manifest_field<json>(entry, "sliding_window", where);
    const json ec = manifest_field<json>(entry, "logits_soft_cap", where);
    if (!ew.is_number_integer() || ew.get<std::int64_t>() != window)
      throw CaseFilesError(fmt::format("{}: field 'sliding_window' is {} but its file holds {}", where, ew.dump(), window));
    if (!ec.is_number() || scalar_text(ec.get<float>()) != scalar_text(cap))
      throw CaseFilesError(
          fmt::format("{}: field 'logits_soft_cap' is {} but its file holds {}", where, ec.dump(), scalar_text(cap)));
  } else {
    for (const char* k : {"sliding_window", "logits_soft_cap", "alibi_slopes", "sinks"})
      if (in.find(k) || entry.contains(k))
        throw CaseFilesError(fmt::format("{}: '{}' in a format_version 1 export (attention variants came with "
                                         "format_version 2)", where, k));
  }
  g["sliding_window"] = window;
  g["logits_soft_cap"] = scalar_text(cap);
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
  for (const char* k : kScaleFormFields) {
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

/// Checks the per-slot scale table `name` (k_scales_per_slot or v_scales_per_slot) of case file `in` against
/// case `c` (whose call is `call`) before its bytes are hashed: present exactly when the case has per-slot
/// scales for that cache (an fp8 case with ks=/vs=slotLO~HI) and the export is of format_version 4 or later,
/// F32 [num_blocks, num_kv_heads, block_size]. Its values are not checked here: the unwritten slots' entries
/// hold whatever poison the cell's fault put there, and inputs_sha256 holds every entry to the export.
/// Throws CaseFilesError (missing, unexpected, too old a format) or SafetensorsError (dtype, shape) naming
/// the file and the tensor.
void check_slot_table(const SafetensorsFile& in, const char* name, const Case& c, const pacheck_kernel_args& call,
                      int format_version) {
  const bool k = name[0] == 'k';
  const bool want = is_fp8(c.kv_dtype) && (k ? c.k_scale : c.v_scale).per_slot();
  const StTensor* t = in.find(name);
  if (t && format_version < 4)
    throw CaseFilesError(fmt::format("{}: tensor '{}' in a format_version {} export (per-slot scale tables came with "
                                     "format_version 4)", in.path, name, format_version));
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
  if (format_version < 3) {
    for (const char* k : {"query_lens", "query_start_loc"})
      if (in.find(k) || entry.contains(k))
        throw CaseFilesError(fmt::format("{}: '{}' in a format_version {} export (several query tokens per sequence "
                                         "came with format_version 3)", where, k, format_version));
    return q;
  }
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

}  // namespace

RunSummary score_cases(const std::string& cases_dir, const std::string& outputs_dir, const ScoreOptions& opt,
                       std::string* suite_name, std::vector<LeftOut>* left_out) {
  const std::string mpath = (fs::path(cases_dir) / "manifest.json").string();
  std::string mtext;
  try {
    mtext = read_regular_file(mpath, kManifestLimit);
  } catch (const FileError& e) {
    throw CaseFilesError(
        fmt::format("--cases: cannot read {} (is '{}' a directory written by pacheck export?)", e.what(), cases_dir));
  }
  const Manifest m = parse_manifest(mtext, mpath);
  if (!outputs_dir.empty() && !fs::is_directory(outputs_dir))
    throw CaseFilesError(fmt::format("{}: no such directory (--outputs)", outputs_dir));

  // Every exported input must still be what the manifest says it is: a replay keyed by call (geometry and
  // SHA-256) would otherwise silently score outputs of different inputs.
  std::map<std::string, Output> outputs;         // call_key -> output
  std::map<std::string, CaseDecline> declines;   // case id -> what the runner declined of it
  std::map<std::string, std::string> case_of_call;  // call_key -> case id
  std::map<std::string, json> geometry_of_file;  // files[i].file -> its geometry
  for (const ManifestFile& mf : m.files) {
    const std::string& where = mf.where;
    const json& e = mf.entry;
    const std::string& file = mf.file;
    const std::string& sha = mf.inputs_sha256;
    const std::string case_id = mf.c.id();
    const Case& c = mf.c;
    const std::int64_t S = c.num_seqs(), H = c.num_heads, D = c.head_size;
    const std::string cpath = (fs::path(cases_dir) / file).string();
    std::string cbytes;
    try {
      cbytes = read_regular_file(cpath, kCaseFileLimit);
    } catch (const FileError& err) {
      throw CaseFilesError(fmt::format("--cases: {}: cannot read {}", where, err.what()));
    }
    const SafetensorsFile in =
        parse_safetensors(reinterpret_cast<const std::uint8_t*>(cbytes.data()), cbytes.size(), cpath);
    cbytes = std::string();  // the tensors hold their own copies
    std::vector<Bytes> parts;
    for (const char* name : {"query", "key_cache", "value_cache", "block_tables", "seq_lens"}) {
      const StTensor* t = in.find(name);
      if (!t) throw SafetensorsError(in.path, name, "missing");
      parts.push_back({t->data.data(), t->data.size()});
    }
    if (m.format_version < 2 && c.has_variant())
      throw CaseFilesError(fmt::format("{}: case '{}' has an attention variant, which a format_version 1 export "
                                       "cannot carry", where, case_id));
    if (m.format_version < 3 && c.max_query_len() > 1)
      throw CaseFilesError(fmt::format("{}: case '{}' has several query tokens per sequence (query_lens), which a "
                                       "format_version {} export cannot carry", where, case_id, m.format_version));
    if (m.format_version < 4 && is_fp8(c.kv_dtype) && (c.k_scale.per_slot() || c.v_scale.per_slot()))
      throw CaseFilesError(fmt::format("{}: case '{}' has per-slot fp8 scale tables, which a format_version {} export "
                                       "cannot carry", where, case_id, m.format_version));
    in.expect("seq_lens", StDType::I32, {S});
    const std::vector<std::int32_t> query_lens = read_query_lens(in, e, where, S, m.format_version);
    std::int64_t T = 0;  // rows of query and out: num_query_tokens
    for (std::int32_t q : query_lens) T += q;
    check_head_tensor(in, "alibi_slopes", c.alibi_slopes.resolve(c.num_heads), c);
    check_head_tensor(in, "sinks", c.sinks.resolve(c.num_heads), c);
    const pacheck_kernel_args call = call_of(c);
    check_slot_table(in, "k_scales_per_slot", c, call, m.format_version);
    check_slot_table(in, "v_scales_per_slot", c, call, m.format_version);
    for (const char* name : {"k_scales_per_head", "v_scales_per_head", "alibi_slopes", "sinks", "k_scales_per_slot",
                             "v_scales_per_slot"}) {
      const StTensor* t = in.find(name);
      parts.push_back(t ? Bytes{t->data.data(), t->data.size()} : Bytes{nullptr, 0});
    }
    in.expect("query", st_of(c.q_dtype), {T, H, D});
    // The caches' bytes mean what the case's kv dtype says: their tag must be its storage tag, and a file
    // that names its kv dtype (every export does; U8 caches depend on it) must name the case's.
    for (const char* name : {"key_cache", "value_cache"}) {
      const StDType want = kv_st_of(c.kv_dtype);
      if (in.find(name)->dtype != want)
        throw SafetensorsError(in.path, name, fmt::format("dtype {} (kv_dtype {} is stored as {})",
                                                          st_dtype_name(in.find(name)->dtype), dtype_name(c.kv_dtype),
                                                          st_dtype_name(want)));
    }
    if (auto it = in.metadata.find("kv_dtype"); it != in.metadata.end() && it->second != dtype_name(c.kv_dtype))
      throw CaseFilesError(fmt::format("{}: metadata kv_dtype '{}' but the case's kv dtype is {}", in.path, it->second,
                                       dtype_name(c.kv_dtype)));
    in.expect("out", st_of(c.out_dtype), {T, H, D});
    const std::string got = hash_inputs(parts);
    if (got != sha)
      throw CaseFilesError(fmt::format("{}: inputs changed since export (SHA-256 {} , manifest says {})", in.path, got, sha));
    // The entry's fields are what a runner reads the bytes with: they must be the call the file's case makes.
    const json geometry = geometry_of(e, in, where, m.format_version, query_lens);
    if (const auto d = first_difference(geometry, expected_geometry(c)))
      throw CaseFilesError(fmt::format("{}: file '{}': field '{}' is {} but its case '{}' gives a kernel {}", where,
                                       file, d->field, d->a, case_id, d->b));
    const int x = layout_vector_width(c.layout, c.kv_dtype);
    in.expect("key_cache", kv_st_of(c.kv_dtype), key_shape(call, x));
    in.expect("value_cache", kv_st_of(c.kv_dtype), value_shape(call));
    in.expect("block_tables", StDType::I32, {S, call.max_blocks_per_seq});
    geometry_of_file[file] = geometry;

    Output o;
    const std::string opath = (fs::path(outputs_dir) / file).string();
    const std::string dpath = opath + kDeclineSuffix;
    std::error_code ec;
    CaseDecline& cd = declines[case_id];
    ++cd.files;
    const bool has_output = fs::exists(fs::symlink_status(opath, ec));
    if (fs::exists(fs::symlink_status(dpath, ec))) {
      std::string note;
      try {
        note = read_regular_file(dpath, kDeclineNoteLimit);
      } catch (const FileError& err) {
        throw CaseFilesError(fmt::format("--outputs: decline note of {}: cannot read {}", where, err.what()));
      }
      if (has_output) {
        o.error = fmt::format("{}: the runner wrote both an output and a decline note ({}) for {}: it must write one "
                              "of them", opath, dpath, file);
      } else {
        o.declined = true;
        if (cd.declined++ == 0) cd.reason = fmt::format("declined by the runner: {} ({})", decline_reason(note), dpath);
      }
    } else if (!has_output) {
      o.error = fmt::format("{}: no output file (the runner did not write one for {})", opath, file);
    } else {
      // An output holds one [S, H, D] tensor: anything much larger is not one, and is refused before it is
      // read (a sparse 10 GiB file used to be read whole). A FIFO, directory or device is an input error too.
      const std::uint64_t out_bytes = static_cast<std::uint64_t>(T * H * D) * dtype_size(c.out_dtype);
      const ReadLimit limit{8 + kMaxSafetensorsHeader + out_bytes, "an output file of this case"};
      std::string obytes;
      try {
        obytes = read_regular_file(opath, limit);
      } catch (const FileError& err) {
        throw CaseFilesError(fmt::format("--outputs: output of {}: cannot read {}", where, err.what()));
      }
      try {
        const SafetensorsFile out =
            parse_safetensors(reinterpret_cast<const std::uint8_t*>(obytes.data()), obytes.size(), opath);
        o.bytes = out.expect("out", st_of(c.out_dtype), {T, H, D}).data;
      } catch (const SafetensorsError& err) {
        o.error = err.what();
      }
    }
    case_of_call[call_key(geometry, sha)] = case_id;
    outputs[call_key(geometry, sha)] = std::move(o);
  }

  Suite suite;
  suite.name = m.suite;
  suite.file = mpath;
  for (const ManifestCell& mc : m.cells) {
    const std::string& where = mc.where;
    SuiteCell sc;
    sc.native_layout = false;  // the export fixed every layout
    sc.cell = mc.cell;
    // A file is shared only by cells of one call: a cell whose case gives a kernel another call than the
    // file it claims would be judged against the wrong oracle (exports before files were keyed by call
    // shared files between geometries of identical bytes, e.g. h16/8 d256 and h32/16 d128).
    const json expected = expected_geometry(sc.cell.c);
    for (const char* key : {"file", "baseline"}) {
      const json& f = key == std::string_view("file") ? mc.file : mc.baseline;
      if (f.is_null()) continue;
      const auto it = f.is_string() ? geometry_of_file.find(f.get<std::string>()) : geometry_of_file.end();
      if (it == geometry_of_file.end())
        throw CaseFilesError(fmt::format("{}: {} {} is not a file of files[]", where, key, f.dump()));
      if (const auto d = first_difference(it->second, expected))
        throw CaseFilesError(fmt::format(
            "{}: cell '{}' claims {} '{}', whose field '{}' is {} but the cell's case gives a kernel {}: a case file "
            "is shared only by cells of the same call (shapes, dtypes, layout, strides, scales and input bytes); "
            "this export shares it across calls, as pacheck export did before it keyed files by call: export again",
            where, sc.cell.id(), key, it->first, d->field, d->a, d->b));
    }
    suite.cells.push_back(std::move(sc));
  }
  if (!opt.cells.empty()) {
    // Only the named cells (their clean twins' outputs stay loaded: a poisoned cell is judged against them).
    std::set<std::string> ids;
    for (const auto& sc : suite.cells) ids.insert(sc.cell.id());
    for (const auto& id : opt.cells)
      if (!ids.count(id))
        throw CaseFilesError(fmt::format("--cell '{}': no such cell in {} ({} cells; the ids are the manifest's "
                                         "cells[j].id, as score prints them)", id, mpath, ids.size()));
    const std::set<std::string> keep(opt.cells.begin(), opt.cells.end());
    suite.cells.erase(std::remove_if(suite.cells.begin(), suite.cells.end(),
                                     [&](const SuiteCell& sc) { return !keep.count(sc.cell.id()); }),
                      suite.cells.end());
  }
  if (suite_name) *suite_name = suite.name;
  if (left_out) *left_out = m.left_out;
  auto kernel = std::make_shared<ReplayKernel>(opt.kernel_name, std::move(outputs), std::move(declines),
                                               std::move(case_of_call), opt.negative_control);
  RunOptions ro = opt.run;
  ro.filter.reset();
  ro.seed.reset();
  // The runner already wrote a control's outputs for every cell, and judging them costs little: a replayed
  // control is judged on every cell (it must pass those outside its expected failures), as before not_run.
  ro.controls_everywhere = true;
  if (opt.preflight) opt.preflight(suite, {kernel}, ro);
  return run_suite(suite, {kernel}, "cpu", ro);
}

}  // namespace pacheck
