#!/usr/bin/env bash
# GPU check: what is sent to the device machine (CI itself has no GPU).
#   1. builds for sm_90 into BUILD_DIR, unless it already holds the binaries (build here, carry it there);
#   2. runs the GPU unit tests (tests/test_gpu_kernels) against the oracle;
#   3. runs the bandwidth bench (PACHECK_GPU_BENCH=1) against the copy bandwidth measured in the same run;
#   4. runs the tail-poison, boundary, sweep and models suites on every GPU kernel through the pacheck CLI,
#      one JSON report per suite;
#   5. optionally (GPU_CHECK_SANITIZE=1, run before the suites) a small compute-sanitizer memcheck run;
#   6. the MLA kernels (tests/test_gpu_mla: gpu.mla_decode on every GPU MLA cell, its tail-fault twin caught
#      exactly, a 32,767-token DeepSeek-V3 case at 128 heads), their bench (PACHECK_GPU_BENCH=1) and, with
#      GPU_CHECK_SANITIZE=1, their memcheck.
# Every step runs even when an earlier one fails; the exit status is non-zero if any failed.
#
# Usage: ci/gpu-check.sh [BUILD_DIR] [OUT_DIR]
#   BUILD_DIR  default build-gpu (relative to the repo root)
#   OUT_DIR    default $OUT when set (the device tool's output folder), else gpu-check-out
# Environment: CUDA_ARCH (default 90), STEP_TIMEOUT seconds per step (default 900),
#   GPU_CHECK_SUITES (default "tail-poison boundary models sweep"), GPU_CHECK_SANITIZE=1,
#   GPU_CHECK_KERNELS (default: the six gpu.* kernels) for the suites,
#   GPU_CHECK_SKIP_TESTS=1 / GPU_CHECK_SKIP_BENCH=1 / GPU_CHECK_SKIP_MLA=1 to leave steps out (an MLA-only run:
#   GPU_CHECK_SKIP_TESTS=1 GPU_CHECK_SKIP_BENCH=1 GPU_CHECK_SUITES=" ").
# Output files (at most 8, flat, so the device tool returns them all): gpu-check.log (everything),
#   tests.log, bench.log, mla.log, <suite>.json per suite.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-build-gpu}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
out="${2:-${OUT:-$root/gpu-check-out}}"
mkdir -p "$out"
log="$out/gpu-check.log"
: >"$log"
arch="${CUDA_ARCH:-90}"
step_timeout="${STEP_TIMEOUT:-900}"
suites="${GPU_CHECK_SUITES:-tail-poison boundary models sweep}"
read -r -a kernels <<<"${GPU_CHECK_KERNELS:-gpu.paged_v1 gpu.paged_v1_tail_fault gpu.paged_v1_half_products gpu.paged_v2 gpu.warp_split gpu.warp_split_gqa}"
status=0

say() { echo "[gpu-check] $*" | tee -a "$log"; }
# step NAME LOGFILE CMD...: runs CMD with a timeout, output to LOGFILE and the main log.
step() {
  local name="$1" file="$2"
  shift 2
  say "step $name: $*"
  local t0=$SECONDS
  timeout "$step_timeout" "$@" 2>&1 | tee -a "$file" >>"$log"
  local rc=${PIPESTATUS[0]}
  say "step $name: exit $rc after $((SECONDS - t0)) s"
  if [ "$rc" -ne 0 ]; then status=1; fi
  return 0
}

say "repo $root, build $build, out $out, sm_$arch"
{ command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv; } >>"$log" 2>&1

test_bin="$build/tests/test_gpu_kernels"
mla_bin="$build/tests/test_gpu_mla"
cli_bin="$build/cli/pacheck"
if [ ! -x "$test_bin" ] || [ ! -x "$mla_bin" ] || [ ! -x "$cli_bin" ]; then
  say "building test_gpu_kernels, test_gpu_mla and pacheck for sm_$arch"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
    -DPACHECK_CUDA=ON >>"$log" 2>&1 || { say "configure failed"; exit 1; }
  cmake --build "$build" --target test_gpu_kernels test_gpu_mla pacheck -j "$(nproc)" >>"$log" 2>&1 ||
    { say "build failed"; exit 1; }
fi
{ echo "ldd $test_bin:"; ldd "$test_bin"; } >>"$log" 2>&1

if [ "${GPU_CHECK_SKIP_TESTS:-0}" != 1 ]; then
  step tests "$out/tests.log" "$test_bin" --gtest_color=no --gtest_brief=1
fi
if [ "${GPU_CHECK_SKIP_BENCH:-0}" != 1 ]; then
  step bench "$out/bench.log" env PACHECK_GPU_BENCH=1 "$test_bin" --gtest_color=no --gtest_filter='GpuBench.*'
fi

if [ "${GPU_CHECK_SANITIZE:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  step sanitize "$out/tests.log" compute-sanitizer --tool memcheck --error-exitcode 9 "$test_bin" --gtest_color=no \
    --gtest_filter='*HonoursQueryAndOutStrides*:*PeakedAndExtremeLogits/warp_split*:*PeakedAndExtremeLogits/paged_v2'
fi

if [ "${GPU_CHECK_SKIP_MLA:-0}" != 1 ]; then
  step mla "$out/mla.log" "$mla_bin" --gtest_color=no
  step mla-bench "$out/mla.log" env PACHECK_GPU_BENCH=1 "$mla_bin" --gtest_color=no --gtest_filter='GpuMlaBench.*'
  if [ "${GPU_CHECK_SANITIZE:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
    step mla-sanitize "$out/mla.log" compute-sanitizer --tool memcheck --error-exitcode 9 "$mla_bin" --gtest_color=no \
      --gtest_filter='GpuMlaKernels.PassEveryCell*'
  fi
fi

kargs=()
for k in "${kernels[@]}"; do kargs+=(--kernel "$k"); done
for s in $suites; do
  # A path, not a name: the binary's built-in suites folder is the build machine's checkout.
  spec="$s"
  if [ -f "$root/suites/$s.toml" ]; then spec="$root/suites/$s.toml"; fi
  step "suite-$s" "$out/suites.log" "$cli_bin" run --suite "$spec" "${kargs[@]}" --device cuda:0 --json "$out/$s.json"
done

say "done, status $status"
exit "$status"
