#!/usr/bin/env bash
# Smoke run of the input-reader fuzzers (issues 7 and 21): builds the libFuzzer targets with clang
# (tests/fuzz/), fuzzes each from its seed corpus and dictionary for FUZZ_SECONDS (default 12, so the five
# take about a minute) and fails on any crash, leak, sanitizer report, unexpected exception or timeout.
# Needs clang and libclang-rt (ci/install-deps.sh --fuzz). Usage: ci/fuzz-smoke.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build="${1:-build-fuzz}"
seconds="${FUZZ_SECONDS:-12}"
if ! command -v clang++ >/dev/null; then
  echo "fuzz-smoke.sh: clang++ not found (run ci/install-deps.sh --fuzz)" >&2
  exit 2
fi
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPACHECK_CUDA=OFF \
  -DPACHECK_HIP=OFF -DPACHECK_FUZZ=ON -DPACHECK_BUILD_TESTS=ON -DCMAKE_UNITY_BUILD=ON >/dev/null
cmake --build "$build" --target pacheck_fuzz
bin="$build/tests/fuzz"
corpora="$build/fuzz-corpus"
rm -rf "$corpora" && mkdir -p "$corpora"/{safetensors,suite_toml,cell_id,manifest,results_log}
"$bin/fuzz_safetensors_corpus" "$corpora/safetensors"
cp suites/*.toml "$corpora/suite_toml/"
for t in cell_id manifest results_log; do cp tests/fuzz/corpus/$t/* "$corpora/$t/"; done
# include = ["NAME"] in a fuzzed suite resolves among the built-in suites.
export PACHECK_SUITES_DIR="$root/suites"

# TARGET DICT MAX_LEN: -max_len covers the seeds and a few more entries; -timeout catches a hang in any
# single input; fuzz_TARGET writes what it found to BUILD_DIR/TARGET-crash-* (or -leak-, -timeout-).
fuzz() {
  local target=$1 dict=$2 max_len=$3
  echo "fuzz-smoke.sh: fuzz_$target for ${seconds}s"
  "$bin/fuzz_$target" "$corpora/$target" ${dict:+-dict=tests/fuzz/$dict} -max_total_time="$seconds" \
    -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build/$target-"
}
fuzz safetensors "" 4096
fuzz suite_toml suite_toml.dict 8192
fuzz cell_id cell_id.dict 4096
fuzz manifest json.dict 8192
fuzz results_log json.dict 8192
echo "fuzz-smoke.sh: no crash in ${seconds}s of each of the 5 targets"
