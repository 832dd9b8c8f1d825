#!/usr/bin/env bash
# Smoke run of the input-reader fuzzers (issues 7, 21 and 46): builds the libFuzzer targets with clang
# (tests/fuzz/), replays each target's corpus kept in the tree (tests/fuzz/corpus/TARGET: seeds and the inputs
# the long runs of docs/measurements/fuzz.md found new coverage with, minimized) once, then fuzzes each from it
# and its dictionary for FUZZ_SECONDS (default 6, so the eight take under a minute; 0 replays only). Fails on
# any crash, leak, sanitizer report, unexpected exception or timeout. The long runs (10^6 executions and more
# per target) stay out of CI: docs/measurements/fuzz.md says how to run them.
# Needs clang and libclang-rt (ci/install-deps.sh --fuzz). Usage: ci/fuzz-smoke.sh [BUILD_DIR]
#
# Long runs (docs/measurements/fuzz.md): FUZZ_RUNS=N runs each target for N executions in FUZZ_PROCS
# processes (default 1; seeds 1..FUZZ_PROCS, N/FUZZ_PROCS executions each), every target at once, each
# process's output in FUZZ_LOG_DIR (default BUILD_DIR/fuzz-long)/TARGET-P.log; FUZZ_TARGETS picks targets;
# FUZZ_PREBUILT=1 uses BUILD_DIR's binaries as they are (a machine without clang, such as the device machine);
# FUZZ_MAX_SECONDS caps each process (so a lent machine's time limit ends none of them unfinished); the
# executions and exit of every process go to FUZZ_LOG_DIR/summary.txt, one file to bring home.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build="${1:-build-fuzz}"
seconds="${FUZZ_SECONDS:-6}"
runs="${FUZZ_RUNS:-0}"
procs="${FUZZ_PROCS:-1}"
logs="${FUZZ_LOG_DIR:-$build/fuzz-long}"
all_targets="safetensors suite_toml cell_id manifest results_log report_json run_json evidence_json"
targets="${FUZZ_TARGETS:-$all_targets}"
if [ "${FUZZ_PREBUILT:-0}" != 1 ]; then
  if ! command -v clang++ >/dev/null; then
    echo "fuzz-smoke.sh: clang++ not found (run ci/install-deps.sh --fuzz)" >&2
    exit 2
  fi
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPACHECK_CUDA=OFF \
    -DPACHECK_HIP=OFF -DPACHECK_FUZZ=ON -DPACHECK_BUILD_TESTS=ON -DCMAKE_UNITY_BUILD=ON >/dev/null
  cmake --build "$build" --target pacheck_fuzz
fi
bin="$build/tests/fuzz"
corpora="$build/fuzz-corpus"
rm -rf "$corpora"
for t in $all_targets; do
  mkdir -p "$corpora/$t"
  if [ -d "tests/fuzz/corpus/$t" ]; then cp tests/fuzz/corpus/$t/* "$corpora/$t/"; fi
done
"$bin/fuzz_safetensors_corpus" "$corpora/safetensors"
cp suites/*.toml "$corpora/suite_toml/"
# include = ["NAME"] in a fuzzed suite resolves among the built-in suites.
export PACHECK_SUITES_DIR="$root/suites"

# TARGET DICT MAX_LEN: -max_len covers the seeds and a few more entries; -timeout catches a hang in any
# single input; fuzz_TARGET writes what it found to BUILD_DIR/TARGET-crash-* (or -leak-, -timeout-).
fuzz() {
  local target=$1 dict=$2 max_len=$3
  local flags=(${dict:+-dict=tests/fuzz/$dict} -max_len="$max_len" -timeout=10 -rss_limit_mb=2048
               -artifact_prefix="$build/$target-")
  case " $targets " in *" $target "*) ;; *) return 0 ;; esac
  if [ "$runs" != 0 ]; then
    long "$target" "${flags[@]}"
    return 0
  fi
  echo "fuzz-smoke.sh: fuzz_$target: replaying $(ls "$corpora/$target" | wc -l) corpus files"
  "$bin/fuzz_$target" "${flags[@]}" -runs=0 "$corpora/$target"
  if [ "$seconds" != 0 ]; then
    echo "fuzz-smoke.sh: fuzz_$target for ${seconds}s"
    "$bin/fuzz_$target" "${flags[@]}" -max_total_time="$seconds" -print_final_stats=1 "$corpora/$target"
  fi
}
# A long run of one target: FUZZ_PROCS processes in the background, each from its own copy of the corpus.
pids=()
[ "$runs" = 0 ] || { mkdir -p "$logs" && : >"$logs/summary.txt"; }
long() {
  local target=$1
  shift
  mkdir -p "$logs"
  for p in $(seq 1 "$procs"); do
    rm -rf "$corpora/$target-$p" && cp -r "$corpora/$target" "$corpora/$target-$p"
    "$bin/fuzz_$target" "$@" -seed="$p" -runs=$((runs / procs)) ${FUZZ_MAX_SECONDS:+-max_total_time=$FUZZ_MAX_SECONDS} \
      -print_final_stats=1 "$corpora/$target-$p" \
      >"$logs/$target-$p.log" 2>&1 &
    pids+=("$!:$target-$p")
  done
}

fuzz safetensors "" 4096
fuzz suite_toml suite_toml.dict 8192
fuzz cell_id cell_id.dict 4096
fuzz manifest json.dict 8192
fuzz results_log json.dict 8192
fuzz report_json json.dict 16384
fuzz run_json json.dict 4096
fuzz evidence_json json.dict 8192
if [ "$runs" != 0 ]; then
  failed=0
  for entry in "${pids[@]}"; do
    pid=${entry%%:*} name=${entry#*:}
    if wait "$pid"; then rc=0; else rc=$?; failed=1; fi
    echo "fuzz-smoke.sh: fuzz_$name: exit $rc, $(grep -h 'stat::number_of_executed_units' "$logs/$name.log" | awk '{print $2}') executions" \
      | tee -a "$logs/summary.txt"
    [ "$rc" = 0 ] || tail -30 "$logs/$name.log" >>"$logs/summary.txt"
  done
  exit "$failed"
fi
echo "fuzz-smoke.sh: every corpus replayed, no crash in ${seconds}s of each of the 8 targets"
