#!/bin/bash
# The CLI-heavy test files with the judge wait at 0 s (a second judge at once, as before aa6da00) and
# at 6 s, alternated twice. Restores 6.0.
cd "$(git rev-parse --show-toplevel)"; OUT=${OUT:-/tmp/ab}; mkdir -p $OUT
F="tests/integration/test_resume.py tests/integration/test_live_display.py tests/integration/test_narrow_terminal.py tests/integration/test_terminal_width.py tests/integration/test_show_runs.py"
for round in 1 2; do for w in 0.0 6.0; do
  sed -i "s/^START_WAIT_S = .*/START_WAIT_S = $w/" tools/harness/pool.py
  .venv/bin/python evals/bench_suite_cpu.py --out $OUT/ab_${w}_$round.json -- .venv/bin/python -m pytest -q -n 2 --dist loadfile -p no:cacheprovider $F > $OUT/ab_${w}_$round.log 2>&1
  python3 -c "import json;d=json.load(open('$OUT/ab_${w}_$round.json'));print('$w', $round, d['exit'], d['wall_s'], d['cpu_s'], d['judges_per_process'])" >> $OUT/ab.txt
done; done
sed -i "s/^START_WAIT_S = .*/START_WAIT_S = 6.0/" tools/harness/pool.py
