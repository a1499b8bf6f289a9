"""record: the run's files at the end of every iteration, once the summarizer's lessons and
usage are in the state: summary.json and best_kernel.py in the run directory (nothing without
one). Its own node, so that the summarizer only distills lessons."""

from __future__ import annotations

from accelopt.nodes.state import RunState
from accelopt.tools.rundir import run_summary, write_summary


def record(state: RunState) -> dict:
    write_summary(state.get("run_dir"), run_summary(state), state["candidates"][state["beam"][0]].get("source"))
    return {}
