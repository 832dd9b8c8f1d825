#!/usr/bin/env bash
# The bad-input CLI scenarios under AddressSanitizer + UBSan (issue 21): builds pacheck and the planted
# plugin with the asan preset's settings (-fsanitize=address,undefined, no CUDA),
# then runs tests/cli/test_reports_cli.py's bad_input (out-of-range ids and flags, unknown kernels, devices
# and suites, plugins dying on load) and input_files (/dev/zero, FIFOs, directories and oversized files as
# every kind of input), and every scenario of tests/cli/test_hostile_cli.py (issue 46: empty values, plugins
# that exit or hang in process, oversized suites, plugins and cells, edited manifests) against that binary. Fails when a scenario fails or when any process wrote a
# sanitizer report (each goes to its own file under BUILD_DIR/sanitizer-logs, children included).
# Needs clang (ci/install-deps.sh --fuzz). Usage: ci/asan-bad-input.sh [BUILD_DIR] (default build/asan-ci).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build="${1:-build/asan-ci}"
start=$(date +%s)
# The asan preset's sanitizers (CMakePresets.json) in a directory of its own, built for time (CI runs this
# on 2 cores with no compiler cache): clang (on five of the heaviest sources it took 64 CPU s under
# -fsanitize at -O1 where g++ -O1 -g1 took 84); -O1, since the bad-input runs do real cells (at -O0 a
# tail-poison run took over 5 min); -gline-tables-only, which keeps function names and lines in the reports;
# unity builds (each target's sources compiled as one translation unit, so header-only fmt, nlohmann-json
# and the standard headers are parsed and instantiated once per target, not once per file: the largest
# saving); only the CLI and the planted plugin. HIP objects are compile-checked by ci/hip-build.sh, so no
# GPU backend is built.
if ! command -v clang++ >/dev/null; then
  echo "asan-bad-input.sh: clang++ not found (run ci/install-deps.sh --fuzz)" >&2
  exit 2
fi
flags="-O1 -gline-tables-only"
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$flags" -DCMAKE_UNITY_BUILD=ON \
  -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 -DPACHECK_SANITIZE=ON -DPACHECK_CUDA=OFF -DPACHECK_HIP=OFF >/dev/null
cmake --build "$build" --target pacheck misbehaving
built=$(date +%s)
logs="$build/sanitizer-logs"
rm -rf "$logs" && mkdir -p "$logs"
# handle_segv=0: the planted plugin's deliberate SIGSEGV on load must stay a signal (the scenario checks
# that pacheck names it), not become an ASan report; memory errors are still caught by instrumentation.
export ASAN_OPTIONS="detect_leaks=1:handle_segv=0:log_path=$root/$logs/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$root/$logs/ubsan"
status=0
scenarios="test_reports_cli.py:bad_input test_reports_cli.py:input_files"
for s in empty_values in_process_exit in_process_hang repro_memory suite_size plugin_size fail_fast_resume \
         manifest_edits refused_values named_errors; do
  scenarios="$scenarios test_hostile_cli.py:$s"
done
for entry in $scenarios; do
  script=${entry%%:*} scenario=${entry#*:}
  echo "asan-bad-input.sh: $script $scenario"
  python3 "tests/cli/$script" "$scenario" --pacheck "$build/cli/pacheck" --source "$root" \
    --plugin "$build/tests/libmisbehaving.so" || status=1
done
if compgen -G "$logs/*" >/dev/null; then
  echo "asan-bad-input.sh: sanitizer reports:" >&2
  for f in "$logs"/*; do echo "== $f" >&2; head -40 "$f" >&2; done
  status=1
fi
end=$(date +%s)
echo "asan-bad-input.sh: build $((built - start)) s, scenarios $((end - built)) s, $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status
