#!/usr/bin/env bash
# The Python route on the GPU host in one call (issue 42 items 1, 2, 3 and 7): installs the CUDA wheel built
# here (dist/pacheck-*.whl, carried in the tree), then, timing each step,
#   1. the Triton example's gate through pytest in process (batches: cases prepared on host threads while the
#      kernel runs), with the instrument check's cache cold;
#   2. the same suite through export -> runner.py (torch backend) -> score, with the wheel's pacheck command;
#   3. a one-test rerun of step 1 (the instrument check from the cache);
#   4. the FlexAttention adapter (examples/python/flex_attention_kernel.py) through pytest on gate,
#      tail-poison and boundary.
# Writes everything under OUT: gpu-python.log (all output), timings.txt ("NAME exit RC seconds S" a line),
# junit XML of each pytest run, the report directories (.pacheck-report) and environment.txt.
#
# Usage (device tool, repository root, with dist/ carried): bash ci/gpu-python.sh [OUT]   (default $OUT)
# The wheel: bash ci/build-wheel.sh --cuda here (dist/pacheck-0.1.0-py3-none-linux_x86_64.whl, about 37 MB).
# Environment: WHEEL (default the newest dist/pacheck-*.whl), PYTHON (default python3: torch's), SUITES_FLEX
# (default "gate tail-poison boundary").
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-${OUT:-$root/gpu-python-out}}"
mkdir -p "$out"
log="$out/gpu-python.log"
times="$out/timings.txt"
: >"$log"
: >"$times"
say() { echo "[gpu-python] $*" | tee -a "$log"; }
timed() {  # timed NAME CMD...: runs CMD (output to the log), appends "NAME exit RC seconds S" to timings.txt
  local name="$1"
  shift
  say "$name: $*"
  local t0 rc dt
  t0=$(date +%s.%N)
  "$@" >>"$log" 2>&1
  rc=$?
  dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  echo "$name exit $rc seconds $dt" | tee -a "$times" "$log"
}

py="${PYTHON:-python3}"
wheel="${WHEEL:-$(ls -t "$root"/dist/pacheck-*.whl 2>/dev/null | head -1)}"
if [ -z "$wheel" ] || [ ! -f "$wheel" ]; then
  say "no wheel: build one here with ci/build-wheel.sh --cuda (dist/pacheck-*.whl) and carry dist/"
  exit 2
fi
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; ldd --version | head -1
  "$py" -c 'import sys, torch, triton; print(sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__, "cuda", torch.cuda.is_available())'
  "$py" -c 'import numpy, pytest; print("numpy", numpy.__version__, "pytest", pytest.__version__)'; } >"$out/environment.txt" 2>&1
cat "$out/environment.txt" >>"$log"

# The wheel's files unpacked from the file alone (no index, no dependencies) into a folder put first on PYTHONPATH,
# beside torch's environment as it is: a venv made from a python that is itself a venv would not see torch.
# pytest gets -p pacheck.pytest_plugin (no entry points without an install), the command `python -m pacheck`.
site="$(mktemp -d)/site"
timed install "$py" -m pip install --no-index --no-deps --target "$site" "$wheel"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
vpy="$py"
"$vpy" -c 'import pacheck, json; print(json.dumps(pacheck.info()))' >>"$log" 2>&1 || { say "pacheck does not import"; exit 1; }
export PACHECK_CACHE_DIR="$out/cache" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
rm -rf "$PACHECK_CACHE_DIR"
cd "$root/examples/python" || exit 1
status=0

# 1. In process, cold instrument cache.
timed pytest-triton-gate "$vpy" -m pytest -p pacheck.pytest_plugin -p no:cacheprovider -q test_triton_kernel.py --pacheck-suite gate \
  --junitxml "$out/triton-gate.xml" --pacheck-report-dir "$out/reports"
grep -q "^pytest-triton-gate exit 0 " "$times" || status=1

# 1b. The same again with the instrument check cached (what a second CI job or a developer's rerun pays), and
# what a Python process pays before any cell: importing torch, triton and pacheck, and pytest's collection.
timed pytest-triton-gate-warm "$vpy" -m pytest -p pacheck.pytest_plugin -p no:cacheprovider -q test_triton_kernel.py --pacheck-suite gate \
  --junitxml "$out/triton-gate-warm.xml" --pacheck-report-dir "$out/reports-warm" --durations=5
timed import-torch-triton-pacheck "$vpy" -c "import torch, triton, pacheck; torch.zeros(1, device='cuda')"
timed pytest-collect-gate "$vpy" -m pytest -p pacheck.pytest_plugin -p no:cacheprovider -q --co test_triton_kernel.py --pacheck-suite gate

# 2. The file route on the same suite, with the wheel's command.
work="$(mktemp -d)"
timed export-gate "$vpy" -m pacheck export --suite gate --out "$work/cases"
timed runner-gate "$vpy" "$root/examples/python/runner.py" --backend torch --cases "$work/cases" --outputs "$work/outs"
timed score-gate "$vpy" -m pacheck score --cases "$work/cases" --outputs "$work/outs" --quiet
rm -rf "$work"

# 3. One test again (the first straddling V-poison cell): the instrument check comes from the cache.
one="$("$vpy" -m pytest -p pacheck.pytest_plugin -p no:cacheprovider -q --co test_triton_kernel.py --pacheck-suite gate 2>/dev/null |
  grep -m1 'V:nan_at_tail' | sed 's/^[^[]*\[//; s/\]$//')"
say "one test: $one"
timed pytest-triton-one "$vpy" -m pytest -p pacheck.pytest_plugin -p no:cacheprovider -q "test_triton_kernel.py::test_triton_paged[$one]" \
  --pacheck-suite gate --pacheck-report-dir "$out/reports-one"

# 4. The FlexAttention adapter on the three suites.
for s in ${SUITES_FLEX:-gate tail-poison boundary}; do
  timed "pytest-flex-$s" "$vpy" -m pytest -p pacheck.pytest_plugin -p no:cacheprovider -q -rs test_flex_attention.py --pacheck-suite "$s" \
    --junitxml "$out/flex-$s.xml" --pacheck-report-dir "$out/reports-flex-$s"
done

say "timings:"
tee -a "$log" <"$times"
exit $status
