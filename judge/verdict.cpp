#include "judge/verdict.hpp"

#include "core/table.hpp"

namespace pacheck {

namespace {
constexpr VerdictInfo kVerdicts[] = {
    {Verdict::oob_write, "oob_write", "a guard region around the output changed", true},
    {Verdict::input_mutated, "input_mutated", "query, caches, block_tables or seq_lens changed", true},
    {Verdict::unwritten, "unwritten", "an output element still holds the NaN fill pattern", true},
    {Verdict::poisoned, "poisoned", "NaN or Inf where the oracle is finite", true},
    {Verdict::overflow, "overflow",
     "Inf/NaN from V near the dtype's limit where the output is finite: a clean dist=overflow cell (opt-in)", true},
    {Verdict::variant, "variant",
     "the output differs bitwise from the same cell with a clean (zero) cache, even within tolerance, and the "
     "difference reproduces in fresh processes: the poison leaks into the output",
     true},
    {Verdict::nondeterministic, "nondeterministic",
     "the output differs from the clean-cache run, and two runs of the same cell from the same history differ "
     "too: it changes from call to call, whatever the poison does",
     true},
    {Verdict::stateful, "stateful",
     "the output differs from the clean-cache run because of earlier calls, not the fault: runs from the same "
     "history agree, with and without the poison",
     true},
    {Verdict::fail, "fail", "rel_linf = max|out − ref| / max|ref| above the tolerance limit", true},
    {Verdict::biased, "biased",
     "within tolerance, but the 16-bit output rounds one way: its signed mean error from the oracle rounded to "
     "nearest is beyond what honest designs show (a truncating conversion rounds toward zero)",
     true},
    {Verdict::declined, "declined", "the kernel does not support the cell (with its reason)", false},
    {Verdict::not_run, "not_run",
     "a negative control was not run on this cell: the cell is outside its expected failures (the cells its "
     "planted fault must fail); --controls-everywhere runs it",
     false},
    {Verdict::error, "error", "the kernel or device reported an error", true},
    {Verdict::crash, "crash", "the kernel's isolated child process died (the signal is in the detail)", true},
    {Verdict::timeout, "timeout", "the kernel's isolated child process hung past --cell-timeout", true},
    {Verdict::pass, "pass", "none of the above", false},
};
// The enum's order is the table's: rank and value agree, so code that compares enum values stays right.
constexpr bool in_enum_order() {
  for (std::size_t i = 0; i < std::size(kVerdicts); ++i)
    if (static_cast<std::size_t>(kVerdicts[i].value) != i) return false;
  return true;
}
static_assert(in_enum_order(), "verdict_table() rows must follow the Verdict enum's order");
}  // namespace

std::span<const VerdictInfo> verdict_table() { return kVerdicts; }
std::string_view verdict_name(Verdict v) { return name_of(verdict_table(), v); }
Verdict parse_verdict(std::string_view s) { return parse(verdict_table(), s, "verdict"); }

std::size_t verdict_rank(Verdict v) {
  return static_cast<std::size_t>(&row_of(verdict_table(), v) - verdict_table().data());
}

bool is_failure(Verdict v) {
  const VerdictInfo* r = find_row(verdict_table(), v);
  return r == nullptr || r->fails_gate;
}

bool is_error_verdict(Verdict v) { return v == Verdict::error || v == Verdict::crash || v == Verdict::timeout; }

bool has_output(Verdict v) { return v != Verdict::declined && v != Verdict::not_run && !is_error_verdict(v); }

}  // namespace pacheck
