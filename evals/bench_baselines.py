"""GPU benchmark: every bundled task's baseline at real shapes through the harness
(correctness on every workload and seed, then timing), beside the PyTorch reference timed
the same way. Prints a markdown table; --out writes the JSON.

    python evals/bench_baselines.py --out baselines.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

TASKS = Path(__file__).with_name("tasks")


def time_reference(task) -> dict[str, float]:
    """Median µs of the PyTorch reference per workload (do_bench: cold L2, CUDA events)."""
    import importlib.util

    import triton.testing

    spec = importlib.util.spec_from_file_location("ref", Path(task.root) / "reference.py")
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    out = {}
    for w in task.spec.workloads:
        inputs = ref.make_inputs(w.params, 0, "cuda", task.spec.dtype)
        times = triton.testing.do_bench(lambda: ref.reference(*inputs), return_mode="all")
        out[w.name] = statistics.median(times) * 1e3
    return out


def main() -> None:
    from tools.harness.runner import evaluate
    from tools.task import load_task

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows, report = [], {}
    for task_dir in sorted(p for p in TASKS.iterdir() if (p / "task.json").is_file()):
        task = load_task(task_dir)
        result = evaluate(task, task.baseline_source, device="cuda")
        ref_us = time_reference(task) if result.ok else {}
        report[task.name] = {"result": result.model_dump(), "reference_us": ref_us}
        if not result.ok:
            rows.append(f"| {task.name} | - | {result.status}: {result.error[:80]} | | | | |")
            continue
        for name, t in result.workloads.items():
            rows.append(f"| {task.name} | {name} | {t.median_us:.1f} (IQR {t.iqr_us:.1f}, n={t.samples}) | "
                        f"{t.pct_peak:.1f}% | {t.pct_achievable or 0:.1f}% | {t.bound} | {ref_us[name]:.1f} |")
    print(f"device: {next(iter(report.values()))['result']['device_name']}")
    print("| task | workload | baseline µs | % datasheet | % achievable | bound | torch reference µs |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
