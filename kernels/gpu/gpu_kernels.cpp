// The GPU kernels as pacheck::Kernel objects: what each supports (declining with the field that is out of
// range), and run() -> launcher -> KernelError on failure. The launchers live in the .cu files. The same
// kernels, under the same names, are CUDA kernels in an nvcc build and HIP kernels in a hipcc build.
#include <algorithm>
#include <memory>
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

/// Checks shared by every GPU kernel: dtypes, head sizes, the layout the kernel reads. q/KV/out share one
/// dtype in {f32,f16,bf16}; kernels that read fp8 caches (`fp8_kv`: gpu.paged_v1/v2, the tail-fault twin
/// and gpu.warp_split/_gqa, all of them today) also take an fp8 KV dtype with q == out in {bf16,f16}.
/// A kernel without fp8_kv would decline fp8 naming itself.
Support common_support(const Case& c, Layout layout, const std::string& name, bool fp8_kv = false) {
  if (c.layout != layout)
    return Support::no("layout " + std::string(layout_name(c.layout)) + " not supported: " + name + " reads " +
                       std::string(layout_name(layout)));
  if (is_fp8(c.kv_dtype)) {
    if (!fp8_kv)
      return Support::no("kv_dtype " + std::string(dtype_name(c.kv_dtype)) + " not in {f32,f16,bf16}: " + name +
                         " reads no fp8 cache");
    if (c.q_dtype != c.out_dtype || (c.q_dtype != DType::bf16 && c.q_dtype != DType::f16))
      return Support::no(dtype_list(c) + ": with an fp8 KV cache q_dtype and out_dtype must be equal and bf16 or f16");
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

Support paged_block_support(const Case& c) {
  const int b = c.block_size;
  if (b < 8 || b > 256 || (b & (b - 1)) != 0)
    return Support::no("block_size " + std::to_string(b) + " not in {8,16,32,64,128,256}");
  if (is_fp8(c.kv_dtype) && b < 16)
    return Support::no("block_size " + std::to_string(b) + " with kv_dtype " + std::string(dtype_name(c.kv_dtype)) +
                       ": fp8 needs block_size >= 16 (one 16-byte V vector spans 16 tokens)");
  return Support::yes();
}

void throw_on(const gpu::LaunchResult& r) {
  if (!r.ok()) throw KernelError(r.error, r.fatal);
}

/// gpu.paged_v1 and its planted-fault twin gpu.paged_v1_tail_fault.
class PagedV1 final : public Kernel {
 public:
  explicit PagedV1(bool zero_v_tail) : zero_(zero_v_tail) {}
  std::string name() const override { return zero_ ? "gpu.paged_v1" : "gpu.paged_v1_tail_fault"; }
  std::string description() const override {
    return zero_ ? "vLLM paged_attention_v1 design: block per (seq, head), x-packed K 16-byte loads, logits in "
                   "shared memory, V in 16-byte token vectors with the straddling vector zeroed past seq_len; fp8 caches "
                   "decoded after the loads"
                 : "negative control: gpu.paged_v1 without zeroing the straddling V vector (vLLM issue 641): "
                   "NaN/Inf in the final block's V tail reaches P.V as 0 * NaN";
  }
  pacheck_device device() const override { return gpu::kGpuDevice; }
  Support supports(const Case& c) const override {
    if (Support s = common_support(c, Layout::vllm, name(), true); !s.ok) return s;
    if (Support s = paged_block_support(c); !s.ok) return s;
    int longest_blocks = 0;
    for (int i = 0; i < c.num_seqs(); ++i) longest_blocks = std::max(longest_blocks, c.blocks_for(i));
    // The launch bounds the context by the block table's width (seq_lens live on the device).
    const long bound = static_cast<long>(longest_blocks + c.padding_columns) * c.block_size;
    const int cap = gpu::paged_v1_max_tokens(c.head_size);
    if (bound > cap)
      return Support::no("seq_lens: context bound " + std::to_string(bound) + " tokens (block_tables width x block_size) "
                         "exceeds the " + std::to_string(cap) + " logits gpu.paged_v1 holds in shared memory");
    return Support::yes();
  }
  std::vector<Layout> layouts() const override { return {Layout::vllm}; }
  void run(const pacheck_kernel_args& a) const override { throw_on(gpu::launch_paged_attention(a, 0, zero_)); }
  std::optional<std::function<bool(const Cell&)>> expected_failures() const override {
    if (zero_) return std::nullopt;
    return std::function<bool(const Cell&)>(poisons_v_tail);
  }

 private:
  bool zero_;
};

class PagedV2 final : public Kernel {
 public:
  std::string name() const override { return "gpu.paged_v2"; }
  std::string description() const override {
    return "vLLM paged_attention_v2 design (split-KV): 512-token partitions write partial out, max logit and exp "
           "sum; a second kernel merges them; vllm layout; fp8 caches decoded after the loads";
  }
  pacheck_device device() const override { return gpu::kGpuDevice; }
  Support supports(const Case& c) const override {
    if (Support s = common_support(c, Layout::vllm, name(), true); !s.ok) return s;
    return paged_block_support(c);
  }
  std::vector<Layout> layouts() const override { return {Layout::vllm}; }
  void run(const pacheck_kernel_args& a) const override {
    throw_on(gpu::launch_paged_attention(a, gpu::kPagedV2PartitionSize, true));
  }
};

/// gpu.warp_split and gpu.warp_split_gqa.
class WarpSplit final : public Kernel {
 public:
  explicit WarpSplit(bool gqa) : gqa_(gqa) {}
  std::string name() const override { return gqa_ ? "gpu.warp_split_gqa" : "gpu.warp_split"; }
  std::string description() const override {
    return gqa_ ? "FlashDecoding-style split-KV, nhd: per-warp online softmax in registers, each K/V row loaded "
                  "once for a tile of up to 8 query heads of its GQA group; partitions merged by a second kernel; "
                  "fp8 caches decoded after the loads"
                : "FlashDecoding-style split-KV, nhd: block per (seq, query head, partition), warps stride over "
                  "keys with an online softmax in registers, merged through shared memory and a second kernel; fp8 "
                  "caches decoded after the loads";
  }
  pacheck_device device() const override { return gpu::kGpuDevice; }
  Support supports(const Case& c) const override {
    if (Support s = common_support(c, Layout::nhd, name(), true); !s.ok) return s;
    if (c.block_size < 1) return Support::no("block_size " + std::to_string(c.block_size) + " must be positive");
    return Support::yes();
  }
  std::vector<Layout> layouts() const override { return {Layout::nhd}; }
  void run(const pacheck_kernel_args& a) const override { throw_on(gpu::launch_warp_split(a, gqa_)); }

 private:
  bool gqa_;
};

}  // namespace

void register_gpu_kernels(Registry& r) {
  r.add(std::make_shared<PagedV1>(true));
  r.add(std::make_shared<PagedV1>(false));
  r.add(std::make_shared<PagedV2>());
  r.add(std::make_shared<WarpSplit>(false));
  r.add(std::make_shared<WarpSplit>(true));
}

}  // namespace pacheck
