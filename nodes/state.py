"""Graph state: small and JSON-friendly (sources as strings, numbers, ids), because the
checkpointer and the dev server both serialize it. Its values are plain dicts typed as the
records of nodes/records.py (TypedDicts: Studio's schemas show their fields), never models.
Keys written by parallel Send branches carry reducers; per-iteration accumulators are reset
with Overwrite by the recall node."""

from __future__ import annotations

import operator
from typing import Annotated, NotRequired, TypeVar

# typing_extensions' TypedDict: pydantic (Studio's schemas) refuses typing's below Python 3.12
from pydantic import Field
from typing_extensions import TypedDict

from accelopt.nodes.records import (
    Candidate,
    CompactCandidate,
    HistoryEntry,
    InsightRecord,
    LearnedInsight,
    LessonsDue,
    PendingFix,
    PendingWrite,
    Plan,
    Summary,
    Usage,
    evaluation_of,
    lineage_of,
)
from accelopt.policies.interface import MeasuredKernel

V = TypeVar("V")


def merge_dicts(left: dict[str, V] | None, right: dict[str, V] | None) -> dict[str, V]:
    return {**(left or {}), **(right or {})}


def merge_plans(left: list[Plan] | None, right: list[Plan] | None) -> list[Plan]:
    """This iteration's plans, keyed by id: a plan whose id is already here replaces it in place
    (a planner branch adds its own ids; an edit through `update_state` replaces, never duplicates,
    since two plans with one id would write the same candidate ids). `Overwrite(list)` (JSON:
    `{"__overwrite__": list}`) replaces the whole list; recall resets it each iteration."""
    if not isinstance(right, list):
        raise ValueError(f"plans: expected a list of plans, got {type(right).__name__}")
    merged: dict[str, Plan] = {}
    for plan in [*(left or []), *right]:
        if not isinstance(plan, dict) or not isinstance(plan.get("id"), str):
            raise ValueError(f"plans: every plan is an object with a string `id`, got {str(plan)[:80]}")
        merged[plan["id"]] = plan
    return list(merged.values())


class InputState(TypedDict):
    """What a run starts from: the graph's input schema (Studio's input form)."""

    # the descriptions: Studio's form and the MCP tool's arguments show them
    task_dir: Annotated[str, Field(description=(
        "A task folder (task.json, reference.py, baseline.py optional), a path on the machine that runs the graph"))]
    run_dir: NotRequired[Annotated[str | None, Field(description=(
        "Where the run keeps its kernels, caches and summary (resumable); default runs/TASK-TIME"))]]


class OutputState(TypedDict, total=False):
    """What a finished (or stopped) run gives back: the graph's output schema (Studio's output view,
    `graph.invoke`'s return). Planner-internal keys (plans, recalled, started_at) stay in the state."""

    task_dir: str
    run_dir: str | None               # the run directory (chosen by setup when the input named none)
    iteration: int
    best_id: str                      # the best kernel so far (the beam's head)
    summary: Summary                  # summary.json as of the last iteration
    beam: list[str]
    baseline_id: str
    candidates: Annotated[dict[str, Candidate], merge_dicts]
    insights: Annotated[list[LearnedInsight], operator.add]
    usage: Annotated[list[Usage], operator.add]
    history: Annotated[list[HistoryEntry], operator.add]
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
    beam: list[str]                                         # candidate ids, best first (elitist)
    candidates: Annotated[dict[str, Candidate], merge_dicts]  # every evaluated attempt, by id
    recalled: dict[str, list[InsightRecord]]                # beam member id -> insights recalled for it
    plans: Annotated[list[Plan], merge_plans]               # this iteration's plans, by id (reset each iteration)
    insights: Annotated[list[LearnedInsight], operator.add]  # insights written to memory by this run
    usage: Annotated[list[Usage], operator.add]             # one record per model call: role, tokens, $
    history: Annotated[list[HistoryEntry], operator.add]    # one record per iteration, and planner events
    stop_reason: str | None
    fatal: str | None  # a model error no retry can fix (tools/llm.FatalLLMError): it stopped the run
    notes: Annotated[list[str], operator.add]  # what the run decided without a model (e.g. a seed refused)
    # The overlap schedule (RunContext.schedule): failed attempts whose next fix runs in the next
    # iteration (the selector's), and the iteration whose lessons run beside the next planners (recall's)
    pending_fixes: list[PendingFix]
    pending_writes: list[PendingWrite]  # --quorum: first attempts still in flight when the iteration moved on
    lessons_due: LessonsDue | None
    # Output (record, every iteration)
    best_id: str
    summary: Summary


class PlannerInput(TypedDict):
    """What one planner branch receives through Send: one beam member."""

    task_dir: str
    run_dir: str | None
    iteration: int
    member_index: int
    member: CompactCandidate
    recalled: list[InsightRecord]
    tried: list[MeasuredKernel]  # every kernel measured so far in this run
    ahead: NotRequired[bool]     # the pipeline schedule: planning the next iteration beside this one's kernels


class CandidateState(TypedDict, total=False):
    """State of the per-sample subgraph executor -> profiler <-> fixer."""

    task_dir: str
    run_dir: str | None
    iteration: int
    plan: Plan
    sample: int
    parent: CompactCandidate
    baseline: CompactCandidate
    current: Candidate   # the attempt being evaluated or fixed (given: a pending fix, entered at the fixer,
                         # or a pending write, in_flight, entered at the executor)
    fixes: int
    defer_fixes: bool    # the overlap schedule: a failed attempt ends the branch, its fix runs next iteration
    quorum: int | None   # --quorum: the iteration's replies after which a call still in flight stops being waited on
    asked_in: int | None  # --quorum: a call an earlier iteration stopped waiting for, asked in that iteration
    unpaid: str | None   # the budget could not pay for this attempt's call: recorded not_sent, with why, unsent
    candidates: Annotated[dict[str, Candidate], merge_dicts]
    usage: Annotated[list[Usage], operator.add]


class CandidateOutput(TypedDict):
    candidates: Annotated[dict[str, Candidate], merge_dicts]
    usage: Annotated[list[Usage], operator.add]


def compact(candidate: Candidate) -> CompactCandidate:
    """The part of a candidate a branch needs about its parent or the baseline: who it is (its
    lineage), its source, and what its evaluation measured."""
    born, said = lineage_of(candidate), evaluation_of(candidate)
    return CompactCandidate(
        id=born["id"], kind=born.get("kind"), plan_title=born.get("plan_title"), iteration=born.get("iteration"),
        source=candidate.get("source"), status=said.get("status"), workloads=said.get("workloads"),
        speedup=said.get("speedup"), versus=said.get("versus"), profile=said.get("profile"),
        timer=said.get("timer"), pct_peak=said.get("pct_peak"))
