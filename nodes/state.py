"""Graph state: small and JSON-friendly (sources as strings, numbers, ids), because the
checkpointer and the dev server both serialize it. Keys written by parallel Send branches
carry reducers; per-iteration accumulators are reset with Overwrite by the recall node."""

from __future__ import annotations

import operator
from typing import Annotated, Any

# typing_extensions' TypedDict: pydantic (Studio's schemas) refuses typing's below Python 3.12
from typing_extensions import NotRequired, TypedDict

from accelopt.tools.policy import MeasuredKernel


def merge_dicts(left: dict | None, right: dict | None) -> dict:
    return {**(left or {}), **(right or {})}


class InputState(TypedDict):
    """What a run starts from: the graph's input schema (Studio's input form)."""

    task_dir: str                   # a task folder: task.json, reference.py, baseline.py (optional)
    run_dir: NotRequired[str | None]  # where the run keeps its kernels, caches and summary; resumable


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
    plans: Annotated[list[dict], operator.add]         # this iteration's plans (reset each iteration)
    insights: Annotated[list[dict], operator.add]      # insights written to memory by this run
    usage: Annotated[list[dict], operator.add]         # one record per model call: role, tokens, $
    history: Annotated[list[dict], operator.add]       # one summary per iteration
    stop_reason: str | None
    fatal: str | None  # a model error no retry can fix (tools/llm.FatalLLMError): it stopped the run


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
