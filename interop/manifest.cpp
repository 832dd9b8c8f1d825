#include "interop/manifest.hpp"

#include <fmt/format.h>

#include <cmath>

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

}  // namespace

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
  return out;
}

}  // namespace pacheck
