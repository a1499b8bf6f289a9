"""A healthy endpoint that serves 2 requests at a time and answers the rest 429 with a Retry-After
(vLLM's and SGLang's queues, a hosted API's concurrency limit): its calls are waited out, not
failed. A 429 spends no attempt; the endpoint's gate learns how many it serves and queues the rest
(tools/endpoint_gate.py), so a run's calls all complete in about calls x reply time / 2.
Against the scripted OpenAI-compatible server on 127.0.0.1, with replies that are canned texts."""

import threading
import time

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver

from accelopt.graph.builder import build_graph
from accelopt.nodes.context import RunContext
from accelopt.tools.endpoint_gate import Gate, gate
from accelopt.tools.llm import ModelSpec, RateLimited, build_chat_model, call_model
from tests.openai_server import Answer, ScriptedOpenAIServer

REPLY_S = 0.25
RETRY_AFTER_S = 0.5


def plans_or_prose(messages):
    """Six plans for the planner; prose without a kernel for every other role (no evaluation)."""
    system = str(messages[0].content)
    if "accelopt planner" in system:
        return "\n".join(f"### Plan {k}: variant {k}\nTry launch variant {k} of the row loop." for k in range(1, 7))
    return "I would fuse the exponent into the reduction. " * 8


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


def busy_server(**kw) -> ScriptedOpenAIServer:
    return ScriptedOpenAIServer(plans_or_prose, then=Answer(delay_s=REPLY_S), models=["coder"], max_concurrent=2,
                                busy_retry_after=str(RETRY_AFTER_S), **kw)


@pytest.mark.parametrize("calls", [12, 32])
def test_calls_beyond_what_the_endpoint_serves_queue_and_all_complete(calls, tmp_path):
    """4 attempts allowed 8 of 12 calls through when every refused call retried at the same moment."""
    with busy_server() as server:
        spec = ModelSpec.parse("vllm:coder", base_url=server.url, max_attempts=4)
        model = build_chat_model(spec)
        errors: list[BaseException] = []

        def one(i: int) -> None:
            messages = [SystemMessage("You are the accelopt executor."), HumanMessage(f"Write kernel {i}.")]
            try:
                call_model(model, spec, messages, role="executor", candidate_id=f"k{i}", iteration=1,
                           retry_wait_s=0.05, run_dir=str(tmp_path))
            except BaseException as exc:  # noqa: BLE001 - collected for the assertion
                errors.append(exc)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(calls)]
        began = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        took = time.monotonic() - began
    assert not errors, errors[:2]
    served = [r for r in server.requests if "Write kernel" in str(r["body"]["messages"])]
    assert len(served) - server.busy == calls and server.peak <= 2
    ideal = calls * REPLY_S / 2
    assert took < ideal * 1.3 + RETRY_AFTER_S * 2 + 0.5, (took, ideal)
    # one refusal per call at the first burst, then only the gate's probes: no stampede each round
    assert server.busy <= calls + calls // 4, server.busy
    assert gate(f"{server.url}").limit in (2, 3)


def test_a_429_is_waited_at_least_its_retry_after_and_the_waits_spread(tmp_path):
    with ScriptedOpenAIServer(plans_or_prose, answers=[Answer(429, "slow down", headers={"Retry-After": "0.3"})]) as s:
        spec = ModelSpec.parse("vllm:coder", base_url=s.url, max_attempts=1)  # a 429 spends no attempt
        call_model(build_chat_model(spec), spec, [HumanMessage("hi")], role="planner", retry_wait_s=0.2,
                   run_dir=str(tmp_path))
    first, second = s.requests
    assert 0.3 <= second["t"] - first["t"] < 0.3 + 0.2 + 0.3
    from accelopt.tools import llm

    class Told:
        response = type("R", (), {"headers": {"retry-after": "20"}})()

    waits = {llm._limit_wait_s(Told(), 1.0, 120.0) for _ in range(20)}
    assert min(waits) >= 20 and max(waits) - min(waits) > 0.1  # the floor, and jitter above it


def test_an_endpoint_that_only_answers_429_fails_the_call_but_is_not_taken_for_dead(tmp_path):
    from accelopt.tools.budget import ledger

    with ScriptedOpenAIServer(plans_or_prose, then=Answer(429, "busy", headers={"Retry-After": "0.05"})) as s:
        spec = ModelSpec.parse("vllm:coder", base_url=s.url, retry_total_wait_s=0.3)
        for i in range(3):
            with pytest.raises(RateLimited):
                call_model(build_chat_model(spec), spec, [HumanMessage(f"hi {i}")], role="executor",
                           retry_wait_s=0.01, run_dir=str(tmp_path))
    assert ledger(str(tmp_path)).fatal is None and len(s.requests) > 4  # waited, past max_attempts


def test_the_gate_learns_the_limit_and_probes_above_it():
    g = Gate()
    with g.slot(), g.slot(), g.slot():
        pass
    assert g.limit is None and g.peak == 3  # no 429 yet: not limited
    with g.slot(), g.slot():
        g.refused()  # refused beside 2 running calls
    assert g.limit == 2
    for _ in range(4 * 2):
        g.answered()
    assert g.limit == 3


RUNS = [("beam", None, 6, 1), ("overlap", None, 3, 2), ("overlap", 0.5, 3, 2), ("pipeline", None, 3, 2),
        ("pipeline", 0.5, 3, 2)]


@pytest.mark.slow
@pytest.mark.parametrize("schedule, quorum, plans, iterations", RUNS)
def test_a_run_against_an_endpoint_that_serves_two_at_a_time_completes(schedule, quorum, plans, iterations,
                                                                       tmp_path, softmax_task):
    """B1 N6 K2 F0 T1 (12 executor calls) ended the run 'endpoint failed' when 4 of them ran out of
    attempts; the schedules that overlap at T2 with N3, with and without a quorum."""
    with busy_server() as server:
        ctx = RunContext(beams=1, plans=plans, samples=2, fixes=0, iterations=iterations, device="cpu",
                         use_memory=False, schedule=schedule, quorum=quorum, model="vllm:coder",
                         base_url=server.url, llm_retry_wait_s=0.05)
        out = build_graph().compile(checkpointer=InMemorySaver()).invoke(
            {"task_dir": str(softmax_task), "run_dir": str(tmp_path / "run")}, {"configurable": {"thread_id": "r"}},
            context=ctx)
    assert out["stop_reason"] == f"reached T={iterations} iterations" and not out.get("fatal"), out["stop_reason"]
    attempts = [c for c in out["candidates"].values() if c.get("iteration")]
    assert len(attempts) == plans * 2 * iterations and {c["status"] for c in attempts} == {"no_code"}
    executor = [u for u in out["usage"] if u["role"] == "executor"]
    assert len(executor) == plans * 2 * iterations and server.peak <= 2
