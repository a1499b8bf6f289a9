"""profiler: run the evaluation harness on the current attempt and record the result."""

from __future__ import annotations

from langgraph.runtime import Runtime

from accelopt.nodes.common import task_of
from accelopt.nodes.context import RunContext
from accelopt.nodes.records import with_measurement
from accelopt.nodes.services import measure
from accelopt.nodes.state import CandidateState
from accelopt.tools.rundir import write_candidate
from accelopt.tools.tracing import label_run


def profiler(state: CandidateState, runtime: Runtime[RunContext]) -> CandidateState:
    current = state["current"].copy()
    if current.get("source"):
        current = with_measurement(current, measure(task_of(state["task_dir"]), current["source"], runtime.context,
                                                    baseline=state["baseline"], parent=state["parent"],
                                                    run_dir=state.get("run_dir"), candidate_id=current["id"]))
    write_candidate(state.get("run_dir"), current)
    label_run(current["id"], current)  # a failed candidate is its run's error in a trace
    return {"current": current, "candidates": {current["id"]: current}}
