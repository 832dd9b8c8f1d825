// The kernel interface: what a paged-attention decode kernel under test declares and how it is called.
//
// Quick start: adding a kernel.
//  - CPU: create kernels/cpu/NAME.cpp with a Kernel subclass (derive cpu::CpuKernel, kernels/cpu/cpu_common.hpp)
//    and a factory `KernelPtr make_cpu_NAME()`; declare the factory and add its row `r.add(make_cpu_NAME());`
//    in kernels/cpu/cpu_kernels.cpp. CMake picks the file up (glob).
//  - GPU: create kernels/gpu/NAME.cu with the device code and a host launcher
//    `LaunchResult launch_NAME(const pacheck_kernel_args&)`, declared in kernels/gpu/launch.hpp; add one row
//    to kGpuKernels in kernels/gpu/gpu_kernels.cpp (name, description, layout, extra support checks, the
//    launcher). The CUDA library and the HIP objects both build every kernels/gpu/*.cu (glob).
//  - Plugin (out of tree, C ABI include/pacheck/kernel_abi.h): a shared library exporting
//    pacheck_register_kernels (examples/plugin/ is the template), run with `pacheck run --plugin LIB`.
//  A negative control (a kernel with a planted fault) also returns, from expected_failures(), the cells it
//  must fail. The tests then cover a built-in kernel without being edited: tests/test_cpu_kernels.cpp and
//  tests/test_gpu_kernels.cpp take their parameter lists from Registry::global() (by device and by
//  is_negative_control()) and check that an honest kernel agrees with the oracle and is bitwise invariant
//  under tail poison, and that a negative control fails exactly its expected_failures() cells; `pacheck
//  run`, `fuzz` and `bench` find it by name.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <string>
#include <string_view>
#include <vector>

#include "core/case.hpp"
#include "core/case_fields.hpp"
#include "core/cell.hpp"
#include "faults/inject.hpp"
#include "pacheck/kernel_abi.h"

namespace pacheck {

struct CellKinds;  // suites/suite.hpp

/// Answer to "can you run this case?": ok, declined with a reason naming the unsupported field, or failed:
/// the kernel could not answer (a plugin's supports() returned PACHECK_ERROR or an unknown status, or
/// threw), which makes the cell `error` -- a failing check must not pass as a quiet decline.
struct Support {
  bool ok = true;
  std::string reason;
  bool failed = false;  ///< !ok because the question itself failed: verdict error, not declined
  static Support yes() { return {}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
  static Support error(std::string why) { return {false, std::move(why), true}; }
};

/// A kernel failed while running (bad launch, device error, plugin returned PACHECK_ERROR).
/// `fatal` means the device context is unusable (e.g. an illegal address on CUDA): stop the kernel's cells.
struct KernelError : std::runtime_error {
  explicit KernelError(const std::string& what, bool fatal_ = false) : std::runtime_error(what), fatal(fatal_) {}
  bool fatal;
};

/// A paged-attention decode kernel under test. Implementations must be stateless between calls
/// (`run` is const and may be called from several threads for CPU kernels).
class Kernel {
 public:
  virtual ~Kernel() = default;
  /// Registry name, e.g. "cpu.reference", "gpu.paged_v1".
  virtual std::string name() const = 0;
  /// One-line description of the design the kernel models.
  virtual std::string description() const = 0;
  virtual pacheck_device device() const = 0;
  /// Whether the kernel runs case `c` (layouts, dtypes, head sizes, block sizes, GQA ratios); the reason
  /// names the field when it declines.
  virtual Support supports(const Case& c) const = 0;
  /// The attention variants the kernel implements, PACHECK_VARIANT_* bits (include/pacheck/kernel_abi.h).
  /// Informational for `list kernels` and tests: each kernel's supports() declines a case whose variant it
  /// does not implement, naming the field (variant_decline() words it).
  virtual unsigned variants() const { return 0; }
  /// Layouts the kernel reads, preferred first. Suite cells that do not pin a layout ("native") run in
  /// the first one.
  virtual std::vector<Layout> layouts() const { return {Layout::vllm, Layout::nhd, Layout::hnd, Layout::aiter}; }
  /// Runs one decode call. Pointers in `args` live on the kernel's device. Throws KernelError on failure.
  virtual void run(const pacheck_kernel_args& args) const = 0;
  /// Runs the call of case `c` (the cell pipeline's entry, exec/guarded_run.cpp): run(args) for a multi-head
  /// kernel; an MLA kernel (takes_mla) also needs the latent shape, which `args` does not carry.
  virtual void run_case(const pacheck_kernel_args& args, const Case& c) const {
    (void)c;
    run(args);
  }
  /// True for an MLA decode kernel (kernels/mla_kernel.hpp's as_kernel): it reads a latent cache and runs MLA
  /// cases (Case::is_mla) only; every other kernel runs multi-head cases only (cell_support).
  virtual bool takes_mla() const { return false; }
  /// True when a sequence's output does not depend on the other sequences of its batch (bitwise).
  virtual bool batch_invariant() const { return true; }
  /// True when the kernel's dot products read f32 operands as TF32 (10 explicit mantissa bits, as tensor
  /// cores and Triton's default fp32 `tl.dot` do): its cells with f32 output are judged against
  /// tf32_limit() (judge/comparator.hpp) instead of the fp32 limit. Plugins declare it with
  /// PACHECK_KERNEL_TF32; `--tf32` declares it for every kernel of a run.
  virtual bool tf32_products() const { return false; }
  /// For negative controls (kernels with a planted fault): true for the cells the kernel must fail.
  /// A run in which such a cell passes is "instrument blind". Empty for ordinary kernels. The predicate may be
  /// called from several threads at once (the planner asks it for every cell on the run's worker threads).
  virtual std::optional<std::function<bool(const Cell&)>> expected_failures() const { return std::nullopt; }
  bool is_negative_control() const { return expected_failures().has_value(); }
  /// For negative controls whose planted fault is state kept from one call to the next (an output replayed
  /// for the same buffer addresses, a running max kept in scratch; fault-classes.md section 7): true for the
  /// cells it must fail when `before` holds, oldest first, the case of each of its earlier cells on the same
  /// buffers (its cells before this one in their chain on one worker, exec/plan.hpp: cells of earlier cases,
  /// then the earlier cells of this cell's own case; empty for the first). Such a control's
  /// expected_failures() names only the cells it fails whatever came before. Empty (the default) for every
  /// other kernel.
  using HistoryPredicate = std::function<bool(const Cell& cell, const std::vector<const Case*>& before)>;
  virtual std::optional<HistoryPredicate> expected_failures_after() const { return std::nullopt; }
  /// True for a control whose expected failures depend on the calls before (expected_failures_after()).
  bool history_dependent() const { return expected_failures_after().has_value(); }
};

using KernelPtr = std::shared_ptr<const Kernel>;

/// The longest kernel name pacheck takes (plugin descriptors, `score --kernel-name`).
inline constexpr std::size_t kMaxKernelNameLength = 64;
/// The rule every kernel name from outside follows (a plugin's descriptor, `score --kernel-name`): 1 to
/// kMaxKernelNameLength characters, each a letter, digit, '.', '_' or '-' (a name goes into ids, reports,
/// file names and one-line logs). Returns why `name` breaks it ("name is empty", "name 'a b' has character
/// ' ' (allowed: ...)"), or "" when it follows it. Non-printable characters are named by their code.
std::string kernel_name_problem(std::string_view name);

/// A decline for the first variant of `c` (core/case_fields.hpp's case_variants, in table order) not in
/// `implemented` (PACHECK_VARIANT_* bits), naming the field ("sliding_window 128: KERNEL does not implement a
/// sliding window"), or nullopt when every one is.
std::optional<Support> variant_decline(const Case& c, unsigned implemented, const std::string& kernel);

/// Whether `k` runs case `c`: declined, naming kv_lora_rank, when the case's kind (MLA or multi-head) is not
/// the kernel's (Kernel::takes_mla: a plugin or a multi-head kernel never sees an MLA cell, an MLA kernel never
/// a multi-head one), else k.supports(c). Every caller that asks a kernel about a cell asks through this.
Support cell_support(const Kernel& k, const Case& c);

/// Whether runs and cell lists pair kernel `k` with case `c` of a suite whose cells are of `kinds`
/// (suites/suite.hpp's cell_kinds): a case of the kernel's own kind always; one of the other kind only when the
/// suite has none of the kernel's kind (so a mixed suite such as gate gives each kernel its own kind's cells,
/// and a suite of one kind run on a kernel of the other reports each cell declined by cell_support).
bool pairs_with(const Kernel& k, const Case& c, const CellKinds& kinds);

/// The built-in kernels and those added at run time (plugins). Names are unique.
class Registry {
 public:
  /// The process-wide registry with every built-in kernel of this build (CPU, and GPU when built), the MLA
  /// kernels (cpu_mla_kernels, gpu_mla_kernels) among them through as_kernel.
  static Registry& global();
  /// Adds a kernel; throws std::invalid_argument if the name is taken.
  void add(KernelPtr k);
  /// The kernel named `name`, or nullptr.
  KernelPtr find(const std::string& name) const;
  const std::vector<KernelPtr>& all() const { return kernels_; }
  /// The negative controls (Kernel::is_negative_control) of device `device`, in registration order: what
  /// selftest, `run --with-controls` and the GoogleTest instrument check run to show the checks can fail.
  std::vector<KernelPtr> negative_controls(pacheck_device device) const;

 private:
  std::vector<KernelPtr> kernels_;
};

/// Registers the CPU kernels (kernels/cpu) into `r`.
void register_cpu_kernels(Registry& r);
/// Registers the GPU kernels (kernels/gpu) into `r`; a no-op in builds without CUDA.
void register_gpu_kernels(Registry& r);

/// A CPU split-KV kernel with partitions of `partition` tokens (registered as cpu.split_kv at 512); with
/// `partials_in_out_dtype` each partition's normalised output is stored in the output dtype before the
/// merge, as vLLM's paged_attention_v2 stores tmp_out (registered as cpu.split_kv_tmp_out at 512).
KernelPtr make_cpu_split_kv(int partition, bool partials_in_out_dtype = false);
/// cpu.reference given fp8 scales with fault `f` applied: a negative control that must fail the fp8 cells
/// where `f` changes some head's scale by 25% or more (registered as cpu.fp8_scale_fault with the last
/// head's K and V scales set to 1).
KernelPtr make_cpu_scale_fault(std::string name, const ScaleFault& f);

/// Writes every scalar field of case `c` that the ABI struct (pacheck_kernel_args or pacheck_case_info)
/// carries, as the case field table's abi column gives them (core/case_fields.cpp; write_case_abi): num_seqs,
/// num_heads, num_kv_heads, head_size, block_size, layout, q/kv/out dtype, max_seq_len, scale, the case
/// info's scale forms and per-tensor scales, sliding_window, logits_soft_cap, has_alibi / has_sinks,
/// max_query_len, num_query_tokens. Pointers and what the paged cache holds are the caller's.
template <class Abi>
void set_case_fields(Abi& a, const Case& c) {
  static_assert(std::is_same_v<Abi, pacheck_kernel_args> || std::is_same_v<Abi, pacheck_case_info>);
  AbiWriter w(std::is_same_v<Abi, pacheck_kernel_args> ? AbiStruct::kernel_args : AbiStruct::case_info, &a);
  write_case_abi(c, w);
}

/// Fills the ABI argument struct for case `c` and cache `pc` with the given buffer pointers (which live on
/// the kernel's device). Strides are those of the contiguous layouts the pager writes.
/// Dequantisation scales come from `pc`: a per-tensor scale goes into k_scale / v_scale; a per-head one
/// needs the device copy of pc.k_scales / pc.v_scales ([num_kv_heads] fp32) in k_scales_per_head /
/// v_scales_per_head, and then k_scale / v_scale are NaN, so a kernel that reads the scalar instead of
/// the array it was given produces NaN rather than a plausible wrong answer. Throws std::invalid_argument
/// when `pc` has per-head scales and the matching pointer is null. ABI v2 fields: max_seq_len and
/// seq_lens_host (= pc.seq_lens, host memory that must outlive the call) come from `pc`; max_query_len and
/// num_query_tokens from `c` (Case::query_lens), and with several query tokens in some sequence
/// `query_start_loc` (the device copy of pc.query_start_loc, [num_seqs + 1] int32) and query_start_loc_host
/// = pc.query_start_loc.data() (std::invalid_argument when either is missing); NULL both for plain decode.
/// q_stride_seq / out_stride_seq are the stride of one query row. The attention variants come from `c`: sliding_window and logits_soft_cap (0 = none), and
/// `alibi_slopes` / `sinks`, the device copies of c.alibi_slopes.resolve(num_heads) / c.sinks.resolve(...)
/// ([num_heads] fp32), passed only when the case has them (NULL otherwise; std::invalid_argument when the
/// case has them and the pointer is null). Per-slot fp8 scales (version 3): `k_scales_per_slot` /
/// `v_scales_per_slot`, the device copies of pc.k_slot_scales / v_slot_scales, required when the cache has
/// them (std::invalid_argument otherwise); the scalar k_scale / v_scale is then NaN.
pacheck_kernel_args make_args(const Case& c, const PagedCache& pc, const void* query, const void* key_cache,
                              const void* value_cache, const std::int32_t* block_tables,
                              const std::int32_t* seq_lens, void* out, const float* k_scales_per_head = nullptr,
                              const float* v_scales_per_head = nullptr, const float* alibi_slopes = nullptr,
                              const float* sinks = nullptr, const std::int32_t* query_start_loc = nullptr,
                              const float* k_scales_per_slot = nullptr, const float* v_scales_per_slot = nullptr);

}  // namespace pacheck
