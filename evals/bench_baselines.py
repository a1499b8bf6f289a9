"""GPU benchmark: every bundled Triton task's baseline at real shapes through the harness
(correctness on every workload and seed, then timing), interleaved in the same worker with
torch.compile of the task's PyTorch reference and the eager reference. Prints a markdown table;
--out writes the JSON.

    python evals/bench_baselines.py --out baselines.json [--tasks rmsnorm,softmax]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TASKS = Path(__file__).with_name("tasks")


def main() -> None:
    from accelopt.evals.reporting.rows import interval_label
    from accelopt.tools.harness.reference_kernel import torch_comparators
    from accelopt.tools.harness.runner import evaluate
    from accelopt.tools.task import load_task

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--tasks", help="comma-separated task names (default: all)")
    args = parser.parse_args()
    wanted = set(args.tasks.split(",")) if args.tasks else None
    rows, report, device = [], {}, None
    for task_dir in sorted(p for p in TASKS.iterdir() if (p / "task.json").is_file()):
        if wanted and task_dir.name not in wanted:
            continue
        task = load_task(task_dir)
        assert task.baseline_source is not None, f"{task.name}: every bundled Triton task has a baseline.py"
        result = evaluate(task, task.baseline_source, device="cuda", compare=torch_comparators(task), timeout_s=900)
        report[task.name] = result.model_dump()
        print(f"{task.name}: {result.status}", flush=True)
        if not result.ok:
            rows.append(f"| {task.name} | - | {result.status}: {(result.error or '')[:120]} | | | | | | |")
            continue
        device = result.device_name
        for name, t in result.workloads.items():
            tc, eager = result.compare["torch_compile"][name], result.compare["eager"][name]
            rows.append(f"| {task.name} | {name} | {t.median_us:.1f} | {t.pct_peak:.1f}% | {t.pct_achievable or 0:.1f}% | "
                        f"{t.bound} | {tc.median_us:.1f} | {eager.median_us:.1f} | {tc.median_us / t.median_us:.2f}x |")
        vs = result.versus["torch_compile"]
        rows.append(f"| {task.name} | all (geomean; {interval_label(vs.rounds)}) | | | | | | | {vs.speedup:.2f}x "
                    f"({vs.ci_low:.2f}-{vs.ci_high:.2f}) |")
    print(f"device: {device}")
    print("| task | workload | baseline µs | % datasheet | % achievable | bound | torch.compile µs | eager µs | "
          "baseline vs torch.compile |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
