// pacheck::gtest (include/pacheck/gtest.hpp): each cell of a suite registered as one GoogleTest test over
// pacheck::cells. Only registration and reporting live here; the cell runs in pacheck/cells.hpp's run_cell.
#include "pacheck/gtest.hpp"

#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>
#include <utility>

namespace pacheck::gtest {

namespace {

/// Where the user called register_suite: the file and line every test of that call is registered and
/// reported at.
struct Where {
  const char* file;
  int line;
};

/// `s` as one shell word: unchanged when it holds only characters no shell treats specially, else in
/// single quotes (a quote inside as '\\'').
std::string shell_word(const std::string& s) {
  const bool plain = !s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                       "0123456789_./-+=:,@%") == std::string::npos;
  if (plain) return s;
  std::string out = "'";
  for (const char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

std::string sanitized(const std::string& s) {
  std::string out;
  for (const char ch : s) {
    const unsigned char u = static_cast<unsigned char>(ch);
    out += (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') ? ch : '_';
  }
  return out;
}

/// One cell on one kernel as a test. Its failures are reported at `where`, the user's register_suite
/// call, so that an IDE or a CI log links to the user's own source rather than to this file.
class CellTest : public testing::Test {
 public:
  CellTest(std::string suite, std::string kernel, std::string cell_id, std::string device, Where where)
      : suite_(std::move(suite)), kernel_(std::move(kernel)), cell_id_(std::move(cell_id)), device_(std::move(device)),
        where_(where) {}

  void TestBody() override {
    RecordProperty("cell_id", cell_id_);
    RecordProperty("kernel", kernel_);
    RecordProperty("suite", suite_);
    cells::CellRun r;
    try {
      r = cells::run_cell(suite_, kernel_, cell_id_, device_);
    } catch (const std::exception& e) {
      ADD_FAILURE_AT(where_.file, where_.line)
          << "cell '" << cell_id_ << "' on " << kernel_ << ": pacheck could not run it: " << e.what();
      return;
    }
    RecordProperty("verdict", r.verdict);
    if (r.declined) GTEST_SKIP() << kernel_ << " declines '" << r.cell_id << "': " << r.detail;
    if (r.failed)
      ADD_FAILURE_AT(where_.file, where_.line)
          << "cell '" << r.cell_id << "' on " << kernel_ << ": verdict " << r.verdict
          << (r.detail.empty() ? "" : " (" + r.detail + ")") << "\n"
          << r.metrics << (r.metrics.empty() || r.metrics.back() == '\n' ? "" : "\n") << "repro: " << r.repro << "\n"
          << "rerun this test: " << rerun_line();
  }

 private:
  /// This binary, by its absolute path, with a --gtest_filter naming the running test: pastes into a
  /// shell from any directory.
  static std::string rerun_line() {
    const testing::TestInfo* t = testing::UnitTest::GetInstance()->current_test_info();
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    return shell_word(ec ? std::string("<this test binary>") : self.string()) +
           " --gtest_filter=" + shell_word(std::string(t->test_suite_name()) + "." + t->name());
  }

  std::string suite_, kernel_, cell_id_, device_;
  Where where_;
};

/// The test register_refusal registers: it fails with the reason pacheck refused the registration.
class RefusedRegistration : public testing::Test {
 public:
  RefusedRegistration(std::string message, Where where) : message_(std::move(message)), where_(where) {}
  void TestBody() override { ADD_FAILURE_AT(where_.file, where_.line) << message_; }

 private:
  std::string message_;
  Where where_;
};

/// The comparator self-test and the negative controls on one suite, before any test runs.
class InstrumentEnvironment : public testing::Environment {
 public:
  InstrumentEnvironment(std::string suite, bool recheck) : suite_(std::move(suite)), recheck_(recheck) {}
  void SetUp() override {
    cells::InstrumentCheck c;
    try {
      c = cells::check_instrument(suite_, recheck_);
    } catch (const std::exception& e) {
      FAIL() << "pacheck instrument check on suite '" << suite_ << "' could not run: " << e.what();
    }
    if (c.blind) FAIL() << "pacheck is blind on suite '" << suite_ << "' (instrument check failed):\n" << c.summary;
  }

 private:
  std::string suite_;
  bool recheck_;
};

/// Kernels already registered with pacheck, by registration function or plugin path (a second
/// register_suite for another suite reuses them rather than registering the names twice).
std::map<std::pair<const void*, std::string>, std::vector<std::string>>& registered() {
  static std::map<std::pair<const void*, std::string>, std::vector<std::string>> m;
  return m;
}

/// (suite, kernel) pairs registered so far: a second register_suite for one is refused, not registered twice.
std::set<std::pair<std::string, std::string>>& registered_pairs() {
  static std::set<std::pair<std::string, std::string>> pairs;
  return pairs;
}

int register_kernels(const std::string& suite, const std::vector<std::string>& kernels, const Options& opt,
                     Where where) {
  static std::set<std::string> checked;  // suites whose instrument Environment was added
  std::vector<std::string> chosen;
  for (const auto& k : kernels)
    if (opt.kernel.empty() || k == opt.kernel) chosen.push_back(k);
  if (chosen.empty())
    throw std::runtime_error("pacheck::gtest::register_suite: kernel '" + opt.kernel + "' is not among the registered kernels");
  // Every cell id first: a suite that cannot be loaded throws here, before its instrument Environment is
  // added (a failing global Environment would skip every test of the binary, the refusal's test included).
  std::vector<std::pair<std::string, std::vector<std::string>>> ids;
  for (const auto& kernel : chosen) {
    if (registered_pairs().count({suite, kernel}))
      throw std::runtime_error("suite '" + suite + "' is already registered for kernel " + kernel +
                               " (register_suite was called twice for it)");
    ids.emplace_back(kernel, cells::cell_ids(suite, kernel));
  }
  for (const auto& entry : ids) registered_pairs().insert({suite, entry.first});  // only once all loaded
  if (opt.check_instrument && checked.insert(suite).second)
    testing::AddGlobalTestEnvironment(new InstrumentEnvironment(suite, opt.recheck_instrument));
  int n = 0;
  for (const auto& entry : ids) {
    const std::string& kernel = entry.first;
    const std::vector<std::string>& kernel_ids = entry.second;
    const std::string group = test_suite_name(suite, kernels.size() > 1 ? kernel : "");
    std::set<std::string> names;
    for (const auto& id : kernel_ids) {
      std::string name = cells::test_name_of(id);
      for (int k = 2; !names.insert(name).second; ++k) name = cells::test_name_of(id) + "_" + std::to_string(k);
      const std::string device = opt.device;
      testing::RegisterTest(group.c_str(), name.c_str(), nullptr, id.c_str(), where.file, where.line,
                            [suite, kernel, id, device, where]() -> testing::Test* {
                              return new CellTest(suite, kernel, id, device, where);
                            });
      ++n;
    }
  }
  return n;
}

}  // namespace

std::string test_suite_name(const std::string& suite, const std::string& kernel) {
  // A suite given as a path names its tests by the file's stem.
  std::string stem = suite;
  if (const auto slash = stem.rfind('/'); slash != std::string::npos) stem = stem.substr(slash + 1);
  if (stem.size() > 5 && stem.compare(stem.size() - 5, 5, ".toml") == 0) stem.resize(stem.size() - 5);
  return kernel.empty() ? sanitized(stem) : sanitized(stem) + "/" + sanitized(kernel);
}

namespace {

/// A registration pacheck refused, as a test that fails with the reason. An exception thrown from a
/// kernel repository's main() between InitGoogleTest and RUN_ALL_TESTS ends the binary in std::terminate
/// (an abort, no XML, no ctest detail); a failing test named for the call keeps the binary running, shows
/// the reason in every output GoogleTest writes and fails the binary, as GoogleTest does for a
/// parameterised test it cannot instantiate.
int register_refusal(const std::string& call, const std::string& suite, const std::string& reason, Where where) {
  const std::string message = "pacheck::gtest::" + call + "(\"" + suite + "\"): " + reason;
  testing::RegisterTest("pacheck_setup", sanitized(suite).c_str(), nullptr, nullptr, where.file, where.line,
                        [message, where]() -> testing::Test* { return new RefusedRegistration(message, where); });
  return 0;
}

}  // namespace

int register_suite(const std::string& suite, pacheck_register_kernels_fn register_kernels_fn, const Options& opt,
                   const char* file, int line) {
  const Where where{file, line};
  try {
    auto key = std::make_pair(reinterpret_cast<const void*>(register_kernels_fn), std::string());
    auto it = registered().find(key);
    if (it == registered().end())
      it = registered().emplace(key, cells::add_linked_kernels(register_kernels_fn, opt.repro_plugin)).first;
    return register_kernels(suite, it->second, opt, where);
  } catch (const std::exception& e) {
    return register_refusal("register_suite", suite, e.what(), where);
  }
}

int register_suite_from_plugin(const std::string& suite, const std::string& plugin_path, const Options& opt,
                               const char* file, int line) {
  const Where where{file, line};
  try {
    auto key = std::make_pair(static_cast<const void*>(nullptr), plugin_path);
    auto it = registered().find(key);
    if (it == registered().end()) it = registered().emplace(key, cells::add_plugin(plugin_path)).first;
    return register_kernels(suite, it->second, opt, where);
  } catch (const std::exception& e) {
    return register_refusal("register_suite_from_plugin", suite, e.what(), where);
  }
}

}  // namespace pacheck::gtest
