// MLA negative controls that read latent rows past a sequence's last token into P.V, with the logits masked
// there (p = 0 exactly) and the rows not: 0 x NaN = NaN.
//  cpu.mla_v_tail       V over whole blocks, the final block's unwritten tail included, as a kernel that loads
//                       V tiles page by page and masks only the logits: FlashInfer #941 (NaN in the unfilled
//                       slots of an MLA cache's last page reached the output; vLLM issue 641 in MHA form).
//                       NEGATIVE CONTROL.
//  cpu.mla_packed_tile  tiles of 64 tokens gathered through the batch's packed page list (FlashInfer's CSR
//                       kv_indptr / kv_indices: every sequence's pages one after another, which a kernel builds
//                       from the block tables). Its own final page's slots past seq_len are zeroed (#941's fix),
//                       but a last tile that reaches past the sequence's own pages loads the pages listed next,
//                       another sequence's, unmasked: FlashInfer #942 (the batch MLA kernel read an unrelated
//                       sequence's NaN entries; the fix masks every entry outside the sequence). Here those are
//                       the other sequence's unwritten slots. NEGATIVE CONTROL.
#include "faults/mla_inject.hpp"
#include "kernels/cpu/mla_common.hpp"

namespace pacheck::cpu {
namespace {

/// Tokens per tile of cpu.mla_packed_tile (FlashInfer's batch MLA KV tile).
constexpr int kMlaPackedTile = 64;

/// The sequences' pages in one list, sequence 0's first: first[s] .. first[s + 1] - 1 are sequence s's pages
/// (ceil(seq_len / block_size) of them), as FlashInfer's kv_indptr delimits them in kv_indices.
struct PackedPages {
  std::vector<std::int64_t> pages;
  std::vector<int> first;
};
PackedPages packed_pages(const std::vector<int>& seq_lens, int block_size, const std::int32_t* block_tables,
                         std::int64_t stride) {
  PackedPages p;
  for (std::size_t s = 0; s < seq_lens.size(); ++s) {
    p.first.push_back(static_cast<int>(p.pages.size()));
    for (int j = 0; j < (seq_lens[s] + block_size - 1) / block_size; ++j)
      p.pages.push_back(block_tables ? block_tables[static_cast<std::int64_t>(s) * stride + j] : -1);
  }
  p.first.push_back(static_cast<int>(p.pages.size()));
  return p;
}

/// Whether cpu.mla_packed_tile multiplies p = 0 by an unwritten slot of another sequence: the last tile of each
/// sequence s covers its tokens [seq_len, ceil64(seq_len)) past its keys (earlier query rows' tiles end no
/// later), token t at packed page first[s] + t / block_size; pages of s itself are masked past seq_len, pages past
/// the list's end are not loaded. A page of sequence s2 holds s2's token (page - first[s2]) x block_size +
/// t % block_size, unwritten from seq_lens[s2] on. Such a slot is in the regions tail, all and others (s2 > s >=
/// 0); unused and padding blocks are never in the list.
bool packed_tile_reads_other_tail(const Case& c, Region region) {
  if (region != Region::tail && region != Region::all && region != Region::others) return false;
  const PackedPages p = packed_pages(c.seq_lens, c.block_size, nullptr, 0);
  const int B = c.block_size, total = static_cast<int>(p.pages.size());
  for (int s = 0; s < c.num_seqs(); ++s) {
    const int len = c.seq_lens[s], end = (len + kMlaPackedTile - 1) / kMlaPackedTile * kMlaPackedTile;
    for (int t = len; t < end; ++t) {
      const int page = p.first[s] + t / B;
      if (page >= total) break;
      if (page < p.first[s + 1]) continue;  // its own final page: masked
      const int s2 = static_cast<int>(std::upper_bound(p.first.begin(), p.first.end(), page) - p.first.begin()) - 1;
      if ((page - p.first[s2]) * B + t % B >= c.seq_lens[s2]) return true;
    }
  }
  return false;
}

/// A non-finite poison in the V prefix (targets V and K+V; K is the rope part, never read as V).
bool poisons_v_prefix(const FaultSpec& f) { return poison_is_nonfinite(f.poison) && f.target != Target::k; }

class MlaVTail final : public CpuMlaKernel {
 public:
  std::string name() const override { return "cpu.mla_v_tail"; }
  std::string description() const override {
    return "MLA with V read over the whole final block, tail masked in the logits only (negative control)";
  }
  std::optional<std::function<bool(const MlaCell&)>> expected_failures() const override {
    return std::function<bool(const MlaCell&)>([](const MlaCell& cell) { return mla_poisons_v_tail(cell); });
  }
  void run(const pacheck_kernel_args& a, const MlaDims& d) const override {
    const int B = a.block_size, V = d.v_head_size;
    std::vector<float> p;
    for_each_query_head(a, [&]<DType KV>(const SeqView& sv, int, const std::vector<float>& q, std::vector<float>& out) {
      const int span = (sv.len + B - 1) / B * B;  // whole blocks: the final block's slots past the keys too
      p.assign(static_cast<std::size_t>(span), 0.0f);
      float m = kNegInf, sum = 0;
      for (int t = 0; t < sv.len; ++t) m = std::max(m, p[t] = logit<KV>(sv, q, t, 0, a.scale));
      for (int t = 0; t < sv.len; ++t) sum += (p[t] = std::exp(p[t] - m));
      std::fill(out.begin(), out.end(), 0.0f);
      for (int t = 0; t < span; ++t) {  // p is 0 past the keys; the row is read all the same
        const float w = p[t] / sum;
        for (int i = 0; i < V; ++i) out[i] += w * sv.v<KV>(t, 0, i);
      }
    }, V);
  }
};

class MlaPackedTile final : public CpuMlaKernel {
 public:
  std::string name() const override { return "cpu.mla_packed_tile"; }
  std::string description() const override {
    return "MLA with 64-token V tiles through the batch's packed page list, own tail zeroed, other sequences' pages "
           "unmasked (FlashInfer #942; negative control)";
  }
  std::optional<std::function<bool(const MlaCell&)>> expected_failures() const override {
    return std::function<bool(const MlaCell&)>([](const MlaCell& cell) {
      return poisons_v_prefix(cell.fault) && packed_tile_reads_other_tail(cell.mc.c, cell.fault.region);
    });
  }
  void run(const pacheck_kernel_args& a, const MlaDims& d) const override {
    const std::vector<int> lens(a.seq_lens_host, a.seq_lens_host + a.num_seqs);
    const PackedPages pk = packed_pages(lens, a.block_size, a.block_tables, a.block_tables_stride);
    const int B = a.block_size, V = d.v_head_size, total = static_cast<int>(pk.pages.size());
    std::vector<float> p(kMlaPackedTile);
    for_each_query_head(a, [&]<DType KV>(const SeqView& sv, int, const std::vector<float>& q, std::vector<float>& out) {
      float m = kNegInf, l = 0;
      std::fill(out.begin(), out.end(), 0.0f);
      for (int t0 = 0; t0 < sv.len; t0 += kMlaPackedTile) {
        float m_new = m;
        for (int j = 0; j < kMlaPackedTile; ++j) {
          const int t = t0 + j;
          p[j] = t < sv.len ? logit<KV>(sv, q, t, 0, a.scale) : kNegInf;  // the logits are masked
          m_new = std::max(m_new, p[j]);
        }
        const float alpha = std::exp(m - m_new);
        l *= alpha;
        for (float& x : out) x *= alpha;
        for (int j = 0; j < kMlaPackedTile; ++j) {
          const int t = t0 + j, page = pk.first[sv.s] + t / B;
          if (page >= total) break;  // past the list: not loaded
          const bool own_tail = page < pk.first[sv.s + 1] && t >= a.seq_lens_host[sv.s];  // zeroed (#941's fix)
          const float w = std::exp(p[j] - m_new);  // exactly 0 past the keys
          l += w;
          if (own_tail) continue;
          for (int i = 0; i < V; ++i) out[i] += w * latent_at<KV>(a, sv.sc, pk.pages[page], t % B, i);
        }
        m = m_new;
      }
      for (float& x : out) x /= l;
    }, V);
  }
};

}  // namespace
}  // namespace pacheck::cpu

namespace pacheck {

/// cpu.mla_v_tail and cpu.mla_packed_tile (listed in kernels/cpu/mla_kernels.cpp).
std::vector<MlaKernelPtr> make_cpu_mla_read_controls() {
  return {std::make_shared<cpu::MlaVTail>(), std::make_shared<cpu::MlaPackedTile>()};
}

}  // namespace pacheck
