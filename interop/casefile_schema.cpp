#include "interop/casefile_schema.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/abi_fields.hpp"
#include "core/case_fields.hpp"
#include "core/digest.hpp"
#include "kernels/kernel.hpp"
#include "kernels/mla_kernel.hpp"
#include "paging/pager.hpp"

namespace pacheck::casefile {

std::optional<StDType> st_tag(DType t) {
  // Mapped by name so the export follows whatever dtypes the build has.
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

std::optional<StDType> kv_tag(DType t) {
  if (auto tag = st_tag(t)) return tag;
  if (is_fp8(t)) return StDType::U8;
  return std::nullopt;
}

StDType kv_st_of(DType t) {
  if (auto tag = kv_tag(t)) return *tag;
  throw CaseFilesError(fmt::format("kv dtype {} has no safetensors storage", dtype_name(t)));
}

std::size_t query_rows(const pacheck_kernel_args& a) {
  return static_cast<std::size_t>(a.query_start_loc_host && a.num_query_tokens > 0 ? a.num_query_tokens : a.num_seqs);
}

std::vector<std::int32_t> query_lens_of(const pacheck_kernel_args& a) {
  std::vector<std::int32_t> q(static_cast<std::size_t>(a.num_seqs), 1);
  if (a.query_start_loc_host)
    for (int s = 0; s < a.num_seqs; ++s) q[s] = a.query_start_loc_host[s + 1] - a.query_start_loc_host[s];
  return q;
}

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

namespace {

StDType f32_tag(const pacheck_kernel_args&) { return StDType::F32; }
StDType i32_tag(const pacheck_kernel_args&) { return StDType::I32; }
int key_width(const pacheck_kernel_args& a) {
  return layout_vector_width(static_cast<Layout>(a.layout), static_cast<DType>(a.kv_dtype));
}

}  // namespace

const std::vector<InputTensor>& input_tensors() {
  static const std::vector<InputTensor> inputs = {
      {"query", false, [](const pacheck_kernel_args& a) { return st_of(static_cast<DType>(a.q_dtype)); },
       [](const pacheck_kernel_args& a) {
         return std::vector<std::int64_t>{static_cast<std::int64_t>(query_rows(a)), a.num_heads, a.head_size};
       }},
      {"key_cache", false, [](const pacheck_kernel_args& a) { return kv_st_of(static_cast<DType>(a.kv_dtype)); },
       [](const pacheck_kernel_args& a) { return key_shape(a, key_width(a)); }},
      {"value_cache", false, [](const pacheck_kernel_args& a) { return kv_st_of(static_cast<DType>(a.kv_dtype)); },
       value_shape},
      {"block_tables", false, i32_tag,
       [](const pacheck_kernel_args& a) { return std::vector<std::int64_t>{a.num_seqs, a.max_blocks_per_seq}; }},
      {"seq_lens", false, i32_tag, [](const pacheck_kernel_args& a) { return std::vector<std::int64_t>{a.num_seqs}; }},
      {"k_scales_per_head", true, f32_tag,
       [](const pacheck_kernel_args& a) { return std::vector<std::int64_t>{a.num_kv_heads}; }},
      {"v_scales_per_head", true, f32_tag,
       [](const pacheck_kernel_args& a) { return std::vector<std::int64_t>{a.num_kv_heads}; }},
      {"alibi_slopes", true, f32_tag, [](const pacheck_kernel_args& a) { return std::vector<std::int64_t>{a.num_heads}; }},
      {"sinks", true, f32_tag, [](const pacheck_kernel_args& a) { return std::vector<std::int64_t>{a.num_heads}; }},
      {"k_scales_per_slot", true, f32_tag,
       [](const pacheck_kernel_args& a) { return std::vector<std::int64_t>{a.num_blocks, a.num_kv_heads, a.block_size}; }},
      {"v_scales_per_slot", true, f32_tag,
       [](const pacheck_kernel_args& a) { return std::vector<std::int64_t>{a.num_blocks, a.num_kv_heads, a.block_size}; }},
  };
  return inputs;
}

const void* input_pointer(const pacheck_kernel_args& a, const InputTensor& t) {
  const AbiField* f = find_abi_field(AbiStruct::kernel_args, t.name);
  const void* p = nullptr;
  std::memcpy(&p, reinterpret_cast<const unsigned char*>(&a) + f->offset, sizeof p);
  return p;
}

const char* file_name(const pacheck_kernel_args& a, const InputTensor& t) {
  if (!mla_call(a)) return t.name;
  const std::string_view n = t.name;
  return n == "key_cache" ? "latent_cache" : n == "value_cache" ? nullptr : t.name;
}

std::vector<std::int64_t> file_shape(const pacheck_kernel_args& a, const InputTensor& t) {
  if (mla_call(a) && std::string_view(t.name) == "key_cache") return {a.num_blocks, a.block_size, a.head_size};
  return t.shape(a);
}

std::size_t input_bytes(const pacheck_kernel_args& a, const InputTensor& t) {
  if ((t.optional && !input_pointer(a, t)) || !file_name(a, t)) return 0;
  std::size_t n = 1;
  for (std::int64_t d : t.shape(a)) n *= static_cast<std::size_t>(d);
  const StDType tag = t.dtype(a);
  return n * (tag == StDType::F32 || tag == StDType::I32 ? 4 : tag == StDType::F16 || tag == StDType::BF16 ? 2 : 1);
}

std::string hash_inputs(const std::vector<Bytes>& parts) {
  Sha256 h;
  for (const auto& b : parts)
    if (b.n) h.update(b.p, b.n);
  return h.hex();
}

std::string scale_form_name(bool fp8, bool per_slot, bool per_head) {
  if (!fp8) return "none";
  return per_slot ? "per_slot" : per_head ? "per_kv_head" : "per_tensor";
}

std::string scale_form_name(const Case& c, const KvScale& s) {
  return scale_form_name(is_fp8(c.kv_dtype), s.per_slot(), s.per_head());
}

std::string scalar_text(float v) { return std::isnan(v) ? std::string("nan") : fmt::format("{}", v); }

json scalar_value(const pacheck_kernel_args& a, std::string_view name) {
  const AbiField* f = find_abi_field(AbiStruct::kernel_args, name);
  const unsigned char* at = reinterpret_cast<const unsigned char*>(&a) + f->offset;
  if (f->type == AbiType::f32) {
    float v;
    std::memcpy(&v, at, sizeof v);
    return scalar_text(v);
  }
  std::int32_t v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

namespace {

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

}  // namespace

const std::vector<std::string>& shape_fields() {
  static const std::vector<std::string> names = {"num_seqs", "num_heads", "num_kv_heads", "head_size", "block_size",
                                                 "num_blocks", "max_blocks_per_seq", "layout", "x", "q_dtype",
                                                 "kv_dtype", "out_dtype", "strides"};
  return names;
}

const std::vector<std::string>& geometry_fields() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v = shape_fields();
    for (const CaseField& f : case_field_table())
      if (!f.casefile_scalar.empty()) v.emplace_back(f.casefile_scalar);
    v.insert(v.end(), {"query_lens", "k_scale_form", "v_scale_form"});
    return v;
  }();
  return names;
}

json geometry_of(const pacheck_kernel_args& a) {
  const auto layout = static_cast<Layout>(a.layout);
  const auto kv = static_cast<DType>(a.kv_dtype);
  // The values in shape_fields() order (its names are the one spelling of them).
  const json values[] = {a.num_seqs,     a.num_heads,
                         a.num_kv_heads, a.head_size,
                         a.block_size,   a.num_blocks,
                         a.max_blocks_per_seq, layout_name(layout),
                         layout_vector_width(layout, kv), dtype_name(static_cast<DType>(a.q_dtype)),
                         dtype_name(kv), dtype_name(static_cast<DType>(a.out_dtype)),
                         strides_json(a)};
  json g = json::object();
  for (std::size_t i = 0; i < shape_fields().size(); ++i) g[shape_fields()[i]] = values[i];
  for (const CaseField& f : case_field_table())
    if (!f.casefile_scalar.empty()) g[std::string(f.casefile_scalar)] = scalar_value(a, f.casefile_scalar);
  g["query_lens"] = query_lens_of(a);
  const bool fp8 = is_fp8(kv);
  g["k_scale_form"] = scale_form_name(fp8, a.k_scales_per_slot != nullptr, a.k_scales_per_head != nullptr);
  g["v_scale_form"] = scale_form_name(fp8, a.v_scales_per_slot != nullptr, a.v_scales_per_head != nullptr);
  return g;
}

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
  // An MLA case's call is make_mla_args' (one latent cache as both caches, v_scale = k_scale, out rows v_head_dim
  // wide), as DeviceInputs::args makes it.
  pacheck_kernel_args a =
      c.is_mla() ? make_mla_args(mla_case_of(c), pool, nullptr, nullptr, nullptr, nullptr, nullptr,
                                 pool.query_start_loc.empty() ? nullptr : pool.query_start_loc.data())
                 : make_args(c, pool, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, pool.k_scales.data(),
                             pool.v_scales.data(), alibi.data(), sinks.data(), pool.query_start_loc.data(),
                             pool.k_slot_scales.data(), pool.v_slot_scales.data());
  a.k_scales_per_head = a.v_scales_per_head = nullptr;  // the pointers into `pool` die with it
  a.alibi_slopes = a.sinks = nullptr;
  a.query_start_loc = a.query_start_loc_host = nullptr;
  a.k_scales_per_slot = a.v_scales_per_slot = nullptr;
  return a;
}

json expected_geometry(const Case& c) {
  json g = geometry_of(call_of(c));
  std::vector<std::int32_t> q;
  for (int s = 0; s < c.num_seqs(); ++s) q.push_back(c.query_len(s));
  g["query_lens"] = q;
  g["k_scale_form"] = scale_form_name(c, c.k_scale);  // call_of's scale pointers died with its pool too
  g["v_scale_form"] = scale_form_name(c, c.v_scale);
  return g;
}

std::optional<FieldDiff> first_difference(const json& a, const json& b) {
  for (const auto& k : geometry_fields()) {
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

std::string call_key(const json& geometry, const std::string& sha) { return geometry.dump() + " " + sha; }

void check_case_version(const Case& c, int format_version, const std::string& where) {
  if (const CaseFileGate* g = case_file_gate(c, format_version))
    throw CaseFilesError(fmt::format("{}: case '{}' has {}, which a format_version {} export cannot carry", where, c.id(),
                                     g->carries, format_version));
}

void check_no_later_tensors(const SafetensorsFile& in, const json& entry, const std::string& where, int format_version) {
  for (const CaseField& f : case_field_table())
    for (const CaseFileGate& g : f.gates) {
      if (!g.needs || g.version <= format_version) continue;
      for (std::size_t start = 0; start < g.tensors.size();) {
        const auto space = std::min(g.tensors.find(' ', start), g.tensors.size());
        const std::string name(g.tensors.substr(start, space - start));
        start = space + 1;
        if (in.find(name) || entry.contains(name))
          throw CaseFilesError(fmt::format("{}: '{}' in a format_version {} export ({} came with format_version {})", where,
                                           name, format_version, g.feature, g.version));
      }
    }
}

}  // namespace pacheck::casefile
