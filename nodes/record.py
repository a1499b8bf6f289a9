"""record: the run's files at the end of every iteration, once the summarizer's lessons and
usage are in the state: summary.json and best_kernel.py in the run directory (nothing without
one), and the iteration's plans appended to plans.jsonl (the state holds one iteration's; the
driver keeps only the latest checkpoints). Its own node, so that the summarizer only distills
lessons."""

from __future__ import annotations

from accelopt.nodes.records import Candidate, plans_of, summary_record
from accelopt.nodes.state import RunState
from accelopt.tools.best_figure import pinned_source
from accelopt.tools.run_record import run_summary, write_summary
from accelopt.tools.rundir import append_plans


def record(state: RunState) -> RunState:
    summary = run_summary(state)
    write_summary(state.get("run_dir"), summary, best_kernel_source(state["candidates"][state["beam"][0]]))
    append_plans(state.get("run_dir"), plans_of(state.get("plans") or [], state.get("iteration") or 0))
    return {"best_id": state["beam"][0], "summary": summary_record(summary)}  # the output schema's (Studio's view)


def best_kernel_source(candidate: Candidate) -> str | None:
    """The best kernel as best_kernel.py holds it (tools/best_figure.pinned_source)."""
    return pinned_source(candidate)
