"""Plan review (`review_plans`): the run pauses after its planners with `interrupt({"plans": ...})`;
resuming with an edited list replaces the iteration's plans (never appends to them), a malformed
answer pauses again with what is wrong, and duplicate plan ids are renamed, so no two plans write
the same candidate. Through the graph with an in-memory checkpointer, and through the driver's
`on_plans` callable (what the CLI's terminal review calls). Tuner policy, CPU interpreter."""

import io
import logging
import sqlite3
from contextlib import closing

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command
from rich.console import Console

from accelopt.graph.builder import build_graph
from accelopt.graph.driver import drive, pending_plan_review
from accelopt.nodes.context import RunContext
from accelopt.nodes.planner import PlanReviewError
from tests.conftest import TASKS

pytestmark = pytest.mark.slow
TASK = str((TASKS / "rmsnorm").resolve())


def context(**more) -> RunContext:
    return RunContext(**{"beams": 1, "plans": 2, "samples": 1, "fixes": 0, "iterations": 1, "device": "cpu",
                         "use_memory": False, "review_plans": True, **more})


def iteration_one(candidates: dict) -> set[str]:
    return {cid for cid, c in candidates.items() if c.get("iteration") == 1}


def test_review_pauses_then_an_edited_list_replaces_the_plans(tmp_path, caplog):
    graph = build_graph().compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "review"}}
    ctx = context(samples=2)
    graph.invoke({"task_dir": TASK, "run_dir": str(tmp_path / "run")}, config, context=ctx)
    snapshot = graph.get_state(config)
    assert snapshot.next == ("dispatch",)
    (pending,) = snapshot.interrupts
    proposed = pending.value["plans"]
    assert pending.value["review"] == "plans" and pending.value["beam"] == ["baseline"]
    assert [p["id"] for p in proposed] == ["i1.m0.p0", "i1.m0.p1"]
    assert set(snapshot.values["candidates"]) == {"baseline"}  # nothing written before the review

    # A malformed answer: the run pauses again, saying what was wrong; nothing ran.
    graph.invoke(Command(resume={"plans": "all"}), config, context=ctx)
    (again,) = graph.get_state(config).interrupts
    assert "expected a list of plans" in again.value["error"]
    assert set(graph.get_state(config).values["candidates"]) == {"baseline"}

    # Keep only the second plan, edited, and give it twice: the copy is renamed, not lost.
    edited = {**proposed[1], "text": proposed[1]["text"] + "\n(reviewed)"}
    twin = {**proposed[0], "id": proposed[1]["id"]}  # the first plan's moves under the second's id
    with caplog.at_level(logging.WARNING, logger="accelopt"):
        graph.invoke(Command(resume=[edited, twin]), config, context=ctx)
    assert "id 'i1.m0.p1' repeats an earlier plan's; renamed i1.m0.p2" in caplog.text
    state = graph.get_state(config).values
    assert not graph.get_state(config).next and state["stop_reason"] == "reached T=1 iterations"
    assert [p["id"] for p in state["plans"]] == ["i1.m0.p1", "i1.m0.p2"]
    assert state["plans"][0]["text"].endswith("(reviewed)") and state["plans"][1]["moves"] == proposed[0]["moves"]
    # exactly one candidate for each kept plan (the tuner writes one kernel per plan, whatever K);
    # the dropped plan wrote none
    assert iteration_one(state["candidates"]) == {"i1.m0.p1.k0", "i1.m0.p2.k0"}
    assert {state["candidates"][c]["plan_id"] for c in iteration_one(state["candidates"])} == {"i1.m0.p1", "i1.m0.p2"}


def test_an_empty_review_skips_the_iterations_kernels(tmp_path):
    graph = build_graph().compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "skip"}}
    ctx = context()
    graph.invoke({"task_dir": TASK, "run_dir": str(tmp_path / "run")}, config, context=ctx)
    out = graph.invoke(Command(resume=[]), config, context=ctx)
    assert iteration_one(out["candidates"]) == set() and out["best_id"] == "baseline"
    assert out["stop_reason"] == "reached T=1 iterations"


def test_the_driver_asks_on_plans_and_checks_its_answer_before_resuming(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    console = Console(file=io.StringIO())
    seen: list[list[dict]] = []

    def broken(plans):
        seen.append(plans)
        return [{"text": ""}]

    with pytest.raises(PlanReviewError, match="plan 1: `text` must be a non-empty string"):
        drive(context(), run_dir, {"task_dir": TASK, "run_dir": str(run_dir.resolve())}, console, on_plans=broken)
    # The run stays paused at the review, resumable: the broken answer never reached the graph.
    with closing(sqlite3.connect(run_dir / "checkpoints.sqlite", check_same_thread=False)) as conn:
        graph = build_graph().compile(checkpointer=SqliteSaver(conn))
        review = pending_plan_review(graph, {"configurable": {"thread_id": run_dir.name}})
    assert review is not None and "error" not in review

    def keep_last(plans):
        seen.append(plans)
        return plans[-1:]

    state = drive(context(), run_dir, None, console, on_plans=keep_last)
    assert [len(p) for p in seen] == [2, 2] and seen[0] == seen[1]
    assert iteration_one(state["candidates"]) == {f"{seen[1][-1]['id']}.k0"}
    assert state["stop_reason"] == "reached T=1 iterations"
