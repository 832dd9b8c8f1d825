#include "core/abi_fields.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "pacheck/kernel_abi.h"

namespace pacheck {

namespace {

template <class T>
constexpr AbiType abi_type_of() {
  if constexpr (std::is_array_v<T>) return AbiType::i64_array;
  else if constexpr (std::is_pointer_v<T>) return AbiType::pointer;
  else if constexpr (std::is_enum_v<T>) return AbiType::enum32;
  else if constexpr (std::is_same_v<T, float>) return AbiType::f32;
  else if constexpr (std::is_same_v<T, std::int32_t>) return AbiType::i32;
  else if constexpr (std::is_same_v<T, std::uint32_t>) return AbiType::u32;
  else if constexpr (std::is_same_v<T, std::int64_t>) return AbiType::i64;
  else if constexpr (std::is_same_v<T, std::size_t>) return AbiType::size;
  else static_assert(sizeof(T) == 0, "a field type the ABI table does not know");
}

// One row: the field's name, offset, size, alignment and type come from the header itself.
#define PACHECK_ABI_FIELD(S, TAG, F, V)                                                                       \
  AbiField {                                                                                                  \
    AbiStruct::TAG, #F, offsetof(S, F), sizeof(S::F), alignof(decltype(S::F)), abi_type_of<decltype(S::F)>(), V \
  }
#define ARGS(F, V) PACHECK_ABI_FIELD(pacheck_kernel_args, kernel_args, F, V)
#define INFO(F, V) PACHECK_ABI_FIELD(pacheck_case_info, case_info, F, V)
#define DESC(F, V) PACHECK_ABI_FIELD(pacheck_kernel_desc, kernel_desc, F, V)
#define REG(F, V) PACHECK_ABI_FIELD(pacheck_registrar, registrar, F, V)

constexpr AbiField kFields[] = {
    ARGS(struct_size, 1), ARGS(num_seqs, 1), ARGS(num_heads, 1), ARGS(num_kv_heads, 1), ARGS(head_size, 1),
    ARGS(block_size, 1), ARGS(num_blocks, 1), ARGS(max_blocks_per_seq, 1), ARGS(layout, 1), ARGS(q_dtype, 1),
    ARGS(kv_dtype, 1), ARGS(out_dtype, 1), ARGS(query, 1), ARGS(q_stride_seq, 1), ARGS(q_stride_head, 1),
    ARGS(key_cache, 1), ARGS(value_cache, 1), ARGS(k_strides, 1), ARGS(v_strides, 1), ARGS(block_tables, 1),
    ARGS(block_tables_stride, 1), ARGS(seq_lens, 1), ARGS(out, 1), ARGS(out_stride_seq, 1), ARGS(out_stride_head, 1),
    ARGS(scale, 1), ARGS(k_scale, 1), ARGS(v_scale, 1), ARGS(k_scales_per_head, 1), ARGS(v_scales_per_head, 1),
    ARGS(stream, 1),
    ARGS(max_seq_len, 2), ARGS(seq_lens_host, 2), ARGS(max_query_len, 2), ARGS(num_query_tokens, 2),
    ARGS(query_start_loc, 2), ARGS(query_start_loc_host, 2), ARGS(sliding_window, 2), ARGS(logits_soft_cap, 2),
    ARGS(alibi_slopes, 2), ARGS(sinks, 2),
    ARGS(k_scales_per_slot, 3), ARGS(v_scales_per_slot, 3),
    ARGS(kv_lora_rank, 4), ARGS(qk_rope_head_dim, 4), ARGS(v_head_dim, 4),

    INFO(struct_size, 1), INFO(num_seqs, 1), INFO(num_heads, 1), INFO(num_kv_heads, 1), INFO(head_size, 1),
    INFO(block_size, 1), INFO(layout, 1), INFO(q_dtype, 1), INFO(kv_dtype, 1), INFO(out_dtype, 1), INFO(seq_lens, 1),
    INFO(max_seq_len, 1), INFO(scale, 1),
    INFO(k_scale_form, 2), INFO(v_scale_form, 2), INFO(k_scale, 2), INFO(v_scale, 2), INFO(k_scales_per_head, 2),
    INFO(v_scales_per_head, 2), INFO(max_query_len, 2), INFO(query_lens, 2), INFO(sliding_window, 2),
    INFO(logits_soft_cap, 2), INFO(has_alibi, 2), INFO(has_sinks, 2),
    INFO(kv_lora_rank, 4), INFO(qk_rope_head_dim, 4), INFO(v_head_dim, 4),

    DESC(struct_size, 1), DESC(name, 1), DESC(description, 1), DESC(device, 1), DESC(flags, 1), DESC(layouts, 1),
    DESC(num_layouts, 1), DESC(q_dtypes, 1), DESC(num_q_dtypes, 1), DESC(kv_dtypes, 1), DESC(num_kv_dtypes, 1),
    DESC(out_dtypes, 1), DESC(num_out_dtypes, 1), DESC(head_sizes, 1), DESC(num_head_sizes, 1), DESC(block_sizes, 1),
    DESC(num_block_sizes, 1), DESC(gqa_ratios, 1), DESC(num_gqa_ratios, 1), DESC(supports, 1), DESC(run, 1),
    DESC(user_data, 1),
    DESC(variants, 2), DESC(scale_forms, 2),

    REG(struct_size, 1), REG(abi_version, 1), REG(add_kernel, 1), REG(error, 1), REG(error_size, 1), REG(host, 1),
};
#undef ARGS
#undef INFO
#undef DESC
#undef REG
#undef PACHECK_ABI_FIELD

constexpr std::size_t align_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

/// True when the rows of struct `s` cover it exactly: sorted by offset, each field starts where the one
/// before it ends (rounded up to its alignment), the first at 0, and the struct ends where the last field
/// does (rounded up to the struct's alignment). A field missing from the table, one listed twice, or a row
/// whose struct member moved without its row does not tile the struct.
template <std::size_t N>
constexpr bool tiles(AbiStruct s, std::size_t size, std::size_t align) {
  std::array<AbiField, N> rows{};
  std::size_t n = 0;
  for (const AbiField& f : kFields)
    if (f.in == s) rows[n++] = f;
  std::sort(rows.begin(), rows.begin() + n, [](const AbiField& a, const AbiField& b) { return a.offset < b.offset; });
  std::size_t end = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (rows[i].offset != align_up(end, rows[i].align)) return false;
    end = rows[i].offset + rows[i].size;
  }
  return n > 0 && align_up(end, align) == size;
}
constexpr std::size_t kRows = std::size(kFields);
static_assert(tiles<kRows>(AbiStruct::kernel_args, sizeof(pacheck_kernel_args), alignof(pacheck_kernel_args)),
              "pacheck_kernel_args has a field abi_fields.cpp does not list (or lists at another place)");
static_assert(tiles<kRows>(AbiStruct::case_info, sizeof(pacheck_case_info), alignof(pacheck_case_info)),
              "pacheck_case_info has a field abi_fields.cpp does not list (or lists at another place)");
static_assert(tiles<kRows>(AbiStruct::kernel_desc, sizeof(pacheck_kernel_desc), alignof(pacheck_kernel_desc)),
              "pacheck_kernel_desc has a field abi_fields.cpp does not list (or lists at another place)");
static_assert(tiles<kRows>(AbiStruct::registrar, sizeof(pacheck_registrar), alignof(pacheck_registrar)),
              "pacheck_registrar has a field abi_fields.cpp does not list (or lists at another place)");

}  // namespace

std::span<const AbiField> abi_field_table() { return kFields; }

std::string_view abi_struct_name(AbiStruct s) {
  switch (s) {
    case AbiStruct::kernel_args: return "pacheck_kernel_args";
    case AbiStruct::case_info: return "pacheck_case_info";
    case AbiStruct::kernel_desc: return "pacheck_kernel_desc";
    case AbiStruct::registrar: return "pacheck_registrar";
  }
  return "?";
}

std::size_t abi_struct_size(AbiStruct s) {
  switch (s) {
    case AbiStruct::kernel_args: return sizeof(pacheck_kernel_args);
    case AbiStruct::case_info: return sizeof(pacheck_case_info);
    case AbiStruct::kernel_desc: return sizeof(pacheck_kernel_desc);
    case AbiStruct::registrar: return sizeof(pacheck_registrar);
  }
  return 0;
}

const AbiField* find_abi_field(AbiStruct s, std::string_view name) {
  for (const AbiField& f : kFields)
    if (f.in == s && f.name == name) return &f;
  return nullptr;
}

bool AbiWriter::set(std::string_view name, double v) {
  const AbiField* f = find_abi_field(s_, name);
  if (!f) return false;
  unsigned char* at = base_ + f->offset;
  switch (f->type) {
    case AbiType::i32:
    case AbiType::enum32: {
      const auto x = static_cast<std::int32_t>(v);
      std::memcpy(at, &x, sizeof x);
      return true;
    }
    case AbiType::u32: {
      const auto x = static_cast<std::uint32_t>(v);
      std::memcpy(at, &x, sizeof x);
      return true;
    }
    case AbiType::f32: {
      const auto x = static_cast<float>(v);
      std::memcpy(at, &x, sizeof x);
      return true;
    }
    default:
      throw std::logic_error(fmt::format("AbiWriter: {}::{} is not a number field", abi_struct_name(s_), name));
  }
}

}  // namespace pacheck
