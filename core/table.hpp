// Name tables: an enum described once, as a constant array of rows (value, name, aliases, traits), with one
// generic name_of / parse / names_list over any such table. Poison values, targets, regions (core/fault.hpp),
// dtypes (core/dtype.hpp), layouts and distributions (core/case.hpp), verdicts (judge/verdict.hpp) and
// properties (properties/properties.hpp) are tables of this shape; `pacheck list poisons|verdicts|...` prints
// them and tests/test_tables.cpp checks docs/REFERENCE.md's lists against them.
//
// A row type needs two fields:
//   value  the enum value it describes
//   name   its canonical name (what ids, reports and name_of() write)
// and may have:
//   aliases  other spellings parse() accepts, separated by spaces ("fp32 float32"); never written
// plus whatever traits the enum needs (a meaning for `pacheck list`, a predicate, a function pointer).
#pragma once

#include <concepts>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace pacheck {

/// A row of a name table: `value` and `name` (see the file comment).
template <typename Row>
concept TableRow = requires(const Row& r) {
  r.value;
  { r.name } -> std::convertible_to<std::string_view>;
};

/// The row of `value` in `table`, or nullptr when no row describes it (an enum value cast from a number).
template <TableRow Row>
constexpr const Row* find_row(std::span<const Row> table, decltype(Row::value) value) {
  for (const Row& r : table)
    if (r.value == value) return &r;
  return nullptr;
}

/// The row of `value`; throws std::logic_error when the table lacks it (a table that misses an enum value
/// is a bug, which tests/test_tables.cpp rules out for every table).
template <TableRow Row>
const Row& row_of(std::span<const Row> table, decltype(Row::value) value) {
  if (const Row* r = find_row(table, value)) return *r;
  throw std::logic_error("row_of: a name table has no row for this value");
}

/// The canonical name of `value`; "?" for a value no row describes (as the switches this replaced did).
template <TableRow Row>
constexpr std::string_view name_of(std::span<const Row> table, decltype(Row::value) value) {
  const Row* r = find_row(table, value);
  return r ? std::string_view(r->name) : std::string_view("?");
}

/// The canonical names in table order, as prose: "a, b or c" ("a" for one row, "" for none).
template <TableRow Row>
std::string names_list(std::span<const Row> table) {
  std::string out;
  for (std::size_t i = 0; i < table.size(); ++i) {
    if (i > 0) out += i + 1 == table.size() ? " or " : ", ";
    out += table[i].name;
  }
  return out;
}

namespace detail {
/// True when `text` is one of the space-separated words of `aliases`.
constexpr bool is_alias(std::string_view aliases, std::string_view text) {
  while (!aliases.empty()) {
    const auto space = aliases.find(' ');
    if (aliases.substr(0, space) == text) return true;
    if (space == std::string_view::npos) break;
    aliases.remove_prefix(space + 1);
  }
  return false;
}
}  // namespace detail

/// The row whose canonical name (first) or one of whose aliases is exactly `text` (case-sensitive), or
/// nullptr.
template <TableRow Row>
constexpr const Row* find_name(std::span<const Row> table, std::string_view text) {
  for (const Row& r : table)
    if (text == r.name) return &r;
  if constexpr (requires(const Row& r) { std::string_view(r.aliases); }) {
    for (const Row& r : table)
      if (detail::is_alias(r.aliases, text)) return &r;
  }
  return nullptr;
}

/// The value of find_name(table, text). Otherwise throws std::invalid_argument("unknown WHAT 'TEXT'
/// (expected A, B or C)"), listing the canonical names in table order; `what` names what was expected
/// ("dtype", "poison target").
template <TableRow Row>
decltype(Row::value) parse(std::span<const Row> table, std::string_view text, std::string_view what) {
  if (const Row* r = find_name(table, text)) return r->value;
  throw std::invalid_argument("unknown " + std::string(what) + " '" + std::string(text) + "' (expected " +
                              names_list(table) + ")");
}

}  // namespace pacheck
