"""GPU benchmark: Inductor seeds against torch.compile and eager PyTorch (issue 17).

For each task, one evaluation of its Inductor seed (tools/inductor_seed.py; a matmul or a
convolution that Inductor leaves to a library is seeded from its Triton templates) through the
harness, timed interleaved in the same rounds with: the task's baseline kernel (if it has one),
torch.compile of the reference (`--compile-mode`: default, or max-autotune-no-cudagraphs, which
the seeds are then captured in too), eager PyTorch, and, when `--tuned DIR` holds
DIR/<task>.py, the best kernel of a seeded tuner run. Speedups are comparator time / seed time
(>1: the seed is faster). Where one of the tuner's source rewrites (policies/rewrites.py) applies to
the seed, the rewritten seed gets an evaluation of its own, checked like any candidate, with the
seed among its comparators (row["rewrites"]). The captures (torch.compile in its own process,
mostly CPU work) run `--jobs` at a time before any timing; the evaluations then run one after another.

    python evals/bench_inductor_seeds.py --out seeds.json [--tasks rmsnorm,softmax] [--tuned best/]
    python evals/bench_inductor_seeds.py --out kb.json --suite kb/ --jobs 8 --seeds kb_seeds.json  # e.g. KernelBench
"""

from __future__ import annotations

import argparse
import json
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from accelopt.policies.rewrites import applicable
from accelopt.tools.harness.reference_kernel import COMPILE_MODES, CompileMode, torch_comparators
from accelopt.tools.harness.runner import evaluate
from accelopt.tools.inductor_capture import CaptureError, capture_in_subprocess
from accelopt.tools.inductor_seed import SeedRefused, seed_source
from accelopt.tools.task import load_task

TASKS = Path(__file__).resolve().parent / "tasks"


def seed_for(task_dir: Path, timeout_s: float = 900.0, mode: CompileMode = "default") -> tuple[str | None, str]:
    """(seed source, origin), or (None, why there is none)."""
    try:
        made = seed_source(capture_in_subprocess(task_dir, mode, timeout_s))
    except SeedRefused as exc:
        if not exc.library:
            return None, str(exc)
        try:
            made = seed_source(capture_in_subprocess(task_dir, "max-autotune-triton", timeout_s))
        except (SeedRefused, CaptureError) as again:
            return None, str(again)
    except CaptureError as exc:
        return None, str(exc)
    return made.source, made.origin


def bench_task(task_dir: Path, seed: tuple[str | None, str], tuned_dir: Path | None, timeout_s: float,
               device: str = "cuda", rounds: int | None = None, mode: CompileMode = "default") -> dict:
    task = load_task(task_dir)
    source, origin = seed
    row: dict = {"task": task.name, "origin": origin, "torch_compile_mode": mode}
    if source is None:
        row["refused"] = origin
        return row
    row["source"] = source
    compare = torch_comparators(task, mode)
    if task.baseline_source:
        compare["baseline"] = task.baseline_source
    tuned = tuned_dir / f"{task.name}.py" if tuned_dir else None
    if tuned is not None and tuned.is_file():
        compare["tuned"] = tuned.read_text()
    result = evaluate(task, source, device=device, timeout_s=timeout_s, compare=compare, rounds=rounds)
    row.update(_measured(result, "seed"))
    for rewrite in applicable(source, task.spec.dtype):
        rewritten = rewrite.apply(source) or ""
        result = evaluate(task, rewritten, device=device, timeout_s=timeout_s,
                          compare={**compare, "seed": source}, rounds=rounds)
        row.setdefault("rewrites", {})[rewrite.name] = {"source": rewritten, **_measured(result, "rewritten")}
    return row


def _measured(result, label: str) -> dict:
    """An evaluation's verdict and, when verified, its times against each comparator."""
    out = {"status": result.status, "error": result.error, "device_name": result.device_name,
           "flags": result.flags, "phases_s": result.phases_s}
    if result.ok:
        out["versus"] = {k: round(v.speedup, 4) for k, v in result.versus.items()}
        out["interval"] = {k: [round(v.ci_low, 4), round(v.ci_high, 4)] for k, v in result.versus.items()}
        out["pct_achievable"] = {w: t.pct_achievable for w, t in result.workloads.items()}
        out["pct_of_copy"] = {w: t.pct_of_copy for w, t in result.workloads.items()}
        out["median_us"] = {label: {w: t.median_us for w, t in result.workloads.items()},
                            **{k: {w: t.median_us for w, t in v.items()} for k, v in result.compare.items()}}
    return out


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--tasks", default="", help="bundled task names (default: all of them)")
    parser.add_argument("--suite", type=Path, default=None, help="a folder of task folders, instead of --tasks")
    parser.add_argument("--tuned", type=Path, default=None, help="DIR/<task>.py: best kernels of seeded runs")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--jobs", type=int, default=1, help="captures at a time (each compiles in its own process)")
    parser.add_argument("--capture-timeout", type=float, default=900.0, help="seconds for one task's capture")
    parser.add_argument("--seeds", type=Path, default=None,
                        help="JSON file of seeds made earlier ({task folder: [source, origin]}), read and "
                             "extended: a later call times what an earlier one captured")
    parser.add_argument("--compile-mode", choices=COMPILE_MODES, default="default",
                        help="torch.compile's mode, for the comparator and the seeds' capture")
    args = parser.parse_args()
    root = args.suite or TASKS
    names = [t for t in args.tasks.split(",") if t] or sorted(p.name for p in root.iterdir() if p.is_dir())
    made = json.loads(args.seeds.read_text()) if args.seeds and args.seeds.is_file() else {}

    saving = threading.Lock()

    def seed(name: str) -> tuple[str | None, str]:
        if name not in made:
            got = list(seed_for(root / name, args.capture_timeout, args.compile_mode))
            with saving:  # captures finish in several threads
                made[name] = got
                if args.seeds:
                    args.seeds.write_text(json.dumps(made, indent=1))
        return made[name][0], made[name][1]

    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        seeds = list(pool.map(seed, names))
    rows = []
    for name, seeded in zip(names, seeds):
        rows.append(bench_task(root / name, seeded, args.tuned, args.timeout, mode=args.compile_mode))
        Path(args.out).write_text(json.dumps(rows, indent=1))
        print(json.dumps({k: rows[-1].get(k) for k in ("task", "status", "versus", "refused", "error")}), flush=True)
        for name, measured in rows[-1].get("rewrites", {}).items():
            print(json.dumps({"task": rows[-1]["task"], "rewrite": name, "status": measured["status"],
                              "versus": measured.get("versus")}), flush=True)
    for comparator in ("torch_compile", "eager"):
        over = [r["versus"][comparator] for r in rows if comparator in r.get("versus", {})]
        fast_1 = sum(v > 1.0 for v in over) / len(rows) if rows else 0.0
        print(f"seed vs {comparator}: geomean over {len(over)} verified seeds {geomean(over)}; "
              f"fast_1 over all {len(rows)} tasks {fast_1:.2f}")


if __name__ == "__main__":
    main()
