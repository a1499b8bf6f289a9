"""setup: load and validate the task, then measure the baseline kernel. It becomes the first beam."""

from __future__ import annotations

import time

from langgraph.runtime import Runtime

from graph.context import RunContext
from graph.state import RunState
from nodes.common import task_of
from nodes.profiler import measure
from tools.rundir import write_candidate


def setup(state: RunState, runtime: Runtime[RunContext]) -> dict:
    task = task_of(state["task_dir"])
    if state.get("baseline_id"):  # resumed after setup already ran
        return {}
    if task.baseline_source is None:
        return {"stop_reason": f"task {task.name} has no baseline.py: a starting kernel is required"}
    baseline = {"id": "baseline", "iteration": 0, "parent_id": None, "plan_id": None, "fix_of": None,
                "fix_attempt": 0, "source": task.baseline_source}
    baseline.update(measure(task, baseline["source"], runtime.context, baseline=None, parent=None))
    write_candidate(state.get("run_dir"), baseline)
    update = {"iteration": 0, "started_at": time.time(), "baseline_id": "baseline",
              "candidates": {"baseline": baseline}, "plans": [], "history": []}
    if baseline["status"] != "verified":  # no beam: there is nothing correct to optimize from
        return {**update, "stop_reason": f"the baseline kernel fails its own check ({baseline['status']}): "
                                         f"{baseline['error']}"}
    return {**update, "beam": ["baseline"]}
