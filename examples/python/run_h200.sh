#!/usr/bin/env bash
# The Triton example on the GPU machine (issue 20, item 4): pytest through pacheck's Python module over gate
# and sweep, timed against the export -> runner -> score route on the same suites.
#
# Usage: examples/python/run_h200.sh [BUILD_DIR] [OUT_DIR]
#   BUILD_DIR  a CUDA build holding cells/libpacheck_cells.so and cli/pacheck (default build-gpu; built here
#              for sm_90 with -DPACHECK_CUDA=ON when missing, as ci/gpu-check.sh builds)
#   OUT_DIR    default $OUT (the device tool's folder), else run-h200-out
# Environment: SUITES (default "gate sweep"), XDIST (default empty; e.g. "-n 4" needs pytest-xdist, each worker
#   runs its own instrument check and opens its own context).
# Writes OUT_DIR/run_h200.log (everything), OUT_DIR/timings.txt (one line per step: name, exit, seconds),
#   OUT_DIR/<suite>.xml (junit of each pytest run).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-build-gpu}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
out="${2:-${OUT:-$root/run-h200-out}}"
mkdir -p "$out"
log="$out/run_h200.log"
times="$out/timings.txt"
: >"$log"
: >"$times"
suites="${SUITES:-gate sweep}"
say() { echo "[run_h200] $*" | tee -a "$log"; }
timed() {  # timed NAME CMD...: runs CMD, appends "NAME exit RC seconds S" to timings.txt
  local name="$1"
  shift
  say "$name: $*"
  local t0 rc
  t0=$(date +%s.%N)
  "$@" >>"$log" 2>&1
  rc=$?
  local dt
  dt=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)")
  echo "$name exit $rc seconds $dt" | tee -a "$times" "$log"
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc;
  python3 -c 'import sys, torch, triton, numpy, pytest; print(sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__, "numpy", numpy.__version__, "pytest", pytest.__version__, "cuda", torch.cuda.is_available())'; } >>"$log" 2>&1
if [ ! -f "$build/cells/libpacheck_cells.so" ] || [ ! -x "$build/cli/pacheck" ]; then
  say "building pacheck_cells and pacheck for sm_90 into $build"
  timed build sh -c "cmake -S '$root' -B '$build' -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DPACHECK_CUDA=ON && cmake --build '$build' --target pacheck_cells pacheck -j $(nproc)"
fi
export PACHECK_LIB="$build/cells/libpacheck_cells.so" PYTHONPATH="$root/python:$root/examples/python" PYTHONUNBUFFERED=1
python3 -c 'import pacheck; print(pacheck.info())' >>"$log" 2>&1 || { say "pacheck does not import"; exit 1; }

status=0
for s in $suites; do
  # In process: the Triton kernel on every cell of the suite, no files.
  # shellcheck disable=SC2086
  timed "pytest-$s" python3 -m pytest -p pacheck.pytest_plugin -p no:cacheprovider -q ${XDIST:-} \
    --pacheck-suite "$s" --junitxml "$out/$s.xml" "$root/examples/python/test_triton_kernel.py"
  grep -q "^pytest-$s exit 0 " "$times" || status=1
  # The file route on the same suite: export, a runner (runner.py's torch backend on CUDA), score.
  work="$(mktemp -d)"
  timed "export-$s" "$build/cli/pacheck" export --suite "$s" --out "$work/cases"
  timed "runner-$s" python3 "$root/examples/python/runner.py" --backend torch --cases "$work/cases" --outputs "$work/outs"
  timed "score-$s" "$build/cli/pacheck" score --cases "$work/cases" --outputs "$work/outs" --quiet
  du -sh "$work/cases" >>"$log" 2>&1
  rm -rf "$work"
done
say "timings:"
cat "$times" | tee -a "$log"
exit $status
