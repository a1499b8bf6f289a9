"""selector: the elitist beam (top B verified kernels over the old beam plus this iteration's
children, so the best kernel is never lost), the iteration record, and the stopping decision
(T reached, a budget spent, or the roofline reached)."""

from __future__ import annotations

import time

from langgraph.runtime import Runtime

from accelopt.nodes.context import RunContext
from accelopt.nodes.state import RunState
from accelopt.tools.llm import totals


def rank(candidates: dict[str, dict], ids: list[str]) -> list[str]:
    """Verified candidates (audited where flagged), fastest first. A child that is not faster than its parent beyond
    noise ranks just below that parent, whatever its median says: noise is not a win."""
    def effective(cid: str) -> float:
        cand = candidates[cid]
        value = cand.get("speedup") or 0.0
        parent = candidates.get(cand.get("parent_id") or "")
        if parent is not None and not cand.get("beats_parent"):
            value = min(value, (parent.get("speedup") or 0.0) - 1e-9)
        return value

    # A kernel flagged as too good that no external profiler could audit stays out.
    verified = [i for i in ids if candidates[i].get("status") == "verified"
                and "unaudited" not in (candidates[i].get("flags") or [])]
    return sorted(verified, key=lambda i: (-effective(i), i))


def stop_reason(state: RunState, ctx: RunContext, best: dict, spent: dict) -> str | None:
    if state["iteration"] >= ctx.iterations:
        return f"reached T={ctx.iterations} iterations"
    if ctx.max_tokens is not None and spent["input_tokens"] + spent["output_tokens"] >= ctx.max_tokens:
        return f"token budget of {ctx.max_tokens} spent"
    if ctx.max_cost_usd is not None and spent["cost_usd"] >= ctx.max_cost_usd:
        return f"cost budget of ${ctx.max_cost_usd:.2f} spent"
    if ctx.max_wall_s is not None and time.time() - state["started_at"] >= ctx.max_wall_s:
        return f"wall-clock budget of {ctx.max_wall_s:.0f} s spent"
    if best.get("timer") == "cuda_event" and (best.get("pct_achievable") or 0) >= ctx.roofline_stop_pct:
        return f"best kernel at {best['pct_achievable']:.0f}% of achievable peak (roofline)"
    return None


def selector(state: RunState, runtime: Runtime[RunContext]) -> dict:
    ctx = runtime.context
    candidates = state["candidates"]
    children = [cid for cid, c in candidates.items() if c.get("iteration") == state["iteration"]]
    beam = rank(candidates, list(dict.fromkeys(state["beam"] + children)))[: ctx.beams]
    best = candidates[beam[0]]
    spent = totals(state.get("usage", []))
    reason = stop_reason(state, ctx, best, spent)
    record = {"iteration": state["iteration"], "evaluated": len(children),
              "verified": sum(candidates[c]["status"] == "verified" for c in children),
              "best_id": best["id"], "best_speedup": best.get("speedup"), "beam": beam,
              "tokens": spent["input_tokens"] + spent["output_tokens"], "cost_usd": spent["cost_usd"]}
    return {"beam": beam, "history": [record], "stop_reason": reason}
