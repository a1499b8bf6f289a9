"""Edges: the fan-outs (Send) and the conditional edges of the fix loop and the outer loop."""

from __future__ import annotations

from langgraph.graph import END
from langgraph.runtime import Runtime
from langgraph.types import Send

from accelopt.nodes.context import RunContext
from accelopt.nodes.state import CandidateState, RunState, compact
from accelopt.nodes.measurements import measured_kernels
from accelopt.tools.harness.result import FIXABLE


def after_setup(state: RunState) -> str:
    return END if state.get("stop_reason") else "recall"


def to_planners(state: RunState) -> list[Send]:
    """One planner branch per beam member."""
    measured = measured_kernels(state["candidates"])
    return [Send("planner", {"task_dir": state["task_dir"], "run_dir": state.get("run_dir"),
                             "iteration": state["iteration"], "member_index": i,
                             "member": compact(state["candidates"][member_id]),
                             "recalled": state["recalled"].get(member_id, []), "tried": measured})
            for i, member_id in enumerate(state["beam"])]


def to_samples(state: RunState, runtime: Runtime[RunContext]) -> list[Send] | str:
    """K kernel branches per plan; each runs the candidate subgraph."""
    baseline = compact(state["candidates"][state["baseline_id"]])
    sends = [Send("candidate", {"task_dir": state["task_dir"], "run_dir": state.get("run_dir"),
                                "iteration": state["iteration"], "plan": plan, "sample": k,
                                "parent": compact(state["candidates"][plan["parent_id"]]), "baseline": baseline})
             for plan in state.get("plans", []) for k in range(runtime.context.samples)]
    return sends or "selector"  # every planner failed: nothing to evaluate this iteration


def after_profiler(state: CandidateState, runtime: Runtime[RunContext]) -> str:
    """The fix-retry loop: back to the fixer while the attempt failed fixably and F is not spent;
    a verified kernel goes on to the launch-configuration search when --autotune N asks for it."""
    status = state["current"]["status"]
    if status == "verified":
        return "autotune" if runtime.context.autotune > 0 else END
    return "fixer" if status in FIXABLE and state["fixes"] < runtime.context.fixes else END


def after_summarizer(state: RunState) -> str:
    return END if state.get("stop_reason") else "recall"
