#include "cli/run_control.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <csignal>

#include "cli/common.hpp"
#include "cli/interrupt.hpp"
#include "exec/isolate.hpp"
#include "report/text.hpp"

namespace pacheck::cli {

void RunControlFlags::bind(CLI::App* cmd, const std::string& fail_fast_notes, const std::string& repeat_notes) {
  cmd->add_flag("--fail-fast", fail_fast,
                "stop after the first failing result: no further cell starts, exit 1 as for a failure; no reports "
                "are written" +
                    fail_fast_notes);
  cmd->add_option("--repeat", repeat,
                  "run the whole selection N times in this process, for flake hunting: rows are the first repeat's, "
                  "each result whose verdict differs between repeats is listed, and a result that fails in any "
                  "repeat is reported as that failure (exit 1)" +
                      repeat_notes)
      ->check(CLI::Range(1, 1000));
  progress_option = cmd->add_option(
      "--progress-interval", progress_interval,
      fmt::format("print a [progress] line on stderr every SECONDS (> 0) while the run runs (results finished of "
                  "the total, the cells running now, the time elapsed); 'off' = none (default: {:g} when stderr is "
                  "not a terminal, off when it is: the live line shows progress there)",
                  kDefaultProgressInterval));
  progress_option->type_name("SECONDS");
}

double RunControlFlags::progress_seconds(bool stderr_tty) const {
  if (!progress_option || progress_option->count() == 0) return stderr_tty ? 0 : kDefaultProgressInterval;
  const std::string& v = progress_interval;
  if (v == "off") return 0;
  double x = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || p != v.data() + v.size())
    throw UsageError(fmt::format("--progress-interval: '{}' is not a number of seconds (or 'off')", v));
  // 0 is refused rather than read as "off": an interval of no time is no interval, and 'off' says what it does.
  if (!std::isfinite(x) || x <= 0)
    throw UsageError(fmt::format("--progress-interval: '{}' is not a finite number of seconds > 0 (use 'off' for no "
                                 "[progress] lines)",
                                 v));
  return x;
}

RunControl::RunControl(const RunControlFlags& flags, bool stderr_tty)
    : fail_fast_(flags.fail_fast), repeat_(flags.repeat), tty_(stderr_tty),
      interval_(flags.progress_seconds(stderr_tty)) {}

RunControl::~RunControl() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int RunControl::signal() const { return InterruptHandler::signal(); }

void RunControl::attach(RunOptions& ro) {
  ro.stop = [this] { return InterruptHandler::signal() != 0 || first_seen_.load(); };
  ro.on_result = [this, user = std::move(ro.on_result)](const CellResult& r) {
    if (user) user(r);  // first: a kill right after this cell must not lose it (results.jsonl)
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto at = std::find(running_.begin(), running_.end(), std::pair{r.kernel, r.cell_id});
      if (at != running_.end()) running_.erase(at);
    }
    const CellOutcome o = cell_outcome(r, r.expected_fail);
    if (fail_fast_ && !first_seen_ && (o == CellOutcome::failed || o == CellOutcome::missed)) {
      first_text_ = fmt::format("{} '{}' ({})", r.kernel, r.cell_id, verdict_name(r.verdict));
      first_seen_ = true;
    }
  };
  ro.on_result_in_order = [this, user = std::move(ro.on_result_in_order)](const CellResult& r) {
    if (current_ > 0) return;  // rows are the first repeat's
    if (tty_) fmt::print(stderr, "\r\033[K");
    if (user) user(r);
  };
  ro.on_planned = [this](int done, int total) {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = done;
    total_ = total;
    running_.clear();
  };
  ro.on_started = [this](const std::string& kernel, const std::string& cell) {
    std::lock_guard<std::mutex> lock(mu_);
    running_.emplace_back(kernel, cell);
  };
  ro.on_progress = [this](int done, int total) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = done;
      total_ = total;
    }
    if (!tty_) return;
    if (repeat_ > 1) fmt::print(stderr, "\r[repeat {}/{}] [{}/{}] cells", current_ + 1, repeat_, done, total);
    else fmt::print(stderr, "\r[{}/{}] cells", done, total);
  };
}

namespace {
/// "45s", "1m05s", "2h03m": wall time as a CI log reader scans it.
std::string elapsed_text(double s) {
  const auto t = static_cast<long long>(s);
  if (t < 60) return fmt::format("{}s", t);
  if (t < 3600) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}h{:02}m", t / 3600, (t % 3600) / 60);
}
}  // namespace

std::string RunControl::progress_line() const {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::lock_guard<std::mutex> lock(mu_);
  std::string line = "[progress] ";
  if (repeat_ > 1) line += fmt::format("repeat {}/{}: ", current_ + 1, repeat_);
  line += total_ < 0 ? fmt::format("{} results finished (planning)", group_digits(done_))
                     : fmt::format("{}/{} results finished", group_digits(done_), group_digits(total_));
  line += fmt::format(", {} running", running_.size());
  if (!running_.empty()) {
    std::string ids;
    constexpr std::size_t kShown = 3;
    for (std::size_t i = 0; i < running_.size() && i < kShown; ++i)
      ids += fmt::format("{}{} '{}'", i ? ", " : "", running_[i].first, running_[i].second);
    if (running_.size() > kShown) ids += fmt::format(", and {} more", running_.size() - kShown);
    line += " (" + ids + ")";
  }
  return line + ", " + elapsed_text(elapsed) + " elapsed";
}

void RunControl::ticker() {
  const auto step = std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(interval_));
  auto next = std::chrono::steady_clock::now() + step;
  std::unique_lock<std::mutex> lock(mu_);
  while (!finished_) {
    if (wake_.wait_until(lock, next, [this] { return finished_; })) break;
    next += step;
    lock.unlock();
    const std::string line = progress_line();
    // One write per line: the console rows go to stdout, this to stderr, each whole.
    fmt::print(stderr, "{}{}\n", tty_ ? "\r\033[K" : "", line);
    std::fflush(stderr);
    lock.lock();
  }
}

RunSummary RunControl::run(const std::function<RunSummary()>& once, const std::vector<KernelRole>& roles) {
  start_ = std::chrono::steady_clock::now();
  if (interval_ > 0 && !thread_.joinable()) thread_ = std::thread([this] { ticker(); });
  struct StopTicker {
    RunControl* self;
    ~StopTicker() {
      {
        std::lock_guard<std::mutex> lock(self->mu_);
        self->finished_ = true;
      }
      self->wake_.notify_all();
      if (self->thread_.joinable()) self->thread_.join();
      if (self->tty_) fmt::print(stderr, "\r\033[K");
    }
  } stop_ticker{this};
  stopped_ = false;
  diffs_.clear();
  std::vector<RunSummary> runs;
  for (current_ = 0; current_ < repeat_; ++current_) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = 0;
      total_ = -1;
      running_.clear();
    }
    RunSummary s = once();
    if (s.stopped) {
      stopped_ = true;
      return s;
    }
    if (repeat_ == 1) return s;
    runs.push_back(std::move(s));
  }
  current_ = repeat_ - 1;
  return combine_repeats(std::move(runs), roles, &diffs_);
}

int RunControl::stopped_exit_code(const RunSummary& s) const {
  const int sig = signal();
  return sig ? InterruptHandler::exit_code(sig) : std::max<int>(kFail, s.exit_code());
}

void RunControl::print_stopped(std::FILE* to, const RunSummary& s) const {
  const int sig = signal();
  const std::string why =
      sig ? fmt::format("interrupted by {}", sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : signal_description(sig))
          : fmt::format("stopped early (--fail-fast) after the first failure, {}", first_text_);
  fmt::print(to, "\npacheck: {}: {} of {} results finished ({}); no further cell was started\n", why,
             group_digits(s.results.size()), group_digits(s.planned), verdict_counts_text(s.verdicts));
  std::fflush(to);
}

void RunControl::finish_repeats(const RunSummary& combined, bool console, ReportDir* reports) const {
  if (repeat_ <= 1) return;
  if (reports)
    for (const auto& r : combined.results) reports->append(r);
  if (console) print_repeats(stdout, combined);
  else if (!diffs_.empty()) print_repeats(stderr, combined);
  std::fflush(stdout);
}

void RunControl::print_repeats(std::FILE* to, const RunSummary& combined) const {
  if (repeat_ <= 1) return;
  fmt::print(to, "\n--repeat {}: each of {} results ran {} times; ", repeat_, group_digits(combined.results.size()), repeat_);
  if (diffs_.empty()) {
    fmt::print(to, "every verdict was the same each time\n");
    std::fflush(to);
    return;
  }
  fmt::print(to, "{} gave different verdicts (flaky):\n", diffs_.size());
  for (const auto& d : diffs_) {
    std::string verdicts;
    for (std::size_t k = 0; k < d.verdicts.size(); ++k) verdicts += (k ? ", " : "") + std::string(verdict_name(d.verdicts[k]));
    CellResult r;
    r.kernel = d.kernel;
    r.cell_id = d.cell_id;
    fmt::print(to, "  {} [{}]{}\n    {}\n", d.kernel, verdicts,
               d.outcome_differs ? fmt::format(" -> reported as repeat {}'s failure", d.recorded + 1) : "",
               repro_command(r, combined.judge_flags));
  }
  std::fflush(to);
}

}  // namespace pacheck::cli
