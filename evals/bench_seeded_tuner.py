"""GPU benchmark: the tuner after Inductor's seeds, on tasks with no baseline (KernelBench's way).

For each task folder of a suite that has a seed in `--seeds` (the JSON `bench_inductor_seeds.py
--seeds` writes: {folder: [source, origin]}, source null where Inductor wrote no Triton), a copy
of the task takes the seed as its baseline and `accelopt optimize --model tuner` runs from it; the
run's end-of-run standing times its best kernel interleaved with torch.compile (default mode) and
eager PyTorch. A task with no seed counts as not solved, as KernelBench counts it. fast_1: the
share of all the suite's tasks whose best kernel is correct and faster (point estimate) than the
comparator.

    python evals/bench_seeded_tuner.py --suite kb --seeds kb_seeds.json --out kb_tuned.json -T 1 -N 2
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from accelopt.tools.harness.reference_kernel import COMPILE_MODES


def tune(task_dir: Path, seed: str, work: Path, iterations: int, plans: int, timeout_s: float,
         device: str = "cuda", compile_mode: str = "default") -> dict:
    """One tuner run from the seed; its summary's figures, or why there are none."""
    copy = work / "tasks" / task_dir.name
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(task_dir, copy)
    (copy / "baseline.py").write_text(seed)
    run_dir = work / "runs" / task_dir.name
    shutil.rmtree(run_dir, ignore_errors=True)
    command = [sys.executable, "-m", "accelopt", "optimize", str(copy), "--model", "tuner", "--device", device,
               "--no-memory", "--seed", "none",  # the seed is this copy's baseline already
               "-B", "1", "-N", str(plans), "-T", str(iterations), "--run-dir", str(run_dir),
               "--compile-mode", compile_mode]
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"the run took over {timeout_s:.0f} s", "wall_s": round(time.monotonic() - started, 1)}
    row: dict = {"wall_s": round(time.monotonic() - started, 1)}
    summary_path = run_dir / "summary.json"
    if done.returncode != 0 or not summary_path.is_file():
        return {**row, "error": f"exit {done.returncode}: {(done.stderr or done.stdout)[-600:]}"}
    summary = json.loads(summary_path.read_text())
    standing = summary.get("versus_torch_compile") or {}
    row.update(best_id=summary.get("best_id"), tuned_vs_seed=summary.get("best_speedup"),
               candidates=summary.get("candidates_evaluated"), statuses=summary.get("statuses"),
               vs_torch_compile=standing.get("speedup"),
               interval=[standing.get("ci_low"), standing.get("ci_high")], verdict=standing.get("verdict"),
               vs_eager=standing.get("eager"), pct_of_copy=summary.get("best_pct_of_copy"))
    best = run_dir / "candidates" / str(summary.get("best_id")) / "result.json"
    if best.is_file():  # what the winning candidate was: its plan's title
        row["best_plan"] = json.loads(best.read_text()).get("plan_title")
    if standing.get("speedup") is None:
        row["error"] = f"no standing against torch.compile: {standing or summary.get('note') or summary.get('failure')}"
    return row


def fast_1(rows: list[dict], key: str) -> float:
    return sum((r.get(key) or 0.0) > 1.0 for r in rows) / len(rows) if rows else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", type=Path, required=True, help="a folder of task folders")
    parser.add_argument("--seeds", type=Path, nargs="+", required=True, help="seed JSON files ({folder: [source, origin]})")
    parser.add_argument("--tasks", default="", help="folders of the suite (default: all)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("seeded-tuner"))
    parser.add_argument("-T", "--iterations", type=int, default=1)
    parser.add_argument("-N", "--plans", type=int, default=2)
    parser.add_argument("--device", default="cuda", help="cpu: a dry run on the interpreter (no standing)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for one task's run")
    parser.add_argument("--compile-mode", choices=COMPILE_MODES, default="default",
                        help="torch.compile's mode for each run's standing")
    args = parser.parse_args(argv)
    seeds: dict[str, list] = {}
    for path in args.seeds:
        seeds.update(json.loads(path.read_text()))
    names = [t for t in args.tasks.split(",") if t] or sorted(p.name for p in args.suite.iterdir() if p.is_dir())
    rows = []
    for name in names:
        source, origin = seeds.get(name) or (None, "no seed captured")
        row: dict = {"task": name, "origin": origin}
        if source is None:
            row["refused"] = origin
        else:
            row.update(tune(args.suite / name, source, args.work, args.iterations, args.plans, args.timeout,
                            args.device, args.compile_mode))
        rows.append(row)
        args.out.write_text(json.dumps(rows, indent=1))
        print(json.dumps({k: v for k, v in row.items() if k != "origin"}), flush=True)
    print(f"tuner after seeds over {len(rows)} tasks: fast_1 vs eager {fast_1(rows, 'vs_eager'):.2f}, "
          f"vs torch.compile {fast_1(rows, 'vs_torch_compile'):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
