"""Where a run's seconds went, read from its `timeline.jsonl` (tools/timeline.py).

    python -m accelopt.evals.reporting.timeline RUN_DIR [--json]

Per iteration (the span from its first node's start to its last node's end): the wall time; the
time some model call was waiting on a server (the union of `llm` spans clipped to the iteration,
and per role; a call is counted in the iteration that asked it, and one still in flight at its end,
which --quorum moved on without, is also shown as such); the time
a GPU was held by an evaluation (the union over `eval` spans of [start + lease_wait, end]: a
judge checking, compiling, timing, auditing or profiling); the judge's steps summed over the
iteration's evaluations; and the evaluations a minute. A figure is a union of intervals where it
says "the time some ...", so overlapping calls are not counted twice; "GPU-seconds" is a sum.

And per iteration, the model's pace: the tokens its calls decoded a second (a call's output
tokens spread evenly over its span, so a call two periods share counts in each by its overlap) and
the calls in flight on average. Where the served model runs near its own peak (a replay's stats say
it: `decode_floor_s`), no schedule makes the run faster; where it does not, the search left it
idle. Beside them the seconds evaluations waited for a GPU another evaluation (or another process)
held.

And per iteration, what its wall time waited on, in order (`path_s`, the second table): its plans
(from its start to its last planner's end), its first attempts (to the end of the last first
attempt's evaluation: the executors' kernels, not their fixes or launch variants), the fixes and
variants still running after that (to the selector's start), its lessons (the summarizer), and the
rest (recall, selector, record). Where an iteration waits on its slowest branch, the third says so.
"""

from __future__ import annotations

import argparse
import textwrap
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from accelopt.tools import timeline

# the judge's steps (judge.py) and the runner's (runner.py), grouped as a reader asks about them
STEP_GROUPS = {
    "load": "compile+check", "checks": "compile+check", "ghost": "compile+check", "comparators": "comparators",
    "timing": "timing", "after_check": "timing", "reverify": "audit", "audit": "audit", "profile": "profile",
    "judge_wait": "judge start", "lease_wait": "waiting for a judge",
}


class Period(BaseModel):
    """One stretch of a run (an iteration, or the whole run) and where its seconds went."""

    label: str
    wall_s: float
    model_wait_s: float                   # some model call in flight
    model_wait_by_role_s: dict[str, float]
    model_calls: int                      # asked in the period
    outlived_calls: int = 0               # asked in it and still in flight at its end (an iteration's: --quorum)
    tokens_decoded: float = 0.0           # calls' output tokens, each spread evenly over its span, clipped
    calls_in_flight: float = 0.0          # on average over the period
    gpu_held_s: float                     # some evaluation held a GPU
    gpu_seconds: float                    # summed over evaluations (several GPUs: above the wall time)
    evaluations: int
    evaluations_per_min: float
    steps_s: dict[str, float]             # judge and runner steps summed over the evaluations
    nodes_s: dict[str, float]             # graph nodes, the time some call of each was running
    path_s: dict[str, float] = {}         # an iteration's wall, in order: PATH (empty for the whole run)
    finished: bool = True                 # an iteration the run recorded; else cut off (killed, or stopped)


class RunTimeline(BaseModel):
    run_dir: str
    gpus: int                             # distinct GPUs that judged a kernel (interpreter: judges busy at once)
    interpreter: bool = False             # judged on the CPU interpreter: a judge held a core, not a GPU
    total: Period
    iterations: list[Period]

    def gpu_share(self, period: Period) -> float:
        """The share of the period's GPU capacity (wall x GPUs) that evaluations held."""
        return period.gpu_seconds / (period.wall_s * max(1, self.gpus)) if period.wall_s else 0.0


def union_s(intervals: Iterable[tuple[float, float]]) -> float:
    """Seconds covered by at least one interval."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _held(span: dict[str, Any]) -> tuple[float, float]:
    waited = (span.get("phases_s") or {}).get("lease_wait") or 0.0
    return min(span["start"] + waited, span["end"]), span["end"]


def period(label: str, spans: list[dict[str, Any]], start: float, end: float) -> Period:
    inside = [s for s in spans if s["start"] >= start - 1e-3 and s["end"] <= end + 1e-3]
    # a model call waits in every period it overlaps (under --quorum one outlives the iteration that
    # asked it): counted where it was asked, its wait clipped to each period
    llm = [s for s in spans if s["kind"] == "llm" and s["start"] < end + 1e-3 and s["end"] > start - 1e-3]
    asked = [s for s in llm if s["start"] >= start - 1e-3]
    evals = [s for s in inside if s["kind"] == "eval"]
    by_role: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in llm:
        by_role[str(s.get("role"))].append((max(s["start"], start), min(s["end"], end)))
    steps: dict[str, float] = defaultdict(float)
    for s in evals:
        for step, seconds in (s.get("phases_s") or {}).items():
            steps[STEP_GROUPS.get(step, step)] += seconds
    nodes: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in inside:
        if s["kind"] == "node":
            nodes[s["node"]].append((s["start"], s["end"]))
    wall = max(0.0, end - start)
    clipped = [(s, max(0.0, min(s["end"], end) - max(s["start"], start))) for s in llm]
    decoded = sum((s.get("output_tokens") or 0) * share / (s["end"] - s["start"]) if s["end"] > s["start"]
                  else 0.0 for s, share in clipped)
    return Period(
        label=label, wall_s=round(wall, 1), model_wait_s=round(union_s(v for spans in by_role.values() for v in spans), 1),
        model_wait_by_role_s={r: round(union_s(v), 1) for r, v in sorted(by_role.items())}, model_calls=len(asked),
        outlived_calls=sum(1 for s in asked if s["end"] > end + 1e-3),
        tokens_decoded=round(decoded, 1), calls_in_flight=round(sum(share for _, share in clipped) / wall, 2) if wall else 0.0,
        gpu_held_s=round(union_s(_held(s) for s in evals), 1),
        gpu_seconds=round(sum(b - a for a, b in map(_held, evals)), 1), evaluations=len(evals),
        evaluations_per_min=round(len(evals) / (wall / 60), 2) if wall else 0.0,
        steps_s={k: round(v, 1) for k, v in sorted(steps.items())},
        nodes_s={k: round(union_s(v), 1) for k, v in nodes.items()})


# What an iteration's wall time waited on, in order (`path`).
PATH = ("plans", "first attempts", "fixes after them", "lessons", "rest")


def _first_attempt(candidate: Any) -> bool:
    """An executor's kernel (i1.m0.p0.k1), not a fix of one (.f1) nor a launch variant (.a2)."""
    return isinstance(candidate, str) and ".f" not in candidate and ".a" not in candidate


def path(spans: list[dict[str, Any]], iteration: int, start: float, end: float) -> dict[str, float]:
    """The iteration's wall split in PATH's order: each part ends where the next begins (a part
    that did not happen is 0). The first attempts' end is their last evaluation's (or, for one
    that was never evaluated, its executor call's)."""
    mine = [s for s in spans if s["start"] >= start - 1e-3 and s["end"] <= end + 1e-3]
    nodes = [s for s in mine if s["kind"] == "node" and s.get("iteration") == iteration]
    planned = max((s["end"] for s in nodes if s["node"] == "planner"), default=start)
    written = [s for s in mine if s["kind"] == "llm" and s.get("role") == "executor"
               and _first_attempt(s.get("candidate"))]
    firsts = {s.get("candidate") for s in written}
    attempted = max([s["end"] for s in written] + [s["end"] for s in mine if s["kind"] == "eval"
                                                  and s.get("candidate") in firsts], default=planned)
    selected = min((s["start"] for s in nodes if s["node"] == "selector"), default=attempted)
    lessons = union_s((s["start"], s["end"]) for s in nodes if s["node"] == "summarizer")
    parts = {"plans": planned - start, "first attempts": max(0.0, attempted - planned),
             "fixes after them": max(0.0, selected - max(attempted, planned)), "lessons": lessons}
    parts["rest"] = max(0.0, (end - start) - sum(parts.values()))
    return {k: round(v, 1) for k, v in parts.items()}


def read_timeline(run_dir: str | Path) -> RunTimeline:
    spans = [s for s in timeline.read(run_dir) if "start" in s and "end" in s]
    if not spans:
        raise FileNotFoundError(f"{run_dir}: no {timeline.FILE} (a run made before timelines, or one that never started)")
    windows: dict[int, list[float]] = {}
    # an iteration begins with its recall: under the pipeline schedule its planners ran before it,
    # beside the last iteration's kernels, and bound no window of theirs
    began = {s["iteration"]: s["start"] for s in spans if s["kind"] == "node" and s["node"] == "recall"
             and isinstance(s.get("iteration"), int)}
    recorded = {s["iteration"] for s in spans if s["kind"] == "node" and s["node"] == "record"}
    for s in spans:
        # the summarizer's span bounds no iteration: under the overlap schedule an iteration's lessons
        # run beside the next one's planners (a record node always ends an iteration after them)
        if (s["kind"] == "node" and isinstance(s.get("iteration"), int)
                and s["node"] not in ("setup", "standing", "summarizer")
                and s["start"] >= began.get(s["iteration"], s["start"])):
            w = windows.setdefault(s["iteration"], [s["start"], s["end"]])
            w[0], w[1] = min(w[0], s["start"]), max(w[1], s["end"])
    if began:  # plans made ahead for an iteration the run never began are no iteration of it
        windows = {i: w for i, w in windows.items() if i in began}
    for i, w in windows.items():
        if i not in recorded:  # cut off: its calls ended after its last node (none ends a killed iteration)
            w[1] = max([w[1]] + [s["end"] for s in spans if s["kind"] == "llm" and s.get("iteration") == i])
    iterations = [period(f"iteration {i}", spans, a, b).model_copy(update={"path_s": path(spans, i, a, b),
                                                                          "finished": i in recorded})
                  for i, (a, b) in sorted(windows.items()) if i > 0]
    total = period("run", spans, min(s["start"] for s in spans), max(s["end"] for s in spans))
    evals = [s for s in spans if s["kind"] == "eval"]
    gpus = {(s.get("node"), s.get("gpu")) for s in evals if s.get("gpu") is not None}
    # on the interpreter a judge holds a core, not a GPU: as many as were ever busy at once
    return RunTimeline(run_dir=str(run_dir), gpus=len(gpus) or max_overlap(map(_held, evals)), total=total,
                       iterations=iterations, interpreter=not gpus)


def max_overlap(intervals: Iterable[tuple[float, float]]) -> int:
    """The most intervals that were open at one moment (at least 1)."""
    events = sorted(e for a, b in intervals for e in ((a, 1), (b, -1)))  # an end sorts before a start at one moment
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return max(1, most)


def render(found: RunTimeline) -> str:
    """A plain table that reads whole at 80 columns: one row per iteration, then the run."""
    unit = "CPU judge" if found.interpreter else "GPU"
    lines = [f"where the seconds went, on {found.gpus} {unit}{'s' if found.gpus != 1 else ''} (seconds):",
             "model: a model call in flight; held: an evaluation held a " + unit,
             f"%: held time over wall x {unit}s",
             "check, time, audit: judge steps summed (compile+check, timing, audit+profile)",
             f"{'':12}{'wall':>6}{'model':>6}{'held':>6}{'%':>5}{'evals':>6}{'/min':>6}{'check':>7}{'time':>6}"
             f"{'audit':>6}"]
    for p in [*found.iterations, found.total]:
        steps = p.steps_s
        lines.append(f"{_short(p):12}{p.wall_s:6.0f}{p.model_wait_s:6.0f}"
                     f"{p.gpu_held_s:6.0f}{100 * found.gpu_share(p):4.0f}%{p.evaluations:6d}"
                     f"{p.evaluations_per_min:6.1f}{steps.get('compile+check', 0):7.0f}{steps.get('timing', 0):6.0f}"
                     f"{steps.get('audit', 0) + steps.get('profile', 0):6.0f}")
    lines += ["", "what each iteration's wall waited on, in order (seconds): plans; first",
              "attempts (to their last evaluation); fixes and variants after them (the",
              "selector waits on its slowest branch); lessons (the summarizer); the rest",
              f"{'':12}{'wall':>6}{'plans':>7}{'first':>7}{'fixes':>7}{'lessons':>8}{'rest':>6}"]
    for p in found.iterations:
        parts = [p.path_s.get(k, 0.0) for k in PATH]
        lines.append(f"{_short(p):12}{p.wall_s:6.0f}{parts[0]:7.0f}{parts[1]:7.0f}"
                     f"{parts[2]:7.0f}{parts[3]:8.0f}{parts[4]:6.0f}")
    if not all(p.finished for p in found.iterations):
        lines += ["", "cut: an iteration the run never recorded (killed or stopped in it): to its last model call"]
    if found.iterations:
        sums = [sum(p.path_s.get(k, 0.0) for p in found.iterations) for k in PATH]
        wall = sum(p.wall_s for p in found.iterations)
        lines.append(f"{'iterations':12}{wall:6.0f}" + "".join(f"{v:{w}.0f}" for v, w in zip(sums, (7, 7, 7, 8, 6))))
    lines += ["", "the model's pace: tokens its calls decoded a second, calls in flight on",
              f"average; seconds evaluations waited (summed) for a {unit} another held",
              f"{'':12}{'wall':>6}{'tok/s':>7}{'calls':>7}{'wait':>6}"]
    for p in [*found.iterations, found.total]:
        lines.append(f"{_short(p):12}{p.wall_s:6.0f}{p.tokens_decoded / p.wall_s if p.wall_s else 0.0:7.0f}"
                     f"{p.calls_in_flight:7.1f}{p.steps_s.get('waiting for a judge', 0.0):6.0f}")
    left = [f"{_short(p)}: {p.outlived_calls}" for p in found.iterations if p.outlived_calls]
    if left:
        lines += ["", "model calls an iteration moved on without (--quorum), collected by the next:",
                  *textwrap.wrap(", ".join(left), 80, initial_indent="  ", subsequent_indent="  ")]
    return "\n".join(lines)


def _short(p: Period) -> str:
    return p.label.replace("iteration ", "iter ") + ("" if p.finished else " cut")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--json", action="store_true", help="the whole breakdown as JSON")
    args = parser.parse_args(argv)
    found = read_timeline(args.run_dir)
    print(found.model_dump_json(indent=1) if args.json else render(found))


if __name__ == "__main__":
    main()
