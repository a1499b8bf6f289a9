"""Model settings per role: [models.ROLE] over [models.default] field by field, per-role base URLs
from the config file, the environment and flags, chat models given in code under their own name
and price, the token-limit field each server reads, API keys, and whether a run failed."""

import logging

import pytest

from accelopt.graph.config import load_context
from accelopt.nodes.context import RunContext
from accelopt.nodes.selector import budget_reason
from accelopt.tools.llm import ConfigError, ModelSpec, completion_limit_field, totals
from accelopt.tools.run_record import run_failure
from tests.scripted import ScriptedChatModel, reply_for

DEFAULT = ('[models.default]\nmodel = "vllm:openai/gpt-oss-120b"\nbase_url = "http://gpu-box:8000/v1"\n'
           'reasoning_effort = "high"\nmax_tokens = 8000\ntimeout_s = 900\nmax_attempts = 6\n'
           'api_key_env = "BOX_KEY"\ninput_price = 0.1\noutput_price = 0.5\n')


@pytest.fixture
def config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("ACCELOPT_MODEL", "ACCELOPT_BASE_URL", "ACCELOPT_CONFIG", "ACCELOPT_PLANNER_MODEL",
                 "ACCELOPT_PLANNER_BASE_URL"):
        monkeypatch.delenv(name, raising=False)

    def write(text: str):
        path = tmp_path / "accelopt.toml"
        path.write_text(text)
        return path
    return write


def test_a_role_inherits_the_default_field_by_field(config):
    ctx, _ = load_context(config(DEFAULT + '[models.planner]\nmodel = "vllm:Qwen/Qwen3-235B"\nmax_tokens = 2000\n'))
    planner, executor = ctx.model_spec("planner"), ctx.model_spec("executor")
    assert executor.model == "openai/gpt-oss-120b" and executor.max_tokens == 8000
    assert (planner.model, planner.max_tokens) == ("Qwen/Qwen3-235B", 2000)
    # the same server and settings; not the default model's price
    assert (planner.base_url, planner.reasoning_effort, planner.timeout_s, planner.max_attempts, planner.api_key_env) \
        == ("http://gpu-box:8000/v1", "high", 900, 6, "BOX_KEY")
    assert (planner.input_price, executor.input_price) == (None, 0.1)


def test_a_role_on_another_provider_keeps_neither_the_endpoint_nor_the_key(config, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    ctx, _ = load_context(config(DEFAULT + '[models.fixer]\nmodel = "openai:gpt-4.1"\n'))
    fixer = ctx.model_spec("fixer")
    assert (fixer.provider, fixer.base_url, fixer.api_key_env) == ("openai", None, None)
    assert (fixer.reasoning_effort, fixer.max_attempts) == ("high", 6)


def test_per_role_base_url_from_file_environment_and_flags(config, monkeypatch):
    path = config(DEFAULT + '[models.executor]\nbase_url = "http://gpu-box:8001/v1"\n')
    ctx, _ = load_context(path)
    assert ctx.model_spec("executor").base_url == "http://gpu-box:8001/v1"
    assert ctx.model_spec("executor").model == "openai/gpt-oss-120b"  # the default model, on its own server
    monkeypatch.setenv("ACCELOPT_PLANNER_BASE_URL", "http://gpu-box:8002/v1")
    ctx, _ = load_context(path)
    assert ctx.model_spec("planner").base_url == "http://gpu-box:8002/v1"
    ctx, _ = load_context(path, planner_base_url="http://gpu-box:8003/v1", summarizer_model="vllm:small")
    assert ctx.model_spec("planner").base_url == "http://gpu-box:8003/v1"
    assert ctx.model_spec("summarizer").label() == "vllm:small"
    assert ctx.model_spec("summarizer").base_url == "http://gpu-box:8000/v1"


def test_a_chat_model_given_in_code_keeps_its_own_name_and_price():
    from langchain_openai import ChatOpenAI

    scripted = ScriptedChatModel(script=reply_for)
    hosted = ChatOpenAI(model="gpt-4o-mini", api_key="sk-x", base_url="http://127.0.0.1:9/v1")
    ctx = RunContext(model="tuner", chat_models={"default": scripted, "executor": hosted},
                     prices={"ScriptedChatModel": [1.0, 2.0]}, role_models={"default": {"max_attempts": 2}})
    planner, executor = ctx.model_spec("planner"), ctx.model_spec("executor")
    assert (planner.label(), planner.prices(), planner.max_attempts) == ("ScriptedChatModel", (1.0, 2.0), 2)
    assert (executor.label(), executor.base_url, executor.priced()) == ("gpt-4o-mini", "http://127.0.0.1:9/v1", False)
    assert ctx.model_spec("planner").provider != "tuner"  # setup's "is this the tuner" check


@pytest.mark.parametrize("text, base_url, field", [
    ("openai:gpt-4.1", None, "max_completion_tokens"),
    ("openai:gpt-4.1", "https://api.openai.com/v1", "max_completion_tokens"),
    ("openai:llama", "http://127.0.0.1:8080/v1", "max_tokens"),
    ("ollama:llama3", None, "max_tokens"),
    ("vllm:openai/gpt-oss-120b", "http://gpu-box:8000/v1", "max_tokens"),
])
def test_the_token_limit_field_each_server_reads(text, base_url, field):
    assert completion_limit_field(ModelSpec.parse(text, base_url=base_url)) == field


def test_a_hosted_endpoint_needs_a_key_and_a_local_one_gets_a_placeholder(config, caplog):
    with pytest.raises(ConfigError, match=r"missing API key for openai:gpt-x at https://llm.example.com/v1: set "
                                          r"ACCELOPT_API_KEY or OPENAI_API_KEY \(a self-hosted server: use the vllm:"):
        load_context(None, model="openai:gpt-x", base_url="https://llm.example.com/v1")
    with caplog.at_level(logging.INFO, logger="accelopt"):
        load_context(None, model="openai:gpt-x", base_url="http://127.0.0.1:8123/v1")
    assert "sending a placeholder" in caplog.text and "http://127.0.0.1:8123/v1" in caplog.text
    load_context(None, model="vllm:big", base_url="http://gpu-box:8000/v1")  # self-hosted: any key will do


def test_a_run_failed_when_fatal_or_when_every_planner_failed():
    baseline = {"baseline": {"id": "baseline", "iteration": 0}}
    failed = {"iteration": 1, "event": "planner_failed", "error": "planner model x: 500"}
    assert run_failure({"fatal": "planner model x at y: 401 Unauthorized — check the key"}).startswith("planner")
    line = run_failure({"candidates": baseline, "history": [failed, {**failed, "iteration": 2}]})
    assert line.startswith("every planner call failed (2 calls)") and line.endswith("planner model x: 500")
    searched = {**baseline, "i1.m0.p0.k0": {"id": "i1.m0.p0.k0", "iteration": 1}}
    assert run_failure({"candidates": searched, "history": [{**failed, "iteration": 2}]}) is None
    skipped = {"iteration": 1, "event": "planner_skipped", "error": "not called: token budget"}
    assert run_failure({"candidates": baseline, "history": [skipped]}) is None


def test_an_iteration_starts_only_when_its_first_step_fits():
    usage = [{"role": "planner", "input_tokens": 900, "output_tokens": 100, "cost_usd": 1.0, "iteration": 1},
             {"role": "executor", "input_tokens": 1500, "output_tokens": 500, "cost_usd": 2.0, "iteration": 1}]
    spent = totals(usage)  # 3000 tokens; the next step: 2 planners (2000) and an executor (2000)
    assert budget_reason(RunContext(beams=2, max_tokens=7000), spent) is None
    assert budget_reason(RunContext(beams=2, max_tokens=6999), spent).startswith(
        "token budget of 6,999 spent (3,000 used; the next iteration needs about 4,000 more)")
    assert budget_reason(RunContext(beams=2, max_cost_usd=6.5), spent).startswith("cost budget of $6.5 spent")
    assert budget_reason(RunContext(beams=2, max_cost_usd=7.0), spent) is None


def test_a_budget_too_small_for_one_call_stops_the_run():
    from types import SimpleNamespace

    from accelopt.nodes.selector import selector

    baseline = {"id": "baseline", "status": "verified", "speedup": 1.0, "iteration": 0}
    skipped = {"iteration": 1, "event": "planner_skipped",
               "error": "planner model vllm:x not called: token budget of 10 would be exceeded (0 spent or in flight, "
                        "about 900 more needed)"}
    state = {"iteration": 1, "started_at": 0.0, "beam": ["baseline"], "candidates": {"baseline": baseline},
             "usage": [], "history": [skipped], "run_dir": "tiny-budget"}
    out = selector(state, SimpleNamespace(context=RunContext(max_tokens=10, iterations=5)))
    assert out["stop_reason"] == f"budget spent: {skipped['error']}" and out["fatal"] is None
    assert budget_reason(RunContext(max_tokens=0), totals([])).startswith("token budget of 0 spent")


@pytest.mark.parametrize("text, expected", [
    ("openai:gpt-4.1-mini", ("openai", "gpt-4.1-mini")),
    ("vllm:openai/gpt-oss-120b", ("vllm", "openai/gpt-oss-120b")),
    ("ollama:qwen2.5-coder:32b", ("ollama", "qwen2.5-coder:32b")),  # the tag stays in the name
    ("tuner", ("tuner", "tuner")),
    ("acme:big", ("acme", "big")),  # a provider named, if unknown: validate_spec says which exist
    # no provider: only OpenAI's own families are taken as openai's
    ("gpt-4.1-mini", ("openai", "gpt-4.1-mini")),
    ("gpt-4o", ("openai", "gpt-4o")),
    ("o3-mini", ("openai", "o3-mini")),
    ("o1", ("openai", "o1")),
    ("o4-mini-2025-04-16", ("openai", "o4-mini-2025-04-16")),
    ("chatgpt-4o-latest", ("openai", "chatgpt-4o-latest")),
    ("ft:gpt-4o-mini:acme::abc123", ("openai", "ft:gpt-4o-mini:acme::abc123")),
])
def test_the_provider_of_a_model_name(text, expected):
    from accelopt.tools.llm_spec import split_model

    assert split_model(text) == expected


@pytest.mark.parametrize("text", ["foo", "llama3", "Qwen/Qwen3-8B", "openai/gpt-oss-120b", "gpt-oss-120b",
                                  "o5-preview", "olmo-2"])
def test_a_model_name_without_a_provider_is_refused_with_the_fix(text, config):
    from accelopt.tools.llm_spec import split_model

    with pytest.raises(ConfigError, match=rf"model '{text}' names no provider: write PROVIDER:NAME, e\.g\. "
                                          rf"openai:{text}, vllm:{text} or ollama:{text}"):
        split_model(text)
    with pytest.raises(ConfigError, match=rf"^planner model: model '{text}' names no provider"):
        load_context(None, model=text)
    with pytest.raises(ConfigError, match=rf"^executor model: model '{text}' names no provider"):
        load_context(config(f'[models.executor]\nmodel = "{text}"\n'))


def test_the_light_module_is_what_the_context_reads_and_llm_re_exports_it():
    """nodes/context.py and graph/config.py read model settings without openai or LangChain; the
    names stay importable from tools/llm as before."""
    import subprocess
    import sys

    from accelopt.tools import llm, llm_spec

    for name in ("ROLES", "PROVIDERS", "GIVEN", "ConfigError", "LLMCallError", "FatalLLMError", "BudgetExceeded",
                 "ModelSpec", "split_model", "given_spec", "endpoint", "is_local", "validate_spec", "totals",
                 "completion_limit_field"):
        assert getattr(llm, name) is getattr(llm_spec, name), name
    code = ("import sys, accelopt.graph.config, accelopt.nodes.context; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'openai', 'httpx', 'langchain_core'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_tuner_writes_one_sample_per_plan_and_every_door_records_what_runs(config, monkeypatch):
    """K under the tuner is 1 (its kernel for a plan is the same every time), recorded so in
    run.json whichever door built the context: the CLI's load_context, or a RunContext given to
    graph.invoke, langgraph dev or MCP (which recorded K 2 where the CLI recorded 1)."""
    from accelopt.nodes.context import RunContext

    def recorded(ctx: RunContext) -> int:
        return ctx.to_json()["samples"]

    ctx, configured = load_context(None)
    assert not configured and recorded(ctx) == ctx.kernels_per_plan() == 1
    assert recorded(RunContext()) == recorded(RunContext(model="tuner", samples=2)) == 1  # the other doors
    assert recorded(load_context(None, samples=3)[0]) == 1  # the tuner writes one whatever K says
    assert recorded(load_context(None, model="vllm:coder")[0]) == recorded(RunContext(model="vllm:coder")) == 2
    assert recorded(load_context(None, model="vllm:coder", samples=3)[0]) == 3
    ctx, _ = load_context(None, planner_model="vllm:coder")  # the planner an LLM, the executor the tuner
    assert recorded(ctx) == 1
    assert recorded(load_context(config('[run]\nsamples = 3\n[models.default]\nmodel = "vllm:coder"\n'))[0]) == 3


@pytest.mark.parametrize("table, line, needles", [
    ("models.executor", "max_token = 4000", ["unknown setting 'max_token' in", "[models.executor]",
                                             "did you mean 'max_tokens'?"]),
    ("models.default", 'reasoning_efort = "high"', ["unknown setting 'reasoning_efort'", "[models.default]",
                                                    "did you mean 'reasoning_effort'?"]),
    ("models.planner", "colour = 3", ["unknown setting 'colour' in", "[models.planner]: valid: api_key_env,"]),
    ("models.fixer", 'provider = "vllm"', ["provider in", "[models.fixer]", 'model = "vllm:NAME"']),
    ("run", "beamz = 3", ["unknown setting 'beamz' in", "[run]: did you mean 'beams'?"]),
    ("model.default", 'model = "vllm:x"', ["unknown setting 'model' in", "(top level): did you mean 'models'?"]),
])
def test_an_unknown_setting_is_refused_with_the_closest_key(config, table, line, needles):
    """pydantic drops a field it does not know: a typo ran on silently without its setting."""
    with pytest.raises(ConfigError) as caught:
        load_context(config(DEFAULT + ("" if table == "models.default" else f"[{table}]\n") + f"{line}\n"))
    message = str(caught.value)
    assert "\n" not in message and all(n in message for n in needles), message


@pytest.mark.parametrize("extra, env", [("", "set ACCELOPT_API_KEY or OPENAI_API_KEY"),
                                        ('api_key_env = "MY_KEY"\n', "environment variable MY_KEY")])
def test_an_api_key_in_the_config_file_is_refused_without_echoing_it(config, extra, env):
    with pytest.raises(ConfigError) as caught:
        load_context(config(f'[models.default]\nmodel = "openai:gpt-4.1"\n{extra}api_key = "sk-secret-123"\n'))
    message = str(caught.value)
    assert message.startswith("api_key in") and "[models.default]" in message and env in message, message
    assert "keys are never stored in the config file" in message and "sk-secret-123" not in message


def test_model_settings_given_in_code_are_checked_too():
    ctx = RunContext(model="vllm:coder", role_models={"executor": {"max_token": 10}})
    with pytest.raises(ConfigError, match=r"unknown setting 'max_token' in the model settings: did you mean "
                                          r"'max_tokens'\?"):
        ctx.model_spec("executor")


def test_the_token_limit_field_can_be_chosen(config):
    """Azure and proxies to OpenAI's reasoning models want max_completion_tokens where the URL
    says max_tokens; max_tokens_field says which."""
    ctx, _ = load_context(config(DEFAULT + '[models.executor]\nmax_tokens_field = "max_completion_tokens"\n'))
    assert completion_limit_field(ctx.model_spec("executor")) == "max_completion_tokens"
    assert completion_limit_field(ctx.model_spec("planner")) == "max_tokens"
    with pytest.raises(ConfigError, match=r"^planner model: max_tokens_field = 'max_length': use \"max_tokens\" or "
                                          r"\"max_completion_tokens\""):
        load_context(config(DEFAULT + 'max_tokens_field = "max_length"\n'))


@pytest.mark.parametrize("key, value", [("timeout_s", -1), ("max_tokens", -10), ("max_attempts", 0), ("max_tokens", 0),
                                        ("retry_total_wait_s", -5), ("temperature", -0.5), ("output_price", -1)])
def test_a_model_setting_out_of_its_range_is_refused_in_one_line(config, key, value):
    """timeout_s = -1 was reported after 19 s as a malformed reply; max_tokens = -10 and
    max_attempts = 0 were accepted and sent."""
    from accelopt.tools.llm_spec import validate_spec

    with pytest.raises(ConfigError) as caught:
        load_context(config(DEFAULT + f"[models.executor]\n{key} = {value}\n"))
    message = str(caught.value)
    assert message.startswith(f"{key} = {value:g} in ") and "[models.executor]" in message, message
    assert "\n" not in message
    with pytest.raises(ConfigError, match=rf"^{key} = {value:g}: "):  # a spec made without the settings' check
        validate_spec(ModelSpec(model="x", provider="vllm", **{key: value}))
