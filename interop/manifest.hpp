// manifest.json of a case directory (written by export_cases, read by score_cases): its parse and the
// checks that need no other file. Checks against the exported input files stay in score_cases.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cell.hpp"
#include "suites/suite.hpp"

namespace pacheck {

/// A malformed or inconsistent case directory (manifest or exported input file). what() names the file and,
/// where there is one, the entry or tensor.
struct CaseFilesError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// entry[key] as a T (nlohmann::json's get<T>), or a CaseFilesError "WHERE: field 'KEY': REASON" when the
/// key is missing or its value is of another type. Shared by parse_manifest and score_cases.
template <typename T>
T manifest_field(const nlohmann::json& entry, const char* key, const std::string& where) {
  if (!entry.is_object() || !entry.contains(key)) throw CaseFilesError(where + ": field '" + key + "' is missing");
  try {
    return entry.at(key).get<T>();
  } catch (const nlohmann::json::exception& e) {
    // e.g. "[json.exception.type_error.302] type must be number, but is string": keep the reason, not the tag.
    std::string why = e.what();
    if (const auto at = why.find("] "); why.rfind("[json.exception.", 0) == 0 && at != std::string::npos)
      why = why.substr(at + 2);
    throw CaseFilesError(where + ": field '" + key + "': " + why);
  }
}

/// manifest.json's "format" and "format_version" (interop/casefiles.hpp describes the fields). Export
/// writes kManifestFormatVersion; parse_manifest reads kManifestOldestFormatVersion up to it. Version 2
/// added the attention variants (sliding_window, logits_soft_cap, alibi_slopes, sinks); a version-1
/// export holds no variant cell and reads as one whose variant fields are all none. Version 3 added several
/// query tokens per sequence (query_lens, query_start_loc; query and out [num_query_tokens, ...]) and
/// "left_out"; a version-1 or -2 export holds no such cell and reads as one query token per sequence.
/// Version 4 added the per-slot fp8 scale tables (k_scales_per_slot, v_scales_per_slot) and the scale forms
/// (files[i].k_scale_form / v_scale_form); an older export holds no per-slot cell, and its forms follow from
/// the per-head tensors present. Version 5 added MLA cells (the latent cache as latent_cache, the scalars
/// kv_lora_rank, qk_rope_head_dim and v_head_dim, out [num_query_tokens, num_heads, v_head_dim]); an older
/// export holds no MLA cell (counted in left_out), and reads as one whose MLA scalars are all 0.
inline constexpr const char* kManifestFormat = "pacheck-cases";
inline constexpr int kManifestFormatVersion = 5;
inline constexpr int kManifestOldestFormatVersion = 1;
/// The oldest format_version export writes (`pacheck export --format-version 4`, for a runner that reads up to
/// 4: MLA cells are then left out); versions 1 to 3 lack tensors every export now holds (query_lens, ...).
inline constexpr int kOldestExportFormatVersion = 4;

/// One files[i] entry: a set of kernel inputs in the case directory.
struct ManifestFile {
  std::string where;          ///< "PATH: files[I]", for messages
  std::string file;           ///< a plain file name (no '/', no "..") in the case directory
  std::string inputs_sha256;  ///< as written (checked against the file by score_cases)
  Case c;                     ///< the entry's "case", whose id() reads back exactly as written
  nlohmann::json entry;       ///< the whole entry: the shape fields num_seqs ... strides are read from it
};

/// One cells[j] entry: a suite cell and the files holding its inputs and its clean baseline.
struct ManifestCell {
  std::string where;         ///< "PATH: cells[J]", for messages
  Cell cell;                 ///< from the entry's "case" and "fault" (layout fixed by the export)
  nlohmann::json file;       ///< "file" as written (score_cases checks that it names a files[i])
  nlohmann::json baseline;   ///< "baseline" as written: null for a clean cell
};

/// Selected cells of one kind that an export could not write as case files (manifest "left_out", format_version
/// 3): `kind` is "layout" (pinned to a layout other than --kernel-layout), "dtype" (a q/out dtype safetensors
/// has no tag for), "high_block_ids" (pools of 4-16 GiB per cache) or "mla" (MLA cells of an export older than
/// format_version 5); `reason` says why, for people.
struct LeftOut {
  std::string kind;
  int cells = 0;
  std::string reason;
};

/// manifest.json as read.
struct Manifest {
  int format_version = kManifestFormatVersion;  ///< as written: 1 to 5
  std::string suite;                ///< the exported suite's name
  std::vector<LeftOut> left_out;    ///< "left_out" (format_version 3; empty for older manifests)
  std::vector<ManifestFile> files;  ///< in file order
  std::vector<ManifestCell> cells;  ///< in file order
};

/// Parses manifest.json text (`path` is used in messages only): valid JSON, an object of format
/// kManifestFormat and format_version kManifestOldestFormatVersion..kManifestFormatVersion, "files" and "cells" arrays of objects whose
/// fields have the right types, plain file names, case ids that read back as written and faults that parse;
/// then check_manifest_entries(). Throws CaseFilesError naming `path`, the entry (files[I] / cells[J]) and the
/// field; nothing else.
Manifest parse_manifest(const std::string& text, const std::string& path);

/// The manifest's cells as a suite named as the exported one (`path` its file): cells[] in order, each
/// layout fixed by the export (SuiteCell::native_layout false), as `pacheck score` judges them and `verify
/// --cases` recomputes them. No case file is read or checked here (score_cases checks them).
Suite manifest_suite(const Manifest& m, const std::string& path);

/// The manifest's entries against each other (no input file is read): each file is listed once; each
/// files[i].output names that file, the tensor "out", the case's output dtype and its shape [num_query_tokens,
/// num_heads, out_head_size] (head_size, or an MLA case's v_head_dim); and each files[i] holds the call of a cell that uses it: its (case, fault) is a cell's
/// (case, fault) whose "file" it is, or (case, clean) of a cell whose "baseline" it is (export names a file
/// after the first cell that made its call). Throws CaseFilesError naming the entry and the field.
void check_manifest_entries(const Manifest& m);

}  // namespace pacheck
