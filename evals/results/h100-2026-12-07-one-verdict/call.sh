#!/bin/bash
# issue 65, one call (the next device session): gqa_ragged_prefill's AccelOpt best cold (alone); then
# the served-winners bench on rmsnorm_h128 at T=2, three runs at once (seeds 1-3), while the two pairs
# are checked in 10 processes each (the judge's GPU lease keeps every timed stretch to itself); then
# each pair 5 times in one process.
set -u
R=/tmp/r16; mkdir -p $R; T0=$(date +%s)
el(){ echo "[$(( $(date +%s)-T0 ))s] $*" | tee -a $R/steps.txt; (cd /tmp && tar czf $OUT/r16.tgz --exclude="*.sqlite*" r16); }
left(){ echo $(( 470-($(date +%s)-T0) )); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .carry/whl/*.whl || exit 1
python3 -m compileall -q -j 16 /tmp/site tools graph nodes policies memory evals accelopt cli >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv; nproc
  python3 -c "import torch,triton,sys;print(torch.__version__,triton.__version__,sys.version.split()[0])"; } > $R/env.txt 2>&1; cat $R/env.txt
el gqa
timeout 100 python3 evals/bench_autotune_verdicts.py --out $R/gqa.json --only accelopt_best_gqa_ragged_prefill --repeats 1 --timeout 95 > $R/gqa.log 2>&1; echo "gqa rc=$?"
el served
for S in 1 2 3; do
  timeout $(left) python3 evals/bench_served_winners.py --out $R/served_s$S --tasks rmsnorm_h128 -T 2 --runs 1 --seed $S --time-scale 0.1 --timeout 390 > $R/served_s$S.log 2>&1 &
done
timeout 220 python3 evals/bench_one_verdict.py --out $R/rms10.json --pair rmsnorm_best_vs_o3 --processes 10 > $R/rms10.log 2>&1; el rms10
timeout 170 python3 evals/bench_one_verdict.py --out $R/sm10.json --pair softmax_shared_key --processes 10 > $R/sm10.log 2>&1; el sm10
[ $(left) -gt 60 ] && { timeout 60 python3 evals/bench_warm_check.py --out $R/warm_sm.json --pair softmax_shared_key --checks 5 > $R/warm_sm.log 2>&1; el warm_sm; }
[ $(left) -gt 60 ] && { timeout $(( $(left)-10 )) python3 evals/bench_warm_check.py --out $R/warm_rms.json --pair rmsnorm_best_vs_o3 --checks 5 > $R/warm_rms.log 2>&1; el warm_rms; }
while [ -n "$(jobs -r)" ] && [ $(left) -gt 3 ]; do sleep 3; done
el done
tail -n 25 $R/rms10.log $R/sm10.log | cut -c1-300; tail -n 2 $R/served_s*.log | cut -c1-700
