#include "suites/suite.hpp"

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
#include <set>
#include <string_view>
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

/// One axis of a [[cells]] group: its key and how many values it lists.
struct Axis {
  const char* key;
  std::size_t values;
};

/// Refuses the [[cells]] group at `line` of `file` before it is expanded when the suite, `before` cells and
/// `before_seqs` sequences so far, would pass kMaxSuiteCells cells or kMaxSuiteSequences sequences with it:
/// the group's cells are the product of its axes (`seq_lens` counted by its batches, holding `batch_seqs`
/// sequences together). The SuiteError names the group, its cells and the axes that multiply.
void check_group_size(const std::string& file, int line, const std::vector<Axis>& axes, std::size_t batch_seqs,
                      double before, double before_seqs) {
  double cells = 1, others = 1;  // doubles: a product of a few large axes overflows std::size_t
  std::string product;
  for (const Axis& a : axes) {
    cells *= static_cast<double>(a.values);
    if (std::string_view(a.key) != "seq_lens") others *= static_cast<double>(a.values);
    if (a.values > 1) product += fmt::format("{}{} {}", product.empty() ? "" : " x ", a.key, a.values);
  }
  const double seqs = others * static_cast<double>(batch_seqs);
  const std::string axes_text = product.empty() ? "" : fmt::format(" ({})", product);
  const std::string so_far = before > 0 ? fmt::format(", after {:.0f} cells before it", before) : "";
  if (before + cells > static_cast<double>(kMaxSuiteCells))
    throw SuiteError(file, line, "cells",
                     fmt::format("this group expands into {:.0f} cells{}{}, over the {} a suite may hold: split it "
                                 "into several suites, or drop values from an axis",
                                 cells, axes_text, so_far, kMaxSuiteCells));
  if (before_seqs + seqs > static_cast<double>(kMaxSuiteSequences))
    throw SuiteError(file, line, "cells",
                     fmt::format("this group's {:.0f} cells{} hold {:.0f} sequences{}, over the {} a suite's cells may "
                                 "hold together: split it into several suites",
                                 cells, axes_text, seqs, before_seqs > 0 ? " more" : "", kMaxSuiteSequences));
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

  void expand_group(const toml::table& g, std::vector<SuiteCell>& out) {
    check_keys(g, {"heads", "head_sizes", "block_sizes", "dtypes", "seq_lens", "faults", "layouts", "dists", "seeds",
                   "spare_blocks", "padding_columns", "padding_target", "scale", "scales", "k_scale", "v_scale",
                   "k_scale_range", "v_scale_range", "k_scale_slot", "v_scale_slot", "variants", "high_block_ids"},
               "cells.");
    const int gline = line_of(g);
    // heads = ["32/8", ...]
    struct Heads {
      int h, kv, line;
    };
    std::vector<Heads> heads;
    auto hn = g["heads"];
    if (!hn) throw SuiteError(file_, gline, "cells.heads", "missing (e.g. heads = [\"32/8\"])");
    for (const auto& [text, line] : string_list(*hn.node(), "cells.heads")) {
      const auto slash = text.find('/');
      std::optional<long long> parts[2];
      auto number = [&](std::string_view t) -> std::optional<long long> {
        long long v = 0;
        auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (ec == std::errc::result_out_of_range && p == t.data() + t.size())
          return t.starts_with('-') ? std::numeric_limits<long long>::min() : std::numeric_limits<long long>::max();
        if (ec != std::errc() || p != t.data() + t.size()) return std::nullopt;
        return v;
      };
      if (slash != std::string::npos) {
        parts[0] = number(std::string_view(text).substr(0, slash));
        parts[1] = number(std::string_view(text).substr(slash + 1));
      }
      if (!parts[0] || !parts[1])
        throw SuiteError(file_, line, "cells.heads", fmt::format("'{}' is not \"num_heads/num_kv_heads\"", text));
      const std::string_view names[2] = {"num_heads", "num_kv_heads"};
      int hkv[2] = {0, 0};
      for (int i = 0; i < 2; ++i) {
        try {
          hkv[i] = checked_field(names[i], *parts[i]);
        } catch (const CaseError&) {
          const FieldBounds b = field_bounds(names[i]);
          const std::string_view t = i == 0 ? std::string_view(text).substr(0, slash) : std::string_view(text).substr(slash + 1);
          throw SuiteError(file_, line, "cells.heads", fmt::format("{} {} is out of range [{}, {}]", names[i], t, b.lo, b.hi));
        }
      }
      heads.push_back({hkv[0], hkv[1], line});
    }
    auto need_ints = [&](std::string_view key) {
      auto n = g[key];
      if (!n) throw SuiteError(file_, gline, fmt::format("cells.{}", key), "missing");
      return int_list(*n.node(), fmt::format("cells.{}", key));
    };
    // Each value range-checked for its case field, at its own line.
    auto need_bounded = [&](std::string_view key, std::string_view case_field) {
      std::vector<std::pair<int, int>> out;
      for (const auto& [v, l] : need_ints(key)) out.emplace_back(bounded(file_, l, fmt::format("cells.{}", key), case_field, v), l);
      return out;
    };
    const auto head_sizes = need_bounded("head_sizes", "head_size");
    const auto block_sizes = need_bounded("block_sizes", "block_size");
    // seq_lens = [4090, [100, 33]]: an int is a one-sequence cell, an array a batch.
    std::vector<std::pair<std::vector<int>, int>> batches;
    auto sn = g["seq_lens"];
    if (!sn) throw SuiteError(file_, gline, "cells.seq_lens", "missing");
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
    const auto faults = parsed_list<FaultSpec>(g, "faults", {"clean"}, [](const std::string& t) { return parse_fault(t); });
    const auto layouts = parsed_list<std::optional<Layout>>(g, "layouts", {"native"}, [](const std::string& t) {
      return t == "native" ? std::optional<Layout>{} : std::optional<Layout>{parse_layout(t)};
    });
    const auto dists = parsed_list<Dist>(g, "dists", {"normal"}, [](const std::string& t) { return parse_dist(t); });
    std::vector<std::pair<long long, int>> seeds{{7, gline}};
    if (auto n = g["seeds"]) seeds = int_list(*n.node(), "cells.seeds");
    for (const auto& [seed, line] : seeds)
      if (seed < 0)
        throw SuiteError(file_, line, "cells.seeds",
                         fmt::format("{} is out of range [0, {}]", seed, std::numeric_limits<std::uint64_t>::max()));
    // The softmax scale axis: `scales = [...]` (items of parse_scale_item), or the older `scale = NUMBER`.
    std::vector<std::pair<SoftmaxScale, int>> scales{{SoftmaxScale{}, gline}};
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
    // The attention-variant axis (issue 19): variants = ["none", "win=128", "cap=50 alibi=geo", ...], each
    // item a space-separated set of the case id's variant tokens (apply_variant_token), "none" for plain decode.
    std::vector<std::pair<Case, int>> variants{{Case{}, gline}};
    if (auto n = g["variants"]) {
      variants.clear();
      for (const auto& [text, line] : string_list(*n.node(), "cells.variants")) {
        if (text.find_first_not_of(" \t") == std::string::npos)
          throw SuiteError(file_, line, "cells.variants", "an empty item: write \"none\" for plain decode");
        Case v;
        std::istringstream in(text);
        std::string tok;
        std::set<std::string> seen;
        while (text != "none" && in >> tok) {
          const char* field = variant_token_field(tok);
          if (!field)
            throw SuiteError(file_, line, "cells.variants",
                             fmt::format("'{}' in '{}' is not win=W, cap=C, alibi=FORM, sinks=FORM or qlen=N[,N...] (or the item \"none\")", tok, text));
          if (!seen.insert(field).second)
            throw SuiteError(file_, line, "cells.variants", fmt::format("'{}' sets {} twice", text, field));
          try {
            apply_variant_token(tok, v);
          } catch (const CaseError& e) {
            throw SuiteError(file_, line, fmt::format("cells.{}", e.field), e.reason);
          }
        }
        variants.push_back({v, line});
      }
    }
    const KvScale k_scale = kv_scale(g, "k_scale"), v_scale = kv_scale(g, "v_scale");
    const int faults_line = g["faults"] ? line_of(*g["faults"].node()) : gline;
    const Case defaults{};
    const int spare = int_value(g, "spare_blocks", "spare_blocks", defaults.spare_blocks);
    const int padcols = int_value(g, "padding_columns", "padding_columns", defaults.padding_columns);
    const int padto = int_value(g, "padding_target", "padding_target", defaults.padding_target);
    // The high-block-id axis (issue 18): high_block_ids = 31 or [0, 31, 32] (Case::high_block_ids).
    std::vector<std::pair<int, int>> hiblks{{defaults.high_block_ids, gline}};
    if (auto n = g["high_block_ids"]) {
      hiblks.clear();
      for (const auto& [v, l] : int_list(*n.node(), "cells.high_block_ids")) {
        if (v != 0 && v != 31 && v != 32)
          throw SuiteError(file_, l, "cells.high_block_ids",
                           fmt::format("{} is not 0 (a dense pool), 31 or 32 (block offsets past 2^31 / 2^32)", v));
        hiblks.emplace_back(static_cast<int>(v), l);
      }
    }

    std::size_t batch_seqs = 0;
    for (const auto& b : batches) batch_seqs += b.first.size();
    check_group_size(file_, gline,
                     {{"heads", heads.size()}, {"head_sizes", head_sizes.size()}, {"block_sizes", block_sizes.size()},
                      {"dtypes", dtypes.size()}, {"seq_lens", batches.size()}, {"layouts", layouts.size()},
                      {"dists", dists.size()}, {"seeds", seeds.size()}, {"scales", scales.size()},
                      {"variants", variants.size()}, {"high_block_ids", hiblks.size()}, {"faults", faults.size()}},
                     batch_seqs, static_cast<double>(out.size()), sequences_);
    for (const auto& [h, kv, hline] : heads)
      for (const auto& [d, dline] : head_sizes)
        for (const auto& [bs, bline] : block_sizes)
          for (const auto& dt : dtypes)
            for (const auto& [lens, lline] : batches)
              for (const auto& layout : layouts)
                for (const auto& dist : dists)
                  for (const auto& [seed, sline] : seeds)
                    for (const auto& [scale, scline] : scales)
                    for (const auto& [var, vline] : variants)
                    for (const auto& [hiblk, hbline] : hiblks)
                    for (const auto& f : faults) {
                      SuiteCell sc;
                      Case& c = sc.cell.c;
                      c.num_heads = h;
                      c.num_kv_heads = kv;
                      c.head_size = static_cast<int>(d);
                      c.block_size = static_cast<int>(bs);
                      c.q_dtype = dt[0];
                      c.kv_dtype = dt[1];
                      c.out_dtype = dt[2];
                      c.seq_lens = lens;
                      c.layout = layout.value_or(Layout::vllm);
                      sc.native_layout = !layout.has_value();
                      c.dist = dist;
                      c.seed = static_cast<std::uint64_t>(seed);
                      c.scale = scale.resolve(c.head_size);
                      c.k_scale = k_scale;
                      c.v_scale = v_scale;
                      c.spare_blocks = spare;
                      c.padding_columns = padcols;
                      c.padding_target = padto;
                      c.high_block_ids = hiblk;
                      c.sliding_window = var.sliding_window;
                      c.logits_soft_cap = var.logits_soft_cap;
                      c.alibi_slopes = var.alibi_slopes;
                      c.sinks = var.sinks;
                      c.query_lens = var.query_lens;
                      sc.cell.fault = f;
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
                        // Point at the key that holds the offending value.
                        const std::string& f = e.field;
                        int at = lline;  // seq_lens, and the pool size the lengths imply
                        if (f == "num_heads" || f == "num_kv_heads") at = hline;
                        else if (f == "head_size") at = dline;
                        else if (f == "block_size") at = bline;
                        else if (f == "q_dtype" || f == "out_dtype") at = key_line(g, "dtypes");
                        else if (f == "scale") at = scline;
                        else if (f == "sliding_window" || f == "logits_soft_cap" || f == "alibi_slopes" || f == "sinks" ||
                                 f == "query_lens")
                          at = vline;
                        else if (f == "k_scale")
                          at = key_line(g, g["k_scale"] ? "k_scale" : g["k_scale_slot"] ? "k_scale_slot" : "k_scale_range");
                        else if (f == "v_scale")
                          at = key_line(g, g["v_scale"] ? "v_scale" : g["v_scale_slot"] ? "v_scale_slot" : "v_scale_range");
                        else if (f == "spare_blocks" || f == "padding_columns" || f == "padding_target")
                          at = key_line(g, f);
                        else if (f == "high_block_ids") at = hbline;
                        throw SuiteError(file_, at, fmt::format("cells.{}", f), e.reason);
                      }
                      try {
                        check_fault(f, c.kv_dtype);
                      } catch (const std::invalid_argument& e) {
                        throw SuiteError(file_, faults_line, "cells.faults", e.what());
                      }
                      if (f.region == Region::window && c.sliding_window == 0)
                        throw SuiteError(file_, faults_line, "cells.faults",
                                         fmt::format("'{}': region 'window' needs a sliding window; this cell has "
                                                     "none (variants = [\"win=W\"])",
                                                     f.id()));
                      if (const std::string why = fault_case_problem(f, c); !why.empty())
                        throw SuiteError(file_, faults_line, "cells.faults", why);
                      sequences_ += static_cast<double>(lens.size());
                      out.push_back(std::move(sc));
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

}  // namespace pacheck
