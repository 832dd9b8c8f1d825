// The case-file format's schema, shared by export (interop/export.cpp) and score (interop/score.cpp): the
// safetensors tags of pacheck's dtypes, the kernel inputs a case file holds (in the order inputs_sha256 hashes
// them), the geometry of a call (every field a kernel reads besides its buffers), the call a case makes, and
// the format_version gates. The case's own fields come from core/case_fields.hpp: its rows with a case-file
// scalar are written, read and compared here without being named.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/case.hpp"
#include "interop/manifest.hpp"
#include "interop/safetensors.hpp"
#include "pacheck/kernel_abi.h"

namespace pacheck::casefile {

using nlohmann::json;

inline constexpr int kFormatVersion = kManifestFormatVersion;
inline constexpr const char* kFormat = kManifestFormat;

/// The safetensors tag of an element type, or nullopt when the format has none (fp8 e4m3fnuz: the format
/// knows only the OCP fp8 encodings; caches of it are stored with kv_tag's U8).
std::optional<StDType> st_tag(DType t);
/// st_tag, or CaseFilesError naming the dtype.
StDType st_of(DType t);
/// The tag key_cache / value_cache are stored with: st_tag, or U8 for an fp8 encoding the format cannot
/// tag (e4m3fnuz), whose name the file's metadata key "kv_dtype" and the manifest's "kv_dtype" then give.
std::optional<StDType> kv_tag(DType t);
/// kv_tag, or CaseFilesError naming the dtype.
StDType kv_st_of(DType t);

/// Rows of `query` and `out` in a call: num_query_tokens with several query tokens per sequence, else one
/// per sequence.
std::size_t query_rows(const pacheck_kernel_args& a);
/// query_lens of a call: from query_start_loc_host when set, else 1 for each sequence.
std::vector<std::int32_t> query_lens_of(const pacheck_kernel_args& a);

/// True for an MLA call (kv_lora_rank > 0; kernels/mla_kernel.hpp): its one latent cache is key_cache and
/// value_cache at once ([num_blocks, block_size, 1, head_size], head_size = kv_lora_rank + qk_rope_head_dim), and
/// its out rows are v_head_dim wide.
inline bool mla_call(const pacheck_kernel_args& a) { return a.kv_lora_rank > 0; }
/// Values per head of `out` in call `a`: v_head_dim for an MLA call, else head_size.
inline int out_width(const pacheck_kernel_args& a) { return mla_call(a) ? a.v_head_dim : a.head_size; }

/// One kernel input a case file holds: the pacheck_kernel_args pointer of the same name, its safetensors tag
/// and shape in a call `a`. Optional inputs are present only when the call has the pointer (per-head and
/// per-slot fp8 scales, ALiBi slopes, sinks). An MLA call's caches are one memory, held once (file_name).
struct InputTensor {
  const char* name;
  bool optional;
  StDType (*dtype)(const pacheck_kernel_args& a);
  std::vector<std::int64_t> (*shape)(const pacheck_kernel_args& a);
};
/// query, key_cache, value_cache, block_tables, seq_lens, then the optional k_scales_per_head,
/// v_scales_per_head, alibi_slopes, sinks, k_scales_per_slot, v_scales_per_slot: the order inputs_sha256
/// hashes them in.
const std::vector<InputTensor>& input_tensors();
/// The host pointer of input `t` in call `a` (null for an optional input the call lacks).
const void* input_pointer(const pacheck_kernel_args& a, const InputTensor& t);
/// The tensor input `t` of call `a` is in its case file, or nullptr when the file does not hold it: its own
/// name, except in an MLA call (format_version 5), whose key_cache is the latent cache, held as "latent_cache"
/// [num_blocks, block_size, kv_lora_rank + qk_rope_head_dim] (vLLM's MLA cache shape; file_shape), and whose
/// value_cache, the same memory, is not held again.
const char* file_name(const pacheck_kernel_args& a, const InputTensor& t);
/// The shape input `t` of call `a` has in its case file: t.shape(a), or latent_cache's.
std::vector<std::int64_t> file_shape(const pacheck_kernel_args& a, const InputTensor& t);
/// Bytes of input `t` in call `a` as its case file holds and inputs_sha256 hashes them (0 when absent, and for an
/// MLA call's value_cache: its latent cache is hashed once, as key_cache).
std::size_t input_bytes(const pacheck_kernel_args& a, const InputTensor& t);

/// One input buffer of a call, in host memory.
struct Bytes {
  const void* p;
  std::size_t n;
};
/// SHA-256 of the inputs of one call, in input_tensors() order; absent (empty) ones take no part, so a case
/// without them hashes exactly its five tensors (and every case of an older export hashes as it did); an MLA
/// call hashes query, its latent cache once, block_tables and seq_lens (and query_start_loc's tokens via query).
std::string hash_inputs(const std::vector<Bytes>& parts);

/// Shapes of the pool tensors, per pacheck_layout (include/pacheck/kernel_abi.h); `x` the key vector width.
std::vector<std::int64_t> key_shape(const pacheck_kernel_args& a, int x);
std::vector<std::int64_t> value_shape(const pacheck_kernel_args& a);

/// The name of an fp8 scale form as the manifest's k_scale_form / v_scale_form spell it (the Python module's
/// CaseInfo uses the same names): "none" (not fp8), "per_tensor", "per_kv_head" or "per_slot".
std::string scale_form_name(bool fp8, bool per_slot, bool per_head);
/// The scale form of one cache of case `c` (`s`: its k_scale or v_scale).
std::string scale_form_name(const Case& c, const KvScale& s);
/// A scale as a geometry holds it: fp32's shortest round-trip text, and "nan" for every NaN (the per-head
/// case's scalars), so that equal calls compare equal.
std::string scalar_text(float v);

/// The case-file scalar of row `f` (a case field with casefile_scalar) in call `a`, as a geometry holds it:
/// an int for an I32 field, scalar_text for an F32 one.
json scalar_value(const pacheck_kernel_args& a, std::string_view name);

/// Everything of one call a kernel reads besides the bytes of its buffers: the shape fields (num_seqs,
/// num_heads, num_kv_heads, head_size, block_size, num_blocks, max_blocks_per_seq, layout, x, q/kv/out
/// dtype, strides in elements of query, key_cache, value_cache, block_tables and out), the case fields'
/// case-file scalars (scale, k_scale, v_scale, sliding_window, logits_soft_cap, kv_lora_rank,
/// qk_rope_head_dim, v_head_dim: core/case_fields.hpp's casefile_scalar), query_lens and the scale forms
/// (k_scale_form, v_scale_form: from which scale pointers the call has). Two calls with equal geometries and equal inputs_sha256 are the same call to any kernel, so
/// they may share a case file and its output; h16/8 d256 and h32/16 d128 at the same lengths and seed have
/// byte-identical inputs and differ only here.
json geometry_of(const pacheck_kernel_args& a);
/// The shape fields of a geometry, each spelled and valued as the manifest's files[i] entry has it.
const std::vector<std::string>& shape_fields();
/// Every field of a geometry in the order first_difference compares them: the shape fields, the case-file
/// scalars, query_lens, k_scale_form, v_scale_form.
const std::vector<std::string>& geometry_fields();

/// The call a suite cell of case `c` gives a kernel, without generating its inputs: make_args (make_mla_args for
/// an MLA case) over a pool of the pager's dimensions (num_blocks = the blocks the sequences need +
/// spare_blocks, max_blocks_per_seq = the longest sequence's blocks + padding_columns) and the case's scales
/// (suite cells carry no scale fault). Buffer pointers are null. export_cases checks it against every call it captures, so `score` can
/// hold a manifest's cells to it.
pacheck_kernel_args call_of(const Case& c);
/// The geometry of the call a cell of case `c` makes: geometry_of(call_of(c)) with the case's query_lens and
/// scale forms.
json expected_geometry(const Case& c);

/// The first field (in geometry_fields() order) in which geometries `a` and `b` differ: its name
/// ("strides.TENSOR" for a stride) and both values as JSON text; nullopt when they are equal.
struct FieldDiff {
  std::string field, a, b;
};
std::optional<FieldDiff> first_difference(const json& a, const json& b);

/// The key cells share a file (and its output) by: their geometry and the SHA-256 of their input bytes.
std::string call_key(const json& geometry, const std::string& sha);

/// Throws CaseFilesError "WHERE: case 'ID' has CARRIES, which a format_version N export cannot carry" when
/// case `c` needs a later format_version than `format_version` (core/case_fields.hpp's gates).
void check_case_version(const Case& c, int format_version, const std::string& where);
/// Throws CaseFilesError "WHERE: 'NAME' in a format_version N export (FEATURE came with format_version M)" for a
/// tensor of case file `in` or a field of its manifest entry that a later format_version than the export's
/// added.
void check_no_later_tensors(const SafetensorsFile& in, const json& entry, const std::string& where, int format_version);

}  // namespace pacheck::casefile
