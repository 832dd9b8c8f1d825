// The properties every paged-attention decode kernel must satisfy, checked over generated cells and
// shrunk to a minimal counterexample. One function per property, one row per property in property_table();
// the same code runs under ctest (properties/test_properties.cpp, over the table x the kernel registry) and
// under `pacheck fuzz` (run_property).
//
// Quick start: adding a property
//  1. Write `void my_property(Property self, const KernelUnderTest& t)` in properties.cpp: draw a cell with
//     gen_cell (or gen_case), run the kernel through run_checked / run_kernel_once and judge, and call
//     fail(self, ...) with the cell and what does not hold. Wrap the body in guarded(self, ...) so kernel
//     errors become counterexamples.
//  2. Add its row {name, claim, my_property} to kProperties (property_table()) in the same file: the row
//     is the property (Property is a handle to it; parse_property("my-property") finds it by name).
//  3. Add its row to docs/PROPERTIES.md's table (tests/test_tables.cpp checks names and order).
//  `pacheck fuzz`, `pacheck list properties` and the ctest label `property` pick it up: every registered
//  CPU kernel that is not a negative control must then hold it, the MLA kernels too unless the row gives a
//  not_mla reason (then its body never sees an MLA case). A negative control or planted kernel that
//  fails it is one row, naming the property ("my-property"), in test_controls.hpp's expected catches.
#pragma once

#include <rapidcheck.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/backend.hpp"
#include "properties/generators.hpp"
#include "exec/runner.hpp"

namespace pacheck::prop {

struct KernelUnderTest;
struct PropertyInfo;

/// A property: a handle to its row of property_table(), which identifies it (there is no enum to extend).
/// Made from a row (implicitly) or by parse_property("tail-poison"); compares by row identity. Rows live
/// for the whole program, so a handle never dangles.
class Property {
 public:
  Property(const PropertyInfo& row) : row_(&row) {}  // implicit: a row of the table is its property
  const PropertyInfo& operator*() const { return *row_; }
  const PropertyInfo* operator->() const { return row_; }
  std::string_view name() const;  ///< the row's name ("tail-poison")
  friend bool operator==(Property a, Property b) { return a.row_ == b.row_; }

 private:
  const PropertyInfo* row_;
};

/// One row of property_table(): everything that defines a property.
struct PropertyInfo {
  std::string_view name;   ///< as `pacheck fuzz --property` and docs/PROPERTIES.md spell it ("tail-poison")
  std::string_view claim;  ///< what holds, in one line (`pacheck list properties`)
  /// One case of the property (check_once's body): draws a cell with RapidCheck's `*gen` and fails the case
  /// with a counterexample naming `self` when the property does not hold.
  void (*check)(Property self, const KernelUnderTest& t);
  /// Opt-in: a claim that honest designs need not meet (fault-classes.md section 9), run only when named
  /// (`pacheck fuzz --property NAME`, a test row that lists it); left out of default_properties() and of
  /// ctest's "every honest kernel holds every property".
  bool opt_in = false;
  /// Why the property does not apply to MLA decode kernels (Kernel::takes_mla), whose cases its transform does
  /// not fit (V is a prefix of the key row, one latent KV head, no attention variant but several query tokens).
  /// Empty: it applies, and runs on MLA cases for an MLA kernel (the generators draw them: gen_mla_case).
  std::string_view not_mla = {};
};
/// Every property, in issue order (the order `pacheck fuzz` runs them and docs/PROPERTIES.md lists them),
/// the opt-in ones last.
std::span<const PropertyInfo> property_table();

/// The property's name: "agreement", "tail-poison", "paging-invariance", ... (property_table()'s names).
std::string_view property_name(Property p);
/// The property whose row has the name `s`; throws std::invalid_argument("unknown property 'S' (expected
/// A, B or C)") listing property_table()'s names otherwise.
Property parse_property(std::string_view s);
/// Every property of property_table(), in its order.
const std::vector<Property>& all_properties();
/// The properties that are not opt-in, in property_table()'s order: what `pacheck fuzz` runs when no
/// --property is named, and what every honest kernel must hold.
const std::vector<Property>& default_properties();

/// True when property `p` applies to kernel `k`: every property to a multi-head kernel, to an MLA kernel
/// (Kernel::takes_mla) those whose row gives no not_mla reason.
bool applies(Property p, const Kernel& k);
/// Throws std::invalid_argument("property 'P' does not apply to K, an MLA decode kernel: REASON (those that do:
/// A, B, ...)") when !applies(p, k).
void check_applies(Property p, const Kernel& k);
/// The properties of default_properties() that apply to `k`: what `pacheck fuzz --kernel K` (and pacheck.fuzz)
/// runs when no property is named, and what an honest kernel must hold.
std::vector<Property> default_properties_for(const Kernel& k);

/// What a property runs against: the kernel, the backend its buffers live on, the runner options that
/// judge() uses (tolerance, oracle precision), and the case space probed from the kernel.
struct KernelUnderTest {
  KernelPtr kernel;
  std::string device;  ///< backend spec, e.g. "cpu", "cuda:0"
  std::shared_ptr<Backend> backend;
  RunOptions options;
  CaseSpace space;
  /// Host memory budget of one generated case, in bytes (`pacheck fuzz --max-memory`); 0 = none. A case
  /// whose estimate_case_memory (exec/prepare.hpp: under options' oracle precision and tolerance policy)
  /// exceeds it is discarded before anything of it is generated (RapidCheck's RC_DISCARD: not run, not a
  /// failure) and counted in PropertyRun::over_memory. Checked for the case a property draws and for the
  /// larger case some derive from it (gqa-expansion's MHA copy, paging-invariance's other pool).
  double max_case_bytes = 0;
};

/// Opens the backend for `kernel` (CPU kernels always run on "cpu"; a GPU kernel on `device`, or with ""
/// or "cpu" on the first device of its own kind, device_kind_spec: "cuda" or "hip") and probes its case
/// space. Throws std::invalid_argument / std::runtime_error for an unusable device or a
/// kernel that declines every probe.
KernelUnderTest make_target(KernelPtr kernel, const std::string& device = "", RunOptions options = {});

/// One case of property `p` against `t`. Draws its inputs with RapidCheck's `*gen`, so it must be called
/// inside a RapidCheck property (RC_GTEST_PROP body or run_property). Runs the kernel through the
/// runner's guards (prepare_case / run_kernel_once / judge, as `pacheck run`) and fails the case with a
/// counterexample message naming the case id, the cell id and the `pacheck repro` line.
void check_once(Property p, const KernelUnderTest& t);

/// A shrunk failure of a property.
struct Counterexample {
  Cell cell;            ///< the minimal cell (its fault is clean except for tail-poison)
  std::string what;     ///< why the property does not hold on it
  std::string repro;    ///< "pacheck repro '<cell id>' --kernel K [--device D] [--plugin LIB]"
  std::string message;  ///< the whole counterexample text (what, case and cell ids, repro, details)
};

/// How many cases, for how long, from which seed.
struct RunParams {
  std::uint64_t seed = 0;
  int cases = 100;            ///< cases per property (RapidCheck max_success), when budget_seconds is 0
  /// > 0: run chunks of cases with fresh seeds until this much wall time is used; a case that would start
  /// after it is skipped (not run, not counted), so a property overruns its share by at most one case, plus
  /// the shrinking of a failure.
  double budget_seconds = 0;
  int max_size = 100;         ///< RapidCheck max_size (0..100 scales the work bound and lengths)
  bool shrink = true;
  /// A reproduce string printed with an earlier failure (the text after RC_PARAMS' "reproduce="): replays
  /// that failure directly. Empty: RC_PARAMS' own reproduce entries, if any, apply.
  std::string reproduce;
};

/// Outcome of running one property.
struct PropertyRun {
  Property property;
  std::string kernel;
  bool passed = false;
  int cases = 0;  ///< cases that held (before the failing one, if any); not those a spent --budget skipped
  /// Of `cases`, those that checked something: a case that held vacuously (a kernel that implements no
  /// attention variant under neutral-variants, a GQA ratio of 1 under gqa-expansion) is not counted. A run
  /// that passed with 0 exercised cases showed nothing: `pacheck fuzz` reports it as `not exercised`.
  int exercised = 0;
  std::optional<Counterexample> counterexample;
  std::string message;  ///< RapidCheck's report when the run did not pass (failure, gave up, error)
  std::string reproduce;  ///< on failure: the string RunParams::reproduce (or RC_PARAMS="reproduce=...") replays
  int shrinks = 0;        ///< accepted shrink steps from the first failing case to the counterexample
  rc::detail::Distribution distribution;  ///< RC_TAG counts over the cases that held
  /// Generated cases discarded because their memory estimate exceeded KernelUnderTest::max_case_bytes (also
  /// while shrinking). RapidCheck gives up (passed false, `message` says so) when discards outnumber the
  /// cases that held by its max_discard_ratio (10).
  int over_memory = 0;
  /// Cases discarded because the kernel or the backend reported that the device ran out of memory (CUDA or
  /// HIP "out of memory", PyTorch's "CUDA out of memory"): too little free device memory, often taken by
  /// other processes, is not a fault of the kernel's results. Gives up like over_memory.
  int device_out_of_memory = 0;
  double seconds = 0;
};

/// Runs property `p` against `t` with RapidCheck under the test id "<property>/<kernel>" and returns the
/// shrunk counterexample when it fails, with the reproduce string that replays it. Prints nothing
/// (RapidCheck's own listener is replaced, so expected failures in tests leave no exit message). Throws
/// std::invalid_argument (check_applies) when `p` does not apply to the kernel.
PropertyRun run_property(Property p, const KernelUnderTest& t, const RunParams& params);

/// "straddling 61%, GQA>1 74%, multi-partition 9%, scale set 25%" from RC_TAG counts, then ", TAG N%" for each further tag a
/// property adds (in name order); empty when there are none.
std::string tag_summary(const rc::detail::Distribution& d);

}  // namespace pacheck::prop
