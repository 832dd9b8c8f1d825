// A plugin written in C++ (issue 17): compiled with -Wall -Wextra -Werror against include/pacheck/kernel_abi.h,
// it checks that the header and PACHECK_PLUGIN_DEFINE_ABI_VERSION compile cleanly as C++ (GCC warned
// "visibility attribute ignored" before ABI v2) and that a C++ kernel loads and passes.
//
// cxx.reference: f32 query, cache and output in the NHD layout, one query token per sequence, computed in
// double from the first seq_lens[s] tokens only. Every other case is declined by the descriptor's lists.
#include <cmath>
#include <cstdint>
#include <vector>

#include "pacheck/kernel_abi.h"

PACHECK_PLUGIN_DEFINE_ABI_VERSION;

namespace {

pacheck_status run_reference(void*, const pacheck_kernel_args* a, char*, std::size_t) {
  const auto* q = static_cast<const float*>(a->query);
  const auto* k = static_cast<const float*>(a->key_cache);
  const auto* v = static_cast<const float*>(a->value_cache);
  auto* out = static_cast<float*>(a->out);
  const int ratio = a->num_heads / a->num_kv_heads;
  std::vector<double> logits;
  for (int s = 0; s < a->num_seqs; ++s) {
    const int len = a->seq_lens_host[s];  // the v2 host copy: no device round trip needed
    logits.assign(static_cast<std::size_t>(len), 0.0);
    for (int h = 0; h < a->num_heads; ++h) {
      const int g = h / ratio;
      auto slot = [&](const float* base, const std::int64_t* st, int t) {
        const std::int32_t block = a->block_tables[s * a->block_tables_stride + t / a->block_size];
        return base + block * st[0] + (t % a->block_size) * st[1] + g * st[2];
      };
      const float* qh = q + s * a->q_stride_seq + h * a->q_stride_head;
      double m = -INFINITY;
      for (int t = 0; t < len; ++t) {
        const float* kt = slot(k, a->k_strides, t);
        double dot = 0;
        for (int d = 0; d < a->head_size; ++d) dot += static_cast<double>(qh[d]) * kt[d];
        logits[static_cast<std::size_t>(t)] = dot * a->scale;
        m = std::fmax(m, logits[static_cast<std::size_t>(t)]);
      }
      double sum = 0;
      for (double& l : logits) sum += (l = std::exp(l - m));
      float* oh = out + s * a->out_stride_seq + h * a->out_stride_head;
      for (int d = 0; d < a->head_size; ++d) {
        double acc = 0;
        for (int t = 0; t < len; ++t) acc += logits[static_cast<std::size_t>(t)] * slot(v, a->v_strides, t)[d];
        oh[d] = static_cast<float>(acc / sum);
      }
    }
  }
  return PACHECK_OK;
}

}  // namespace

extern "C" pacheck_status pacheck_register_kernels(pacheck_registrar* r) {
  static const pacheck_layout layouts[] = {PACHECK_LAYOUT_NHD};
  static const pacheck_dtype f32[] = {PACHECK_DTYPE_F32};
  pacheck_kernel_desc d{};
  d.struct_size = sizeof d;
  d.name = "cxx.reference";
  d.description = "a C++ plugin: f32 NHD reference in double";
  d.device = PACHECK_DEVICE_CPU;
  d.layouts = layouts;
  d.num_layouts = 1;
  d.q_dtypes = d.kv_dtypes = d.out_dtypes = f32;
  d.num_q_dtypes = d.num_kv_dtypes = d.num_out_dtypes = 1;
  d.run = run_reference;
  return r->add_kernel(r, &d);
}
