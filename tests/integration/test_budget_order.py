"""A budget buys kernels before plans, and every attempt is accounted for when a run ends.

Under the pipeline schedule with --quorum, the planners that ran beside the kernels held large
reservations: executor calls were refused (9 of 13 attempts not_sent) and the run reported 'reached
T=6' though iterations 2-6 did almost nothing. Now a planner ahead is admitted only where the
kernels of the plans already made still fit after it, the last iteration the budget pays for waits
for its replies and fixes in place, and the run stops by its budget. Against the scripted
OpenAI-compatible server on 127.0.0.1 (canned replies: a distinct broken kernel per call, which
the judge sees at once), on the CPU."""

import itertools
import json
import threading

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from accelopt.graph.builder import build_graph
from accelopt.nodes.context import RunContext
from accelopt.tools.budget import Limits, RunLedger, planning_ahead
from accelopt.tools.llm import totals
from tests.openai_server import Answer, ScriptedOpenAIServer
from tests.scripted import BROKEN, fenced, reply_for

BUDGET = 30_000


def distinct_kernels():
    variant = itertools.count()

    def script(messages):
        system = str(messages[0].content)
        if "accelopt planner" in system or "accelopt summarizer" in system:
            return reply_for(messages)
        return fenced(BROKEN + f"\n# variant {next(variant)}\n")  # not a duplicate: judged, a compile error

    return script


def budget_run(tmp_path, task, schedule: str, quorum: float | None) -> tuple[dict, int]:
    """B1 N2 K1 F1 T6 under --max-tokens 30000: the output state and the tokens the server counted."""
    with ScriptedOpenAIServer(distinct_kernels(), then=Answer(delay_s=0.1), count_tokens=True,
                              models=["coder"]) as server:
        ctx = RunContext(beams=1, plans=2, samples=1, fixes=1, iterations=6, device="cpu", use_memory=False,
                         schedule=schedule, quorum=quorum, model="vllm:coder", base_url=server.url,
                         llm_retry_wait_s=0.05, max_tokens=BUDGET)
        out = build_graph().compile(checkpointer=InMemorySaver()).invoke(
            {"task_dir": str(task), "run_dir": str(tmp_path / "run")}, {"configurable": {"thread_id": "b"}},
            context=ctx)
    return out, server.usage_sent["prompt_tokens"] + server.usage_sent["completion_tokens"]


@pytest.fixture(scope="module")
def beam_evaluated(tmp_path_factory):
    from tests.conftest import TASKS

    out, _ = budget_run(tmp_path_factory.mktemp("beam"), TASKS / "softmax", "beam", None)
    assert "budget" in out["stop_reason"], out["stop_reason"]
    return out["summary"]["candidates_evaluated"]


@pytest.mark.slow
@pytest.mark.parametrize("schedule, quorum", [("beam", None), ("overlap", None), ("overlap", 0.5),
                                              ("pipeline", None), ("pipeline", 0.5)])
def test_a_budget_buys_kernels_before_plans_and_the_run_stops_by_it(schedule, quorum, tmp_path, softmax_task,
                                                                     beam_evaluated):
    out, spent = budget_run(tmp_path, softmax_task, schedule, quorum)
    assert "budget" in out["stop_reason"], out["stop_reason"]
    assert spent <= BUDGET and totals(out["usage"])["calls"] > 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["candidates_evaluated"] >= beam_evaluated, (summary["statuses"], beam_evaluated)
    # nothing is left in flight, and every plan an iteration ran has a kernel attempt or a record of why not
    assert "in_flight" not in summary["statuses"]
    assert all(json.loads(p.read_text())["status"] != "in_flight"
               for p in (tmp_path / "run" / "candidates").glob("*/result.json"))
    ran = [json.loads(line)["id"] for line in (tmp_path / "run" / "plans.jsonl").read_text().splitlines()]
    attempted = {c.get("plan_id") for c in out["candidates"].values()}
    assert set(ran) <= attempted, set(ran) - attempted
    # each iteration's record holds its own tokens, which add up to the run's
    records = [h for h in summary["iterations"] if not h.get("event")]
    assert sum(h["tokens"] for h in records) == summary["usage"]["input_tokens"] + summary["usage"]["output_tokens"]
    assert sum(h["evaluated"] for h in records) == summary["candidates_evaluated"]


def test_a_planner_ahead_is_admitted_only_where_the_promised_kernels_fit_after_it():
    run = RunLedger()
    run.sync([{"role": "executor", "input_tokens": 1000, "output_tokens": 500, "cost_usd": 0.0}],
             Limits(max_tokens=30_000))
    run.promise(2)  # two kernels, each held at 1,000 in and 8,192 out: 18,384 with the 1,500 spent
    with planning_ahead():
        held, why = run.admit("planner", 2000, (0.0, 0.0))
    assert held is None and "the 2 kernel call(s) of the plans already made come first" in why
    run.redeem()
    run.redeem()
    with planning_ahead():
        held, why = run.admit("planner", 2000, (0.0, 0.0))  # the kernels asked: the plan may go
    assert why is None and held is not None
    run.promise(2)
    assert run.admit("planner", 2000, (0.0, 0.0))[1] is None  # a planner of this iteration is not ahead


def test_an_attempt_in_flight_when_the_run_stops_gets_its_real_outcome(tmp_path):
    """in_flight stayed in summary.json and result.json after the run had ended; beam said llm_error."""
    from accelopt.nodes.selector import settle_in_flight
    from accelopt.tools import inflight
    from accelopt.tools.llm_spec import BudgetExceeded, LLMCallError

    run_dir = str(tmp_path)
    met = inflight.Quorum(0)  # met already: every call below detaches at once and goes on
    release = threading.Event()  # the calls end only once their branches stopped waiting

    def landed():
        release.wait(10)
        return "text", {"role": "executor", "input_tokens": 10, "output_tokens": 5, "cost_usd": 0.0, "call": "c1"}

    def failed():
        release.wait(10)
        raise LLMCallError("executor model vllm:coder at http://x/v1 failed: 503 Service Unavailable")

    def refused():
        release.wait(10)
        raise BudgetExceeded("executor model vllm:coder not called: token budget of 1,000 would be exceeded")

    for cid, call in (("a", landed), ("b", failed), ("c", refused)):
        with inflight.detach_at(met), pytest.raises(inflight.Detached):
            inflight.start(run_dir, f"key-{cid}", call, label=cid)
    release.set()
    waiting = {cid: {"id": cid, "iteration": 1, "status": "in_flight", "error": "a later iteration collects it"}
               for cid in "abcd"}  # d: a call this process never made (a run resumed after a kill)
    usage, ended = settle_in_flight({"run_dir": run_dir, "candidates": waiting}, "token budget of 1,000 spent")
    assert [u["call"] for u in usage] == ["c1"]
    assert {cid: c["status"] for cid, c in ended.items()} == {"a": "cancelled", "b": "llm_error", "c": "not_sent",
                                                              "d": "cancelled"}
    assert "landed after the run stopped" in ended["a"]["error"] and "503" in ended["b"]["error"]
    assert json.loads((tmp_path / "candidates" / "b" / "result.json").read_text())["status"] == "llm_error"


def test_evaluated_counts_only_what_reached_the_judge():
    from accelopt.tools.run_record import candidate_counts

    statuses = ["verified", "wrong_output", "compile_error", "no_code", "truncated", "llm_error", "in_flight",
                "cancelled", "not_sent", "duplicate"]
    candidates = {"baseline": {"status": "verified"}, **{f"c{i}": {"status": s} for i, s in enumerate(statuses)}}
    assert candidate_counts(candidates)[0] == 3


def test_an_iterations_tokens_are_its_own():
    from accelopt.nodes.selector import this_iteration

    history = [{"iteration": 1, "tokens": 1200, "cost_usd": 0.5}, {"iteration": 2, "event": "planner_deferred"},
               {"iteration": 2, "tokens": 800, "cost_usd": 0.25}]
    spent = {"input_tokens": 2500, "output_tokens": 500, "cost_usd": 1.0}
    assert this_iteration(history, spent) == (1000, 0.25)


def test_a_url_given_as_the_model_says_to_give_it_as_the_base_url():
    from accelopt.tools.llm_spec import ConfigError, split_model

    with pytest.raises(ConfigError) as caught:
        split_model("http://127.0.0.1:8000/v1")
    line = str(caught.value)
    assert "--base-url http://127.0.0.1:8000/v1" in line and "vllm:http" not in line
