#!/usr/bin/env bash
# temporary device script (untracked): margins of the finished suite runs, fuzz of the honest designs, sweep
set -uo pipefail
P=build/gpu-carry/cli/pacheck
export PYTHONUNBUFFERED=1
python3 ci/margins.py /tmp/a/*.json > $OUT/margins-a.txt 2>&1
ls /tmp/a/*.json | sed 's#.*/##' | tr '\n' ' ' > $OUT/runs-a.txt
t0=$SECONDS
for k in cpu.reference cpu.split_kv cpu.vector_v_masked cpu.online cpu.two_pass cpu.split_kv_lse cpu.half_products cpu.p_in_v_dtype cpu.tf32; do
  for s in 1; do (timeout 100 $P fuzz --kernel $k --seed $s --budget 60 > /tmp/fz-$k-$s.log 2>&1; echo "$k seed $s rc $?" >> /tmp/fz.rc) & done
done
for k in gpu.paged_v1 gpu.paged_v1_half_products gpu.paged_v2 gpu.warp_split gpu.warp_split_gqa; do
  (timeout 100 $P fuzz --kernel $k --seed 1 --budget 60 --device cuda:0 > /tmp/fz-$k-1.log 2>&1; echo "$k seed 1 rc $?" >> /tmp/fz.rc) &
done
(timeout 100 $P fuzz --kernel gpu.paged_v1_half_products --property exact-scaling --seed 1 --cases 200 --device cuda:0 > /tmp/fz-es.log 2>&1; echo "gpu.paged_v1_half_products exact-scaling seed 1 200 cases rc $?" >> /tmp/fz.rc) &
wait
echo "fuzz wall $((SECONDS-t0)) s" > $OUT/fuzz.txt; sort /tmp/fz.rc >> $OUT/fuzz.txt
grep -h "does not hold\|held\|FAILED" /tmp/fz-*.log | head -150 >> $OUT/fuzz.txt
t0=$SECONDS
timeout 330 python3 ci/trust-run.py --pacheck $P --out /tmp/s --seeds 16 --first-seed 1 --suites sweep \
  --fuzz-seeds 0 --jobs 16 --device cuda:0 --no-controls > $OUT/summary-sweep.txt 2>&1; echo "sweep rc $? $((SECONDS-t0)) s" >> $OUT/fuzz.txt
ls /tmp/s/*.json 2>/dev/null | wc -l >> $OUT/fuzz.txt
[ -s $OUT/summary-sweep.txt ] || python3 ci/margins.py /tmp/s/*.json > $OUT/summary-sweep.txt 2>&1
head -3 $OUT/fuzz.txt
