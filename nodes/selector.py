"""selector: the elitist beam (top B verified kernels over the old beam plus this iteration's
children, so the best kernel is never lost), the iteration record, and the stopping decision
(a fatal model error, T reached, a budget spent, or the roofline reached).

A budget counts as spent when what is left cannot pay for the next iteration's first step (its
planner calls and one executor call, at this run's mean calls): starting it would spend tokens
on plans no kernel is written for. Within an iteration every call is admitted against the
budget (tools/budget.py), so a run ends within about one call of it."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import cast

from langgraph.runtime import Runtime

from accelopt.nodes.context import RunContext
from accelopt.nodes.records import (
    Candidate,
    EvaluationStatus,
    IterationRecord,
    PendingFix,
    PendingWrite,
    Plan,
    Usage,
    fixable,
    leads_parent,
    plans_of,
    with_outcome,
)
from accelopt.nodes.state import RunState
from accelopt.tools import inflight
from accelopt.tools.budget import Spend, call_tokens, ledger, next_step
from accelopt.tools.harness.result import NOT_JUDGED
from accelopt.tools.llm_spec import BudgetExceeded, endpoint, totals
from accelopt.tools.rundir import write_candidate


def rank(candidates: Mapping[str, Candidate], ids: list[str]) -> list[str]:
    """Verified candidates (audited where flagged), fastest first. A child that is not faster than its parent beyond
    noise ranks just below that parent, whatever its median says: noise is not a win; one that is ranks at least just
    above it, whatever its own run against the baseline says (the two were timed in the same rounds: what the live
    display says, "beats its parent", is what the ranking does). On the interpreter, where nothing is faster beyond
    noise, a child leads only with a difference in work (records.leads_parent).
    "Below its parent" is below the parent's own rank: a parent that did not lead its own parent ranks below
    that one, and so does its child (capped by the parent's median instead, a child within noise of a parent
    that itself ranks below the baseline outranked the baseline; the best was then a kernel that led nobody)."""
    ranked: dict[str, float] = {}

    def effective(cid: str) -> float:
        if cid in ranked:
            return ranked[cid]
        cand = candidates[cid]
        value = ranked[cid] = cand.get("speedup") or 0.0  # (set first: a cycle of parents ends here)
        parent_id = cand.get("parent_id") or ""
        if parent_id in candidates:
            parent = effective(parent_id)
            value = max(value, parent + 1e-9) if leads_parent(cand) else min(value, parent - 1e-9)
        ranked[cid] = value
        return value

    # A kernel flagged as too good that no external profiler could audit stays out.
    verified = [i for i in ids if candidates[i].get("status") == "verified"
                and "unaudited" not in (candidates[i].get("flags") or [])]
    return sorted(verified, key=lambda i: (-effective(i), i))


def unanswered(state: RunState, ctx: RunContext) -> str | None:
    """One line when a role made calls this iteration and none got a usable reply (each after its
    retries; a call the budget did not pay for is not one): the role, its endpoint, the last
    error. Another iteration would spend its time on the same failures."""
    n = state["iteration"]
    planner = [h for h in state.get("history") or []
               if h.get("iteration") == n and h.get("event") in ("planner_failed", "planner_empty")]
    calls = {"planner": (len(state["beam"]), [h.get("error") for h in planner])}
    for role, fixes in (("executor", False), ("fixer", True)):
        made = [c for c in state["candidates"].values() if c.get("iteration") == n
                and bool(c.get("fix_of")) == fixes and c.get("status") != "not_sent"]
        calls[role] = (len(made), [c.get("error") for c in made if c.get("status") == "llm_error"])
    for role, (sent, failed) in calls.items():
        spec = ctx.model_spec(role)
        if sent and len(failed) == sent and spec.provider != "tuner":
            return (f"{role} model {spec.label()} at {endpoint(spec)}: no usable reply to any of its {sent} "
                    f"call(s) in iteration {n}; the last: {failed[-1]}")
    return None


def stop_reason(state: RunState, ctx: RunContext, best: Candidate, spent: dict) -> str | None:
    if state["iteration"] >= ctx.iterations:
        return f"reached T={ctx.iterations} iterations"
    planned = bool(plans_of(state.get("plans") or [], state["iteration"] + 1))  # the pipeline's plans ahead
    budget = budget_reason(ctx, spent, planners=0 if planned else ctx.beams,
                           held=unseen_spend(state.get("run_dir"), spent)) or unpaid_kernels(state)
    if budget:
        return budget
    if ctx.max_wall_s is not None and time.time() - state["started_at"] >= ctx.max_wall_s:
        return f"wall-clock budget of {ctx.max_wall_s:.0f} s spent"
    if best.get("timer") == "cuda_event" and (best.get("pct_achievable") or 0) >= ctx.roofline_stop_pct:
        return f"best kernel at {best['pct_achievable']:.0f}% of achievable peak (roofline)"
    return None


def unpaid_kernels(state: RunState) -> str | None:
    """An iteration none of whose kernels the budget paid for (each not_sent): the next could not
    pay for its kernels either, only for plans no kernel is written for."""
    n = state["iteration"]
    firsts = [c for c in state["candidates"].values() if c.get("iteration") == n and not c.get("fix_of")]
    if firsts and all(c.get("status") == "not_sent" for c in firsts):
        return f"budget spent: no kernel of iteration {n} could be paid for ({firsts[-1].get('error')})"
    return None


def unseen_spend(run_dir: str | None, spent: dict) -> Spend:
    """What the state's ledger does not hold yet (--quorum): calls that landed uncollected (the
    run's ledger settled them) and, at the mean executor call, those still in flight."""
    run, flying = ledger(run_dir), inflight.in_flight(run_dir)
    landed = Spend(max(0, run.spent.tokens - spent["input_tokens"] - spent["output_tokens"]),
                   max(0.0, run.spent.cost_usd - spent["cost_usd"]))
    waiting = next_step(spent, planners=0, executors=flying)
    return Spend(landed.tokens + waiting.tokens, landed.cost_usd + waiting.cost_usd)


def budget_reason(ctx: RunContext, spent: dict, planners: int | None = None, held: Spend | None = None) -> str | None:
    """Spent, or too little left for the next iteration's planner calls (none where its plans were
    made ahead) and one executor call; `held`: spend the state's ledger does not hold yet."""
    held = held or Spend()
    used = Spend(spent["input_tokens"] + spent["output_tokens"] + held.tokens, spent["cost_usd"] + held.cost_usd)
    need = next_step(spent, planners=ctx.beams if planners is None else planners, executors=1)
    if ctx.max_tokens is not None and (used.tokens >= ctx.max_tokens or used.tokens + need.tokens > ctx.max_tokens):
        return (f"token budget of {ctx.max_tokens:,} spent ({used.tokens:,} used; the next iteration needs about "
                f"{need.tokens:,} more)")
    if ctx.max_cost_usd is not None and (used.cost_usd >= ctx.max_cost_usd
                                         or used.cost_usd + need.cost_usd > ctx.max_cost_usd):
        return (f"cost budget of ${ctx.max_cost_usd:.4g} spent (${used.cost_usd:.4g} used; the next iteration needs "
                f"about ${need.cost_usd:.4g} more)")
    return None


def selector(state: RunState, runtime: Runtime[RunContext]) -> RunState:
    ctx = runtime.context
    candidates = state["candidates"]
    children = [cid for cid, c in candidates.items() if c.get("iteration") == state["iteration"]]
    beam = rank(candidates, list(dict.fromkeys(state["beam"] + children)))[: ctx.beams]
    best = candidates[beam[0]]
    spent = totals(state.get("usage", []))
    # a fatal model error in any branch of this iteration (the run's ledger saw it), or a role
    # none of whose calls this iteration got a usable reply, ends the run as failed
    fatal = ledger(state.get("run_dir")).fatal or unanswered(state, ctx)
    reason = f"model endpoint failed: {fatal}" if fatal else stop_reason(state, ctx, best, spent)
    skipped = [h for h in state.get("history", [])
               if h.get("event") == "planner_skipped" and h.get("iteration") == state["iteration"]]
    if reason is None and skipped:  # the budget could not pay for a plan: another iteration would not either
        reason = f"budget spent: {skipped[-1].get('error')}"
    # a run stopping before T with calls in flight (--quorum) waits for them: what they spend is in its
    # ledger, and each attempt left in flight gets its real outcome
    landed, ended = settle_in_flight(state, reason) if reason is not None else ([], {})
    tokens, cost = this_iteration(state.get("history") or [], totals([*state.get("usage", []), *landed]))
    record = IterationRecord(iteration=state["iteration"],
                             evaluated=sum(candidates[c].get("status") not in NOT_JUDGED for c in children),
                             verified=sum(candidates[c]["status"] == "verified" for c in children),
                             best_id=best["id"], best_speedup=best.get("speedup"), beam=beam,
                             tokens=tokens, cost_usd=cost)
    return {"beam": beam, "history": [record], "stop_reason": reason, "fatal": fatal, "usage": landed,
            "candidates": ended,
            "pending_fixes": pending_fixes(state, ctx, children) if reason is None else [],
            "pending_writes": pending_writes(state, children) if reason is None else []}


def this_iteration(history: list, spent: dict) -> tuple[int, float]:
    """The tokens and $ spent since the last iteration's record (each record holds its own)."""
    before = [h for h in history if not h.get("event")]
    tokens = spent["input_tokens"] + spent["output_tokens"] - sum(h.get("tokens") or 0 for h in before)
    return max(0, tokens), max(0.0, spent["cost_usd"] - sum(h.get("cost_usd") or 0.0 for h in before))


def settle_in_flight(state: RunState, reason: str) -> tuple[list[Usage], dict[str, Candidate]]:
    """A run that stops: wait for its calls in flight (tools/inflight.outcomes), and give each attempt
    still in_flight its outcome: llm_error or not_sent where its call failed or was not paid for,
    cancelled where its reply landed (or never will: a process that was killed) unevaluated."""
    by_attempt = {label: (record, error) for label, record, error in inflight.outcomes(state.get("run_dir"))}
    landed = [cast(Usage, record) for record, _ in by_attempt.values() if record is not None]
    ended: dict[str, Candidate] = {}
    for cid, cand in state["candidates"].items():
        if cand.get("status") != "in_flight":
            continue
        record, error = by_attempt.get(cid, (None, None))
        if error is not None:
            status: EvaluationStatus = "not_sent" if isinstance(error, BudgetExceeded) else "llm_error"
            ended[cid] = with_outcome(cand, status, str(error))
        elif record is not None:
            ended[cid] = with_outcome(cand, "cancelled", f"its reply landed after the run stopped ({reason}): "
                                      "not evaluated", tokens=call_tokens(record), cost_usd=record.get("cost_usd"))
        else:
            ended[cid] = with_outcome(cand, "cancelled", f"the run stopped ({reason}) before its reply was collected")
        write_candidate(state.get("run_dir"), ended[cid])
    return landed, ended


def pending_fixes(state: RunState, ctx: RunContext, children: list[str]) -> list[PendingFix]:
    """The schedules that overlap: this iteration's failed attempts the fix loop would send to the fixer
    but that ended their branch (graph/routing.after_profiler), with their plans, to be fixed beside
    the next iteration's first attempts. None under the beam schedule (every fix ran in place)."""
    if not ctx.schedule.defers_fixes:
        return []
    candidates, plans = state["candidates"], known_plans(state)
    fixed = {c.get("fix_of") for c in candidates.values() if c.get("fix_of")}
    return [PendingFix(failed=candidates[cid], plan=plans[candidates[cid]["plan_id"] or ""])
            for cid in sorted(children) if cid not in fixed
            and fixable(candidates[cid].get("status"), candidates[cid].get("fix_attempt") or 0, ctx)
            and (candidates[cid].get("plan_id") or "") in plans]


def pending_writes(state: RunState, children: list[str]) -> list[PendingWrite]:
    """--quorum: this iteration's attempts (kernels and fixes) whose reply had not landed when it
    moved on (in_flight), with their plans and, for a fix, the attempt it repairs: the next iteration
    collects them and they compete in its selection. A run that stops here leaves them in_flight
    (the selector waits for their calls, so that their tokens are in the run's ledger)."""
    candidates, plans = state["candidates"], known_plans(state)
    waiting = [candidates[cid] for cid in sorted(children) if candidates[cid].get("status") == "in_flight"
               and (candidates[cid].get("plan_id") or "") in plans]
    pending = []
    for c in waiting:
        write = PendingWrite(attempt=c, plan=plans[c.get("plan_id") or ""])
        if c.get("fix_of"):
            write["failed"] = candidates[c.get("fix_of") or ""]
        pending.append(write)
    return pending


def known_plans(state: RunState) -> dict[str, Plan]:
    """The plans a pending attempt may implement, by id: this iteration's (and, under the pipeline
    schedule, the next one's) and those of the attempts handed on before, which are older."""
    plans = {p["id"]: p for p in state.get("plans") or []}
    plans.update({p["plan"]["id"]: p["plan"] for p in state.get("pending_fixes") or []})
    plans.update({w["plan"]["id"]: w["plan"] for w in state.get("pending_writes") or []})
    return plans
