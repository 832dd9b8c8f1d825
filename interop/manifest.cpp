#include "interop/manifest.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <map>
#include <set>

namespace pacheck {

using nlohmann::json;

namespace {

/// parse_case_id(text), or a CaseFilesError naming `where` and the field.
Case case_of(const std::string& text, const std::string& where) {
  try {
    return parse_case_id(text);
  } catch (const std::invalid_argument& err) {  // CaseError, naming the case field
    throw CaseFilesError(fmt::format("{}: case: {}", where, err.what()));
  }
}

/// Why files[i].output of `f` is not what export writes for its case, or "" when it is.
std::string output_problem(const ManifestFile& f) {
  const json& o = f.entry.contains("output") ? f.entry["output"] : json();
  if (!o.is_object()) return "field 'output' is missing or not an object";
  // Output dtypes are f32, f16 or bf16 (Case::validate), whose safetensors tags are their upper-case names.
  std::string dtype(dtype_name(f.c.out_dtype));
  for (char& ch : dtype) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  const json shape = {f.c.num_query_tokens(), f.c.num_heads, f.c.out_head_size()};
  const std::pair<const char*, json> want[] = {{"file", f.file}, {"tensor", "out"}, {"dtype", dtype}, {"shape", shape}};
  for (const auto& [key, value] : want)
    if (!o.contains(key) || o[key] != value)
      return fmt::format("field 'output.{}' is {} but its case '{}' gives {}", key,
                         o.contains(key) ? o[key].dump() : "missing", f.c.id(), value.dump());
  return {};
}

}  // namespace

void check_manifest_entries(const Manifest& m) {
  std::map<std::string, std::size_t> index_of;  // file name -> files[] index
  for (std::size_t i = 0; i < m.files.size(); ++i) {
    const ManifestFile& f = m.files[i];
    if (const auto [it, fresh] = index_of.emplace(f.file, i); !fresh)
      throw CaseFilesError(fmt::format("{}: file '{}' is listed again (first as files[{}]): each case file is listed "
                                       "once",
                                       f.where, f.file, it->second));
    if (const std::string why = output_problem(f); !why.empty()) throw CaseFilesError(fmt::format("{}: {}", f.where, why));
  }
  // The (case, fault) pairs whose call each file holds, by the cells that use it.
  std::map<std::string, std::set<std::string>> calls;
  for (const ManifestCell& c : m.cells) {
    const std::string case_id = c.cell.c.id();
    if (c.file.is_string()) calls[c.file.get<std::string>()].insert(case_id + " " + c.cell.fault.id());
    if (c.baseline.is_string()) calls[c.baseline.get<std::string>()].insert(case_id + " clean");
  }
  for (const ManifestFile& f : m.files) {
    const auto fault = manifest_field<std::string>(f.entry, "fault", f.where);
    const auto it = calls.find(f.file);
    if (it != calls.end() && !it->second.count(f.c.id() + " " + fault))
      throw CaseFilesError(fmt::format("{}: case '{}' with fault '{}' is no call of the cells that use file '{}' (e.g. "
                                       "'{}'): the file's inputs would be scored for other cells",
                                       f.where, f.c.id(), fault, f.file, *it->second.begin()));
  }
}

Manifest parse_manifest(const std::string& text, const std::string& path) {
  json m;
  try {
    m = json::parse(text);
  } catch (const json::exception& e) {
    throw CaseFilesError(fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
  const json* format = m.is_object() && m.contains("format") ? &m["format"] : nullptr;
  if (!format || !format->is_string() || format->get<std::string>() != kManifestFormat)
    throw CaseFilesError(fmt::format("{}: not a pacheck case manifest (format is not \"{}\")", path, kManifestFormat));
  // A number compared as a double: get<int>() of 1e300 would be undefined behaviour.
  const json version = manifest_field<json>(m, "format_version", path);
  if (!version.is_number())
    throw CaseFilesError(fmt::format("{}: field 'format_version': must be a number, not {}", path, version.dump()));
  const double v = version.get<double>();
  if (!(v >= kManifestOldestFormatVersion && v <= kManifestFormatVersion) || v != std::floor(v))
    throw CaseFilesError(fmt::format("{}: format_version {} (this pacheck reads {} to {}{})", path, version.dump(),
                                     kManifestOldestFormatVersion, kManifestFormatVersion,
                                     v > kManifestFormatVersion ? "; a newer export needs a newer pacheck"
                                                                : "; no export writes it"));

  Manifest out;
  out.format_version = static_cast<int>(v);
  const json files = manifest_field<json>(m, "files", path);
  if (!files.is_array()) throw CaseFilesError(fmt::format("{}: 'files' is not an array", path));
  for (std::size_t i = 0; i < files.size(); ++i) {
    ManifestFile f;
    f.where = fmt::format("{}: files[{}]", path, i);
    const json& e = files[i];
    if (!e.is_object()) throw CaseFilesError(fmt::format("{}: not a JSON object", f.where));
    f.file = manifest_field<std::string>(e, "file", f.where);
    if (f.file.find('/') != std::string::npos || f.file.find("..") != std::string::npos)
      throw CaseFilesError(fmt::format("{}: file '{}' is not a plain file name", f.where, f.file));
    f.inputs_sha256 = manifest_field<std::string>(e, "inputs_sha256", f.where);
    const auto case_id = manifest_field<std::string>(e, "case", f.where);
    f.c = case_of(case_id, f.where);
    if (f.c.id() != case_id)
      throw CaseFilesError(fmt::format("{}: case '{}' reads back as '{}' (written by another pacheck version?)",
                                       f.where, case_id, f.c.id()));
    f.entry = e;
    out.files.push_back(std::move(f));
  }

  out.suite = manifest_field<std::string>(m, "suite", path);
  if (out.format_version >= 3) {
    const json left = manifest_field<json>(m, "left_out", path);
    if (!left.is_array()) throw CaseFilesError(fmt::format("{}: 'left_out' is not an array", path));
    for (std::size_t i = 0; i < left.size(); ++i) {
      const std::string where = fmt::format("{}: left_out[{}]", path, i);
      if (!left[i].is_object()) throw CaseFilesError(fmt::format("{}: not a JSON object", where));
      LeftOut l{manifest_field<std::string>(left[i], "kind", where), manifest_field<int>(left[i], "cells", where),
                manifest_field<std::string>(left[i], "reason", where)};
      if (l.cells < 0) throw CaseFilesError(fmt::format("{}: field 'cells': {} is negative", where, l.cells));
      out.left_out.push_back(std::move(l));
    }
  }
  const json cells = manifest_field<json>(m, "cells", path);
  if (!cells.is_array()) throw CaseFilesError(fmt::format("{}: 'cells' is not an array", path));
  for (std::size_t i = 0; i < cells.size(); ++i) {
    ManifestCell c;
    c.where = fmt::format("{}: cells[{}]", path, i);
    if (!cells[i].is_object()) throw CaseFilesError(fmt::format("{}: not a JSON object", c.where));
    try {
      c.cell.c = parse_case_id(manifest_field<std::string>(cells[i], "case", c.where));
      c.cell.fault = parse_fault(manifest_field<std::string>(cells[i], "fault", c.where));
    } catch (const std::invalid_argument& err) {
      throw CaseFilesError(fmt::format("{}: {}", c.where, err.what()));
    }
    c.file = manifest_field<json>(cells[i], "file", c.where);
    c.baseline = manifest_field<json>(cells[i], "baseline", c.where);
    out.cells.push_back(std::move(c));
  }
  check_manifest_entries(out);
  return out;
}

Suite manifest_suite(const Manifest& m, const std::string& path) {
  Suite suite;
  suite.name = m.suite;
  suite.file = path;
  for (const ManifestCell& mc : m.cells) {
    SuiteCell sc;
    sc.native_layout = false;  // the export fixed every layout
    sc.cell = mc.cell;
    suite.cells.push_back(std::move(sc));
  }
  return suite;
}

}  // namespace pacheck
