// Case files: a suite's kernel inputs exported as safetensors for kernels pacheck cannot call (Python,
// Triton, any language), and the scoring of the outputs such a runner writes back.
//
// Quick start: testing a kernel pacheck cannot call
//  `pacheck export --suite S --out DIR`, run the kernel on every DIR/NNNN.safetensors (examples/python/
//  runner.py is the template: `python3 examples/python/runner.py --cases DIR --outputs OUTS`) writing the
//  `out` tensor the manifest names into OUTS, then `pacheck score --cases DIR --outputs OUTS` judges the
//  outputs exactly as `pacheck run` would (same verdicts, same reports; `--cell ID` scores one cell, which is
//  the repro line score prints for a failing one).
//
// The format is written by interop/export.cpp and read by interop/score.cpp through one schema
// (interop/casefile_schema.hpp); the case's own fields in it (its scalars, their versions) are the rows of the
// case field table (core/case_fields.hpp).
//
// `export_cases` writes into DIR:
//   manifest.json  {"format": "pacheck-cases", "format_version": 5, "pacheck", "abi_version", "suite",
//                   "kernel_layout", "left_out": [...], "case_fields": [...], "files": [...], "cells": [...]}
//     case_fields: the case field table as `pacheck list fields --json` gives it (name, kind, id token, the
//               case-file tensors that carry each field and the format_version that added them, the
//               PACHECK_VARIANT_* bit of an attention variant, ...): a runner finds there which tensors carry
//               which attention variant (examples/python/runner.py declines a variant it does not implement).
//               Informational: score does not read it, and an export without it scores as before.
//     left_out[k]: selected cells of one kind no case file can carry, {"kind" ("layout", "dtype",
//               "high_block_ids", "mla": MLA cells of a --format-version 4 export), "cells" (how many),
//               "reason"}; kinds with no cell are not listed. `pacheck
//               score` prints each after its summary ("not scored: the export left out ..."), so a user sees
//               what the file route did not cover.
//     files[i]: one distinct set of kernel inputs, {"file": "0003.safetensors", "inputs_sha256", "case" (case
//               id), "fault" (fault id), "layout", "x", shape fields (num_seqs, num_heads, num_kv_heads,
//               head_size, block_size, num_blocks, max_blocks_per_seq), "q_dtype", "kv_dtype",
//               "kv_tensor_dtype" (the safetensors tag of key_cache / value_cache, or of an MLA file's
//               latent_cache: F32, F16, BF16, F8_E4M3, F8_E5M2, or U8 for fp8_e4m3fnuz), "out_dtype", "scale", "k_scale", "v_scale", "k_scale_form"
//               and "v_scale_form" (format_version 4: how each cache's fp8 scale is given, "none" for a cache
//               that is not fp8, "per_tensor", "per_kv_head" or "per_slot"),
//               "sliding_window" (int, 0 = none), "logits_soft_cap" (number, 0 = none), "kv_lora_rank",
//               "qk_rope_head_dim", "v_head_dim" (format_version 5: ints, the MLA shape, 0 each for a multi-head
//               call), "query_lens" ([num_seqs] ints, 1 each for plain decode), "num_query_tokens" (their sum: the
//               rows of query and out), "shapes" (of the file's tensors) and "strides" (elements, as the ABI
//               hands them; an MLA call's latent cache is key_cache and value_cache) of query, key_cache,
//               value_cache, block_tables and out, "output": {"file", "tensor": "out", "dtype", "shape"
//               ([num_query_tokens, num_heads, head_size], or v_head_dim wide for an MLA call)}}.
//     cells[j]: one suite cell, {"id" (cell id as `pacheck run` prints it), "case", "fault", "straddle",
//               "file" (its inputs), "baseline" (file of the same case with a clean cache, null for a
//               clean cell)}. A baseline that is not itself a suite cell is still exported: the
//               tail-poison invariance check compares every poisoned cell bitwise against it.
//   NNNN.safetensors, one per files[i], holding exactly the bytes a plugin kernel receives in
//   pacheck_kernel_args (include/pacheck/kernel_abi.h):
//     query [num_query_tokens, num_heads, head_size] q_dtype: one row per query token (num_query_tokens =
//       num_seqs for plain decode); sequence s owns rows query_start_loc[s] .. query_start_loc[s+1] - 1
//     key_cache, value_cache: the paged pool in `layout` (shapes on pacheck_layout), kv_dtype, with the
//       unwritten slots holding the cell's poison; an MLA call's file (format_version 5) holds neither, but its
//       one latent cache: latent_cache [num_blocks, block_size, R] kv_dtype, R = kv_lora_rank +
//       qk_rope_head_dim = head_size (vLLM's MLA cache; the ABI hands it as key_cache and value_cache
//       [num_blocks, block_size, 1, R], one pointer), each row c_kv (kv_lora_rank values) then k_pe, shared by
//       every query head (num_kv_heads 1, layout nhd), the cell's poison in the part of the unwritten rows its
//       fault's target names (K the rope part, V the latent part, K+V the row)
//     block_tables [num_seqs, max_blocks_per_seq] I32, seq_lens [num_seqs] I32
//     out [num_query_tokens, num_heads, head_size] out_dtype ([.., v_head_dim] in an MLA file: V is the first
//       v_head_dim values of the latent rows, core/mla.hpp), rows as query's, pre-filled with pacheck's
//       "never written" pattern: a runner should start its output buffer from it so elements it never writes
//       are detected (every row is judged and guarded, as in `pacheck run`)
//     kv_lora_rank, qk_rope_head_dim, v_head_dim: I32 scalars (format_version 5, always present; 0 each in a
//       multi-head file): the MLA shape (include/pacheck/kernel_abi.h, "MLA decode"). In an MLA file the
//       logits are scale * (q . row) over all R values of a row, `scale` is the model's own (not 1/sqrt(R)),
//       and an fp8 latent cache has one per-tensor scale, k_scale (v_scale the same value)
//     query_lens [num_seqs] I32 (format_version 3, always present): the query tokens of each sequence, 1 to 8
//       and at most its seq_lens entry (1 each for plain decode); query_start_loc [num_seqs + 1] I32: their
//       prefix sums from 0 (the ABI's query_start_loc). Row i of sequence s is the token at position
//       p = seq_lens[s] - query_lens[s] + i (the last query_lens[s] tokens of the context, vLLM's convention)
//       and sees keys j <= p only (causal among the new tokens; the window and ALiBi use that p). They are
//       part of a call's geometry (not of inputs_sha256; the query bytes are).
//     scale, k_scale, v_scale: F32 scalars (shape []); k_scale / v_scale are NaN when the case has
//       per-KV-head scales, which then come as k_scales_per_head / v_scales_per_head [num_kv_heads] F32, or
//       per-slot scale tables (format_version 4; seed 002, AMD AITER's asm decode), which then come as
//       k_scales_per_slot / v_scales_per_slot [num_blocks, num_kv_heads, block_size] F32, row-major and
//       indexed by the PHYSICAL block (a block_tables entry), the KV head and the slot: token p of sequence
//       s is worth decode(code) * table[block_tables[s, p / block_size], g, p % block_size]
//       (include/pacheck/kernel_abi.h, PACHECK_SCALE_FORM_PER_SLOT). Written slots hold their token's scale;
//       every other entry holds 1, or the cell's poison where its fault poisons the table (region `scales`:
//       NaN, Inf or garbage in the entries of every unwritten slot, the caches left clean), exactly as the
//       kernel got them: a kernel must keep them out of the output as it keeps the unwritten slots' codes
//       out. Each table is present only for a per_slot cache; a K and a V table may differ in form (k_scale
//       0.5 with vs=slot: a per_tensor K and a per_slot V).
//     sliding_window: I32 scalar, logits_soft_cap: F32 scalar, both always present (0 = none); alibi_slopes
//       and sinks: [num_heads] F32, present only when the case has them (a plugin kernel gets NULL
//       otherwise). Their meaning and the order they apply in: include/pacheck/kernel_abi.h, "Attention
//       variants". They take part in inputs_sha256 (after the per-head scales) and in a call's geometry.
//     fp8 caches are tagged F8_E4M3 (e4m3fn) / F8_E5M2; fp8 e4m3fnuz, which has no safetensors tag, is
//     stored as U8 (the raw codes). Every file's __metadata__ holds "kv_dtype" (pacheck's name: f32, f16,
//     bf16, fp8_e4m3fn, fp8_e4m3fnuz, fp8_e5m2), which a reader must use to decode U8 caches; the other
//     metadata keys are "format", "pacheck", "case", "fault", "layout", "inputs_sha256" and (format_version 4)
//     "k_scale_form" / "v_scale_form", the same words as the manifest entry's fields.
//   Cells share one file (and so one output) only when they make the same call: every field a kernel
//   reads besides the buffers (num_seqs, num_heads, num_kv_heads, head_size, block_size, num_blocks,
//   max_blocks_per_seq, layout, x, q/kv/out dtype, the strides, scale, k_scale, v_scale, the variants,
//   query_lens and the scale forms) equal, and the
//   input bytes (inputs_sha256) equal: e.g. a zero poison, or a tail poison of an aligned length, which
//   writes no slot. Equal bytes alone are not enough: h16/8 d256 and h32/16 d128 at the same lengths and
//   seed have byte-identical inputs and get a file each (exports before this rule shared one between them
//   and scored the d256 cells against d128 outputs; `score` refuses such a manifest, see score_cases).
//   The manifest's fields are unchanged by the rule.
//   Versions: format_version 2 added the attention variants (the two scalars, the two tensors and the
//   manifest fields above); version 1 had none and left variant cells out of the export. Version 3 added
//   several query tokens per sequence (query_lens, query_start_loc, num_query_tokens; query and out with
//   num_query_tokens rows) and left_out; version 2 left qlen= cells out. The bump is needed: a version-2
//   reader that ignored query_lens would take query row s for sequence s's decode token and silently compute
//   attention at the wrong positions. Version 4 added the per-slot scale tables (k_scales_per_slot,
//   v_scales_per_slot), the scale forms (the entry's k_scale_form / v_scale_form, the same metadata keys), and
//   the tables in inputs_sha256; version 3 left per-slot cells out (its left_out kind "per_slot_scales").
//   The bump is needed: a version-3 reader would find a NaN k_scale / v_scale and no per-head array, and
//   either compute NaN outputs, reported as the kernel's failures, or (a pacheck of version 3) refuse the
//   files as "inputs changed since export"; the version lets it refuse the export for what it is. Version 5
//   added MLA cells: latent_cache in place of key_cache / value_cache in an MLA call's file, the scalars
//   kv_lora_rank, qk_rope_head_dim and v_head_dim (tensors and entry fields, 0 in every multi-head file), out
//   and the output v_head_dim wide; version 4 left MLA cells out (its left_out kind "mla"). The bump is needed:
//   a version-4 reader would find no key_cache in an MLA file, or a runner of its own would take out's width
//   for head_size. `pacheck export --format-version 4` still writes version 4 (every multi-head cell as before,
//   the MLA cells left out and counted) for a runner that reads up to 4. This pacheck reads 1 to 5 (older
//   directories score as before: their scale forms follow from the tensors present, their MLA scalars are 0);
//   a pacheck or examples/python/runner.py that reads only up to 4 refuses a version-5 manifest by its
//   format_version, exit 2.
//
// A foreign runner writes, for each files[i], OUTPUTS/<same file name> holding one tensor "out" of
// files[i].output's dtype and shape, or, for a call it cannot take, OUTPUTS/<same file name>.declined
// holding the reason as text (kDeclineSuffix). `score_cases` replays those outputs through the ordinary runner, so
// the verdicts, summaries, exit codes and reports are exactly those of `pacheck run`. What a replay cannot
// observe: writes outside `out` (oob_write) and writes into the inputs (input_mutated) happen in the
// foreign process; use the plugin ABI for those checks.
#pragma once

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/files.hpp"
#include "exec/runner.hpp"
#include "interop/manifest.hpp"
#include "suites/suite.hpp"

namespace pacheck {

/// The most manifest.json may hold when scored (about 300 bytes per cell).
inline constexpr ReadLimit kManifestLimit{std::uint64_t{256} << 20, "a case-file manifest"};

/// A runner that cannot take a case file NNNN.safetensors writes OUTPUTS/NNNN.safetensors.declined instead
/// of an output: UTF-8 text whose first line is the reason (at most kDeclineNoteLimit bytes). See
/// score_cases for how declines are counted.
inline constexpr const char* kDeclineSuffix = ".declined";
inline constexpr ReadLimit kDeclineNoteLimit{4096, "a runner's decline note"};

struct ExportOptions {
  /// Layout the foreign kernel reads. Cells that do not pin a layout are exported in it; when set, cells
  /// pinned to another layout are skipped (the foreign kernel could not read them). Unset: pinned cells
  /// keep their layout and the others use vllm, the built-in kernels' first choice, so cell ids match
  /// those of `pacheck run`.
  std::optional<Layout> kernel_layout;
  std::optional<std::regex> filter;   ///< keep cells whose id matches (as `run --filter`)
  std::optional<std::uint64_t> seed;  ///< overrides every cell's seed (as `run --seed`)
  /// Cases generated and written at once; 0 = the hardware concurrency. The files, their names and the
  /// manifest are the same for every value (numbered in case order after all are written).
  int threads = 0;
  /// Called with one selected cell per case (export order) before the directory is created or any case
  /// generated; may throw to refuse the export (the CLI's --max-memory check).
  std::function<void(const std::vector<Cell>&)> preflight;
  /// The manifest's format_version: kOldestExportFormatVersion (4: MLA cells are left out, counted in
  /// skipped_mla, for a runner that reads up to 4) to kManifestFormatVersion (the default); another value is
  /// a CaseFilesError naming --format-version.
  int format_version = kManifestFormatVersion;
};

struct ExportSummary {
  int cells = 0;           ///< suite cells exported
  int files = 0;           ///< case files written: one per distinct call (geometry and input bytes)
  int baselines = 0;       ///< clean variants written only as invariance baselines
  int skipped_layout = 0;  ///< cells pinned to a layout other than kernel_layout, or native cells invalid in it
                           ///< (the aiter layout needs block_size % 16 == 0)
  int skipped_dtype = 0;   ///< cells with a q/out dtype safetensors has no tag for (none at present)
  int skipped_high_ids = 0;///< cells with high block ids (hiblk=): their 4-16 GiB pools are not written to files
  int skipped_mla = 0;     ///< MLA cells (mla=) of an export older than format_version 5 (--format-version 4)
  int format_version = kManifestFormatVersion;  ///< the manifest's (ExportOptions::format_version)
  std::string manifest;    ///< path of manifest.json
};

/// The skipped_* counts of `sum` as manifest "left_out" entries (kind, cells, reason), every kind in a fixed
/// order, zero counts included (the manifest keeps only the others).
std::vector<LeftOut> left_out_kinds(const ExportSummary& sum);

/// Exports `suite` into `dir` (created if needed), opt.threads cases at a time. Every file is written
/// through a temporary file renamed into place, so a symbolic link planted in `dir` is replaced, never
/// written through; on an error the temporary files of the export are removed. Throws
/// CaseFilesError / SafetensorsError on I/O errors and CaseError for an invalid case.
ExportSummary export_cases(const Suite& suite, const std::string& dir, const ExportOptions& opt);

/// What score appends to ScoreOptions::kernel_name for the MLA cells of an export that also has multi-head ones.
inline constexpr const char* kMlaKernelSuffix = ".mla";
/// The name score reports a kind of cell under: `name` (ScoreOptions::kernel_name), or for the MLA cells
/// (`mla`) of an export that also has multi-head cells (`mixed`) `name` + kMlaKernelSuffix. A replayed kernel
/// takes one kind of cell, as every kernel does (Kernel::takes_mla): such an export is scored as two kernels.
std::string score_kernel_name(const std::string& name, bool mla, bool mixed);
/// The suffix of the negative control a score replays from ScoreOptions::control_outputs: kernel_name + it
/// (then kMlaKernelSuffix for a mixed export's MLA cells, as score_kernel_name gives).
inline constexpr const char* kControlKernelSuffix = ".v_tail";

struct ScoreOptions {
  std::string kernel_name = "foreign";  ///< name the outputs are reported under (score_kernel_name)
  /// The outputs come from a runner with the planted V-tail fault (examples/python/runner.py --bug v-tail):
  /// report it as a negative control that must fail exactly the cells poisons_v_tail() names.
  bool negative_control = false;
  /// Outputs of the same runner with the planted V-tail fault (runner.py --bug v-tail), replayed beside the
  /// runner's as the negative control kernel_name + kControlKernelSuffix: it must fail exactly the cells
  /// poisons_v_tail() names, or the score is instrument blind (exit 3); its caught cells are what `pacheck
  /// verify` needs of a score's evidence. "" = none. A missing directory is a CaseFilesError naming it.
  std::string control_outputs;
  /// Cell ids (exactly as the manifest's cells[j].id) to score; empty: every exported cell. An id the
  /// manifest does not hold is a CaseFilesError naming it (`pacheck score --cell`, the repro line score prints).
  std::vector<std::string> cells;
  RunOptions run;  ///< tolerance, oracle precision, threads (filter and seed are fixed by the export)
  /// Called with the suite, kernel and options run_suite gets, after the export was read and before any
  /// case is generated; may throw to refuse the run (the CLI's --max-memory check).
  std::function<void(const Suite&, const std::vector<KernelPtr>&, const RunOptions&)> preflight;
};

/// Scores the outputs in `outputs_dir` against the export in `cases_dir`. Reads and checks the manifest and
/// every exported input file first (throws CaseFilesError or SafetensorsError: nothing is scored; the CLI
/// exits 2). Among the checks: each files[i]'s fields (num_seqs ... strides, and the file's scale, k_scale,
/// v_scale) are the call its own case makes, and every cell claims (file, baseline) only files of the call
/// its case makes; a manifest sharing one file between calls of different geometry (written by an export
/// that keyed files by input bytes alone) is refused with "cells[J]: cell 'ID' claims file 'F', whose field
/// 'NAME' is A but the cell's case gives a kernel B". An output file that is missing or malformed, or of
/// the wrong dtype or shape, gives its cells the verdict `error` with the reader's message. A decline note
/// (kDeclineSuffix) in place of an output declines the file: when every file of a case is declined, the
/// case's cells are `declined` (neither pass nor fail, as a plugin's supports() saying no) with the detail
/// "declined by the runner: REASON (PATH)"; when only some are, the declined files' cells are `error`
/// (the files of a case are one call geometry); an output and a note for one file are `error` too. Files that are
/// not regular (a FIFO, a directory, a device) or over their cap (kManifestLimit, kCaseFileLimit, and for
/// an output its one tensor plus a header) throw CaseFilesError naming --cases or --outputs, the entry and
/// the reason, without blocking or reading them. Attention variants (format_version 2): the file's
/// sliding_window (I32 >= 0) and logits_soft_cap (F32, finite, >= 0) must equal the manifest entry's fields
/// of those names and be the call its case makes, and alibi_slopes / sinks must be present exactly when the
/// case has them, F32 [num_heads], finite; anything else is a CaseFilesError or SafetensorsError naming
/// the file and the tensor or field (the CLI: exit 2). Variant cells are judged as `run` judges them: the
/// oracle of the case's variant, the same verdicts. Query tokens (format_version 3): query_lens must be 1 to
/// 8 each, at most the sequence's seq_lens entry, sum to the rows of query, have query_start_loc as their
/// prefix sums and equal the entry's query_lens / num_query_tokens and the case's; anything else is a
/// CaseFilesError (SafetensorsError for a missing tensor) naming the file and the tensor or field; a case
/// with several query tokens in a version 1 or 2 manifest is one too. `suite_name` receives the exported
/// suite's name, `left_out` the manifest's left_out entries (empty before format_version 3). Per-slot scale
/// tables (format_version 4): k_scales_per_slot / v_scales_per_slot must be present exactly when the case has
/// per-slot scales for that cache, F32 [num_blocks, num_kv_heads, block_size] (their values, poison included,
/// are held to the export by inputs_sha256), and the entry's k_scale_form / v_scale_form (and the file's
/// metadata keys of those names) must be the case's forms; a missing, unexpected or misshapen table, a form
/// that is not the case's, a table in an older export, or a per-slot case in a manifest older than 4 is a
/// CaseFilesError or SafetensorsError naming the file and the tensor or field (the CLI: exit 2). MLA cells
/// (format_version 5): an MLA case's file holds latent_cache (kv_dtype's tag, [num_blocks, block_size,
/// kv_lora_rank + qk_rope_head_dim]) and no key_cache / value_cache, a multi-head one no latent_cache; the
/// scalars kv_lora_rank, qk_rope_head_dim and v_head_dim (I32, in [0, 1024], 0 in a multi-head file) must equal
/// the entry's fields of those names and be the call its case makes; out and the output are [num_query_tokens,
/// num_heads, v_head_dim]; an MLA case in a manifest older than 5, or one of those tensors or fields in one, is
/// refused. The MLA cells are replayed through a kernel of their own kind (score_kernel_name) and judged as
/// `run` judges an MLA kernel's (the MLA oracle, the same verdicts).
/// `manifest_sha256`, when given, gets the SHA-256 of the manifest.json bytes this score read, before
/// opt.preflight is called (the score's run identity records it; `pacheck verify --cases` compares it).
RunSummary score_cases(const std::string& cases_dir, const std::string& outputs_dir, const ScoreOptions& opt,
                       std::string* suite_name = nullptr, std::vector<LeftOut>* left_out = nullptr,
                       std::string* manifest_sha256 = nullptr);

/// SHA-256 over the input bytes of one call in the order query, key_cache, value_cache, block_tables,
/// seq_lens, then k_scales_per_head, v_scales_per_head, alibi_slopes, sinks, k_scales_per_slot and
/// v_scales_per_slot, each when present, an MLA call's latent cache once, as key_cache (value_cache is the same
/// memory; casefile_schema.hpp's input_bytes) (the sizes follow from the shapes
/// in `a`; pointers are host pointers). With the call's geometry (every other field of `a`), the key that
/// ties an output file to the call pacheck regenerates when scoring: bytes alone do not identify a call.
std::string inputs_sha256(const pacheck_kernel_args& a);

}  // namespace pacheck
