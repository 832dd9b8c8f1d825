/*
 * cells.tail_v: a planted faulty CPU kernel for the pacheck::gtest tests (tests/cells/). It computes decode
 * attention correctly except that it reads V over the whole final block of each sequence, with weight 0 for
 * the slots past seq_len: 0 x NaN = NaN, 0 x Inf = NaN, so a non-finite poison in the V tail (region tail or
 * all) of a sequence that straddles a block reaches the output, and nothing else changes it. Registered
 * through cells_tail_v_register (linked into the gtest fixture) and, built as a MODULE, through
 * pacheck_register_kernels (the same kernel for `pacheck list cells` / `pacheck run --plugin`).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pacheck/kernel_abi.h"

PACHECK_PLUGIN_DEFINE_ABI_VERSION;

enum { MAX_D = 512 };

static float load(const void* p, int64_t i, pacheck_dtype t) {
  uint32_t u;
  float f;
  switch (t) {
    case PACHECK_DTYPE_F32: return ((const float*)p)[i];
    case PACHECK_DTYPE_BF16:
      u = (uint32_t)((const uint16_t*)p)[i] << 16;
      memcpy(&f, &u, sizeof f);
      return f;
    case PACHECK_DTYPE_F16: return (float)((const _Float16*)p)[i];
    default: return NAN;
  }
}

static void store(void* p, int64_t i, pacheck_dtype t, float v) {
  uint32_t u;
  switch (t) {
    case PACHECK_DTYPE_F32: ((float*)p)[i] = v; break;
    case PACHECK_DTYPE_BF16:
      memcpy(&u, &v, sizeof u);
      if ((u & 0x7FFFFFFFu) > 0x7F800000u) u |= 0x00400000u;
      else u += 0x7FFFu + ((u >> 16) & 1u);
      ((uint16_t*)p)[i] = (uint16_t)(u >> 16);
      break;
    case PACHECK_DTYPE_F16: ((_Float16*)p)[i] = (_Float16)v; break;
    default: break;
  }
}

static int64_t kv_at(const pacheck_kernel_args* a, const int64_t* s, int is_key, int64_t block, int g, int slot, int d) {
  const int x = a->kv_dtype == PACHECK_DTYPE_F32 ? 4 : 8;
  if (a->layout == PACHECK_LAYOUT_VLLM)
    return is_key ? block * s[0] + g * s[1] + (d / x) * s[2] + slot * s[3] + (d % x) * s[4]
                  : block * s[0] + g * s[1] + d * s[2] + slot * s[3];
  if (a->layout == PACHECK_LAYOUT_NHD) return block * s[0] + slot * s[1] + g * s[2] + d * s[3];
  return block * s[0] + g * s[1] + slot * s[2] + d * s[3];
}

static pacheck_status supports(void* u, const pacheck_case_info* c, char* reason, size_t n) {
  (void)u;
  if (c->head_size > MAX_D) return snprintf(reason, n, "head_size %d > %d", c->head_size, MAX_D), PACHECK_DECLINED;
  return PACHECK_OK;
}

static pacheck_status run(void* u, const pacheck_kernel_args* a, char* error, size_t n) {
  (void)u, (void)error, (void)n;
  const int D = a->head_size, B = a->block_size, ratio = a->num_heads / a->num_kv_heads;
  float q[MAX_D], acc[MAX_D];
  for (int s = 0; s < a->num_seqs; ++s) {
    const int len = a->seq_lens_host[s], padded = (len + B - 1) / B * B;
    for (int h = 0; h < a->num_heads; ++h) {
      const int g = h / ratio;
      for (int d = 0; d < D; ++d) q[d] = load(a->query, s * a->q_stride_seq + h * a->q_stride_head + d, a->q_dtype), acc[d] = 0;
      float m = -INFINITY, sum = 0;
      for (int t = 0; t < len; ++t) {
        const int64_t blk = a->block_tables[s * a->block_tables_stride + t / B];
        float dot = 0;
        for (int d = 0; d < D; ++d) dot += q[d] * load(a->key_cache, kv_at(a, a->k_strides, 1, blk, g, t % B, d), a->kv_dtype);
        dot *= a->scale;
        if (dot > m) m = dot;
      }
      for (int t = 0; t < len; ++t) {
        const int64_t blk = a->block_tables[s * a->block_tables_stride + t / B];
        float dot = 0;
        for (int d = 0; d < D; ++d) dot += q[d] * load(a->key_cache, kv_at(a, a->k_strides, 1, blk, g, t % B, d), a->kv_dtype);
        sum += expf(dot * a->scale - m);
      }
      /* The fault: V is read for every slot of the final block, the tail weighted by 0 rather than skipped. */
      for (int t = 0; t < padded; ++t) {
        const int64_t blk = a->block_tables[s * a->block_tables_stride + t / B];
        float w = 0;
        if (t < len) {
          float dot = 0;
          for (int d = 0; d < D; ++d) dot += q[d] * load(a->key_cache, kv_at(a, a->k_strides, 1, blk, g, t % B, d), a->kv_dtype);
          w = expf(dot * a->scale - m) / sum;
        }
        for (int d = 0; d < D; ++d) acc[d] += w * load(a->value_cache, kv_at(a, a->v_strides, 0, blk, g, t % B, d), a->kv_dtype);
      }
      for (int d = 0; d < D; ++d) store(a->out, s * a->out_stride_seq + h * a->out_stride_head + d, a->out_dtype, acc[d]);
    }
  }
  return PACHECK_OK;
}

pacheck_status cells_tail_v_register(pacheck_registrar* r) {
  static const pacheck_layout layouts[] = {PACHECK_LAYOUT_NHD, PACHECK_LAYOUT_HND, PACHECK_LAYOUT_VLLM};
  static const pacheck_dtype dtypes[] = {PACHECK_DTYPE_BF16, PACHECK_DTYPE_F16, PACHECK_DTYPE_F32};
  pacheck_kernel_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.name = "cells.tail_v";
  d.description = "planted (tests/cells): V read over the whole final block, tail weighted by 0";
  d.device = PACHECK_DEVICE_CPU;
  d.layouts = layouts;
  d.num_layouts = 3;
  d.q_dtypes = d.kv_dtypes = d.out_dtypes = dtypes;
  d.num_q_dtypes = d.num_kv_dtypes = d.num_out_dtypes = 3;
  d.supports = supports;
  d.run = run;
  return r->add_kernel(r, &d);
}

pacheck_status pacheck_register_kernels(pacheck_registrar* r) { return cells_tail_v_register(r); }
