"""planner: N plans for one beam member, from the task, the kernel, its measurements, what this
run measured already and the recalled insights. One branch per beam member (Send).

review (the `dispatch` barrier, once every planner is in): with `review_plans`, the run pauses
with `interrupt({"plans": [...]})`; the resume value, a list of plans (edited, fewer, new ones,
or [] to skip this iteration's kernels), replaces the iteration's plans. A malformed answer
pauses again with the error; plan ids are made unique within the iteration."""

from __future__ import annotations

import logging
import re
from typing import Any

from langgraph.runtime import Runtime
from langgraph.types import Overwrite, interrupt

from accelopt.memory.features import row_length
from accelopt.memory.schema import Insight
from accelopt.nodes.common import task_of
from accelopt.nodes.context import RunContext
from accelopt.nodes.records import Plan, PlannerEventKind, iteration_of, plan_record, planner_event, usage_entries
from accelopt.nodes.state import PlannerInput, RunState
from accelopt.policies.choice import policy_for
from accelopt.policies.interface import MeasuredKernel, PlanDraft, PlanRequest, PolicyError
from accelopt.policies.measurement_text import describe
from accelopt.tools.budget import planning_ahead
from accelopt.tools.llm_spec import BudgetExceeded


def planner(state: PlannerInput, runtime: Runtime[RunContext]) -> RunState:
    ctx = runtime.context
    member = state["member"]
    insights = [Insight.model_validate(i) for i in state["recalled"]]
    request = PlanRequest(task=task_of(state["task_dir"]), iteration=state["iteration"], member_id=member["id"],
                          source=None if member.get("kind") == "reference" else member["source"],
                          measurements=describe(member), tried=tried_before(state["tried"], state["iteration"]),
                          lessons=insights, n=ctx.plans, row=row_length(member.get("workloads")))
    try:
        with planning_ahead(bool(state.get("ahead"))):  # ahead of kernels sent: those come first
            answer = policy_for(ctx, "planner", state.get("run_dir")).plan(request)
    except PolicyError as exc:
        # not called for the budget: skipped, not failed (a run whose every planner failed failed)
        event: PlannerEventKind = "planner_failed"
        if isinstance(exc.__cause__, BudgetExceeded):  # ahead, the kernels in flight held the budget's room
            event = "planner_deferred" if state.get("ahead") else "planner_skipped"
        return {"plans": [], "history": [planner_event(state["iteration"], event, member["id"], str(exc))]}
    plans = [plan_record(f"i{state['iteration']}.m{state['member_index']}.p{j}", member["id"], draft,
                         [i.id for i in insights])
             for j, draft in enumerate(answer.plans)]
    usage = usage_entries(answer.usage)
    if not plans and ctx.model_spec("planner").provider != "tuner":
        # a reply with no plan in it (only reasoning, cut off, empty): said, not silent
        why = answer.note or "the reply held no plan"
        log.warning("planner for %s, iteration %d: %s", member["id"], state["iteration"], why)
        return {"plans": [], "usage": usage,
                "history": [planner_event(state["iteration"], "planner_empty", member["id"], why)]}
    return {"plans": plans, "usage": usage}


def tried_before(tried: list[MeasuredKernel], iteration: int) -> list[MeasuredKernel]:
    """The kernels measured before this iteration. In a run they are all there are when its
    planners ask; a resumed run that runs a failed iteration again also has that iteration's own,
    and with them its planner would ask another question than the first time: a second real call
    where the run cache holds the answer to the first."""
    return [k for k in tried if iteration_of(k["id"]) < iteration]


log = logging.getLogger("accelopt")
REVIEW = "plans"  # the interrupt payload's `review`: what it asks the user to review
_PLAN_FIELDS = tuple(Plan.__annotations__)


class PlanReviewError(ValueError):
    """A plan-review answer that cannot be run; the message says what to send instead."""


def review(state: RunState, runtime: Runtime[RunContext]) -> dict:
    """The barrier between the planners and the samples; with `review_plans`, a human's turn."""
    plans = state.get("plans") or []
    if not runtime.context.review_plans or not plans:
        return {}
    payload: dict[str, Any] = {
        "review": REVIEW, "iteration": state["iteration"], "beam": state["beam"], "plans": plans,
        "how": "resume with the list of plans to run: edited, fewer, new ones ({text, parent_id}), or [] to skip "
               "this iteration's kernels"}
    while True:  # each malformed answer pauses again, with what was wrong (LangGraph replays earlier answers)
        answer = interrupt(payload)
        try:
            reviewed, warnings = reviewed_plans(answer, plans, state["beam"], state["iteration"])
        except PlanReviewError as exc:
            log.warning("plan review: %s", exc)
            payload = {**payload, "error": str(exc)}
            continue
        for warning in warnings:
            log.warning("plan review: %s", warning)
        return {"plans": Overwrite(reviewed)}


def reviewed_plans(answer: Any, proposed: list[Plan], beam: list[str], iteration: int) -> tuple[list[Plan], list[str]]:
    """The plans a review answer asks for, checked and completed: a plan may be a string (its text,
    for the beam's head) or an object with at least `text`; a field it leaves out is taken from the
    proposed plan of its id. Ids are made unique within the iteration and fit the plan's parent
    (i{iteration}.m{member}.p{n}); each rename is a warning. Raises PlanReviewError."""
    if not isinstance(answer, list):
        raise PlanReviewError(f"expected a list of plans (the `plans` shown, edited; [] skips this iteration), got "
                              f"{type(answer).__name__}: {str(answer)[:80]}")
    by_id: dict[str, Plan] = {p["id"]: p for p in proposed}
    drafts: list[dict[str, Any]] = []
    for n, item in enumerate(answer):
        where = f"plan {n + 1}"
        if isinstance(item, str):
            item = {"text": item}
        if not isinstance(item, dict):
            raise PlanReviewError(f"{where}: expected an object with `text` (and optionally {', '.join(_PLAN_FIELDS)})"
                                  f" or a string, got {type(item).__name__}")
        unknown = sorted(set(item) - set(_PLAN_FIELDS))
        if unknown:
            raise PlanReviewError(f"{where}: unknown field(s) {', '.join(unknown)}; a plan has "
                                  f"{', '.join(_PLAN_FIELDS)}")
        if "id" in item and not isinstance(item["id"], str):
            raise PlanReviewError(f"{where}: `id` must be a string, got {item['id']!r}")
        base = by_id.get(item.get("id") or "", {})
        plan: dict[str, Any] = {**base, **item}
        if not isinstance(plan.get("text"), str) or not plan["text"].strip():
            raise PlanReviewError(f"{where}: `text` must be a non-empty string")
        plan.setdefault("parent_id", beam[0])
        if plan["parent_id"] not in beam:
            raise PlanReviewError(f"{where}: parent_id {plan['parent_id']!r} is not in this iteration's beam "
                                  f"({', '.join(beam)})")
        moves = plan.setdefault("moves", {})
        if not isinstance(moves, dict) or not all(
                isinstance(k, str) and isinstance(v, (list, tuple)) and len(v) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) for x in v) for k, v in moves.items()):
            raise PlanReviewError(f"{where}: `moves` must map a launch tunable to [from, to] integers, got {moves!r}")
        plan["moves"] = {k: list(v) for k, v in moves.items()}
        configs = plan.get("configs") or []
        if not isinstance(configs, list) or not all(
                isinstance(c, dict) and c and all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                                                  for k, v in c.items()) for c in configs):
            raise PlanReviewError(f"{where}: `configs` must be a list of launch configurations (tunable -> integer), "
                                  f"got {configs!r}")
        ids = plan.setdefault("insight_ids", [])
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise PlanReviewError(f"{where}: `insight_ids` must be a list of strings")
        if not isinstance(plan.get("rewrite", ""), str):
            raise PlanReviewError(f"{where}: `rewrite` must be the name of a source rewrite, got {plan['rewrite']!r}")
        drafts.append(plan)
    return _unique_ids(drafts, proposed, beam, iteration)


def _unique_ids(drafts: list[dict[str, Any]], proposed: list[Plan], beam: list[str], iteration: int
                ) -> tuple[list[Plan], list[str]]:
    """Each plan's id fits its parent's member index and is unique: the first plan to claim an id
    keeps it; a later one, a missing or a misfit id gets the member's next free number."""
    def number(plan_id: Any, member: int) -> int | None:
        found = re.fullmatch(rf"i{iteration}\.m{member}\.p(\d+)", plan_id) if isinstance(plan_id, str) else None
        return int(found.group(1)) if found else None

    taken: dict[int, set[int]] = {}
    for known in [*proposed, *drafts]:
        for member in range(len(beam)):
            if (k := number(known.get("id"), member)) is not None:
                taken.setdefault(member, set()).add(k)
    used: set[str] = set()
    plans: list[Plan] = []
    warnings = []
    for n, plan in enumerate(drafts):
        member = beam.index(plan["parent_id"])
        given = plan.get("id")
        if number(given, member) is None or given in used:
            k = max(taken.get(member, set()) | {-1}) + 1
            taken.setdefault(member, set()).add(k)
            plan["id"] = f"i{iteration}.m{member}.p{k}"
            if given is not None:
                why = "repeats an earlier plan's" if given in used else f"does not fit a plan of {plan['parent_id']}"
                warnings.append(f"plan {n + 1}: id {given!r} {why}; renamed {plan['id']}")
        used.add(plan["id"])
        draft = PlanDraft(plan["text"], {knob: (a, b) for knob, (a, b) in plan["moves"].items()},
                          tuple(plan.get("configs") or ()), plan.get("rewrite") or "")
        plans.append(plan_record(plan["id"], plan["parent_id"], draft, plan["insight_ids"]))
    return plans, warnings
