"""GPU benchmark: the tuner (no LLM) against AccelOpt's LLM on FlashInfer-Bench tasks, through
the public CLI a user would run.

    python evals/bench_fib_tuner.py --tasks rmsnorm_h128 --out fib_tuner.json

For each task of `evals/realworld/accelopt_bests/manifest.json`:
1. a task folder: the imported FlashInfer-Bench definition (`evals/realworld/tasks/<task>`) with the
   corpus solution AccelOpt started from as its baseline.py;
2. `accelopt optimize DIR --model tuner --device cuda --no-memory` with the default B, N, K, F, T
   (extra flags through --optimize-args), its wall time and summary.json;
3. `accelopt check DIR BEST --against ACCELOPT_BEST --device cuda --json`: the tuner's best and
   AccelOpt's best timed in the same interleaved rounds (speedup > 1: the tuner's is faster), and
   AccelOpt's best against the baseline the same way.

Each row records the commands, their wall times and exit codes; a failed step is recorded and the
next task runs. Nothing here claims a speed-up: the figures are the harness's.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REALWORLD = HERE / "realworld"
BESTS = REALWORLD / "accelopt_bests"


def _run(cmd: list[str], timeout: float, parse_json: bool = False) -> dict:
    start = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        rc, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as e:
        rc = 124
        out, err = (x.decode(errors="replace") if isinstance(x, bytes) else x or "" for x in (e.stdout, e.stderr))
    return {"cmd": " ".join(cmd), "rc": rc, "wall_s": round(time.monotonic() - start, 1),
            "stdout_tail": out[-3000:], "stderr_tail": err[-3000:], "result": json_of(out) if parse_json else None}


def json_of(text: str) -> dict | None:
    """`accelopt check --json`'s one JSON document: the first line that opens a JSON object and
    decodes (a warning printed before it may hold braces of its own)."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"(?m)^\{", text):
        try:
            found, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(found, dict):
            return found
    return None


def bench_task(name: str, entry: dict, work: Path, optimize_args: list[str], timeout: float) -> dict:
    task_dir = work / name
    shutil.copytree(REALWORLD / "tasks" / name, task_dir)
    shutil.copy(REALWORLD / entry["baseline"], task_dir / "baseline.py")
    best = BESTS / entry["file"]
    accelopt = [sys.executable, "-m", "accelopt"]
    row: dict = {"task": name, "baseline": entry["baseline"], "accelopt_best": f"accelopt_bests/{entry['file']}",
                 "upstream_ms": entry["upstream_ms"]}
    run_dir = work / f"run_{name}"
    row["optimize"] = _run([*accelopt, "optimize", str(task_dir), "--model", "tuner", "--device", "cuda",
                            "--no-memory", "--run-dir", str(run_dir), *optimize_args], timeout)
    summary = run_dir / "summary.json"
    row["summary"] = json.loads(summary.read_text()) if summary.exists() else None
    tuned = run_dir / "best_kernel.py"
    if tuned.exists():
        row["tuned_source"] = tuned.read_text()
        row["tuned_vs_accelopt"] = _run([*accelopt, "check", str(task_dir), str(tuned), "--against", str(best),
                                         "--device", "cuda", "--json"], timeout, parse_json=True)
    row["accelopt_vs_baseline"] = _run([*accelopt, "check", str(task_dir), str(best), "--device", "cuda", "--json"],
                                       timeout, parse_json=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    manifest = json.loads((BESTS / "manifest.json").read_text())["bests"]
    parser.add_argument("--tasks", default=",".join(manifest), help="comma-separated task names")
    parser.add_argument("--out", type=Path, default=Path("bench_fib_tuner.json"))
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per command")
    parser.add_argument("--optimize-args", default="", help="extra flags for optimize, e.g. '-T 2 -N 2'")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="fib_tuner_") as tmp:
        for name in args.tasks.split(","):
            row = bench_task(name, manifest[name], Path(tmp), args.optimize_args.split(), args.timeout)
            rows.append(row)
            args.out.write_text(json.dumps(rows, indent=1))  # after each task: a cut-off run keeps what it has
            versus = ((row.get("tuned_vs_accelopt") or {}).get("result") or {}).get("speedup")
            print(f"{name}: optimize rc={row['optimize']['rc']} {row['optimize']['wall_s']} s, best "
                  f"{(row['summary'] or {}).get('best_speedup')}x the baseline; tuned vs AccelOpt's best: {versus}",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
