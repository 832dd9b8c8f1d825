#!/usr/bin/env bash
# Collects the GPU evidence behind docs/BENCHMARKS.md, docs/BANDS.md and the issue notes in one device
# session: unit tests, the opt-in GPU bench test, correctness suites on every GPU kernel, `pacheck bench`
# tables, `pacheck fuzz` on GPU kernels, isolated runs and multi-GPU runs.
#
# Usage: ci/gpu-evidence.sh BUILD_DIR OUT_DIR [STEP...]
#   BUILD_DIR holds cli/pacheck and tests/test_gpu_kernels built with -DCMAKE_CUDA_ARCHITECTURES=90.
#   STEP is any of: tests gbench suites fp8 isolate fuzz bench multi (default: all, in that order), or the
#   plugin-path steps, run only when named: plugin (sweep with examples/plugin's CUDA plugin in process and
#   isolated, twice each, wall times), verify (the docs/VALIDATING.md exchange on gate: run --with-controls,
#   then pacheck verify; its report directory comes back as evidence.tar.gz), export (sweep exported with
#   -j 1 and -j 16, wall times, the two trees compared byte for byte), kernelrepo (examples/kernel-repo's
#   CUDA plugin, built against an installed prefix, through gate and tail-poison; KREPO_PLUGIN names it).
# Every result is written to OUT_DIR as the step finishes (so a run cut short keeps the steps it finished),
# in at most 8 flat files, as the device tool returns them: summary.txt (one block per step), tests.log,
# gbench.log, suites.log, bench.log, fuzz.log, other.log, reports.tar.gz (JSON/JSONL reports of every
# step, re-packed after each one). Environment: STEP_TIMEOUT seconds per command (default 300),
# FUZZ_KERNELS (default: gpu.paged_v1_tail_fault gpu.paged_v1 gpu.warp_split), FUZZ_CASES (default 300),
# DEVICE_EXPECT (the verify step's --device-expect, default "NVIDIA H": an H100 or H200).
set -uo pipefail
build="$1"; out="$2"; shift 2
steps="${*:-tests gbench suites fp8 isolate fuzz bench multi}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
P="$build/cli/pacheck"
T="$build/tests/test_gpu_kernels"
work="$(mktemp -d)"
to="${STEP_TIMEOUT:-300}"
gpu=(--kernel gpu.paged_v1 --kernel gpu.paged_v1_tail_fault --kernel gpu.paged_v2 --kernel gpu.warp_split --kernel gpu.warp_split_gqa)
mkdir -p "$out"
say() { echo "== $* ($(date -u +%H:%M:%S))" | tee -a "$out/summary.txt"; }
pack() { tar czf "$out/reports.tar.gz" -C "$work" . 2>/dev/null; }
# run LOG TAIL_LINES CMD...: runs CMD with the step timeout, appends its output to LOG, its exit status and
# last lines to summary.txt.
run() {
  local log="$1" n="$2"; shift 2
  echo "\$ $*" >> "$out/$log"
  local t0 t1
  t0=$(date +%s.%N)
  timeout "$to" "$@" > "$work/last.log" 2>&1
  local rc=$?
  t1=$(date +%s.%N)
  cat "$work/last.log" >> "$out/$log"
  echo "exit $rc after $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s: $*" | tee -a "$out/summary.txt"
  [ "$n" -gt 0 ] && tail -n "$n" "$work/last.log" >> "$out/summary.txt"
  pack
  return 0
}
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,memory.total --format=csv | tee -a "$out/summary.txt"

for step in $steps; do
  case "$step" in
    tests)
      say "GPU unit tests"
      run tests.log 4 "$T" --gtest_brief=1 --gtest_color=no ;;
    gbench)
      say "GPU bench test (A/B of forms, head slots, partitions)"
      run gbench.log 0 env PACHECK_GPU_BENCH=1 "$T" --gtest_color=no --gtest_filter='GpuBench.*'
      grep "bench    \]" "$out/gbench.log" >> "$out/summary.txt" ;;
    suites)
      for s in tail-poison boundary models sweep; do
        say "suite $s"
        run suites.log 9 "$P" run --suite "$root/suites/$s.toml" "${gpu[@]}" --device cuda:0 --report-dir "$work/$s"
      done ;;
    fp8)
      say "suite fp8"
      run suites.log 12 "$P" run --suite "$root/suites/fp8.toml" --kernel gpu.paged_v1 --kernel gpu.paged_v1_tail_fault \
        --kernel gpu.paged_v2 --kernel gpu.warp_split --kernel cpu.reference --device cuda:0 --report-dir "$work/fp8"
      say "suite gate (GPU kernels)"
      run suites.log 12 "$P" run --suite "$root/suites/gate.toml" "${gpu[@]}" --device cuda:0 --report-dir "$work/gate" ;;
    isolate)
      say "isolated GPU kernels"
      run other.log 9 "$P" run --suite "$root/suites/tail-poison.toml" --kernel gpu.paged_v1 --kernel gpu.paged_v2 \
        --kernel gpu.paged_v1_tail_fault --isolate --device cuda:0 --report-dir "$work/isolate" ;;
    fuzz)
      say "fuzz"
      for k in ${FUZZ_KERNELS:-gpu.paged_v1_tail_fault gpu.paged_v1 gpu.warp_split}; do
        run fuzz.log 12 "$P" fuzz --kernel "$k" --device cuda:0 --cases "${FUZZ_CASES:-300}" --seed 1
      done ;;
    bench)
      say "pacheck bench"
      # The 32/8 cell of the bandwidth target, all four correct kernels in one run (the host prepares the
      # 4.3 GB case and its oracle once).
      run bench.log 0 "$P" bench --suite "$root/suites/bandwidth.toml" --filter 'h32/8 ' --kernel gpu.paged_v1 \
        --kernel gpu.warp_split --kernel gpu.paged_v2 --kernel gpu.warp_split_gqa --device cuda:0 \
        --json "$work/bench-bandwidth.json"
      run bench.log 0 "$P" bench --suite "$root/suites/sweep.toml" --kernel gpu.paged_v1 --kernel gpu.warp_split \
        --device cuda:0 --json "$work/bench-sweep-ab.json"
      run bench.log 0 "$P" bench --suite "$root/suites/sweep.toml" --kernel gpu.paged_v1 --kernel gpu.paged_v2 \
        --kernel gpu.warp_split --kernel gpu.warp_split_gqa --device cuda:0 --json "$work/bench-sweep-all.json"
      ;;
    multi)
      say "all local GPUs"
      nvidia-smi -L | tee -a "$out/summary.txt"
      run other.log 12 "$P" run --suite "$root/suites/tail-poison.toml" "${gpu[@]}" --device cuda:all --report-dir "$work/multi"
      run other.log 12 "$P" run --suite "$root/suites/tail-poison.toml" "${gpu[@]}" --device cuda:all --isolate \
        --report-dir "$work/multi-isolate" ;;
    plugin)
      cuplug="$build/examples/plugin/libpacheck_example_cuda_plugin.so"
      for rep in 1 2; do
        say "sweep, CUDA plugin in process (run $rep)"
        run other.log 3 "$P" run --suite "$root/suites/sweep.toml" --plugin "$cuplug" --device cuda:0 --no-isolate \
          --report-dir "$work/plugin-inproc-$rep"
        say "sweep, CUDA plugin isolated (default children, run $rep)"
        run other.log 3 "$P" run --suite "$root/suites/sweep.toml" --plugin "$cuplug" --device cuda:0 \
          --report-dir "$work/plugin-isolated-$rep"
      done ;;
    verify)
      cuplug="$build/examples/plugin/libpacheck_example_cuda_plugin.so"
      say "validation exchange: run --with-controls on gate, then verify"
      run other.log 6 "$P" run --plugin "$cuplug" --with-controls --suite gate --device cuda:0 --report-dir "$work/ev"
      run other.log 3 "$P" verify "$work/ev" --suite gate --plugin "$cuplug" --device-expect "${DEVICE_EXPECT:-NVIDIA H}"
      tar czf "$out/evidence.tar.gz" -C "$work" ev ;;
    export)
      for j in 1 16; do
        say "export sweep -j $j"
        rm -rf "/tmp/pacheck-export-$j"
        run other.log 2 "$P" export --suite "$root/suites/sweep.toml" -j "$j" --out "/tmp/pacheck-export-$j"
        du -sh "/tmp/pacheck-export-$j" | tee -a "$out/summary.txt"
      done
      if diff -r -q /tmp/pacheck-export-1 /tmp/pacheck-export-16 > /dev/null; then
        echo "export: -j 1 and -j 16 trees are byte-identical" | tee -a "$out/summary.txt"
      else
        echo "export: -j 1 and -j 16 trees DIFFER" | tee -a "$out/summary.txt"
      fi
      rm -rf /tmp/pacheck-export-1 /tmp/pacheck-export-16 ;;
    kernelrepo)
      for s in gate tail-poison; do
        say "kernel-repo CUDA plugin, suite $s"
        run other.log 6 "$P" run --suite "$s" --plugin "${KREPO_PLUGIN:?KREPO_PLUGIN names the built plugin}" \
          --device cuda:0 --report-dir "$work/krepo-$s"
      done ;;
    *) echo "unknown step '$step' (tests gbench suites fp8 isolate fuzz bench multi plugin verify export kernelrepo)" | tee -a "$out/summary.txt"; exit 2 ;;
  esac
done
say "done"
