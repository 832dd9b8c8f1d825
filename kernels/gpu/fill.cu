// Device-side random fill for benchmarks: gigabyte caches are generated where they live instead of being
// made on the host and copied (and timings must never run on zeros: device-notes.md).
#include "kernels/gpu/attention_common.cuh"

namespace pacheck::gpu {
namespace {

/// SplitMix64 finaliser: a counter hash, so element i's value depends only on (seed, i).
PACHECK_DEVICE std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <class T>
__global__ void fill_uniform_kernel(T* p, std::size_t n, std::uint64_t seed, float amplitude) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::uint64_t r = mix64(seed * 0x9e3779b97f4a7c15ull + i);
    const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    p[i] = Elem<T>::from_float((2.f * u - 1.f) * amplitude);
  }
}

}  // namespace

LaunchResult fill_uniform(void* p, std::size_t n, pacheck_dtype dtype, std::uint64_t seed, float amplitude,
                          void* stream) {
  if (n == 0) return {};
  const Stream st = static_cast<Stream>(stream);
  const int threads = 256;
  const int blocks = std::max(1, std::min(multiprocessor_count() * 8, static_cast<int>((n + threads - 1) / threads)));
  switch (dtype) {
    case PACHECK_DTYPE_F32: fill_uniform_kernel<float><<<blocks, threads, 0, st>>>(static_cast<float*>(p), n, seed, amplitude); break;
    case PACHECK_DTYPE_F16: fill_uniform_kernel<half_t><<<blocks, threads, 0, st>>>(static_cast<half_t*>(p), n, seed, amplitude); break;
    case PACHECK_DTYPE_BF16: fill_uniform_kernel<bf16_t><<<blocks, threads, 0, st>>>(static_cast<bf16_t*>(p), n, seed, amplitude); break;
    default: return {"fill_uniform: dtype " + std::to_string(static_cast<int>(dtype)) + " not in {f32,f16,bf16}"};
  }
  return check_launch("fill_uniform");
}

}  // namespace pacheck::gpu
