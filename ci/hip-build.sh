#!/usr/bin/env bash
# HIP compile check, for CI (which has no AMD GPU): the GPU kernels must build as HIP for a wave64 and a
# wave32 target, so a wave-size mistake that breaks compilation, or a CUDA-only call, fails CI. Nothing
# here runs on a GPU.
#   1. sources: no CUDA-only name outside kernels/gpu/gpu_runtime.hpp (runtime calls, *_sync warp
#      intrinsics, __syncwarp, inline PTX, CUDA headers) and no warpSize variable (kernels use the
#      compile-time kWarpSize, launchers the device's warp_size(); the DeviceProp field is fine);
#   2. configures BUILD_DIR with -DPACHECK_CUDA=OFF -DPACHECK_HIP=ON (no tests) and builds only the kernel
#      objects (target pacheck_hip_kernels: every kernels/gpu/*.cu) with hipcc for
#      every target of PACHECK_HIP_ARCHITECTURES, with -Werror;
#   3. inspects each object's code objects: one per target, every kernel compiled for the target's wave
#      width (wavefront_size 64 on gfx9, 32 on gfx10+) and launch-bounded to 4 waves
#      (max_flat_workgroup_size 256 / 128), no register spills.
#
# Usage: ci/hip-build.sh [BUILD_DIR]        (default build-hip-ci, relative to the repo root)
# Environment: HIP_ARCHS (default "gfx90a;gfx1030"), LLVM_BIN (folder of clang-offload-bundler,
#   llvm-objcopy and llvm-readelf; default: found next to hipcc's clang).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-build-hip-ci}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
archs="${HIP_ARCHS:-gfx90a;gfx1030}"
say() { echo "[hip-build] $*"; }
t0=$SECONDS

# 1. Sources. gpu_runtime.hpp is the one file allowed to name the CUDA runtime.
say "source check: CUDA-only names outside kernels/gpu/gpu_runtime.hpp"
cuda_only='\bcuda[A-Z][A-Za-z]*[[:space:]]*\(|__(shfl|shfl_up|shfl_down|shfl_xor|ballot|any|all|activemask|match_any|match_all|reduce_[a-z]+)_sync\b|__syncwarp\b|\basm[[:space:]]*(volatile[[:space:]]*)?\(|#[[:space:]]*include[[:space:]]*<(cuda|cub/|thrust/|cooperative_groups|mma\.h|nvfunctional)|\b__nv_[a-z]|(^|[^.>[:alnum:]_])warpSize\b'
if hits=$(cd "$root" && grep -nE "$cuda_only" kernels/gpu/*.cu kernels/gpu/*.cuh kernels/gpu/*.hpp kernels/gpu/*.cpp |
          grep -v '^kernels/gpu/gpu_runtime.hpp:'); then
  say "FAIL: CUDA-only code outside the portability header (add a wrapper to gpu_runtime.hpp):"
  echo "$hits"
  exit 1
fi

# 2. Kernel objects only (no tests, no host library): a few hipcc runs.
say "configure $build for HIP targets $archs"
mkdir -p "$build"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPACHECK_CUDA=OFF -DPACHECK_HIP=ON \
  -DPACHECK_BUILD_TESTS=OFF "-DPACHECK_HIP_ARCHITECTURES=$archs" -DPACHECK_HIP_FLAGS=-Werror >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; say "FAIL: configure"; exit 1; }
say "build pacheck_hip_kernels"
cmake --build "$build" --target pacheck_hip_kernels -j "${HIP_BUILD_JOBS:-$(nproc)}"

# 3. What the objects hold.
if [ -z "${LLVM_BIN:-}" ]; then
  for d in /usr/lib/llvm-15/bin /opt/rocm/llvm/bin "${ROCM_PATH:-/opt/rocm}/llvm/bin" \
           "$(dirname "$(readlink -f "$(command -v clang-15 || command -v clang || echo /nonexistent)")")"; do
    if [ -x "$d/clang-offload-bundler" ] && [ -x "$d/llvm-readelf" ] && [ -x "$d/llvm-objcopy" ]; then LLVM_BIN="$d"; break; fi
  done
fi
[ -n "${LLVM_BIN:-}" ] || { say "FAIL: no clang-offload-bundler / llvm-readelf / llvm-objcopy found (set LLVM_BIN)"; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
status=0
IFS=';' read -r -a arch_list <<<"$archs"
for obj in "$build"/kernels/gpu/hip/*.o; do
  name="$(basename "$obj" .o)"
  "$LLVM_BIN/llvm-objcopy" --dump-section ".hip_fatbin=$tmp/$name.fatbin" "$obj" "$tmp/$name.host.o"
  bundles="$("$LLVM_BIN/clang-offload-bundler" -list -type=o "-input=$tmp/$name.fatbin")"
  for arch in "${arch_list[@]}"; do
    case "$arch" in gfx9*) wave=64 ;; *) wave=32 ;; esac
    target="$(grep -E -- "--${arch}(:|\$)" <<<"$bundles" | head -n 1 || true)"
    if [ -z "$target" ]; then
      say "FAIL: $name.o has no code object for $arch (bundles: $(tr '\n' ' ' <<<"$bundles"))"
      status=1
      continue
    fi
    "$LLVM_BIN/clang-offload-bundler" -unbundle -type=o "-input=$tmp/$name.fatbin" "-targets=$target" \
      "-output=$tmp/$name.$arch.co"
    # One line per kernel from the code object's metadata: name, wavefront_size, max_flat_workgroup_size,
    # VGPR+SGPR spills, static LDS (.wavefront_size is the last key of each kernel's map).
    "$LLVM_BIN/llvm-readelf" --notes "$tmp/$name.$arch.co" | awk '
      /\.group_segment_fixed_size:/ { lds = $2 }
      /\.max_flat_workgroup_size:/ { mf = $2 }
      /\.name:/ { nm = $2 }
      /\.(vgpr|sgpr)_spill_count:/ { sp += $2 }
      /\.wavefront_size:/ { print nm, $2, mf, sp + 0, lds + 0; nm = ""; mf = 0; sp = 0; lds = 0 }' >"$tmp/$name.$arch.kernels"
    kernels=$(wc -l <"$tmp/$name.$arch.kernels")
    # Every kernel runs in the target's waves; the decode kernels are launch-bounded to 4 of them (fill is not).
    wrong_wave=$(awk -v w="$wave" '$2 != w' "$tmp/$name.$arch.kernels" | wc -l)
    wrong_block=$(awk -v b="$((4 * wave))" '$1 ~ /paged_attention_kernel|warp_split_.*kernel|merge_partitions_kernel/ && $3 != b' \
                  "$tmp/$name.$arch.kernels" | wc -l)
    spilling=$(awk '$4 > 0 { print $1 }' "$tmp/$name.$arch.kernels")
    lds_max=$(awk '$5 > m { m = $5 } END { print m + 0 }' "$tmp/$name.$arch.kernels")
    say "$name.o $arch: $kernels kernels, wave $wave, decode kernels in blocks of $((4 * wave)), static LDS max $lds_max B"
    if [ "$kernels" -eq 0 ] || [ "$wrong_wave" -ne 0 ] || [ "$wrong_block" -ne 0 ]; then
      say "FAIL: $name.o $arch: $wrong_wave kernels not wave $wave, $wrong_block decode kernels not bounded to $((4 * wave)) threads"
      status=1
    fi
    if [ -n "$spilling" ]; then
      say "note: $name.o $arch: register spills in $(wc -l <<<"$spilling") kernels:"
      (command -v c++filt >/dev/null && c++filt <<<"$spilling" || echo "$spilling") | sed 's/^/    /'
    fi
  done
done
say "done in $((SECONDS - t0)) s, status $status"
exit "$status"
