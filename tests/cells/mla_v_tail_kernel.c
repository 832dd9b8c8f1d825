/*
 * cells.mla_v_tail: a planted faulty MLA decode kernel (ABI version 4, PACHECK_KERNEL_MLA) for the
 * pacheck::gtest tests (tests/cells/). One bf16 latent cache [num_blocks, block_size, 1, head_size] in the NHD
 * layout, head_size = kv_lora_rank + qk_rope_head_dim; the logits are q . row over the whole row times `scale`,
 * the output the softmax-weighted sum of each row's first v_head_dim values (V is a prefix of the row). It is
 * correct except that V is read over the whole final block with weight 0 past each query row's last key, so a
 * non-finite poison in the V part of the tail reaches the output (0 x NaN = NaN) and nothing else changes it:
 * the fault of FlashInfer #941's class and of pacheck's cpu.mla_v_tail. Registered through
 * cells_mla_v_tail_register (linked into the gtest fixture) and, built as a MODULE, pacheck_register_kernels.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pacheck/kernel_abi.h"

#ifndef PACHECK_CELLS_FIXTURE_LINKED /* linked into the fixture beside tail_v_kernel.c, whose entry points serve */
PACHECK_PLUGIN_DEFINE_ABI_VERSION;   /* 4 or later: the MLA fields */
#endif

enum { MAX_W = 1024 };

static float bf16_at(const void* p, int64_t i) {
  uint32_t u = (uint32_t)((const uint16_t*)p)[i] << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static void bf16_store(void* p, int64_t i, float v) {
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) u |= 0x00400000u;  /* NaN stays NaN */
  else u += 0x7FFFu + ((u >> 16) & 1u);                 /* round to nearest even */
  ((uint16_t*)p)[i] = (uint16_t)(u >> 16);
}

static pacheck_status supports(void* u, const pacheck_case_info* c, char* reason, size_t n) {
  (void)u;
  if (c->head_size > MAX_W) return snprintf(reason, n, "head_size %d > %d", c->head_size, MAX_W), PACHECK_DECLINED;
  return PACHECK_OK;
}

/* Element d of token t's latent row in sequence s. */
static float row_at(const pacheck_kernel_args* a, int s, int t, int d) {
  const int64_t blk = a->block_tables[s * a->block_tables_stride + t / a->block_size];
  return bf16_at(a->key_cache, blk * a->k_strides[0] + (t % a->block_size) * a->k_strides[1] + d * a->k_strides[3]);
}

/* One query row `row` of sequence s whose last visible key is keys - 1; V is read to v_end >= keys. */
static void mla_row(const pacheck_kernel_args* a, int s, int row, int keys, int v_end) {
  const int W = a->head_size, V = a->v_head_dim;
  float q[MAX_W], acc[MAX_W];
  for (int h = 0; h < a->num_heads; ++h) {
    for (int d = 0; d < W; ++d) q[d] = bf16_at(a->query, row * a->q_stride_seq + h * a->q_stride_head + d);
    for (int d = 0; d < V; ++d) acc[d] = 0;
    float m = -INFINITY, sum = 0;
    for (int t = 0; t < keys; ++t) {
      float dot = 0;
      for (int d = 0; d < W; ++d) dot += q[d] * row_at(a, s, t, d);
      if (dot * a->scale > m) m = dot * a->scale;
    }
    for (int t = 0; t < v_end; ++t) {
      float w = 0; /* the fault: slots past the last key are read with weight 0, not skipped */
      if (t < keys) {
        float dot = 0;
        for (int d = 0; d < W; ++d) dot += q[d] * row_at(a, s, t, d);
        w = expf(dot * a->scale - m);
        sum += w;
      }
      for (int d = 0; d < V; ++d) acc[d] += w * row_at(a, s, t, d);
    }
    for (int d = 0; d < V; ++d) bf16_store(a->out, row * a->out_stride_seq + h * a->out_stride_head + d, acc[d] / sum);
  }
}

static pacheck_status run(void* u, const pacheck_kernel_args* a, char* error, size_t n) {
  (void)u;
  if (a->kv_lora_rank <= 0 || a->v_head_dim <= 0 || a->v_head_dim > a->head_size)
    return snprintf(error, n, "not an MLA call: kv_lora_rank %d, v_head_dim %d", a->kv_lora_rank, a->v_head_dim),
           PACHECK_ERROR;
  for (int s = 0; s < a->num_seqs; ++s) {
    const int first = a->query_start_loc_host ? a->query_start_loc_host[s] : s;
    const int rows = a->query_start_loc_host ? a->query_start_loc_host[s + 1] - first : 1, len = a->seq_lens_host[s];
    for (int i = 0; i < rows; ++i) {
      const int keys = len - rows + i + 1; /* causal among the sequence's query tokens */
      mla_row(a, s, first + i, keys, (keys + a->block_size - 1) / a->block_size * a->block_size);
    }
  }
  return PACHECK_OK;
}

pacheck_status cells_mla_v_tail_register(pacheck_registrar* r) {
  static const pacheck_layout layouts[] = {PACHECK_LAYOUT_NHD};
  static const pacheck_dtype bf16[] = {PACHECK_DTYPE_BF16};
  pacheck_kernel_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.name = "cells.mla_v_tail";
  d.description = "planted MLA (tests/cells): V read over the whole final block, tail weighted by 0";
  d.device = PACHECK_DEVICE_CPU;
  d.flags = PACHECK_KERNEL_MLA;
  d.layouts = layouts;
  d.num_layouts = 1;
  d.q_dtypes = d.kv_dtypes = d.out_dtypes = bf16;
  d.num_q_dtypes = d.num_kv_dtypes = d.num_out_dtypes = 1;
  d.variants = PACHECK_VARIANT_MULTI_QUERY;
  d.supports = supports;
  d.run = run;
  return r->add_kernel(r, &d);
}

#ifndef PACHECK_CELLS_FIXTURE_LINKED
pacheck_status pacheck_register_kernels(pacheck_registrar* r) { return cells_mla_v_tail_register(r); }
#endif
