"""Cost: a configurable price table, a ledger per role, iteration and candidate, and budgets that
hold: every call is admitted against what is left, the samples sent are those the budget pays for,
and an iteration starts only when its first step fits, so a run ends within 10% of its budget."""

import json
import logging

import pytest

from accelopt.graph.builder import build_graph
from accelopt.graph.config import budget_warnings, load_context
from accelopt.nodes.context import RunContext
from accelopt.tools.budget import Limits, RunLedger, affordable
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
    first, refusal = run.admit("executor", 50, (0.0, 0.0))  # the role's mean call: 400 tokens, not the estimate
    assert refusal is None and first.tokens == 400
    second, _ = run.admit("executor", 50, (0.0, 0.0))
    third, refusal = run.admit("executor", 50, (0.0, 0.0))  # 400 spent + 800 in flight + 400 > 1500
    assert third is None and "token budget of 1,500 would be exceeded" in refusal
    run.settle(first, {"role": "executor", "input_tokens": 300, "output_tokens": 10, "cost_usd": 0.0})
    # 710 spent + 400 in flight + 355: the real reply was shorter, so there is room again
    assert run.admit("executor", 50, (0.0, 0.0))[1] is None
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


@pytest.mark.slow
@pytest.mark.parametrize("budget, reason", [({"max_tokens": 50_000}, "token budget of 50,000 spent"),
                                            ({"max_cost_usd": 50.0}, "cost budget of $50 spent")])
def test_a_budget_holds_within_ten_percent(tmp_path, softmax_task, monkeypatch, caplog, budget, reason):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with ScriptedOpenAIServer(no_code, count_tokens=True) as server:
        ctx = RunContext(beams=1, plans=2, samples=2, fixes=0, iterations=50, device="cpu", use_memory=False,
                         model="openai:gpt-test", base_url=server.url, prices={"gpt-test": [1000.0, 1000.0]},
                         **budget)
        run_dir = tmp_path / "run"
        with caplog.at_level(logging.WARNING, logger="accelopt"):
            out = build_graph().compile().invoke({"task_dir": str(softmax_task), "run_dir": str(run_dir)},
                                                 context=ctx)
    assert out["stop_reason"].startswith(reason), out["stop_reason"]
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
    assert statuses == {"no_code"}  # no call was refused mid-iteration: nothing failed for the budget
