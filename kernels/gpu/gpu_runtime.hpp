// The one portability header of the GPU code: everything that names the CUDA or the HIP runtime lives here,
// so the same kernels and device backend compile with nvcc (CUDA) and with hipcc (HIP: gfx90a wave64,
// gfx1030 wave32). HIP's own CUDA-platform headers do not compile against CUDA 13, hence a header of our own.
//
// What it provides, in namespace pacheck::gpu:
//   - runtime calls and types: Error, Stream, Event, DeviceProp and thin wrappers (malloc_async, ...);
//   - error strings and the "sticky error" test (errors after which the context is unusable);
//   - element types: half_t, bf16_t, and exact fp32 conversions for them (device code);
//   - kWarpSize (compile-time, device code) and the warp shuffles kernels use;
//   - 16-byte vector loads and their expansion to fp32, asynchronous global->shared copies, and the
//     approximate exp2 / reciprocal the softmax uses.
// Kernels never write 32 for the warp width: they use kWarpSize in device code and the launcher asks
// the device (warp_size()) for the block width, so a wave64 build shapes its blocks to match.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

// HIP when hipcc compiles (__HIPCC__) or when a host-only TU of the HIP library is built with the host compiler
// (CMake defines PACHECK_GPU_HIP and __HIP_PLATFORM_AMD__ for those: see kernels/gpu/CMakeLists.txt).
#if defined(PACHECK_GPU_HIP) || defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__)
#define PACHECK_GPU_IS_HIP 1
#include <hip/hip_bfloat16.h>
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>
#else
#define PACHECK_GPU_IS_HIP 0
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)
#define PACHECK_DEVICE __device__ __forceinline__
#define PACHECK_GPU_COMPILER 1
#else
#define PACHECK_GPU_COMPILER 0
#endif

namespace pacheck::gpu {

// ---------------------------------------------------------------------------------------------------
// Runtime: types and calls. The two runtimes name their API alike (hipMalloc / cudaMalloc, ...), so the
// wrappers are written once through PACHECK_RT(Name), which pastes the runtime's prefix; only what differs
// (the device properties type, the sticky errors, version encodings, the shared-memory limit)
// is written per runtime below.
#if PACHECK_GPU_IS_HIP
#define PACHECK_RT(name) hip##name
#else
#define PACHECK_RT(name) cuda##name
#endif
using Error = PACHECK_RT(Error_t);
using Stream = PACHECK_RT(Stream_t);
using Event = PACHECK_RT(Event_t);
using MemPool = PACHECK_RT(MemPool_t);
#if PACHECK_GPU_IS_HIP
using DeviceProp = hipDeviceProp_t;
#else
using DeviceProp = cudaDeviceProp;
#endif
inline constexpr Error kSuccess = PACHECK_RT(Success);
inline const char* error_string(Error e) { return PACHECK_RT(GetErrorString)(e); }
inline const char* error_name(Error e) { return PACHECK_RT(GetErrorName)(e); }
inline Error get_last_error() { return PACHECK_RT(GetLastError)(); }
inline Error peek_last_error() { return PACHECK_RT(PeekAtLastError)(); }
inline Error device_count(int* n) { return PACHECK_RT(GetDeviceCount)(n); }
inline Error set_device(int d) { return PACHECK_RT(SetDevice)(d); }
inline Error get_device(int* d) { return PACHECK_RT(GetDevice)(d); }
inline Error device_props(DeviceProp* p, int d) { return PACHECK_RT(GetDeviceProperties)(p, d); }
inline Error driver_version(int* v) { return PACHECK_RT(DriverGetVersion)(v); }
inline Error runtime_version(int* v) { return PACHECK_RT(RuntimeGetVersion)(v); }
inline Error malloc_device(void** p, std::size_t n) { return PACHECK_RT(Malloc)(p, n); }
inline Error free_device(void* p) { return PACHECK_RT(Free)(p); }
inline Error malloc_async(void** p, std::size_t n, Stream s) { return PACHECK_RT(MallocAsync)(p, n, s); }
inline Error free_async(void* p, Stream s) { return PACHECK_RT(FreeAsync)(p, s); }
inline Error memset_async(void* p, int v, std::size_t n, Stream s) { return PACHECK_RT(MemsetAsync)(p, v, n, s); }
inline Error copy_h2d_async(void* d, const void* h, std::size_t n, Stream s) {
  return PACHECK_RT(MemcpyAsync)(d, h, n, PACHECK_RT(MemcpyHostToDevice), s);
}
inline Error copy_d2h_async(void* h, const void* d, std::size_t n, Stream s) {
  return PACHECK_RT(MemcpyAsync)(h, d, n, PACHECK_RT(MemcpyDeviceToHost), s);
}
inline Error copy_d2d_async(void* d, const void* src, std::size_t n, Stream s) {
  return PACHECK_RT(MemcpyAsync)(d, src, n, PACHECK_RT(MemcpyDeviceToDevice), s);
}
inline Error stream_create(Stream* s) { return PACHECK_RT(StreamCreateWithFlags)(s, PACHECK_RT(StreamNonBlocking)); }
inline Error stream_destroy(Stream s) { return PACHECK_RT(StreamDestroy)(s); }
inline Error stream_sync(Stream s) { return PACHECK_RT(StreamSynchronize)(s); }
inline Error event_create(Event* e) { return PACHECK_RT(EventCreate)(e); }
inline Error event_destroy(Event e) { return PACHECK_RT(EventDestroy)(e); }
inline Error event_record(Event e, Stream s) { return PACHECK_RT(EventRecord)(e, s); }
inline Error event_sync(Event e) { return PACHECK_RT(EventSynchronize)(e); }
inline Error event_elapsed_ms(float* ms, Event a, Event b) { return PACHECK_RT(EventElapsedTime)(ms, a, b); }
inline Error default_mem_pool(MemPool* p, int d) { return PACHECK_RT(DeviceGetDefaultMemPool)(p, d); }
/// Stream-ordered scratch (malloc_async) is returned to the pool, not the OS, between calls: without
/// this, every kernel call after a sync would map fresh pages and the bench would time the allocator.
inline Error keep_pool_memory(MemPool p) {
  std::uint64_t keep = UINT64_MAX;
  return PACHECK_RT(MemPoolSetAttribute)(p, PACHECK_RT(MemPoolAttrReleaseThreshold), &keep);
}
/// Lets `kernel` use `bytes` of dynamic shared memory (above the 48 KiB default on CUDA).
template <class F>
inline Error allow_dynamic_smem(F* kernel, int bytes) {
  return PACHECK_RT(FuncSetAttribute)(reinterpret_cast<const void*>(kernel),
                                      PACHECK_RT(FuncAttributeMaxDynamicSharedMemorySize), bytes);
}
/// "No device" rather than an error: no GPU, or the toolkit without a driver (cudaErrorInsufficientDriver
/// on the CPU machines: "CUDA driver version is insufficient for CUDA runtime version").
inline bool is_no_device(Error e) { return e == PACHECK_RT(ErrorNoDevice) || e == PACHECK_RT(ErrorInsufficientDriver); }

#if PACHECK_GPU_IS_HIP
inline constexpr const char* kRuntimeName = "HIP";
/// Backend kind: device specs "hip" / "hip:N", backend names "hip:0", error prefixes "hip: ...".
inline constexpr const char* kBackendKind = "hip";
/// Errors after which the context is unusable: every later call fails with the same error.
inline bool is_sticky(Error e) {
  return e == hipErrorIllegalAddress || e == hipErrorLaunchFailure || e == hipErrorIllegalState ||
         e == hipErrorAssert || e == hipErrorLaunchTimeOut || e == hipErrorECCNotCorrectable;
}
/// AMD has no shared-memory opt-in: a workgroup may use all of its LDS (64 KiB on gfx90a and gfx1030).
inline int shared_mem_optin(const DeviceProp& p) { return static_cast<int>(p.sharedMemPerBlock); }
/// "gfx90a:sramecc+:xnack-" and the like: the code-object target the runtime picked for this device.
inline std::string arch_name(const DeviceProp& p) { return p.gcnArchName; }
/// HIP encodes versions as 10^7 * major + 10^5 * minor + patch (5.2.21153 -> 50221153).
inline std::string version_string(int v) {
  return std::to_string(v / 10000000) + "." + std::to_string((v / 100000) % 100) + "." + std::to_string(v % 100000);
}
#else
inline constexpr const char* kRuntimeName = "CUDA";
/// Backend kind: device specs "cuda" / "cuda:N", backend names "cuda:0", error prefixes "cuda: ...".
inline constexpr const char* kBackendKind = "cuda";
/// Errors after which the context is unusable: every later call fails with the same error.
inline bool is_sticky(Error e) {
  return e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure || e == cudaErrorMisalignedAddress ||
         e == cudaErrorIllegalInstruction || e == cudaErrorInvalidAddressSpace || e == cudaErrorInvalidPc ||
         e == cudaErrorHardwareStackError || e == cudaErrorAssert || e == cudaErrorLaunchTimeout ||
         e == cudaErrorECCUncorrectable || e == cudaErrorTensorMemoryLeak;
}
inline int shared_mem_optin(const DeviceProp& p) { return static_cast<int>(p.sharedMemPerBlockOptin); }
/// "sm_90": the compute capability.
inline std::string arch_name(const DeviceProp& p) { return "sm_" + std::to_string(p.major) + std::to_string(p.minor); }
/// CUDA encodes versions as 1000 * major + 10 * minor (13000 -> 13.0).
inline std::string version_string(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }
#endif
#undef PACHECK_RT

// ---------------------------------------------------------------------------------------------------
// Element types. bf16 is converted by bit manipulation (exact upcast, round-to-nearest-even downcast with
// NaN kept quiet), so both runtimes give bit-identical results whatever their bf16 library offers.
#if PACHECK_GPU_IS_HIP
using half_t = __half;
using bf16_t = hip_bfloat16;
#else
using half_t = __half;
using bf16_t = __nv_bfloat16;
#endif
static_assert(sizeof(half_t) == 2 && sizeof(bf16_t) == 2, "16-bit element types");

#if PACHECK_GPU_COMPILER

// Wave width known at compile time in device code. hipcc compiles device code once per --offload-arch, and
// each device pass sees its target's width in __AMDGCN_WAVEFRONT_SIZE: 64 on gfx90a (CDNA), 32 on gfx1030
// (RDNA, whose default is wave32). The host pass also defines the macro (64 whatever the targets), so in
// host code kWarpSize is meaningless: launchers size blocks and shared memory with warp_size(), the
// device's runtime width, through the functions of lane_math.hpp.
#if PACHECK_GPU_IS_HIP
#if !defined(__AMDGCN_WAVEFRONT_SIZE)
#error "hipcc did not define __AMDGCN_WAVEFRONT_SIZE: the wave width of the target is unknown"
#endif
inline constexpr int kWarpSize = __AMDGCN_WAVEFRONT_SIZE;
#else
inline constexpr int kWarpSize = 32;
#endif
static_assert(kWarpSize == 32 || kWarpSize == 64, "the kernels' shuffles and lane splits assume a 32- or 64-wide warp");

/// Butterfly exchange among groups of `width` lanes (a power of two, at most the warp): the value of lane
/// (lane ^ mask). Every lane of the warp must call it (CUDA: full mask; AMD waves run in lockstep).
PACHECK_DEVICE float shfl_xor(float v, int mask, int width = kWarpSize) {
#if PACHECK_GPU_IS_HIP
  return __shfl_xor(v, mask, width);
#else
  return __shfl_xor_sync(0xffffffffu, v, mask, width);
#endif
}

/// Copies the bytes of one object into another of the same size in device code (a bit cast that keeps NaN
/// payloads). HIP's device code has no libc memcpy; the compiler builtin is what its own headers use.
PACHECK_DEVICE void copy_bits(void* dst, const void* src, std::size_t n) {
#if PACHECK_GPU_IS_HIP
  __builtin_memcpy(dst, src, n);
#else
  memcpy(dst, src, n);
#endif
}

PACHECK_DEVICE float bits_to_float(std::uint32_t b) { return __uint_as_float(b); }

/// Element <-> fp32, exact upcast; downcast rounds to nearest even.
template <class T> struct Elem;
template <> struct Elem<float> {
  static PACHECK_DEVICE float to_float(float v) { return v; }
  static PACHECK_DEVICE float from_float(float v) { return v; }
};
template <> struct Elem<half_t> {
  static PACHECK_DEVICE float to_float(half_t v) { return __half2float(v); }
  static PACHECK_DEVICE half_t from_float(float v) { return __float2half_rn(v); }
};
template <> struct Elem<bf16_t> {
  static PACHECK_DEVICE float to_float(bf16_t v) {
    std::uint16_t b;
    copy_bits(&b, &v, 2);
    return __uint_as_float(static_cast<std::uint32_t>(b) << 16);
  }
  static PACHECK_DEVICE bf16_t from_float(float f) {
    std::uint32_t u = __float_as_uint(f);
    std::uint16_t b;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      b = static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // NaN stays a quiet NaN
    } else {
      u += 0x7fffu + ((u >> 16) & 1u);                       // round to nearest, ties to even
      b = static_cast<std::uint16_t>(u >> 16);
    }
    bf16_t r;
    copy_bits(&r, &b, 2);
    return r;
  }
};

/// Elements of T in one 16-byte vector.
template <class T>
inline constexpr int kVec16 = static_cast<int>(16 / sizeof(T));

/// 16-byte read-only load (ld.global.nc on CUDA). `p` must be 16-byte aligned.
PACHECK_DEVICE uint4 load16(const void* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

/// Expands one 16-byte vector of T into kVec16<T> fp32 values (exact).
template <class T>
PACHECK_DEVICE void expand16(const uint4& v, float* out);
template <>
PACHECK_DEVICE void expand16<float>(const uint4& v, float* out) {
  out[0] = __uint_as_float(v.x); out[1] = __uint_as_float(v.y);
  out[2] = __uint_as_float(v.z); out[3] = __uint_as_float(v.w);
}
template <>
PACHECK_DEVICE void expand16<bf16_t>(const uint4& v, float* out) {
  const std::uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(w[i] << 16);
    out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
template <>
PACHECK_DEVICE void expand16<half_t>(const uint4& v, float* out) {
  const std::uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __half2 h;
    copy_bits(&h, &w[i], 4);
    const float2 f = __half22float2(h);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

/// a * b + c with 32-bit unsigned a, b and a 64-bit c: one wide multiply-add (mad.wide.u32). Written in
/// PTX on CUDA: with the plain expression nvcc 13.0 regroups the 64-bit additions of the warp-split row
/// addresses, and the sm_90 token loops grew (bf16 head 128 basic 547 -> 571 instructions, pipelined
/// 858 -> 881, f32 354 -> 383). Elsewhere the plain expression.
PACHECK_DEVICE std::uint64_t mad_wide_u32(std::uint32_t a, std::uint32_t b, std::uint64_t c) {
#if PACHECK_GPU_IS_HIP
  return static_cast<std::uint64_t>(a) * b + c;
#else
  std::uint64_t r;
  asm("mad.wide.u32 %0, %1, %2, %3;" : "=l"(r) : "r"(a), "r"(b), "l"(c));
  return r;
#endif
}

/// 2^x with one special-function instruction (ex2.approx.ftz: about 2 ulp; -inf gives +0). For softmax
/// weights, whose error is far below the output dtype's.
PACHECK_DEVICE float fast_exp2(float x) {
#if PACHECK_GPU_IS_HIP
  return exp2f(x);
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

/// 1/x with one special-function instruction (rcp.approx.ftz: about 1 ulp).
PACHECK_DEVICE float fast_rcp(float x) {
#if PACHECK_GPU_IS_HIP
  return 1.f / x;
#else
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

/// Asynchronous 16-byte copy global -> shared (cp.async, sm_80 and later, cached in L1 too so warps of a
/// block that read the same rows share them). `valid == false` writes zeros and reads nothing. Only the
/// issuing thread may read the destination, after async_wait. Elsewhere: a synchronous copy, same result.
PACHECK_DEVICE void async_copy16(void* smem_dst, const void* gsrc, bool valid) {
#if !PACHECK_GPU_IS_HIP && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gsrc), "r"(valid ? 16 : 0)
               : "memory");
#else
  *static_cast<uint4*>(smem_dst) = valid ? load16(gsrc) : make_uint4(0, 0, 0, 0);
#endif
}
/// Closes the group of async copies issued since the last commit.
PACHECK_DEVICE void async_commit() {
#if !PACHECK_GPU_IS_HIP && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
/// Waits until at most N committed groups of this thread are still in flight.
template <int N>
PACHECK_DEVICE void async_wait() {
#if !PACHECK_GPU_IS_HIP && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

#endif  // PACHECK_GPU_COMPILER

// ---------------------------------------------------------------------------------------------------
// Host helpers shared by the launchers.

/// The current device's warp (wave) width, cached per device ordinal.
int warp_size();
/// The current device's multiprocessor count and opt-in shared memory per block (bytes).
int multiprocessor_count();
int max_shared_per_block();
/// Sets the default memory pool of the current device to keep freed scratch (once per device).
void keep_scratch_pool();

}  // namespace pacheck::gpu
