"""Does the memory make the next run smarter? Evaluations-to-target with and without it.

    python3 evals/bench_self_improvement.py --out runs/self-improvement --device cuda
Protocol (leave one task out):
1. cold: the tuner optimizes every task of the suite with no memory (--no-memory); each run
   still writes the lessons it measured to its insights.jsonl.
2. warm: for each task, a fresh memory holds the lessons of every *other* task's cold run, and
   the tuner optimizes the task again with it. A task never recalls its own lessons.
3. For each task, the best-found latency is the fastest verified kernel of either run
   (geometric mean over workloads of the median). A run's evaluations-to-target is the number
   of kernels it had evaluated, in plan order, when one first came within 5% of it.
A task "resembles" the memory when another task of the suite could hand it a recipe: the same
kernel class (memory.features.kernel_class of its baseline) and the same tiles, as written or
after a rewrite both admit (a recipe carries its rewrites): those are where recall should help;
on the others it must not hurt. On a GPU, the cold phase also times each best kernel against
torch.compile, for the per-task table of % of peak.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402

from accelopt.evals.reporting.report import latency  # noqa: E402
from accelopt.evals.reporting.rows import geomean  # noqa: E402
from accelopt.memory.features import kernel_class  # noqa: E402
from accelopt.nodes.context import RunContext  # noqa: E402
from accelopt.policies import rewrites  # noqa: E402
from accelopt.tools.task import load_task  # noqa: E402
from accelopt.tools.tunables import IMPLICIT_DEFAULTS, config_of  # noqa: E402

TARGET = 1.05          # within 5% of the best-found latency
NOT_EVALUATED = {"no_code", "truncated", "llm_error", None}


def _natural(cid: str) -> list:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", cid)]


def evaluation_trace(run_dir: Path) -> list[dict]:
    """The kernels a run evaluated (baseline excluded), in iteration then plan order, each with
    its latency when verified (geomean over workloads of the median, in us)."""
    trace = []
    for path in (run_dir / "candidates").glob("*/result.json"):
        cand = json.loads(path.read_text())
        if cand["id"] == "baseline" or cand.get("status") in NOT_EVALUATED:
            continue
        workloads = cand.get("workloads") or {}
        latency_us = latency(workloads)[0] if cand["status"] == "verified" else None
        trace.append({"id": cand["id"], "iteration": cand.get("iteration") or 0, "latency_us": latency_us,
                      "speedup": cand.get("speedup"), "kind": cand.get("kind", "rewrite")})
    return sorted(trace, key=lambda c: (c["iteration"], _natural(c["id"])))


def evaluations_to_target(trace: list[dict], target_us: float) -> int | None:
    """1-based count of evaluations when a kernel first reached target_us; None if none did."""
    for n, cand in enumerate(trace, 1):
        if cand["latency_us"] is not None and cand["latency_us"] <= target_us:
            return n
    return None


def baseline_latency(run_dir: Path) -> float | None:
    path = run_dir / "candidates" / "baseline" / "result.json"
    if not path.is_file():
        return None
    return latency(json.loads(path.read_text()).get("workloads") or {})[0]


def recipe_shapes(source: str) -> set[tuple[str, str, frozenset[str]]]:
    """What a recipe measured on this kernel is keyed on (policies/tuner.py's rules): its class,
    the rewrite it rests on (none, or each one that applies here) and the tiles then (a tile named
    BLOCK_N says nothing about a BLOCK; num_warps and num_stages every launch has)."""
    def tiles(text: str) -> frozenset[str]:
        return frozenset(set(config_of(text)) - set(IMPLICIT_DEFAULTS))

    klass = kernel_class(source)
    return {(klass, "", tiles(source))} | {(klass, rule.name, tiles(rule.apply(source) or ""))
                                           for rule in rewrites.applicable(source)}


def compare(cold: Path, warm: Path, tasks: list[Path]) -> list[dict]:
    """One row per task: evaluations-to-target with and without memory."""
    # What lessons can carry over to, decided from the baselines before any result.
    shapes = {t.name: recipe_shapes(load_task(t).baseline_source or "") for t in tasks}
    rows = []
    for task in tasks:
        traces = {phase: evaluation_trace(root / task.name) if (root / task.name / "candidates").is_dir() else []
                  for phase, root in (("cold", cold), ("warm", warm))}
        baselines = [b for b in (baseline_latency(root / task.name) for root in (cold, warm)) if b]
        found = [c["latency_us"] for t in traces.values() for c in t if c["latency_us"] is not None] + baselines
        best = min(found) if found else None
        mine = shapes[task.name]
        row = {"task": task.name, "kernel_class": next(iter(mine))[0],
               "resembles": any(mine & theirs for name, theirs in shapes.items() if name != task.name),
               "best_us": best, "baseline_us": baselines[0] if baselines else None}
        for phase, trace in traces.items():
            row[f"{phase}_evaluated"] = len(trace)
            row[f"{phase}_best_us"] = min((c["latency_us"] for c in trace if c["latency_us"]), default=None)
            # the baseline itself within 5% of the best: zero evaluations needed
            reached = 0 if baselines and best and baselines[0] <= best * TARGET else \
                evaluations_to_target(trace, best * TARGET) if best else None
            row[f"{phase}_to_target"] = reached
        rows.append(row)
    return rows


def summarize(rows: list[dict]) -> dict:
    """Ratio cold/warm of evaluations-to-target (a run that never reached it counts as its
    evaluation budget + 1), as a geometric mean over tasks that resemble the memory and others."""
    out = {}
    for label, chosen in (("resembling", [r for r in rows if r["resembles"]]),
                          ("not_resembling", [r for r in rows if not r["resembles"]])):
        ratios = []
        for r in chosen:
            cold = r["cold_to_target"] if r["cold_to_target"] is not None else r["cold_evaluated"] + 1
            warm = r["warm_to_target"] if r["warm_to_target"] is not None else r["warm_evaluated"] + 1
            if cold or warm:
                ratios.append(max(cold, 1) / max(warm, 1))
        out[label] = {"tasks": len(chosen), "geomean_cold_over_warm": geomean(ratios)}
    return out


def markdown(rows: list[dict], summary: dict) -> str:
    def n(v):
        return "not reached" if v is None else str(v)

    lines = ["| task | kernel class | resembles memory | evals to 5% cold | evals to 5% warm | best us cold | "
             "best us warm |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['task']} | {r['kernel_class'].split(' (')[0]} | {'yes' if r['resembles'] else 'no'} | "
                     f"{n(r['cold_to_target'])} / {r['cold_evaluated']} | {n(r['warm_to_target'])} / "
                     f"{r['warm_evaluated']} | {r['cold_best_us'] or 0:.1f} | {r['warm_best_us'] or 0:.1f} |")
    for label, s in summary.items():
        g = s["geomean_cold_over_warm"]
        lines.append(f"\n{label.replace('_', ' ')} ({s['tasks']} tasks): evaluations cold/warm, geomean "
                     f"{'n/a' if g is None else f'{g:.2f}x'}")
    return "\n".join(lines)


def warm_memory(cold: Path, task: Path, tasks: list[Path], memory_dir: Path, embedder: str) -> int:
    """A fresh memory with the cold-run lessons of every task but `task`."""
    from accelopt.memory.store import InsightStore

    shutil.rmtree(memory_dir, ignore_errors=True)
    store = InsightStore(memory_dir, embedder=embedder)
    for other in tasks:
        lessons = cold / other.name / "insights.jsonl"
        if other != task and lessons.is_file():
            store.import_jsonl(lessons)
    return store.count()


def main() -> None:
    from accelopt.evals.suite import resolve_suite, run_suite, suite_tasks

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--suite", default="triton")
    parser.add_argument("--tasks", default="", help="comma-separated (default: the whole suite)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--plans", "-N", type=int, default=2)
    parser.add_argument("--iterations", "-T", type=int, default=6)
    parser.add_argument("--phase", choices=("cold", "warm", "all", "compare"), default="all")
    parser.add_argument("--torch-compile", action="store_true", help="cold phase: time best kernels against it")
    parser.add_argument("--embedder", default="all-MiniLM-L6-v2")
    args = parser.parse_args()
    console = Console()
    suite = resolve_suite(args.suite)
    tasks = suite_tasks(suite, [t for t in args.tasks.split(",") if t] or None)
    tasks = [t for t in tasks if load_task(t).spec.backend == "triton" and load_task(t).baseline_source]
    # Interpreter timings are noise; learning from them is only allowed for a CPU pipeline check.
    base = dict(beams=1, plans=args.plans, samples=1, fixes=1, iterations=args.iterations, device=args.device,
                model="tuner", profile=False, embedder=args.embedder, learn_from_interpreter=args.device == "cpu",
                seed="none")  # what memory adds to a search from the baseline, not what a seed does
    cold, warm = args.out / "cold", args.out / "warm"
    if args.phase in ("cold", "all"):
        run_suite(suite, cold, RunContext(**base, use_memory=False, versus_torch_compile=args.torch_compile), tasks,
                  console)
    if args.phase in ("warm", "all"):
        for task in tasks:
            memory = args.out / "memories" / task.name
            if not (warm / task.name / "summary.json").is_file():
                held = warm_memory(cold, task, tasks, memory, args.embedder)
                console.print(f"{task.name}: memory of {held} lessons from the other tasks")
            run_suite(suite, warm, RunContext(**base, use_memory=True, memory_dir=str(memory),
                                              versus_torch_compile=False), [task], console)
    rows = compare(cold, warm, tasks)
    summary = summarize(rows)
    (args.out / "self_improvement.json").write_text(json.dumps({"rows": rows, "summary": summary,
                                                                "settings": base}, indent=2))
    table = markdown(rows, summary)
    (args.out / "self_improvement.md").write_text(table + "\n")
    console.print(table)


if __name__ == "__main__":
    main()
