/*
 * example.cpu_reference: a pacheck plugin kernel in plain C99 -- the template for testing a kernel that
 * lives in its own repository. Build it as a shared library against include/pacheck/kernel_abi.h and run
 *     pacheck run --plugin ./libpacheck_example_plugin.so
 *
 * The kernel is a straightforward paged decode: for each sequence and query head it follows block_tables
 * into the pool, reads the first seq_lens[s] tokens only (the unwritten tail of the final block holds
 * poison on purpose), and computes softmax(scale * q.K^T) V in fp32. Every pointer and stride comes from
 * pacheck_kernel_args, so the one function serves all three layouts and all three dtypes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pacheck/kernel_abi.h"

PACHECK_PLUGIN_DEFINE_ABI_VERSION;

/* ---- element conversions (bit-exact, round to nearest even) ---- */

static float bits_to_f32(uint32_t b) {
  float f;
  memcpy(&f, &b, 4);
  return f;
}

static float f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0) return sign ? -ldexpf((float)m, -24) : ldexpf((float)m, -24); /* zero or subnormal */
  if (e == 31) return bits_to_f32(sign | 0x7F800000u | (m << 13));         /* Inf or NaN */
  return bits_to_f32(sign | ((e + 112u) << 23) | (m << 13));
}

static uint16_t f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xFFu;
  uint32_t mant = x & 0x7FFFFFu;
  if (exp == 0xFF) return (uint16_t)(sign | 0x7C00u | (mant ? 0x200u : 0u));
  const int e = (int)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7C00u);
  if (e <= 0) { /* f16 subnormal: shift the full 24-bit significand down, rounding the bits shifted out */
    if (e < -10) return (uint16_t)sign;
    mant |= 0x800000u;
    const unsigned shift = (unsigned)(14 - e);
    const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    uint32_t m = mant >> shift;
    if (rem > half || (rem == half && (m & 1u))) ++m;
    return (uint16_t)(sign | m);
  }
  uint32_t h = ((uint32_t)e << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h; /* a carry into the exponent is still right */
  return (uint16_t)(sign | h);
}

static uint16_t f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x40u); /* keep NaN a NaN */
  return (uint16_t)((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

static float load(const void* base, int64_t i, pacheck_dtype t) {
  switch (t) {
    case PACHECK_DTYPE_F32: return ((const float*)base)[i];
    case PACHECK_DTYPE_F16: return f16_to_f32(((const uint16_t*)base)[i]);
    case PACHECK_DTYPE_BF16: return bits_to_f32((uint32_t)((const uint16_t*)base)[i] << 16);
    default: return NAN;
  }
}

static void store(void* base, int64_t i, pacheck_dtype t, float v) {
  switch (t) {
    case PACHECK_DTYPE_F32: ((float*)base)[i] = v; break;
    case PACHECK_DTYPE_F16: ((uint16_t*)base)[i] = f32_to_f16(v); break;
    case PACHECK_DTYPE_BF16: ((uint16_t*)base)[i] = f32_to_bf16(v); break;
    default: break;
  }
}

/* ---- the kernel ---- */

/* Element offset of key (block, kv head g, slot, dim d) in the layouts of pacheck_layout. */
static int64_t key_off(const pacheck_kernel_args* a, int64_t block, int g, int slot, int d, int x) {
  const int64_t* s = a->k_strides;
  switch (a->layout) {
    case PACHECK_LAYOUT_VLLM: return block * s[0] + g * s[1] + (d / x) * s[2] + slot * s[3] + (d % x) * s[4];
    case PACHECK_LAYOUT_NHD: return block * s[0] + slot * s[1] + g * s[2] + d * s[3];
    default: return block * s[0] + g * s[1] + slot * s[2] + d * s[3];
  }
}

static int64_t value_off(const pacheck_kernel_args* a, int64_t block, int g, int slot, int d) {
  const int64_t* s = a->v_strides;
  switch (a->layout) {
    case PACHECK_LAYOUT_VLLM: return block * s[0] + g * s[1] + d * s[2] + slot * s[3];
    case PACHECK_LAYOUT_NHD: return block * s[0] + slot * s[1] + g * s[2] + d * s[3];
    default: return block * s[0] + g * s[1] + slot * s[2] + d * s[3];
  }
}

#define MAX_HEAD_SIZE 512

static pacheck_status supports(void* user, const pacheck_case_info* c, char* reason, size_t reason_size) {
  (void)user;
  /* The descriptor's lists cover layouts and dtypes; this callback shows how to decline the rest. */
  if (c->head_size > MAX_HEAD_SIZE) {
    snprintf(reason, reason_size, "head_size %d: this kernel's stack buffers hold at most %d", c->head_size,
             MAX_HEAD_SIZE);
    return PACHECK_DECLINED;
  }
  return PACHECK_OK;
}

static pacheck_status run(void* user, const pacheck_kernel_args* a, char* error, size_t error_size) {
  (void)user;
  const int D = a->head_size, ratio = a->num_heads / a->num_kv_heads;
  const int x = 16 / (a->kv_dtype == PACHECK_DTYPE_F32 ? 4 : 2);
  int max_len = 0;
  for (int s = 0; s < a->num_seqs; ++s)
    if (a->seq_lens[s] > max_len) max_len = a->seq_lens[s];
  float* logits = malloc(sizeof(float) * (size_t)(max_len > 0 ? max_len : 1));
  if (!logits) {
    snprintf(error, error_size, "out of memory for %d logits", max_len);
    return PACHECK_ERROR;
  }
  float q[MAX_HEAD_SIZE], acc[MAX_HEAD_SIZE];
  for (int s = 0; s < a->num_seqs; ++s) {
    const int len = a->seq_lens[s];
    for (int h = 0; h < a->num_heads; ++h) {
      const int g = h / ratio;
      for (int d = 0; d < D; ++d) q[d] = load(a->query, s * a->q_stride_seq + h * a->q_stride_head + d, a->q_dtype);
      float m = -INFINITY;
      for (int t = 0; t < len; ++t) {
        const int64_t block = a->block_tables[s * a->block_tables_stride + t / a->block_size];
        float dot = 0.0f;
        for (int d = 0; d < D; ++d)
          dot += q[d] * load(a->key_cache, key_off(a, block, g, t % a->block_size, d, x), a->kv_dtype);
        logits[t] = dot * a->scale * a->k_scale;
        if (logits[t] > m) m = logits[t];
      }
      /* Softmax weights normalised before P.V: the accumulator is a convex combination of V, so V near the
         fp32 limit cannot overflow it (an unnormalised sum of p * V can). */
      float sum = 0.0f;
      for (int t = 0; t < len; ++t) sum += (logits[t] = expf(logits[t] - m));
      for (int d = 0; d < D; ++d) acc[d] = 0.0f;
      for (int t = 0; t < len; ++t) {
        const int64_t block = a->block_tables[s * a->block_tables_stride + t / a->block_size];
        const float w = logits[t] / sum;
        for (int d = 0; d < D; ++d)
          acc[d] += w * load(a->value_cache, value_off(a, block, g, t % a->block_size, d), a->kv_dtype);
      }
      for (int d = 0; d < D; ++d)
        store(a->out, s * a->out_stride_seq + h * a->out_stride_head + d, a->out_dtype, acc[d] * a->v_scale);
    }
  }
  free(logits);
  return PACHECK_OK;
}

pacheck_status pacheck_register_kernels(pacheck_registrar* r) {
  static const pacheck_layout layouts[] = {PACHECK_LAYOUT_NHD, PACHECK_LAYOUT_HND, PACHECK_LAYOUT_VLLM};
  static const pacheck_dtype dtypes[] = {PACHECK_DTYPE_BF16, PACHECK_DTYPE_F16, PACHECK_DTYPE_F32};
  pacheck_kernel_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.name = "example.cpu_reference";
  d.description = "example plugin (examples/plugin): C99 paged decode, fp32 softmax, valid slots only";
  d.device = PACHECK_DEVICE_CPU;
  d.layouts = layouts;
  d.num_layouts = 3;
  d.q_dtypes = d.kv_dtypes = d.out_dtypes = dtypes;
  d.num_q_dtypes = d.num_kv_dtypes = d.num_out_dtypes = 3;
  /* head_sizes, block_sizes, gqa_ratios left empty: any value (supports() declines head sizes > 512). */
  d.supports = supports;
  d.run = run;
  return r->add_kernel(r, &d);
}
