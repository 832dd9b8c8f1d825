#!/usr/bin/env bash
# Smoke run of the safetensors reader fuzzer (issue 7): builds fuzz_safetensors with clang, writes a seed
# corpus, fuzzes for FUZZ_SECONDS (default 60) and fails on any crash, leak, sanitizer report or timeout.
# Needs clang and libclang-rt (ci/install-deps.sh --fuzz). Usage: ci/fuzz-smoke.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-fuzz}"
seconds="${FUZZ_SECONDS:-60}"
if ! command -v clang++ >/dev/null; then
  echo "fuzz-smoke.sh: clang++ not found (run ci/install-deps.sh --fuzz)" >&2
  exit 2
fi
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPACHECK_CUDA=OFF \
  -DPACHECK_FUZZ=ON -DPACHECK_BUILD_TESTS=ON >/dev/null
cmake --build "$build" --target fuzz_safetensors fuzz_safetensors_corpus
corpus="$build/fuzz-corpus"
rm -rf "$corpus" && mkdir -p "$corpus"
"$build/tests/fuzz/fuzz_safetensors_corpus" "$corpus"
# -max_len covers headers with a few tensors; -timeout catches a hang in any single input.
"$build/tests/fuzz/fuzz_safetensors" "$corpus" -max_total_time="$seconds" -max_len=4096 -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build/"
echo "fuzz-smoke.sh: no crash in ${seconds}s"
