"""GPU benchmark: one source, one verdict, for the @triton.autotune kernels of the real-world corpus.

    python evals/bench_autotune_verdicts.py --out autotune.json                 # on a GPU host
    python evals/bench_autotune_verdicts.py --out a.json --only accelopt_best_rmsnorm_h128 --repeats 10

Each autotuned kernel of `evals/realworld` (AccelOpt's bests `--against` the corpus solution each
started from; the corpus's autotuned solutions against the task's PyTorch reference) is checked in
`--repeats` separate `accelopt check --json` processes, cold, as a user runs them (the first kernel
named `--repeats-first`, where given). Per kernel:
- per comparator, the verdict words seen (one source, one verdict: one word), the speedups and
  their intervals, and whether every interval holds every other run's speedup;
- the configuration each workload ran in each process (the judge's choice) and how many distinct
  choices were made;
- statuses other than verified, and flags (cheat_suspected, timing_contradicted), with their reasons;
- each process's wall seconds and the judge's steps (autotune: the configurations compiled,
  checked and timed).
Rows go to OUT as each check ends. `--budget S` starts no check that would end past S seconds,
judged by the kernel's last check (a kernel's first check is started while S has not passed).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from accelopt.evals.check_process import check_process

HERE = Path(__file__).resolve().parent
REALWORLD = HERE / "realworld"


def autotuned(path: Path) -> bool:
    return "autotune(" in path.read_text()


def kernels() -> list[dict]:
    """AccelOpt's autotuned bests against their starting solutions first (the issue's pair), then the
    corpus's autotuned solutions against the PyTorch reference."""
    rows = []
    bests = json.loads((REALWORLD / "accelopt_bests" / "manifest.json").read_text())["bests"]
    for name, entry in bests.items():
        kernel = REALWORLD / "accelopt_bests" / entry["file"]
        if autotuned(kernel):
            rows.append({"name": f"accelopt_best_{name}", "task": REALWORLD / "tasks" / name, "kernel": kernel,
                         "against": REALWORLD / entry["baseline"]})
    manifest = json.loads((REALWORLD / "manifest.json").read_text())
    for pair in manifest["pairs"]:
        kernel = REALWORLD / pair["solution"]
        if autotuned(kernel):
            rows.append({"name": pair["name"], "task": REALWORLD / pair["task"], "kernel": kernel, "against": None})
    return rows


def check(row: dict, timeout_s: float) -> dict:
    record, out = check_process(row["task"], row["kernel"], row["against"], timeout_s)
    if record is None:
        return {**out, "status": "no_record"}
    ran = {}
    for name, rec in (record.get("autotune") or {}).items():
        for k in rec.get("kernels") or []:
            ran[f"{name}:{k['kernel']}"] = {"how": rec.get("how"), "ran": k.get("ran"), "times_us": k.get("times_us"),
                                            "timer": k.get("timer"), "failed": k.get("failed")}
    out.update(status=record["status"], error=record.get("error"), flags=record.get("flags"),
               phases_s=record.get("phases_s"), before_judge_s=record.get("before_judge_s"),
               rounds=record.get("rounds"), autotune=ran,
               notes=[n for r in (record.get("autotune") or {}).values() for n in r.get("notes") or []],
               evidence=[e for e in record.get("evidence") or [] if "contradict" in e or "audit" in e.lower()],
               audit=(record.get("audit") or {}).get("note"),
               workloads={w: {k: t.get(k) for k in ("median_us", "kernel_us", "outside_us")}
                          for w, t in (record.get("workloads") or {}).items()})
    out["versus"] = {name: {"span": vs["speedup"], "interval": [vs["ci_low"], vs["ci_high"]],
                            **{k: (record.get("verdicts") or {}).get(name, {}).get(k)
                               for k in ("word", "basis", "speedup", "ci_low", "ci_high", "reason")}}
                     for name, vs in (record.get("versus") or {}).items()}
    return out


def summary(runs: list[dict]) -> dict:
    """What the repeats of one kernel agree on."""
    verified = [r for r in runs if r["status"] == "verified"]
    out: dict = {"runs": len(runs), "statuses": sorted({r["status"] for r in runs}),
                 "flagged": sum(bool(r.get("flags")) for r in runs),
                 "choices": len({json.dumps({k: v["ran"] for k, v in (r.get("autotune") or {}).items()}, sort_keys=True)
                                 for r in verified})}
    for name in sorted({n for r in verified for n in r["versus"]}):
        seen = [r["versus"][name] for r in verified if name in r["versus"]]
        speedups = [v["speedup"] for v in seen]
        out[name] = {"words": sorted({str(v["word"]) for v in seen}), "bases": sorted({str(v["basis"]) for v in seen}),
                     "speedups": [round(s, 4) for s in speedups],
                     "every_interval_holds_every_speedup": all(v["ci_low"] <= s <= v["ci_high"] for v in seen
                                                               for s in speedups),
                     "spread": round(max(speedups) / min(speedups) - 1, 4) if speedups else None}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--repeats-first", type=int, default=None,
                        help="repeats of the first kernel named (default: --repeats, as every other)")
    parser.add_argument("--only", default="", help="comma-separated names (default: every autotuned kernel)")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--budget", type=float, default=float("inf"))
    args = parser.parse_args()
    start = time.monotonic()
    only = [n for n in args.only.split(",") if n]
    chosen = sorted((r for r in kernels() if not only or r["name"] in only),
                    key=lambda r: only.index(r["name"]) if only else 0)
    results: dict = {}
    for index, row in enumerate(chosen):
        runs: list[dict] = []
        first = args.repeats_first is not None and index == 0
        for _ in range(args.repeats_first if first else args.repeats):
            expected = runs[-1]["wall_s"] if runs and runs[-1].get("wall_s") else 0.0
            if time.monotonic() - start + expected > args.budget:
                break
            runs.append(check(row, args.timeout))
            results[row["name"]] = {"kernel": str(row["kernel"].relative_to(HERE.parent)),
                                    "against": str(row["against"].relative_to(HERE.parent)) if row["against"] else None,
                                    "summary": summary(runs), "runs": runs}
            args.out.write_text(json.dumps(results, indent=1))
            last = runs[-1]
            print(row["name"], last["status"], last["wall_s"], {n: (v["word"], round(v["speedup"] or 0, 3))
                                                                  for n, v in (last.get("versus") or {}).items()},
                  flush=True)
    print(json.dumps({name: r["summary"] for name, r in results.items()}, indent=1))


if __name__ == "__main__":
    main()
