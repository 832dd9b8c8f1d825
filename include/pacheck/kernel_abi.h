/*
 * pacheck kernel C ABI, version 4.
 *
 * The contract between pacheck and a paged-attention decode kernel. Built-in kernels and plugin kernels
 * (shared libraries loaded with `pacheck run --plugin lib.so`) are called through the same
 * `pacheck_kernel_args` struct, so a plugin gets every verdict, property and report a built-in gets.
 *
 * Operation (one decode step, one query token per sequence):
 *   out[s, h, :] = softmax(scale * q[s, h, :] . K_s^T) . V_s
 * where K_s, V_s are the first seq_lens[s] tokens of sequence s, found through block_tables[s, :], and
 * query head h reads KV head h / (num_heads / num_kv_heads) (GQA; ratio = num_heads / num_kv_heads).
 * Version 2 adds attention variants and several query tokens per sequence (query_start_loc below).
 * Slots past seq_lens[s] in the final block, unused blocks and blocks named by block-table padding hold
 * arbitrary bits (pacheck fills them with NaN, Inf or garbage on purpose): a kernel must not let them
 * reach the output.
 *
 * Ownership: every pointer in pacheck_kernel_args is owned by pacheck and valid for the duration of the
 * `run` call only. Pointers are device pointers for the descriptor's device (host pointers for CPU
 * kernels). A kernel must not write anything but `out` (pacheck checksums the inputs and places guard
 * regions around `out`). Kernels may allocate their own scratch memory and must free it.
 *
 * Plugins export two symbols (see "Plugin registration" below): the data symbol
 * `pacheck_plugin_abi_version` (write `PACHECK_PLUGIN_DEFINE_ABI_VERSION;` once) and the function
 * `pacheck_register_kernels`, which describes each kernel with a `pacheck_kernel_desc`.
 *
 * Versions. Every struct only ever grows at its end, and each starts with its `struct_size`:
 *   1  the first version.
 *   2  pacheck_kernel_args: max_seq_len and a host copy of seq_lens (launchers size grids and shared memory
 *      from them without copying seq_lens back), and the attention-variant fields (query_start_loc,
 *      sliding_window, logits_soft_cap, alibi_slopes, sinks; see "Attention variants").
 *      pacheck_case_info: the fp8 scale form and values of each cache, and the variant fields.
 *      pacheck_kernel_desc: `variants` and `scale_forms`, what the kernel accepts of each.
 *      Callers of each callback documented ("Calls pacheck makes into a plugin").
 *      C++ plugins compile PACHECK_PLUGIN_DEFINE_ABI_VERSION without warnings.
 *   3  pacheck_layout: PACHECK_LAYOUT_AITER (AITER's shuffled-V fp8 cache); pacheck_scale_form:
 *      PACHECK_SCALE_FORM_PER_SLOT with pacheck_kernel_args::k_scales_per_slot / v_scales_per_slot (per-slot
 *      scale tables, as AITER's asm decode reads them). A plugin declaring version 1 or 2 that lists either
 *      new value is refused (it could not have meant it); a kernel is only given a layout its descriptor
 *      lists, and for a plugin of version 1 or 2 scale_forms 0 ("every form") means PER_TENSOR and
 *      PER_KV_HEAD only, so older plugins never see either.
 *   4  MLA decode (multi-head latent attention, "MLA decode" below): pacheck_kernel_args and pacheck_case_info
 *      end with kv_lora_rank, qk_rope_head_dim and v_head_dim; pacheck_kernel_desc::flags takes
 *      PACHECK_KERNEL_MLA. Only a kernel whose descriptor sets that flag is handed MLA cells, and it is handed
 *      nothing else; a plugin declaring version 1 to 3 cannot set it (it is refused if it does), so older
 *      plugins never see an MLA cell: each is declined naming kv_lora_rank.
 * pacheck loads plugins of every version from PACHECK_ABI_MIN_VERSION to PACHECK_ABI_VERSION. A plugin
 * built against version 1 keeps working unchanged: it is handed structs whose version-1 prefix is
 * exactly what version 1 laid out, and pacheck reads nothing of its descriptor past the version-1 end.
 */
#ifndef PACHECK_KERNEL_ABI_H
#define PACHECK_KERNEL_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PACHECK_ABI_VERSION 4
#define PACHECK_ABI_MIN_VERSION 1 /* the oldest plugin ABI this header's pacheck still loads */

/* Element types. Bit patterns: IEEE binary32 / binary16; bf16 = upper 16 bits of binary32;
 * fp8 (KV caches only, with bf16/f16/f32 query and output): E4M3FN and E5M2 as in the OCP 8-bit floating
 * point spec v1.0 (E4M3FN: NaN 0x7F/0xFF, no Inf, max 448; E5M2: IEEE-like with Inf, max 57344), and
 * E4M3FNUZ, AMD's/Graphcore's variant (exponent bias 8, NaN 0x80 only, no -0, 0x7F = 240 is finite).
 * docs/FP8.md has the table. */
typedef enum pacheck_dtype {
  PACHECK_DTYPE_F32 = 0,
  PACHECK_DTYPE_F16 = 1,
  PACHECK_DTYPE_BF16 = 2,
  PACHECK_DTYPE_FP8_E4M3FN = 3,
  PACHECK_DTYPE_FP8_E4M3FNUZ = 4,
  PACHECK_DTYPE_FP8_E5M2 = 5
} pacheck_dtype;

/* Paged KV-cache layouts (shapes in elements, row-major, last index fastest):
 *   VLLM: key_cache   [num_blocks, num_kv_heads, head_size / x, block_size, x], x = 16 / sizeof(elem)
 *         value_cache [num_blocks, num_kv_heads, head_size, block_size]
 *         (vLLM's CUDA/ROCm paged_attention_v1/v2 layout, csrc/attention/)
 *   NHD:  key_cache, value_cache [num_blocks, block_size, num_kv_heads, head_size]
 *         (FlashAttention / FlashInfer "NHD")
 *   HND:  key_cache, value_cache [num_blocks, num_kv_heads, block_size, head_size] (FlashInfer "HND")
 *   AITER (version 3): AMD AITER's asm paged-attention decode (pa_fwd_asm) on an fp8 cache, as vLLM's
 *         ROCm backends hand it (seed 002: vLLM's split_kv_cache + unsqueeze(2), and AITER's
 *         "shuffled" KV cache layout of its fused RoPE + KV-cache writer):
 *         key_cache   [num_blocks, num_kv_heads, head_size / x, block_size, x], x = 16 / sizeof(elem):
 *                     exactly the VLLM key layout (x-packed; [.., head_size / 16, block_size, 16] for fp8)
 *         value_cache [num_blocks, num_kv_heads, block_size / 16, head_size, 16] (V "shuffled"): slot t of
 *                     a block is group t / 16, lane t % 16; k_strides rank 5, v_strides rank 5.
 *         block_size must be a multiple of 16. With 16-token blocks the value cache is byte-for-byte the
 *         VLLM value cache [num_blocks, num_kv_heads, head_size, 16] (one group); above 16 they differ.
 *         Only kernels that list PACHECK_LAYOUT_AITER in pacheck_kernel_desc::layouts are ever given it, so
 *         plugins of versions 1 and 2 (which cannot list it) never see it. */
typedef enum pacheck_layout {
  PACHECK_LAYOUT_VLLM = 0,
  PACHECK_LAYOUT_NHD = 1,
  PACHECK_LAYOUT_HND = 2,
  PACHECK_LAYOUT_AITER = 3
} pacheck_layout;

typedef enum pacheck_device {
  PACHECK_DEVICE_CPU = 0,
  PACHECK_DEVICE_CUDA = 1,
  PACHECK_DEVICE_HIP = 2
} pacheck_device;

/* How an fp8 cache's dequantisation scale is given (pacheck_case_info::k_scale_form / v_scale_form).
 *   NONE:        the cache is not fp8 (k_scale / v_scale are 1 and unused);
 *   PER_TENSOR:  one fp32 scale for the whole cache, in pacheck_kernel_args::k_scale / v_scale;
 *   PER_KV_HEAD: [num_kv_heads] fp32 scales in pacheck_kernel_args::k_scales_per_head / v_scales_per_head,
 *                and the scalar k_scale / v_scale is NaN.
 *   PER_SLOT (version 3): a scale per slot, as AMD AITER's asm paged-attention decode reads them (seed
 *                002: per-slot [blocks, kv_heads, block_size] scale tables): k_scales_per_slot /
 *                v_scales_per_slot are [num_blocks, num_kv_heads, block_size] fp32, row-major, indexed by
 *                the PHYSICAL block id (a block_tables entry), KV head and slot: key element d of token p
 *                of sequence s, KV head g, is decode(code) * k_scales_per_slot[(b * num_kv_heads + g) *
 *                block_size + p % block_size] with b = block_tables[s, p / block_size] (V alike). Entries
 *                of slots no sequence wrote (the tail of a final block, unused blocks, the padding target)
 *                hold arbitrary values (pacheck puts NaN, Inf or garbage there on purpose): a kernel must
 *                not let them reach the output, as with the cache's own unwritten slots. The scalar
 *                k_scale / v_scale is NaN and k_scales_per_head / v_scales_per_head are NULL. */
typedef enum pacheck_scale_form {
  PACHECK_SCALE_FORM_NONE = 0,
  PACHECK_SCALE_FORM_PER_TENSOR = 1,
  PACHECK_SCALE_FORM_PER_KV_HEAD = 2,
  PACHECK_SCALE_FORM_PER_SLOT = 3
} pacheck_scale_form;

typedef enum pacheck_status {
  PACHECK_OK = 0,
  PACHECK_DECLINED = 1, /* the kernel does not support this case; `error` holds the reason */
  PACHECK_ERROR = 2     /* the kernel failed; `error` holds the message */
} pacheck_status;

/* Arguments of one decode call. Sizes are element counts unless named *_bytes; strides are in elements
 * of the tensor's own dtype. Fields from `max_seq_len` on are version 2: pacheck always fills them, and a
 * version-1 plugin simply never reads them. */
typedef struct pacheck_kernel_args {
  uint32_t struct_size; /* sizeof(pacheck_kernel_args) as the caller built it */

  /* Shapes. */
  int32_t num_seqs;           /* number of sequences (one query token each unless query_start_loc is set) */
  int32_t num_heads;          /* query heads */
  int32_t num_kv_heads;       /* KV heads; num_heads % num_kv_heads == 0 */
  int32_t head_size;          /* elements per head */
  int32_t block_size;         /* tokens (slots) per KV block */
  int32_t num_blocks;         /* physical blocks in the pool */
  int32_t max_blocks_per_seq; /* columns of block_tables */
  pacheck_layout layout;
  pacheck_dtype q_dtype, kv_dtype, out_dtype;

  /* query [num_seqs, num_heads, head_size]; element (s, h, d) at s*q_stride_seq + h*q_stride_head + d.
   * With several query tokens per sequence (query_start_loc, version 2): [num_query_tokens, num_heads,
   * head_size], the first index a query row. */
  const void* query;
  int64_t q_stride_seq, q_stride_head;

  /* Paged caches, shapes per `layout` above. k_strides / v_strides give the stride of each dimension of
   * that shape (rank 5 for VLLM's key_cache, rank 4 otherwise; unused entries 0). */
  const void* key_cache;
  const void* value_cache;
  int64_t k_strides[5];
  int64_t v_strides[5];

  /* block_tables [num_seqs, max_blocks_per_seq] int32: logical block j of sequence s lives in physical
   * block block_tables[s * block_tables_stride + j]. Entries past ceil(seq_lens[s] / block_size) are
   * padding: they hold a valid block id whose contents are not part of the sequence. */
  const int32_t* block_tables;
  int64_t block_tables_stride;
  /* seq_lens [num_seqs] int32, each >= 1: tokens of context, including the current one. */
  const int32_t* seq_lens;

  /* out [num_seqs, num_heads, head_size] in out_dtype; element (s, h, d) at
   * s*out_stride_seq + h*out_stride_head + d (with query_start_loc: [num_query_tokens, ...], one row per
   * query row, every row written). pacheck fills it with NaN before the call. */
  void* out;
  int64_t out_stride_seq, out_stride_head;

  float scale;   /* softmax scale applied to q.k (default 1/sqrt(head_size)) */
  /* Dequantisation of an fp8 cache: key element = decode(code) * scale of its KV head, in fp32. */
  float k_scale; /* dequantisation scale of the whole key cache (1 for f32/f16/bf16 caches) */
  float v_scale; /* dequantisation scale of the whole value cache */
  /* Optional per-KV-head scales [num_kv_heads] fp32 on the kernel's device (fp8); NULL means use k_scale /
   * v_scale. When an array is given it replaces the scalar, and pacheck sets that scalar to NaN. */
  const float* k_scales_per_head;
  const float* v_scales_per_head;

  /* cudaStream_t / hipStream_t for GPU kernels (NULL = default stream); NULL for CPU kernels. */
  void* stream;

  /* ---- version 2 ---- */
  int32_t max_seq_len;          /* largest entry of seq_lens (tokens), known on the host */
  const int32_t* seq_lens_host; /* [num_seqs] int32 in host memory, the same values as seq_lens (for CPU
                                   kernels it may be the same pointer); read-only, valid during `run` */

  /* Query tokens per sequence (speculative decoding, chunked decode). max_query_len == 1 and
   * query_start_loc == NULL mean one query token per sequence, as in version 1. Otherwise sequence s owns
   * query rows query_start_loc[s] .. query_start_loc[s+1] - 1 (query_start_loc [num_seqs + 1] int32 on the
   * kernel's device, query_start_loc[0] = 0, query_start_loc[num_seqs] = num_query_tokens; a host copy in
   * query_start_loc_host), `query` and `out` are [num_query_tokens, num_heads, head_size] with
   * q_stride_seq / out_stride_seq the stride of one query row, and the query tokens are the last
   * query_len(s) tokens of the sequence's seq_lens[s] (vLLM's convention: seq_lens counts them): query row
   * query_start_loc[s] + i, i = 0 .. query_len(s) - 1, is the token at position
   * p = seq_lens[s] - query_len(s) + i and sees keys 0 .. p only (see "Attention variants", step 4). Example:
   * seq_lens = {4090, 37}, query lens {4, 1}: query_start_loc = {0, 4, 5}, rows 0..3 at positions
   * 4086..4089, row 4 at 36. pacheck passes 1 to 8 query tokens per sequence
   * (PACHECK_VARIANT_MULTI_QUERY). */
  int32_t max_query_len;
  int32_t num_query_tokens; /* rows of query and out: num_seqs when every sequence has one query token */
  const int32_t* query_start_loc;
  const int32_t* query_start_loc_host;

  int32_t sliding_window; /* 0 = none; W > 0: see "Attention variants" */
  float logits_soft_cap;  /* 0 = none; c > 0: see "Attention variants" */
  /* [num_heads] fp32 on the kernel's device, or NULL = none: ALiBi slope of each query head. */
  const float* alibi_slopes;
  /* [num_heads] fp32 on the kernel's device, or NULL = none: sink logit of each query head. */
  const float* sinks;

  /* ---- version 3 ---- */
  /* Per-slot scale tables [num_blocks, num_kv_heads, block_size] fp32 on the kernel's device for
   * PACHECK_SCALE_FORM_PER_SLOT (see there: indexed by physical block id; unwritten slots' entries are
   * arbitrary), else NULL. Handed only to kernels whose scale_forms take PER_SLOT. */
  const float* k_scales_per_slot;
  const float* v_scales_per_slot;

  /* ---- version 4 ---- */
  /* MLA decode (see "MLA decode" below): 0, 0, 0 for every multi-head call; kv_lora_rank > 0 marks an MLA call,
   * handed only to kernels with PACHECK_KERNEL_MLA. */
  int32_t kv_lora_rank;     /* latent values at the start of each cache row (c_kv) */
  int32_t qk_rope_head_dim; /* rope values after them (k_pe); head_size = kv_lora_rank + qk_rope_head_dim */
  int32_t v_head_dim;       /* output values per head: V is the first v_head_dim values of each row */
} pacheck_kernel_args;

/* ------------------------------------------------------------------------------------------------------
 * MLA decode (version 4)
 *
 * Multi-head latent attention with the up-projections absorbed, as paged MLA decode kernels see it (FlashMLA,
 * FlashInfer's MLA wrapper, vLLM's and SGLang's Triton MLA decode): one cache holds a latent row of
 * head_size = kv_lora_rank + qk_rope_head_dim values per token (DeepSeek-V3: 512 + 64), shared by every query
 * head. In an MLA call (kv_lora_rank > 0):
 *   - num_kv_heads is 1 and layout is NHD: the cache is [num_blocks, block_size, 1, head_size];
 *     key_cache == value_cache (the same pointer) with v_strides == k_strides; an fp8 cache has one per-tensor
 *     scale, k_scale == v_scale (PER_TENSOR; k_scales_per_head and the per-slot tables are NULL);
 *   - query is [num_query_tokens, num_heads, head_size]: each head's absorbed latent query, then its rope part;
 *   - the logit of head h and key j is scale * (q_h . row_j) over all head_size values (scale is the model's
 *     own, e.g. DeepSeek-V3's qk_head_dim^-0.5 times a YaRN factor, not 1/sqrt(head_size)), masked as in
 *     "Attention variants" step 4;
 *   - out is [num_query_tokens, num_heads, v_head_dim] (out_stride_head = v_head_dim): the softmax-weighted sum
 *     of the first v_head_dim values of the same rows (V is a prefix of the row, not a second cache).
 * The unwritten slots of the latent cache hold arbitrary bits, in the rope part, the V part or both: a kernel
 * must not let them reach the output (0 x NaN is NaN: weights of masked slots must not multiply their V).
 * ---------------------------------------------------------------------------------------------------- */

/* ------------------------------------------------------------------------------------------------------
 * Attention variants (version 2)
 *
 * For query head h of a query row at position p of its sequence (0-based; the only query token of a
 * decode row has p = seq_lens[s] - 1) and a key at position j, the logit is computed in this order:
 *   1. s = scale * (q . k_j)                                    (dequantised k for fp8 caches)
 *   2. logit soft cap c > 0:   s = c * tanh(s / c)              (Gemma 2; vLLM's logits_soft_cap)
 *   3. ALiBi:                  s = s + alibi_slopes[h] * (j - p)   (a penalty <= 0 for past keys; the
 *                                                                   ALiBi paper, Press et al. 2022)
 *   4. mask: key j takes part only when j <= p (causal, which matters only for rows with several query
 *      tokens) and, with a sliding window W > 0, when p - j < W: the row sees its last W positions
 *      including its own (vLLM's `sliding_window`; FlashAttention's window_size_left = W - 1).
 *   5. out = sum_j softmax_j * v_j, where with sinks the softmax denominator also holds exp(sinks[h]):
 *      out = sum_j e^{s_j - m} v_j / (e^{sinks[h] - m} + sum_j e^{s_j - m})   (a learned per-head logit
 *      that takes probability mass but has no value row, as in gpt-oss).
 * pacheck hands a kernel a non-default value of a variant only when the kernel's descriptor lists that
 * variant in `variants` (and only from version 2); every other call has sliding_window 0, logits_soft_cap
 * 0, alibi_slopes NULL, sinks NULL and one query token per sequence.
 * ---------------------------------------------------------------------------------------------------- */

/* ------------------------------------------------------------------------------------------------------
 * Plugin registration
 *
 * A plugin is a shared library that exports
 *   const uint32_t pacheck_plugin_abi_version;            (define it with PACHECK_PLUGIN_DEFINE_ABI_VERSION)
 *   pacheck_status pacheck_register_kernels(pacheck_registrar* registrar);
 * Loading it (`pacheck run --plugin path/to/lib.so`), pacheck
 *   1. dlopen()s the file with RTLD_NOW | RTLD_LOCAL, so an unresolved symbol fails the load, not a call;
 *   2. reads `pacheck_plugin_abi_version` and refuses the library unless it lies between
 *      PACHECK_ABI_MIN_VERSION and the PACHECK_ABI_VERSION pacheck was built with. This happens before any
 *      plugin code runs: a plugin from a later version could lay its descriptor out in a way this pacheck
 *      would misread;
 *   3. calls `pacheck_register_kernels` once, from one thread; it calls registrar->add_kernel once per
 *      kernel and returns PACHECK_OK (or PACHECK_ERROR with a message in registrar->error);
 *   4. validates every descriptor and adds the kernels to pacheck's registry all together or not at all.
 * Any problem -- file missing or not loadable, a missing symbol, an ABI version outside
 * PACHECK_ABI_MIN_VERSION .. PACHECK_ABI_VERSION, registration
 * failing or adding no kernel, a kernel name already taken (by a built-in, another plugin or the same one),
 * a NULL or out-of-range descriptor field -- is reported as "plugin 'PATH': PROBLEM" and the `pacheck`
 * command exits with code 2 having run nothing. A loaded plugin is never unloaded (no dlclose), so its
 * code and user data stay valid until the process exits.
 *
 * Calls pacheck makes into a plugin, and from where:
 *   - `pacheck_register_kernels`: once per process that loads the library, from that process's main
 *     thread, before anything else. Forked children inherit the registration and do not call it again.
 *   Isolated or in process: `pacheck run` and `repro` run every plugin kernel, CPU and GPU,
 *   isolated in forked children by default (a crash or hang costs one cell, not the run); `--no-isolate`
 *   runs them in the pacheck process, `--isolate` isolates the built-in kernels too. `pacheck bench`,
 *   `fuzz` and the GoogleTest / Python cell runners (pacheck/cells.hpp) call plugins in process.
 *   - `supports`: before any cell runs, once per (cell, kernel), one call at a time, never concurrently with
 *     `run`. In the pacheck process itself for in-process kernels; in a forked child process (one per
 *     kernel, which then exits) for isolated kernels, and for in-process GPU kernels too when the run also
 *     forks isolated children. Do not
 *     initialise a GPU runtime in `supports`: in the parent it would stop later forked children from using
 *     the device. Decide from the case info alone.
 *   - `run` for CPU kernels: from several worker threads at once, each call with its own buffers, unless
 *     the descriptor sets PACHECK_KERNEL_NOT_THREAD_SAFE (then pacheck serialises the calls). Isolated CPU
 *     kernels run in forked children (one case at a time per child, several children at once).
 *   - `run` for GPU kernels: in process, from one thread per device, in order; isolated, from the main
 *     thread of forked children (several at once, each with its own context and stream, cases in order
 *     within each). Launch on args->stream; pacheck synchronises the stream after `run` returns, and a
 *     device error raised then becomes that cell's `error` verdict.
 * ---------------------------------------------------------------------------------------------------- */

/* Bits of pacheck_kernel_desc::flags. Any other bit set makes the descriptor invalid (so a plugin written
 * for a later ABI with new flags is refused rather than silently misread). */
#define PACHECK_KERNEL_NOT_THREAD_SAFE 0x1u /* never call `run` from two threads at once */
#define PACHECK_KERNEL_BATCH_VARIANT 0x2u   /* a sequence's output may depend on the others of its batch */
#define PACHECK_KERNEL_TF32 0x4u            /* dots read f32 operands as TF32 (tensor cores; Triton's default
                                               fp32 tl.dot): f32 outputs are judged against the TF32 limit */
#define PACHECK_KERNEL_MLA 0x8u             /* version 4: an MLA decode kernel ("MLA decode"): handed MLA cells,
                                               and only those */
#define PACHECK_KERNEL_KNOWN_FLAGS 0xFu

/* Bits of pacheck_kernel_desc::variants (version 2): the attention variants a kernel implements. A cell
 * that needs a variant the kernel does not list is declined with a reason naming the field. Unknown bits
 * make the descriptor invalid. */
#define PACHECK_VARIANT_SLIDING_WINDOW 0x1u
#define PACHECK_VARIANT_ALIBI 0x2u
#define PACHECK_VARIANT_SOFT_CAP 0x4u
#define PACHECK_VARIANT_SINKS 0x8u
#define PACHECK_VARIANT_MULTI_QUERY 0x10u /* several query tokens per sequence (query_start_loc) */
#define PACHECK_VARIANT_KNOWN 0x1Fu

/* Bits of pacheck_kernel_desc::scale_forms (version 2): the fp8 scale forms a kernel takes. 0 means every
 * form its declared version knows (version 1 and 2: PER_TENSOR and PER_KV_HEAD; version 3 adds PER_SLOT);
 * otherwise an fp8 cell whose K or V scale form is not listed is declined with a
 * reason naming k_scale or v_scale. Unknown bits make the descriptor invalid. */
#define PACHECK_SCALE_FORM_BIT(form) (1u << (unsigned)(form))
#define PACHECK_SCALE_FORMS_KNOWN                                                                           \
  (PACHECK_SCALE_FORM_BIT(PACHECK_SCALE_FORM_PER_TENSOR) | PACHECK_SCALE_FORM_BIT(PACHECK_SCALE_FORM_PER_KV_HEAD) | \
   PACHECK_SCALE_FORM_BIT(PACHECK_SCALE_FORM_PER_SLOT))
/* The forms a version-2 plugin can name (and what its scale_forms 0 means): PER_SLOT is version 3. */
#define PACHECK_SCALE_FORMS_V2 \
  (PACHECK_SCALE_FORM_BIT(PACHECK_SCALE_FORM_PER_TENSOR) | PACHECK_SCALE_FORM_BIT(PACHECK_SCALE_FORM_PER_KV_HEAD))

/* Size in bytes of the `reason` and `error` buffers pacheck passes to callbacks, including the NUL.
 * Longer messages are cut; pacheck always terminates the buffer itself. */
#define PACHECK_MESSAGE_SIZE 1024

/* One case as `supports` sees it: shapes only, nothing is generated yet. Fields mean what the fields of the
 * same name in pacheck_kernel_args mean. Fields from k_scale_form on are version 2 (a version-1 plugin
 * never reads them; struct_size tells a plugin how much pacheck filled). */
typedef struct pacheck_case_info {
  uint32_t struct_size; /* sizeof(pacheck_case_info) as pacheck built it */
  int32_t num_seqs, num_heads, num_kv_heads, head_size, block_size;
  pacheck_layout layout;
  pacheck_dtype q_dtype, kv_dtype, out_dtype;
  const int32_t* seq_lens; /* [num_seqs] int32, host memory owned by pacheck, valid during the call only */
  int32_t max_seq_len;     /* largest entry of seq_lens (tokens) */
  float scale;             /* softmax scale the call will use */

  /* ---- version 2 ---- */
  pacheck_scale_form k_scale_form, v_scale_form; /* NONE unless kv_dtype is an fp8 type */
  float k_scale, v_scale; /* the per-tensor scales (1 for non-fp8 caches, NaN for PER_KV_HEAD and PER_SLOT; a
                             PER_SLOT table is drawn when the case is generated, after `supports`, so
                             supports gets the form only) */
  const float* k_scales_per_head; /* [num_kv_heads] fp32 host copies for PER_KV_HEAD, else NULL; valid */
  const float* v_scales_per_head; /* during the call only */
  int32_t max_query_len;          /* 1 for plain decode */
  const int32_t* query_lens;      /* [num_seqs] int32 host: query tokens of each sequence (all 1 for decode) */
  int32_t sliding_window;         /* 0 = none */
  float logits_soft_cap;          /* 0 = none */
  int32_t has_alibi;              /* 1 when the call will pass alibi_slopes */
  int32_t has_sinks;              /* 1 when the call will pass sinks */

  /* ---- version 4 ---- */
  int32_t kv_lora_rank, qk_rope_head_dim, v_head_dim; /* as in pacheck_kernel_args: 0 for a multi-head case */
} pacheck_case_info;

/* Optional: may the kernel run this case? Return PACHECK_OK to run it, or PACHECK_DECLINED after writing a
 * reason naming the unsupported field ("head_size 96: only 64 and 128") into `reason` (reason_size bytes,
 * NUL-terminated). A declined cell is reported as `declined` and is not a failure, but a kernel that
 * declines every cell fails the run. PACHECK_ERROR (the kernel could not tell), or any other value, makes
 * the cell `error` with the detail "supports() failed: REASON" (or naming the unknown value): it fails the
 * run, where version-2 pacheck before this rule reported it as a decline. Called only for cases that pass
 * the descriptor's lists below. */
typedef pacheck_status (*pacheck_supports_fn)(void* user_data, const pacheck_case_info* info, char* reason,
                                              size_t reason_size);

/* Runs one decode call (see pacheck_kernel_args for every pointer's shape, layout and ownership). Returns
 * PACHECK_OK when `out` holds the result (for GPU kernels: when the work is launched on args->stream), or
 * PACHECK_ERROR after writing a message into `error` (error_size bytes, NUL-terminated): the cell's verdict
 * is then `error` with that message. PACHECK_DECLINED here is also an `error` (declining belongs in
 * `supports`, before a cell counts as run); any other value is an `error` naming the value. */
typedef pacheck_status (*pacheck_run_fn)(void* user_data, const pacheck_kernel_args* args, char* error,
                                         size_t error_size);

/* Describes one kernel. pacheck copies the descriptor, its strings and its arrays during add_kernel, so
 * all of them may live on the plugin's stack. The support lists are checked before `supports` is called;
 * a case outside them is declined with a reason naming the field.
 *   - layouts, q_dtypes, kv_dtypes, out_dtypes: at least one entry each, valid enum values, no repeats.
 *     fp8 entries in q_dtypes or out_dtypes are accepted and never match (no cell has an fp8 query or
 *     output), so one list can serve all three: `d.q_dtypes = d.kv_dtypes = d.out_dtypes = dtypes;`.
 *     layouts[0] is the preferred layout: suite cells that do not pin a layout run in it.
 *   - head_sizes (elements), block_sizes (tokens per block), gqa_ratios (num_heads / num_kv_heads): each
 *     entry > 0; count 0 (pointer may then be NULL) means any value.
 * A count > 0 with a NULL pointer is invalid. */
typedef struct pacheck_kernel_desc {
  uint32_t struct_size;    /* sizeof(pacheck_kernel_desc) as the plugin built it; at least the size of
                              the descriptor of the version the plugin declares */
  const char* name;        /* required, unique across all kernels, 1..64 chars of [A-Za-z0-9._-],
                              e.g. "mylib.paged_decode_v2" */
  const char* description; /* optional one line (NULL = none) */
  pacheck_device device;   /* where `run` expects its pointers */
  uint32_t flags;          /* PACHECK_KERNEL_* bits */
  const pacheck_layout* layouts;
  uint32_t num_layouts;
  const pacheck_dtype* q_dtypes;
  uint32_t num_q_dtypes;
  const pacheck_dtype* kv_dtypes;
  uint32_t num_kv_dtypes;
  const pacheck_dtype* out_dtypes;
  uint32_t num_out_dtypes;
  const int32_t* head_sizes;
  uint32_t num_head_sizes;
  const int32_t* block_sizes;
  uint32_t num_block_sizes;
  const int32_t* gqa_ratios;
  uint32_t num_gqa_ratios;
  pacheck_supports_fn supports; /* optional (NULL = every case inside the lists) */
  pacheck_run_fn run;           /* required */
  void* user_data;              /* passed back to supports/run unchanged; owned by the plugin, must stay
                                   valid until the process exits */

  /* ---- version 2 (read only from plugins that declare version 2 or later) ---- */
  uint32_t variants;    /* PACHECK_VARIANT_* bits; 0 = plain decode only */
  uint32_t scale_forms; /* PACHECK_SCALE_FORM_BIT(...) bits; 0 = every scale form */
} pacheck_kernel_desc;

/* What pacheck hands to pacheck_register_kernels. Owned by pacheck, valid during that call only. */
typedef struct pacheck_registrar pacheck_registrar;
struct pacheck_registrar {
  uint32_t struct_size; /* sizeof(pacheck_registrar) as pacheck built it */
  uint32_t abi_version; /* the version pacheck treats the plugin as: the plugin's own
                           pacheck_plugin_abi_version (the loading pacheck may be newer) */
  /* Adds one kernel. Returns PACHECK_OK, or PACHECK_ERROR when the descriptor is invalid; pacheck then
   * refuses the whole library whatever pacheck_register_kernels returns, naming the kernel and field. */
  pacheck_status (*add_kernel)(pacheck_registrar* self, const pacheck_kernel_desc* desc);
  char* error;       /* registration's own failure message goes here (NUL-terminated) ... */
  size_t error_size; /* ... in at most this many bytes */
  void* host;        /* pacheck's state; do not touch */
};

#if defined(_WIN32)
#define PACHECK_PLUGIN_EXPORT __declspec(dllexport)
#else
#define PACHECK_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* The two symbols a plugin exports (declared here so the definitions get C linkage and default visibility
 * even in a library built with -fvisibility=hidden). */
PACHECK_PLUGIN_EXPORT extern const uint32_t pacheck_plugin_abi_version;
PACHECK_PLUGIN_EXPORT pacheck_status pacheck_register_kernels(pacheck_registrar* registrar);
typedef pacheck_status (*pacheck_register_kernels_fn)(pacheck_registrar* registrar);

/* Write once at file scope in the plugin: defines pacheck_plugin_abi_version as the version the plugin
 * was compiled against. In C++ the definition is given C linkage again (extern "C" with an initialiser
 * is a definition), because a namespace-scope const has internal linkage there and GCC would warn that
 * the visibility attribute is ignored. */
#ifdef __cplusplus
#define PACHECK_PLUGIN_DEFINE_ABI_VERSION \
  extern "C" PACHECK_PLUGIN_EXPORT const uint32_t pacheck_plugin_abi_version = PACHECK_ABI_VERSION
#else
#define PACHECK_PLUGIN_DEFINE_ABI_VERSION \
  PACHECK_PLUGIN_EXPORT const uint32_t pacheck_plugin_abi_version = PACHECK_ABI_VERSION
#endif

#ifdef __cplusplus
}
#endif

#endif /* PACHECK_KERNEL_ABI_H */
