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
    IterationRecord,
    PendingFix,
    PendingWrite,
    Plan,
    Usage,
    fixable,
    leads_parent,
)
from accelopt.nodes.state import RunState
from accelopt.tools import inflight
from accelopt.tools.budget import Spend, ledger, next_step
from accelopt.tools.harness.result import NOT_EVALUATED
from accelopt.tools.llm_spec import endpoint, totals


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
    budget = budget_reason(ctx, spent)
    if budget:
        return budget
    if ctx.max_wall_s is not None and time.time() - state["started_at"] >= ctx.max_wall_s:
        return f"wall-clock budget of {ctx.max_wall_s:.0f} s spent"
    if best.get("timer") == "cuda_event" and (best.get("pct_achievable") or 0) >= ctx.roofline_stop_pct:
        return f"best kernel at {best['pct_achievable']:.0f}% of achievable peak (roofline)"
    return None


def budget_reason(ctx: RunContext, spent: dict) -> str | None:
    """Spent, or too little left for the next iteration's planner calls and one executor call."""
    used = Spend(spent["input_tokens"] + spent["output_tokens"], spent["cost_usd"])
    need = next_step(spent, planners=ctx.beams, executors=1)
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
    record = IterationRecord(iteration=state["iteration"],
                             evaluated=sum(candidates[c].get("status") not in NOT_EVALUATED for c in children),
                             verified=sum(candidates[c]["status"] == "verified" for c in children),
                             best_id=best["id"], best_speedup=best.get("speedup"), beam=beam,
                             tokens=spent["input_tokens"] + spent["output_tokens"], cost_usd=spent["cost_usd"])
    # a run stopping before T with calls in flight (--quorum) waits for them: what they spend is in its ledger
    landed = [cast(Usage, u) for u in inflight.collect(state.get("run_dir"))] if reason is not None else []
    return {"beam": beam, "history": [record], "stop_reason": reason, "fatal": fatal, "usage": landed,
            "pending_fixes": pending_fixes(state, ctx, children) if reason is None else [],
            "pending_writes": pending_writes(state, children) if reason is None else []}


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
