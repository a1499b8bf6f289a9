"""record: the run's files at the end of every iteration, once the summarizer's lessons and
usage are in the state: summary.json and best_kernel.py in the run directory (nothing without
one), and the iteration's plans appended to plans.jsonl (the state holds one iteration's; the
driver keeps only the latest checkpoints). Its own node, so that the summarizer only distills
lessons."""

from __future__ import annotations

from accelopt.nodes.records import summary_record
from accelopt.nodes.state import RunState
from accelopt.tools.run_record import run_summary, write_summary
from accelopt.tools.rundir import append_plans


def record(state: RunState) -> RunState:
    summary = run_summary(state)
    write_summary(state.get("run_dir"), summary, state["candidates"][state["beam"][0]].get("source"))
    append_plans(state.get("run_dir"), state.get("plans") or [])
    return {"best_id": state["beam"][0], "summary": summary_record(summary)}  # the output schema's (Studio's view)
