// The registration table of the GPU kernels: one row per kernel (name, description, the layouts it reads,
// whether it reads per-slot fp8 scale tables, its support checks beyond the common ones, its launcher), each
// registered as a GpuKernel: supports() declines with the field that is out of range, run() -> launcher ->
// KernelError on failure. The launchers live in the .cu files (launch.hpp). The same kernels, under the same names, are CUDA kernels in an nvcc build and
// HIP kernels in a hipcc build.
#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "faults/inject.hpp"
#include "kernels/gpu/launch.hpp"
#include "kernels/kernel.hpp"

namespace pacheck {
namespace {

std::string dtype_list(const Case& c) {
  return "q_dtype " + std::string(dtype_name(c.q_dtype)) + ", kv_dtype " + std::string(dtype_name(c.kv_dtype)) +
         ", out_dtype " + std::string(dtype_name(c.out_dtype));
}

/// "vllm, aiter": the layouts a kernel reads, for decline reasons.
std::string layout_list(const std::vector<Layout>& layouts) {
  std::string out;
  for (Layout l : layouts) out += (out.empty() ? "" : ", ") + std::string(layout_name(l));
  return out;
}

/// Checks shared by every GPU kernel: dtypes, head sizes, the layouts the kernel reads. q/KV/out share one
/// dtype in {f32,f16,bf16}; kernels that read fp8 caches (`fp8_kv`: gpu.paged_v1/v2, their controls and
/// gpu.warp_split/_gqa, all of them today) also take an fp8 KV dtype with q == out in {bf16,f16}, with
/// per-tensor and per-KV-head scales, and per-slot scale tables where `per_slot` (the paged kernels but
/// half_products). A kernel without fp8_kv would decline fp8 naming itself.
Support common_support(const Case& c, const std::vector<Layout>& layouts, const std::string& name, bool fp8_kv,
                       bool per_slot) {
  if (std::find(layouts.begin(), layouts.end(), c.layout) == layouts.end())
    return Support::no("layout " + std::string(layout_name(c.layout)) + " not supported: " + name + " reads " +
                       layout_list(layouts));
  if (is_fp8(c.kv_dtype)) {
    if (!fp8_kv)
      return Support::no("kv_dtype " + std::string(dtype_name(c.kv_dtype)) + " not in {f32,f16,bf16}: " + name +
                         " reads no fp8 cache");
    if (c.q_dtype != c.out_dtype || (c.q_dtype != DType::bf16 && c.q_dtype != DType::f16))
      return Support::no(dtype_list(c) + ": with an fp8 KV cache q_dtype and out_dtype must be equal and bf16 or f16");
    for (auto [field, s] : {std::pair{"k_scale", &c.k_scale}, std::pair{"v_scale", &c.v_scale}})
      if (s->per_slot() && !per_slot)
        return Support::no(std::string(field) + " " + s->text() + ": per-slot scale tables; " + name +
                           " reads per-tensor and per-KV-head scales");
  } else {
    if (c.kv_dtype != DType::f32 && c.kv_dtype != DType::f16 && c.kv_dtype != DType::bf16)
      return Support::no("kv_dtype " + std::string(dtype_name(c.kv_dtype)) + " not in {f32,f16,bf16}");
    if (c.q_dtype != c.kv_dtype || c.out_dtype != c.kv_dtype)
      return Support::no(dtype_list(c) + ": mixed dtypes not supported (all three must match)");
  }
  if (c.head_size != 64 && c.head_size != 128 && c.head_size != 256)
    return Support::no("head_size " + std::to_string(c.head_size) + " not in {64,128,256}");
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0)
    return Support::no("num_heads " + std::to_string(c.num_heads) + " is not a multiple of num_kv_heads " +
                       std::to_string(c.num_kv_heads));
  return Support::yes();
}

/// Checks beyond common_support of the kernels that read the vllm and aiter layouts: a power-of-two
/// block_size in 8..256, at least 16 with an fp8 cache or the aiter layout (its V groups 16 slots).
Support paged_block_support(const Case& c) {
  const int b = c.block_size;
  if (b < 8 || b > 256 || (b & (b - 1)) != 0)
    return Support::no("block_size " + std::to_string(b) + " not in {8,16,32,64,128,256}");
  if (is_fp8(c.kv_dtype) && b < 16)
    return Support::no("block_size " + std::to_string(b) + " with kv_dtype " + std::string(dtype_name(c.kv_dtype)) +
                       ": fp8 needs block_size >= 16 (one 16-byte V vector spans 16 tokens)");
  if (c.layout == Layout::aiter && b % 16 != 0)
    return Support::no("block_size " + std::to_string(b) + " with layout aiter: its V groups 16 slots");
  return Support::yes();
}

/// gpu.paged_v1 and its twin: paged_block_support, and the longest context bounded by the logits shared
/// memory holds (the launch bounds the context by the block table's width: seq_lens live on the device).
Support paged_v1_support(const Case& c) {
  if (Support s = paged_block_support(c); !s.ok) return s;
  int longest_blocks = 0;
  for (int i = 0; i < c.num_seqs(); ++i) longest_blocks = std::max(longest_blocks, c.blocks_for(i));
  const long bound = static_cast<long>(longest_blocks + c.padding_columns) * c.block_size;
  const int cap = gpu::paged_v1_max_tokens(c.head_size);
  if (bound > cap)
    return Support::no("seq_lens: context bound " + std::to_string(bound) + " tokens (block_tables width x block_size) "
                       "exceeds the " + std::to_string(cap) + " logits gpu.paged_v1 holds in shared memory");
  return Support::yes();
}

/// The warp-split kernels read each nhd token as its own row: any positive block_size.
Support positive_block_size(const Case& c) {
  if (c.block_size < 1) return Support::no("block_size " + std::to_string(c.block_size) + " must be positive");
  return Support::yes();
}

/// One built-in GPU kernel: a row of kGpuKernels.
struct GpuKernelRow {
  const char* name;         ///< registry name, "gpu.<design>"
  const char* description;  ///< one line: the design the kernel follows (`pacheck list kernels`)
  std::vector<Layout> layouts;  ///< the KV layouts the kernel reads, preferred first (Kernel::layouts)
  bool fp8_kv;              ///< also reads fp8 KV caches (common_support)
  bool per_slot = false;    ///< also reads per-slot fp8 scale tables (PACHECK_SCALE_FORM_PER_SLOT)
  /// Checks beyond common_support (block sizes, context bounds); the reason names the field.
  Support (*supports)(const Case& c);
  /// The kernel's host launcher (launch.hpp, defined in its .cu file).
  gpu::LaunchResult (*launch)(const pacheck_kernel_args& a);
  /// Negative controls only: the cells the planted fault must fail (Kernel::expected_failures).
  bool (*expected_failure)(const Cell& cell) = nullptr;
  /// The attention variants the kernel implements (PACHECK_VARIANT_* bits); a cell needing another is
  /// declined naming its field (variant_decline). The paged v1 kernels take all four (paged_attention.cu),
  /// gpu.paged_v2 the soft cap and ALiBi (its split-KV merge has no window or sink), the warp-split kernels
  /// none yet (issue 19).
  unsigned variants = 0;
};

/// The launchers of the rows below: vLLM-style paged attention with partitions of `kPartition` tokens (0: one
/// per sequence, v1), the V tail zeroed or not (the planted fault), half2 products, and per-slot V scales
/// applied after the masking (the planted fault of gpu.slot_scale_unmasked); the warp-split kernels,
/// GQA-fused or not.
template <int kPartition, bool kZeroVTail, bool kHalfProducts = false, bool kScaleUnmasked = false>
gpu::LaunchResult paged_attention(const pacheck_kernel_args& a) {
  return gpu::launch_paged_attention(a, kPartition, kZeroVTail, kHalfProducts, kScaleUnmasked);
}
template <bool kGqaFused>
gpu::LaunchResult warp_split(const pacheck_kernel_args& a) {
  return gpu::launch_warp_split(a, kGqaFused);
}

/// The attention variants of the paged v1 kernels: window, soft cap, ALiBi and sinks (paged_attention.cu).
constexpr unsigned kPagedV1Variants =
    PACHECK_VARIANT_SLIDING_WINDOW | PACHECK_VARIANT_SOFT_CAP | PACHECK_VARIANT_ALIBI | PACHECK_VARIANT_SINKS;

/// The built-in GPU kernels, in registration (and report) order. A new kernel: its .cu file with a launcher
/// declared in launch.hpp, and one row here; the tests in tests/test_gpu_kernels.cpp iterate the registry.
/// A function-local table: its rows hold a std::vector, so it is built on first use rather than during
/// static initialisation, when another file's static initialiser (GoogleTest's INSTANTIATE lists, through
/// Registry::global()) may already ask for it.
std::span<const GpuKernelRow> gpu_kernel_rows() {
  static const GpuKernelRow kGpuKernels[] = {
    {.name = "gpu.paged_v1",
     .description = "vLLM paged_attention_v1 design: block per (seq, head), x-packed K 16-byte loads, logits in "
                    "shared memory, V in 16-byte token vectors with the straddling vector zeroed past seq_len; vllm "
                    "and aiter (shuffled V) layouts; fp8 caches decoded after the loads, per-slot scales read only "
                    "for slots before seq_len",
     .layouts = {Layout::vllm, Layout::aiter}, .fp8_kv = true, .per_slot = true, .supports = paged_v1_support,
     .launch = paged_attention<0, true>, .variants = kPagedV1Variants},
    {.name = "gpu.paged_v1_tail_fault",
     .description = "negative control: gpu.paged_v1 without zeroing the straddling V vector (vLLM issue 641): "
                    "NaN/Inf in the final block's V tail (or its per-slot V scale entries) reaches P.V as 0 * NaN",
     .layouts = {Layout::vllm, Layout::aiter}, .fp8_kv = true, .per_slot = true, .supports = paged_v1_support,
     .launch = paged_attention<0, false>, .expected_failure = poisons_v_tail_or_window, .variants = kPagedV1Variants},
    {.name = "gpu.slot_scale_unmasked",
     .description = "negative control: gpu.paged_v1 that zeroes the straddling V vector's codes past seq_len but "
                    "applies every slot's per-slot V scale entry (seed 002, AITER's tables), masked or not: a NaN/Inf "
                    "entry of an unwritten slot reaches P.V as 0 * NaN",
     .layouts = {Layout::vllm, Layout::aiter}, .fp8_kv = true, .per_slot = true, .supports = paged_v1_support,
     .launch = paged_attention<0, true, false, true>, .expected_failure = poisons_v_slot_scale_tail,
     .variants = kPagedV1Variants},
    {.name = "gpu.paged_v1_half_products",
     .description = "gpu.paged_v1 with vLLM's half2 P.V: each probability and each p x v product rounded to the "
                    "16-bit dtype, summed in fp32 (an honest design the checks must accept)",
     .layouts = {Layout::vllm}, .fp8_kv = true, .supports = paged_v1_support, .launch = paged_attention<0, true, true>,
     .variants = kPagedV1Variants},
    {.name = "gpu.paged_v2",
     .description = "vLLM paged_attention_v2 design (split-KV): 512-token partitions write partial out, max logit "
                    "and exp sum; a second kernel merges them; vllm and aiter layouts; fp8 caches decoded after the "
                    "loads, per-slot scales read only for slots before seq_len",
     .layouts = {Layout::vllm, Layout::aiter}, .fp8_kv = true, .per_slot = true, .supports = paged_block_support,
     .launch = paged_attention<gpu::kPagedV2PartitionSize, true>,
     .variants = PACHECK_VARIANT_SOFT_CAP | PACHECK_VARIANT_ALIBI},
    {.name = "gpu.warp_split",
     .description = "FlashDecoding-style split-KV, nhd: block per (seq, query head, partition), warps stride over "
                    "keys with an online softmax in registers, merged through shared memory and a second kernel; "
                    "fp8 caches decoded after the loads",
     .layouts = {Layout::nhd}, .fp8_kv = true, .supports = positive_block_size, .launch = warp_split<false>},
    {.name = "gpu.warp_split_gqa",
     .description = "FlashDecoding-style split-KV, nhd: per-warp online softmax in registers, each K/V row loaded "
                    "once for a tile of up to 8 query heads of its GQA group; partitions merged by a second kernel; "
                    "fp8 caches decoded after the loads",
     .layouts = {Layout::nhd}, .fp8_kv = true, .supports = positive_block_size, .launch = warp_split<true>},
  };
  return kGpuKernels;
}

/// A row of kGpuKernels as a pacheck::Kernel: common_support then the row's checks; run() launches and turns
/// a failed LaunchResult into a KernelError (fatal when the device context is lost).
class GpuKernel final : public Kernel {
 public:
  explicit GpuKernel(const GpuKernelRow& row) : row_(row) {}
  std::string name() const override { return row_.name; }
  std::string description() const override { return row_.description; }
  pacheck_device device() const override { return gpu::kGpuDevice; }
  Support supports(const Case& c) const override {
    if (Support s = common_support(c, row_.layouts, name(), row_.fp8_kv, row_.per_slot); !s.ok) return s;
    if (auto no = variant_decline(c, row_.variants, name())) return *no;
    return row_.supports(c);
  }
  unsigned variants() const override { return row_.variants; }
  std::vector<Layout> layouts() const override { return row_.layouts; }
  void run(const pacheck_kernel_args& a) const override {
    const gpu::LaunchResult r = row_.launch(a);
    if (!r.ok()) throw KernelError(r.error, r.fatal);
  }
  std::optional<std::function<bool(const Cell&)>> expected_failures() const override {
    if (!row_.expected_failure) return std::nullopt;
    return std::function<bool(const Cell&)>(row_.expected_failure);
  }

 private:
  const GpuKernelRow& row_;
};

}  // namespace

void register_gpu_kernels(Registry& r) {
  for (const GpuKernelRow& row : gpu_kernel_rows()) r.add(std::make_shared<GpuKernel>(row));
}

}  // namespace pacheck
