"""GPU benchmark: AccelOpt's FlashInfer-Bench kernels through the public CLI, one cold `accelopt
check --json` each, as a user runs it: how long each verdict takes, and whether it is decided, on
which timer (the span, or kernel-only time where the calls are host-dominated) and why.

    python evals/bench_fib_verdicts.py --out fib_verdicts.json      # on a GPU host

Kernels: the corpus's AccelOpt-authored solutions (evals/realworld/manifest.json, author
"AccelOpt"), judged against the task's PyTorch reference (eager and torch.compile), and AccelOpt's
own bests (evals/realworld/accelopt_bests), judged `--against` the corpus solution each started
from, beside the speedup AccelOpt reported for that pair (upstream_ms: its baseline's time over its
best's, from its own FlashInfer-Bench run, another machine and timer). Each row: the wall seconds
of the command, the judge's steps, the time before the judge answered, and per comparator the
verdict's word, timer, figure and reason, with the span's and the kernel-only speedups.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from accelopt.evals.check_process import check_process

REALWORLD = Path(__file__).with_name("realworld")


def pairs() -> list[dict]:
    """(name, task dir, kernel, against, AccelOpt's reported speedup) for every AccelOpt kernel."""
    manifest = json.loads((REALWORLD / "manifest.json").read_text())
    rows = [{"name": p["name"], "task": REALWORLD / p["task"], "kernel": REALWORLD / p["solution"], "against": None,
             "reported": None} for p in manifest["pairs"] if p.get("author") == "AccelOpt"]
    bests = json.loads((REALWORLD / "accelopt_bests" / "manifest.json").read_text())["bests"]
    for name, entry in bests.items():
        ms = entry.get("upstream_ms") or {}
        rows.append({"name": f"accelopt_best_{name}", "task": REALWORLD / "tasks" / name,
                     "kernel": REALWORLD / "accelopt_bests" / entry["file"], "against": REALWORLD / entry["baseline"],
                     "reported": ms["baseline"] / ms["best"] if ms.get("baseline") and ms.get("best") else None})
    return rows


def check(row: dict, timeout_s: float) -> dict:
    record, ran = check_process(row["task"], row["kernel"], row["against"], timeout_s)
    out: dict = {"name": row["name"], "wall_s": ran["wall_s"], "exit": ran["exit"],
                 "accelopt_reported": row["reported"]}
    if record is None:
        return {**out, "status": "no_record", "error": ran.get("error")}
    out.update(status=record["status"], error=(record.get("error") or "")[:300] or None,
               phases_s=record.get("phases_s"), before_judge_s=record.get("before_judge_s"),
               rounds=record.get("rounds"))
    out["versus"] = {
        name: {"span": vs["speedup"], "span_interval": [vs["ci_low"], vs["ci_high"]],
               "kernel_only": (record.get("versus_kernel") or {}).get(name, {}).get("speedup"),
               **{k: (record.get("verdicts") or {}).get(name, {}).get(k) for k in ("word", "basis", "reason")}}
        for name, vs in (record.get("versus") or {}).items()}
    return out


def _verdict(name: str, v: dict) -> str:
    kernel = f" / {v['kernel_only']:.2f}x" if v.get("kernel_only") else ""
    return f"{name}: {v.get('word')} ({v.get('basis')}) {v['span']:.2f}x{kernel}"


def table(rows: list[dict]) -> str:
    lines = [f"{'kernel':70s} {'status':9s} {'wall s':>7s}  vs: verdict (timer) span / kernel-only [AccelOpt]"]
    for r in rows:
        verdicts = "; ".join(_verdict(name, v) for name, v in (r.get("versus") or {}).items())
        reported = f" [{r['accelopt_reported']:.2f}x]" if r.get("accelopt_reported") else ""
        lines.append(f"{r['name'][:70]:70s} {r['status'][:9]:9s} {r['wall_s']:7.1f}  {verdicts}{reported}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--only", action="append", help="substring of the kernels to run (repeatable)")
    parser.add_argument("--timeout", type=float, default=300.0, help="per check, seconds")
    args = parser.parse_args()
    rows = []
    for row in pairs():
        if args.only and not any(s in row["name"] for s in args.only):
            continue
        rows.append(check(row, args.timeout))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
        if args.out:
            args.out.write_text(json.dumps(rows, indent=1, default=str))
    print(table(rows))


if __name__ == "__main__":
    main()
