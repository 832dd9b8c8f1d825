/* A planted plugin for the isolation tests (issue 8): CPU kernels that compute decode attention correctly
 * (NHD layout, f32) except on the one cell whose first sequence has kTrigger tokens, where each misbehaves
 * in its own way: segfault, abort, hang, write past the output, or return an error. `planted.ok` never
 * misbehaves. Loaded with `pacheck run --plugin libmisbehaving.so`; plugin kernels run isolated by default,
 * so each misbehaviour must cost exactly that cell. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pacheck/kernel_abi.h"

PACHECK_PLUGIN_DEFINE_ABI_VERSION;

enum { kTrigger = 33 };
typedef enum { OK, SEGFAULT, ABORT, HANG, OOB_WRITE, ERROR } misbehaviour;
static misbehaviour kinds[] = {OK, SEGFAULT, ABORT, HANG, OOB_WRITE, ERROR};
static const char* names[] = {"planted.ok", "planted.segfault", "planted.abort", "planted.hang", "planted.oob_write",
                              "planted.error"};

/* out[s, h, :] = softmax(scale * q . K^T) V over the first seq_lens[s] tokens, in double. */
static void attention(const pacheck_kernel_args* a) {
  const float* q = (const float*)a->query;
  const float* k = (const float*)a->key_cache;
  const float* v = (const float*)a->value_cache;
  float* out = (float*)a->out;
  const int group = a->num_heads / a->num_kv_heads;
  for (int s = 0; s < a->num_seqs; ++s) {
    const int len = a->seq_lens[s];
    double* p = malloc(sizeof(double) * (size_t)len);
    for (int h = 0; h < a->num_heads; ++h) {
      const int kvh = h / group;
      const float* qh = q + s * a->q_stride_seq + h * a->q_stride_head;
      double max = -INFINITY, sum = 0;
      for (int t = 0; t < len; ++t) {
        const int64_t block = a->block_tables[s * a->block_tables_stride + t / a->block_size];
        const float* kt = k + block * a->k_strides[0] + (t % a->block_size) * a->k_strides[1] + kvh * a->k_strides[2];
        double dot = 0;
        for (int d = 0; d < a->head_size; ++d) dot += (double)qh[d] * kt[d * a->k_strides[3]];
        p[t] = dot * a->scale;
        if (p[t] > max) max = p[t];
      }
      for (int t = 0; t < len; ++t) sum += (p[t] = exp(p[t] - max));
      for (int d = 0; d < a->head_size; ++d) {
        double acc = 0;
        for (int t = 0; t < len; ++t) {
          const int64_t block = a->block_tables[s * a->block_tables_stride + t / a->block_size];
          acc += p[t] * v[block * a->v_strides[0] + (t % a->block_size) * a->v_strides[1] + kvh * a->v_strides[2] +
                          d * a->v_strides[3]];
        }
        out[s * a->out_stride_seq + h * a->out_stride_head + d] = (float)(acc / sum);
      }
    }
    free(p);
  }
}

/* PACHECK_TEST_PLUGIN_EXIT=run or =supports: every kernel calls exit(0) from run() or supports() (a library that
 * ends its host process: in process, pacheck must not exit 0 as if the run had passed). */
static int exits_in(const char* where) {
  const char* e = getenv("PACHECK_TEST_PLUGIN_EXIT");
  return e && strcmp(e, where) == 0;
}

static pacheck_status run(void* user_data, const pacheck_kernel_args* a, char* error, size_t error_size) {
  if (exits_in("run")) exit(0);
  attention(a);
  if (a->seq_lens[0] != kTrigger) return PACHECK_OK;
  switch (*(const misbehaviour*)user_data) {
    case SEGFAULT: {
      volatile int* volatile p = NULL;
      *p = 42;
      break;
    }
    case ABORT: abort();
    case HANG: {
      volatile unsigned long spin = 0;
      for (;;) spin = spin + 1;
    }
    case OOB_WRITE: ((float*)a->out)[(size_t)a->num_seqs * a->num_heads * a->head_size] = 1.0f; break;
    case ERROR: snprintf(error, error_size, "planted: cudaErrorLaunchFailure (simulated)"); return PACHECK_ERROR;
    case OK: break;
  }
  return PACHECK_OK;
}

/* PACHECK_TEST_PLUGIN_SUPPORTS=segfault: every kernel's supports() dies (pacheck asks it in a child process
 * and must report each cell as an error, in the live table and results.jsonl). */
static pacheck_status supports_dies(void* user_data, const pacheck_case_info* c, char* reason, size_t reason_size) {
  (void)user_data;
  (void)c;
  (void)reason;
  (void)reason_size;
  raise(SIGSEGV);
  return PACHECK_OK;
}

/* PACHECK_TEST_PLUGIN_SUPPORTS=error: supports() cannot tell (PACHECK_ERROR): every cell is an `error` in run
 * and in repro, never a decline. */
static pacheck_status supports_errs(void* user_data, const pacheck_case_info* c, char* reason, size_t reason_size) {
  (void)user_data;
  (void)c;
  snprintf(reason, reason_size, "planted: cannot tell");
  return PACHECK_ERROR;
}

/* PACHECK_TEST_PLUGIN_EXIT=supports: supports() calls exit(0). */
static pacheck_status supports_exits(void* user_data, const pacheck_case_info* c, char* reason, size_t reason_size) {
  (void)user_data;
  (void)c;
  (void)reason;
  (void)reason_size;
  exit(0);
}

pacheck_status pacheck_register_kernels(pacheck_registrar* r) {
  /* PACHECK_TEST_PLUGIN_LOAD=segfault or =abort: die while being registered (pacheck must name the plugin and
   * exit 2, not die with it). */
  const char* load = getenv("PACHECK_TEST_PLUGIN_LOAD");
  if (load && strcmp(load, "segfault") == 0) raise(SIGSEGV);
  if (load && strcmp(load, "abort") == 0) abort();
  static const pacheck_layout layouts[] = {PACHECK_LAYOUT_NHD};
  static const pacheck_dtype f32[] = {PACHECK_DTYPE_F32};
  /* PACHECK_TEST_PLUGIN_ONLY=NAME: register only that kernel (a plugin of one kernel). */
  const char* only = getenv("PACHECK_TEST_PLUGIN_ONLY");
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; ++i) {
    if (only && *only && strcmp(only, names[i]) != 0) continue;
    pacheck_kernel_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.name = names[i];
    d.description = "planted misbehaviour on the ctx33 cell (tests/plugins/misbehaving.c)";
    d.device = PACHECK_DEVICE_CPU;
    d.layouts = layouts;
    d.num_layouts = 1;
    d.q_dtypes = d.kv_dtypes = d.out_dtypes = f32;
    d.num_q_dtypes = d.num_kv_dtypes = d.num_out_dtypes = 1;
    d.run = run;
    const char* sup = getenv("PACHECK_TEST_PLUGIN_SUPPORTS");
    if (sup && strcmp(sup, "segfault") == 0) d.supports = supports_dies;
    if (sup && strcmp(sup, "error") == 0) d.supports = supports_errs;
    if (exits_in("supports")) d.supports = supports_exits;
    d.user_data = &kinds[i];
    if (r->add_kernel(r, &d) != PACHECK_OK) return PACHECK_ERROR;
  }
  return PACHECK_OK;
}
