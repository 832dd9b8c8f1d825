#!/usr/bin/env bash
# The device-machine runs issue 45's changes owe (written where there is no GPU and 2 shared cores). What the
# changes touch: the default oracle (fp64), gate's new cells (logits far from zero, a contrasting pair of one
# shape, flat f16 at 20K/32K tokens, e4m3fn top-binade codes, per-slot fp8 tables in nhd/hnd/vllm), the
# in-process lanes' buffer reuse (one buffer shape's items run as one chain on the same buffers), and the
# generators' new draws (variants, offset distributions, fp8 top binade).
#
# Usage: ci/gpu-teeth.sh PART [BUILD_DIR]      (BUILD_DIR default build-gpu; logs under $OUT, default
#                                                gpu-teeth-out; each PART fits the device tool's 10 minutes)
#   gpu       gate on every GPU kernel (honest ones pass every cell, the gpu.* controls are caught, exit 0),
#             then the trust run on the honest GPU designs: gate at 10 seeds, fuzz --budget 60 at 2 seeds
#   cpu-gate  the trust run on every CPU kernel (the honest panel, the negative controls, the planted
#             faults): gate at 10 seeds (issue 45's acceptance: 0 false alarms, every control caught)
#   cpu-fuzz  the trust run's fuzz --budget 60 on every honest CPU design at FUZZ_SEEDS seeds from FUZZ_FIRST
#             (default 5 from 1: about 17 designs x 5 x 60 s / 16 jobs = 5.5 min; 10 seeds: two calls,
#             FUZZ_FIRST=1 and FUZZ_FIRST=6, or 32 cores)
# Environment: CUDA_ARCH (default 90), FUZZ_SEEDS, FUZZ_FIRST, STEP_TIMEOUT seconds per step (default 570).
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
part="${1:?usage: ci/gpu-teeth.sh gpu|cpu-gate|cpu-fuzz [BUILD_DIR]}"
build="${2:-build-gpu}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
out="${OUT:-$root/gpu-teeth-out}"
mkdir -p "$out"
log="$out/gpu-teeth-$part.log"
: >"$log"
arch="${CUDA_ARCH:-90}"
step_timeout="${STEP_TIMEOUT:-570}"
jobs="$(nproc)"
status=0

say() { echo "[gpu-teeth] $*" | tee -a "$log"; }
step() {
  local name="$1"
  shift
  say "step $name: $*"
  local t0=$SECONDS
  timeout "$step_timeout" "$@" >>"$log" 2>&1
  local rc=$?
  say "step $name: exit $rc after $((SECONDS - t0)) s"
  if [ "$rc" -ne 0 ]; then status=1; fi
}

{ command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv; } >>"$log" 2>&1
cli="$build/cli/pacheck"
if [ ! -x "$cli" ]; then
  say "building pacheck for sm_$arch"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
    -DPACHECK_CUDA=ON >>"$log" 2>&1 || { say "configure failed"; exit 1; }
  cmake --build "$build" --target pacheck -j "$jobs" >>"$log" 2>&1 || { say "build failed"; exit 1; }
fi
trust=(python3 "$root/ci/trust-run.py" --pacheck "$cli" --suites gate --jobs "$jobs")

case "$part" in
  gpu)
    gpu_kernels=() honest=()
    while read -r name kind rest; do
      [ "$kind" = cuda ] || continue
      gpu_kernels+=(--kernel "$name")
      case "$rest" in *"[negative control]"*) ;; *) honest+=("$name") ;; esac
    done < <("$cli" list kernels)
    say "gpu kernels: ${gpu_kernels[*]}"
    step gate "$cli" run --suite "$root/suites/gate.toml" "${gpu_kernels[@]}" --device cuda:0 --json "$out/gate.json"
    step trust "${trust[@]}" --out "$out/trust-gpu" --device cuda:0 --kernels "$(IFS=,; echo "${honest[*]}")" \
      --no-planted --no-controls --seeds 10 --fuzz-seeds 2 --fuzz-budget 60 --jobs 4
    cp "$out/trust-gpu/summary.txt" "$out/trust-gpu-summary.txt" 2>/dev/null ;;
  cpu-gate)
    step trust "${trust[@]}" --out "$out/trust-cpu-gate" --seeds 10 --fuzz-seeds 0
    cp "$out/trust-cpu-gate/summary.txt" "$out/trust-cpu-gate-summary.txt" 2>/dev/null ;;
  cpu-fuzz)
    step trust "${trust[@]}" --out "$out/trust-cpu-fuzz" --seeds 0 --no-planted --no-controls \
      --fuzz-seeds "${FUZZ_SEEDS:-5}" --first-fuzz-seed "${FUZZ_FIRST:-1}" --fuzz-budget 60
    cp "$out/trust-cpu-fuzz/summary.txt" "$out/trust-cpu-fuzz-summary.txt" 2>/dev/null ;;
  *) say "unknown part '$part' (gpu, cpu-gate, cpu-fuzz)"; exit 2 ;;
esac
say "exit $status"
exit "$status"
