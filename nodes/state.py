"""Graph state: small and JSON-friendly (sources as strings, numbers, ids), because the
checkpointer and the dev server both serialize it. Keys written by parallel Send branches
carry reducers; per-iteration accumulators are reset with Overwrite by the recall node."""

from __future__ import annotations

import operator
from typing import Annotated, Any, NotRequired

# typing_extensions' TypedDict: pydantic (Studio's schemas) refuses typing's below Python 3.12
from typing_extensions import TypedDict

from accelopt.policies.interface import MeasuredKernel


def merge_dicts(left: dict | None, right: dict | None) -> dict:
    return {**(left or {}), **(right or {})}


def merge_plans(left: list[dict] | None, right: list[dict] | None) -> list[dict]:
    """This iteration's plans, keyed by id: a plan whose id is already here replaces it in place
    (a planner branch adds its own ids; an edit through `update_state` replaces, never duplicates,
    since two plans with one id would write the same candidate ids). `Overwrite(list)` (JSON:
    `{"__overwrite__": list}`) replaces the whole list; recall resets it each iteration."""
    if not isinstance(right, list):
        raise ValueError(f"plans: expected a list of plans, got {type(right).__name__}")
    merged: dict[str, dict] = {}
    for plan in [*(left or []), *right]:
        if not isinstance(plan, dict) or not isinstance(plan.get("id"), str):
            raise ValueError(f"plans: every plan is an object with a string `id`, got {str(plan)[:80]}")
        merged[plan["id"]] = plan
    return list(merged.values())


class InputState(TypedDict):
    """What a run starts from: the graph's input schema (Studio's input form)."""

    task_dir: str                   # a task folder: task.json, reference.py, baseline.py (optional)
    run_dir: NotRequired[str | None]  # where the run keeps its kernels, caches and summary; resumable


class OutputState(TypedDict, total=False):
    """What a finished (or stopped) run gives back: the graph's output schema (Studio's output view,
    `graph.invoke`'s return). Planner-internal keys (plans, recalled, started_at) stay in the state."""

    task_dir: str
    run_dir: str | None               # the run directory (chosen by setup when the input named none)
    iteration: int
    best_id: str                      # the best kernel so far (the beam's head)
    summary: dict                     # summary.json as of the last iteration
    beam: list[str]
    baseline_id: str
    candidates: Annotated[dict[str, dict], merge_dicts]
    insights: Annotated[list[dict], operator.add]
    usage: Annotated[list[dict], operator.add]
    history: Annotated[list[dict], operator.add]
    notes: Annotated[list[str], operator.add]  # what the run decided without a model (a seed made or refused)
    stop_reason: str | None
    fatal: str | None


class RunState(TypedDict, total=False):
    # Input
    task_dir: str
    run_dir: str | None
    # Progress
    iteration: int
    started_at: float
    baseline_id: str
    beam: list[str]                                    # candidate ids, best first (elitist)
    candidates: Annotated[dict[str, dict], merge_dicts]  # every evaluated attempt, by id
    recalled: dict[str, list[dict]]                    # beam member id -> insights recalled for it
    plans: Annotated[list[dict], merge_plans]          # this iteration's plans, by id (reset each iteration)
    insights: Annotated[list[dict], operator.add]      # insights written to memory by this run
    usage: Annotated[list[dict], operator.add]         # one record per model call: role, tokens, $
    history: Annotated[list[dict], operator.add]       # one summary per iteration
    stop_reason: str | None
    fatal: str | None  # a model error no retry can fix (tools/llm.FatalLLMError): it stopped the run
    notes: Annotated[list[str], operator.add]  # what the run decided without a model (e.g. a seed refused)
    # Output (record, every iteration)
    best_id: str
    summary: dict


class PlannerInput(TypedDict):
    """What one planner branch receives through Send: one beam member."""

    task_dir: str
    run_dir: str | None
    iteration: int
    member_index: int
    member: dict
    recalled: list[dict]
    tried: list[MeasuredKernel]  # every kernel measured so far in this run


class CandidateState(TypedDict, total=False):
    """State of the per-sample subgraph executor -> profiler <-> fixer."""

    task_dir: str
    run_dir: str | None
    iteration: int
    plan: dict
    sample: int
    parent: dict
    baseline: dict
    current: dict   # the attempt being evaluated or fixed
    fixes: int
    candidates: Annotated[dict[str, dict], merge_dicts]
    usage: Annotated[list[dict], operator.add]


class CandidateOutput(TypedDict):
    candidates: Annotated[dict[str, dict], merge_dicts]
    usage: Annotated[list[dict], operator.add]


def compact(candidate: dict[str, Any]) -> dict[str, Any]:
    """The part of a candidate a branch needs about its parent or the baseline."""
    keys = ("id", "kind", "plan_title", "source", "status", "workloads", "speedup", "versus", "profile", "timer", "pct_peak", "iteration")
    return {k: candidate.get(k) for k in keys}
