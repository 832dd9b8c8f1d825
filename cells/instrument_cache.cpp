// The instrument check of the cells library (pacheck/cells.hpp's check_instrument) and its on-disk cache: the
// comparator self-test and the CPU negative controls on a suite take 13-28 s on 2 cores, which every rerun of
// one pytest test or gtest cell would pay again.
#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cells/cells_internal.hpp"
#include "core/digest.hpp"
#include "core/files.hpp"
#include "core/version.hpp"
#include "exec/runner.hpp"
#include "judge/comparator.hpp"
#include "oracle/oracle.hpp"
#include "verify/evidence.hpp"

namespace pacheck::cells {

namespace {

/// The comparator self-test and the CPU negative controls on the cells of `s` that plant their faults.
InstrumentCheck run_instrument_check(const Suite& s) {
  InstrumentCheck out;
  const SelfTestResult st = comparator_selftest();
  if (!st.passed) {
    out.blind = true;
    out.summary = fmt::format("comparator self-test failed:\n  {}\n", fmt::join(st.lines, "\n  "));
    return out;
  }
  out.summary = "comparator self-test passed\n";
  // pacheck's CPU negative controls on the cells of the suite where each one's planted fault must show
  // (a control that has none in this suite is not exercised, as in a run).
  const std::vector<KernelPtr> controls = Registry::global().negative_controls(PACHECK_DEVICE_CPU);
  Suite planted = s;
  planted.cells.clear();
  for (const SuiteCell& c : s.cells)
    for (const auto& k : controls)
      if ((*k->expected_failures())(c.for_layouts(k->layouts()))) {
        planted.cells.push_back(c);
        break;
      }
  if (planted.cells.empty() || controls.empty()) {
    out.summary += fmt::format("negative controls: not exercised (suite {} plants none of their faults)\n", s.name);
    return out;
  }
  const RunSummary r = run_suite(planted, controls, "cpu", RunOptions{});
  out.blind = r.blind;
  for (const KernelSummary& k : r.kernels)
    out.summary += fmt::format("negative control {}: {} ({} cells caught, {} missed)\n", k.kernel,
                               control_outcome_name(k.control), k.caught, k.missed);
  return out;
}

/// SHA-256 of the file this code was loaded from (the library's build), computed once; "" when unknown.
const std::string& library_sha256() {
  static const std::string sha = [] {
    Dl_info info{};
    if (!dladdr(reinterpret_cast<const void*>(&run_instrument_check), &info) || !info.dli_fname) return std::string();
    try {
      return sha256_file(info.dli_fname);
    } catch (const std::exception&) {
      return std::string();
    }
  }();
  return sha;
}

/// The cache folder: $PACHECK_CACHE_DIR, $XDG_CACHE_HOME/pacheck or ~/.cache/pacheck, then instrument/.
std::filesystem::path cache_dir() {
  std::filesystem::path base;
  if (const char* d = std::getenv("PACHECK_CACHE_DIR"); d && *d) base = d;
  else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) base = std::filesystem::path(x) / "pacheck";
  else if (const char* h = std::getenv("HOME"); h && *h) base = std::filesystem::path(h) / ".cache" / "pacheck";
  return base.empty() ? base : base / "instrument";
}

/// The key's fields: everything the check's answer depends on.
nlohmann::json cache_key(const Suite& s, const std::string& device) {
  std::vector<std::string> controls;
  for (const auto& k : Registry::global().negative_controls(PACHECK_DEVICE_CPU)) controls.push_back(k->name());
  std::sort(controls.begin(), controls.end());
  return {{"library_sha256", library_sha256()},
          {"pacheck_version", pacheck_version()},
          {"suite", s.name},
          {"suite_sha256", suite_digest(s).sha256},
          {"device", device},
          {"oracle_isa", std::string(oracle_isa_name(oracle_isa()))},
          {"controls", controls}};
}

bool recheck_from_env() {
  const char* v = std::getenv("PACHECK_RECHECK");
  return v && *v && std::string(v) != "0";
}

}  // namespace

InstrumentCheck check_instrument_on(const std::string& suite, const std::string& device, bool recheck) {
  const Suite& s = suite_named(suite);
  const std::filesystem::path dir = cache_dir();
  const nlohmann::json key = cache_key(s, device);
  if (dir.empty() || library_sha256().empty()) {
    InstrumentCheck out = run_instrument_check(s);
    out.summary += "instrument check not cached (no cache folder: set PACHECK_CACHE_DIR)\n";
    return out;
  }
  Sha256 h;
  const std::string key_text = key.dump();
  h.update(key_text.data(), key_text.size());
  const std::filesystem::path file = dir / (h.hex() + ".json");
  if (!recheck && !recheck_from_env()) {
    try {
      const nlohmann::json j = nlohmann::json::parse(read_regular_file(file.string(), ReadLimit{1 << 20, "a cached instrument check"}));
      if (j.at("key") == key && !j.at("blind").get<bool>()) {
        InstrumentCheck out{false, j.at("summary").get<std::string>(), true, file.string()};
        out.summary += fmt::format("(cached {} in {}; --pacheck-recheck, recheck=True or PACHECK_RECHECK=1 runs it again)\n",
                                   j.value("when", std::string("earlier")), file.string());
        return out;
      }
    } catch (const std::exception&) {
      // Absent, unreadable or another key's: checked afresh below.
    }
  }
  InstrumentCheck out = run_instrument_check(s);
  if (out.blind) return out;  // never kept: a blind instrument is checked again every time
  try {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    ::chmod(dir.c_str(), 0700);
    char when[32] = {};
    const std::time_t now = std::time(nullptr);
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
    const nlohmann::json j = {{"key", key}, {"blind", false}, {"summary", out.summary}, {"when", when}};
    write_file_atomically(file.string(), j.dump(1) + "\n");
    out.cache_file = file.string();
  } catch (const std::exception& e) {
    out.summary += fmt::format("instrument check not cached: {}\n", e.what());
  }
  return out;
}

}  // namespace pacheck::cells
