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

/// Device buffers kept from one kernel call to the next on one worker (issue 45): inference engines reuse
/// their buffers from step to step, so a kernel that keeps state keyed on its buffers (an output replayed
/// for the same addresses, a running max left in scratch) meets the same addresses with other contents in
/// production. take() hands a call each input and the output in the buffer of that role the previous call
/// had, when its size is the same; otherwise a new one (allocated before the old one is freed). A sparse
/// pool (high block ids) is never pooled (its device copy is a zeroed allocation of which only the live
/// ranges are written). The buffers are freed with the pool. Not thread-safe: one pool per worker.
class BufferPool {
 public:
  explicit BufferPool(Backend& b) : b_(b) {}
  /// The buffer for input or output `role` (a small index, one per role) of `bytes` bytes.
  void* take(std::size_t role, std::size_t bytes);

 private:
  struct Slot {
    std::unique_ptr<DeviceBuffer> buf;
    std::size_t bytes = 0;
  };
  Backend& b_;
  std::vector<Slot> slots_;
};

/// A key of the sizes of every buffer a call of `c` gets (query, caches, block tables, seq_lens, scale arrays
/// and tables, variant tensors, output): `c` with the fields that change no size (seed, dist, scale,
/// padding_target, window, soft cap, the values of fp8 scales, slopes and sinks but not their form) set to
/// one value, as its id. Equal keys: a BufferPool hands the second call the first call's buffers.
std::string buffer_shape(const Case& c);

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
  /// With `pool`, the buffers are the pool's (BufferPool::take), uploaded anew and not freed with this object.
  DeviceInputs(Backend& b, const Case& c, const std::vector<std::uint8_t>& query, const PagedCache& cache,
               BufferPool* pool = nullptr);
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
/// Throws KernelError from the kernel or backend. With `pool` (on `backend`), the inputs and the guarded
/// output live in the pool's buffers: the previous call's, when the sizes match (BufferPool).
RawRun run_kernel_once(const Kernel& k, Backend& backend, const CaseData& data, const PagedCache& cache,
                       BufferPool* pool = nullptr);

}  // namespace pacheck
