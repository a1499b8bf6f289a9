"""Whether a finished run failed, from its final state: the CLI exits non-zero with this line
(a run that reached T iterations without ever reaching its model did not succeed)."""

from __future__ import annotations


def run_failure(state: dict) -> str | None:
    """One line when the run failed: a fatal model error stopped it, or every planner call failed
    so that nothing was ever evaluated; None for a run that searched."""
    if state.get("fatal"):
        return str(state["fatal"])
    failed = [h for h in state.get("history") or [] if h.get("event") == "planner_failed"]
    searched = any(c.get("iteration") for c in (state.get("candidates") or {}).values())
    if failed and not searched:
        return (f"every planner call failed ({len(failed)} calls), so nothing was evaluated; "
                f"the last: {failed[-1].get('error')}")
    return None
