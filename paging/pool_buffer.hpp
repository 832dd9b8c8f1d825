// Storage of one paged KV cache (key_cache or value_cache): dense heap bytes, or a sparse anonymous
// mapping for the pools of high physical block ids (Case::high_block_ids), whose virtual size passes
// 2^31 or 2^32 elements while only a few of their blocks hold anything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace pacheck {

/// Raw bytes of a K or V cache. Two kinds:
///  - dense (default): a zero-filled heap buffer; every byte is live (live() = {[0, size)}).
///  - sparse: an anonymous private mapping with MAP_NORESERVE (mmap(2)): untouched pages read as zero and
///    use no memory; only the byte ranges marked with mark_live() may hold non-zero bytes, so copies,
///    uploads and write checks visit those ranges only. Resident memory is about the live bytes.
/// Copying copies the live ranges into a fresh buffer of the same kind (a faulted copy of a sparse pool
/// stays sparse). Throws std::bad_alloc when the mapping or allocation fails.
class PoolBuffer {
 public:
  PoolBuffer() = default;
  /// `bytes` zero bytes, dense or sparse.
  PoolBuffer(std::size_t bytes, bool sparse);
  PoolBuffer(const PoolBuffer& o);
  PoolBuffer& operator=(const PoolBuffer& o);
  PoolBuffer(PoolBuffer&& o) noexcept;
  PoolBuffer& operator=(PoolBuffer&& o) noexcept;
  ~PoolBuffer();

  std::uint8_t* data() { return p_; }
  const std::uint8_t* data() const { return p_; }
  std::size_t size() const { return n_; }
  bool sparse() const { return sparse_; }
  std::uint8_t& operator[](std::size_t i) { return p_[i]; }
  std::uint8_t operator[](std::size_t i) const { return p_[i]; }
  const std::uint8_t* begin() const { return p_; }
  const std::uint8_t* end() const { return p_ + n_; }
  /// Byte ranges [first, second) that may hold non-zero bytes, sorted and disjoint; every other byte is 0.
  /// Dense: the whole buffer.
  const std::vector<std::pair<std::size_t, std::size_t>>& live() const { return live_; }
  /// Sparse only: declares [first, last) live (merged with the ranges already live). Writes outside the
  /// live ranges are not copied by a copy and not uploaded; the pager marks before it writes.
  void mark_live(std::size_t first, std::size_t last);
  /// Bytes of the live ranges (dense: size()).
  std::size_t live_bytes() const;
  /// Equal sizes and bytes (live ranges compared; outside them both are zero). Dense vs sparse compare bytes.
  bool operator==(const PoolBuffer& o) const;

 private:
  void release();
  std::uint8_t* p_ = nullptr;
  std::size_t n_ = 0;
  bool sparse_ = false;
  std::vector<std::pair<std::size_t, std::size_t>> live_;
};

}  // namespace pacheck
