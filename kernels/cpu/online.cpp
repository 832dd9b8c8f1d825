// cpu.online: online softmax over tiles of 64 tokens with an UNnormalised fp32 accumulator, divided by the
// running exp-sum once at the end. It stands for FlashAttention-2's forward loop (Dao, 2023: the output
// rescaled by exp(m_old - m_new) per K/V tile and divided by l only after the last tile) and for the Triton
// decode kernels built on it (vLLM's triton_decode_attention / SGLang's decode_attention stage 1, whose
// BLOCK_N is 64 tokens for MHA: acc = acc * exp(e_max - n_e_max) + sum p V with p = exp(qk - n_e_max),
// then acc / e_sum). An honest design (fault-classes.md section 9), written as the design does it: its
// accumulator grows to at most seq_len x max|V| (each p <= 1), which is why the extreme distribution bounds
// V (oracle/tensors.cpp) and the opt-in overflow property shows where this design's range ends.
#include "kernels/cpu/cpu_common.hpp"

namespace pacheck::cpu {
namespace {

/// Tokens per K/V tile (vLLM/SGLang Triton decode stage 1's BLOCK_N for MHA).
constexpr int kOnlineTile = 64;

class Online final : public CpuKernel {
 public:
  std::string name() const override { return "cpu.online"; }
  std::string description() const override {
    return "online softmax over 64-token tiles, unnormalised fp32 accumulator divided at the end (FlashAttention-2, "
           "Triton decode)";
  }
  void run(const pacheck_kernel_args& a) const override {
    for_each_query_head(a, [&]<DType KV>(const SeqView& sv, int g, const std::vector<float>& q, std::vector<float>& out) {
      const int len = sv.len;
      OnlineSoftmax st(a.head_size);
      st.start_from_sink(sink_logit(a, sv.h));
      st.add_tokens<KV>(sv, g, q, a.scale, window_first(a, sv.len), len, kOnlineTile);  // tiles from the window's edge
      st.normalised(out.data());
    });
  }
};

}  // namespace
}  // namespace pacheck::cpu

namespace pacheck {
/// cpu.online (registered in cpu_kernels.cpp).
KernelPtr make_cpu_online() { return std::make_shared<cpu::Online>(); }
}  // namespace pacheck
