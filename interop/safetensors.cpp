#include "interop/safetensors.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

namespace pacheck {

namespace {

struct StDTypeInfo {
  StDType t;
  const char* tag;
  std::size_t size;
};
constexpr StDTypeInfo kDTypes[] = {
    {StDType::F32, "F32", 4},         {StDType::F16, "F16", 2},         {StDType::BF16, "BF16", 2},
    {StDType::F8_E4M3, "F8_E4M3", 1}, {StDType::F8_E5M2, "F8_E5M2", 1}, {StDType::I32, "I32", 4},
    {StDType::U8, "U8", 1},
};

std::string known_tags() {
  std::string s;
  for (const auto& d : kDTypes) s += (s.empty() ? "" : ", ") + std::string(d.tag);
  return s;
}

/// Rejects a JSON object with a repeated key, which nlohmann would otherwise resolve silently to the last
/// value: two entries for one tensor name are an ambiguous file, not a choice to make for the writer.
struct DuplicateKeys {
  std::vector<std::vector<std::string>> keys_at_depth;
  std::string duplicate;
  bool operator()(int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    const auto d = static_cast<std::size_t>(depth);
    if (ev == nlohmann::json::parse_event_t::object_start) {
      if (keys_at_depth.size() < d + 2) keys_at_depth.resize(d + 2);
      keys_at_depth[d + 1].clear();
    } else if (ev == nlohmann::json::parse_event_t::key && duplicate.empty()) {
      if (keys_at_depth.size() < d + 1) keys_at_depth.resize(d + 1);
      auto& seen = keys_at_depth[d];
      const std::string k = parsed.get<std::string>();
      if (std::find(seen.begin(), seen.end(), k) != seen.end()) duplicate = k;
      else if (d <= 2) seen.push_back(k);  // names (depth 1) and entry fields (depth 2) are all that matter
    }
    return true;
  }
};

struct Entry {
  std::string name;
  StDType dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin, end;
};

Entry parse_entry(const std::string& file, const std::string& name, const nlohmann::json& v, std::uint64_t data_size) {
  auto fail = [&](const std::string& why) { return SafetensorsError(file, name, why); };
  if (name.empty()) throw fail("empty tensor name");
  if (!v.is_object()) throw fail("entry is not a JSON object");
  for (const auto& [k, _] : v.items())
    if (k != "dtype" && k != "shape" && k != "data_offsets")
      throw fail(fmt::format("unknown field '{}' (expected dtype, shape, data_offsets)", k));
  for (const char* k : {"dtype", "shape", "data_offsets"})
    if (!v.contains(k)) throw fail(fmt::format("missing field '{}'", k));

  Entry e;
  e.name = name;
  const auto& dt = v["dtype"];
  if (!dt.is_string()) throw fail("dtype is not a string");
  const std::string tag = dt.get<std::string>();
  const StDTypeInfo* info = nullptr;
  for (const auto& d : kDTypes)
    if (tag == d.tag) info = &d;
  if (!info) throw fail(fmt::format("unknown dtype '{}' (known: {})", tag, known_tags()));
  e.dtype = info->t;

  const auto& sh = v["shape"];
  if (!sh.is_array()) throw fail("shape is not an array");
  if (sh.size() > 16) throw fail(fmt::format("shape has {} dimensions (at most 16)", sh.size()));
  std::uint64_t elements = 1;
  for (const auto& dim : sh) {
    if (!dim.is_number_unsigned()) throw fail(fmt::format("shape entry {} is not an integer >= 0", dim.dump()));
    const std::uint64_t x = dim.get<std::uint64_t>();
    if (x > static_cast<std::uint64_t>(INT64_MAX) || __builtin_mul_overflow(elements, x, &elements))
      throw fail(fmt::format("shape {} has more elements than fit in 64 bits", sh.dump()));
    e.shape.push_back(static_cast<std::int64_t>(x));
  }
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(elements, static_cast<std::uint64_t>(info->size), &bytes))
    throw fail(fmt::format("shape {} x {} bytes overflows 64 bits", sh.dump(), info->size));

  const auto& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    throw fail(fmt::format("data_offsets {} is not two integers >= 0", off.dump()));
  e.begin = off[0].get<std::uint64_t>();
  e.end = off[1].get<std::uint64_t>();
  if (e.begin > e.end) throw fail(fmt::format("data_offsets [{}, {}] end before they begin", e.begin, e.end));
  if (e.end > data_size)
    throw fail(fmt::format("data_offsets [{}, {}] lie outside the data section ({} bytes; file truncated?)", e.begin,
                           e.end, data_size));
  if (e.end - e.begin != bytes)
    throw fail(fmt::format("byte range [{}, {}) holds {} bytes but shape {} of {} ({} bytes each) needs {}", e.begin,
                           e.end, e.end - e.begin, sh.dump(), tag, info->size, bytes));
  return e;
}

std::uint64_t read_le64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

std::string_view st_dtype_name(StDType t) {
  for (const auto& d : kDTypes)
    if (d.t == t) return d.tag;
  return "?";
}

std::size_t st_dtype_size(StDType t) {
  for (const auto& d : kDTypes)
    if (d.t == t) return d.size;
  return 0;
}

SafetensorsError::SafetensorsError(std::string f, std::string t, std::string p)
    : std::runtime_error(t.empty() ? fmt::format("{}: {}", f, p) : fmt::format("{}: tensor '{}': {}", f, t, p)),
      file(std::move(f)),
      tensor(std::move(t)),
      problem(std::move(p)) {}

std::int64_t StTensor::elements() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

const StTensor* SafetensorsFile::find(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const StTensor& SafetensorsFile::expect(std::string_view name, StDType dtype, const std::vector<std::int64_t>& shape) const {
  const StTensor* t = find(name);
  if (!t) throw SafetensorsError(path, std::string(name), "missing");
  if (t->dtype != dtype)
    throw SafetensorsError(path, t->name, fmt::format("dtype {}, expected {}", st_dtype_name(t->dtype), st_dtype_name(dtype)));
  if (t->shape != shape)
    throw SafetensorsError(path, t->name, fmt::format("shape [{}], expected [{}]", fmt::join(t->shape, ", "), fmt::join(shape, ", ")));
  return *t;
}

StTensor& SafetensorsFile::add(std::string name, StDType dtype, std::vector<std::int64_t> shape, const void* data) {
  StTensor t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  const auto bytes = static_cast<std::size_t>(t.elements()) * st_dtype_size(dtype);
  const auto* p = static_cast<const std::uint8_t*>(data);
  t.data.assign(p, p + bytes);
  tensors.push_back(std::move(t));
  return tensors.back();
}

SafetensorsFile parse_safetensors(const std::uint8_t* bytes, std::size_t size, const std::string& file) {
  if (size < 8) throw SafetensorsError(file, "", fmt::format("truncated: {} bytes, shorter than the 8-byte header length", size));
  const std::uint64_t n = read_le64(bytes);
  if (n > kMaxSafetensorsHeader)
    throw SafetensorsError(file, "", fmt::format("header length {} exceeds the {}-byte limit (not a safetensors file?)", n,
                                                 kMaxSafetensorsHeader));
  if (n > size - 8)
    throw SafetensorsError(file, "", fmt::format("truncated: header length {} but only {} bytes follow it", n, size - 8));
  const std::uint64_t data_size = size - 8 - n;
  const auto* hdr = reinterpret_cast<const char*>(bytes + 8);

  DuplicateKeys dup;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(hdr, hdr + n, std::ref(dup));
  } catch (const nlohmann::json::exception& e) {
    throw SafetensorsError(file, "", fmt::format("header is not valid JSON: {}", e.what()));
  }
  if (!dup.duplicate.empty()) throw SafetensorsError(file, dup.duplicate, "key appears twice in the header");
  if (!header.is_object()) throw SafetensorsError(file, "", "header is not a JSON object");

  SafetensorsFile out;
  out.path = file;
  std::vector<Entry> entries;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) throw SafetensorsError(file, "", "__metadata__ is not a JSON object");
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string()) throw SafetensorsError(file, "", fmt::format("__metadata__ value of '{}' is not a string", k));
        out.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(file, name, v, data_size));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // Walk the data section in offset order: each tensor must start exactly where the previous ended.
  std::uint64_t covered = 0;
  const Entry* prev = nullptr;
  for (const auto& e : entries) {
    if (e.begin < covered)
      throw SafetensorsError(file, e.name, fmt::format("bytes [{}, {}) overlap tensor '{}' [{}, {})", e.begin, e.end,
                                                       prev ? prev->name : "?", prev ? prev->begin : 0, prev ? prev->end : 0));
    if (e.begin > covered)
      throw SafetensorsError(file, e.name, fmt::format("hole: bytes [{}, {}) before it belong to no tensor", covered, e.begin));
    covered = e.end;
    prev = &e;
  }
  if (covered != data_size)
    throw SafetensorsError(file, "", fmt::format("data section has {} bytes but the tensors cover {} (trailing bytes)",
                                                 data_size, covered));
  const std::uint8_t* data = bytes + 8 + n;
  for (auto& e : entries) {
    StTensor t;
    t.name = std::move(e.name);
    t.dtype = e.dtype;
    t.shape = std::move(e.shape);
    t.data.assign(data + e.begin, data + e.end);
    out.tensors.push_back(std::move(t));
  }
  return out;
}

SafetensorsFile read_safetensors(const std::string& path, const ReadLimit& limit) {
  std::string bytes;
  try {
    bytes = read_regular_file(path, limit);
  } catch (const FileError& e) {
    throw SafetensorsError(path, "", e.reason);
  }
  return parse_safetensors(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size(), path);
}

std::vector<std::uint8_t> serialize_safetensors(const SafetensorsFile& f) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!f.metadata.empty()) header["__metadata__"] = f.metadata;
  std::uint64_t offset = 0;
  for (const auto& t : f.tensors) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(t.elements()) * st_dtype_size(t.dtype);
    if (t.data.size() != bytes)
      throw SafetensorsError(f.path, t.name, fmt::format("holds {} bytes but its shape needs {}", t.data.size(), bytes));
    if (header.contains(t.name)) throw SafetensorsError(f.path, t.name, "name used twice");
    header[t.name] = {{"dtype", st_dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // align the data section to 8 bytes, as the reference writer
  std::vector<std::uint8_t> out(8 + text.size() + offset);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::uint8_t>(static_cast<std::uint64_t>(text.size()) >> (8 * i));
  std::memcpy(out.data() + 8, text.data(), text.size());
  std::uint8_t* p = out.data() + 8 + text.size();
  for (const auto& t : f.tensors) {
    if (!t.data.empty()) std::memcpy(p, t.data.data(), t.data.size());
    p += t.data.size();
  }
  return out;
}

void write_safetensors(const std::string& path, const SafetensorsFile& f) {
  const auto bytes = serialize_safetensors(f);
  try {
    write_file_atomically(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  } catch (const FileError& e) {
    throw SafetensorsError(path, "", e.reason);
  }
}

}  // namespace pacheck
