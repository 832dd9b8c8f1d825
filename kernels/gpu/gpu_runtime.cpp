// Host helpers of the portability header: per-device properties the launchers size their grids with, and
// the scratch-poisoning switch.
#include "kernels/gpu/gpu_runtime.hpp"

#include <array>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "kernels/gpu/launch.hpp"

namespace pacheck::gpu {
namespace {

struct DeviceFacts {
  bool known = false;
  bool pool_kept = false;
  int warp = 0;  // unknown until the device answers: block_threads() refuses to launch with it, since a
                 // guessed 32 would run a wave64 kernel with half its warps
  int sms = 1;
  int smem_optin = 48 * 1024;
};

constexpr int kMaxDevices = 64;
std::mutex g_mutex;
std::array<DeviceFacts, kMaxDevices> g_facts;

DeviceFacts& facts() {
  int dev = 0;
  if (get_device(&dev) != kSuccess || dev < 0 || dev >= kMaxDevices) dev = 0;
  DeviceFacts& f = g_facts[dev];
  if (!f.known) {
    DeviceProp p{};
    if (device_props(&p, dev) == kSuccess) {
      f.warp = p.warpSize;
      f.sms = p.multiProcessorCount;
      f.smem_optin = shared_mem_optin(p);
      f.known = true;
    } else {
      (void)get_last_error();  // leave no stale error for the next launch check
    }
  }
  return f;
}

}  // namespace

int warp_size() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return facts().warp;
}

int multiprocessor_count() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return facts().sms;
}

int max_shared_per_block() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return facts().smem_optin;
}

void keep_scratch_pool() {
  std::lock_guard<std::mutex> lock(g_mutex);
  DeviceFacts& f = facts();
  if (f.pool_kept) return;
  int dev = 0;
  MemPool pool{};
  if (get_device(&dev) == kSuccess && default_mem_pool(&pool, dev) == kSuccess && keep_pool_memory(pool) == kSuccess) {
    f.pool_kept = true;
  } else {
    (void)get_last_error();
  }
}

bool scratch_poison_enabled() {
#ifndef NDEBUG
  return true;
#else
  const char* v = std::getenv("PACHECK_GPU_POISON_SCRATCH");
  return v != nullptr && std::strcmp(v, "1") == 0;
#endif
}

}  // namespace pacheck::gpu
