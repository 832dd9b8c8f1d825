#include "kernels/cpu/row_logits.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>

namespace pacheck::cpu {

void for_each_row_logits(const Case& c, const PrePaging& pre,
                         const std::function<void(int s, int row, int h, int first, const std::vector<double>&)>& f) {
  const int H = c.num_heads, G = c.num_kv_heads, D = c.head_size, ratio = c.gqa_ratio();
  const double scale = c.effective_scale();
  const std::vector<float> slopes = c.alibi_slopes.resolve(H);
  std::vector<double> logits;
  for (int s = 0; s < c.num_seqs(); ++s)
    for (int i = 0; i < c.query_len(s); ++i) {
      const int pos = c.query_pos(s, i), first = c.window_start_at(pos), row = c.query_start(s) + i;
      for (int h = 0; h < H; ++h) {
        const float* q = &pre.q[(static_cast<std::size_t>(row) * H + h) * D];
        logits.assign(static_cast<std::size_t>(pos + 1 - first), 0.0);
        for (int t = first; t <= pos; ++t) {
          const float* k = &pre.k[s][(static_cast<std::size_t>(t) * G + h / ratio) * D];
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += static_cast<double>(q[d]) * k[d];
          double x = dot * scale;
          if (c.logits_soft_cap) x = *c.logits_soft_cap * std::tanh(x / *c.logits_soft_cap);
          if (!slopes.empty()) x += slopes[h] * static_cast<double>(t - pos);
          logits[t - first] = x;
        }
        f(s, row, h, first, logits);
      }
    }
}

const std::vector<double>& row_max_logits(const Case& c) {
  // Computed once per case id: the expected failures ask for a case once per cell (and per cell after it).
  static std::mutex mu;
  static std::unordered_map<std::string, std::vector<double>> cache;
  const std::string id = c.id();
  {
    const std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(id); it != cache.end()) return it->second;
  }
  const std::size_t H = static_cast<std::size_t>(c.num_heads);
  std::vector<double> out(static_cast<std::size_t>(c.num_query_tokens()) * H, -std::numeric_limits<double>::infinity());
  for_each_row_logits(c, generate(c, KvDraw::k_only), [&](int, int row, int h, int, const std::vector<double>& logits) {
    double& m = out[static_cast<std::size_t>(row) * H + static_cast<std::size_t>(h)];
    for (double x : logits) m = std::max(m, x);
  });
  const std::lock_guard<std::mutex> lock(mu);
  return cache.emplace(id, std::move(out)).first->second;
}

}  // namespace pacheck::cpu
