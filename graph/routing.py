"""Edges: the fan-outs (Send) and the conditional edges of the fix loop and the outer loop.

The fan-outs are also where a run's budget meets its parallel branches: at each iteration's
start the run's ledger (tools/budget.py) is synced from the state, and the samples sent are
those the budget left can pay for.

Three schedules (RunContext.schedule). `beam`, AccelOpt's: each kernel branch runs its whole fix
chain (executor -> profiler <-> fixer), the selector waits for the slowest, then the summarizer,
then the next iteration. `overlap`: a failed first attempt ends its branch (`defer_fixes`); the
selector picks the beam from what landed, and the next iteration's planners start from it while
the summarizer distills the last iteration's lessons beside them (`to_planners`); the pending
fixes (the selector's `pending_fixes`) run one attempt each beside the next iteration's first
attempts (`to_work`, entering the candidate subgraph at the fixer) and compete in its
selection. The last iteration fixes in place, so no fix is left unrun at T. `pipeline`: overlap,
and from the third iteration on each iteration's kernels are written from plans made while the
last iteration's ran: the next iteration's planners are Sent beside this one's kernels
(`to_work`), from the beam as it stood when this iteration began, so a model call to plan is off
the path; a kernel found in iteration i >= 2 is a parent from iteration i + 2 on. The second
iteration is planned after the first's selection, as under overlap: planned beside the first, it
would start from the baseline alone and write a B-th of the kernels. With --quorum (overlap and
pipeline), an iteration's branches stop waiting on their model once that share of its kernel
replies has landed: the selector hands the attempts still in flight on (`pending_writes`), and
`to_work` sends each into the next iteration's candidate subgraph, a kernel at the executor, a fix
at the fixer, which collects the same call (tools/inflight.py).

Under pipeline, a planner ahead that the budget cannot admit beside the kernels in flight records
`planner_deferred`, not `planner_skipped` (which would end the run); an iteration whose every
planner was deferred, or one a finished run is extended by, plans when it begins (`planned_ahead`).
Plan review is refused under pipeline (nodes/context.settings_refusal): no pause is left between
plans and kernels. What each iteration waited on, under any schedule, is the timeline's path
(evals/reporting/timeline.py)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from langgraph.graph import END
from langgraph.runtime import Runtime
from langgraph.types import Send

from accelopt.graph.config import budget_warnings
from accelopt.nodes.context import RunContext
from accelopt.nodes.measurements import measured_kernels
from accelopt.nodes.records import (
    LessonsDue,
    PendingFix,
    PendingWrite,
    Plan,
    fixable,
    iteration_of,
    plans_after,
    plans_of,
)
from accelopt.nodes.selector import budget_reason, unseen_spend
from accelopt.nodes.state import CandidateState, RunState, compact
from accelopt.tools import inflight
from accelopt.tools.budget import Limits, Spend, affordable, ledger, next_step
from accelopt.tools.llm_spec import totals

log = logging.getLogger("accelopt")
Route = list[Send] | list[Send | str] | str  # a fan-out's Sends (and a node beside them), or one node


def after_setup(state: RunState) -> str:
    return END if state.get("stop_reason") else "recall"


def to_planners(state: RunState, runtime: Runtime[RunContext]) -> Route:
    """One planner branch per beam member. Under the pipeline schedule, from the third iteration
    on, the plans were made during the last iteration: the iteration's work is sent at once."""
    ctx = runtime.context
    if state["iteration"] == 1:
        for warning in budget_warnings(ctx):
            log.warning(warning)
    ledger(state.get("run_dir")).sync(state.get("usage") or [], Limits(ctx.max_tokens, ctx.max_cost_usd),
                                      fresh=state["iteration"] == 1)
    if ctx.schedule.plans_ahead and planned_ahead(state):
        return to_work(state, ctx)
    sends = planner_sends(state, state["iteration"])
    due = state.get("lessons_due")
    if ctx.schedule.lessons == "beside_planners" and due:  # the last iteration's lessons, beside this one's planners
        sends.append(Send("summarizer", lessons_view(state, due)))
    return sends


def planned_ahead(state: RunState) -> bool:
    """The pipeline schedule: this iteration's planners ran beside the last one's kernels (their
    plans are here, or what became of them is in the history). Not so in the first iteration, in
    one that a finished run was extended by, nor in one whose every planner ahead the budget
    deferred (the kernels in flight held its room): those plan now."""
    n = state["iteration"]
    return n > 1 and (any(iteration_of(p.get("id") or "") == n for p in state.get("plans") or [])
                      or any(h.get("iteration") == n and str(h.get("event") or "").startswith("planner_")
                             and h.get("event") != "planner_deferred" for h in state.get("history") or []))


def planner_sends(state: RunState, iteration: int) -> list[Send]:
    """A planner branch per member of the beam as it stands, planning `iteration` (under the pipeline
    schedule the next one). What they are told was tried is the kernels of the iterations before
    the one that runs now: a resumed run that runs an iteration again asks its planners what it
    asked the first time (the run cache holds those answers), and the newest TRIED_LIMIT are
    counted after that filter, not before."""
    measured = measured_kernels({cid: c for cid, c in state["candidates"].items()
                                 if (c.get("iteration") or 0) < state["iteration"]})
    return [Send("planner", {"task_dir": state["task_dir"], "run_dir": state.get("run_dir"),
                             "iteration": iteration, "member_index": i,
                             "member": compact(state["candidates"][member_id]),
                             "recalled": state["recalled"].get(member_id, []), "tried": measured,
                             "ahead": iteration > state["iteration"]})
            for i, member_id in enumerate(state["beam"])]


def lessons_view(state: RunState, due: LessonsDue) -> RunState:
    """What the summarizer reads of a finished iteration, as it stood at its end: its candidates,
    their parents, the beam head and the baseline (not the whole run: a Send's payload is
    checkpointed)."""
    candidates = state["candidates"]
    keep = {cid for cid, c in candidates.items() if c.get("iteration") == due["iteration"]}
    keep |= {candidates[cid].get("parent_id") or "" for cid in keep} | {due["beam"][0], state["baseline_id"]}
    return {"task_dir": state["task_dir"], "run_dir": state.get("run_dir"), "iteration": due["iteration"],
            "baseline_id": state["baseline_id"], "beam": due["beam"], "plans": due["plans"],
            "candidates": {cid: candidates[cid] for cid in sorted(keep) if cid in candidates}}


def to_samples(state: RunState, runtime: Runtime[RunContext]) -> Route:
    """Once the plans are in (dispatch): the iteration's work. Under the pipeline schedule, not
    after the planners that planned the next iteration beside this one's kernels: the selector
    waits for those kernels, and the next iteration's recall sends its work."""
    ctx = runtime.context
    if ctx.schedule.plans_ahead and planners_ahead_ran(state):
        return END
    return to_work(state, ctx)


def planners_ahead_ran(state: RunState) -> bool:
    """This dispatch follows the planners of a later iteration: their plans are here, or what
    became of them (failed, empty, skipped, deferred) is in the history. Not the candidates of this
    iteration: an iteration a model failure cut short runs again on resume, beside its first
    attempt's records, and must send its kernels again."""
    n = state["iteration"]
    return bool(plans_after(state.get("plans") or [], n)) or any(
        (h.get("iteration") or 0) > n and str(h.get("event") or "").startswith("planner_")
        for h in state.get("history") or [])


def to_work(state: RunState, ctx: RunContext) -> Route:
    """K kernel branches per plan of this iteration, as many as the budget left pays for (first
    samples of every plan first); each runs the candidate subgraph. Beside them, the schedules that
    overlap send the last iteration's pending fixes; the pipeline schedule also its lessons and the
    next iteration's planners."""
    if ledger(state.get("run_dir")).fatal:
        return "selector"  # a planner met a fatal model error: the selector ends the run
    plans = plans_of(state.get("plans") or [], state["iteration"])
    spent, limits = totals(state.get("usage") or []), Limits(ctx.max_tokens, ctx.max_cost_usd)
    paid = admitted(state, ctx, len(plans), spent, limits)
    common = {"task_dir": state["task_dir"], "run_dir": state.get("run_dir"), "iteration": state["iteration"],
              "baseline": compact(state["candidates"][state["baseline_id"]]), "defer_fixes": paid.defer}
    waiting = (state.get("pending_writes") or []) if ctx.schedule.allows_quorum else []
    common["quorum"] = quorum_size(ctx, paid, waiting)
    work = (fix_sends(state, common, paid, limits, spent) + collected_sends(state, common, waiting)
            + plan_sends(state, common, plans, paid, limits, spent))
    # the kernel calls of plans already made come before any plan for a later iteration (tools/budget.py)
    ledger(state.get("run_dir")).promise(min(paid.fixes_paid, len(paid.pending)) + len(paid.pairs))
    if not ctx.schedule.plans_ahead and ctx.schedule.lessons != "beside_kernels":
        return work or "selector"  # every planner failed, or the budget is spent: nothing to evaluate
    beside = lessons_and_planners_ahead(state, ctx, paid, spent, limits)
    if work:
        return [*work, *beside]
    ended: list[Send | str] = [*beside, "selector"]  # nothing to evaluate: the lessons still run
    return ended


@dataclass(frozen=True)
class Admitted:
    """What the budget left admits of an iteration's work: the (plan, sample) pairs sent and those
    recorded unpaid, the pending fixes and how many of them are paid, and whether a failed first
    attempt waits for the next iteration to be fixed (`defer`)."""

    pairs: list[tuple[int, int]]
    unpaid: list[tuple[int, int]]
    pending: list[PendingFix]
    fixes_paid: int
    defer: bool


def admitted(state: RunState, ctx: RunContext, n_plans: int, spent: dict, limits: Limits) -> Admitted:
    """Budget admission: the first samples of every plan first, then the pending fixes (overlap
    schedules); the iteration defers its fixes unless it is the last one paid for."""
    wanted = [(j, k) for k in range(ctx.kernels_per_plan()) for j in range(n_plans)]
    paid = affordable(spent, limits, "executor", len(wanted))
    pairs, unpaid = sorted(wanted[:paid]), sorted(wanted[paid:])
    pending = (state.get("pending_fixes") or []) if ctx.schedule.defers_fixes else []
    fixes_paid = affordable(spent, limits, "fixer", len(pending))
    # a failed first attempt waits for the next iteration to be fixed, except in the last (T, or the budget's)
    defer = ctx.schedule.defers_fixes and not last_paid(state, ctx, spent,
                                                         len(pairs) + min(fixes_paid, len(pending)))
    return Admitted(pairs, unpaid, pending, fixes_paid, defer)


def quorum_size(ctx: RunContext, paid: Admitted, waiting: list[PendingWrite]) -> int | None:
    """--quorum: once this many of the iteration's kernel replies landed, a call still in flight is
    no longer waited on (its attempt joins the next iteration); never in the last iteration, which
    collects all. Its kernels: the plans' paid samples and the kernel calls collected from the last."""
    kernels = len(paid.pairs) + sum(1 for w in waiting if not w.get("failed"))
    return inflight.needed(ctx.quorum, kernels) if ctx.quorum and paid.defer else None


def fix_sends(state: RunState, common: dict, paid: Admitted, limits: Limits, spent: dict) -> list[Send]:
    """The last iteration's pending fixes, entering at the fixer with their failed attempt; those
    past the budget's fixer calls are recorded unpaid."""
    return [Send("candidate", {**common, "plan": p["plan"], "sample": 0, "current": p["failed"],
                               "fixes": p["failed"].get("fix_attempt") or 0,
                               "parent": compact(state["candidates"][p["plan"]["parent_id"]]),
                               **({} if n < paid.fixes_paid else {"unpaid": unpaid_reason(limits, spent, "fixer")})})
            for n, p in enumerate(paid.pending)]


def collected_sends(state: RunState, common: dict, waiting: list[PendingWrite]) -> list[Send]:
    """Attempts whose reply an earlier iteration stopped waiting for (--quorum), collected beside the
    iteration's own first attempts, asked as they were first asked (their calls were admitted then):
    a kernel at the executor, a fix at the fixer, with the attempt it repairs."""
    return [Send("candidate", {**common, "plan": w["plan"], "sample": 0, "asked_in": w["attempt"]["asked_in"],
                               "parent": compact(state["candidates"][w["plan"]["parent_id"]]),
                               **({"current": w["failed"], "fixes": w["attempt"]["fix_attempt"] - 1}
                                  if w.get("failed") else {"current": w["attempt"]})})
            for w in waiting]


def plan_sends(state: RunState, common: dict, plans: list[Plan], paid: Admitted, limits: Limits,
               spent: dict) -> list[Send]:
    """A branch per paid (plan, sample); a plan's kernel the budget cannot pay for is recorded
    not_sent, with why (its branch makes no call)."""
    sends = [Send("candidate", {**common, "plan": plans[j], "sample": k,
                                "parent": compact(state["candidates"][plans[j]["parent_id"]])})
             for j, k in paid.pairs]
    sends += [Send("candidate", {**common, "plan": plans[j], "sample": k, "unpaid": unpaid_reason(limits, spent),
                                 "parent": compact(state["candidates"][plans[j]["parent_id"]])})
              for j, k in paid.unpaid]
    return sends


def lessons_and_planners_ahead(state: RunState, ctx: RunContext, paid: Admitted, spent: dict,
                               limits: Limits) -> list[Send]:
    """What runs beside the kernels: the last iteration's lessons (pipeline), and the next
    iteration's planners, as many as the budget admits; not iteration 2's, from the baseline alone
    (iteration 1's beam): those wait for iteration 1's selection, so the second is as wide as the rest."""
    due = state.get("lessons_due") if ctx.schedule.lessons == "beside_kernels" else None
    beside = [Send("summarizer", lessons_view(state, due))] if due else []
    if ctx.schedule.plans_ahead and paid.pairs and paid.defer and state["iteration"] >= 2:
        beside += planner_sends(state, state["iteration"] + 1)[:affordable(spent, limits, "planner", len(state["beam"]))]
    return beside


def last_paid(state: RunState, ctx: RunContext, spent: dict, calls: int) -> bool:
    """The run's last iteration: T, or the last the budget pays for (after this one's `calls` kernel
    calls, at the run's mean, the next one's would not fit). It waits for all its replies and fixes in
    place, as the last does: no kernel it paid for is left in flight or unfixed when the run stops."""
    if state["iteration"] >= ctx.iterations:
        return True
    if ctx.max_tokens is None and ctx.max_cost_usd is None:
        return False
    kernels, unseen = next_step(spent, planners=0, executors=calls), unseen_spend(state.get("run_dir"), spent)
    held = Spend(kernels.tokens + unseen.tokens, kernels.cost_usd + unseen.cost_usd)
    return budget_reason(ctx, spent, held=held) is not None


def unpaid_reason(limits: Limits, spent: dict, role: str = "executor") -> str:
    """Why a kernel call of this iteration was not sent: the budget left, at the role's mean call."""
    used = spent.get("input_tokens", 0) + spent.get("output_tokens", 0)
    left = (f"{limits.max_tokens - used:,} tokens" if limits.max_tokens is not None else
            f"${(limits.max_cost_usd or 0.0) - spent.get('cost_usd', 0.0):.4g}")
    return f"not sent: the budget left ({left}) does not pay for another {role} call at this run's mean call"


def entry(state: CandidateState) -> str:
    """Into a kernel branch: the executor writes a plan's kernel, or collects one whose reply an
    earlier iteration stopped waiting for (in_flight, --quorum); a pending fix (overlap schedule)
    enters at the fixer with its failed attempt."""
    current = state.get("current")
    return "fixer" if current and current.get("status") != "in_flight" else "executor"


def after_profiler(state: CandidateState, runtime: Runtime[RunContext]) -> str:
    """The fix-retry loop: back to the fixer while the attempt failed fixably and F is not spent;
    a verified kernel goes on to the launch-configuration search when --autotune N asks for it."""
    status = state["current"]["status"]
    if status == "verified":
        return "autotune" if runtime.context.autotune > 0 else END
    if not fixable(status, state["fixes"], runtime.context):
        return END
    return END if state.get("defer_fixes") else "fixer"  # overlap: fixed beside the next iteration


def after_selector(state: RunState, runtime: Runtime[RunContext]) -> str:
    """beam: the iteration's lessons now. overlap and pipeline: beside the next iteration's planners
    or kernels, unless the run ends here."""
    lessons = runtime.context.schedule.lessons
    return "summarizer" if lessons == "after_selection" or state.get("stop_reason") else "record"


def after_lessons(state: RunState, runtime: Runtime[RunContext]) -> str:
    """beam, or the run's last lessons: record the iteration. overlap: the summarizer ran beside the
    planners, and the plans go on to be dispatched. pipeline: it ran beside the kernels, and the
    selector waits for those."""
    lessons = runtime.context.schedule.lessons
    if lessons == "after_selection" or state.get("stop_reason"):
        return "record"
    return "dispatch" if lessons == "beside_planners" else END


def after_record(state: RunState) -> str:
    """Another iteration, or the run's end: where the best stands against torch.compile."""
    return "standing" if state.get("stop_reason") else "recall"
