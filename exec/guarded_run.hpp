// Step 3 of a cell: one kernel call on a backend between guards. The inputs are uploaded and checked for
// writes afterwards, the output starts as a "never written" fill pattern between two guard regions, and
// the call's output, time and integrity checks come back as a RawRun for the judge.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "exec/prepare.hpp"
#include "judge/judge.hpp"
#include "kernels/backend.hpp"
#include "kernels/kernel.hpp"

namespace pacheck {

/// A device buffer of at least one byte on `backend`, freed on scope exit.
struct DeviceBuffer {
  Backend& b;
  void* p = nullptr;
  DeviceBuffer(Backend& backend, std::size_t bytes);
  /// With `zeroed`, through Backend::alloc_zeroed (the device copy of a sparse pool).
  DeviceBuffer(Backend& backend, std::size_t bytes, bool zeroed);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

/// The query of `c` as a kernel receives it: [num_query_tokens, num_heads, head_size] in c.q_dtype, from pre.q.
std::vector<std::uint8_t> query_bytes(const Case& c, const PrePaging& pre);

/// One call's inputs on a backend: query, key_cache, value_cache, block_tables and seq_lens and, when the
/// cache has them, the fp8 per-KV-head scales (k_scales_per_head / v_scales_per_head, [num_kv_heads] fp32),
/// and, when the case has them, the ALiBi slopes and sink logits (alibi_slopes / sinks, [num_heads] fp32,
/// resolved from the Case), and with several query tokens per sequence query_start_loc ([num_seqs + 1] int32,
/// the cache's), each uploaded into its own device buffer, freed with this object. A sparse pool
/// (PoolBuffer::sparse, high block ids) gets a zeroed device buffer of its full size with only its live
/// ranges uploaded, and only those ranges are compared afterwards: a write into the rest of such a pool
/// is not seen (docs/COVERAGE.md, high block ids). The host copies (`query`, `cache`)
/// must outlive it: first_change() compares the device buffers with them.
class DeviceInputs {
 public:
  DeviceInputs(Backend& b, const Case& c, const std::vector<std::uint8_t>& query, const PagedCache& cache);
  ~DeviceInputs();
  DeviceInputs(const DeviceInputs&) = delete;
  DeviceInputs& operator=(const DeviceInputs&) = delete;
  /// make_args over these buffers, writing to `out` (device memory), on the backend's stream.
  pacheck_kernel_args args(void* out) const;
  /// Empty when every device buffer still equals its host copy, else "<input> changed at byte I of N" for
  /// the first input (in ABI order) that does not.
  std::string first_change() const;

 private:
  struct Checked;
  Backend& b_;
  const Case& c_;
  const PagedCache& cache_;
  std::vector<float> alibi_slopes_, sinks_;   ///< host copies of the variant tensors ([num_heads] or empty)
  std::vector<std::unique_ptr<Checked>> in_;  ///< ABI order; null for absent per-head scales and variants
};

/// Runs `k` once on `backend` over `cache` (data.cache or a faulted copy of it): uploads the inputs, fills
/// the output with the fill pattern (a signalling NaN no arithmetic produces) between 4 KiB guard regions,
/// runs and times the call, downloads, and checks the guards, the inputs and the unwritten elements.
/// Throws KernelError from the kernel or backend.
RawRun run_kernel_once(const Kernel& k, Backend& backend, const CaseData& data, const PagedCache& cache);

}  // namespace pacheck
