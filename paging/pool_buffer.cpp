#include "paging/pool_buffer.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

namespace pacheck {

PoolBuffer::PoolBuffer(std::size_t bytes, bool sparse) : n_(bytes), sparse_(sparse) {
  if (n_ == 0) return;
  if (sparse_) {
    void* m = ::mmap(nullptr, n_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    p_ = static_cast<std::uint8_t*>(m);
  } else {
    p_ = static_cast<std::uint8_t*>(std::calloc(n_, 1));
    if (!p_) throw std::bad_alloc();
    live_.emplace_back(0, n_);
  }
}

PoolBuffer::PoolBuffer(const PoolBuffer& o) : PoolBuffer(o.n_, o.sparse_) {
  live_ = o.live_;
  for (const auto& [a, b] : live_) std::memcpy(p_ + a, o.p_ + a, b - a);
}

PoolBuffer& PoolBuffer::operator=(const PoolBuffer& o) {
  if (this != &o) *this = PoolBuffer(o);
  return *this;
}

PoolBuffer::PoolBuffer(PoolBuffer&& o) noexcept
    : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)), sparse_(o.sparse_), live_(std::move(o.live_)) {}

PoolBuffer& PoolBuffer::operator=(PoolBuffer&& o) noexcept {
  if (this != &o) {
    release();
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
    sparse_ = o.sparse_;
    live_ = std::move(o.live_);
  }
  return *this;
}

PoolBuffer::~PoolBuffer() { release(); }

void PoolBuffer::release() {
  if (!p_) return;
  if (sparse_) ::munmap(p_, n_);
  else std::free(p_);
  p_ = nullptr;
}

void PoolBuffer::mark_live(std::size_t first, std::size_t last) {
  if (!sparse_) return;
  first = std::min(first, n_);
  last = std::min(last, n_);
  if (first >= last) return;
  live_.emplace_back(first, last);
  std::sort(live_.begin(), live_.end());
  std::vector<std::pair<std::size_t, std::size_t>> merged;
  for (const auto& r : live_) {
    if (!merged.empty() && r.first <= merged.back().second) merged.back().second = std::max(merged.back().second, r.second);
    else merged.push_back(r);
  }
  live_ = std::move(merged);
}

std::size_t PoolBuffer::live_bytes() const {
  std::size_t n = 0;
  for (const auto& [a, b] : live_) n += b - a;
  return n;
}

bool PoolBuffer::operator==(const PoolBuffer& o) const {
  if (n_ != o.n_) return false;
  if (!sparse_ && !o.sparse_) return n_ == 0 || std::memcmp(p_, o.p_, n_) == 0;
  // Bytes outside both buffers' live ranges are zero in both: compare the union of the live ranges.
  std::vector<std::pair<std::size_t, std::size_t>> all = live_;
  all.insert(all.end(), o.live_.begin(), o.live_.end());
  for (const auto& [a, b] : all)
    if (std::memcmp(p_ + a, o.p_ + a, b - a) != 0) return false;
  return true;
}

}  // namespace pacheck
