"""Cost: a configurable price table, a ledger per role, iteration and candidate, and budgets that
hold: every call is admitted against what is left, the samples sent are those the budget pays for,
and an iteration starts only when its first step fits, so a run ends within 10% of its budget."""

import json
import logging

import pytest

from accelopt.graph.builder import build_graph
from accelopt.graph.config import budget_warnings, load_context
from accelopt.nodes.context import RunContext
from accelopt.tools.budget import Limits, RunLedger, Spend, affordable
from accelopt.tools.llm import ConfigError, totals
from tests.openai_server import ScriptedOpenAIServer
from tests.scripted import ScriptedChatModel, reply_for


def test_price_table_from_the_config_file(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # a hosted model needs a key to be configured at all
    config = tmp_path / "accelopt.toml"
    config.write_text('[models.default]\nmodel = "vllm:openai/gpt-oss-120b"\n'
                      '[models.executor]\nmodel = "openai:gpt-4.1-2025-04-14"\n'
                      '[prices]\n"vllm:openai/gpt-oss-120b" = [0.1, 0.5]\n"gpt-4.1" = [3, 9]\n')
    ctx, configured = load_context(config)
    assert configured
    planner, executor = ctx.model_spec("planner"), ctx.model_spec("executor")
    assert (planner.input_price, planner.output_price) == (0.1, 0.5)  # self-hosted, priced by label
    assert (executor.input_price, executor.output_price) == (3.0, 9.0)  # longest name prefix
    config.write_text('[prices]\n"gpt-4.1" = [2]\n')
    with pytest.raises(ConfigError, match=r"must be \[input, output\]"):
        load_context(config)


def test_a_cost_budget_warns_about_models_without_a_price():
    ctx = RunContext(model="vllm:big", max_cost_usd=1.0)
    [warning] = budget_warnings(ctx)
    assert "vllm:big (planner, executor, fixer, summarizer) has no price" in warning
    assert '[prices] "vllm:big"' in warning
    assert budget_warnings(RunContext(model="vllm:big", max_cost_usd=1.0, prices={"vllm:big": [1, 2]})) == []
    assert budget_warnings(RunContext(model="vllm:big", max_tokens=1000)) == []  # tokens need no price
    given = RunContext(model="openai:gpt-4o-mini", max_cost_usd=1.0, chat_models={"executor": ScriptedChatModel(
        script=reply_for)})
    assert [w.split(",")[0] for w in budget_warnings(given)] == [
        "--max-cost $1: ScriptedChatModel (executor) has no price"]


def test_the_ledger_admits_what_fits_counting_calls_in_flight():
    run = RunLedger()
    run.sync([{"role": "executor", "input_tokens": 300, "output_tokens": 100, "cost_usd": 0.0}],
             Limits(max_tokens=1500))
    # under a budget a call reserves its worst case: the prompt (the role's mean, 300, not the
    # estimate) and the longest reply the budget left pays for, which the request then carries
    first, refusal = run.admit("executor", 50, (0.0, 0.0))
    assert refusal is None and (first.tokens, first.output_cap) == (1100, 800)
    assert (first.input_tokens, first.reply_tokens) == (300, 800)  # the reply is read no further than 800
    second, refusal = run.admit("executor", 50, (0.0, 0.0))  # 400 spent + 1100 in flight: no room for a reply
    assert second is None and "token budget of 1,500 would be exceeded" in refusal
    run.settle(first, {"role": "executor", "input_tokens": 300, "output_tokens": 10, "cost_usd": 0.0})
    # 710 spent, nothing in flight: a reply of up to 490 tokens fits again
    again, refusal = run.admit("executor", 50, (0.0, 0.0))
    assert refusal is None and again.output_cap == 490
    # the model's own max_tokens, where it fits, is the reservation and no cap goes out
    roomy = RunLedger()
    roomy.sync([], Limits(max_tokens=100_000))
    assert roomy.admit("executor", 50, (0.0, 0.0), max_output=2000)[0] == Spend(2050, 0.0, None, 50, 2000)
    # without a budget nothing is held back: the reply is read whole
    free = RunLedger()
    free.sync([], Limits())
    assert free.admit("executor", 50, (0.0, 0.0), max_output=2000)[0].reply_tokens is None
    # a cost budget caps the reply by what its price leaves: $0.01 at $1/$10 per 1M tokens
    priced = RunLedger()
    priced.sync([], Limits(max_cost_usd=0.01))
    assert priced.admit("executor", 1000, (1.0, 10.0))[0].output_cap == 900
    spent = totals([{"role": "planner", "input_tokens": 90, "output_tokens": 10, "cost_usd": 0.5},
                    {"role": "executor", "input_tokens": 150, "output_tokens": 50, "cost_usd": 1.0}])
    assert affordable(spent, Limits(max_tokens=1000), "executor", 8) == 3
    assert affordable(spent, Limits(max_cost_usd=3.0), "executor", 8) == 1
    assert affordable(spent, Limits(), "executor", 8) == 8


def no_code(messages):
    """Plans for the planner; prose and no kernel for the executor: no evaluation, a fast iteration."""
    if "accelopt planner" in str(messages[0].content):
        return reply_for(messages)
    return "I would restructure the reduction and fuse the exponent. " * 12


# the pipeline schedule's planners ask beside the executors: their calls are admitted together
SCHEDULES = pytest.mark.parametrize("schedule", ["beam", "pipeline"])


@pytest.mark.slow
@SCHEDULES
@pytest.mark.parametrize("budget, reason", [({"max_tokens": 50_000}, "token budget of 50,000 spent"),
                                            ({"max_cost_usd": 50.0}, "cost budget of $50 spent")])
def test_a_budget_holds_within_ten_percent(tmp_path, softmax_task, monkeypatch, caplog, budget, reason, schedule):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with ScriptedOpenAIServer(no_code, count_tokens=True) as server:
        ctx = RunContext(beams=1, plans=2, samples=2, fixes=0, iterations=50, device="cpu", use_memory=False,
                         model="openai:gpt-test", base_url=server.url, prices={"gpt-test": [1000.0, 1000.0]},
                         schedule=schedule, **budget)
        run_dir = tmp_path / "run"
        with caplog.at_level(logging.WARNING, logger="accelopt"):
            out = build_graph().compile().invoke({"task_dir": str(softmax_task), "run_dir": str(run_dir)},
                                                 context=ctx)
    # under the pipeline schedule the planners asked ahead may be the calls the budget refuses first
    assert reason.removesuffix(" spent") in out["stop_reason"], out["stop_reason"]
    assert 1 < out["iteration"] < 50 and not caplog.records  # priced, with usage: nothing to warn about
    summary = json.loads((run_dir / "summary.json").read_text())
    usage = summary["usage"]
    # the ledger is what the server counted, priced at $1000 per 1M tokens in and out
    assert (usage["input_tokens"], usage["output_tokens"]) == (server.usage_sent["prompt_tokens"],
                                                               server.usage_sent["completion_tokens"])
    assert usage["cost_usd"] == pytest.approx((usage["input_tokens"] + usage["output_tokens"]) * 1e-3)
    assert usage["estimated_calls"] == 0 and usage["unpriced_calls"] == 0
    spent = usage["input_tokens"] + usage["output_tokens"] if "max_tokens" in budget else usage["cost_usd"]
    limit = budget.get("max_tokens") or budget["max_cost_usd"]
    assert 0.9 * limit <= spent <= 1.1 * limit, (spent, limit)
    statuses = {c["status"] for c in out["candidates"].values() if c.get("iteration")}
    # a call the budget could no longer pay for in full was not sent (and says so); none failed
    assert "no_code" in statuses and statuses <= {"no_code", "not_sent"}, statuses


def long_reasoner(messages):
    """A reasoning model's shape: short plans, then executor replies of ~12k tokens of thinking
    (a server cuts them off at the request's reply limit)."""
    if "accelopt planner" in str(messages[0].content):
        return reply_for(messages)
    return "<think>" + "Consider the reduction order and the exponent once more. " * 850 + "</think>No kernel."


@pytest.mark.slow
@pytest.mark.parametrize("schedule, quorum", [("beam", None), ("pipeline", None), ("pipeline", 0.5)])
@pytest.mark.parametrize("budget, spent_of", [({"max_tokens": 10_000}, "tokens"), ({"max_cost_usd": 0.003}, "cost")])
def test_a_budget_holds_with_replies_longer_than_any_seen_before(tmp_path, softmax_task, monkeypatch, budget,
                                                                  spent_of, schedule, quorum):
    """Parallel executor calls after short planner replies used to be admitted on the planner's
    reply size: --max-tokens 10000 spent 15,663 (a scripted vLLM/gpt-oss run). Each call now
    reserves the longest reply it may get, and the request carries that limit. Under --quorum, a
    call an iteration moved on without keeps its reservation, and is in the ledger however the run ends."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with ScriptedOpenAIServer(long_reasoner, count_tokens=True) as server:
        ctx = RunContext(beams=1, plans=2, samples=2, fixes=1, iterations=5, device="cpu", use_memory=False,
                         model="openai:gpt-test", base_url=server.url, prices={"gpt-test": [0.1, 0.2]},
                         schedule=schedule, quorum=quorum, **budget)
        out = build_graph().compile().invoke({"task_dir": str(softmax_task), "run_dir": str(tmp_path / "run")},
                                             context=ctx)
        limits = [r["body"].get("max_tokens") for r in server.requests]
    usage = totals(out["usage"])
    spent = usage["input_tokens"] + usage["output_tokens"] if spent_of == "tokens" else usage["cost_usd"]
    limit = budget.get("max_tokens") or budget["max_cost_usd"]
    assert spent <= 1.1 * limit, (spent, limit)
    assert any(limits), limits  # the executor's requests carried the budget's reply limit
    assert usage["calls"] == len(server.requests)  # a record per request the server saw


def test_a_reply_is_read_no_further_than_its_reservation(tmp_path, monkeypatch):
    """A server that ignores the request's max_tokens sends its whole reply: it is streamed and
    read up to what the call reserved for it, then cut off there (marked, and counted as read)."""
    from langchain_core.messages import HumanMessage, SystemMessage

    from accelopt.policies.answering import AnsweringModel
    from accelopt.policies.replies import decode_reply
    from accelopt.tools.budget import ledger
    from accelopt.tools.llm import ModelSpec, build_chat_model, call_model

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    messages = [SystemMessage("You are the accelopt executor."), HumanMessage("Write the kernel.")]
    with ScriptedOpenAIServer(long_reasoner, count_tokens=True, ignore_max_tokens=True) as server:
        spec = ModelSpec.parse("openai:gpt-test", base_url=server.url, input_price=1.0, output_price=2.0)
        for n, model in enumerate([build_chat_model(spec), AnsweringModel(inner=build_chat_model(spec))]):
            run_dir = str(tmp_path / f"run{n}")
            ledger(run_dir).sync([], Limits(max_tokens=1000))
            text, usage = call_model(model, spec, messages, role="executor", run_dir=run_dir)
            assert usage["input_tokens"] + usage["output_tokens"] == 1000 and usage["estimated"], usage
            body = server.requests[-1]["body"]
            assert body["stream"] and body["max_tokens"] == 1000 - usage["input_tokens"]  # asked, then ignored
        reply = decode_reply(text)
        assert reply.truncated and len(reply.text) < 1000 * 4  # the policy's reply says it was cut off
        # a cost budget: $0.002 at $1/$2 per 1M tokens in/out
        ledger(str(tmp_path / "priced")).sync([], Limits(max_cost_usd=0.002))
        _, usage = call_model(build_chat_model(spec), spec, messages, role="executor", run_dir=str(tmp_path / "priced"))
        assert 0.0019 < usage["cost_usd"] <= 0.002, usage


@pytest.mark.slow
@SCHEDULES
@pytest.mark.parametrize("budget, spent_of", [({"max_tokens": 10_000}, "tokens"), ({"max_cost_usd": 0.003}, "cost")])
def test_a_budget_is_a_ceiling_on_a_server_that_ignores_max_tokens(tmp_path, softmax_task, monkeypatch, budget,
                                                                    spent_of, schedule):
    """Such a server took spend to 1.10x of --max-tokens and 1.04x of --max-cost: every reply
    came whole, whatever limit its request carried. Replies are read no further than their
    reservation, so the run never spends past its budget."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with ScriptedOpenAIServer(long_reasoner, count_tokens=True, ignore_max_tokens=True) as server:
        ctx = RunContext(beams=1, plans=2, samples=2, fixes=1, iterations=5, device="cpu", use_memory=False,
                         model="openai:gpt-test", base_url=server.url, prices={"gpt-test": [0.1, 0.2]},
                         schedule=schedule, **budget)
        out = build_graph().compile().invoke({"task_dir": str(softmax_task), "run_dir": str(tmp_path / "run")},
                                             context=ctx)
    usage = totals(out["usage"])
    spent = usage["input_tokens"] + usage["output_tokens"] if spent_of == "tokens" else usage["cost_usd"]
    limit = budget.get("max_tokens") or budget["max_cost_usd"]
    assert spent <= limit, (spent, limit)
    assert usage["estimated_calls"] >= 1  # replies cut off where their reservation ended
    assert "budget" in out["stop_reason"], out["stop_reason"]


def test_a_replayed_reply_the_ledger_holds_already_counts_once():
    """A resumed run runs a failed iteration again: its answered calls replay from the run cache
    with their original records, which the state holds already (7 calls counted, 6 made)."""
    first = {"role": "planner", "input_tokens": 900, "output_tokens": 100, "cost_usd": 1.0, "iteration": 1,
             "call": "c1"}
    other = {**first, "role": "executor", "call": "c2"}
    older = {**first, "call": None}  # records from before call ids: each counts
    usage = [first, other, older, older, dict(first)]
    spent = totals(usage)
    assert (spent["calls"], spent["input_tokens"], spent["by_role"]["planner"]["calls"]) == (4, 3600, 3)
    run = RunLedger()
    run.sync(usage, Limits(max_tokens=10_000))
    assert run.spent.tokens == 4000
