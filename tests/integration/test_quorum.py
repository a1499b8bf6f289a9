"""--quorum: an iteration moves on once a share of its replies have landed; a reply still in flight
is collected by the next iteration (the same call, sent once) and competes in its selection. The
whole graph on the interpreter with scripted replies (canned texts, not model output)."""

import threading
import time

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from accelopt.graph.builder import build_graph
from accelopt.nodes.context import RunContext
from accelopt.tools import timeline
from tests.scripted import SLOW, ScriptedChatModel, fenced, reply_for

pytestmark = pytest.mark.slow


def holding_one_reply(held, until_planner_call: int, held_reply: str | None = None):
    """Scripted replies (reply_for) in which the first prompt `held(system, prompt)` picks gets its
    reply only once the planner has been asked `until_planner_call` times (its iteration has moved
    on without it), `held_reply` if given; and the planner calls made before each prompt it picks."""
    released = threading.Event()
    planned: list[int] = []
    picked: list[int] = []

    def script(messages):
        system, prompt = str(messages[0].content), str(messages[-1].content)
        if "accelopt planner" in system:
            planned.append(1)
            if len(planned) == until_planner_call:
                released.set()
        if held(system, prompt):
            picked.append(len(planned))
            if len(picked) == 1:
                assert released.wait(20), "the iteration waited for its slowest reply"
                return held_reply or reply_for(messages)
        return reply_for(messages)

    return script, picked


def test_a_reply_in_flight_at_the_quorum_joins_the_next_iteration_and_is_sent_once(tmp_path, softmax_task):
    # iteration 1's redundant-programs kernel lands once iteration 2 is planned (not iteration 2's program)
    script, slow_calls = holding_one_reply(
        lambda system, prompt: "accelopt executor" in system and "redundant programs" in prompt.split("## Plan", 1)[1],
        2, fenced(SLOW.replace("(n_rows, 16)", "(n_rows, 4)")))
    ctx = RunContext(beams=1, plans=4, samples=1, fixes=0, iterations=2, device="cpu", use_memory=False,
                     schedule="overlap", quorum=0.75, learn_from_interpreter=True, model="openai:scripted",
                     chat_models={"default": ScriptedChatModel(script=script)})
    run_dir = tmp_path / "run"
    out = build_graph().compile(checkpointer=InMemorySaver()).invoke(
        {"task_dir": str(softmax_task), "run_dir": str(run_dir)}, {"configurable": {"thread_id": "q"}}, context=ctx)

    late = out["candidates"]["i1.m0.p3.k0"]  # the redundant-programs kernel, written in iteration 1
    assert late["status"] == "verified" and late["iteration"] == 2  # joined iteration 2's population
    assert slow_calls == [1, 2]  # iteration 1's call once (collected, not sent again), and iteration 2's own
    assert [u["candidate_id"] for u in out["usage"] if u["role"] == "executor"].count("i1.m0.p3.k0") == 1  # counted once
    assert not [c for c in out["candidates"].values() if c["status"] == "in_flight"]  # the last iteration collects
    first = out["history"][0]
    assert first["iteration"] == 1 and first["evaluated"] == 3  # moved on without it (3 of 4 replies: 0.75)
    assert {cid: c["iteration"] for cid, c in out["candidates"].items() if cid.startswith("i1.")} == {
        "i1.m0.p0.k0": 1, "i1.m0.p1.k0": 1, "i1.m0.p2.k0": 1, "i1.m0.p3.k0": 2}
    spans = timeline.read(run_dir)
    selected1 = next(s for s in spans if s["kind"] == "node" and s["node"] == "selector" and s["iteration"] == 1)
    (call,) = [s for s in spans if s["kind"] == "llm" and s["role"] == "executor" and s["candidate"] == "i1.m0.p3.k0"]
    assert selected1["end"] < call["end"]  # iteration 1 was selected before its reply landed
    (evaluated,) = [s for s in spans if s["kind"] == "eval" and s["candidate"] == "i1.m0.p3.k0"]
    assert evaluated["start"] > call["end"]


def test_a_fix_in_flight_at_the_quorum_is_collected_by_the_next_iteration(tmp_path, softmax_task):
    """Iteration 1's broken kernel is fixed beside iteration 2's kernels (overlap); that fix's reply
    lands only once iteration 3 is being planned: iteration 2 moves on without it, and iteration 3
    collects the same call (asked once) at the fixer, with the attempt it repairs."""
    script, fix_calls = holding_one_reply(lambda system, prompt: "accelopt fixer" in system and "SyntaxError" in prompt, 3)

    # quorum 1: every kernel reply is waited for (none is held back by a race with the others), and the
    # fix, which counts toward no quorum, is not
    ctx = RunContext(beams=1, plans=4, samples=1, fixes=1, iterations=3, device="cpu", use_memory=False,
                     schedule="overlap", quorum=1.0, learn_from_interpreter=True, model="openai:scripted",
                     chat_models={"default": ScriptedChatModel(script=script)})
    out = build_graph().compile(checkpointer=InMemorySaver()).invoke(
        {"task_dir": str(softmax_task), "run_dir": str(tmp_path / "run")}, {"configurable": {"thread_id": "f"}},
        context=ctx)
    fix = out["candidates"]["i1.m0.p1.k0.f1"]
    assert fix["fix_of"] == "i1.m0.p1.k0" and fix["iteration"] == 3 and fix["status"] != "in_flight"
    assert fix_calls == [2]  # asked in iteration 2, collected in 3, not asked again (i2's broken kernel: a duplicate)
    assert [u["candidate_id"] for u in out["usage"] if u["role"] == "fixer"].count("i1.m0.p1.k0.f1") == 1
    assert not [c for c in out["candidates"].values() if c["status"] == "in_flight"]
    assert not out.get("pending_fixes") and out["stop_reason"] == "reached T=3 iterations"


def test_a_run_that_stops_with_a_call_in_flight_waits_for_it_and_counts_what_it_spent(tmp_path, softmax_task):
    """Iteration 1 moves on without its slowest reply, and the run stops there (its wall-clock
    budget): the selector waits for that call, so the run's ledger holds every call it made."""
    asked: list[str] = []

    def script(messages):
        system, prompt = str(messages[0].content), str(messages[-1].content)
        asked.append(system[:40])
        if "accelopt executor" in system and "redundant programs" in prompt.split("## Plan", 1)[1]:
            time.sleep(1.5)  # lands after its iteration's quorum
        return reply_for(messages)

    ctx = RunContext(beams=1, plans=4, samples=1, fixes=0, iterations=3, device="cpu", use_memory=False,
                     schedule="overlap", quorum=0.75, max_wall_s=0.01, model="openai:scripted",
                     chat_models={"default": ScriptedChatModel(script=script)})
    out = build_graph().compile(checkpointer=InMemorySaver()).invoke(
        {"task_dir": str(softmax_task), "run_dir": str(tmp_path / "run")}, {"configurable": {"thread_id": "s"}},
        context=ctx)
    assert out["stop_reason"].startswith("wall-clock budget") and out["iteration"] == 1
    late = out["candidates"]["i1.m0.p3.k0"]  # never evaluated: the run stopped; its reply landed, so cancelled
    assert late["status"] == "cancelled" and "landed after the run stopped" in late["error"]
    assert out["history"][-1]["evaluated"] == 3  # what reached the judge
    executed = [u["candidate_id"] for u in out["usage"] if u["role"] == "executor"]
    assert sorted(executed) == ["i1.m0.p0.k0", "i1.m0.p1.k0", "i1.m0.p2.k0", "i1.m0.p3.k0"]
    assert out["summary"]["usage"]["calls"] == len(asked)  # every call the model answered, once


def test_quorum_needs_a_schedule_that_overlaps():
    from accelopt.nodes.context import settings_refusal

    assert "schedule 'beam'" in settings_refusal(RunContext(schedule="beam", quorum=0.5))
    assert "at most 1" in settings_refusal(RunContext(schedule="overlap", quorum=1.5))
    assert settings_refusal(RunContext(schedule="pipeline", quorum=0.75)) is None


def test_an_attempt_in_flight_is_shown_waiting_not_failed():
    from accelopt.graph.progress import candidate_line

    line = candidate_line({"id": "i1.m0.p3.k0", "status": "in_flight",
                           "error": "the iteration met its quorum before this reply landed: a later iteration collects it"})
    assert line.plain.startswith("  … i1.m0.p3.k0") and "✗" not in line.plain
