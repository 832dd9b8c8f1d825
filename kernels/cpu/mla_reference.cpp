// cpu.mla_reference and the MLA negative controls built on it, each a one-line change of its arithmetic:
//  cpu.mla_reference      reads only the rows of valid tokens; fp32 logits q . row over the whole row, softmax
//                         normalised before P.V, V the first v_head_size values of each row.
//  cpu.mla_fixed_scale    1 / sqrt(row) (1 / sqrt(576)) instead of the softmax scale it is passed, as a kernel
//                         that derives the scale from the head size it sees. NEGATIVE CONTROL.
//  cpu.mla_rope_dropped   logits over the latent part only (q_pe . k_pe left out). NEGATIVE CONTROL.
//  cpu.mla_rope_unscaled  the softmax scale applied to q_nope . c_kv only, q_pe . k_pe added unscaled (the scale
//                         folded into one of the two query parts). NEGATIVE CONTROL.
//  cpu.mla_v_offset       V read from the row's last v_head_size values instead of its first, as a kernel that
//                         takes the row as [k_pe, c_kv]. NEGATIVE CONTROL.
// The controls decline dist=peaked (mla_varied_rows) and fail the normal and uniform cells where their fault
// changes the output: every such cell of tests/test_mla.cpp and the mla suite, measured.
#include "kernels/cpu/mla_common.hpp"

namespace pacheck::cpu {
namespace {

enum class MlaPlanted { none, fixed_scale, rope_dropped, rope_unscaled, v_offset };

/// Ratio (either way) between two scales beyond which a logit scaled by one and judged against the other
/// differs materially on normal and uniform rows.
constexpr double kMlaMaterialRatio = 1.1;
bool mla_scales_differ(double a, double b) { return std::max(a / b, b / a) >= kMlaMaterialRatio; }

/// The cells the control `p` must fail: see the file comment.
bool mla_planted_fails(MlaPlanted p, const MlaCase& mc) {
  const Case& c = mc.c;
  const bool keys = c.max_seq_len() >= kMlaMinKeys, rope = mc.m.qk_rope_head_dim > 0;
  if (!mla_varied_rows(c)) return false;
  switch (p) {
    case MlaPlanted::fixed_scale:
      return keys && mla_scales_differ(c.effective_scale(), 1.0 / std::sqrt(static_cast<double>(mc.m.row())));
    case MlaPlanted::rope_dropped: return keys && rope;
    case MlaPlanted::rope_unscaled: return keys && rope && mla_scales_differ(c.effective_scale(), 1.0);
    case MlaPlanted::v_offset: return mc.m.v_head_dim < mc.m.row();
    case MlaPlanted::none: break;
  }
  return false;
}

class MlaReference final : public CpuMlaKernel {
 public:
  explicit MlaReference(MlaPlanted p) : planted_(p) {}
  std::string name() const override {
    switch (planted_) {
      case MlaPlanted::fixed_scale: return "cpu.mla_fixed_scale";
      case MlaPlanted::rope_dropped: return "cpu.mla_rope_dropped";
      case MlaPlanted::rope_unscaled: return "cpu.mla_rope_unscaled";
      case MlaPlanted::v_offset: return "cpu.mla_v_offset";
      case MlaPlanted::none: break;
    }
    return "cpu.mla_reference";
  }
  std::string description() const override {
    switch (planted_) {
      case MlaPlanted::fixed_scale: return "MLA reference using 1/sqrt(row), not the scale it is passed (negative control)";
      case MlaPlanted::rope_dropped: return "MLA reference with logits over the latent part only (negative control)";
      case MlaPlanted::rope_unscaled:
        return "MLA reference scaling q_nope.c_kv only, q_pe.k_pe added unscaled (negative control)";
      case MlaPlanted::v_offset: return "MLA reference reading V from the row's last values, not its first (negative control)";
      case MlaPlanted::none: break;
    }
    return "MLA: fp32 logits over the whole latent row, softmax normalised first, V the row's prefix";
  }
  Support supports(const MlaCase& mc) const override {
    if (planted_ != MlaPlanted::none && !mla_varied_rows(mc.c))
      return Support::no("dist " + std::string(dist_name(mc.c.dist)) + ": its identical hot rows hide " + name() +
                         "'s fault; it runs normal and uniform cells");
    return Support::yes();
  }
  std::optional<std::function<bool(const MlaCell&)>> expected_failures() const override {
    if (planted_ == MlaPlanted::none) return std::nullopt;
    const MlaPlanted p = planted_;
    return std::function<bool(const MlaCell&)>([p](const MlaCell& cell) { return mla_planted_fails(p, cell.mc); });
  }
  void run(const pacheck_kernel_args& a, const MlaDims& d) const override {
    const int W = a.head_size, L = d.kv_lora_rank, V = d.v_head_size;
    const int v0 = planted_ == MlaPlanted::v_offset ? W - V : 0;  // the fault of cpu.mla_v_offset
    const float scale = planted_ == MlaPlanted::fixed_scale ? 1.0f / std::sqrt(static_cast<float>(W)) : a.scale;
    std::vector<float> logits;
    for_each_query_head(a, [&]<DType KV>(const SeqView& sv, int, const std::vector<float>& q, std::vector<float>& out) {
      logits.resize(static_cast<std::size_t>(sv.len));
      float m = kNegInf;
      for (int t = 0; t < sv.len; ++t) {
        float x = scale * row_dot<KV>(sv, q, t, 0, W);
        if (planted_ == MlaPlanted::rope_dropped) x = scale * row_dot<KV>(sv, q, t, 0, L);
        if (planted_ == MlaPlanted::rope_unscaled) x = scale * row_dot<KV>(sv, q, t, 0, L) + row_dot<KV>(sv, q, t, L, W);
        m = std::max(m, logits[t] = x);
      }
      float sum = 0;
      for (int t = 0; t < sv.len; ++t) sum += (logits[t] = std::exp(logits[t] - m));
      std::fill(out.begin(), out.end(), 0.0f);
      for (int t = 0; t < sv.len; ++t) {
        const float w = logits[t] / sum;
        for (int i = 0; i < V; ++i) out[i] += w * sv.v<KV>(t, 0, v0 + i);
      }
    }, V);
  }

 private:
  MlaPlanted planted_;
};

}  // namespace
}  // namespace pacheck::cpu

namespace pacheck {

/// cpu.mla_reference and its four controls, in that order (listed in kernels/cpu/mla_kernels.cpp).
std::vector<MlaKernelPtr> make_cpu_mla_reference_family() {
  using cpu::MlaPlanted;
  std::vector<MlaKernelPtr> out;
  for (MlaPlanted p : {MlaPlanted::none, MlaPlanted::fixed_scale, MlaPlanted::rope_dropped, MlaPlanted::rope_unscaled,
                       MlaPlanted::v_offset})
    out.push_back(std::make_shared<cpu::MlaReference>(p));
  return out;
}

}  // namespace pacheck
