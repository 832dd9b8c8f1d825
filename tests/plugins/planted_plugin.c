/*
 * Test plugins for tests/test_plugin.cpp, one shared library per planted defect. Built once per name in
 * tests/plugins/CMakeLists.txt with -DPLANT_<NAME>:
 *   PLANT_OK             valid: kernels that produce each verdict through the plugin adapter
 *   PLANT_WRONG_ABI      pacheck_plugin_abi_version = 999
 *   PLANT_FUTURE_ABI     pacheck_plugin_abi_version = PACHECK_ABI_VERSION + 1 (a later pacheck's plugin)
 *   PLANT_ZERO_ABI       pacheck_plugin_abi_version = 0 (below PACHECK_ABI_MIN_VERSION)
 *   PLANT_NO_REGISTER    pacheck_register_kernels not exported
 *   PLANT_NO_VERSION     pacheck_plugin_abi_version not exported
 *   PLANT_DUP_BUILTIN    registers "cpu.reference" (a built-in name)
 *   PLANT_DUP_SELF       registers "plug.twice" twice
 *   PLANT_NULL_NAME, PLANT_BAD_NAME, PLANT_NULL_RUN, PLANT_BAD_LAYOUT, PLANT_EMPTY_DTYPES, PLANT_DUP_DTYPE, PLANT_NULL_ARRAY,
 *   PLANT_BAD_HEAD_SIZE, PLANT_BAD_DEVICE, PLANT_SMALL_STRUCT, PLANT_UNKNOWN_FLAG, PLANT_NULL_DESC,
 *   PLANT_UNKNOWN_VARIANT, PLANT_UNKNOWN_SCALE_FORM, PLANT_V1_SIZED_DESC, PLANT_OVERSIZED_STRUCT (struct_size
 *   100000), PLANT_V1_WITH_V2_FIELDS (declares ABI 1, sets scale_forms)
 *   PLANT_V1_WITH_V2_SIZE valid: declares ABI 1 with the v2 struct, no v2 field set
 *                        one invalid descriptor field each (the last: a version-2 plugin passing a
 *                        descriptor of the version-1 size)
 *   PLANT_REGISTER_FAILS pacheck_register_kernels returns PACHECK_ERROR with a message
 *   PLANT_NO_KERNELS     returns PACHECK_OK having added nothing
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "pacheck/kernel_abi.h"

#if defined(PLANT_WRONG_ABI)
PACHECK_PLUGIN_EXPORT const uint32_t pacheck_plugin_abi_version = 999;
#elif defined(PLANT_FUTURE_ABI)
PACHECK_PLUGIN_EXPORT const uint32_t pacheck_plugin_abi_version = PACHECK_ABI_VERSION + 1;
#elif defined(PLANT_ZERO_ABI)
PACHECK_PLUGIN_EXPORT const uint32_t pacheck_plugin_abi_version = 0;
#elif defined(PLANT_V1_WITH_V2_FIELDS) || defined(PLANT_V1_WITH_V2_SIZE)
PACHECK_PLUGIN_EXPORT const uint32_t pacheck_plugin_abi_version = 1;
#elif !defined(PLANT_NO_VERSION)
PACHECK_PLUGIN_DEFINE_ABI_VERSION;
#endif

static const pacheck_layout kLayouts[] = {PACHECK_LAYOUT_NHD, PACHECK_LAYOUT_HND, PACHECK_LAYOUT_VLLM};
static const pacheck_dtype kDtypes[] = {PACHECK_DTYPE_BF16, PACHECK_DTYPE_F16, PACHECK_DTYPE_F32};

static void set_bits(void* out, int64_t i, pacheck_dtype t, uint32_t bits) {
  if (t == PACHECK_DTYPE_F32) ((uint32_t*)out)[i] = bits;
  else ((uint16_t*)out)[i] = (uint16_t)bits;
}

static int64_t out_elements(const pacheck_kernel_args* a) {
  return (int64_t)a->num_seqs * a->num_heads * a->head_size;
}

/* Writes +0 into every output element (contiguous outputs, as pacheck passes them). */
static void write_zeros(const pacheck_kernel_args* a, int64_t count) {
  for (int64_t i = 0; i < count; ++i) set_bits(a->out, i, a->out_dtype, 0);
}

static pacheck_status run_error(void* u, const pacheck_kernel_args* a, char* error, size_t n) {
  (void)u;
  (void)a;
  snprintf(error, n, "planted: the device is on fire");
  return PACHECK_ERROR;
}

static pacheck_status run_skip_last(void* u, const pacheck_kernel_args* a, char* error, size_t n) {
  (void)u, (void)error, (void)n;
  write_zeros(a, out_elements(a) - 1);
  return PACHECK_OK;
}

static pacheck_status run_write_past_end(void* u, const pacheck_kernel_args* a, char* error, size_t n) {
  (void)u, (void)error, (void)n;
  write_zeros(a, out_elements(a) + 1);
  return PACHECK_OK;
}

static pacheck_status run_mutate_input(void* u, const pacheck_kernel_args* a, char* error, size_t n) {
  (void)u, (void)error, (void)n;
  write_zeros(a, out_elements(a));
  ((uint8_t*)a->key_cache)[0] ^= 1u; /* the fault: a kernel that scribbles on its input */
  return PACHECK_OK;
}

static pacheck_status run_unknown_status(void* u, const pacheck_kernel_args* a, char* error, size_t n) {
  (void)u, (void)a, (void)error, (void)n;
  return (pacheck_status)42;
}

static pacheck_status supports_short_only(void* u, const pacheck_case_info* c, char* reason, size_t n) {
  (void)u;
  if (c->max_seq_len > 100) {
    snprintf(reason, n, "planted: max_seq_len %d > 100", c->max_seq_len);
    return PACHECK_DECLINED;
  }
  return PACHECK_OK;
}

/* plug.supports_fails: supports() cannot answer: PACHECK_ERROR past 100 tokens, an unknown status below. */
static pacheck_status supports_fails(void* u, const pacheck_case_info* c, char* reason, size_t n) {
  (void)u;
  if (c->max_seq_len > 100) return snprintf(reason, n, "planted: cannot query the device"), PACHECK_ERROR;
  return (pacheck_status)9;
}

/* plug.v2_probe: checks every version-2 field pacheck fills, in supports() and in run(). A field that is
 * not as the header promises makes the call fail with a message naming it, so the test sees `error`
 * ("supports() failed: ...", or run's message) instead of the `fail` of the zeros written otherwise. */
static pacheck_status probe_supports(void* u, const pacheck_case_info* c, char* reason, size_t n) {
  (void)u;
  int32_t i, longest = 0;
  int fp8 = c->kv_dtype >= PACHECK_DTYPE_FP8_E4M3FN;
  if (c->struct_size < sizeof *c) return snprintf(reason, n, "probe: case_info struct_size %u", c->struct_size), PACHECK_ERROR;
  for (i = 0; i < c->num_seqs; ++i) {
    if (c->query_lens == NULL || c->query_lens[i] != 1) return snprintf(reason, n, "probe: query_lens[%d]", i), PACHECK_ERROR;
    if (c->seq_lens[i] > longest) longest = c->seq_lens[i];
  }
  if (longest != c->max_seq_len) return snprintf(reason, n, "probe: max_seq_len %d", c->max_seq_len), PACHECK_ERROR;
  if (c->max_query_len != 1 || c->sliding_window != 0 || c->logits_soft_cap != 0.0f || c->has_alibi || c->has_sinks)
    return snprintf(reason, n, "probe: a variant field is set"), PACHECK_ERROR;
  if (!fp8 && (c->k_scale_form != PACHECK_SCALE_FORM_NONE || c->v_scale_form != PACHECK_SCALE_FORM_NONE ||
               c->k_scale != 1.0f || c->v_scale != 1.0f || c->k_scales_per_head || c->v_scales_per_head))
    return snprintf(reason, n, "probe: scale fields of a non-fp8 case"), PACHECK_ERROR;
  if (fp8) {
    if (c->k_scale_form == PACHECK_SCALE_FORM_NONE || c->v_scale_form == PACHECK_SCALE_FORM_NONE)
      return snprintf(reason, n, "probe: fp8 case with scale form none"), PACHECK_ERROR;
    if ((c->k_scale_form == PACHECK_SCALE_FORM_PER_KV_HEAD) != (c->k_scales_per_head != NULL) ||
        (c->k_scale_form == PACHECK_SCALE_FORM_PER_KV_HEAD) != (c->k_scale != c->k_scale))
      return snprintf(reason, n, "probe: k_scale form %d and its values disagree", (int)c->k_scale_form), PACHECK_ERROR;
    if ((c->v_scale_form == PACHECK_SCALE_FORM_PER_KV_HEAD) != (c->v_scales_per_head != NULL) ||
        (c->v_scale_form == PACHECK_SCALE_FORM_PER_KV_HEAD) != (c->v_scale != c->v_scale))
      return snprintf(reason, n, "probe: v_scale form %d and its values disagree", (int)c->v_scale_form), PACHECK_ERROR;
  }
  return PACHECK_OK;
}

static pacheck_status probe_run(void* u, const pacheck_kernel_args* a, char* error, size_t n) {
  (void)u;
  int32_t i, longest = 0;
  if (a->struct_size < sizeof *a) return snprintf(error, n, "probe: args struct_size %u", a->struct_size), PACHECK_ERROR;
  if (a->seq_lens_host == NULL) return snprintf(error, n, "probe: seq_lens_host is NULL"), PACHECK_ERROR;
  for (i = 0; i < a->num_seqs; ++i) {
    if (a->seq_lens_host[i] != a->seq_lens[i]) return snprintf(error, n, "probe: seq_lens_host[%d]", i), PACHECK_ERROR;
    if (a->seq_lens_host[i] > longest) longest = a->seq_lens_host[i];
  }
  if (a->max_seq_len != longest) return snprintf(error, n, "probe: max_seq_len %d, longest %d", a->max_seq_len, longest), PACHECK_ERROR;
  if (a->max_query_len != 1 || a->num_query_tokens != a->num_seqs || a->query_start_loc || a->query_start_loc_host)
    return snprintf(error, n, "probe: query fields of a decode call"), PACHECK_ERROR;
  if (a->sliding_window != 0 || a->logits_soft_cap != 0.0f || a->alibi_slopes || a->sinks)
    return snprintf(error, n, "probe: a variant field is set"), PACHECK_ERROR;
  write_zeros(a, out_elements(a));
  return PACHECK_OK;
}

static pacheck_status run_zeros(void* u, const pacheck_kernel_args* a, char* error, size_t n) {
  (void)u, (void)error, (void)n;
  write_zeros(a, out_elements(a));
  return PACHECK_OK;
}

static void base(pacheck_kernel_desc* d, const char* name, pacheck_run_fn run) {
  memset(d, 0, sizeof *d);
  d->struct_size = sizeof *d;
  d->name = name;
  d->device = PACHECK_DEVICE_CPU;
  d->layouts = kLayouts;
  d->num_layouts = 3;
  d->q_dtypes = d->kv_dtypes = d->out_dtypes = kDtypes;
  d->num_q_dtypes = d->num_kv_dtypes = d->num_out_dtypes = 3;
  d->run = run;
}

#if !defined(PLANT_NO_REGISTER)
pacheck_status pacheck_register_kernels(pacheck_registrar* r) {
  pacheck_kernel_desc d;
#if defined(PLANT_OK)
  /* One kernel per planted defect, each on base()'s lists; plug.picky (below) also narrows them. */
  static const struct {
    const char* name;
    pacheck_run_fn run;
    uint32_t flags;
  } planted[] = {
      {"plug.error", run_error, 0},
      {"plug.skip_last", run_skip_last, 0},
      {"plug.write_past_end", run_write_past_end, PACHECK_KERNEL_NOT_THREAD_SAFE},
      {"plug.mutate_input", run_mutate_input, 0},
      {"plug.unknown_status", run_unknown_status, 0},
      {"plug.tf32", run_error, PACHECK_KERNEL_TF32}, /* the declaration only: see test_plugin.cpp */
  };
  static const int32_t head64[] = {64};
  for (size_t i = 0; i < sizeof planted / sizeof planted[0]; ++i) {
    base(&d, planted[i].name, planted[i].run);
    d.flags = planted[i].flags;
    r->add_kernel(r, &d);
  }
  static const pacheck_dtype kv_with_fp8[] = {PACHECK_DTYPE_BF16, PACHECK_DTYPE_F16, PACHECK_DTYPE_F32,
                                              PACHECK_DTYPE_FP8_E4M3FN, PACHECK_DTYPE_FP8_E5M2};
  base(&d, "plug.v2_probe", probe_run);
  d.kv_dtypes = kv_with_fp8;
  d.num_kv_dtypes = 5;
  d.supports = probe_supports;
  r->add_kernel(r, &d);
  base(&d, "plug.supports_fails", run_zeros);
  d.supports = supports_fails;
  r->add_kernel(r, &d);
  base(&d, "plug.per_tensor_scales", run_zeros); /* takes one fp8 scale per cache, never an array */
  d.kv_dtypes = kv_with_fp8;
  d.num_kv_dtypes = 5;
  d.scale_forms = PACHECK_SCALE_FORM_BIT(PACHECK_SCALE_FORM_PER_TENSOR);
  r->add_kernel(r, &d);
  base(&d, "plug.picky", run_error);
  d.head_sizes = head64;
  d.num_head_sizes = 1;
  d.supports = supports_short_only;
  return r->add_kernel(r, &d);
#elif defined(PLANT_DUP_BUILTIN)
  base(&d, "cpu.reference", run_error);
  return r->add_kernel(r, &d);
#elif defined(PLANT_DUP_SELF)
  base(&d, "plug.twice", run_error);
  r->add_kernel(r, &d);
  return r->add_kernel(r, &d);
#elif defined(PLANT_REGISTER_FAILS)
  (void)d;
  snprintf(r->error, r->error_size, "planted: no device for this plugin");
  return PACHECK_ERROR;
#elif defined(PLANT_NO_KERNELS)
  (void)d;
  (void)r;
  return PACHECK_OK;
#elif defined(PLANT_NULL_DESC)
  (void)d;
  return r->add_kernel(r, NULL);
#else
  base(&d, "plug.bad", run_error);
#if defined(PLANT_NULL_NAME)
  d.name = NULL;
#elif defined(PLANT_BAD_NAME)
  d.name = "has space";
#elif defined(PLANT_NULL_RUN)
  d.run = NULL;
#elif defined(PLANT_BAD_LAYOUT)
  static const int32_t bad_layouts[] = {PACHECK_LAYOUT_NHD, 7};
  d.layouts = (const pacheck_layout*)bad_layouts;
  d.num_layouts = 2;
#elif defined(PLANT_EMPTY_DTYPES)
  d.num_kv_dtypes = 0;
#elif defined(PLANT_DUP_DTYPE)
  static const pacheck_dtype dup_dtypes[] = {PACHECK_DTYPE_BF16, PACHECK_DTYPE_F16, PACHECK_DTYPE_BF16};
  d.kv_dtypes = dup_dtypes;
  d.num_kv_dtypes = 3;
#elif defined(PLANT_NULL_ARRAY)
  d.num_head_sizes = 2; /* head_sizes stays NULL */
#elif defined(PLANT_BAD_HEAD_SIZE)
  static const int32_t heads[] = {128, 0};
  d.head_sizes = heads;
  d.num_head_sizes = 2;
#elif defined(PLANT_BAD_DEVICE)
  d.device = (pacheck_device)9;
#elif defined(PLANT_SMALL_STRUCT)
  d.struct_size = 16;
#elif defined(PLANT_UNKNOWN_FLAG)
  d.flags = 0x80u;
#elif defined(PLANT_UNKNOWN_VARIANT)
  d.variants = 0x40u;
#elif defined(PLANT_UNKNOWN_SCALE_FORM)
  d.scale_forms = PACHECK_SCALE_FORM_BIT(PACHECK_SCALE_FORM_NONE);
#elif defined(PLANT_V1_SIZED_DESC)
  d.struct_size = (uint32_t)(offsetof(pacheck_kernel_desc, user_data) + sizeof(void*));
#elif defined(PLANT_OVERSIZED_STRUCT)
  d.struct_size = 100000;
#elif defined(PLANT_V1_WITH_V2_FIELDS)
  d.scale_forms = PACHECK_SCALE_FORM_BIT(PACHECK_SCALE_FORM_PER_TENSOR);
#elif defined(PLANT_V1_WITH_V2_SIZE)
  /* Declares version 1 with the v2 header's struct but no v2 field set: loads, as a v1 plugin. */
  r->add_kernel(r, &d);
  return PACHECK_OK;
#endif
  /* Registration "succeeds": pacheck must refuse the library on the add_kernel error alone. */
  r->add_kernel(r, &d);
  return PACHECK_OK;
#endif
}
#endif
