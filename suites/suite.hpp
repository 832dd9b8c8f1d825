// Suites: TOML data files in suites/ that expand into cells (case x fault).
//
// Quick start: adding a suite
//  Write suites/NAME.toml (gate.toml is an example: `include` other suites, then [[cells]] tables of
//  heads "num_heads/num_kv_heads", head_sizes, block_sizes, dtypes and seq_lens, crossed with a faults list).
//  `pacheck run --suite NAME` and `pacheck list suites` find it by name, `--suite PATH` runs a file anywhere;
//  no code changes. A bad field is a SuiteError naming file, line, field and reason (exit 2).
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <string>
#include <vector>

#include "core/cell.hpp"
#include "core/files.hpp"

namespace pacheck {

/// The most a suite file (or an included one) may hold: the built-in suites are a few KiB.
inline constexpr ReadLimit kSuiteFileLimit{16u << 20, "a suite file"};

/// The most cells a suite may expand into (its includes' and its groups', counted before duplicates are
/// dropped), and the most sequences those cells may hold together (the sum of their num_seqs): a suite is a
/// list held in memory (about 1 KiB a cell), so a few lines of TOML whose axes multiply into millions of
/// cells are refused before they are expanded. The built-in suites hold a few hundred cells.
inline constexpr std::size_t kMaxSuiteCells = 100000;
inline constexpr std::size_t kMaxSuiteSequences = std::size_t{16} << 20;

/// A malformed suite file. what() reads "FILE:LINE: FIELD: REASON".
struct SuiteError : std::runtime_error {
  SuiteError(std::string file, int line, std::string field, std::string reason);
  std::string file, field, reason;
  int line;
};

/// A cell of a suite. When `native_layout` is set the cell does not pin a layout: each kernel runs it in
/// its preferred layout (Kernel::layouts().front()).
struct SuiteCell {
  Cell cell;
  bool native_layout = true;
  /// Where the cell is written: the suite file it was loaded from (an included suite's cells keep their own
  /// file) and the line of its [[cells]] group's header; "" and 0 for a cell built in code. GitHub
  /// annotations point there.
  std::string file;
  int line = 0;
  /// The cell as a kernel reading `kernel_layouts` (Kernel::layouts(), preferred first) runs it: a native
  /// cell takes the first of them (none: the cell's own layout).
  Cell for_layouts(const std::vector<Layout>& kernel_layouts) const;
};

/// A loaded suite.
struct Suite {
  std::string name;
  std::string description;
  std::string file;  ///< path it was loaded from
  std::vector<SuiteCell> cells;
};

/// The kinds of cell a suite holds: MLA cells (Case::is_mla) and multi-head ones.
struct CellKinds {
  bool mla = false, mha = false;
};
/// The kinds of `suite`'s cells.
CellKinds cell_kinds(const Suite& suite);
/// Whether a kernel whose kind is `takes_mla` (Kernel::takes_mla) is paired with case `c` of a suite whose cells
/// are of `kinds`: a case of its own kind always, one of the other kind only when the suite has none of its own.
/// kernels/kernel.hpp's pairs_with asks this; so does `pacheck verify`, which knows kernels from evidence.json.
/// Inline: the kernels stage asks it without linking this one.
inline bool pairs_with_kind(bool takes_mla, const Case& c, const CellKinds& kinds) {
  return c.is_mla() == takes_mla || !(takes_mla ? kinds.mla : kinds.mha);
}

/// One item of a [[cells]] group's `scales` list: the softmax scale written as where it comes from
/// (docs/SUITES.md):
///  - "default": head_size^-0.5 (Case::scale left unset: no `scale=` token in the id);
///  - a TOML number (or "attention_multiplier:X", Granite's config field): that value, rounded to fp32;
///  - "query_pre_attn_scalar:N" (Gemma-2/3's config field): N^-0.5, computed as the default is
///    (1.0f / sqrtf(N) in fp32), so N = head_size is the default.
struct SoftmaxScale {
  enum class Kind { default_scale, value, query_pre_attn_scalar };
  Kind kind = Kind::default_scale;
  double number = 0;  ///< the value (Kind::value) or N (Kind::query_pre_attn_scalar)
  /// Case::scale for a case of `head_size`: nullopt for the default and for any value equal to it in fp32,
  /// so a cell's id carries `scale=` only when the scale differs from head_size^-0.5.
  std::optional<float> resolve(int head_size) const;
  /// The item as a suite writes it ("default", "0.0625", "query_pre_attn_scalar:168").
  std::string text() const;
};

/// Parses a string item of `scales`: "default", "query_pre_attn_scalar:N" or "attention_multiplier:X" (N, X
/// finite numbers > 0). Throws std::invalid_argument naming the text and the accepted forms.
SoftmaxScale parse_scale_item(std::string_view text);

/// Directory holding the built-in suites: $PACHECK_SUITES_DIR when set and not empty; else, for an installed
/// pacheck, PREFIX/share/pacheck/suites next to the PREFIX/bin or PREFIX/lib that holds the executable or
/// the library this code is linked into (found from the file itself, so a moved prefix still works); else
/// suites/ of the source tree (or of the checkout the executable sits in). Throws SuiteError (field "PACHECK_SUITES_DIR")
/// when the variable names something that does not exist or is not a directory.
std::string suites_dir();
/// Names of the built-in suites (files suites/*.toml), sorted.
std::vector<std::string> list_suites();

/// Loads a suite by name ("tail-poison" -> suites/tail-poison.toml) or by path (anything with a '/' or
/// ending in .toml). Every key is validated: unknown keys, wrong types, bad values and missing fields throw
/// SuiteError naming the file, line and field. Cells are de-duplicated by id (first occurrence kept), in
/// file order; `include = ["other"]` pulls in the cells of other suites first. A file (or include) that is
/// not a regular file or is over kSuiteFileLimit throws SuiteError with field "suite" (or "include") and
/// core/files.hpp's reason, without blocking or reading it.
Suite load_suite(const std::string& name_or_path);

/// Parses a suite from TOML text (`file` is used in error messages only), as load_suite does a file's.
/// Throws SuiteError, field "toml", for text that is not TOML -- including a non-ASCII character outside a
/// string or comment, and one that starts the line after a line-ending backslash in a """ string (valid
/// TOML, but the toml++ this builds with cannot read it without undefined behaviour).
Suite parse_suite(const std::string& text, const std::string& file);

}  // namespace pacheck
