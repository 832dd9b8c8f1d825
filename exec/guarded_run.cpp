#include "exec/guarded_run.hpp"

#include "kernels/mla_kernel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace pacheck {
namespace {

/// Output fill pattern: a signalling NaN with an unusual payload, which arithmetic never produces (it
/// yields quiet NaNs), so an element still holding it was never written.
std::uint32_t fill_bits(DType t) {
  switch (t) {
    case DType::f32: return 0x7FA5A5A5u;
    case DType::f16: return 0x7DA5u;
    case DType::bf16: return 0x7FA5u;
  }
  return 0;
}

constexpr std::size_t kGuardBytes = 4096;
std::uint8_t guard_byte(std::size_t i) { return static_cast<std::uint8_t>((i * 131u + 7u) & 0xFFu); }

}  // namespace

DeviceBuffer::DeviceBuffer(Backend& backend, std::size_t bytes)
    : b(backend), p(backend.alloc(std::max<std::size_t>(bytes, 1))) {}
DeviceBuffer::DeviceBuffer(Backend& backend, std::size_t bytes, bool zeroed)
    : b(backend),
      p(zeroed ? backend.alloc_zeroed(std::max<std::size_t>(bytes, 1)) : backend.alloc(std::max<std::size_t>(bytes, 1))) {}
DeviceBuffer::~DeviceBuffer() { b.release(p); }

void* BufferPool::take(std::size_t role, std::size_t bytes) {
  if (slots_.size() <= role) slots_.resize(role + 1);
  Slot& s = slots_[role];
  if (!s.buf || s.bytes != bytes) {
    auto fresh = std::make_unique<DeviceBuffer>(b_, bytes);  // before the old one is freed: another address
    s.buf = std::move(fresh);
    s.bytes = bytes;
  }
  return s.buf->p;
}

std::string buffer_shape(const Case& c) {
  Case s = c;
  s.seed = 0;
  s.dist = Dist::normal;
  s.scale.reset();
  s.padding_target = -1;
  s.sliding_window = 0;
  s.logits_soft_cap.reset();
  // Scales and per-head values keep their form (a per-head array, a per-slot table, a scalar) only.
  for (KvScale* k : {&s.k_scale, &s.v_scale}) {
    if (k->per_slot()) *k = KvScale{{}, std::nullopt, std::pair{1.0f, 2.0f}};
    else if (k->per_head()) *k = KvScale{{}, std::pair{1.0f, 2.0f}, std::nullopt};
    else *k = KvScale{};
  }
  for (HeadValues* h : {&s.alibi_slopes, &s.sinks})
    if (!h->is_default()) *h = HeadValues{HeadValues::Form::values, {1.0f}, {}};
  return s.id();
}

std::vector<std::uint8_t> query_bytes(const Case& c, const PrePaging& pre) {
  std::vector<std::uint8_t> q(pre.q.size() * dtype_size(c.q_dtype));
  for (std::size_t i = 0; i < pre.q.size(); ++i) store(q.data(), i, c.q_dtype, pre.q[i]);
  return q;
}

/// One input: uploaded from `host`, and after the run compared with it.
struct DeviceInputs::Checked {
  const char* name;
  const void* host;
  std::size_t bytes;
  /// The byte ranges uploaded and compared: the whole input, or a sparse pool's live ranges.
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  std::unique_ptr<DeviceBuffer> own;  ///< null when the buffer is a BufferPool's
  void* dev = nullptr;                ///< the device buffer: own's, or the pool's
  /// Input `role` (its ABI position) of `sz` bytes from `h`: in `pool`'s buffer of that role, or its own.
  Checked(Backend& b, BufferPool* pool, std::size_t role, const char* n, const void* h, std::size_t sz)
      : name(n), host(h), bytes(sz), ranges{{0, sz}} {
    if (pool) dev = pool->take(role, std::max<std::size_t>(sz, 1));
    else dev = (own = std::make_unique<DeviceBuffer>(b, sz))->p;
    b.upload(dev, host, bytes);
  }
  /// A cache pool; a sparse one (high block ids) is never in a BufferPool.
  Checked(Backend& b, BufferPool* pool, std::size_t role, const char* n, const PoolBuffer& cache)
      : name(n), host(cache.data()), bytes(cache.size()), ranges(cache.live()) {
    if (pool && !cache.sparse()) dev = pool->take(role, std::max<std::size_t>(bytes, 1));
    else dev = (own = std::make_unique<DeviceBuffer>(b, cache.size(), cache.sparse()))->p;
    if (!cache.sparse()) ranges = {{0, bytes}};
    for (const auto& [first, last] : ranges)
      b.upload(static_cast<std::uint8_t*>(dev) + first, cache.data() + first, last - first);
  }
  /// Empty when unchanged, else a description of the first changed byte.
  std::string check(Backend& b) const {
    std::vector<std::uint8_t> back;
    for (const auto& [first, last] : ranges) {
      const std::size_t n = last - first;
      back.resize(n);
      b.download(back.data(), static_cast<const std::uint8_t*>(dev) + first, n);
      const std::uint8_t* h = static_cast<const std::uint8_t*>(host) + first;
      if (n == 0 || std::memcmp(back.data(), h, n) == 0) continue;
      std::size_t i = 0;
      while (i < n && back[i] == h[i]) ++i;
      return fmt::format("{} changed at byte {} of {}", name, first + i, bytes);
    }
    return {};
  }
};

DeviceInputs::DeviceInputs(Backend& b, const Case& c, const std::vector<std::uint8_t>& query, const PagedCache& cache,
                           BufferPool* pool)
    : b_(b), c_(c), cache_(cache) {
  // Each input's role in a BufferPool is its position in in_ (ABI order).
  auto add = [&](const char* name, const void* host, std::size_t bytes) {
    in_.push_back(std::make_unique<Checked>(b, pool, in_.size(), name, host, bytes));
  };
  add("query", query.data(), query.size());
  in_.push_back(std::make_unique<Checked>(b, pool, in_.size(), "key_cache", cache.key_cache));
  in_.push_back(std::make_unique<Checked>(b, pool, in_.size(), "value_cache", cache.value_cache));
  add("block_tables", cache.block_tables.data(), cache.block_tables.size() * 4);
  add("seq_lens", cache.seq_lens.data(), cache.seq_lens.size() * 4);
  // fp8 per-KV-head scales are inputs like any other: on the device, and checked for writes.
  if (cache.k_per_head) add("k_scales_per_head", cache.k_scales.data(), cache.k_scales.size() * 4);
  else in_.emplace_back();
  if (cache.v_per_head) add("v_scales_per_head", cache.v_scales.data(), cache.v_scales.size() * 4);
  else in_.emplace_back();
  // Attention-variant tensors (issue 19): inputs too, checked for writes.
  alibi_slopes_ = c.alibi_slopes.resolve(c.num_heads);
  sinks_ = c.sinks.resolve(c.num_heads);
  if (!alibi_slopes_.empty()) add("alibi_slopes", alibi_slopes_.data(), alibi_slopes_.size() * 4);
  else in_.emplace_back();
  if (!sinks_.empty()) add("sinks", sinks_.data(), sinks_.size() * 4);
  else in_.emplace_back();
  // Several query tokens per sequence: query_start_loc [num_seqs + 1] on the device (its host copy is the
  // cache's), an input like the others.
  if (!cache.query_start_loc.empty())
    add("query_start_loc", cache.query_start_loc.data(), cache.query_start_loc.size() * 4);
  else in_.emplace_back();
  // Per-slot fp8 scale tables (seed 002): inputs, checked for writes.
  if (!cache.k_slot_scales.empty()) add("k_scales_per_slot", cache.k_slot_scales.data(), cache.k_slot_scales.size() * 4);
  else in_.emplace_back();
  if (!cache.v_slot_scales.empty()) add("v_scales_per_slot", cache.v_slot_scales.data(), cache.v_slot_scales.size() * 4);
  else in_.emplace_back();
}

DeviceInputs::~DeviceInputs() = default;

pacheck_kernel_args DeviceInputs::args(void* out) const {
  auto dev = [&](std::size_t i) -> const void* { return in_[i] ? in_[i]->dev : nullptr; };
  if (c_.is_mla()) {  // one latent cache, read as K and as V (kernels/mla_kernel.hpp)
    pacheck_kernel_args a = make_mla_args(mla_case_of(c_), cache_, dev(0), dev(1), static_cast<const std::int32_t*>(dev(3)),
                                          static_cast<const std::int32_t*>(dev(4)), out,
                                          static_cast<const std::int32_t*>(dev(9)));
    a.stream = b_.stream();
    return a;
  }
  pacheck_kernel_args a = make_args(c_, cache_, dev(0), dev(1), dev(2), static_cast<const std::int32_t*>(dev(3)),
                                    static_cast<const std::int32_t*>(dev(4)), out, static_cast<const float*>(dev(5)),
                                    static_cast<const float*>(dev(6)), static_cast<const float*>(dev(7)),
                                    static_cast<const float*>(dev(8)), static_cast<const std::int32_t*>(dev(9)),
                                    static_cast<const float*>(dev(10)), static_cast<const float*>(dev(11)));
  a.stream = b_.stream();
  return a;
}

std::string DeviceInputs::first_change() const {
  std::string first;
  for (const auto& in : in_) {
    if (!in) continue;
    std::string why = in->check(b_);
    if (first.empty()) first = std::move(why);
  }
  return first;
}

/// The BufferPool role of the guarded output: after every input's (DeviceInputs' ABI positions).
constexpr std::size_t kOutputRole = 32;

RawRun run_kernel_once(const Kernel& k, Backend& b, const CaseData& data, const PagedCache& cache, BufferPool* pool) {
  const Case& c = data.c;
  RawRun r;
  const auto qbytes = query_bytes(c, data.pre);
  const DeviceInputs inputs(b, c, qbytes, cache, pool);

  // Every output row is guarded and checked for being written: num_query_tokens of them.
  const std::size_t n = static_cast<std::size_t>(c.num_query_tokens()) * c.num_heads * c.out_head_size();
  const std::size_t esz = dtype_size(c.out_dtype), out_bytes = n * esz;
  std::vector<std::uint8_t> host_out(out_bytes + 2 * kGuardBytes);
  for (std::size_t i = 0; i < kGuardBytes; ++i) {
    host_out[i] = guard_byte(i);
    host_out[kGuardBytes + out_bytes + i] = guard_byte(i + kGuardBytes);
  }
  const std::uint32_t fill = fill_bits(c.out_dtype);
  for (std::size_t i = 0; i < n; ++i) store_bits(host_out.data() + kGuardBytes, i, c.out_dtype, fill);
  std::unique_ptr<DeviceBuffer> own_out;
  void* const out = pool ? pool->take(kOutputRole, host_out.size())
                         : (own_out = std::make_unique<DeviceBuffer>(b, host_out.size()))->p;
  b.upload(out, host_out.data(), host_out.size());
  b.sync();

  const pacheck_kernel_args args = inputs.args(static_cast<std::uint8_t*>(out) + kGuardBytes);
  r.ms = b.time_ms([&] { k.run_case(args, c); });
  b.sync();

  b.download(host_out.data(), out, host_out.size());
  for (std::size_t i = 0; i < kGuardBytes && r.guard_ok; ++i) {
    if (host_out[i] != guard_byte(i)) {
      r.guard_ok = false;
      r.guard_detail = fmt::format("guard before the output changed at byte -{}", kGuardBytes - i);
    }
  }
  for (std::size_t i = 0; i < kGuardBytes && r.guard_ok; ++i) {
    if (host_out[kGuardBytes + out_bytes + i] != guard_byte(i + kGuardBytes)) {
      r.guard_ok = false;
      r.guard_detail = fmt::format("guard after the output changed at byte +{}", i);
    }
  }
  r.inputs_detail = inputs.first_change();
  r.inputs_ok = r.inputs_detail.empty();
  r.bits.resize(n);
  r.out.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    r.bits[i] = load_bits(host_out.data() + kGuardBytes, i, c.out_dtype);
    r.out[i] = from_bits(r.bits[i], c.out_dtype);
    if (r.bits[i] == fill) {
      if (r.first_unwritten < 0) r.first_unwritten = static_cast<std::int64_t>(i);
      ++r.unwritten;
    }
  }
  return r;
}

}  // namespace pacheck
