// Negative controls for high physical block ids (issue 18; FlashInfer #3130, llama.cpp #24912): cpu.two_pass
// with one planted fault, the block's element offset block_id x block stride computed in 32 bits.
//  cpu.int32_offset   the product in int32: it wraps to a negative offset once it reaches 2^31 (and back
//                     to a small positive one past 2^32). Fails the cells of Case::high_block_ids 31 and 32.
//  cpu.uint32_offset  the product in uint32: correct up to 2^32, then it wraps to the start of the pool.
//                     Fails the cells of high_block_ids 32 only, passes those of 31.
// The within-block part of the offset (KV head, slot, element) is added in 64 bits, so the planted fault is
// the block product alone. An offset outside the pool reads as 0 (a real kernel reads whatever lies before
// the pool or faults; pacheck's sparse pools map the blocks a wrap past 2^32 lands on, so that read is a
// read of a poisoned, or at least wrong, block of the pool: paging/pager.hpp, resident_blocks).
#include "kernels/cpu/cpu_common.hpp"

namespace pacheck::cpu {
namespace {

class Offset32 final : public CpuKernel {
 public:
  explicit Offset32(bool is_signed) : signed_(is_signed) {}
  std::string name() const override { return signed_ ? "cpu.int32_offset" : "cpu.uint32_offset"; }
  std::string description() const override {
    return signed_ ? "two-pass softmax with block_id x block stride in int32: negative past 2^31 elements "
                     "(FlashInfer #3130, llama.cpp #24912; negative control)"
                   : "two-pass softmax with block_id x block stride in uint32: wraps past 2^32 elements "
                     "(negative control)";
  }
  std::optional<std::function<bool(const Cell&)>> expected_failures() const override {
    const bool s = signed_;
    return std::function<bool(const Cell&)>([s](const Cell& cell) {
      return s ? cell.c.high_block_ids != 0 : cell.c.high_block_ids == 32;
    });
  }
  void run(const pacheck_kernel_args& a) const override {
    const std::int64_t pool = static_cast<std::int64_t>(a.num_blocks) * a.k_strides[0];
    const int x = pack_x(a);
    // The planted fault: the block's base offset in 32-bit arithmetic.
    auto base = [&](std::int64_t block, std::int64_t stride) -> std::int64_t {
      const std::uint32_t wrapped = static_cast<std::uint32_t>(block) * static_cast<std::uint32_t>(stride);
      return signed_ ? static_cast<std::int64_t>(static_cast<std::int32_t>(wrapped)) : static_cast<std::int64_t>(wrapped);
    };
    auto read = [&]<DType KV>(const void* cache, std::int64_t off) -> float {
      return off < 0 || off >= pool ? 0.0f : ld<KV>(cache, off);
    };
    std::vector<float> s;
    for_each_query_head(a, [&]<DType KV>(const SeqView& sv, int g, const std::vector<float>& q, std::vector<float>& out) {
      const int len = sv.len, D = a.head_size, first = window_first(a, sv.len);  // keys the query row sees
      auto k = [&](int t, int d) {
        const std::int64_t off = base(sv.block_of(t), a.k_strides[0]) +
                                 key_offset(a.layout, a.k_strides, x, 0, g, t % a.block_size, d);
        const float e = read.template operator()<KV>(a.key_cache, off);
        return is_fp8(KV) ? e * sv.sc.k_at(sv.block_of(t), g, t % a.block_size) : e;
      };
      auto v = [&](int t, int d) {
        const std::int64_t off = base(sv.block_of(t), a.v_strides[0]) +
                                 value_offset(a.layout, a.v_strides, 0, g, t % a.block_size, d);
        const float e = read.template operator()<KV>(a.value_cache, off);
        return is_fp8(KV) ? e * sv.sc.v_at(sv.block_of(t), g, t % a.block_size) : e;
      };
      const std::optional<float> sink = sink_logit(a, sv.h);
      s.resize(len);
      float m = sink.value_or(kNegInf);
      for (int t = first; t < len; ++t) {
        float dot = 0;
        for (int d = 0; d < D; ++d) dot += q[d] * k(t, d);
        m = std::max(m, s[t] = apply_variants(a, sv.len, sv.h, t, dot * a.scale));
      }
      float l = sink ? std::exp(*sink - m) : 0.0f;
      std::fill(out.begin(), out.end(), 0.0f);
      for (int t = first; t < len; ++t) {
        const float p = std::exp(s[t] - m);
        l += p;
        for (int d = 0; d < D; ++d) out[d] += p * v(t, d);
      }
      for (int d = 0; d < D; ++d) out[d] /= l;
    });
  }

 private:
  bool signed_;
};

}  // namespace
}  // namespace pacheck::cpu

namespace pacheck {
/// cpu.int32_offset / cpu.uint32_offset (registered in cpu_kernels.cpp).
KernelPtr make_cpu_offset32(bool is_signed) { return std::make_shared<cpu::Offset32>(is_signed); }
}  // namespace pacheck
