// Reports CI reads: results.jsonl survives a killed run and --resume completes it to the report an
// uninterrupted run gives; shards merge to the unsharded report; the table of formats drives the report
// directory; junit.xml, summary.md, TAP and the GitHub annotations carry verdicts, metrics and repro
// commands, each parsed back as its consumer reads it, and fail exactly when the run does; every format says
// which negative controls ran (or that none did) and spells a NaN or Inf output as the console does.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <pugixml.hpp>

#include <chrono>
#include <cmath>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "exec_fixtures.hpp"
#include "report/report.hpp"
#include "report/results_log.hpp"
#include "report/reports.hpp"
#include "report/text.hpp"

namespace pacheck {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/pacheck_reports_XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const char* name) const { return (path / name).string(); }
};

/// A resume plan that holds every cell (the tests that check the plan give their own).
const ResumePlan kAnyCell{[](const std::string&, const std::string&) { return true; }};

/// The text of file `path`.
std::string text_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// cpu.reference, optionally slowed down (so a kill lands mid-run) or failing on one length.
class Planted : public Kernel {
 public:
  Planted(std::string name, int sleep_ms = 0, int fail_len = -1, std::string message = "planted failure")
      : name_(std::move(name)), sleep_ms_(sleep_ms), fail_len_(fail_len), message_(std::move(message)) {}
  std::string name() const override { return name_; }
  std::string description() const override { return "planted"; }
  pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
  Support supports(const Case& c) const override {
    return c.seq_lens[0] == 1 ? Support::no("declines ctx1 (planted)") : Support::yes();
  }
  void run(const pacheck_kernel_args& a) const override {
    static const KernelPtr ref = Registry::global().find("cpu.reference");
    if (sleep_ms_) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    if (a.seq_lens[0] == fail_len_) throw KernelError(message_);
    ref->run(a);
  }

 private:
  std::string name_;
  int sleep_ms_, fail_len_;
  std::string message_;
};

/// Two cells per length (clean, V:nan@tail) of h4/2 d32 bs16, seq_lens {len, 32}.
Suite suite_of(const std::vector<int>& lens, std::string name = "rep") {
  return exec_test::two_sequence_suite(lens, {exec_test::kClean, exec_test::kVNanTail}, std::move(name));
}

using exec_test::unowned;
std::vector<std::string> names(const std::vector<KernelPtr>& ks) {
  std::vector<std::string> out;
  for (const auto& k : ks) out.push_back(k->name());
  return out;
}

/// What two reports of the same cells must agree on: everything but timings, environment and run identity.
nlohmann::json comparable(const nlohmann::json& report) {
  nlohmann::json j = without_timings(report);
  nlohmann::json out;
  for (const char* k : {"results", "kernels", "summary", "selftest", "exit_code", "suite"}) out[k] = j.at(k);
  return out;
}

ReportMeta meta_for(const Suite& suite, const std::vector<KernelPtr>& ks, const RunOptions& o) {
  return ReportMeta{suite.name, "cpu", collect_environment("cpu"), run_identity(suite, names(ks), "cpu", o, "")};
}

// ---- results.jsonl -------------------------------------------------------------------------------------

TEST(ResultsJsonl, EveryFinishedCellIsALineThatReadsBackExactly) {
  TempDir dir;
  const Suite suite = suite_of({17, 33, 64});
  const std::vector<KernelPtr> ks = {Registry::global().find("cpu.reference"), Registry::global().find("cpu.vector_v")};
  RunOptions o;
  ReportDir rd = ReportDir::start(dir.path.string(), run_identity(suite, names(ks), "cpu", o, ""));
  std::size_t appended = 0, on_disk_each_time = 0;
  o.on_result = [&](const CellResult& r) {
    rd.append(r);
    // On disk at once, not in a buffer a kill would lose.
    on_disk_each_time += read_results_jsonl(dir.file("results.jsonl")).results.size() == ++appended;
  };
  const RunSummary s = run_suite(suite, ks, "cpu", o);
  EXPECT_EQ(on_disk_each_time, s.results.size());
  const ResultsLog log = read_results_jsonl(dir.file("results.jsonl"));
  ASSERT_EQ(log.results.size(), s.results.size());
  std::multiset<std::string> want, got;
  for (const auto& r : s.results) want.insert(to_json(r).dump());
  for (const auto& r : log.results) got.insert(to_json(r).dump());
  EXPECT_EQ(got, want);
}

TEST(ResultsJsonl, TornLastLineIsDroppedAndCutOffOnResume) {
  TempDir dir;
  const Suite suite = suite_of({17, 33});
  const KernelPtr ref = Registry::global().find("cpu.reference");
  RunOptions o;
  const auto id = run_identity(suite, {ref->name()}, "cpu", o, "");
  RunSummary s;
  {
    ReportDir rd = ReportDir::start(dir.path.string(), id);
    o.on_result = [&](const CellResult& r) { rd.append(r); };
    s = run_suite(suite, {ref}, "cpu", o);
  }
  // A kill in the middle of a write leaves part of a line.
  std::ofstream(dir.file("results.jsonl"), std::ios::app) << R"({"suite":"rep","kernel":"cpu.refer)";
  ResultsLog log = read_results_jsonl(dir.file("results.jsonl"));
  EXPECT_TRUE(log.torn_tail);
  EXPECT_EQ(log.results.size(), s.results.size());
  ReportDir rd = ReportDir::resume(dir.path.string(), id, kAnyCell);
  EXPECT_EQ(rd.previous().size(), s.results.size());
  rd.append(s.results.front());
  log = read_results_jsonl(dir.file("results.jsonl"));
  EXPECT_FALSE(log.torn_tail);
  EXPECT_EQ(log.results.size(), s.results.size() + 1);  // the new line starts on a line of its own
}

// Found by tests/fuzz/fuzz_results_log under UBSan: integer fields were read with nlohmann's get<int>(),
// which casts a float unchecked ("seq": 1e300 into an int is undefined behaviour) and wraps integers that do
// not fit (-1 as max_ulp read as 2^64 - 1). Each is now a malformed line naming the key.
TEST(ResultsJsonl, IntegerFieldsOutOfRangeAreMalformedLines) {
  CellResult r;
  r.suite = "s";
  r.kernel = "k";
  r.cell_id = "c clean";
  const nlohmann::json good = to_json(r);
  EXPECT_EQ(parse_results_jsonl(good.dump() + "\n", "r.jsonl").results.size(), 1u);
  auto with = [&](const char* path, nlohmann::json v) {
    nlohmann::json j = good;
    j[nlohmann::json::json_pointer(path)] = v;
    return j.dump() + "\n";
  };
  for (const auto& [path, value, key] : std::vector<std::tuple<const char*, nlohmann::json, const char*>>{
           {"/metrics/worst/seq", 1e300, "'seq' is 1e+300"},
           {"/metrics/worst/dim", 4294967296LL, "'dim' is 4294967296"},
           {"/metrics/max_ulp", -1, "'max_ulp' is -1"},
           {"/metrics/elements", 0.5, "'elements' is 0.5"},
           {"/metrics/bias_toward", 1.8446744073709552e19, "'bias_toward' is 1.8446744073709552e+19"},
           {"/index", "3", "'index' is \"3\""}}) {
    try {
      parse_results_jsonl(with(path, value), "r.jsonl");
      ADD_FAILURE() << "read " << path << " = " << value.dump();
    } catch (const ReportError& e) {
      EXPECT_NE(std::string(e.what()).find("r.jsonl:1: malformed result line: malformed cell result: " + std::string(key)),
                std::string::npos)
          << e.what();
    }
  }
  // Whole numbers written as floats are still read; absent optional keys keep their defaults.
  nlohmann::json j = good;
  j["metrics"]["worst"]["seq"] = 3.0;
  j.erase("index");
  const ResultsLog log = parse_results_jsonl(j.dump() + "\n", "r.jsonl");
  EXPECT_EQ(log.results.at(0).metrics.worst.seq, 3);
  EXPECT_EQ(log.results.at(0).index, -1);
}

TEST(ResultsJsonl, AMalformedLineInTheMiddleIsAnErrorNamingIt) {
  TempDir dir;
  std::ofstream(dir.file("results.jsonl")) << "{\"not\": \"a result\"}\n{}\n";
  try {
    read_results_jsonl(dir.file("results.jsonl"));
    FAIL() << "no error";
  } catch (const ReportError& e) {
    EXPECT_NE(std::string(e.what()).find("results.jsonl:1:"), std::string::npos) << e.what();
  }
}

// ---- resume --------------------------------------------------------------------------------------------

TEST(Resume, RefusesAnotherRunsDirectoryNamingWhatDiffers) {
  TempDir dir;
  const Suite suite = suite_of({17});
  RunOptions o;
  ReportDir::start(dir.path.string(), run_identity(suite, {"cpu.reference"}, "cpu", o, ""));
  o.seed = 99;
  try {
    ReportDir::resume(dir.path.string(), run_identity(suite, {"cpu.reference"}, "cpu", o, ""), kAnyCell);
    FAIL() << "no error";
  } catch (const ReportError& e) {
    EXPECT_NE(std::string(e.what()).find("seed was null, now 99"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ReportDir::resume((dir.path / "nothing").string(), nlohmann::json::object(), kAnyCell), ReportError);
}

TEST(Resume, KilledRunCompletesToTheUninterruptedReport) {
  const Suite suite = suite_of({17, 33, 48, 64, 100, 130, 200, 257});
  Planted slow("planted.slow", /*sleep_ms=*/40);
  const std::vector<KernelPtr> ks = {unowned(&slow), Registry::global().find("cpu.vector_v")};
  RunOptions base;
  base.threads = 1;
  const auto id = run_identity(suite, names(ks), "cpu", base, "");

  TempDir dir;
  const pid_t runner = ::fork();
  ASSERT_GE(runner, 0);
  if (runner == 0) {
    ReportDir rd = ReportDir::start(dir.path.string(), id);
    RunOptions o = base;
    o.on_result = [&](const CellResult& r) { rd.append(r); };
    run_suite(suite, ks, "cpu", o);
    ::_exit(0);
  }
  std::size_t seen = 0;
  for (int i = 0; i < 2000 && seen < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::ifstream in(dir.file("results.jsonl"));
    seen = static_cast<std::size_t>(std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n'));
  }
  ::kill(runner, SIGKILL);
  int status = 0;
  ::waitpid(runner, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the run finished before it could be killed";

  const ResultsLog killed = read_results_jsonl(dir.file("results.jsonl"));  // valid: throws otherwise
  const std::size_t total = 2 * suite.cells.size();
  ASSERT_GE(killed.results.size(), 5u);
  ASSERT_LT(killed.results.size(), total);
  EXPECT_FALSE(fs::exists(dir.file("report.json")));  // an unfinished run has no final report
  EXPECT_THROW(load_report(dir.path.string()), ReportError);

  ReportDir rd = ReportDir::resume(dir.path.string(), id, kAnyCell);
  RunOptions o = base;
  for (const auto& r : rd.previous()) o.previous[result_key(r.kernel, r.cell_id)] = r;
  std::size_t ran = 0;
  o.on_result = [&](const CellResult& r) {
    ++ran;
    rd.append(r);
  };
  const RunSummary resumed = run_suite(suite, ks, "cpu", o);
  EXPECT_EQ(ran + killed.results.size(), total);  // only the missing cells ran
  rd.finish(resumed, meta_for(suite, ks, base));

  const RunSummary whole = run_suite(suite, ks, "cpu", base);
  EXPECT_EQ(comparable(load_report(dir.path.string())), comparable(report_json(whole, meta_for(suite, ks, base))));
  // results.jsonl now holds every cell exactly once.
  std::set<std::string> keys;
  for (const auto& r : read_results_jsonl(dir.file("results.jsonl")).results) keys.insert(result_key(r.kernel, r.cell_id));
  EXPECT_EQ(keys.size(), total);
  EXPECT_EQ(read_results_jsonl(dir.file("results.jsonl")).results.size(), total);
}

/// A finished one-kernel run of `suite` written into `dir` through ReportDir (results.jsonl and run.json).
RunSummary run_into(const std::string& dir, const Suite& suite, const nlohmann::json& id) {
  ReportDir rd = ReportDir::start(dir, id);
  RunOptions o;
  o.on_result = [&](const CellResult& r) { rd.append(r); };
  return run_suite(suite, {Registry::global().find("cpu.reference")}, "cpu", o);
}

TEST(Resume, LinesOfCellsNotInThePlanAreDroppedAndListed) {
  TempDir dir;
  const Suite suite = suite_of({17, 33});
  const auto id = run_identity(suite, {"cpu.reference"}, "cpu", RunOptions{}, "");
  const RunSummary s = run_into(dir.path.string(), suite, id);
  ASSERT_GE(s.results.size(), 2u);
  // The file's line order, which need not be the summary's (workers finish in any order).
  const ResultsLog before = read_results_jsonl(dir.file("results.jsonl"));
  ASSERT_EQ(before.results.size(), s.results.size());
  const std::string kept = before.results[0].cell_id;
  ReportDir rd = ReportDir::resume(dir.path.string(), id,
                                   {[&](const std::string& k, const std::string& c) { return k == "cpu.reference" && c == kept; }});
  ASSERT_EQ(rd.previous().size(), 1u);
  EXPECT_EQ(rd.previous()[0].cell_id, kept);
  ASSERT_EQ(rd.dropped().size(), s.results.size() - 1);
  EXPECT_EQ(rd.dropped()[0], fmt::format("line 2: cpu.reference '{}'", before.results[1].cell_id));
  // The file holds only the plan's cells now.
  const ResultsLog log = read_results_jsonl(dir.file("results.jsonl"));
  ASSERT_EQ(log.results.size(), 1u);
  EXPECT_EQ(log.results[0].cell_id, kept);
}

TEST(Resume, TwoLinesForOneCellAreAnErrorNamingBoth) {
  TempDir dir;
  const Suite suite = suite_of({17, 33});
  const auto id = run_identity(suite, {"cpu.reference"}, "cpu", RunOptions{}, "");
  const RunSummary s = run_into(dir.path.string(), suite, id);
  // An appended duplicate of line 1 with verdict fail used to win. (Line 1 from the file: workers finish in
  // any order, so the summary's first result need not be the file's.)
  CellResult dup = read_results_jsonl(dir.file("results.jsonl")).results.at(0);
  dup.verdict = Verdict::fail;
  std::ofstream(dir.file("results.jsonl"), std::ios::app) << results_line(dup);
  const std::string before = text_of(dir.file("results.jsonl"));
  try {
    ReportDir::resume(dir.path.string(), id, kAnyCell);
    FAIL() << "no error";
  } catch (const ReportError& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("results.jsonl:{}: a second result for cpu.reference '{}' (the "
                                                     "first is line 1)",
                                                     s.results.size() + 1, dup.cell_id)),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(text_of(dir.file("results.jsonl")), before);  // refused: nothing changed
}

TEST(ReportDirLock, ASecondRunIntoTheDirectoryFailsNamingItAndTheHolder) {
  TempDir dir;
  const Suite suite = suite_of({17});
  const auto id = run_identity(suite, {"cpu.reference"}, "cpu", RunOptions{}, "");
  run_into(dir.path.string(), suite, id);
  const std::string results = text_of(dir.file("results.jsonl"));
  // The holder is another process: flock locks of one process's two descriptors would conflict too, but a
  // second run is a second process.
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t holder = ::fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    ReportDir rd = ReportDir::resume(dir.path.string(), id, kAnyCell);
    (void)!::write(ready[1], "x", 1);
    ::pause();
    ::_exit(0);
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  for (auto attempt : {std::function<void()>([&] { ReportDir::start(dir.path.string(), id); }),
                       std::function<void()>([&] { ReportDir::resume(dir.path.string(), id, kAnyCell); }),
                       std::function<void()>([&] { write_reports(dir.path.string(), RunSummary{}, ReportMeta{}); })}) {
    try {
      attempt();
      ADD_FAILURE() << "no error";
    } catch (const ReportError& e) {
      EXPECT_NE(std::string(e.what()).find(fmt::format("report directory '{}' is in use by another pacheck run (pid {})",
                                                       dir.path.string(), holder)),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(text_of(dir.file("results.jsonl")), results);  // the refused runs changed nothing
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);
  // Released when its holder dies, however it dies.
  EXPECT_NO_THROW(ReportDir::resume(dir.path.string(), id, kAnyCell));
}

// A run forks children (isolated lanes, fresh processes naming a cause); when the run is killed, a child still
// winding down must not keep the directory locked (with flock it did: the child shared the lock's open file
// description, so the resume of a killed run failed "in use by another pacheck run").
TEST(ReportDirLock, AChildTheRunForkedDoesNotKeepTheLockAfterTheRunDies) {
  TempDir dir;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t run = ::fork();
  ASSERT_GE(run, 0);
  if (run == 0) {
    ReportDirLock lock(dir.path.string());
    const pid_t child = ::fork();  // the run's child, alive after the run is gone
    if (child == 0) {
      ::sleep(30);
      ::_exit(0);
    }
    const std::string pid = std::to_string(child) + "\n";
    (void)!::write(ready[1], pid.data(), pid.size());
    ::pause();
    ::_exit(0);
  }
  char buf[32] = {};
  ASSERT_GT(::read(ready[0], buf, sizeof buf - 1), 0);
  const pid_t child = static_cast<pid_t>(std::atol(buf));
  ASSERT_GT(child, 0);
  ::kill(run, SIGKILL);
  ::waitpid(run, nullptr, 0);
  ASSERT_EQ(::kill(child, 0), 0) << "the run's child should still be alive here";
  EXPECT_NO_THROW(ReportDirLock{dir.path.string()});
  ::kill(child, SIGKILL);
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST(ReportDirFiles, PlantedLinksAreReplacedOrRefusedNeverWrittenThrough) {
  TempDir dir, outside;
  const std::string victim = outside.file("victim");
  std::ofstream(victim) << "precious\n";
  const Suite suite = suite_of({17});
  const auto id = run_identity(suite, {"cpu.reference"}, "cpu", RunOptions{}, "");
  // A fresh run replaces links at every name it writes, results.jsonl and the temporary names included.
  for (const char* name : {"results.jsonl", "run.json", "report.json", "run.json.tmp", "report.json.tmp"})
    fs::create_symlink(victim, dir.file(name));
  const RunSummary s = run_into(dir.path.string(), suite, id);
  ReportDir::resume(dir.path.string(), id, kAnyCell).finish(s, meta_for(suite, {Registry::global().find("cpu.reference")}, RunOptions{}));
  EXPECT_EQ(text_of(victim), "precious\n");
  EXPECT_FALSE(fs::is_symlink(dir.file("results.jsonl")));
  EXPECT_FALSE(fs::is_symlink(dir.file("report.json")));
  EXPECT_EQ(read_results_jsonl(dir.file("results.jsonl")).results.size(), s.results.size());
  // --resume continues results.jsonl: a link there is refused, naming it.
  fs::remove(dir.file("results.jsonl"));
  fs::create_symlink(victim, dir.file("results.jsonl"));
  try {
    ReportDir::resume(dir.path.string(), id, kAnyCell);
    FAIL() << "no error";
  } catch (const ReportError& e) {
    EXPECT_NE(std::string(e.what()).find("results.jsonl': is a symbolic link"), std::string::npos) << e.what();
  }
  EXPECT_EQ(text_of(victim), "precious\n");
}

// ---- merge ---------------------------------------------------------------------------------------------

struct Sharded {
  Suite suite = suite_of({1, 17, 33, 48, 64});
  std::vector<KernelPtr> ks = {Registry::global().find("cpu.reference"), Registry::global().find("cpu.vector_v")};
  nlohmann::json shard(int index, int count) const {
    RunOptions o;
    o.shard_index = index;
    o.shard_count = count;
    return report_json(run_suite(suite, ks, "cpu", o), meta_for(suite, ks, o));
  }
};

TEST(Merge, TwoShardsMergedEqualTheUnshardedRun) {
  const Sharded sh;
  const nlohmann::json whole = sh.shard(0, 1);
  const nlohmann::json a = sh.shard(0, 2), b = sh.shard(1, 2);
  EXPECT_LT(a["results"].size(), whole["results"].size());
  // Order of the inputs does not matter.
  for (const auto& inputs : {std::vector<MergeInput>{{"a", a}, {"b", b}}, std::vector<MergeInput>{{"b", b}, {"a", a}}}) {
    const auto [s, meta] = merge_reports(inputs);
    EXPECT_EQ(comparable(report_json(s, meta)), comparable(whole));
    EXPECT_EQ(meta.merged_from.size(), 2u);
    EXPECT_FALSE(meta.run.contains("shard"));
  }
}

TEST(Merge, AMissingOrRepeatedShardIsAnError) {
  const Sharded sh;
  const nlohmann::json a = sh.shard(0, 3), c = sh.shard(2, 3);
  try {
    merge_reports({{"a", a}, {"c", c}});
    FAIL() << "merged an incomplete set of shards";
  } catch (const ReportError& e) {
    EXPECT_NE(std::string(e.what()).find("shard(s) 1 of 3 missing"), std::string::npos) << e.what();
  }
  EXPECT_THROW(merge_reports({{"a", a}, {"a again", a}, {"c", c}}), ReportError);
}

TEST(Merge, DifferentVerdictsForOneCellAreAnError) {
  const Sharded sh;
  const nlohmann::json a = sh.shard(0, 1);
  nlohmann::json b = a;
  b["run"]["seed"] = 1;  // another run of the same cells (not a shard of this one)
  b["results"][1]["verdict"] = "fail";
  EXPECT_THROW(merge_reports({{"a", a}, {"b", b}}), ReportError);
  b["results"][1]["verdict"] = a["results"][1]["verdict"];
  EXPECT_NO_THROW(merge_reports({{"a", a}, {"b", b}}));  // the same cell twice with one verdict is kept once
  EXPECT_EQ(merge_reports({{"a", a}, {"b", b}}).first.results.size(), a["results"].size());
}

// Issue 46: what summary_from_report refuses names the file, whatever the reader under it threw (an unknown
// verdict escaped as a bare std::invalid_argument: found by fuzz_report_json), and a report that is no object,
// lists a kernel twice or holds results of a kernel it does not list is malformed.
TEST(ReportRead, MalformedReportsNameTheFile) {
  const Sharded sh;
  const nlohmann::json good = sh.shard(0, 1);
  EXPECT_NO_THROW(summary_from_report(good, "r.json"));
  auto error_of = [](const nlohmann::json& report) -> std::string {
    try {
      summary_from_report(report, "r.json");
    } catch (const ReportError& e) {
      return e.what();
    }
    return "no error";
  };
  nlohmann::json bad = good;
  bad["results"][0]["verdict"] = "pas:";
  EXPECT_EQ(error_of(bad).rfind("r.json: malformed report: unknown verdict 'pas:'", 0), 0u) << error_of(bad);
  EXPECT_EQ(error_of(nlohmann::json::array()),
            "r.json: not a pacheck report: a JSON array, not an object (a report.json, or the file of `pacheck run "
            "--json`)");
  bad = good;
  bad["kernels"].push_back(good["kernels"][0]);
  EXPECT_NE(error_of(bad).find("r.json: malformed report: kernels lists '"), std::string::npos) << error_of(bad);
  bad = good;
  bad["results"][0]["kernel"] = "nobody";
  EXPECT_NE(error_of(bad).find("results[0] is of kernel 'nobody', which kernels does not list"), std::string::npos);
  bad = good;
  bad.erase("suite");
  EXPECT_EQ(error_of(bad), "r.json: malformed report: key 'suite' not found");
  // run.json: not an object, or another run.
  EXPECT_THROW(check_same_run(nlohmann::json::array(), good["run"], "d/run.json"), ReportError);
  EXPECT_NO_THROW(check_same_run(good["run"], good["run"], "d/run.json"));
}

TEST(Merge, KeepsTheVerdictOptionsForItsReproLinesAndRefusesInputsJudgedDifferently) {
  const Sharded sh;
  nlohmann::json a = sh.shard(0, 2), b = sh.shard(1, 2);
  a["judge_flags"] = b["judge_flags"] = "--tolerance calibrated";
  EXPECT_EQ(merge_reports({{"a", a}, {"b", b}}).first.judge_flags, "--tolerance calibrated");
  b["judge_flags"] = "";
  try {
    merge_reports({{"a", a}, {"b", b}});
    FAIL() << "merged reports judged under different tolerances";
  } catch (const ReportError& e) {
    EXPECT_NE(std::string(e.what()).find("a was judged with '--tolerance calibrated' but b with ''"), std::string::npos)
        << e.what();
  }
}

/// A run of suite_of({1, 17, 33}) on a planted kernel `kernel` that declines ctx1 and throws `message` at
/// ctx33, beside the negative control cpu.vector_v: exit 1 (two error cells, two declined, the control's
/// expected failures caught).
struct FailingRun {
  Planted failing;
  Suite suite = suite_of({1, 17, 33});
  std::vector<KernelPtr> ks;
  RunOptions o;
  RunSummary s;
  FailingRun(const std::string& kernel, const std::string& message)
      : failing(kernel, 0, /*fail_len=*/33, message),
        ks{unowned(&failing), Registry::global().find("cpu.vector_v")},
        s(run_suite(suite, ks, "cpu", o)) {}
  /// What format `format` writes for `s` as it is now.
  std::string render(const std::string& format) const { return render_format(format, s, meta_for(suite, ks, o)); }
};

/// Makes the negative control cpu.vector_v of `s` (beside `tested`, a kernel under test) blind: its first
/// expected failure passes, and `s` is judged again (exit code 3).
void make_blind(RunSummary& s, const std::string& tested) {
  for (auto& r : s.results)
    if (r.expected_fail) {
      r.verdict = Verdict::pass;
      break;
    }
  summarize(s, {{tested, false}, {"cpu.vector_v", true}});
}

// ---- the table of formats -----------------------------------------------------------------------------

TEST(Formats, TheTableDrivesTheReportDirectoryAndItsClosingLine) {
  TempDir dir;
  const Suite suite = suite_of({17, 33});
  const std::vector<KernelPtr> ks = {Registry::global().find("cpu.reference"), Registry::global().find("cpu.vector_v")};
  RunOptions o;
  ReportDir rd = ReportDir::start(dir.path.string(), run_identity(suite, names(ks), "cpu", o, ""));
  const RunSummary s = run_suite(suite, ks, "cpu", o);
  const ReportMeta meta = meta_for(suite, ks, o);
  rd.finish(s, meta);
  // Every format with a file wrote exactly what render_format gives; the closing line names them in order.
  std::string want = "reports in " + dir.path.string() + ": results.jsonl";
  for (const FormatInfo& f : format_table()) {
    ASSERT_NE(find_format(f.name), nullptr);
    EXPECT_EQ(find_format(f.name)->name, f.name);
    if (!f.file) continue;
    want += std::string(" ") + f.file;
    std::ifstream in(dir.file(f.file), std::ios::binary);
    ASSERT_TRUE(in) << f.file;
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text, render_format(f.name, s, meta)) << f.file;
  }
  EXPECT_EQ(reports_line(dir.path.string()), want);
  EXPECT_EQ(find_format("no-such-format"), nullptr);
  EXPECT_THROW(render_format("no-such-format", s, meta), std::invalid_argument);
  // The default stdout format prints no file, and never needs the device to describe the environment.
  ASSERT_NE(find_format(kDefaultFormat), nullptr);
  EXPECT_EQ(find_format(kDefaultFormat)->file, nullptr);
}

TEST(Formats, OneNumberPrinterForEveryFormat) {
  EXPECT_EQ(sci(1.0 / 3), "3.333e-01");
  EXPECT_EQ(sci(0), "0.000e+00");
  EXPECT_EQ(sci(std::nan("")), "nan");
  EXPECT_EQ(sci(INFINITY), "inf");
  EXPECT_EQ(sci(-INFINITY), "-inf");
}

// ---- junit.xml -----------------------------------------------------------------------------------------

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t p = 0; (p = text.find(what, p)) != std::string::npos; p += what.size()) ++n;
  return n;
}

/// junit.xml as a JUnit consumer reads it (pugixml, the library that wrote it, reading it back strictly).
pugi::xml_document parse_junit(const std::string& x) {
  pugi::xml_document doc;
  const pugi::xml_parse_result ok = doc.load_string(x.c_str(), pugi::parse_default | pugi::parse_declaration);
  EXPECT_TRUE(ok) << ok.description() << " at offset " << ok.offset;
  return doc;
}

std::size_t nodes(const pugi::xml_document& doc, const char* xpath) { return doc.select_nodes(xpath).size(); }

TEST(Junit, CountsMatchTheElementsAndFailuresCarryVerdictAndMetrics) {
  const FailingRun run("planted.error", "bad <launch> & \"quote\" 'x' \x01 \xff");
  const RunSummary& s = run.s;
  ASSERT_EQ(s.exit_code(), 1);
  const std::string x = run.render("junit");
  ASSERT_EQ(x.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites ", 0), 0u) << x.substr(0, 200);
  const pugi::xml_document doc = parse_junit(x);
  const pugi::xml_node root = doc.child("testsuites");
  // Root counts = elements.
  EXPECT_EQ(root.attribute("tests").as_ullong(), nodes(doc, "//testcase"));
  EXPECT_EQ(root.attribute("failures").as_ullong(), nodes(doc, "//failure"));
  EXPECT_EQ(root.attribute("errors").as_ullong(), nodes(doc, "//error"));
  EXPECT_EQ(root.attribute("skipped").as_ullong(), nodes(doc, "//skipped"));
  EXPECT_EQ(nodes(doc, "/testsuites/testsuite"), 3u);  // two kernels + pacheck.checks
  for (const pugi::xml_node suite_node : root.children("testsuite"))
    EXPECT_EQ(suite_node.attribute("tests").as_ullong(),
              static_cast<std::size_t>(
                  std::distance(suite_node.children("testcase").begin(), suite_node.children("testcase").end())))
        << suite_node.attribute("name").value();
  // The error cell: type is the verdict, message the detail (escaped in the file, intact when read back,
  // with the bytes XML cannot carry as '?'); the body carries metrics.
  const pugi::xml_node err = doc.select_node("//error[@type='error']").node();
  ASSERT_TRUE(err);
  EXPECT_STREQ(err.attribute("message").value(), "error: bad <launch> & \"quote\" 'x' ? ?");
  EXPECT_NE(std::string(err.text().get()).find("rel_linf: "), std::string::npos);
  EXPECT_NE(x.find("message=\"error: bad &lt;launch> &amp; &quot;quote&quot; 'x' ? ?\""), std::string::npos) << x;
  EXPECT_EQ(x.find('\x01'), std::string::npos);
  EXPECT_EQ(x.find('\xff'), std::string::npos);
  // Declined cells are skipped; the negative control is one passing testcase whose system-out lists its
  // caught cells; the environment is there.
  EXPECT_TRUE(doc.select_node("//skipped[@message='declined: declines ctx1 (planted)']"));
  const pugi::xml_node control =
      doc.select_node("//testcase[@classname='pacheck.rep.negative-controls'][@name='cpu.vector_v']").node();
  ASSERT_TRUE(control);
  EXPECT_FALSE(control.child("failure") || control.child("error") || control.child("skipped"));
  EXPECT_EQ(count(control.child_value("system-out"), "\n  poisoned "), s.caught);
  EXPECT_TRUE(doc.select_node("/testsuites/testsuite/properties/property[@name='pacheck.git_commit']"));
  // The JSON report of the same run serialises the invalid UTF-8 without throwing.
  EXPECT_NO_THROW(report_json(s, meta_for(run.suite, run.ks, run.o))
                      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

// A negative control's cells where its fault cannot show are not_run: counted and visible in every format,
// never dropped, and no format counts them as passed, failed or declined.
TEST(Formats, NotRunCellsAreCountedAndShownInEveryFormat) {
  const Suite suite = suite_of({17, 33});
  const std::vector<KernelPtr> ks = {Registry::global().find("cpu.reference"), Registry::global().find("cpu.vector_v")};
  RunOptions o;
  const RunSummary s = run_suite(suite, ks, "cpu", o);
  const ReportMeta meta = meta_for(suite, ks, o);
  ASSERT_GT(s.not_run, 0);
  ASSERT_GT(s.caught, 0);
  EXPECT_EQ(s.exit_code(), 0);
  const nlohmann::json j = report_json(s, meta);
  EXPECT_EQ(j["summary"]["not_run"].get<int>(), s.not_run);
  EXPECT_EQ(j["summary"]["verdicts"]["not_run"].get<int>(), s.not_run);
  EXPECT_EQ(j["kernels"][1]["not_run"].get<int>(), s.not_run);
  EXPECT_EQ(j["results"].size(), s.results.size()) << "every cell has a result";
  const std::string console = render_format("console", s, meta);
  EXPECT_NE(console.find(fmt::format("not run: {} cells of negative controls outside their expected failures", s.not_run)),
            std::string::npos)
      << console;
  EXPECT_NE(console.find(fmt::format("{} caught by negative controls, {} not run)", s.caught, s.not_run)), std::string::npos);
  // junit.xml and TAP count them in their control's one testcase / point, never one skip each.
  const pugi::xml_document doc = parse_junit(render_format("junit", s, meta));
  EXPECT_EQ(nodes(doc, (std::string("//skipped[@message=\"") + kNotRunDetail + "\"]").c_str()), 0u);
  EXPECT_EQ(doc.select_node("//testcase[@name='cpu.vector_v']/properties/property[@name='not_run']")
                .node().attribute("value").as_int(),
            s.not_run);
  EXPECT_EQ(nodes(doc, "//failure"), 0u);
  const std::string tap = render_format("tap", s, meta);
  EXPECT_EQ(count(tap, std::string("# SKIP ") + kNotRunDetail), 0);
  EXPECT_NE(tap.find(fmt::format("- cpu.vector_v: negative control caught ({} caught, 0 missed, {} not run)\n", s.caught, s.not_run)),
            std::string::npos)
      << tap;
  EXPECT_EQ(tap.find("not ok"), std::string::npos) << tap;
  EXPECT_NE(render_format("markdown", s, meta).find(fmt::format("not run on {} cells (outside its expected failures)", s.not_run)),
            std::string::npos);
}

TEST(Junit, FailsExactlyWhenTheExitCodeIsNotZero) {
  const Suite suite = suite_of({17, 33});
  const std::vector<KernelPtr> ks = {Registry::global().find("cpu.reference"), Registry::global().find("cpu.vector_v")};
  RunOptions o;
  RunSummary s = run_suite(suite, ks, "cpu", o);
  ASSERT_EQ(s.exit_code(), 0);
  pugi::xml_document doc = parse_junit(render_format("junit", s, meta_for(suite, ks, o)));
  EXPECT_EQ(nodes(doc, "//failure") + nodes(doc, "//error"), 0u);
  // A blind negative control (one expected failure passes) and a failed self-test each fail the file.
  make_blind(s, "cpu.reference");
  ASSERT_EQ(s.exit_code(), 3);
  doc = parse_junit(render_format("junit", s, meta_for(suite, ks, o)));
  EXPECT_EQ(nodes(doc, "//failure[@type='missed']"), 1u);
  const char* blind_check =
      "//testcase[@classname='pacheck.checks'][@name='cpu.vector_v: negative control caught']/failure[@type='check']";
  const pugi::xml_node blind = doc.select_node(blind_check).node();
  ASSERT_TRUE(blind);
  EXPECT_EQ(std::string(blind.attribute("message").value()).rfind("instrument blind: 1 of", 0), 0u)
      << blind.attribute("message").value();
  // A failed comparator self-test alone fails the file too.
  s = run_suite(suite, ks, "cpu", o);
  s.selftest.passed = false;
  ASSERT_EQ(s.exit_code(), 3);
  doc = parse_junit(render_format("junit", s, meta_for(suite, ks, o)));
  EXPECT_EQ(nodes(doc, "//failure"), 1u);
  EXPECT_TRUE(doc.select_node("//testcase[@name='comparator self-test']/failure[@type='check']"));
}

// ---- summary.md ----------------------------------------------------------------------------------------

TEST(Summary, MarkdownHasTheTableSelfTestControlAndWorstCells) {
  Planted failing("planted.error", 0, /*fail_len=*/33);
  const Suite suite = suite_of({17, 33});
  const std::vector<KernelPtr> ks = {unowned(&failing), Registry::global().find("cpu.vector_v")};
  RunOptions o;
  const RunSummary s = run_suite(suite, ks, "cpu", o);
  const std::string md = render_format("markdown", s, meta_for(suite, ks, o));
  EXPECT_NE(md.find("## pacheck rep: FAIL (exit 1)"), std::string::npos) << md;
  EXPECT_NE(md.find("| rep | `planted.error` | 2 | 2 | 0 | - |"), std::string::npos) << md;
  // The control runs only on its two planted cells; the two clean ones are not_run.
  EXPECT_NE(md.find("| rep | `cpu.vector_v` | 0 | 0 | 0 | caught (2 caught, 0 missed); not run on 2 cells (outside "
                    "its expected failures) |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("**Comparator self-test:** passed"), std::string::npos) << md;
  EXPECT_NE(md.find("### Worst cells (2 failing)"), std::string::npos) << md;
  EXPECT_NE(md.find("| `planted.error` | `h4/2 d32 bs16 bf16 ctx33,32 vllm seed7 clean` | error | - | - | planted failure |"), std::string::npos) << md;
  EXPECT_NE(md.find("| pacheck.git_commit |"), std::string::npos) << md;
}

// ---- TAP -----------------------------------------------------------------------------------------------

/// A TAP version 14 stream as a harness reads it: every line must be a version, plan, test point, YAML
/// block line or comment; points are numbered 1..N and the plan says N.
struct TapPoint {
  bool ok = false;
  std::string description;                     ///< unescaped
  std::string directive;                       ///< "SKIP reason", or ""
  std::map<std::string, nlohmann::json> yaml;  ///< the diagnostic block, values parsed
};
std::vector<TapPoint> parse_tap(const std::string& text) {
  std::vector<TapPoint> points;
  std::istringstream in(text);
  std::string line;
  EXPECT_TRUE(std::getline(in, line) && line == "TAP version 14") << "first line: " << line;
  int plan = -1;
  bool in_yaml = false;
  static const std::regex point_re(R"(^(not ok|ok) (\d+) - (.*)$)"), plan_re(R"(^1\.\.(\d+)$)");
  static const std::regex yaml_re(R"(^  ([a-z_]+): (.*)$)");
  while (std::getline(in, line)) {
    std::smatch m;
    if (in_yaml) {
      if (line == "  ...") {
        in_yaml = false;
      } else if (std::regex_match(line, m, yaml_re)) {
        const std::string v = m[2];
        // Our scalars: JSON strings (a YAML double-quoted form), YAML 1.2 floats, .nan, .inf, -.inf.
        if (v == ".nan" || v == ".inf" || v == "-.inf") points.back().yaml[m[1]] = v;
        else points.back().yaml[m[1]] = nlohmann::json::parse(v);
      } else {
        ADD_FAILURE() << "not a YAML line: " << line;
      }
    } else if (line == "  ---") {
      EXPECT_FALSE(points.empty()) << "a YAML block before any test point";
      EXPECT_TRUE(points.back().yaml.empty()) << "two YAML blocks under one point";
      in_yaml = true;
    } else if (std::regex_match(line, m, point_re)) {
      EXPECT_EQ(std::stoul(m[2]), points.size() + 1) << line;
      TapPoint p;
      p.ok = m[1] == "ok";
      // An unescaped '#' starts the directive; "\#" and "\\" are a literal '#' and '\'.
      const std::string rest = m[3];
      std::size_t i = 0;
      for (; i < rest.size(); ++i) {
        if (rest[i] == '\\' && i + 1 < rest.size()) p.description += rest[++i];
        else if (rest[i] == '#') break;
        else p.description += rest[i];
      }
      if (i < rest.size()) p.directive = rest.substr(i + 1 + (rest[i + 1] == ' '));
      if (!p.description.empty() && p.description.back() == ' ') p.description.pop_back();
      points.push_back(p);
    } else if (std::regex_match(line, m, plan_re)) {
      EXPECT_EQ(plan, -1) << "two plans";
      plan = std::stoi(m[1]);
    } else {
      EXPECT_EQ(line.rfind("# ", 0), 0u) << "not a TAP line: " << line;
    }
  }
  EXPECT_FALSE(in_yaml) << "unterminated YAML block";
  EXPECT_EQ(plan, static_cast<int>(points.size())) << "the plan does not match the test points";
  return points;
}

TEST(Tap, OnePointPerCellAndCheckFailingExactlyWhereTheRunFails) {
  FailingRun run("planted#error", "launch\nfailed");
  RunSummary& s = run.s;
  ASSERT_EQ(s.exit_code(), 1);
  std::vector<TapPoint> points = parse_tap(run.render("tap"));
  // A point per cell of the kernel under test and per check: the negative control is its check's point.
  const auto tested = std::count_if(s.results.begin(), s.results.end(),
                                    [&](const CellResult& r) { return r.kernel == run.failing.name(); });
  ASSERT_EQ(points.size(), static_cast<std::size_t>(tested) + run_checks(s).size());
  std::set<std::string> not_ok, skipped;
  for (const auto& p : points) {
    if (!p.ok) not_ok.insert(p.description);
    if (p.directive.rfind("SKIP ", 0) == 0) skipped.insert(p.description);
  }
  // The two ctx33 cells of the kernel that errors fail; its ctx1 cells (declined) are skipped; the negative
  // control's caught and not_run cells are counted in its check's point.
  const std::string k = "planted#error h4/2 d32 bs16 bf16 ";
  EXPECT_EQ(not_ok, (std::set<std::string>{k + "ctx33,32 vllm seed7 clean", k + "ctx33,32 vllm seed7 V:nan@tail"}));
  EXPECT_EQ(skipped, (std::set<std::string>{k + "ctx1,32 vllm seed7 clean", k + "ctx1,32 vllm seed7 V:nan@tail"}));
  EXPECT_TRUE(std::any_of(points.begin(), points.end(), [&](const TapPoint& p) {
    return p.ok && p.description == fmt::format("cpu.vector_v: negative control caught ({} caught, 0 missed, {} not run)",
                                                s.caught, s.not_run);
  }));
  const auto err = std::find_if(points.begin(), points.end(), [](const TapPoint& p) { return !p.ok; });
  EXPECT_EQ(err->yaml.at("verdict"), "error");
  EXPECT_EQ(err->yaml.at("detail"), "launch\nfailed");
  EXPECT_EQ(err->yaml.at("repro"),
            "pacheck repro 'h4/2 d32 bs16 bf16 ctx33,32 vllm seed7 clean' --kernel 'planted#error'");

  // A blind negative control: its missed cell fails with its metrics, and so does its check.
  make_blind(s, run.failing.name());
  points = parse_tap(run.render("tap"));
  const auto missed = std::find_if(points.begin(), points.end(), [](const TapPoint& p) {
    return !p.ok && p.description.find("(negative control MISSED)") != std::string::npos;
  });
  ASSERT_NE(missed, points.end());
  EXPECT_EQ(missed->yaml.at("verdict"), "pass");
  EXPECT_EQ(missed->yaml.count("rel_linf"), 1u);  // a number, or .inf for the poisoned output it had
  EXPECT_TRUE(missed->yaml.at("limit").is_number());
  EXPECT_TRUE(std::any_of(points.begin(), points.end(), [](const TapPoint& p) {
    return !p.ok && p.description.rfind("cpu.vector_v: negative control caught (", 0) == 0;
  }));

  // A passing run has no failing point.
  const std::vector<KernelPtr> good = {Registry::global().find("cpu.reference"),
                                       Registry::global().find("cpu.vector_v")};
  s = run_suite(run.suite, good, "cpu", run.o);
  ASSERT_EQ(s.exit_code(), 0);
  points = parse_tap(render_format("tap", s, meta_for(run.suite, good, run.o)));
  EXPECT_TRUE(std::all_of(points.begin(), points.end(), [](const TapPoint& p) { return p.ok; }));
}

// ---- GitHub annotations --------------------------------------------------------------------------------

/// A workflow command line parsed as the GitHub runner does: "::KIND title=TITLE::MESSAGE", one line, the
/// property value free of raw ':' ',' and both free of raw CR/LF and of '%' not starting an escape.
struct Annotation {
  std::string kind, title, message;  ///< unescaped
  std::string file;                  ///< file= ("" when absent), unescaped
  int line = 0;                      ///< line= (0 when absent)
};
std::string unescape_command(const std::string& s, bool property) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      const std::string code = s.substr(i + 1, 2);
      if (code == "25") out += '%';
      else if (code == "0D") out += '\r';
      else if (code == "0A") out += '\n';
      else if (property && code == "3A") out += ':';
      else if (property && code == "2C") out += ',';
      else ADD_FAILURE() << "'%' not starting an escape in: " << s;
      i += 2;
    } else {
      if (property && (s[i] == ':' || s[i] == ',')) ADD_FAILURE() << "unescaped '" << s[i] << "' in property: " << s;
      out += s[i];
    }
  }
  return out;
}
std::vector<Annotation> parse_annotations(const std::string& text) {
  std::vector<Annotation> out;
  std::istringstream in(text);
  static const std::regex re(R"(^::(error|warning|notice) (?:file=([^,:]*),line=([0-9]+),)?title=([^:]*)::(.*)$)");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, re)) {
      ADD_FAILURE() << "not a workflow command: " << line;
      continue;
    }
    EXPECT_EQ(line.find('\r'), std::string::npos) << line;
    out.push_back({m[1], unescape_command(m[4], true), unescape_command(m[5], false), unescape_command(m[2], true),
                   m[3].matched ? std::stoi(m[3]) : 0});
  }
  return out;
}

TEST(Github, AnErrorPerFailingCellWithItsReproAndANoticeSummary) {
  FailingRun run("planted.error", "bad: 100% \r\nsure, really");
  std::vector<Annotation> a = parse_annotations(run.render("github"));
  ASSERT_EQ(run.s.exit_code(), 1);
  ASSERT_EQ(a.size(), 3u);  // two failing cells, one notice
  const std::string cell = "h4/2 d32 bs16 bf16 ctx33,32 vllm seed7 clean";
  EXPECT_EQ(a[0].kind, "error");
  EXPECT_EQ(a[0].title, "pacheck: planted.error " + cell);
  EXPECT_EQ(a[0].message,
            "error: bad: 100% \r\nsure, really\nrepro: pacheck repro '" + cell + "' --kernel planted.error");
  EXPECT_EQ(a[2].kind, "notice");
  EXPECT_EQ(a[2].title, "pacheck rep: FAIL (exit 1)");

  // A blind negative control is an error too (its check and its missed cell, with metrics).
  RunSummary& s = run.s;
  make_blind(s, run.failing.name());
  a = parse_annotations(run.render("github"));
  EXPECT_EQ(a.front().title, "pacheck: cpu.vector_v: negative control caught");
  EXPECT_TRUE(std::any_of(a.begin(), a.end(), [](const Annotation& x) {
    return x.kind == "error" && x.message.find("negative control not caught") == 0 &&
           x.message.find("\nrel_linf ") != std::string::npos;
  }));
  EXPECT_EQ(a.back().title, "pacheck rep: BLIND (exit 3)");

  // Past 9 errors the rest are counted in a 10th (GitHub shows 10 per step); a passing run has none.
  const std::vector<KernelPtr> many = {unowned(&run.failing)};
  const Suite twelve = suite_of({33, 33, 33, 33, 33, 33});  // 12 failing cells
  s = run_suite(twelve, many, "cpu", run.o);
  a = parse_annotations(render_format("github", s, meta_for(twelve, many, run.o)));
  ASSERT_EQ(a.size(), 11u);
  EXPECT_EQ(a[9].title, "pacheck: 3 more failures");
  const std::vector<KernelPtr> good = {Registry::global().find("cpu.reference")};
  s = run_suite(run.suite, good, "cpu", run.o);
  ASSERT_EQ(s.exit_code(), 0);
  a = parse_annotations(render_format("github", s, meta_for(run.suite, good, run.o)));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, "notice");
}

// A failing cell's error names the suite file and the line of the [[cells]] group that wrote it, relative
// to $GITHUB_WORKSPACE (else the working directory), so GitHub attaches it there; a cell whose place the run
// does not know (no cell_sources: `score`, a merged report) has none.
TEST(Github, AnErrorCarriesTheSuiteFileAndLineOfItsCell) {
  FailingRun run("planted.error", "bad");
  ReportMeta meta = meta_for(run.suite, run.ks, run.o);
  Suite written = run.suite;
  for (std::size_t i = 0; i < written.cells.size(); ++i) {
    written.cells[i].file = (std::filesystem::current_path() / "suites" / "mine.toml").string();
    written.cells[i].line = 10 + static_cast<int>(i);
  }
  meta.cell_sources = cell_sources_of(written);
  std::vector<Annotation> a = parse_annotations(render_format("github", run.s, meta));
  ASSERT_EQ(a.size(), 3u);
  for (int i = 0; i < 2; ++i) {
    const auto r = std::find_if(run.s.results.begin(), run.s.results.end(), [&](const CellResult& x) {
      return a[i].title == "pacheck: " + x.kernel + " " + x.cell_id;
    });
    ASSERT_NE(r, run.s.results.end()) << a[i].title;
    EXPECT_EQ(a[i].file, "suites/mine.toml");
    EXPECT_EQ(a[i].line, 10 + r->index);
  }
  EXPECT_EQ(a[2].kind, "notice");
  EXPECT_EQ(a[2].file, "");
  ::setenv("GITHUB_WORKSPACE", std::filesystem::current_path().parent_path().string().c_str(), 1);
  a = parse_annotations(render_format("github", run.s, meta));
  ::unsetenv("GITHUB_WORKSPACE");
  EXPECT_EQ(a[0].file, std::filesystem::current_path().filename().string() + "/suites/mine.toml");
  meta.cell_sources.clear();
  a = parse_annotations(render_format("github", run.s, meta));
  EXPECT_EQ(a[0].file, "");
  EXPECT_EQ(a[0].line, 0);
}

// ---- what every format says: the negative controls that ran, and NaN/Inf metrics --------------------------

/// What `pacheck run` tells its formats before the first cell of `s`: its negative controls, and that every
/// result is kept in the report directory "rep".
RunStart start_of(const RunSummary& s) {
  RunStart start{"title", {}};
  for (const auto& k : s.kernels)
    if (k.control != ControlOutcome::not_control) start.negative_controls.push_back(k.kernel);
  start.results_in = "rep/results.jsonl and rep/report.json";
  return start;
}

/// What format `format` writes for `s` through every callback a run makes (title, a row per cell, the end):
/// the console's rows come from cell_finished, which render_format does not call.
std::string render_streamed(const std::string& format, const RunSummary& s, const ReportMeta& meta,
                            const FormatOptions& options = {}) {
  std::ostringstream out;
  const std::unique_ptr<ReportFormat> f = find_format(format)->make(out, options);
  f->run_started(start_of(s));
  for (const CellResult& r : s.results) f->cell_finished(r);
  f->run_ended(s, meta);
  return out.str();
}

/// A run of `kernels` (by name) over suite_of({17, 33}): with its metadata, for the formats.
struct NamedRun {
  Suite suite = suite_of({17, 33});
  std::vector<KernelPtr> ks;
  RunOptions o;
  RunSummary s;
  explicit NamedRun(const std::vector<KernelPtr>& kernels) : ks(kernels), s(run_suite(suite, ks, "cpu", o)) {}
  ReportMeta meta() const { return meta_for(suite, ks, o); }
};

constexpr const char* kNoneRan =
    "negative controls: none ran, so this run does not show that its checks can fail here";
constexpr const char* kEveryControlCaught = "every negative control was caught";

TEST(Formats, EveryFormatSaysThatNoNegativeControlRanInTheConsolesWords) {
  const NamedRun run({Registry::global().find("cpu.reference")});
  ASSERT_EQ(run.s.exit_code(), 0);
  EXPECT_EQ(controls_statement(run.s), kNoneRan);
  EXPECT_EQ(exit_meaning(run.s), "every cell passed");
  // Every row of the table: a format added later is held to the same words.
  for (const FormatInfo& f : format_table()) {
    const std::string text = render_streamed(f.name, run.s, run.meta());
    EXPECT_NE(text.find(kNoneRan), std::string::npos) << f.name << ":\n" << text.substr(0, 3000);
    EXPECT_EQ(text.find(kEveryControlCaught), std::string::npos) << f.name << " claims a control that did not run";
  }
  // Where each format puts it: the headline a reader meets first.
  EXPECT_NE(render_format("markdown", run.s, run.meta()).find(std::string("every cell passed on `cpu`: 4 passed, 0 failed, 0 declined, 0 caught by "
                                             "negative controls.\n\n") + kNoneRan + ".\n"),
            std::string::npos);
  const nlohmann::json j = report_json(run.s, run.meta());
  EXPECT_EQ(j["summary"]["negative_controls"]["statement"], kNoneRan);
  EXPECT_EQ(j["summary"]["meaning"], "every cell passed");
  const pugi::xml_document doc = parse_junit(render_format("junit", run.s, run.meta()));
  EXPECT_TRUE(doc.select_node((std::string("//testcase[@name='a negative control ran']/skipped[@message='") + kNoneRan +
                               "']").c_str()));
  std::vector<TapPoint> points = parse_tap(render_format("tap", run.s, run.meta()));
  EXPECT_TRUE(std::any_of(points.begin(), points.end(), [](const TapPoint& p) {
    return p.ok && p.description == "a negative control ran" && p.directive == std::string("SKIP ") + kNoneRan;
  }));
}

TEST(Formats, EveryFormatNamesTheNegativeControlsThatRanWithTheirCounts) {
  NamedRun run({Registry::global().find("cpu.reference"), Registry::global().find("cpu.vector_v")});
  ASSERT_EQ(run.s.exit_code(), 0);
  ASSERT_EQ(run.s.caught, 2);   // the two V:nan@tail cells it must fail
  ASSERT_EQ(run.s.not_run, 2);  // the two clean ones
  const std::string caught = "negative controls: 1 ran; caught: cpu.vector_v; cells: 2 caught, 0 missed, 2 not run";
  EXPECT_EQ(controls_statement(run.s), caught);
  for (const FormatInfo& f : format_table()) {
    const std::string text = render_streamed(f.name, run.s, run.meta());
    EXPECT_NE(text.find(caught), std::string::npos) << f.name << ":\n" << text.substr(0, 3000);
    EXPECT_EQ(text.find(kNoneRan), std::string::npos) << f.name;
    if (f.name != std::string("console"))  // the console's closing counts say it, not the words of an exit code
      EXPECT_NE(text.find(kEveryControlCaught), std::string::npos) << f.name;
  }
  // Blind: named as such in every format, and no format says every control was caught.
  make_blind(run.s, "cpu.reference");
  ASSERT_EQ(run.s.exit_code(), 3);
  const std::string blind = "negative controls: 1 ran; BLIND: cpu.vector_v; cells: 1 caught, 1 missed, 2 not run";
  EXPECT_EQ(controls_statement(run.s), blind);
  EXPECT_EQ(exit_meaning(run.s), "instrument blind: a negative control was not caught");
  for (const FormatInfo& f : format_table()) {
    const std::string text = render_streamed(f.name, run.s, run.meta());
    EXPECT_NE(text.find(blind), std::string::npos) << f.name;
    EXPECT_EQ(text.find(kEveryControlCaught), std::string::npos) << f.name;
  }
  // Not exercised (no planted cell selected): the control is named, and nothing claims it showed a failure.
  Suite clean = exec_test::two_sequence_suite({17, 33}, {exec_test::kClean}, "rep");
  run.s = run_suite(clean, run.ks, "cpu", run.o);
  ASSERT_EQ(run.s.exit_code(), 0);
  EXPECT_EQ(controls_statement(run.s),
            "negative controls: 1 ran; not exercised: cpu.vector_v; cells: 0 caught, 0 missed, 2 not run; none was "
            "exercised, so this run does not show that its checks can fail here");
  EXPECT_EQ(exit_meaning(run.s), "every cell passed");
}

// ---- negative controls summarised: one row, testcase or point each, with their counts -------------------

/// cpu.reference beside the negative control cpu.vector_v over suite_of({17, 33}): the control's two
/// V:nan@tail cells are caught, its two clean cells not run.
struct ControlRun : NamedRun {
  ControlRun() : NamedRun({Registry::global().find("cpu.reference"), Registry::global().find("cpu.vector_v")}) {}
  /// Plants a blind control and a crash: its first expected failure passes (missed), its second errors (a
  /// control that dies instead of computing: caught, but by the process, not the comparator).
  void miss_and_error() {
    std::vector<CellResult*> planted;
    for (auto& r : s.results)
      if (r.expected_fail) planted.push_back(&r);
    ASSERT_EQ(planted.size(), 2u);
    planted[0]->verdict = Verdict::pass;
    planted[1]->verdict = Verdict::error;
    planted[1]->detail = "planted launch failure";
    summarize(s, {{"cpu.reference", false}, {"cpu.vector_v", true}});
    ASSERT_EQ(s.exit_code(), 3);
  }
  /// The ids of the control's cells with verdict `v`.
  std::vector<std::string> control_cells(Verdict v) const {
    std::vector<std::string> out;
    for (const auto& r : s.results)
      if (r.kernel == "cpu.vector_v" && r.verdict == v) out.push_back(r.cell_id);
    return out;
  }
};

/// The lines of `text` that hold `what`.
std::vector<std::string> lines_with(const std::string& text, const std::string& what) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find(what) != std::string::npos) out.push_back(line);
  return out;
}

TEST(ControlsSummarised, ConsoleListsAControlsMissedAndErroredCellsOnlyAndCountsTheRest) {
  ControlRun run;
  ASSERT_EQ(run.s.caught, 2);
  ASSERT_EQ(run.s.not_run, 2);
  std::string text = render_streamed("console", run.s, run.meta());
  // Rows: the kernel under test's four; none of the control's (the closing list of failures is empty).
  EXPECT_EQ(lines_with(text, "cpu.reference            pass").size(), 4u) << text;
  EXPECT_EQ(lines_with(text, " seed7 ").size(), 4u) << text;
  EXPECT_NE(text.find("\n4 cells of negative controls are counted, not listed (2 caught, 2 not run): each control's counts "
                      "are in the table below; every cell is in rep/results.jsonl and rep/report.json\n"),
            std::string::npos)
      << text;
  // The control is one row of the closing table: passed, failed, declined, caught, missed, not run.
  EXPECT_TRUE(std::regex_search(text, std::regex(R"(\ncpu\.vector_v +0 +0 +0 +2 +0 +2  caught\n)"))) << text;

  // A missed cell (instrument blind) and an errored one are rows, in every console mode; the not-run cells
  // stay counted.
  run.miss_and_error();
  const std::string missed = run.control_cells(Verdict::pass).at(0), errored = run.control_cells(Verdict::error).at(0);
  FormatOptions quiet, only_failures;
  quiet.quiet = true;
  only_failures.only_failures = true;
  for (const FormatOptions& o : {FormatOptions{}, quiet, only_failures}) {
    text = render_streamed("console", run.s, run.meta(), o);
    SCOPED_TRACE(o.quiet ? "--quiet" : o.only_failures ? "--only-failures" : "default");
    std::vector<std::string> rows;  // the control's rows: its cells, not its line in the closing table
    for (const auto& l : lines_with(text, " seed7 "))
      if (l.rfind("cpu.vector_v ", 0) == 0) rows.push_back(l);
    EXPECT_EQ(std::count_if(rows.begin(), rows.end(), [&](const std::string& l) {
                return l.find("pass (MISSED)") != std::string::npos && l.find(missed) != std::string::npos;
              }),
              1)
        << text;
    // The errored cell counts as caught, which --quiet (failing rows only) leaves out.
    EXPECT_EQ(std::count_if(rows.begin(), rows.end(), [&](const std::string& l) {
                return l.find("error (caught)") != std::string::npos && l.find(errored) != std::string::npos;
              }),
              o.quiet ? 0 : 1)
        << text;
    EXPECT_EQ(rows.size(), o.quiet ? 1u : 2u) << text;
    EXPECT_NE(text.find("\n2 cells of negative controls are counted, not listed (2 not run)"), std::string::npos) << text;
    EXPECT_TRUE(std::regex_search(text, std::regex(R"(\ncpu\.vector_v +0 +0 +0 +1 +1 +2  BLIND\n)"))) << text;
  }
  // Without a place that keeps every cell, the line says how to keep them.
  EXPECT_NE(render_format("console", run.s, run.meta()).find("--report-dir DIR or --json FILE keeps every cell"),
            std::string::npos);
}

TEST(ControlsSummarised, JunitHasOneTestcasePerControlWithItsCountsAndFailsOnAMiss) {
  ControlRun run;
  pugi::xml_document doc = parse_junit(render_format("junit", run.s, run.meta()));
  EXPECT_EQ(nodes(doc, "//testcase[@classname='pacheck.rep.cpu.reference']"), 4u);
  EXPECT_EQ(nodes(doc, "//testcase[@classname='pacheck.rep.cpu.vector_v']"), 0u) << "a testcase per control cell";
  EXPECT_EQ(nodes(doc, "//skipped"), 0u) << "not_run cells are skips no more";
  EXPECT_EQ(nodes(doc, "/testsuites/testsuite[@name='rep.negative-controls']/testcase"), 1u);
  pugi::xml_node c = doc.select_node("//testcase[@classname='pacheck.rep.negative-controls'][@name='cpu.vector_v']").node();
  ASSERT_TRUE(c);
  auto property = [&](const char* name) {
    return std::string(c.select_node((std::string("properties/property[@name='") + name + "']").c_str()).node().attribute("value").value());
  };
  EXPECT_EQ(property("outcome"), "caught");
  EXPECT_EQ(property("caught"), "2");
  EXPECT_EQ(property("missed"), "0");
  EXPECT_EQ(property("not_run"), "2");
  EXPECT_FALSE(c.child("failure"));
  const std::string out = c.child_value("system-out");
  for (const auto& id : run.control_cells(Verdict::poisoned)) EXPECT_NE(out.find("  poisoned          " + id + "\n"), std::string::npos) << out;
  for (const auto& id : run.control_cells(Verdict::not_run)) EXPECT_EQ(out.find(id), std::string::npos) << "not_run cells are counted";
  const pugi::xml_node root = doc.child("testsuites");
  EXPECT_EQ(root.attribute("tests").as_ullong(), nodes(doc, "//testcase"));
  EXPECT_EQ(root.attribute("tests").as_ullong(), 4u + 1u + run_checks(run.s).size());

  // Planted: a missed cell fails the control's testcase, naming the cell with its metrics; the errored
  // one is listed as caught by an error.
  run.miss_and_error();
  doc = parse_junit(render_format("junit", run.s, run.meta()));
  c = doc.select_node("//testcase[@classname='pacheck.rep.negative-controls'][@name='cpu.vector_v']").node();
  ASSERT_TRUE(c);
  const pugi::xml_node failure = c.child("failure");
  ASSERT_TRUE(failure);
  EXPECT_STREQ(failure.attribute("type").value(), "missed");
  EXPECT_STREQ(failure.attribute("message").value(),
               "negative control not caught: 1 of 2 cells it must fail passed (instrument blind)");
  const std::string failure_text = failure.text().get();
  EXPECT_NE(failure_text.find("MISSED " + run.control_cells(Verdict::pass).at(0) + "\nverdict: pass\n"), std::string::npos)
      << failure_text;
  EXPECT_NE(failure_text.find("repro: pacheck repro "), std::string::npos);
  EXPECT_EQ(property("missed"), "1");
  EXPECT_NE(std::string(c.child_value("system-out")).find("caught by an error, not by the comparator (the kernel errored, "
                                                          "crashed or timed out):\n  error             " +
                                                          run.control_cells(Verdict::error).at(0)),
            std::string::npos)
      << c.child_value("system-out");
  EXPECT_EQ(doc.child("testsuites").attribute("failures").as_int(), 2) << "the control's testcase and its check";
  EXPECT_EQ(nodes(doc, "//skipped"), 0u);
}

TEST(ControlsSummarised, TapIsOnePointPerControlWithItsCountsAndAPointPerMissedCell) {
  ControlRun run;
  std::string tap = render_streamed("tap", run.s, run.meta());
  std::vector<TapPoint> points = parse_tap(tap);
  EXPECT_EQ(std::count_if(points.begin(), points.end(),
                          [](const TapPoint& p) { return p.description.rfind("cpu.vector_v h4/2", 0) == 0; }),
            0)
      << tap;
  EXPECT_EQ(points.size(), 4u + run_checks(run.s).size());
  EXPECT_TRUE(std::any_of(points.begin(), points.end(), [](const TapPoint& p) {
    return p.ok && p.description == "cpu.vector_v: negative control caught (2 caught, 0 missed, 2 not run)";
  })) << tap;
  EXPECT_NE(tap.find("\n# 4 cells of negative controls are counted, not listed (2 caught, 2 not run): in their controls' "
                     "points below; every cell is in rep/results.jsonl and rep/report.json\n"),
            std::string::npos)
      << tap;

  run.miss_and_error();
  tap = render_streamed("tap", run.s, run.meta());
  points = parse_tap(tap);
  std::vector<std::string> control_points;
  for (const auto& p : points)
    if (p.description.rfind("cpu.vector_v", 0) == 0) control_points.push_back((p.ok ? "ok " : "not ok ") + p.description);
  const std::string missed = run.control_cells(Verdict::pass).at(0), errored = run.control_cells(Verdict::error).at(0);
  EXPECT_EQ(control_points,
            (std::vector<std::string>{"not ok cpu.vector_v " + missed + " (negative control MISSED)",
                                      "ok cpu.vector_v " + errored + " (negative control: the planted fault was caught, error)",
                                      "not ok cpu.vector_v: negative control caught (1 caught, 1 missed, 2 not run)",
                                      "ok cpu.vector_v: ran at least one cell"}))
      << tap;
}

TEST(ControlsSummarised, GithubAnnotatesAControlsMissedCellsOnly) {
  ControlRun run;
  std::vector<Annotation> a = parse_annotations(render_format("github", run.s, run.meta()));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, "notice");
  run.miss_and_error();
  a = parse_annotations(render_format("github", run.s, run.meta()));
  std::vector<std::string> titles;
  for (const auto& x : a) titles.push_back(x.kind + " " + x.title);
  EXPECT_EQ(titles, (std::vector<std::string>{"error pacheck: cpu.vector_v: negative control caught",
                                              "error pacheck: cpu.vector_v " + run.control_cells(Verdict::pass).at(0),
                                              "notice pacheck rep: BLIND (exit 3)"}));
}

TEST(ControlsSummarised, MarkdownHasOneRowPerControlAndNoControlCellAmongTheClosest) {
  ControlRun run;
  std::string md = render_format("markdown", run.s, run.meta());
  EXPECT_EQ(lines_with(md, "`cpu.vector_v`").size(), 1u) << md;
  EXPECT_NE(md.find("| rep | `cpu.vector_v` | 0 | 0 | 0 | caught (2 caught, 0 missed); not run on 2 cells (outside its "
                    "expected failures) |"),
            std::string::npos)
      << md;
  // Under --controls-everywhere the control passes its clean cells: they are not the kernel under test's
  // margins to the limit.
  RunOptions everywhere;
  everywhere.controls_everywhere = true;
  const RunSummary audit = run_suite(run.suite, run.ks, "cpu", everywhere);
  ASSERT_EQ(audit.exit_code(), 0);
  ASSERT_EQ(audit.kernels[1].passed, 2);
  md = render_format("markdown", audit, run.meta());
  const std::size_t closest = md.find("### Closest to the limit");
  ASSERT_NE(closest, std::string::npos) << md;
  EXPECT_EQ(lines_with(md.substr(closest, md.find("<details>") - closest), "`cpu.vector_v`").size(), 0u) << md;
  run.miss_and_error();
  md = render_format("markdown", run.s, run.meta());
  // The missed cell is among the worst cells; the table row counts it.
  EXPECT_NE(md.find("| `cpu.vector_v` | `" + run.control_cells(Verdict::pass).at(0) + "` | pass (negative control MISSED) |"),
            std::string::npos)
      << md;
  EXPECT_EQ(lines_with(md, "`cpu.vector_v`").size(), 2u) << md;
}

/// cpu.reference with one output element planted non-finite: NaN where seq_lens[0] is 17, +Inf where it is 33.
class NonfiniteOutput : public Kernel {
 public:
  std::string name() const override { return "planted.nonfinite"; }
  std::string description() const override { return "planted NaN or Inf in element 0"; }
  pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
  Support supports(const Case&) const override { return Support::yes(); }
  void run(const pacheck_kernel_args& a) const override {
    static const KernelPtr ref = Registry::global().find("cpu.reference");
    ref->run(a);
    const DType t = static_cast<DType>(a.out_dtype);
    if (a.seq_lens[0] == 17) store_bits(a.out, 0, t, to_bits(std::nanf(""), t));
    if (a.seq_lens[0] == 33) store_bits(a.out, 0, t, to_bits(INFINITY, t));
  }
};

/// `s` with regex metacharacters escaped.
std::string regex_quote(const std::string& s) {
  static const std::regex special(R"([.^$|()\[\]{}*+?\\])");
  return std::regex_replace(s, special, R"(\$&)");
}

/// Where each format prints a result's rel_linf and margin: a pattern that matches exactly when `word` is
/// the spelling of both for cell `cell` ("nan" or "inf"). One entry per format of format_table(), checked
/// below, so a new format must say where it prints them.
std::map<std::string, std::function<bool(const std::string&, const std::string&, const std::string&)>> spelled_at() {
  auto matches = [](const std::string& text, const std::string& pattern) {
    return std::regex_search(text, std::regex(pattern));
  };
  return {
      {"console",
       [=](const std::string& t, const std::string& cell, const std::string& w) {
         // rel_linf, max_abs, mean_abs, margin; then the length and the whole id.
         return matches(t, fmt::format(R"(planted\.nonfinite +poisoned +{0} +{0} +{0} +{0} +\w+ +{1}\n)", w,
                                       regex_quote(cell)));
       }},
      {"json",
       [=](const std::string& t, const std::string& cell, const std::string& w) {
         // JSON has no NaN or Inf: null, with the counts that say which (read back through them below).
         const nlohmann::json report = nlohmann::json::parse(t);
         for (const auto& r : report["results"])
           if (r["cell"] == cell)
             return r["metrics"]["rel_linf"].is_null() && r["margin"].is_null() &&
                    r["metrics"][w == "nan" ? "nan" : "inf"].get<int>() > 0 &&
                    r["metrics"][w == "nan" ? "inf" : "nan"].get<int>() == 0;
         return false;
       }},
      {"junit",
       [=](const std::string& t, const std::string& cell, const std::string& w) {
         // The testcase's <failure> text (no '<' in it: pugixml escapes one).
         return matches(t, fmt::format(R"(name="{1}"[^>]*>\s*<failure[^>]*>[^<]*rel_linf: {0}\nlimit: \S+\nmargin: {0}\n)"
                                       R"(max_abs: {0}\nnmse: {0}\n)",
                                       w, regex_quote(cell)));
       }},
      {"markdown",
       [=](const std::string& t, const std::string& cell, const std::string& w) {
         return matches(t, fmt::format(R"(\| `{1}` \| poisoned \| {0} \| {0} \|)", w, regex_quote(cell)));
       }},
      {"html",
       [=](const std::string& t, const std::string& cell, const std::string& w) {
         // The fault matrix's hover title and the repro list's comment.
         return matches(t, fmt::format(R"({1}\nverdict: poisoned\nrel_linf {0} \(limit [^,]+, margin {0}\))", w,
                                       regex_quote(cell))) &&
                matches(t, fmt::format(R"({1}.*# poisoned, rel_linf {0} \(limit [^,]+, margin {0}\))", w,
                                       regex_quote(cell)));
       }},
      {"tap",
       [=](const std::string& t, const std::string& cell, const std::string& w) {
         // YAML's spelling of the same value: .nan, .inf.
         return matches(t, fmt::format(R"(- planted\.nonfinite {1}\n  ---\n(  .*\n)*?  rel_linf: \.{0}\n  limit: \S+\n  margin: \.{0}\n)",
                                       w, regex_quote(cell)));
       }},
      {"github",
       [=](const std::string& t, const std::string& cell, const std::string& w) {
         std::string title = cell;  // a property value: ',' escaped
         for (std::size_t p = 0; (p = title.find(',', p)) != std::string::npos;) title.replace(p, 1, "%2C");
         return matches(t, fmt::format(R"(title=pacheck%3A planted\.nonfinite {1}::.*%0Arel_linf {0} \(limit [^,]+, margin {0}\))",
                                       w, regex_quote(title)));
       }},
  };
}

TEST(Formats, EveryFormatSpellsANanOrInfOutputAsTheConsoleDoes) {
  NonfiniteOutput k;
  const NamedRun run({unowned(&k)});
  const ReportMeta meta = run.meta();
  const std::string nan_cell = "h4/2 d32 bs16 bf16 ctx17,32 vllm seed7 clean", inf_cell = "h4/2 d32 bs16 bf16 ctx33,32 vllm seed7 clean";
  std::map<std::string, const CellResult*> by_cell;
  for (const auto& r : run.s.results) by_cell[r.cell_id] = &r;
  ASSERT_EQ(by_cell.count(nan_cell), 1u);
  ASSERT_EQ(by_cell.count(inf_cell), 1u);
  // The numbers behind them: rel_linf and margin are +inf for both outputs (comparator.cpp), which is how
  // a NaN output came to read "inf" in TAP, the annotations and summary.md.
  for (const CellResult* r : {by_cell[nan_cell], by_cell[inf_cell]}) {
    ASSERT_EQ(r->verdict, Verdict::poisoned) << r->detail;
    ASSERT_TRUE(std::isinf(r->metrics.rel_linf) && std::isinf(r->margin));
  }
  EXPECT_EQ(metric_text(by_cell[nan_cell]->metrics, by_cell[nan_cell]->metrics.rel_linf), "nan");
  EXPECT_EQ(metric_text(by_cell[inf_cell]->metrics, by_cell[inf_cell]->metrics.rel_linf), "inf");
  EXPECT_EQ(max_ulp_text(by_cell[nan_cell]->metrics), "nan");
  EXPECT_EQ(error_clause(*by_cell[nan_cell]), fmt::format("rel_linf nan (limit {}, margin nan)", sci(by_cell[nan_cell]->limit)));

  const auto where = spelled_at();
  // The same run read back from its report.json (merge, `pacheck report`): JSON's nulls lose nothing.
  const RunSummary read_back = summary_from_report(report_json(run.s, meta), "report.json").first;
  for (const FormatInfo& f : format_table()) {
    ASSERT_EQ(where.count(f.name), 1u) << "format " << f.name << ": say where it prints rel_linf and margin";
    const std::string text = render_streamed(f.name, run.s, meta);
    const auto& spelled = where.at(f.name);
    EXPECT_TRUE(spelled(text, nan_cell, "nan")) << f.name << ": the NaN output's metrics are not 'nan':\n" << text.substr(0, 6000);
    EXPECT_FALSE(spelled(text, nan_cell, "inf")) << f.name;
    EXPECT_TRUE(spelled(text, inf_cell, "inf")) << f.name << ": the Inf output's metrics are not 'inf':\n" << text.substr(0, 6000);
    EXPECT_FALSE(spelled(text, inf_cell, "nan")) << f.name;
    if (f.name != std::string("json"))  // its environment and timings are those of the reading process
      EXPECT_EQ(render_streamed(f.name, read_back, meta), text) << f.name << " changes through report.json";
  }
}

TEST(Environment, FingerprintNamesBuildCompilerAndDevice) {
  const Environment e = collect_environment("cpu", {{"lib/libk.so", std::string(64, 'a')}});
  EXPECT_EQ(e.pacheck_version, pacheck_version());
  EXPECT_FALSE(e.git_commit.empty());
  EXPECT_TRUE(e.compiler.rfind("gcc ", 0) == 0 || e.compiler.rfind("clang ", 0) == 0) << e.compiler;
  EXPECT_FALSE(e.device_name.empty());
  utsname u{};
  ::uname(&u);
  EXPECT_EQ(e.arch, u.machine);
  const nlohmann::json j = to_json(e);
  EXPECT_EQ(j["plugins"][0]["sha256"], std::string(64, 'a'));
  EXPECT_EQ(to_json(environment_from_json(j)), j);
  // A device the build lacks is recorded as unavailable, not thrown.
  EXPECT_EQ(collect_environment("tpu:0").device_name.rfind("unavailable: ", 0), 0u);

  Environment g;
  g.device = "cuda:0";
  parse_device_description(g, "NVIDIA H200 sm_90, 132 SMs, 139.8 GiB, driver 13.0, runtime 12.8");
  EXPECT_EQ(g.device_name, "NVIDIA H200");
  EXPECT_EQ(g.arch, "sm_90");
  EXPECT_EQ(g.driver, "13.0");
  EXPECT_EQ(g.runtime, "12.8");
  Environment h;
  h.device = "hip:0";
  parse_device_description(h, "AMD Radeon RX 7900 XTX gfx1100, driver 6.3.4");
  EXPECT_EQ(h.arch, "gfx1100");
  EXPECT_EQ(h.device_name, "AMD Radeon RX 7900 XTX");
}

}  // namespace
}  // namespace pacheck
