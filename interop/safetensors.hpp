// safetensors files: the container of exported case inputs and of the outputs foreign runners write back.
//
// Format (https://huggingface.co/docs/safetensors): an 8-byte little-endian unsigned header length N, N
// bytes of UTF-8 JSON, then the data section. The JSON maps each tensor name to
//   {"dtype": TAG, "shape": [d0, d1, ...], "data_offsets": [begin, end]}
// with byte offsets relative to the start of the data section, row-major, little-endian elements; an
// optional "__metadata__" maps strings to strings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/files.hpp"

namespace pacheck {

/// Element types pacheck reads and writes (the tags of the format). Anything else is refused.
/// U8 holds raw bytes whose meaning the file's metadata names (pacheck's fp8 e4m3fnuz caches: the format has
/// no tag for that encoding; interop/casefiles.hpp).
enum class StDType : std::uint8_t { F32, F16, BF16, F8_E4M3, F8_E5M2, I32, U8 };
std::string_view st_dtype_name(StDType t);  ///< "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I32", "U8"
std::size_t st_dtype_size(StDType t);       ///< bytes per element: 4, 2, 2, 1, 1, 4, 1

/// A malformed or unreadable safetensors file. what() reads "FILE: tensor 'NAME': PROBLEM" (or "FILE:
/// PROBLEM" when no tensor is involved).
struct SafetensorsError : std::runtime_error {
  SafetensorsError(std::string file, std::string tensor, std::string problem);
  std::string file, tensor, problem;
};

/// One tensor: its bytes in row-major order (little-endian elements).
struct StTensor {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<std::int64_t> shape;  ///< empty for a scalar (one element)
  std::vector<std::uint8_t> data;   ///< exactly elements() * st_dtype_size(dtype) bytes
  std::int64_t elements() const;
};

/// The tensors of one file, in data-section order, and its metadata.
struct SafetensorsFile {
  std::string path;  ///< where it was read from (for error messages); empty for a file built in memory
  std::map<std::string, std::string> metadata;
  std::vector<StTensor> tensors;

  /// The tensor named `name`, or nullptr.
  const StTensor* find(std::string_view name) const;
  /// The tensor named `name`, checked to have `dtype` and `shape`; throws SafetensorsError naming the file
  /// and the tensor otherwise.
  const StTensor& expect(std::string_view name, StDType dtype, const std::vector<std::int64_t>& shape) const;
  /// Appends a tensor (the writer lays tensors out in this order).
  StTensor& add(std::string name, StDType dtype, std::vector<std::int64_t> shape, const void* data);
};

/// Limits the reader enforces before allocating anything, so a hostile length cannot exhaust memory.
inline constexpr std::uint64_t kMaxSafetensorsHeader = 100u << 20;  ///< 100 MiB, as the reference reader

/// Parses a whole file image. Checks, in order: at least 8 bytes; header length <= kMaxSafetensorsHeader
/// and within the image; the header is a JSON object; every entry is an object with exactly dtype, shape
/// and data_offsets; the dtype is known; shape entries are integers >= 0 and their product does not
/// overflow; offsets are two integers with begin <= end <= data-section size; elements x dtype size equals
/// end - begin; no two tensors overlap and together they cover the data section (no holes); names are
/// unique and non-empty; __metadata__ maps strings to strings. Throws SafetensorsError naming `file` and
/// the tensor; never reads outside [bytes, bytes + size).
SafetensorsFile parse_safetensors(const std::uint8_t* bytes, std::size_t size, const std::string& file);

/// The most a case file may hold (`pacheck export` writes one per call; the largest built-in cell's is
/// under 1 GiB).
inline constexpr ReadLimit kCaseFileLimit{std::uint64_t{8} << 30, "a case file"};

/// Reads and parses the file at `path` (see parse_safetensors), which must be a regular file of at most
/// `limit` bytes (core/files.hpp's read_regular_file: no FIFO, device or directory, nothing read past the
/// cap). Throws SafetensorsError naming the file and the reason.
SafetensorsFile read_safetensors(const std::string& path, const ReadLimit& limit = kCaseFileLimit);

/// Serialises `f`: tensors in order, contiguous, the header padded with spaces to a multiple of 8 bytes so
/// the data section is aligned. Throws SafetensorsError when a tensor's byte count does not match its shape.
std::vector<std::uint8_t> serialize_safetensors(const SafetensorsFile& f);

/// Writes `f` to `path` atomically (core/files.hpp's write_file_atomically: a new temporary file renamed
/// into place, so a reader never sees half a file and a symbolic link at `path` is replaced, never written
/// through). Throws SafetensorsError naming the path on an I/O error.
void write_safetensors(const std::string& path, const SafetensorsFile& f);

}  // namespace pacheck
