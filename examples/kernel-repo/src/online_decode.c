/*
 * kr.online_decode: a paged-attention decode kernel in C99 for the CPU, the kernel of this example kernel
 * repository. One pass over each sequence's valid tokens with an online softmax (running max m, running
 * sum l, an fp32 accumulator rescaled when m grows), divided by l at the end: the FlashAttention-2 decode
 * recurrence. Only the first seq_lens[s] tokens are read, so poison in a final block's tail, in unused
 * blocks or behind block-table padding never reaches the output.
 *
 * The same file is the plugin (src/ built as a MODULE, run by `pacheck run --plugin`) and part of the
 * GoogleTest binary (tests/cells_test.cpp calls pacheck_register_kernels directly).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pacheck/kernel_abi.h>

PACHECK_PLUGIN_DEFINE_ABI_VERSION;

enum { KR_MAX_HEAD_SIZE = 1024 };

static float bf16_to_float(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint16_t float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN stays a quiet NaN */
  u += 0x7FFFu + ((u >> 16) & 1u);                                            /* round to nearest even */
  return (uint16_t)(u >> 16);
}

/* IEEE binary16 <-> binary32, round to nearest even, subnormals and Inf/NaN included. */
static float f16_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  float f;
  if (exp == 0) {
    f = ldexpf((float)man, -24);
    return sign ? -f : f;
  }
  uint32_t u = exp == 31 ? sign | 0x7F800000u | (man << 13) : sign | ((exp + 112u) << 23) | (man << 13);
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint16_t float_to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u;                  /* NaN */
  if (a >= 0x477FF000u) return sign | 0x7C00u;                 /* rounds to Inf (>= 65520) or is Inf */
  if (a < 0x38800000u) {                                       /* below the smallest normal: subnormal */
    const float m = ldexpf(fabsf(f), 24);                      /* exact: units of 2^-24 */
    return sign | (uint16_t)lrintf(m);                         /* lrintf rounds to nearest even */
  }
  uint32_t r = a + 0xFFFu + ((a >> 13) & 1u);                  /* round the 13 dropped bits to nearest even */
  return sign | (uint16_t)(((r >> 13) - (112u << 10)) & 0x7FFFu);
}

static float load(const void* base, int64_t i, pacheck_dtype t) {
  switch (t) {
    case PACHECK_DTYPE_F32: return ((const float*)base)[i];
    case PACHECK_DTYPE_F16: return f16_to_float(((const uint16_t*)base)[i]);
    case PACHECK_DTYPE_BF16: return bf16_to_float(((const uint16_t*)base)[i]);
    default: return NAN;
  }
}

static void store(void* base, int64_t i, pacheck_dtype t, float v) {
  switch (t) {
    case PACHECK_DTYPE_F32: ((float*)base)[i] = v; break;
    case PACHECK_DTYPE_F16: ((uint16_t*)base)[i] = float_to_f16(v); break;
    case PACHECK_DTYPE_BF16: ((uint16_t*)base)[i] = float_to_bf16(v); break;
    default: break;
  }
}

/* Element offset of key / value element d of token `slot` of KV head g in physical block `block`, from the
 * layout and strides pacheck passes (kernel_abi.h: VLLM keys are [blocks, kv_heads, head_size/x, block, x]). */
static int64_t key_at(const pacheck_kernel_args* a, int64_t block, int g, int slot, int d) {
  const int64_t* s = a->k_strides;
  const int x = a->kv_dtype == PACHECK_DTYPE_F32 ? 4 : 8; /* 16 bytes of elements */
  if (a->layout == PACHECK_LAYOUT_VLLM) return block * s[0] + g * s[1] + (d / x) * s[2] + slot * s[3] + (d % x) * s[4];
  if (a->layout == PACHECK_LAYOUT_NHD) return block * s[0] + slot * s[1] + g * s[2] + d * s[3];
  return block * s[0] + g * s[1] + slot * s[2] + d * s[3];
}

static int64_t value_at(const pacheck_kernel_args* a, int64_t block, int g, int slot, int d) {
  const int64_t* s = a->v_strides;
  if (a->layout == PACHECK_LAYOUT_VLLM) return block * s[0] + g * s[1] + d * s[2] + slot * s[3];
  if (a->layout == PACHECK_LAYOUT_NHD) return block * s[0] + slot * s[1] + g * s[2] + d * s[3];
  return block * s[0] + g * s[1] + slot * s[2] + d * s[3];
}

static pacheck_status supports(void* user, const pacheck_case_info* c, char* reason, size_t reason_size) {
  (void)user;
  if (c->head_size > KR_MAX_HEAD_SIZE) {
    snprintf(reason, reason_size, "head_size %d: at most %d", c->head_size, KR_MAX_HEAD_SIZE);
    return PACHECK_DECLINED;
  }
  return PACHECK_OK;
}

static pacheck_status run(void* user, const pacheck_kernel_args* a, char* error, size_t error_size) {
  (void)user, (void)error, (void)error_size;
  const int D = a->head_size, ratio = a->num_heads / a->num_kv_heads;
  float q[KR_MAX_HEAD_SIZE], acc[KR_MAX_HEAD_SIZE];
  for (int s = 0; s < a->num_seqs; ++s) {
    const int len = a->seq_lens_host[s];
    for (int h = 0; h < a->num_heads; ++h) {
      const int g = h / ratio;
      for (int d = 0; d < D; ++d) {
        q[d] = load(a->query, s * a->q_stride_seq + h * a->q_stride_head + d, a->q_dtype);
        acc[d] = 0.0f;
      }
      float m = -INFINITY, l = 0.0f;
      for (int t = 0; t < len; ++t) {
        const int64_t block = a->block_tables[s * a->block_tables_stride + t / a->block_size];
        const int slot = t % a->block_size;
        float dot = 0.0f;
        for (int d = 0; d < D; ++d) dot += q[d] * load(a->key_cache, key_at(a, block, g, slot, d), a->kv_dtype);
        const float logit = dot * a->scale * a->k_scale;
        if (logit > m) { /* rescale what was summed under the old max */
          const float c = expf(m - logit);
          l *= c;
          for (int d = 0; d < D; ++d) acc[d] *= c;
          m = logit;
        }
        const float p = expf(logit - m);
        l += p;
        for (int d = 0; d < D; ++d) acc[d] += p * load(a->value_cache, value_at(a, block, g, slot, d), a->kv_dtype);
      }
      for (int d = 0; d < D; ++d)
        store(a->out, s * a->out_stride_seq + h * a->out_stride_head + d, a->out_dtype, acc[d] / l * a->v_scale);
    }
  }
  return PACHECK_OK;
}

pacheck_status pacheck_register_kernels(pacheck_registrar* r) {
  static const pacheck_layout layouts[] = {PACHECK_LAYOUT_NHD, PACHECK_LAYOUT_HND, PACHECK_LAYOUT_VLLM};
  static const pacheck_dtype dtypes[] = {PACHECK_DTYPE_BF16, PACHECK_DTYPE_F16, PACHECK_DTYPE_F32};
  pacheck_kernel_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.name = "kr.online_decode";
  d.description = "examples/kernel-repo: C99 online-softmax paged decode, valid slots only";
  d.device = PACHECK_DEVICE_CPU;
  d.layouts = layouts;
  d.num_layouts = 3;
  d.q_dtypes = d.kv_dtypes = d.out_dtypes = dtypes;
  d.num_q_dtypes = d.num_kv_dtypes = d.num_out_dtypes = 3;
  d.supports = supports;
  d.run = run;
  return r->add_kernel(r, &d);
}
