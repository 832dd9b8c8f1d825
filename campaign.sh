#!/usr/bin/env bash
# temporary device script (untracked): issue 16 tolerance campaign and trust run, one call
set -uo pipefail
P=build/gpu-carry/cli/pacheck
export PYTHONUNBUFFERED=1
nproc > $OUT/env.txt; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/env.txt
(timeout 400 build/gpu-carry/tests/test_gpu_kernels > /tmp/gpu-tests.log 2>&1; echo "gpu tests rc $?" >> $OUT/env.txt; tail -4 /tmp/gpu-tests.log >> $OUT/env.txt; grep -E "FAILED|Failure" /tmp/gpu-tests.log | head -20 >> $OUT/env.txt) &
t0=$SECONDS
timeout 370 python3 ci/trust-run.py --pacheck $P --out /tmp/a --seeds ${SEEDS_A:-20} --first-seed 1 --suites gate,models,boundary \
  --fuzz-seeds ${FSEEDS:-3} --fuzz-budget 60 --jobs 16 --device cuda:0 > $OUT/summary-a.txt 2>&1; echo "A rc $? $((SECONDS-t0)) s" >> $OUT/env.txt
t0=$SECONDS
timeout 180 python3 ci/trust-run.py --pacheck $P --out /tmp/b --seeds ${SEEDS_B:-10} --first-seed 1 --suites sweep \
  --fuzz-seeds 0 --jobs 16 --device cuda:0 --no-controls > $OUT/summary-b.txt 2>&1; echo "B rc $? $((SECONDS-t0)) s" >> $OUT/env.txt
wait
cat $OUT/env.txt
grep -h "false alarm\|uncaught\|blind\|exited\|TRUST" $OUT/summary-*.txt | head -40
