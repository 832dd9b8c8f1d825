// The fields of a Case as one table: a row per field says how the case id writes and reads it, which suite
// key sets it, how it is checked and which name errors give it, what the kernel ABI and the case files
// carry of it (and from which version). Everything that threads a field through pacheck iterates the rows:
// Case::id and parse_case_id (core/case.cpp), Case::validate's per-field checks, the suite expander's axes
// and error lines (suites/suite.cpp), make_args and the plugin's case info (kernels/, through AbiWriter),
// the attention-variant bits and declines (kernels/kernel.cpp), the case-file scalars and version gates
// (interop/casefile_schema.cpp), the generators' variant probes (properties/generators.cpp), `pacheck list
// fields` and the description the Python module and examples/python/runner.py read (case_fields_json()).
//
// Quick start: adding a case field (a plain scalar variant "foo", id token "foo=F", say)
//  1. its member in Case (core/case.hpp), whose default is left out of ids;
//  2. its row in core/case_fields.cpp, in id order: name, kind, token (printed with scalar_text and read
//     with parse_scalar, or functions of its own), suite key ("variants": suite files then take "foo=F" in
//     `variants`), its check (the name its errors give), and, if kernels see it, its ABI field (a member
//     appended to pacheck_kernel_args / pacheck_case_info: core/abi_fields.hpp's quick start), its
//     PACHECK_VARIANT_* bit and its case-file scalar with the format_version that carries it;
//  3. its mathematics: the oracle (oracle/), the kernels (kernels/), the pager if the layout changes.
// Ids, suites, repro, make_args, case info, case files, `list fields` and the Python description follow.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/abi_fields.hpp"
#include "core/case.hpp"

namespace pacheck {

/// How many values a field holds.
enum class FieldKind : std::uint8_t {
  scalar,        ///< one value for the case
  per_head,      ///< one value per query head or per KV head
  per_sequence,  ///< one value per sequence
  per_slot,      ///< one value per cache slot (tables drawn when the case is generated)
};
std::string_view field_kind_name(FieldKind k);  ///< "scalar", "per_head", "per_sequence", "per_slot"

/// A version gate of the case files (interop/casefile_schema.hpp): format_version `version` added `tensors`
/// (space-separated; an older export must not hold them: "'NAME' in a format_version N export (FEATURE came
/// with format_version M)"), and a case for which `needs(c)` is true cannot be scored from an older export
/// ("case 'ID' has CARRIES, which a format_version N export cannot carry").
struct CaseFileGate {
  int version = 0;
  std::string_view carries = {};   ///< what such a case has ("an attention variant")
  std::string_view feature = {};   ///< what the version added ("attention variants")
  std::string_view tensors = {};   ///< the tensors and manifest-entry fields it added
  bool (*needs)(const Case&) = nullptr;
};

/// One field of Case. Rows are written with designated initializers, so the members below are in the order
/// a row gives them.
struct CaseField {
  std::string_view name = {};  ///< the member, and the field CaseError, SuiteError and declines name
  FieldKind kind = FieldKind::scalar;  ///< the most values it holds (k_scale: a table per slot at most)
  /// The id token's prefix ("win=", "h", "ctx"); empty for a bare name (the kv dtype, the layout: matches()
  /// tells them) and for a field written by another's token (num_kv_heads, in num_heads' "hQ/KV").
  std::string_view token = {};
  std::string_view token_form = {};  ///< the token with placeholders, for messages and docs ("win=W")
  std::string_view example = {};     ///< an id token with a non-default value ("win=16"), for probes and docs
  std::string_view suite_key = {};   ///< the [[cells]] key that sets it ("variants": the variants axis's tokens)
  /// Inclusive bounds of an integer field (hi < lo: none): field_bounds(); the id and suite parsers check the
  /// wider integer they read against them before narrowing it.
  long long lo = 1, hi = 0;
  /// Non-empty: an id must give the token; the message names it so ("no 'hQ/KV' heads token in 'ID'").
  std::string_view required = {};

  // The id (Case::id, parse_case_id): the text after the prefix (empty: left out, the default), whether a
  // token is this field's (null: it starts with `token`), and its reading, which throws CaseError naming
  // the field.
  std::string (*id_text)(const Case&) = nullptr;
  bool (*matches)(std::string_view token) = nullptr;
  void (*parse)(const CaseField& self, std::string_view text, Case& c) = nullptr;
  /// Case::validate's checks of the field, in table order: throws CaseError(name, why) (a check that needs
  /// two fields sits in the later one's row and names the field it blames).
  void (*check)(const Case&) = nullptr;
  /// Case::validate's bound check (field_bounds), after every row's check; null: none.
  void (*bound)(const CaseField& self, const Case&) = nullptr;
  void (*copy)(const Case& from, Case& to) = nullptr;  ///< copies the member (a suite axis setting it)
  /// Whether `c` uses the field: set for attention variants (their bit in case_variants()).
  bool (*uses)(const Case&) = nullptr;

  // The kernel ABI (include/pacheck/kernel_abi.h).
  int abi_version = 0;            ///< the version that added its fields (0: kernels see it through the pager only)
  std::string_view abi_args = {};      ///< pacheck_kernel_args fields that carry it, space-separated
  std::string_view abi_info = {};      ///< pacheck_case_info fields that carry it, space-separated
  void (*abi)(const Case&, AbiWriter&) = nullptr;  ///< writes its scalar ABI fields (whichever struct has them)
  unsigned variant_bit = 0;       ///< PACHECK_VARIANT_* when it is an attention variant, else 0
  std::string_view variant_lacks = {}; ///< a kernel without the variant "does not implement ..." (its decline)
  /// The decline's subject ("sliding_window 128"); null: the name and id_text.
  std::string (*decline_subject)(const Case&) = nullptr;

  // The case files (interop/casefiles.hpp).
  std::string_view casefile = {};      ///< the tensors and manifest fields that carry it, space-separated
  int casefile_version = 1;       ///< the format_version that added them
  /// The scalar tensor that holds it, named and typed (I32 / F32) as the pacheck_kernel_args field it
  /// copies; empty: none.
  std::string_view casefile_scalar = {};
  /// Why `v` is no valid value of the case-file scalar (empty: valid); null: any value. A row with one has
  /// its scalar restated in the manifest entry, which must hold the same value.
  std::string (*casefile_problem)(double v) = nullptr;
  CaseFileGate gates[2] = {};     ///< the format_versions some of its values need
};

/// Every field of Case, in the order Case::id() writes them.
std::span<const CaseField> case_field_table();
/// The row named `name` (CaseError's field), or nullptr.
const CaseField* find_case_field(std::string_view name);
/// The row whose id token `token` is, or nullptr.
const CaseField* case_field_of_token(std::string_view token);

/// The PACHECK_VARIANT_* bits of the attention variants case `c` uses (the rows' variant_bit whose value is
/// not the default); 0 for plain decode.
unsigned case_variants(const Case& c);
/// Writes every row's scalar ABI fields of `c` through `w` (make_args and the plugin's case info).
void write_case_abi(const Case& c, AbiWriter& w);
/// The first version gate of the case files that case `c` fails at `format_version` (gates in version order,
/// then table order), or nullptr.
const CaseFileGate* case_file_gate(const Case& c, int format_version);

/// The table as JSON text, for `pacheck list fields --json`, pacheck_cells_info and the case manifest:
/// {"fields": [{"name", "kind", "token", "token_form", "example", "suite_key", "bounds" ([lo, hi] or null),
/// "abi_version", "abi_args" [...], "abi_info" [...], "variant_bit", "casefile" [...], "casefile_version",
/// "casefile_scalar", "gates": [{"version", "carries"}]}]}; each list from the row's space-separated text.
std::string case_fields_json();

}  // namespace pacheck
