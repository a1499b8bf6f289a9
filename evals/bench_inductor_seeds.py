"""GPU benchmark: Inductor seeds against torch.compile, on the bundled tasks (issue 17).

For each task, one evaluation of its Inductor seed (tools/inductor_seed.py; a matmul that
Inductor leaves to cuBLAS is seeded from its Triton templates) through the harness, timed
interleaved in the same rounds with: the task's baseline kernel, torch.compile of the reference
(default mode), eager PyTorch, and, when `--tuned DIR` holds DIR/<task>.py, the best kernel of a
seeded tuner run. Speedups are comparator time / seed time (>1: the seed is faster).

    python evals/bench_inductor_seeds.py --out seeds.json [--tasks rmsnorm,softmax] [--tuned best/]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from accelopt.tools.harness.reference_kernel import torch_comparators
from accelopt.tools.harness.runner import evaluate
from accelopt.tools.inductor_capture import capture_in_subprocess
from accelopt.tools.inductor_seed import SeedRefused, seed_source
from accelopt.tools.task import load_task

TASKS = Path(__file__).resolve().parent / "tasks"


def seed_for(task_dir: Path) -> tuple[str | None, str]:
    try:
        made = seed_source(capture_in_subprocess(task_dir, "default"))
    except SeedRefused as exc:
        if not exc.library:
            return None, str(exc)
        try:
            made = seed_source(capture_in_subprocess(task_dir, "max-autotune-triton"))
        except SeedRefused as again:
            return None, str(again)
    return made.source, made.origin


def bench_task(task_dir: Path, tuned_dir: Path | None, timeout_s: float) -> dict:
    task = load_task(task_dir)
    source, origin = seed_for(task_dir)
    row: dict = {"task": task.name, "origin": origin}
    if source is None:
        row["refused"] = origin
        return row
    compare = torch_comparators(task)
    if task.baseline_source:
        compare["baseline"] = task.baseline_source
    tuned = tuned_dir / f"{task.name}.py" if tuned_dir else None
    if tuned is not None and tuned.is_file():
        compare["tuned"] = tuned.read_text()
    result = evaluate(task, source, device="cuda", timeout_s=timeout_s, compare=compare)
    row.update(status=result.status, error=result.error, device_name=result.device_name)
    if result.ok:
        row["versus"] = {k: round(v.speedup, 4) for k, v in result.versus.items()}
        row["interval"] = {k: [round(v.ci_low, 4), round(v.ci_high, 4)] for k, v in result.versus.items()}
        row["pct_achievable"] = {w: t.pct_achievable for w, t in result.workloads.items()}
        row["median_us"] = {"seed": {w: t.median_us for w, t in result.workloads.items()},
                            **{k: {w: t.median_us for w, t in v.items()} for k, v in result.compare.items()}}
    return row


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--tasks", default="")
    parser.add_argument("--tuned", type=Path, default=None, help="DIR/<task>.py: best kernels of seeded runs")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    names = [t for t in args.tasks.split(",") if t] or sorted(p.name for p in TASKS.iterdir() if p.is_dir())
    rows = []
    for name in names:
        rows.append(bench_task(TASKS / name, args.tuned, args.timeout))
        Path(args.out).write_text(json.dumps(rows, indent=1))
        print(json.dumps({k: rows[-1].get(k) for k in ("task", "status", "versus", "refused", "error")}), flush=True)
    over_tc = [r["versus"]["torch_compile"] for r in rows if "torch_compile" in r.get("versus", {})]
    print(f"seed vs torch.compile, geomean over {len(over_tc)} tasks: {geomean(over_tc)}")


if __name__ == "__main__":
    main()
