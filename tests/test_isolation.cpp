// Crash and hang isolation: kernels planted to segfault, abort, exit, hang, write past their output or
// return an error on one cell get that verdict on that cell only, every other cell completes, and
// results.jsonl holds every finished cell. The planted kernels live in this binary; the isolated children
// are forks of it, so they have them too.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "exec/isolate.hpp"
#include "exec_fixtures.hpp"
#include "report/report.hpp"
#include "report/reports.hpp"

namespace pacheck {
namespace {

namespace fs = std::filesystem;

constexpr int kTrigger = 33;  // seq_lens[0] of the one cell each planted kernel misbehaves on

/// A CPU kernel that runs cpu.reference and misbehaves when seq_lens[0] == kTrigger.
class Misbehaving : public Kernel {
 public:
  enum class What { none, segfault, abort, exit, exit_call, hang, write_past_output, error, fatal_error };
  Misbehaving(What w, std::string name, std::string pid_file = {}) : what_(w), name_(std::move(name)), pid_file_(std::move(pid_file)) {}
  std::string name() const override { return name_; }
  std::string description() const override { return "planted process-level fault"; }
  pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
  Support supports(const Case&) const override { return Support::yes(); }
  void run(const pacheck_kernel_args& a) const override {
    static const KernelPtr ref = Registry::global().find("cpu.reference");
    ref->run(a);
    if (a.seq_lens[0] != kTrigger) return;
    if (!pid_file_.empty()) std::ofstream(pid_file_) << ::getpid() << "\n";
    switch (what_) {
      case What::segfault: {
        // A volatile store through a pointer the compiler cannot see is null: a real store to address 0,
        // neither removed as dead nor turned into a trap instruction.
        volatile int* volatile p = nullptr;
        *p = 42;
        break;
      }
      case What::abort: std::abort();
      case What::exit: ::_exit(7);
      // exit(), not _exit: the child's inherited atexit handlers (a sanitizer's leak check among them) must
      // not run, and the status says exit() was called.
      case What::exit_call: std::exit(7);
      case What::hang: {
        volatile unsigned long spin = 0;
        for (;;) spin = spin + 1;
      }
      case What::write_past_output: {
        const std::size_t n = static_cast<std::size_t>(a.num_seqs) * a.num_heads * a.head_size;
        store(a.out, n, static_cast<DType>(a.out_dtype), 1.0f);
        break;
      }
      case What::error: throw KernelError("planted launch failure");
      case What::fatal_error: throw KernelError("planted illegal address (context lost)", /*fatal=*/true);
      case What::none: break;
    }
  }

 private:
  What what_;
  std::string name_, pid_file_;
};

Suite small_suite() {
  Suite s;
  s.name = "iso";
  auto add = [&](int len, FaultSpec f) { s.cells.push_back(exec_test::two_sequence_cell(len, f)); };
  const FaultSpec clean{}, vnan{Poison::nan, Target::v, Region::tail};
  for (int len : {17, kTrigger, 48, 64, 100}) add(len, clean);
  for (int len : {17, 48, 100}) add(len, vnan);  // faulted cells exercise the clean-baseline path
  return s;
}

using exec_test::unowned;

RunOptions isolated_options(double timeout = 60) {
  RunOptions o;
  o.threads = 2;
  o.isolate = [](const Kernel&) { return true; };
  o.cell_timeout_s = timeout;
  return o;
}

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/pacheck_iso_XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string without_seconds(const CellResult& r) {
  auto j = to_json(r);
  j.erase("seconds");
  return j.dump();
}

TEST(Isolation, EachPlantedFaultGetsItsVerdictOnThatCellOnly) {
  using W = Misbehaving::What;
  struct Row {
    W what;
    Verdict verdict;
    std::string detail;  // expected substring of the trigger cell's detail
  };
  std::vector<Row> rows = {
      {W::segfault, Verdict::crash, "SIGSEGV"},
      {W::abort, Verdict::crash, "SIGABRT"},
      {W::exit, Verdict::crash, "exited with status 7"},
      {W::exit_call, Verdict::crash, "called exit()"},
      {W::hang, Verdict::timeout, "cell timeout of 2 s"},
      {W::write_past_output, Verdict::oob_write, "guard after the output"},
      {W::error, Verdict::error, "planted launch failure"},
      {W::fatal_error, Verdict::error, "context lost"},
  };
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer reports a SEGV itself and exits with status 1 instead of dying of the signal.
  rows[0].detail = "exited with status 1";
#endif
  const Suite suite = small_suite();
  for (const Row& row : rows) {
    SCOPED_TRACE(std::string(verdict_name(row.verdict)) + " " + row.detail);
    TempDir dir;
    Misbehaving k(row.what, "planted.misbehaving");
    ReportDir rd = ReportDir::start(dir.path.string(), nlohmann::json::object());
    RunOptions o = isolated_options(2.0);
    o.on_result = [&](const CellResult& r) { rd.append(r); };
    const RunSummary s = run_suite(suite, {unowned(&k)}, "cpu", o);
    ASSERT_EQ(s.results.size(), suite.cells.size());
    int triggered = 0;
    for (const auto& r : s.results) {
      if (r.case_id.find("ctx33,") != std::string::npos) {
        ++triggered;
        EXPECT_EQ(r.verdict, row.verdict) << r.detail;
        EXPECT_NE(r.detail.find(row.detail), std::string::npos) << r.detail;
      } else {
        EXPECT_EQ(r.verdict, Verdict::pass) << r.cell_id << ": " << r.detail;
      }
    }
    EXPECT_EQ(triggered, 1);
    EXPECT_EQ(s.exit_code(), 1);
    // results.jsonl holds every finished cell, each exactly as reported.
    const ResultsLog log = read_results_jsonl((dir.path / "results.jsonl").string());
    EXPECT_FALSE(log.torn_tail);
    std::multiset<std::string> want, got;
    for (const auto& r : s.results) want.insert(without_seconds(r));
    for (const auto& r : log.results) got.insert(without_seconds(r));
    EXPECT_EQ(got, want);
  }
}

TEST(Isolation, SameResultsAsInProcessWhateverTheLaneCount) {
  const KernelPtr ref = Registry::global().find("cpu.reference");
  const KernelPtr control = Registry::global().find("cpu.vector_v");
  Suite suite = small_suite();
  RunOptions in_process;
  in_process.threads = 2;
  const RunSummary a = run_suite(suite, {ref, control}, "cpu", in_process);
  for (int lanes : {1, 3}) {
    RunOptions o = isolated_options();
    o.isolate_lanes = lanes;
    const RunSummary b = run_suite(suite, {ref, control}, "cpu", o);
    ASSERT_EQ(a.results.size(), b.results.size());
    for (std::size_t i = 0; i < a.results.size(); ++i)
      EXPECT_EQ(without_seconds(a.results[i]), without_seconds(b.results[i])) << "lanes " << lanes;
    EXPECT_EQ(b.kernels[1].control, ControlOutcome::caught);  // the negative control is caught isolated too
    EXPECT_EQ(b.exit_code(), a.exit_code());
  }
}

TEST(Isolation, OnlySelectedKernelsAreIsolated) {
  // The segfaulting kernel is isolated, the reference is not: the run survives and the reference's cells
  // are untouched. (Isolating nothing would kill this test binary.)
  Misbehaving bad(Misbehaving::What::segfault, "planted.segfault");
  const KernelPtr ref = Registry::global().find("cpu.reference");
  RunOptions o = isolated_options();
  o.isolate = [](const Kernel& k) { return k.name() == "planted.segfault"; };
  const RunSummary s = run_suite(small_suite(), {ref, unowned(&bad)}, "cpu", o);
  EXPECT_EQ(s.kernels[0].failed, 0);
  EXPECT_EQ(s.kernels[1].failed, 1);
  EXPECT_EQ(s.exit_code(), 1);
}

TEST(Isolation, ChildrenDieWithTheRun) {
  // A run killed while an isolated kernel hangs must not leave the hung child behind (PR_SET_PDEATHSIG).
  TempDir dir;
  const std::string pid_file = (dir.path / "child.pid").string();
  const pid_t runner = ::fork();
  ASSERT_GE(runner, 0);
  if (runner == 0) {
    Misbehaving k(Misbehaving::What::hang, "planted.hang", pid_file);
    run_suite(small_suite(), {unowned(&k)}, "cpu", isolated_options(600));
    ::_exit(0);
  }
  pid_t child = 0;
  for (int i = 0; i < 600 && child == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream in(pid_file);
    in >> child;
  }
  ASSERT_GT(child, 0) << "the hanging kernel never started";
  ::kill(runner, SIGKILL);
  ::waitpid(runner, nullptr, 0);
  auto gone = [&] {
    std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
    std::string pid, comm, state;
    return !(stat >> pid >> comm >> state) || state == "Z";  // a zombie awaiting its new parent's wait is dead
  };
  bool dead = false;
  for (int i = 0; i < 100 && !(dead = gone()); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(dead) << "isolated child " << child << " outlived the killed run";
  if (!dead) ::kill(child, SIGKILL);
}

/// cpu.reference whose supports() records which process asked it, and can crash on the trigger cell.
class Asking : public Kernel {
 public:
  Asking(std::string name, std::string pid_file, bool crash) : name_(std::move(name)), pid_file_(std::move(pid_file)), crash_(crash) {}
  std::string name() const override { return name_; }
  std::string description() const override { return "planted supports()"; }
  pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
  Support supports(const Case& c) const override {
    std::ofstream(pid_file_, std::ios::app) << ::getpid() << "\n";
    if (crash_ && c.seq_lens[0] == kTrigger) {
      volatile int* volatile p = nullptr;
      *p = 42;
    }
    return Support::yes();
  }
  void run(const pacheck_kernel_args& a) const override { Registry::global().find("cpu.reference")->run(a); }

 private:
  std::string name_, pid_file_;
  bool crash_;
};

TEST(Isolation, IsolatedKernelsAreAskedWhatTheySupportInAChild) {
  // supports() is kernel code: a GPU kernel's may create a device context (unusable in every child forked
  // after it), a plugin's may crash. Isolated kernels are asked in a child process.
  TempDir dir;
  const std::string pids = (dir.path / "asked_by").string();
  Asking fine("planted.asking", pids, false), crashing("planted.supports_crash", pids, true);
  const KernelPtr ref = Registry::global().find("cpu.reference");
  const RunSummary s = run_suite(small_suite(), {ref, unowned(&fine), unowned(&crashing)}, "cpu", isolated_options());
  std::ifstream in(pids);
  int asked = 0;
  for (pid_t pid; in >> pid; ++asked) EXPECT_NE(pid, ::getpid()) << "supports() of an isolated kernel ran in the parent";
  EXPECT_GE(asked, static_cast<int>(small_suite().cells.size()));
  EXPECT_EQ(s.kernels[0].failed, 0);
  EXPECT_EQ(s.kernels[1].failed, 0);
  EXPECT_EQ(s.kernels[1].passed, static_cast<int>(small_suite().cells.size()));
  // A supports() that crashes costs that kernel's cells (error, saying why), not the run.
  EXPECT_EQ(s.kernels[2].failed, static_cast<int>(small_suite().cells.size()));
  for (const auto& r : s.results)
    if (r.kernel == "planted.supports_crash") {
      EXPECT_EQ(r.verdict, Verdict::error);
      EXPECT_NE(r.detail.find("asking planted.supports_crash which cells it supports failed"), std::string::npos) << r.detail;
    }
  EXPECT_EQ(s.exit_code(), 1);
}

/// Set by InProcessMarker::run in the process that calls it: a child forked afterwards inherits it.
bool g_in_process_kernel_called = false;

/// cpu.reference that records, in this process's memory, that an in-process kernel was called.
class InProcessMarker : public Kernel {
 public:
  std::string name() const override { return "planted.in_process_marker"; }
  std::string description() const override { return "records that it ran"; }
  pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
  Support supports(const Case&) const override { return Support::yes(); }
  void run(const pacheck_kernel_args& a) const override {
    g_in_process_kernel_called = true;
    Registry::global().find("cpu.reference")->run(a);
  }
};

/// cpu.reference that fails when its process was forked from one that had already called an in-process
/// kernel (as a CUDA kernel fails in a child forked after its parent initialised the device).
class ForkedBeforeInProcess : public Kernel {
 public:
  std::string name() const override { return "planted.forked_before_in_process"; }
  std::string description() const override { return "fails in a child forked after an in-process call"; }
  pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
  Support supports(const Case&) const override { return Support::yes(); }
  void run(const pacheck_kernel_args& a) const override {
    if (g_in_process_kernel_called) throw KernelError("forked from a process that had run an in-process kernel");
    Registry::global().find("cpu.reference")->run(a);
  }
};

TEST(Isolation, IsolatedChildrenAreForkedBeforeAnyInProcessKernelCall) {
  // Issue 17: a built-in GPU kernel in-process and a plugin GPU kernel isolated gave every plugin cell
  // cudaErrorInitializationError, because the parent had opened the device before forking the plugin's
  // children. The run must fork every isolated child while this process has run (and opened) nothing; the
  // planted pair here sees any fork that comes after an in-process call, on the CPU.
  InProcessMarker marker;
  ForkedBeforeInProcess isolated;
  RunOptions o = isolated_options();
  o.isolate = [](const Kernel& k) { return k.name() == "planted.forked_before_in_process"; };
  g_in_process_kernel_called = false;
  const RunSummary s = run_suite(small_suite(), {unowned(&marker), unowned(&isolated)}, "cpu", o);
  EXPECT_TRUE(g_in_process_kernel_called) << "the in-process kernel never ran in this process";
  for (const auto& r : s.results) EXPECT_EQ(r.verdict, Verdict::pass) << r.kernel << " " << r.cell_id << ": " << r.detail;
  EXPECT_EQ(s.kernels[0].passed, static_cast<int>(small_suite().cells.size()));
  EXPECT_EQ(s.kernels[1].passed, static_cast<int>(small_suite().cells.size()));
  EXPECT_EQ(s.exit_code(), 0);
}

/// A "GPU" kernel for the planning and forking paths only: its cells never reach a device.
class NamedGpu : public Kernel {
 public:
  std::string name() const override { return "planted.named_gpu"; }
  std::string description() const override { return "a GPU kernel that is never launched"; }
  pacheck_device device() const override { return PACHECK_DEVICE_CUDA; }
  Support supports(const Case&) const override { return Support::yes(); }
  void run(const pacheck_kernel_args&) const override { throw KernelError("planted.named_gpu must not be launched"); }
};

TEST(Isolation, IsolatedGpuCellsAfterAGpuContextWasOpenedSaySoInsteadOfForking) {
  // A process that already holds a GPU context (a caller that ran GPU kernels in-process before) cannot
  // fork children that use the device: each isolated GPU cell is an error naming that cause, not the
  // child's cudaErrorInitializationError. Run in a child so that the noted context stays out of this test
  // binary's other tests (a plain fork: exec/'s fork helpers hold their lock in the child they fork).
  TempDir dir;
  const std::string file = (dir.path / "results").string();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    note_gpu_context_opened();
    NamedGpu k;
    const RunSummary s = run_suite(small_suite(), {unowned(&k)}, "cpu", isolated_options());
    std::ofstream out(file);
    for (const auto& r : s.results) out << verdict_name(r.verdict) << " " << r.detail << "\n";
    out.close();
    ::_exit(out ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << describe_wait_status(status);
  std::ifstream lines(file);
  int n = 0;
  for (std::string line; std::getline(lines, line); ++n) {
    EXPECT_EQ(line.rfind("error ", 0), 0u) << line;
    EXPECT_NE(line.find("opened a GPU context before forking the isolated child"), std::string::npos) << line;
  }
  EXPECT_EQ(n, static_cast<int>(small_suite().cells.size()));
}

TEST(Isolation, ProbeInAChildReturnsItsValue) {
  EXPECT_EQ(run_in_child_process([] { return std::string("cpu"); }, 10), "cpu");
  EXPECT_EQ(run_in_child_process([]() -> std::string { std::abort(); }, 10), std::nullopt);
}

TEST(Isolation, SignalNamesAreReadable) {
  EXPECT_EQ(signal_description(SIGSEGV).rfind("SIGSEGV", 0), 0u);
  EXPECT_EQ(describe_wait_status(0x0b), "killed by " + signal_description(SIGSEGV));  // WTERMSIG = 11
  EXPECT_EQ(describe_wait_status(3 << 8), "exited with status 3");
  EXPECT_NE(describe_wait_status(kChildCalledExit << 8).find("called exit()"), std::string::npos);
}

}  // namespace
}  // namespace pacheck
