#include "suites/suite.hpp"

#include "core/case_fields.hpp"
#include "core/files.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>
#include <sstream>
#include <unordered_set>

namespace pacheck {

SuiteError::SuiteError(std::string f, int l, std::string fld, std::string r)
    : std::runtime_error(l > 0 ? fmt::format("{}:{}: {}: {}", f, l, fld, r) : fmt::format("{}: {}: {}", f, fld, r)),
      file(std::move(f)), field(std::move(fld)), reason(std::move(r)), line(l) {}

Cell SuiteCell::for_layouts(const std::vector<Layout>& kernel_layouts) const {
  Cell out = cell;
  if (native_layout && !kernel_layouts.empty()) out.c.layout = kernel_layouts.front();
  return out;
}

namespace {

/// The file (executable or shared library) this code was loaded from, or "" when it cannot be told.
std::filesystem::path installed_module_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&installed_module_path), &info) && info.dli_fname && *info.dli_fname)
    return info.dli_fname;
  return {};
}

}  // namespace

std::string suites_dir() {
  std::error_code ec;
  // Set and empty is unset (as a shell's `PACHECK_SUITES_DIR= pacheck ...` means); set to anything that is
  // not a directory is an error, not an empty list of suites.
  if (const char* env = std::getenv("PACHECK_SUITES_DIR"); env && *env) {
    if (std::filesystem::is_directory(env, ec)) return env;
    const bool exists = std::filesystem::exists(std::filesystem::symlink_status(env, ec));
    throw SuiteError(env, 0, "PACHECK_SUITES_DIR",
                     exists ? "is not a directory (unset it, or set it to '', for the built-in suites)"
                            : "does not exist (unset it, or set it to '', for the built-in suites)");
  }
  // An installed pacheck (`cmake --install`, docs/DESIGN.md) finds the suites installed beside it, wherever
  // the prefix was moved: PREFIX/share/pacheck/suites seen from PREFIX/bin/pacheck (the executable) or from
  // PREFIX/lib/libpacheck_cells.so (the library a kernel's gtest binary links, wherever that binary lives).
  // This comes before the compiled-in source tree, which an installed copy must not depend on.
  for (const std::filesystem::path& file : {installed_module_path(), std::filesystem::path("/proc/self/exe")}) {
    auto bin = std::filesystem::canonical(file, ec).parent_path();
    if (ec || bin.empty()) continue;
    const auto installed = bin.parent_path() / "share" / "pacheck" / "suites";
    if (std::filesystem::exists(installed / "gate.toml", ec)) return installed.string();
  }
  if (std::filesystem::is_directory(PACHECK_SUITES_DIR, ec)) return PACHECK_SUITES_DIR;
  // A build carried to another machine (e.g. the GPU machine) finds the suites of the checkout it sits in:
  // walk up from the executable to the first folder holding suites/gate.toml.
  auto dir = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path();
  for (; !ec && !dir.empty() && dir != dir.root_path(); dir = dir.parent_path())
    if (std::filesystem::exists(dir / "suites" / "gate.toml", ec)) return (dir / "suites").string();
  return PACHECK_SUITES_DIR;
}

std::vector<std::string> list_suites() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(suites_dir(), ec))
    if (e.path().extension() == ".toml") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

/// A suite file that cannot be opened. Its what() has no line ("FILE: suite: REASON"); an include turns it
/// into an error at the including file and line.
struct SuiteNotFound : SuiteError {
  SuiteNotFound(std::string file, std::string reason) : SuiteError(std::move(file), 0, "suite", std::move(reason)) {}
};

/// The line (1-based) of the first byte that toml++ 3.3 (Debian's) must not see, and why, or 0. Its whitespace
/// test reaches __builtin_unreachable() -- undefined behaviour, found by tests/fuzz/fuzz_suite_toml under
/// UBSan (marzer/tomlplusplus issues 190 and 295) -- for many non-ASCII characters where it looks for
/// whitespace: anywhere outside a string or comment (never valid TOML: keys and whitespace are ASCII) and,
/// inside a basic string, as the character right after a backslash (never a valid escape) or, in a multi-line
/// one, as the first character after a line-ending backslash (valid TOML, refused here); and any control
/// character but tab, LF and CR (never valid TOML). Strings and comments are otherwise left as they are.
std::pair<int, std::string> unsafe_for_tomlpp(std::string_view t) {
  // TOML permits no control character but tab and the line ends anywhere, in strings and comments
  // included: refusing them first keeps toml++ from reading past a NUL (the fuzzer's third crash: a NUL in
  // an unclosed `"""`, then U+034C) and is exact, since no valid suite file holds one.
  for (std::size_t k = 0, line = 1; k < t.size(); ++k) {
    const auto b = static_cast<unsigned char>(t[k]);
    if (b == '\n') ++line;
    if ((b < 0x20 && b != '\t' && b != '\n' && b != '\r') || b == 0x7F)
      return {static_cast<int>(line),
              fmt::format("control character 0x{:02X} (TOML allows none but tab and line ends)", b)};
  }
  int line = 1;
  std::size_t i = 0;
  auto at = [&](std::size_t k) { return k < t.size() ? t[k] : '\0'; };
  auto byte = [&](std::size_t k) { return fmt::format("0x{:02X}", static_cast<unsigned char>(t[k])); };
  // Moves i past the closing `quote` of a string opened just before i; a multi-line one ends at the last
  // quote of a run of 3 to 5.
  auto skip_string = [&](char quote, bool multi) -> std::pair<int, std::string> {
    const std::size_t begin = i;
    // A one-line string that does not close on its line was no string to toml++ (never valid TOML):
    // its bytes are checked as outside one.
    auto unterminated = [&]() -> std::pair<int, std::string> {
      for (std::size_t k = begin; k < i; ++k)
        if (static_cast<unsigned char>(t[k]) >= 0x80)
          return {line, fmt::format("non-ASCII byte {} in a string that does not end on its line", byte(k))};
      return {0, ""};
    };
    while (i < t.size()) {
      const char c = t[i];
      if (c == '\n') {
        if (!multi) return unterminated();  // toml++ reports the rest
        ++line;
      }
      if (c == quote && (!multi || (at(i + 1) == quote && at(i + 2) == quote))) {
        i += multi ? 3 : 1;
        for (int extra = 0; multi && extra < 2 && at(i) == quote; ++extra) ++i;
        return {0, ""};
      }
      if (c == '\\' && quote == '"') {
        ++i;
        // Every TOML escape is ASCII (b t n f r " \\ u U, or whitespace in a multi-line string); toml++ tests
        // the byte after a backslash with its whitespace test, which is the unreachable path for many
        // non-ASCII characters (found by fuzz_suite_toml: `\\` followed by U+FCFF).
        if (i < t.size() && static_cast<unsigned char>(t[i]) >= 0x80)
          return {line, fmt::format("non-ASCII byte {} right after a backslash (not a TOML escape)", byte(i))};
        if (multi && (at(i) == ' ' || at(i) == '\t' || at(i) == '\r' || at(i) == '\n')) {
          while (at(i) == ' ' || at(i) == '\t' || at(i) == '\r' || at(i) == '\n') line += t[i++] == '\n';
          if (i < t.size() && static_cast<unsigned char>(t[i]) >= 0x80)
            return {line, fmt::format("non-ASCII byte {} right after a line-ending backslash (toml++ cannot read it "
                                      "safely: start the line with an ASCII character or drop the backslash)",
                                      byte(i))};
          continue;
        }
      }
      ++i;
    }
    return multi ? std::pair<int, std::string>{0, ""} : unterminated();
  };
  // The last character before i on its line that is not a blank (0 at a line's start). A quote opens a string
  // only where TOML lets a key or value begin -- at a line's start or after `=`, `[`, `,`, `{` or `.` --
  // as toml++ reads it: one inside a bare token (`105-27T07:x"s`) is no string to toml++, which then scans
  // the bytes after it with its whitespace test (the fuzzer's fourth crash). Valid TOML has no other quote.
  char prev = 0;
  while (i < t.size()) {
    const char c = t[i];
    if (c == '\n') {
      ++line;
      ++i;
      prev = 0;
    } else if (c == '#') {
      while (i < t.size() && t[i] != '\n') ++i;
    } else if ((c == '"' || c == '\'') &&
               (prev == 0 || prev == '=' || prev == '[' || prev == ',' || prev == '{' || prev == '.')) {
      const bool multi = at(i + 1) == c && at(i + 2) == c;
      i += multi ? 3 : 1;
      if (auto bad = skip_string(c, multi); bad.first) return bad;
      prev = c;
    } else if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
    } else if (static_cast<unsigned char>(c) >= 0x80) {
      return {line, fmt::format("non-ASCII byte {} outside a string or comment", byte(i))};
    } else {
      prev = c;
      ++i;
    }
  }
  return {0, ""};
}

/// The int value of `v` for the case field `case_field`, or a SuiteError at `line` naming `key` (the suite key),
/// the value and the allowed range: TOML integers are 64-bit, so narrowing unchecked would wrap 4294967396 to 100.
int bounded(const std::string& file, int line, std::string_view key, std::string_view case_field, long long v) {
  try {
    return checked_field(case_field, v);
  } catch (const CaseError& e) {
    throw SuiteError(file, line, std::string(key), e.reason);
  }
}

/// Reads a suite file, tracking file name for errors.
class Parser {
 public:
  Parser(std::string file, int depth) : file_(std::move(file)), depth_(depth) {}

  Suite parse(const std::string& text) {
    if (const auto [line, reason] = unsafe_for_tomlpp(text); line) throw SuiteError(file_, line, "toml", reason);
    toml::table root;
    try {
      root = toml::parse(text, file_);
    } catch (const toml::parse_error& e) {
      throw SuiteError(file_, static_cast<int>(e.source().begin.line), "toml", std::string(e.description()));
    }
    Suite s;
    s.file = file_;
    check_keys(root, {"name", "description", "include", "cells"}, "");
    s.name = require_string(root, "name", "");
    if (auto d = root["description"]) s.description = as_string(*d.node(), "description");
    if (auto inc = root["include"]) {
      for (const auto& [name, line] : string_list(*inc.node(), "include")) {
        if (depth_ > 8) throw SuiteError(file_, line, "include", "includes nest deeper than 8 (a cycle?)");
        Suite other;
        try {
          // A bare name resolves next to the including file, so a suite folder can be moved as a whole.
          const auto sibling = std::filesystem::path(file_).parent_path() / (name + ".toml");
          const bool bare = name.find('/') == std::string::npos && !name.ends_with(".toml");
          other = load_named(bare && std::filesystem::exists(sibling) ? sibling.string() : name, depth_ + 1);
        } catch (const SuiteNotFound& e) {
          throw SuiteError(file_, line, "include", e.reason);  // at the include, not at "nope.toml:0"
        } catch (const SuiteError&) {
          throw;
        } catch (const std::exception& e) {
          throw SuiteError(file_, line, "include", e.what());
        }
        for (auto& c : other.cells) {
          sequences_ += static_cast<double>(c.cell.c.seq_lens.size());
          s.cells.push_back(std::move(c));
        }
        if (s.cells.size() > kMaxSuiteCells || sequences_ > static_cast<double>(kMaxSuiteSequences))
          throw SuiteError(file_, line, "include",
                           fmt::format("the included suites hold {} cells and {:.0f} sequences, over the {} cells and "
                                       "{} sequences a suite may hold",
                                       s.cells.size(), sequences_, kMaxSuiteCells, kMaxSuiteSequences));
      }
    }
    auto cells = root["cells"];
    if (!cells && s.cells.empty()) throw SuiteError(file_, 1, "cells", "missing: a suite needs [[cells]] groups or an include");
    if (cells) {
      const toml::array* arr = cells.as_array();
      if (!arr) throw SuiteError(file_, line_of(*cells.node()), "cells", "must be an array of tables ([[cells]])");
      for (const auto& g : *arr) {
        const toml::table* t = g.as_table();
        if (!t) throw SuiteError(file_, line_of(g), "cells", "each entry must be a table");
        expand_group(*t, s.cells);
      }
    }
    // De-duplicate by id, keeping the first occurrence.
    std::unordered_set<std::string> seen;
    std::vector<SuiteCell> unique;
    for (auto& c : s.cells) {
      std::string key = c.cell.id() + (c.native_layout ? " native" : "");
      if (seen.insert(key).second) unique.push_back(std::move(c));
    }
    s.cells = std::move(unique);
    return s;
  }

  static Suite load_named(const std::string& name_or_path, int depth) {
    std::string path = name_or_path;
    const bool is_path = name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".toml");
    if (!is_path) path = suites_dir() + "/" + name_or_path + ".toml";
    std::error_code ec;
    if (!is_path && !std::filesystem::exists(path, ec)) {
      std::string known;
      for (const auto& n : list_suites()) known += (known.empty() ? "" : ", ") + n;
      throw SuiteNotFound(path, fmt::format("no suite named '{}' (known: {})", name_or_path, known));
    }
    std::string text;
    try {
      // Only a regular file, within the cap: /dev/zero or a FIFO named as a suite (or included) must fail at
      // once, not grow without bound or wait for a writer.
      text = read_regular_file(path, kSuiteFileLimit);
    } catch (const FileError& e) {
      throw SuiteNotFound(path, e.what());
    }
    return Parser(path, depth).parse(text);
  }

 private:
  std::string file_;
  int depth_;
  double sequences_ = 0;  ///< sequences of the cells expanded so far (includes too), for check_group_size

  static int line_of(const toml::node& n) { return static_cast<int>(n.source().begin.line); }

  void check_keys(const toml::table& t, std::initializer_list<std::string_view> known, std::string_view where) {
    for (const auto& [k, v] : t) {
      if (std::find(known.begin(), known.end(), k.str()) == known.end()) {
        std::string list;
        for (auto kk : known) list += (list.empty() ? "" : ", ") + std::string(kk);
        throw SuiteError(file_, line_of(v), fmt::format("{}{}", where, k.str()), fmt::format("unknown key (known: {})", list));
      }
    }
  }

  std::string as_string(const toml::node& n, std::string_view field) {
    if (auto s = n.value<std::string>()) return *s;
    throw SuiteError(file_, line_of(n), std::string(field), "must be a string");
  }

  std::string require_string(const toml::table& t, std::string_view key, std::string_view where) {
    auto n = t[key];
    if (!n) throw SuiteError(file_, line_of(t), fmt::format("{}{}", where, key), "missing");
    return as_string(*n.node(), fmt::format("{}{}", where, key));
  }

  /// A string or an array of strings, with each item's line.
  std::vector<std::pair<std::string, int>> string_list(const toml::node& n, std::string_view field) {
    std::vector<std::pair<std::string, int>> out;
    if (auto s = n.value<std::string>()) return {{*s, line_of(n)}};
    const toml::array* a = n.as_array();
    if (!a || a->empty()) throw SuiteError(file_, line_of(n), std::string(field), "must be a string or a non-empty array of strings");
    for (const auto& e : *a) out.emplace_back(as_string(e, field), line_of(e));
    return out;
  }

  /// An integer or an array of integers.
  std::vector<std::pair<long long, int>> int_list(const toml::node& n, std::string_view field) {
    if (auto v = n.value_exact<std::int64_t>()) return {{*v, line_of(n)}};
    const toml::array* a = n.as_array();
    if (!a || a->empty()) throw SuiteError(file_, line_of(n), std::string(field), "must be an integer or a non-empty array of integers");
    std::vector<std::pair<long long, int>> out;
    for (const auto& e : *a) {
      auto v = e.value_exact<std::int64_t>();
      if (!v) throw SuiteError(file_, line_of(e), std::string(field), "every item must be an integer");
      out.emplace_back(*v, line_of(e));
    }
    return out;
  }

  // --- Generated batches (issue 18): seq_lens item { cycle = [N, ...], count = M } ---------------------
  /// The most sequences a generated batch may hold (a decode batch; 4096 leaves room above 256).
  static constexpr long long kMaxGeneratedBatch = static_cast<long long>(Case::kMaxNumSeqs);
  /// A batch of `count` sequences whose lengths repeat the `cycle` list: sequence i has length
  /// cycle[i % cycle.size()]. Both keys are required; count in [1, kMaxGeneratedBatch], each length in
  /// seq_lens' bounds; another key, an empty or non-integer cycle, or a non-integer count is a SuiteError
  /// naming cells.seq_lens.cycle / .count and the reason.
  std::vector<int> generated_batch(const toml::table& t) {
    check_keys(t, {"cycle", "count"}, "cells.seq_lens.");
    auto cn = t["cycle"];
    if (!cn) throw SuiteError(file_, line_of(t), "cells.seq_lens.cycle", "missing (e.g. { cycle = [1030, 1024], count = 255 })");
    const toml::array* ca = cn.as_array();
    if (!ca || ca->empty())
      throw SuiteError(file_, line_of(*cn.node()), "cells.seq_lens.cycle", "must be a non-empty array of integers");
    std::vector<int> cycle;
    for (const auto& [v, l] : int_list(*cn.node(), "cells.seq_lens.cycle"))
      cycle.push_back(bounded(file_, l, "cells.seq_lens.cycle", "seq_lens", v));
    auto nn = t["count"];
    if (!nn) throw SuiteError(file_, line_of(t), "cells.seq_lens.count", "missing (the number of sequences)");
    auto count = nn.value_exact<std::int64_t>();
    if (!count) throw SuiteError(file_, line_of(*nn.node()), "cells.seq_lens.count", "must be an integer");
    if (*count < 1 || *count > kMaxGeneratedBatch)
      throw SuiteError(file_, line_of(*nn.node()), "cells.seq_lens.count",
                       fmt::format("{} is out of range [1, {}]", *count, kMaxGeneratedBatch));
    std::vector<int> b(static_cast<std::size_t>(*count));
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = cycle[i % cycle.size()];
    return b;
  }
  // --- end generated batches --------------------------------------------------------------------------

  /// An optional integer key of a group, range-checked for the case field `case_field`.
  int int_value(const toml::table& g, std::string_view key, std::string_view case_field, int dflt) {
    auto n = g[key];
    if (!n) return dflt;
    const std::string field = fmt::format("cells.{}", key);
    auto v = n.value_exact<std::int64_t>();
    if (!v) throw SuiteError(file_, line_of(*n.node()), field, "must be an integer");
    return bounded(file_, line_of(*n.node()), field, case_field, *v);
  }

  /// The line of `key` in group `g`, or the group's line when the key is absent.
  int key_line(const toml::table& g, std::string_view key) {
    auto n = g[key];
    return n ? line_of(*n.node()) : line_of(g);
  }

  template <typename T, typename F>
  std::vector<T> parsed_list(const toml::table& g, std::string_view key, std::vector<std::string> dflt, F&& parse) {
    std::vector<std::pair<std::string, int>> items;
    if (auto n = g[key]) items = string_list(*n.node(), key);
    else for (auto& d : dflt) items.emplace_back(d, line_of(g));
    std::vector<T> out;
    for (const auto& [text, line] : items) {
      try {
        out.push_back(parse(text));
      } catch (const std::exception& e) {
        throw SuiteError(file_, line, std::string(key), e.what());
      }
    }
    return out;
  }

  /// fp8 dequantisation scale of a group: KEY = number (per tensor) or array of numbers (one per KV
  /// head), or KEY_range = [first, last] (per KV head, linear from head 0 to the last head).
  KvScale kv_scale(const toml::table& g, std::string_view key) {
    const std::string field = fmt::format("cells.{}", key), range_key = fmt::format("{}_range", key);
    auto number = [&](const toml::node& n) {
      auto v = n.value<double>();
      if (!v) throw SuiteError(file_, line_of(n), field, "items must be numbers");
      return static_cast<float>(*v);
    };
    KvScale k;
    const std::string slot_key = fmt::format("{}_slot", key);
    if (auto sl = g[slot_key]) {
      const toml::array* a = sl.as_array();
      if (!a || a->size() != 2)
        throw SuiteError(file_, line_of(*sl.node()), "cells." + slot_key,
                         "must be [lo, hi]: per-slot scales drawn log-uniformly between them (seed 002)");
      if (g[key] || g[range_key])
        throw SuiteError(file_, line_of(*sl.node()), "cells." + slot_key,
                         fmt::format("give one of {}, {} and {}", key, range_key, slot_key));
      k.slot = std::pair{number((*a)[0]), number((*a)[1])};
      return k;
    }
    auto n = g[key], r = g[range_key];
    if (n && r) throw SuiteError(file_, line_of(*r.node()), "cells." + range_key, fmt::format("give {} or {}, not both", key, range_key));
    if (n) {
      if (const toml::array* a = n.as_array()) {
        if (a->empty()) throw SuiteError(file_, line_of(*n.node()), field, "must be a number or a non-empty array of numbers (one per KV head)");
        for (const auto& e : *a) k.values.push_back(number(e));
      } else {
        k.values.push_back(number(*n.node()));
      }
    }
    if (r) {
      const toml::array* a = r.as_array();
      if (!a || a->size() != 2)
        throw SuiteError(file_, line_of(*r.node()), "cells." + range_key, "must be [first, last]: the scales of KV head 0 and of the last KV head");
      k.range = std::pair{number((*a)[0]), number((*a)[1])};
    }
    return k;
  }

  // --- A [[cells]] group as a product of axes -------------------------------------------------------------
  /// One value of an axis and the TOML line an error about the fields it sets points at. `value` holds the
  /// fields of the axis's key (the case field table's rows whose suite_key it is), copied into each cell;
  /// `apply`, when set, sets the cell instead (a value that depends on another axis's, or a cell's own).
  struct AxisItem {
    Case value;
    int line = 0;
    std::function<void(SuiteCell&)> apply;
  };
  /// A suite key and its values: a group expands into the product of its axes, the last varying fastest.
  struct Axis {
    std::string key;
    std::vector<AxisItem> items;
  };

  /// An axis of one item per (value, line) of `values`, `set` writing the value into the item's Case.
  template <typename T, typename Set>
  static Axis axis_of(std::string key, const std::vector<std::pair<T, int>>& values, Set&& set) {
    Axis a{std::move(key), {}};
    for (const auto& [v, line] : values) {
      a.items.emplace_back();
      set(a.items.back().value, v);
      a.items.back().line = line;
    }
    return a;
  }

  /// A number of a heads item, saturated to the long long range when it is too large to read (the range check
  /// then names it); nullopt when it is not an integer.
  static std::optional<long long> heads_number(std::string_view t) {
    long long v = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec == std::errc::result_out_of_range && p == t.data() + t.size())
      return t.starts_with('-') ? std::numeric_limits<long long>::min() : std::numeric_limits<long long>::max();
    if (ec != std::errc() || p != t.data() + t.size()) return std::nullopt;
    return v;
  }

  /// heads = ["32/8", ...]: num_heads and num_kv_heads, each range-checked at its item's line.
  Axis heads_axis(const toml::table& g) {
    auto hn = g["heads"];
    if (!hn) throw SuiteError(file_, line_of(g), "cells.heads", "missing (e.g. heads = [\"32/8\"])");
    std::vector<std::pair<std::array<int, 2>, int>> heads;
    for (const auto& [text, line] : string_list(*hn.node(), "cells.heads")) {
      const auto slash = text.find('/');
      std::optional<long long> parts[2];
      if (slash != std::string::npos) {
        parts[0] = heads_number(std::string_view(text).substr(0, slash));
        parts[1] = heads_number(std::string_view(text).substr(slash + 1));
      }
      if (!parts[0] || !parts[1])
        throw SuiteError(file_, line, "cells.heads", fmt::format("'{}' is not \"num_heads/num_kv_heads\"", text));
      const std::string_view names[2] = {"num_heads", "num_kv_heads"};
      std::array<int, 2> hkv{};
      for (int i = 0; i < 2; ++i) {
        try {
          hkv[i] = checked_field(names[i], *parts[i]);
        } catch (const CaseError&) {
          const FieldBounds b = field_bounds(names[i]);
          const std::string_view t = i == 0 ? std::string_view(text).substr(0, slash) : std::string_view(text).substr(slash + 1);
          throw SuiteError(file_, line, "cells.heads", fmt::format("{} {} is out of range [{}, {}]", names[i], t, b.lo, b.hi));
        }
      }
      heads.emplace_back(hkv, line);
    }
    return axis_of("heads", heads, [](Case& c, const std::array<int, 2>& h) {
      c.num_heads = h[0];
      c.num_kv_heads = h[1];
    });
  }

  /// A required integer key (head_sizes, block_sizes), each value range-checked for the case field `field`
  /// at its own line.
  Axis bounded_axis(const toml::table& g, std::string_view key, std::string_view field, int Case::*member) {
    auto n = g[key];
    if (!n) throw SuiteError(file_, line_of(g), fmt::format("cells.{}", key), "missing");
    std::vector<std::pair<int, int>> values;
    for (const auto& [v, l] : int_list(*n.node(), fmt::format("cells.{}", key)))
      values.emplace_back(bounded(file_, l, fmt::format("cells.{}", key), field, v), l);
    return axis_of(std::string(key), values, [member](Case& c, int v) { c.*member = v; });
  }

  /// seq_lens = [4090, [100, 33], { cycle = [...], count = N }]: an int is a one-sequence cell, an array a
  /// batch, a table a generated batch.
  Axis seq_lens_axis(const toml::table& g) {
    std::vector<std::pair<std::vector<int>, int>> batches;
    auto sn = g["seq_lens"];
    if (!sn) throw SuiteError(file_, line_of(g), "cells.seq_lens", "missing");
    const toml::array* sa = sn.as_array();
    if (!sa || sa->empty()) throw SuiteError(file_, line_of(*sn.node()), "cells.seq_lens", "must be a non-empty array");
    for (const auto& e : *sa) {
      if (auto v = e.value_exact<std::int64_t>()) {
        batches.push_back({{bounded(file_, line_of(e), "cells.seq_lens", "seq_lens", *v)}, line_of(e)});
      } else if (e.is_array()) {
        std::vector<int> b;
        for (const auto& [v, l] : int_list(e, "cells.seq_lens")) b.push_back(bounded(file_, l, "cells.seq_lens", "seq_lens", v));
        batches.push_back({b, line_of(e)});
      } else if (const toml::table* t = e.as_table()) {
        batches.push_back({generated_batch(*t), line_of(e)});
      } else {
        throw SuiteError(file_, line_of(e), "cells.seq_lens",
                         "items must be integers, arrays of integers or { cycle = [N, ...], count = M } tables");
      }
    }
    return axis_of("seq_lens", batches, [](Case& c, const std::vector<int>& lens) { c.seq_lens = lens; });
  }

  /// dtypes = ["bf16", "q=f32,kv=bf16,o=f32"]: q, kv and out dtypes. Errors about them point at the key.
  Axis dtypes_axis(const toml::table& g) {
    const auto dtypes = parsed_list<std::array<DType, 3>>(g, "dtypes", {"bf16"}, [](const std::string& t) {
      // "bf16" (q = kv = out) or "q=f32,kv=bf16,o=f32"
      if (t.find('=') == std::string::npos) { DType d = parse_dtype(t); return std::array<DType, 3>{d, d, d}; }
      std::array<DType, 3> r{DType::bf16, DType::bf16, DType::bf16};
      std::stringstream ss(t);
      std::string part;
      std::set<std::string> seen;
      while (std::getline(ss, part, ',')) {
        const auto eq = part.find('=');
        const std::string key = part.substr(0, eq), val = eq == std::string::npos ? "" : part.substr(eq + 1);
        if (key == "q") r[0] = parse_dtype(val);
        else if (key == "kv") r[1] = parse_dtype(val);
        else if (key == "o") r[2] = parse_dtype(val);
        else throw std::invalid_argument("'" + part + "' is not q=, kv= or o=");
        seen.insert(key);
      }
      if (seen.size() != 3) throw std::invalid_argument("'" + t + "' must name q=, kv= and o=");
      return r;
    });
    Axis a{"dtypes", {}};
    for (const auto& d : dtypes) {
      a.items.emplace_back();
      std::tie(a.items.back().value.q_dtype, a.items.back().value.kv_dtype, a.items.back().value.out_dtype) =
          std::tuple{d[0], d[1], d[2]};
      a.items.back().line = key_line(g, "dtypes");
    }
    return a;
  }

  /// layouts = ["native", "vllm", ...]: a native cell runs in each kernel's preferred layout (vllm here).
  Axis layouts_axis(const toml::table& g) {
    Axis a{"layouts", {}};
    for (const auto& layout : parsed_list<std::optional<Layout>>(g, "layouts", {"native"}, [](const std::string& t) {
           return t == "native" ? std::optional<Layout>{} : std::optional<Layout>{parse_layout(t)};
         })) {
      a.items.emplace_back();
      a.items.back().line = line_of(g);
      a.items.back().apply = [layout](SuiteCell& sc) {
        sc.cell.c.layout = layout.value_or(Layout::vllm);
        sc.native_layout = !layout.has_value();
      };
    }
    return a;
  }

  /// dists = ["normal", ...]; an error about a cell's dist points at the key.
  Axis dists_axis(const toml::table& g) {
    std::vector<std::pair<Dist, int>> dists;
    for (Dist d : parsed_list<Dist>(g, "dists", {"normal"}, [](const std::string& t) { return parse_dist(t); }))
      dists.emplace_back(d, key_line(g, "dists"));
    return axis_of("dists", dists, [](Case& c, Dist d) { c.dist = d; });
  }

  /// seeds = [7, ...], each in [0, 2^64 - 1].
  Axis seeds_axis(const toml::table& g) {
    std::vector<std::pair<long long, int>> seeds{{7, line_of(g)}};
    if (auto n = g["seeds"]) seeds = int_list(*n.node(), "cells.seeds");
    for (const auto& [seed, line] : seeds)
      if (seed < 0)
        throw SuiteError(file_, line, "cells.seeds",
                         fmt::format("{} is out of range [0, {}]", seed, std::numeric_limits<std::uint64_t>::max()));
    return axis_of("seeds", seeds, [](Case& c, long long s) { c.seed = static_cast<std::uint64_t>(s); });
  }

  /// The softmax scale axis: `scales = [...]` (items of parse_scale_item), or the older `scale = NUMBER`. A
  /// scale is resolved for the cell's head_size (its default is left out of the id).
  Axis scales_axis(const toml::table& g) {
    std::vector<std::pair<SoftmaxScale, int>> scales{{SoftmaxScale{}, line_of(g)}};
    if (g["scale"] && g["scales"])
      throw SuiteError(file_, key_line(g, "scales"), "cells.scales", "give scale or scales, not both");
    if (auto n = g["scale"]) {
      auto v = n.value<double>();
      if (!v) throw SuiteError(file_, line_of(*n.node()), "cells.scale", "must be a number");
      scales = {{SoftmaxScale{SoftmaxScale::Kind::value, *v}, line_of(*n.node())}};
    }
    if (auto n = g["scales"]) {
      scales.clear();
      const toml::array* a = n.as_array();
      if (!a || a->empty())
        throw SuiteError(file_, line_of(*n.node()), "cells.scales",
                         "must be a non-empty array (items: \"default\", a number, \"query_pre_attn_scalar:N\", "
                         "\"attention_multiplier:X\")");
      for (const auto& e : *a) {
        try {
          if (auto v = e.value<double>(); v && !e.is_string()) scales.push_back({SoftmaxScale{SoftmaxScale::Kind::value, *v}, line_of(e)});
          else if (auto t = e.value<std::string>()) scales.push_back({parse_scale_item(*t), line_of(e)});
          else throw std::invalid_argument("items must be numbers or strings");
        } catch (const std::invalid_argument& ex) {
          throw SuiteError(file_, line_of(e), "cells.scales", ex.what());
        }
      }
    }
    Axis a{"scales", {}};
    for (const auto& [scale, line] : scales) {
      a.items.emplace_back();
      a.items.back().line = line;
      // Captured by an initializer, not by name: clang 14 cannot capture a structured binding.
      a.items.back().apply = [s = scale](SuiteCell& sc) { sc.cell.c.scale = s.resolve(sc.cell.c.head_size); };
    }
    return a;
  }

  /// variants = ["none", "win=128", "cap=50 alibi=geo", ...]: each item a space-separated set of the id tokens
  /// of the case fields whose suite key is "variants" (core/case_fields.hpp), "none" for plain decode.
  Axis variants_axis(const toml::table& g) {
    std::vector<std::pair<Case, int>> variants{{Case{}, line_of(g)}};
    if (auto n = g["variants"]) {
      variants.clear();
      for (const auto& [text, line] : string_list(*n.node(), "cells.variants")) variants.emplace_back(variant_item(text, line), line);
    }
    return axis_of("variants", variants, [](Case& c, const Case& v) { c = v; });
  }
  /// One item of `variants`: "none", or id tokens of the variant rows, each field at most once.
  Case variant_item(const std::string& text, int line) {
    if (text.find_first_not_of(" \t") == std::string::npos)
      throw SuiteError(file_, line, "cells.variants", "an empty item: write \"none\" for plain decode");
    Case v;
    std::istringstream in(text);
    std::string tok;
    std::set<std::string> seen;
    while (text != "none" && in >> tok) {
      const char* field = variant_token_field(tok);
      if (!field) {
        std::vector<std::string_view> forms;
        for (const CaseField& f : case_field_table())
          if (f.suite_key == "variants") forms.push_back(f.token_form);
        throw SuiteError(file_, line, "cells.variants",
                         fmt::format("'{}' in '{}' is not {} (or the item \"none\")", tok, text, prose_list(forms)));
      }
      if (!seen.insert(field).second)
        throw SuiteError(file_, line, "cells.variants", fmt::format("'{}' sets {} twice", text, field));
      try {
        apply_variant_token(tok, v);
      } catch (const CaseError& e) {
        throw SuiteError(file_, line, fmt::format("cells.{}", e.field), e.reason);
      }
    }
    return v;
  }
  /// "a, b or c".
  static std::string prose_list(const std::vector<std::string_view>& items) {
    std::string out;
    for (std::size_t i = 0; i < items.size(); ++i)
      out += fmt::format("{}{}", i == 0 ? "" : i + 1 == items.size() ? " or " : ", ", items[i]);
    return out;
  }

  /// The MLA axis: mla = "512+64" or ["512+64", "512+64,v256"] (MlaShape::text: kv_lora_rank,
  /// qk_rope_head_dim and v_head_dim, the rows whose suite key is "mla"); absent = multi-head cells.
  Axis mla_axis(const toml::table& g) {
    std::vector<std::pair<Case, int>> shapes{{Case{}, line_of(g)}};
    if (auto n = g["mla"]) {
      shapes.clear();
      for (const auto& [text, line] : string_list(*n.node(), "cells.mla")) {
        Case v;
        try {
          case_field_of_token("mla=")->parse(*find_case_field("kv_lora_rank"), text, v);
        } catch (const CaseError& e) {
          throw SuiteError(file_, line, fmt::format("cells.mla ({})", e.field), e.reason);
        }
        shapes.emplace_back(v, line);
      }
    }
    return axis_of("mla", shapes, [](Case& c, const Case& v) { c = v; });
  }

  /// The high-block-id axis: high_block_ids = 31 or [0, 31, 32] (Case::high_block_ids).
  Axis high_block_ids_axis(const toml::table& g) {
    std::vector<std::pair<int, int>> hiblks{{Case{}.high_block_ids, line_of(g)}};
    if (auto n = g["high_block_ids"]) {
      hiblks.clear();
      for (const auto& [v, l] : int_list(*n.node(), "cells.high_block_ids")) {
        if (v != 0 && v != 31 && v != 32)
          throw SuiteError(file_, l, "cells.high_block_ids",
                           fmt::format("{} is not 0 (a dense pool), 31 or 32 (block offsets past 2^31 / 2^32)", v));
        hiblks.emplace_back(static_cast<int>(v), l);
      }
    }
    return axis_of("high_block_ids", hiblks, [](Case& c, int v) { c.high_block_ids = v; });
  }

  /// A key of one value for the whole group (spare_blocks, padding_columns, padding_target), range-checked
  /// for its case field; errors point at the key (the group when it is absent).
  Axis one_int_axis(const toml::table& g, std::string_view key, int Case::*member) {
    AxisItem item;
    item.value.*member = int_value(g, key, key, Case{}.*member);
    item.line = key_line(g, key);
    return Axis{std::string(key), {item}};
  }

  /// k_scale / v_scale and their _range and _slot forms: one value for the group.
  Axis kv_scale_axis(const toml::table& g, std::string_view key, KvScale Case::*member) {
    AxisItem item;
    item.value.*member = kv_scale(g, key);
    const std::string slot = fmt::format("{}_slot", key), range = fmt::format("{}_range", key);
    item.line = key_line(g, g[key] ? key : g[slot] ? std::string_view(slot) : std::string_view(range));
    return Axis{std::string(key), {item}};
  }

  /// faults = ["clean", "V:nan@tail"]: the cell's fault, the last axis.
  Axis faults_axis(const toml::table& g) {
    Axis a{"faults", {}};
    for (const FaultSpec& f : parsed_list<FaultSpec>(g, "faults", {"clean"}, [](const std::string& t) { return parse_fault(t); })) {
      a.items.emplace_back();
      a.items.back().line = g["faults"] ? line_of(*g["faults"].node()) : line_of(g);
      a.items.back().apply = [f](SuiteCell& sc) { sc.cell.fault = f; };
    }
    return a;
  }

  /// Refuses the [[cells]] group at `line` before it is expanded when the suite, `before` cells and sequences_
  /// sequences so far, would pass kMaxSuiteCells cells or kMaxSuiteSequences sequences with it: the group's
  /// cells are the product of its axes' items, its sequences that product with the seq_lens axis counted by
  /// the sequences of its batches. The SuiteError names the group, its cells and the axes that multiply.
  void check_group_size(int line, const std::vector<Axis>& axes, double before) const {
    double cells = 1, others = 1, batch_seqs = 0;  // doubles: a product of a few large axes overflows std::size_t
    std::string product;
    for (const Axis& a : axes) {
      cells *= static_cast<double>(a.items.size());
      if (a.key == "seq_lens")
        for (const AxisItem& item : a.items) batch_seqs += static_cast<double>(item.value.seq_lens.size());
      else
        others *= static_cast<double>(a.items.size());
      if (a.items.size() > 1) product += fmt::format("{}{} {}", product.empty() ? "" : " x ", a.key, a.items.size());
    }
    const double seqs = others * batch_seqs;
    const std::string axes_text = product.empty() ? "" : fmt::format(" ({})", product);
    const std::string so_far = before > 0 ? fmt::format(", after {:.0f} cells before it", before) : "";
    if (before + cells > static_cast<double>(kMaxSuiteCells))
      throw SuiteError(file_, line, "cells",
                       fmt::format("this group expands into {:.0f} cells{}{}, over the {} a suite may hold: split it "
                                   "into several suites, or drop values from an axis",
                                   cells, axes_text, so_far, kMaxSuiteCells));
    if (sequences_ + seqs > static_cast<double>(kMaxSuiteSequences))
      throw SuiteError(file_, line, "cells",
                       fmt::format("this group's {:.0f} cells{} hold {:.0f} sequences{}, over the {} a suite's cells "
                                   "may hold together: split it into several suites",
                                   cells, axes_text, seqs, sequences_ > 0 ? " more" : "", kMaxSuiteSequences));
  }

  /// The axes of group `g`, parsed in the order their errors are reported and returned in the order cells
  /// are expanded: heads, head_sizes, block_sizes, dtypes, seq_lens, layouts, dists, seeds, scales,
  /// variants, high_block_ids, faults; mla before heads (the one-value keys first: they do not change the order).
  std::vector<Axis> group_axes(const toml::table& g) {
    Axis heads = heads_axis(g);
    Axis head_sizes = bounded_axis(g, "head_sizes", "head_size", &Case::head_size);
    Axis block_sizes = bounded_axis(g, "block_sizes", "block_size", &Case::block_size);
    Axis lens = seq_lens_axis(g);
    Axis dtypes = dtypes_axis(g);
    Axis faults = faults_axis(g);
    Axis layouts = layouts_axis(g);
    Axis dists = dists_axis(g);
    Axis seeds = seeds_axis(g);
    Axis scales = scales_axis(g);
    Axis variants = variants_axis(g);
    Axis k_scale = kv_scale_axis(g, "k_scale", &Case::k_scale);
    Axis v_scale = kv_scale_axis(g, "v_scale", &Case::v_scale);
    Axis spare = one_int_axis(g, "spare_blocks", &Case::spare_blocks);
    Axis padcols = one_int_axis(g, "padding_columns", &Case::padding_columns);
    Axis padto = one_int_axis(g, "padding_target", &Case::padding_target);
    Axis hiblk = high_block_ids_axis(g);
    Axis mla = mla_axis(g);
    std::vector<Axis> axes;
    for (Axis* a : {&k_scale, &v_scale, &spare, &padcols, &padto, &mla, &heads, &head_sizes, &block_sizes, &dtypes,
                    &lens, &layouts, &dists, &seeds, &scales, &variants, &hiblk, &faults})
      axes.push_back(std::move(*a));
    return axes;
  }

  /// The cell at odometer position `at` of `axes`: each axis's item applied in axis order, an item without
  /// `apply` copying the fields of its key (the rows whose suite_key it is).
  static SuiteCell cell_at(const std::vector<Axis>& axes, const std::vector<std::size_t>& at) {
    SuiteCell sc;
    for (std::size_t i = 0; i < axes.size(); ++i) {
      const AxisItem& item = axes[i].items[at[i]];
      if (item.apply) {
        item.apply(sc);
        continue;
      }
      for (const CaseField& f : case_field_table())
        if (f.suite_key == axes[i].key) f.copy(item.value, sc.cell.c);
    }
    return sc;
  }

  /// The line an error about case field `field` points at in the cell at `at`: the item's line of the axis
  /// whose key sets the field, else the seq_lens item's (the lengths, and the pool size they imply).
  static int error_line(const std::vector<Axis>& axes, const std::vector<std::size_t>& at, const std::string& field) {
    const CaseField* f = find_case_field(field);
    int lens_line = 0;
    for (std::size_t i = 0; i < axes.size(); ++i) {
      if (f && axes[i].key == f->suite_key) return axes[i].items[at[i]].line;
      if (axes[i].key == "seq_lens") lens_line = axes[i].items[at[i]].line;
    }
    return lens_line;
  }

  /// Checks the cell at `at`: its case (and, for a native cell, the case in every native layout), then its
  /// fault against the case. Throws SuiteError at the line of the value at fault.
  void check_cell(const std::vector<Axis>& axes, const std::vector<std::size_t>& at, const SuiteCell& sc) {
    const Case& c = sc.cell.c;
    try {
      c.validate();
      if (sc.native_layout) {  // every native layout must be valid too
        for (Layout l : {Layout::vllm, Layout::nhd, Layout::hnd}) {
          Case alt = c;
          alt.layout = l;
          alt.validate();
        }
      }
    } catch (const CaseError& e) {
      throw SuiteError(file_, error_line(axes, at, e.field), fmt::format("cells.{}", e.field), e.reason);
    }
    const FaultSpec& f = sc.cell.fault;
    const int faults_line = axes.back().items[at.back()].line;
    try {
      check_fault(f, c.kv_dtype);
    } catch (const std::invalid_argument& e) {
      throw SuiteError(file_, faults_line, "cells.faults", e.what());
    }
    if (f.region == Region::window && c.sliding_window == 0)
      throw SuiteError(file_, faults_line, "cells.faults",
                       fmt::format("'{}': region 'window' needs a sliding window; this cell has none (variants = "
                                   "[\"win=W\"])",
                                   f.id()));
    if (const std::string why = fault_case_problem(f, c); !why.empty())
      throw SuiteError(file_, faults_line, "cells.faults", why);
  }

  void expand_group(const toml::table& g, std::vector<SuiteCell>& out) {
    check_keys(g, {"heads", "head_sizes", "block_sizes", "dtypes", "seq_lens", "faults", "layouts", "dists", "seeds",
                   "spare_blocks", "padding_columns", "padding_target", "scale", "scales", "k_scale", "v_scale",
                   "k_scale_range", "v_scale_range", "k_scale_slot", "v_scale_slot", "variants", "high_block_ids", "mla"},
               "cells.");
    const std::vector<Axis> axes = group_axes(g);
    check_group_size(line_of(g), axes, static_cast<double>(out.size()));
    // The product, as an odometer over the axes' items: the last axis (faults) varies fastest.
    std::vector<std::size_t> at(axes.size(), 0);
    for (bool more = true; more;) {
      SuiteCell sc = cell_at(axes, at);
      check_cell(axes, at, sc);
      sc.file = file_;
      sc.line = line_of(g);
      sequences_ += static_cast<double>(sc.cell.c.seq_lens.size());
      out.push_back(std::move(sc));
      more = false;
      for (std::size_t i = axes.size(); i-- > 0;) {
        if (++at[i] < axes[i].items.size()) {
          more = true;
          break;
        }
        at[i] = 0;
      }
    }
  }
};

}  // namespace

std::optional<float> SoftmaxScale::resolve(int head_size) const {
  float v = 0;
  switch (kind) {
    case Kind::default_scale: return std::nullopt;
    case Kind::value: v = static_cast<float>(number); break;
    case Kind::query_pre_attn_scalar:
      // The default's own formula (Case::effective_scale), so query_pre_attn_scalar = head_size is the default.
      v = 1.0f / std::sqrt(static_cast<float>(number));
      break;
  }
  if (v == 1.0f / std::sqrt(static_cast<float>(head_size))) return std::nullopt;  // the default: no id token
  return v;
}

std::string SoftmaxScale::text() const {
  switch (kind) {
    case Kind::default_scale: return "default";
    case Kind::value: return fmt::format("{}", number);
    case Kind::query_pre_attn_scalar: return fmt::format("query_pre_attn_scalar:{}", number);
  }
  return "?";
}

SoftmaxScale parse_scale_item(std::string_view text) {
  if (text == "default") return {};
  auto number_after = [&](std::string_view prefix) -> std::optional<double> {
    if (!text.starts_with(prefix)) return std::nullopt;
    const std::string_view t = text.substr(prefix.size());
    double v = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc() || p != t.data() + t.size() || !std::isfinite(v) || v <= 0)
      throw std::invalid_argument(fmt::format("'{}': '{}' is not a finite number > 0", text, t));
    return v;
  };
  if (auto v = number_after("query_pre_attn_scalar:")) return {SoftmaxScale::Kind::query_pre_attn_scalar, *v};
  if (auto v = number_after("attention_multiplier:")) return {SoftmaxScale::Kind::value, *v};
  throw std::invalid_argument(fmt::format(
      "'{}' is not \"default\", \"query_pre_attn_scalar:N\" (scale N^-0.5) or \"attention_multiplier:X\" (scale X); "
      "a plain scale is written as a TOML number",
      text));
}

Suite parse_suite(const std::string& text, const std::string& file) { return Parser(file, 0).parse(text); }
Suite load_suite(const std::string& name_or_path) { return Parser::load_named(name_or_path, 0); }

CellKinds cell_kinds(const Suite& suite) {
  CellKinds k;
  for (const SuiteCell& sc : suite.cells) (sc.cell.c.is_mla() ? k.mla : k.mha) = true;
  return k;
}

}  // namespace pacheck
