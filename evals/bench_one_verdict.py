"""GPU benchmark: one source, one word, and intervals that hold across evaluations.

    python evals/bench_one_verdict.py --out rms.json --pair rmsnorm_best_vs_o3 --processes 10   # on a GPU host
    python evals/bench_one_verdict.py --out sm.json --pair softmax_shared_key --processes 10
    python evals/bench_one_verdict.py --out k.json --task DIR --kernel PATH [--against PATH] --processes 10

One kernel checked in `--processes` separate `accelopt check --json` processes, cold, as a user
runs them. Per comparator: the verdict words seen (one source, one word), the speedups, the
reported intervals and whether every pair of them overlaps (the intervals are reported across
evaluations: stats.across), and how many pairs of the rounds' own intervals overlap (what the
widening buys); the processes whose record carries the shared-key advice (said in every process
or in none); statuses, flags and walls. Rows go to OUT as each check ends.

Named pairs:
- rmsnorm_best_vs_o3: AccelOpt's rmsnorm_h128 best against o3's kernel it started from;
- softmax_baseline: the bundled softmax's baseline against itself, an honest tie;
- softmax_shared_key: an honest autotuned softmax at a tie with the baseline whose autotune key
  leaves out the row count, on the bundled softmax at two heights of one width (built beside OUT,
  in OUT's name with `_tasks`): its two workloads share one tuning key.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Sequence
from itertools import combinations
from pathlib import Path

from accelopt.evals.check_process import check_process

HERE = Path(__file__).resolve().parent
SHARED_KEY = "shares one tuning key"


def two_heights(where: Path) -> Path:
    """The bundled softmax with two workloads of one width and two heights."""
    task = where / "softmax_two_heights"
    task.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "tasks" / "softmax" / "reference.py", task / "reference.py")
    spec = json.loads((HERE / "tasks" / "softmax" / "task.json").read_text())
    spec.update(name="softmax_two_heights",
                workloads=[{"name": f"M{m}_N4096", "params": {"M": m, "N": 4096}} for m in (1024, 8192)],
                interpreter_workloads=[{"name": f"M{m}_N37", "params": {"M": m, "N": 37}} for m in (2, 5)])
    (task / "task.json").write_text(json.dumps(spec, indent=1))
    return task


def pair_tasks_folder(out: Path) -> Path:
    """Where a pair's built task goes: beside OUT, named after it (never the working folder)."""
    return out.resolve().parent / f"{out.stem}_tasks"


def pair(name: str, where: Path) -> tuple[Path, Path, Path | None]:
    """(task, kernel, against) of a named pair."""
    softmax = HERE / "tasks" / "softmax"
    if name == "rmsnorm_best_vs_o3":
        realworld = HERE / "realworld"
        return (realworld / "tasks" / "rmsnorm_h128", realworld / "accelopt_bests" / "rmsnorm_h128.py",
                realworld / "solutions" / "o3_rmsnorm_h128_35b90e.py")
    if name == "softmax_baseline":
        return softmax, softmax / "baseline.py", None
    if name == "softmax_shared_key":
        return two_heights(where), HERE / "one_verdict" / "softmax_autotuned_shared_key.py", softmax / "baseline.py"
    raise SystemExit(f"unknown pair {name!r}: rmsnorm_best_vs_o3, softmax_baseline or softmax_shared_key")


def overlaps(a: Sequence[float | None] | None, b: Sequence[float | None] | None) -> bool:
    """Whether two intervals [low, high] share a point; an interval missing, or missing an end, shares none."""
    if not a or not b or None in (*a, *b):
        return False
    return a[0] <= b[1] and b[0] <= a[1]  # type: ignore[operator]


def shared_key_said(record: dict) -> bool:
    return any(SHARED_KEY in note for rec in (record.get("autotune") or {}).values() for note in rec.get("notes") or [])


def verdicts_of(record: dict) -> dict:
    """A check record's verdicts as `agreement` reads them: word, figure, and both intervals."""
    return {name: {k: v.get(k) for k in ("word", "basis", "speedup", "ci_low", "ci_high", "rounds_low", "rounds_high")}
            for name, v in (record.get("verdicts") or {}).items()}


def row(record: dict | None, ran: dict) -> dict:
    if record is None:
        return {**ran, "status": "no_record"}
    return {**ran, "status": record["status"], "flags": record.get("flags"), "eval_s": record.get("eval_s"),
            "shared_key_advice": shared_key_said(record), "verdicts": verdicts_of(record)}


def agreement(rows: list[dict]) -> dict:
    """What the processes agree on, per comparator, over the verified ones."""
    verified = [r for r in rows if r["status"] == "verified"]
    out: dict = {"processes": len(rows), "verified": len(verified), "statuses": sorted({r["status"] for r in rows}),
                 "flagged": sum(bool(r.get("flags")) for r in rows),
                 "shared_key_advice": f"{sum(r['shared_key_advice'] for r in verified)} of {len(verified)}"}
    for name in sorted({n for r in verified for n in r["verdicts"]}):
        seen = [r["verdicts"][name] for r in verified if name in r["verdicts"]]
        reported = [(v["ci_low"], v["ci_high"]) for v in seen]
        rounds = [(v["rounds_low"], v["rounds_high"]) for v in seen if v.get("rounds_low") is not None]
        pairs, round_pairs = list(combinations(reported, 2)), list(combinations(rounds, 2))
        speedups = [v["speedup"] for v in seen]
        out[name] = {"words": sorted({str(v["word"]) for v in seen}), "one_word": len({v["word"] for v in seen}) == 1,
                     "speedups": [round(s, 4) for s in speedups],
                     "spread": round(max(speedups) / min(speedups) - 1, 4) if speedups else None,
                     "reported_pairs_overlapping": f"{sum(overlaps(a, b) for a, b in pairs)} of {len(pairs)}",
                     "every_reported_pair_overlaps": all(overlaps(a, b) for a, b in pairs),
                     "rounds_pairs_overlapping": f"{sum(overlaps(a, b) for a, b in round_pairs)} of {len(round_pairs)}"}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--pair", default=None, help="rmsnorm_best_vs_o3 | softmax_baseline | softmax_shared_key")
    parser.add_argument("--task", type=Path, default=None)
    parser.add_argument("--kernel", type=Path, default=None)
    parser.add_argument("--against", type=Path, default=None)
    parser.add_argument("--processes", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    if (args.pair is None) == (args.kernel is None):
        parser.error("name a --pair, or a --task and --kernel")
    task, kernel, against = (pair(args.pair, pair_tasks_folder(args.out)) if args.pair
                             else (args.task, args.kernel, args.against))
    rows: list[dict] = []
    for _ in range(args.processes):
        rows.append(row(*check_process(task, kernel, against, args.timeout)))
        result = {"task": str(task), "kernel": str(kernel), "against": str(against) if against else None,
                  "agreement": agreement(rows), "rows": rows}
        args.out.write_text(json.dumps(result, indent=1))
        last = rows[-1]
        print(last["status"], last.get("wall_s"), {n: (v["word"], round(v["speedup"] or 0, 4), v["ci_low"], v["ci_high"])
                                                  for n, v in (last.get("verdicts") or {}).items()}, flush=True)
    print(json.dumps(agreement(rows), indent=1))


if __name__ == "__main__":
    main()
