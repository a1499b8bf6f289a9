"""Cost: a configurable price table, a ledger per role, iteration and candidate, and budgets that
stop a run at an iteration boundary with its best kernel and summary written."""

import json

import pytest

from accelopt.graph.builder import build_graph
from accelopt.graph.config import load_context
from accelopt.nodes.context import RunContext
from tests.scripted import GOOD, ScriptedChatModel, reply_for
from accelopt.tools.llm import ConfigError


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


@pytest.mark.slow
@pytest.mark.parametrize("budget, reason", [({"max_cost_usd": 0.5}, "cost budget of $0.50 spent"),
                                            ({"max_tokens": 500}, "token budget of 500 spent")])
def test_a_budget_stops_at_an_iteration_boundary_with_results_written(tmp_path, softmax_task, budget, reason):
    def script(messages):
        return f"```python\n{GOOD}```" if "accelopt executor" in str(messages[0].content) else reply_for(messages)

    ctx = RunContext(beams=1, plans=1, samples=1, fixes=0, iterations=3, device="cpu", use_memory=False,
                     model="openai:scripted", prices={"openai:scripted": [1000.0, 1000.0]},
                     chat_models={"default": ScriptedChatModel(script=script)}, **budget)
    run_dir = tmp_path / "run"
    out = build_graph().compile().invoke({"task_dir": str(softmax_task), "run_dir": str(run_dir)}, context=ctx)
    assert out["stop_reason"] == reason and out["iteration"] == 1  # T=3, but the budget was spent in iteration 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == reason and (run_dir / "best_kernel.py").is_file()
    usage = summary["usage"]
    assert usage["cost_usd"] == pytest.approx(sum(u["cost_usd"] for u in out["usage"])) and usage["cost_usd"] > 0
    assert set(usage["by_role"]) == {"planner", "executor"} and set(usage["by_iteration"]) == {"1"}
    assert usage["by_candidate"]["i1.m0.p0.k0"]["calls"] == 1
    # priced at $1000 per 1M tokens in and out
    assert usage["cost_usd"] == pytest.approx((usage["input_tokens"] + usage["output_tokens"]) * 1e-3)
