/*
 * kr.online_decode_cuda: the CUDA kernel of this example kernel repository (built when CMake finds CUDA).
 * One thread block per (sequence, query head), one thread per head dimension: for each valid token the
 * block reduces q . k in shared memory, then every thread updates its own online-softmax accumulator for
 * its dimension (running max and sum kept identically by all threads). Written to be checked, not fast.
 *     pacheck run --device cuda --plugin build/libkr_online_decode_cuda.so
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include <pacheck/kernel_abi.h>

PACHECK_PLUGIN_DEFINE_ABI_VERSION;

namespace {

constexpr int kMaxHeadSize = 256;  // threads per block: one per dimension, rounded up to a power of two

__device__ float load(const void* base, int64_t i, pacheck_dtype t) {
  switch (t) {
    case PACHECK_DTYPE_F32: return static_cast<const float*>(base)[i];
    case PACHECK_DTYPE_F16: return __half2float(static_cast<const __half*>(base)[i]);
    case PACHECK_DTYPE_BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    default: return __int_as_float(0x7FC00000);
  }
}

__device__ void store(void* base, int64_t i, pacheck_dtype t, float v) {
  switch (t) {
    case PACHECK_DTYPE_F32: static_cast<float*>(base)[i] = v; break;
    case PACHECK_DTYPE_F16: static_cast<__half*>(base)[i] = __float2half_rn(v); break;
    case PACHECK_DTYPE_BF16: static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v); break;
    default: break;
  }
}

__device__ int64_t key_at(const pacheck_kernel_args& a, int64_t block, int g, int slot, int d) {
  const int64_t* s = a.k_strides;
  const int x = a.kv_dtype == PACHECK_DTYPE_F32 ? 4 : 8;
  if (a.layout == PACHECK_LAYOUT_VLLM) return block * s[0] + g * s[1] + (d / x) * s[2] + slot * s[3] + (d % x) * s[4];
  if (a.layout == PACHECK_LAYOUT_NHD) return block * s[0] + slot * s[1] + g * s[2] + d * s[3];
  return block * s[0] + g * s[1] + slot * s[2] + d * s[3];
}

__device__ int64_t value_at(const pacheck_kernel_args& a, int64_t block, int g, int slot, int d) {
  const int64_t* s = a.v_strides;
  if (a.layout == PACHECK_LAYOUT_VLLM) return block * s[0] + g * s[1] + d * s[2] + slot * s[3];
  if (a.layout == PACHECK_LAYOUT_NHD) return block * s[0] + slot * s[1] + g * s[2] + d * s[3];
  return block * s[0] + g * s[1] + slot * s[2] + d * s[3];
}

__global__ void decode(pacheck_kernel_args a) {
  __shared__ float partial[kMaxHeadSize];
  const int s = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  const int g = h / (a.num_heads / a.num_kv_heads), len = a.seq_lens[s];
  const bool mine = d < a.head_size;
  const float q = mine ? load(a.query, s * a.q_stride_seq + h * a.q_stride_head + d, a.q_dtype) : 0.f;
  float m = -INFINITY, l = 0.f, acc = 0.f;
  for (int t = 0; t < len; ++t) {
    const int64_t block = a.block_tables[s * a.block_tables_stride + t / a.block_size];
    const int slot = t % a.block_size;
    partial[d] = mine ? q * load(a.key_cache, key_at(a, block, g, slot, d), a.kv_dtype) : 0.f;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
      if (d < w) partial[d] += partial[d + w];
      __syncthreads();
    }
    const float logit = partial[0] * a.scale * a.k_scale;
    __syncthreads();  // partial[0] read by all before the next token overwrites it
    if (logit > m) {
      const float c = __expf(m - logit);
      l *= c;
      acc *= c;
      m = logit;
    }
    const float p = __expf(logit - m);
    l += p;
    if (mine) acc += p * load(a.value_cache, value_at(a, block, g, slot, d), a.kv_dtype);
  }
  if (mine) store(a.out, s * a.out_stride_seq + h * a.out_stride_head + d, a.out_dtype, acc / l * a.v_scale);
}

pacheck_status supports(void*, const pacheck_case_info* c, char* reason, size_t reason_size) {
  if (c->head_size > kMaxHeadSize) {
    std::snprintf(reason, reason_size, "head_size %d: one thread per dimension, at most %d", c->head_size, kMaxHeadSize);
    return PACHECK_DECLINED;
  }
  return PACHECK_OK;
}

pacheck_status run(void*, const pacheck_kernel_args* a, char* error, size_t error_size) {
  int threads = 32;
  while (threads < a->head_size) threads *= 2;
  decode<<<dim3(a->num_seqs, a->num_heads), threads, 0, static_cast<cudaStream_t>(a->stream)>>>(*a);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    std::snprintf(error, error_size, "launch: %s", cudaGetErrorString(e));
    return PACHECK_ERROR;
  }
  return PACHECK_OK;
}

}  // namespace

extern "C" pacheck_status pacheck_register_kernels(pacheck_registrar* r) {
  static const pacheck_layout layouts[] = {PACHECK_LAYOUT_NHD, PACHECK_LAYOUT_HND, PACHECK_LAYOUT_VLLM};
  static const pacheck_dtype dtypes[] = {PACHECK_DTYPE_BF16, PACHECK_DTYPE_F16, PACHECK_DTYPE_F32};
  pacheck_kernel_desc d;
  std::memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.name = "kr.online_decode_cuda";
  d.description = "examples/kernel-repo: CUDA online-softmax paged decode, one block per (seq, head)";
  d.device = PACHECK_DEVICE_CUDA;
  d.layouts = layouts;
  d.num_layouts = 3;
  d.q_dtypes = d.kv_dtypes = d.out_dtypes = dtypes;
  d.num_q_dtypes = d.num_kv_dtypes = d.num_out_dtypes = 3;
  d.supports = supports;
  d.run = run;
  return r->add_kernel(r, &d);
}
