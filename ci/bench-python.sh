#!/usr/bin/env bash
# The Python route's timings on this machine (docs/BENCHMARKS.md, "The Python route on 2 cores"): the NumPy
# example over gate through pytest, and a one-test rerun, for a baseline checkout BASE (a CMake build of it at
# BASE/build/nocuda) against this tree (build/nocuda), back to back, twice; the cache cold then warm for this tree.
# Usage: ci/bench-python.sh BASE [ROUNDS]   -> one line per run: NAME rc RC SECONDS s load LOAD
set -u
base="$1"
rounds="${2:-2}"
here="$(cd "$(dirname "$0")/.." && pwd)"
cache="$(mktemp -d)"
base_lib=$(ls "$base"/build/nocuda/cells/libpacheck_cells.so | head -1)
one_base='test_numpy_kernel.py::test_numpy_decode[h8/2 d128 bs16 bf16 ctx1000,37 nhd seed7 V:nan@tail]'
one_new='test_numpy_kernel.py::test_numpy_decode[h8/2 d128 bs16 bf16 ctx1000,37 nhd seed7 V:nan_at_tail]'
t() {
  local name=$1 t0 rc
  shift
  t0=$(date +%s.%N)
  "$@" >"$cache/$name.log" 2>&1
  rc=$?
  echo "$name rc $rc $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s load $(cut -d' ' -f1 /proc/loadavg)"
}
base_env() { env PACHECK_LIB="$base_lib" PYTHONPATH="$base/python:$base/examples/python" PYTHONDONTWRITEBYTECODE=1 "$@"; }
new_env() {
  env PACHECK_LIB="$here/build/nocuda/cells/libpacheck_cells_c.so" PYTHONPATH="$here/python:$here/examples/python" \
    PYTHONDONTWRITEBYTECODE=1 PACHECK_CACHE_DIR="$cache/instrument" "$@"
}
pt=(python3 -m pytest -p pacheck.pytest_plugin -p no:cacheprovider -q)
for r in $(seq "$rounds"); do
  (cd "$base/examples/python" && t "base-gate-$r" base_env "${pt[@]}" -k test_numpy_decode test_numpy_kernel.py)
  rm -rf "$cache/instrument"
  (cd "$here/examples/python" && t "new-gate-cold-$r" new_env "${pt[@]}" -k test_numpy_decode test_numpy_kernel.py --pacheck-report-dir "$cache/rep")
  (cd "$here/examples/python" && t "new-gate-warm-$r" new_env "${pt[@]}" -k test_numpy_decode test_numpy_kernel.py --pacheck-report-dir "$cache/rep")
  (cd "$here/examples/python" && t "new-gate-warm-serial-$r" new_env "${pt[@]}" -k test_numpy_decode test_numpy_kernel.py --pacheck-serial --pacheck-report-dir "$cache/rep")
  (cd "$base/examples/python" && t "base-one-$r" base_env "${pt[@]}" "$one_base")
  (cd "$here/examples/python" && t "new-one-$r" new_env "${pt[@]}" "$one_new" --pacheck-report-dir "$cache/rep1")
done
echo "logs in $cache"
