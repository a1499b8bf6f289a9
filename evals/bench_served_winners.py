"""GPU benchmark: the search finds the winners it is handed.

    python evals/bench_served_winners.py --out served --tasks rmsnorm_h128 -T 2 --runs 3   # on a GPU host

For each corpus task whose AccelOpt best is @triton.autotune'd (evals/realworld/accelopt_bests),
the replay endpoint (evals/replay: real LLM-written kernels, AccelOpt's best among them, and
variants, at a modelled LLM's latency; a rehearsal, not an LLM) serves a run that starts from the
corpus solution AccelOpt started from (evals/bench_full_run.py, B2 N2 K2 F1 by default). Then:
1. the best served kernel's standalone verdict: `accelopt check TASK BEST --against BASELINE --json`;
2. per run, the figure it reports for its best (summary.json `best_figure`: every evaluation of the
   best's program pooled with the run's end's confirmation), and each evaluation of the served best
   in it (the candidates whose source is the served best's), with its interval across evaluations
   (stats.across) and whether every pair of those intervals overlaps;
3. pass: where the replay served the best in the run, the reported figure is the standalone
   verdict's within noise: their intervals, each widened by the noise floor, overlap; where it did
   not, no verdict (`passes` null: the run was never handed the winner).
Rows go to OUT/served_winners.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from accelopt.evals.bench_one_verdict import overlaps
from accelopt.evals.check_process import check_process
from accelopt.tools.harness.stats import NOISE_FLOOR, Interval, across

HERE = Path(__file__).resolve().parent
REALWORLD = HERE / "realworld"


def standalone(task: str, best: Path, baseline: Path, timeout_s: float) -> dict:
    record, ran = check_process(REALWORLD / "tasks" / task, best, baseline, timeout_s)
    if record is None:
        return {"status": "no_record", "error": ran.get("error")}
    # --against names its comparator "against": the verdict, on the timer it rests on (as a run ranks)
    verdict: dict = next(iter((record.get("verdicts") or {}).values()), {})
    return {"status": record["status"], "speedup": verdict.get("speedup"),
            "interval": [verdict.get("ci_low"), verdict.get("ci_high")], "word": verdict.get("word"),
            "basis": verdict.get("basis"), "flags": record.get("flags")}


def against_baseline(result: dict) -> dict:
    """A candidate's comparison with the run's baseline, on the timer its verdict rests on (the run
    ranks on it: nodes/services._measure), with the word `check` would give."""
    vs = dict((result.get("versus") or {}).get("baseline") or {})
    if vs:
        vs["word"] = "faster" if vs.get("faster") else "slower" if vs.get("slower") else "within noise"
    return vs


def widened(vs: dict) -> list[float] | None:
    """A result.json comparison's rounds' interval as a verdict reports it: across evaluations."""
    if vs.get("ci_low") is None or vs.get("ci_high") is None:
        return None
    iv = across(Interval(vs["speedup"], vs["ci_low"], vs["ci_high"], 0), vs.get("noise_floor") or NOISE_FLOOR)
    return [iv.low, iv.high]


def passes(run: dict, standalone_interval: list[float] | None) -> bool | None:
    """None where the run was never handed the winner; else whether the figure it reports holds the
    standalone verdict within noise (both intervals are reported across evaluations)."""
    if not run.get("served_best_evaluations"):
        return None
    return overlaps(run.get("best_interval"), standalone_interval)


def run_row(task: str, out: Path, args: argparse.Namespace, best_text: str) -> dict:
    cmd = [sys.executable, str(HERE / "bench_full_run.py"), "--out", str(out), "--tasks", task,
           "-B", str(args.beams), "-N", str(args.plans), "-K", str(args.samples), "-F", str(args.fixes),
           "-T", str(args.iterations), "--schedule", args.schedule, "--time-scale", str(args.time_scale),
           "--seed", str(args.seed), *(["--quorum", str(args.quorum)] if args.quorum else []),
           "--no-memory", "--timeout", str(args.timeout)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    run_dir = out / "runs" / task
    row: dict = {"cmd": " ".join(cmd), "rc": done.returncode, "seed": args.seed}
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {**row, "error": done.stderr[-1500:] or done.stdout[-1500:]}
    row.update(best_id=summary.get("best_id"), best_speedup=summary.get("best_speedup"),
               stop_reason=summary.get("stop_reason"), best_figure=summary.get("best_figure"),
               confirmations=summary.get("confirmations"), not_confirmed=summary.get("not_confirmed"))
    figure = summary.get("best_figure") or {}
    if summary.get("best_id") == "baseline":  # nothing beat it: the baseline against itself
        row.update(best_interval=[1.0, 1.0], best_word="baseline", best_basis=None)
    elif figure:  # the figure the run reports: its best's evaluations pooled with its confirmation
        row["best_interval"] = [figure.get("ci_low"), figure.get("ci_high")]
        row["best_word"], row["best_basis"] = figure.get("word"), figure.get("basis")
    served = []
    for folder in sorted((run_dir / "candidates").glob("*")):
        kernel, result = folder / "kernel.py", folder / "result.json"
        if kernel.is_file() and kernel.read_text().strip() == best_text.strip() and result.is_file():
            got = json.loads(result.read_text())
            vs = against_baseline(got)
            served.append({"id": folder.name, "status": got.get("status"), "speedup": got.get("speedup"),
                           "word": vs.get("word"), "basis": vs.get("basis"),
                           "interval": widened(vs) if vs else None, "rounds_interval": [vs.get("ci_low"), vs.get("ci_high")],
                           "flags": got.get("flags"), "autotune": got.get("autotune_choice")})
    row["served_best_evaluations"] = served
    measured = [e["interval"] for e in served if e.get("interval")]
    row["served_intervals_overlap"] = all(overlaps(a, b) for i, a in enumerate(measured) for b in measured[i + 1:])
    return row


def main() -> None:
    from accelopt.nodes.schedule import Schedule

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tasks", default="rmsnorm_h128")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("-B", "--beams", type=int, default=2)
    parser.add_argument("-N", "--plans", type=int, default=2)
    parser.add_argument("-K", "--samples", type=int, default=2)
    parser.add_argument("-F", "--fixes", type=int, default=1)
    parser.add_argument("-T", "--iterations", type=int, default=2)
    parser.add_argument("--schedule", default="beam", choices=[s.value for s in Schedule],
                        help="the search's (--schedule); beam here, as the recorded rows ran")
    parser.add_argument("--quorum", type=float, default=None, help="the search's (--quorum)")
    parser.add_argument("--time-scale", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    bests = json.loads((REALWORLD / "accelopt_bests" / "manifest.json").read_text())["bests"]
    rows = []
    for task in args.tasks.split(","):
        entry = bests[task]
        best = REALWORLD / "accelopt_bests" / entry["file"]
        row: dict = {"task": task, "baseline": entry["baseline"],
                     "standalone": standalone(task, best, REALWORLD / entry["baseline"], args.timeout), "runs": []}
        rows.append(row)  # written as each part ends: a bench cut short keeps what it measured
        (args.out / "served_winners.json").write_text(json.dumps(rows, indent=1))
        print(task, "standalone", row["standalone"], flush=True)
        for r in range(args.runs):
            run = run_row(task, args.out / f"{task}_run{r}", argparse.Namespace(**{**vars(args), "seed": args.seed + r}),
                          best.read_text())
            run["passes"] = passes(run, row["standalone"].get("interval"))
            row["runs"].append(run)
            (args.out / "served_winners.json").write_text(json.dumps(rows, indent=1))
            figure = run.get("best_figure") or {}
            print(task, r, run.get("best_speedup"), run.get("best_interval"),
                  f"pooling {figure.get('measurements')} ({figure.get('confirmed')} confirming)",
                  "served evaluations' intervals overlap:", run.get("served_intervals_overlap"),
                  "standalone", row["standalone"],
                  {True: "passes", False: "FAILS", None: "not served"}[run["passes"]], flush=True)


if __name__ == "__main__":
    main()
