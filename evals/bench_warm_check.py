"""GPU benchmark: a served check, cold then warm. Where its seconds go.

    python evals/bench_warm_check.py --out warm.json                       # on a GPU host
    python evals/bench_warm_check.py --out warm.json --kernel PATH --task DIR --against PATH --checks 4
    python evals/bench_warm_check.py --out warm.json --pair rmsnorm_best_vs_o3 --checks 5   # bench_one_verdict's pairs

One process holds the `check` graph, as `langgraph dev` and its MCP tool do (graph/check_graph.py:
the process's judges stay warm between checks), and invokes it `--checks` times on the same kernel:
the first check is cold (judge started, configurations compiled, timed and chosen); the later
ones find the judge, the kept Triton cache and the judge's autotune choice of the first: the same
kernel evaluated `--checks` times in one process, whose verdicts' agreement (one word, every pair of
intervals overlapping: bench_one_verdict.agreement) is written beside the rows. Default
kernel: AccelOpt's gqa_ragged_prefill kv8 best against the task's PyTorch reference (the corpus
pair the judge took longest on). Per check: wall seconds, the judge's steps (`phases_s`), the
seconds before the judge, the status, flags, verdict words and speedups, and the configuration
each workload ran. Rows go to OUT as each check ends.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from accelopt.evals.bench_one_verdict import agreement, pair, pair_tasks_folder, shared_key_said, verdicts_of

HERE = Path(__file__).resolve().parent
REALWORLD = HERE / "realworld"
GQA = "accelopt-gpt-oss-120b_gqa_ragged_prefill_causal_h32_kv8_d128_728c5634"


def default_pair() -> tuple[Path, Path]:
    pair = next(p for p in json.loads((REALWORLD / "manifest.json").read_text())["pairs"] if p["name"] == GQA)
    return REALWORLD / pair["task"], REALWORLD / pair["solution"]


def row(record: dict, wall_s: float) -> dict:
    return {"wall_s": round(wall_s, 2), "status": record.get("status"), "error": record.get("error"),
            "flags": record.get("flags"), "phases_s": record.get("phases_s"),
            "before_judge_s": record.get("before_judge_s"),
            "shared_key_advice": shared_key_said(record), "verdicts": verdicts_of(record),
            "autotune": {name: {"how": rec.get("how"), "ran": [k.get("ran") for k in rec.get("kernels") or []]}
                         for name, rec in (record.get("autotune") or {}).items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--task", type=Path, default=None, help="a task folder (default: gqa_ragged_prefill kv8)")
    parser.add_argument("--kernel", type=Path, default=None)
    parser.add_argument("--against", type=Path, default=None)
    parser.add_argument("--pair", default=None, help="a pair of bench_one_verdict.py (instead of --task/--kernel)")
    parser.add_argument("--checks", type=int, default=3)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    if args.pair:
        args.task, args.kernel, args.against = pair(args.pair, pair_tasks_folder(args.out))
    task, kernel = default_pair() if args.kernel is None else (args.task, args.kernel)
    from accelopt.graph.check_graph import graph  # the served door's own graph

    rows = []
    for i in range(args.checks):
        began = time.monotonic()
        given: Any = {"task_dir": str(task), "kernel": str(kernel), "device": args.device,
                      **({"against": str(args.against)} if args.against else {})}
        record = graph.invoke(given)
        rows.append({"check": i, "warm": i > 0, **row(record, time.monotonic() - began)})
        args.out.write_text(json.dumps({"task": str(task), "kernel": str(kernel), "agreement": agreement(rows),
                                        "rows": rows}, indent=1))
        print(json.dumps(rows[-1])[:600], flush=True)


if __name__ == "__main__":
    main()
