#!/usr/bin/env bash
# Collects the GPU evidence behind docs/BENCHMARKS.md and docs/BANDS.md in one device session:
# unit tests, every correctness suite on every GPU kernel (JSON reports), and bench A/B tables.
# Usage: ci/gpu-evidence.sh BUILD_DIR OUT_DIR   (BUILD_DIR holds cli/pacheck and tests/test_gpu_kernels
#        built with -DCMAKE_CUDA_ARCHITECTURES=90). Writes OUT_DIR/evidence.tar.gz and OUT_DIR/summary.txt.
set -uo pipefail
build="$1"; out="$2"
work="$(mktemp -d)"
P="$build/cli/pacheck"
gpu=(--kernel gpu.paged_v1 --kernel gpu.paged_v1_tail_fault --kernel gpu.paged_v2 --kernel gpu.warp_split --kernel gpu.warp_split_gqa)
say() { echo "== $* ($(date -u +%H:%M:%S))" | tee -a "$out/summary.txt"; }
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee -a "$out/summary.txt"
say "unit tests"
timeout 240 "$build/tests/test_gpu_kernels" --gtest_brief=1 > "$work/tests.log" 2>&1; echo "exit $?" | tee -a "$out/summary.txt"
tail -3 "$work/tests.log" >> "$out/summary.txt"
for s in tail-poison boundary models sweep; do
  say "suite $s"
  timeout 300 "$P" run --suite "$s" "${gpu[@]}" --device cuda:0 --only-failures --json "$work/$s.json" > "$work/$s.log" 2>&1
  echo "exit $?" | tee -a "$out/summary.txt"; tail -9 "$work/$s.log" >> "$out/summary.txt"
done
bench() {  # name suite A B
  say "bench $1"
  timeout 200 "$P" bench --suite "$2" --kernel "$3" --kernel "$4" --device cuda:0 --json "$work/bench-$1.json" > "$work/bench-$1.log" 2>&1
  echo "exit $?" | tee -a "$out/summary.txt"; cat "$work/bench-$1.log" >> "$out/summary.txt"
}
bench bw-warp bandwidth gpu.warp_split gpu.warp_split_gqa
bench bw-paged bandwidth gpu.paged_v1 gpu.paged_v2
bench sweep-ab sweep gpu.paged_v1 gpu.warp_split
bench sweep-v2 sweep gpu.paged_v2 gpu.warp_split_gqa
tar czf "$out/evidence.tar.gz" -C "$work" .
say "done"
