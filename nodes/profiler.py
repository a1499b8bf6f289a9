"""profiler: run the evaluation harness on the current attempt and record the result."""

from __future__ import annotations

from langgraph.runtime import Runtime

from graph.context import RunContext
from graph.state import CandidateState
from nodes.common import task_of
from nodes.measurements import mean_pct
from tools.harness.result import beats, speedup
from tools.harness.runner import evaluate
from tools.rundir import write_candidate
from tools.task import Task


def measure(task: Task, source: str, ctx: RunContext, *, baseline: dict | None, parent: dict | None) -> dict:
    """Evaluate a source and return the candidate fields the harness decides."""
    device = None if ctx.device == "auto" else ctx.device
    result = evaluate(task, source, device=device, timeout_s=ctx.eval_timeout_s)
    workloads = {k: v.model_dump() for k, v in result.workloads.items()}
    fields = {"status": result.status, "error": result.error, "device": result.device,
              "device_name": result.device_name, "timer": result.timer, "workloads": workloads,
              "eval_s": result.eval_s, "speedup": None, "speedup_vs_parent": None, "beats_parent": False, "loses_to_parent": False,
              "pct_peak": mean_pct(workloads, "pct_peak"), "pct_achievable": mean_pct(workloads, "pct_achievable")}
    if result.ok:
        fields["speedup"] = speedup(baseline["workloads"], workloads) if baseline else 1.0
        if parent and parent.get("workloads"):
            fields["speedup_vs_parent"] = speedup(parent["workloads"], workloads)
            fields["beats_parent"] = beats(parent["workloads"], workloads)
            fields["loses_to_parent"] = beats(workloads, parent["workloads"])
    return fields


def profiler(state: CandidateState, runtime: Runtime[RunContext]) -> dict:
    current = dict(state["current"])
    if current.get("source"):
        current.update(measure(task_of(state["task_dir"]), current["source"], runtime.context,
                               baseline=state["baseline"], parent=state["parent"]))
    write_candidate(state.get("run_dir"), current)
    return {"current": current, "candidates": {current["id"]: current}}
