"""Edges: the fan-outs (Send) and the conditional edges of the fix loop and the outer loop.

The fan-outs are also where a run's budget meets its parallel branches: at each iteration's
start the run's ledger (tools/budget.py) is synced from the state, and the samples sent are
those the budget left can pay for."""

from __future__ import annotations

import logging

from langgraph.graph import END
from langgraph.runtime import Runtime
from langgraph.types import Send

from accelopt.graph.config import budget_warnings
from accelopt.nodes.context import RunContext
from accelopt.nodes.measurements import measured_kernels
from accelopt.nodes.state import CandidateState, RunState, compact
from accelopt.tools.budget import Limits, affordable, ledger
from accelopt.tools.harness.result import FIXABLE
from accelopt.tools.llm_spec import totals

log = logging.getLogger("accelopt")


def after_setup(state: RunState) -> str:
    return END if state.get("stop_reason") else "recall"


def to_planners(state: RunState, runtime: Runtime[RunContext]) -> list[Send]:
    """One planner branch per beam member."""
    ctx = runtime.context
    if state["iteration"] == 1:
        for warning in budget_warnings(ctx):
            log.warning(warning)
    ledger(state.get("run_dir")).sync(state.get("usage") or [], Limits(ctx.max_tokens, ctx.max_cost_usd),
                                      fresh=state["iteration"] == 1)
    # the kernels of earlier iterations only: a resumed run that runs a failed iteration again asks its
    # planners what it asked the first time (the run cache holds those answers), and the newest
    # TRIED_LIMIT are counted after that filter, not before
    measured = measured_kernels({cid: c for cid, c in state["candidates"].items()
                                 if (c.get("iteration") or 0) < state["iteration"]})
    return [Send("planner", {"task_dir": state["task_dir"], "run_dir": state.get("run_dir"),
                             "iteration": state["iteration"], "member_index": i,
                             "member": compact(state["candidates"][member_id]),
                             "recalled": state["recalled"].get(member_id, []), "tried": measured})
            for i, member_id in enumerate(state["beam"])]


def to_samples(state: RunState, runtime: Runtime[RunContext]) -> list[Send] | str:
    """K kernel branches per plan, as many as the budget left pays for (first samples of every
    plan first); each runs the candidate subgraph."""
    ctx = runtime.context
    if ledger(state.get("run_dir")).fatal:
        return "selector"  # a planner met a fatal model error: the selector ends the run
    baseline = compact(state["candidates"][state["baseline_id"]])
    plans = state.get("plans", [])
    pairs = [(j, k) for k in range(ctx.kernels_per_plan()) for j in range(len(plans))]
    pairs = sorted(pairs[:affordable(totals(state.get("usage") or []), Limits(ctx.max_tokens, ctx.max_cost_usd),
                                     "executor", len(pairs))])
    sends = [Send("candidate", {"task_dir": state["task_dir"], "run_dir": state.get("run_dir"),
                                "iteration": state["iteration"], "plan": plans[j], "sample": k,
                                "parent": compact(state["candidates"][plans[j]["parent_id"]]), "baseline": baseline})
             for j, k in pairs]
    return sends or "selector"  # every planner failed, or the budget is spent: nothing to evaluate


def after_profiler(state: CandidateState, runtime: Runtime[RunContext]) -> str:
    """The fix-retry loop: back to the fixer while the attempt failed fixably and F is not spent;
    a verified kernel goes on to the launch-configuration search when --autotune N asks for it."""
    status = state["current"]["status"]
    if status == "verified":
        return "autotune" if runtime.context.autotune > 0 else END
    if status == "no_code" and runtime.context.model_spec("fixer").provider == "tuner":
        return END  # the tuner fixes by undoing launch moves: with no kernel there is nothing to undo
    return "fixer" if status in FIXABLE and state["fixes"] < runtime.context.fixes else END


def after_summarizer(state: RunState) -> str:
    """Another iteration, or the run's end: where the best stands against torch.compile."""
    return "standing" if state.get("stop_reason") else "recall"
