/*
 * pacheck kernel C ABI, version 1.
 *
 * The contract between pacheck and a paged-attention decode kernel. Built-in kernels and plugin kernels
 * (shared libraries loaded with `pacheck run --plugin lib.so`) are called through the same
 * `pacheck_kernel_args` struct, so a plugin gets every verdict, property and report a built-in gets.
 *
 * Operation (one decode step, one query token per sequence):
 *   out[s, h, :] = softmax(scale * q[s, h, :] . K_s^T) . V_s
 * where K_s, V_s are the first seq_lens[s] tokens of sequence s, found through block_tables[s, :], and
 * query head h reads KV head h / (num_heads / num_kv_heads) (GQA; ratio = num_heads / num_kv_heads).
 * Slots past seq_lens[s] in the final block, unused blocks and blocks named by block-table padding hold
 * arbitrary bits (pacheck fills them with NaN, Inf or garbage on purpose): a kernel must not let them
 * reach the output.
 *
 * Ownership: every pointer in pacheck_kernel_args is owned by pacheck and valid for the duration of the
 * `run` call only. Pointers are device pointers for the descriptor's device (host pointers for CPU
 * kernels). A kernel must not write anything but `out` (pacheck checksums the inputs and places guard
 * regions around `out`). Kernels may allocate their own scratch memory and must free it.
 *
 * Plugins export one function, `pacheck_register_kernels` (see below), returning a status.
 */
#ifndef PACHECK_KERNEL_ABI_H
#define PACHECK_KERNEL_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PACHECK_ABI_VERSION 1

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
 *   HND:  key_cache, value_cache [num_blocks, num_kv_heads, block_size, head_size] (FlashInfer "HND") */
typedef enum pacheck_layout {
  PACHECK_LAYOUT_VLLM = 0,
  PACHECK_LAYOUT_NHD = 1,
  PACHECK_LAYOUT_HND = 2
} pacheck_layout;

typedef enum pacheck_device {
  PACHECK_DEVICE_CPU = 0,
  PACHECK_DEVICE_CUDA = 1,
  PACHECK_DEVICE_HIP = 2
} pacheck_device;

typedef enum pacheck_status {
  PACHECK_OK = 0,
  PACHECK_DECLINED = 1, /* the kernel does not support this case; `error` holds the reason */
  PACHECK_ERROR = 2     /* the kernel failed; `error` holds the message */
} pacheck_status;

/* Arguments of one decode call. Sizes are element counts unless named *_bytes; strides are in elements
 * of the tensor's own dtype. */
typedef struct pacheck_kernel_args {
  uint32_t struct_size; /* sizeof(pacheck_kernel_args) as the caller built it */

  /* Shapes. */
  int32_t num_seqs;           /* number of sequences (one query token each) */
  int32_t num_heads;          /* query heads */
  int32_t num_kv_heads;       /* KV heads; num_heads % num_kv_heads == 0 */
  int32_t head_size;          /* elements per head */
  int32_t block_size;         /* tokens (slots) per KV block */
  int32_t num_blocks;         /* physical blocks in the pool */
  int32_t max_blocks_per_seq; /* columns of block_tables */
  pacheck_layout layout;
  pacheck_dtype q_dtype, kv_dtype, out_dtype;

  /* query [num_seqs, num_heads, head_size]; element (s, h, d) at s*q_stride_seq + h*q_stride_head + d. */
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
   * s*out_stride_seq + h*out_stride_head + d. pacheck fills it with NaN before the call. */
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
} pacheck_kernel_args;

#ifdef __cplusplus
}
#endif

#endif /* PACHECK_KERNEL_ABI_H */
