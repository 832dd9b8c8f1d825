// MLA decode kernels: the interface of a kernel that reads a paged latent cache (core/mla.hpp), the call's
// arguments, and the built-in CPU and GPU MLA kernels.
//
// An MLA call is a pacheck_kernel_args describing the latent cache as an nhd cache of one KV head, plus its
// MlaDims. The CPU kernels (kernels/cpu/mla_*.cpp, listed in kernels/cpu/mla_kernels.cpp) and the GPU ones
// (kernels/gpu/mla_decode.cu, kernels/gpu/mla_kernels.cpp) implement MlaKernel; tests/test_mla.cpp and
// tests/test_gpu_mla.cpp run every one of them over the MLA cells, honest kernels expecting a pass and negative
// controls failing exactly their expected_failures() cells.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/mla.hpp"
#include "kernels/kernel.hpp"

namespace pacheck {

/// The MLA dimensions of one decode call, beside its pacheck_kernel_args. Those describe the latent cache as an
/// nhd cache of one KV head: num_kv_heads 1, head_size = the row (kv_lora_rank + qk_rope_head_dim, also the width
/// of each query head's row), key_cache == value_cache with equal strides ([num_blocks, block_size, 1, row]),
/// k_scale == v_scale (an fp8 cache's per-tensor scale; 1 otherwise); query [num_query_tokens, num_heads, row]
/// and out [num_query_tokens, num_heads, v_head_size] (out_stride_head = v_head_size).
struct MlaDims {
  int kv_lora_rank = 0;  ///< latent values at the start of each row; the rope part is [kv_lora_rank, head_size)
  int v_head_size = 0;   ///< output values per head: the first v_head_size values of each row are V
};
inline MlaDims mla_dims(const MlaShape& m) { return {m.kv_lora_rank, m.v_head_dim}; }

/// A paged MLA decode kernel under test: stateless between calls, `run` callable from several threads (CPU).
class MlaKernel {
 public:
  virtual ~MlaKernel() = default;
  /// Registry-style name: "cpu.mla_reference", "gpu.mla_decode".
  virtual std::string name() const = 0;
  /// One line: the design the kernel models, or the fault it plants.
  virtual std::string description() const = 0;
  virtual pacheck_device device() const = 0;
  /// Whether the kernel runs `mc`; the reason names the field when it declines.
  virtual Support supports(const MlaCase& mc) const {
    (void)mc;
    return Support::yes();
  }
  /// One MLA decode call (pointers on the kernel's device). Throws KernelError on failure.
  virtual void run(const pacheck_kernel_args& a, const MlaDims& d) const = 0;
  /// Negative controls: true for the cells the planted fault must fail (judged as `pacheck run` judges: NaN/Inf
  /// where the oracle is finite, a bitwise difference from the clean-cache run, or beyond the fixed tolerance).
  virtual std::optional<std::function<bool(const MlaCell&)>> expected_failures() const { return std::nullopt; }
  bool is_negative_control() const { return expected_failures().has_value(); }
};
using MlaKernelPtr = std::shared_ptr<const MlaKernel>;

/// The CPU MLA kernels (kernels/cpu/mla_kernels.cpp): the honest designs first, then the negative controls.
std::vector<MlaKernelPtr> cpu_mla_kernels();
/// The GPU MLA kernels of this build (kernels/gpu/mla_kernels.cpp); empty in a build without a GPU backend.
std::vector<MlaKernelPtr> gpu_mla_kernels();

/// `k` as a Kernel of the registry and the cell pipeline (exec/): its name, description and device; takes_mla();
/// supports() and expected_failures() of the MlaCase / MlaCell of an MLA Case (mla_case_of), declining or
/// expecting nothing of a multi-head one; run_case() calls k.run with the case's MlaDims (run() alone throws
/// KernelError: the arguments do not carry the latent shape); layouts nhd; variants: several query tokens.
KernelPtr as_kernel(MlaKernelPtr k);

/// The arguments of an MLA call of case `mc` over pool `pc` (page_mla): make_args() of mc.c with value_cache =
/// key_cache = `latent_cache` (and v_strides = k_strides), v_scale = k_scale, out [num_query_tokens, num_heads,
/// v_head_dim] and the version-4 fields kv_lora_rank, qk_rope_head_dim, v_head_dim of mc.m. Pointers live on
/// the kernel's device; `query_start_loc` is required with several query tokens in some sequence
/// (std::invalid_argument from make_args otherwise).
pacheck_kernel_args make_mla_args(const MlaCase& mc, const PagedCache& pc, const void* query, const void* latent_cache,
                                  const std::int32_t* block_tables, const std::int32_t* seq_lens, void* out,
                                  const std::int32_t* query_start_loc = nullptr);

}  // namespace pacheck
