// The C ABI's structs field by field (include/pacheck/kernel_abi.h): name, offset, size, type and the ABI
// version that added each field, one row per field, checked at compile time to cover every byte of each
// struct. pacheck_cells_info hands the offsets to the Python module, which checks its ctypes mirror against
// them field by field; make_args and the plugin's case info write a Case's scalars through them
// (core/case_fields.hpp, AbiWriter).
//
// Quick start: adding an ABI argument
//  Append the field to its struct in kernel_abi.h (structs only grow at their end; a new version's fields
//  under its version comment), add its row to abi_fields.cpp's table in the same place (a missing or
//  misplaced row fails the build), its ctypes field to python/pacheck/_native.py (the offset check fails
//  otherwise), and fill it: a case field's row (core/case_fields.cpp, column abi) or make_args.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace pacheck {

/// The structs of the C ABI that callers lay out themselves (plugins in C, the Python module in ctypes).
enum class AbiStruct : std::uint8_t { kernel_args, case_info, kernel_desc, registrar };

/// How a field is stored: the element type pacheck reads and writes it as.
enum class AbiType : std::uint8_t {
  i32,       ///< int32_t
  u32,       ///< uint32_t
  i64,       ///< int64_t
  f32,       ///< float
  enum32,    ///< a C enum (int-sized: pacheck_dtype, pacheck_layout, ...)
  pointer,   ///< a data or function pointer
  size,      ///< size_t
  i64_array  ///< int64_t[N] (the stride arrays)
};

/// One field of an ABI struct.
struct AbiField {
  AbiStruct in;           ///< its struct
  std::string_view name;  ///< as kernel_abi.h spells it
  std::size_t offset;     ///< offsetof(struct, field)
  std::size_t size;       ///< sizeof the field, bytes
  std::size_t align;      ///< alignof its type
  AbiType type;
  int version;            ///< the ABI version that added it (1..PACHECK_ABI_VERSION)
};

/// Every field of the four structs, each struct's fields in declaration order.
std::span<const AbiField> abi_field_table();
/// "pacheck_kernel_args", "pacheck_case_info", "pacheck_kernel_desc", "pacheck_registrar".
std::string_view abi_struct_name(AbiStruct s);
/// sizeof the struct as this pacheck lays it out.
std::size_t abi_struct_size(AbiStruct s);
/// The row of field `name` of struct `s`, or nullptr.
const AbiField* find_abi_field(AbiStruct s, std::string_view name);

/// Writes fields of one ABI struct by name, through the table's offsets and types: how a Case's rows
/// (core/case_fields.hpp) fill pacheck_kernel_args and pacheck_case_info without naming either struct.
class AbiWriter {
 public:
  AbiWriter(AbiStruct s, void* base) : s_(s), base_(static_cast<unsigned char*>(base)) {}
  /// Sets field `name` to `v`, converted to its type (i32, u32, enum32 or f32; every value a Case gives
  /// converts exactly), when the struct has such a field, and returns whether it had. Throws
  /// std::logic_error for a field of another type (a pointer or an array).
  bool set(std::string_view name, double v);
  AbiStruct target() const { return s_; }

 private:
  AbiStruct s_;
  unsigned char* base_;
};

}  // namespace pacheck
