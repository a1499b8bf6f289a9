#!/bin/bash
# The CLI-heavy test files with the sandbox's host trace through torch.profiler.profile (e3adab3) and
# through host_profile (428e515), alternated twice; then the whole suite, e3adab3 then 428e515.
# Leaves the checkout's own sandbox.py and zygote.py as they were.
cd "$(git rev-parse --show-toplevel)"; OUT=${OUT:-/tmp/ab}; mkdir -p $OUT
F="tests/integration/test_resume.py tests/integration/test_live_display.py tests/integration/test_narrow_terminal.py tests/integration/test_terminal_width.py tests/integration/test_show_runs.py"
H=tools/harness; cp $H/sandbox.py $OUT/sandbox.keep; cp $H/zygote.py $OUT/zygote.keep
use() { git show $1:$H/sandbox.py > $H/sandbox.py; git show $1:$H/zygote.py > $H/zygote.py; }
for i in 1 2; do for c in e3adab3 428e515; do
  use $c; .venv/bin/python evals/bench_suite_cpu.py --out $OUT/cli_files_${c}_$i.json -- \
    .venv/bin/python -m pytest -q -n 2 --dist loadfile -p no:cacheprovider $F
done; done
for c in e3adab3 428e515; do
  use $c; .venv/bin/python evals/bench_suite_cpu.py --out $OUT/suite_$c.json -- \
    .venv/bin/python -m pytest -q -n 2 --dist loadfile -p no:cacheprovider --durations=60
done
cp $OUT/sandbox.keep $H/sandbox.py; cp $OUT/zygote.keep $H/zygote.py
