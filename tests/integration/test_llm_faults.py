"""Endpoint faults through the real ChatOpenAI client against the scripted server: what is fatal
(one line naming role, model, endpoint and fix), what is retried (honouring Retry-After), what
one call's failure is, the usage a reply carries or an estimate of it, and the preflight."""

import json
import time
from types import SimpleNamespace

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from accelopt.graph.builder import build_graph
from accelopt.nodes.context import RunContext
from accelopt.tools.llm import (
    ConfigError,
    FatalLLMError,
    LLMCallError,
    ModelSpec,
    build_chat_model,
    call_model,
    preflight,
    retry_after_s,
    totals,
)
from accelopt.tools.run_record import run_failure
from tests.openai_server import OK, Answer, ScriptedOpenAIServer, dead_url
from tests.scripted import reply_for

MESSAGES = [SystemMessage("You are the accelopt planner."), HumanMessage("Plan something.")]


def reply(messages):
    return "### Plan 1: something\nDo it."


def spec_for(url: str, **kw) -> ModelSpec:
    return ModelSpec.parse("openai:gpt-test", base_url=url, **kw)


def call(spec: ModelSpec, run_dir, **kw):
    return call_model(build_chat_model(spec), spec, MESSAGES, role="planner", retry_wait_s=0.01,
                      run_dir=str(run_dir), **kw)


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


# (answers, then, fatal line needles or None for success, chat requests made)
SCENARIOS = {
    "401 wrong key": ([], Answer(401, "Incorrect API key provided", "invalid_api_key"),
                      ["planner model openai:gpt-test at http://127.0.0.1:", "/v1: 401 Unauthorized",
                       "check the API key in $OPENAI_API_KEY"], 1),
    "403 no access": ([], Answer(403, "You do not have access to this model"), ["403 Forbidden", "permissions"], 1),
    "404 unknown model": ([], Answer(404, "The model `gpt-test` does not exist", "model_not_found"),
                          ["404 Not Found (The model `gpt-test` does not exist)", "check the model name 'gpt-test'"],
                          1),
    "400 context overflow": ([], Answer(400, "This model's maximum context length is 8192 tokens. However, you "
                                             "requested 9000 tokens"),
                             ["400 Bad Request", "do not fit the model's context"], 1),
    "429 quota used up": ([], Answer(429, "You exceeded your current quota", "insufficient_quota"),
                          ["429 Too Many Requests", "quota is used up"], 1),
    "5xx then success": ([Answer(503, "overloaded"), Answer(500, "boom")], OK, None, 3),
    "malformed 200 then success": ([Answer(raw=b"<html>gateway</html>"), Answer(raw=b'{"choices": []}'),
                                    Answer(raw=b'{"id": "x"}')], OK, None, 4),
    "429 then success": ([Answer(429, "slow down", headers={"Retry-After": "0"})] * 2, OK, None, 3),
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_fault_scenarios(name, tmp_path):
    answers, then, needles, requests = SCENARIOS[name]
    with ScriptedOpenAIServer(reply, answers=answers, then=then) as server:
        spec = spec_for(server.url)
        if needles is None:
            text, usage = call(spec, tmp_path)
            assert text == reply([]) and usage["estimated"] is False
            assert usage["input_tokens"] == server.usage_sent["prompt_tokens"]
            assert usage["output_tokens"] == server.usage_sent["completion_tokens"]
        else:
            with pytest.raises(FatalLLMError) as caught:
                call(spec, tmp_path)
            line = str(caught.value)
            assert "\n" not in line and all(n in line for n in needles), line
            assert server.url in line
            # the run is dead: the next call fails at once, with no request
            with pytest.raises(FatalLLMError, match="at http"):
                call(spec, tmp_path)
    assert len(server.requests) == requests


def test_transient_errors_that_outlast_the_retries_fail_this_call_only(tmp_path):
    with ScriptedOpenAIServer(reply, answers=[Answer(502, "bad gateway")] * 3) as server:
        with pytest.raises(LLMCallError) as caught:
            call(spec_for(server.url, max_attempts=3), tmp_path)
        assert not isinstance(caught.value, FatalLLMError)
        assert "after 3 attempts" in str(caught.value) and "502 Bad Gateway" in str(caught.value)
        assert call(spec_for(server.url, max_attempts=3), tmp_path)[0] == reply([])  # the run goes on
    assert len(server.requests) == 4


def test_a_schema_the_server_refuses_is_not_fatal(tmp_path):
    """A 400 about the request's response_format fails this call: the policy asks again in text."""
    with ScriptedOpenAIServer(reply, answers=[Answer(400, "response_format json_schema is not supported")]) as server:
        with pytest.raises(LLMCallError) as caught:
            call(spec_for(server.url), tmp_path)
        assert not isinstance(caught.value, FatalLLMError)
        assert call(spec_for(server.url), tmp_path)[0] == reply([])
    assert len(server.requests) == 2


class WithSchema(BaseChatModel):
    """A model asked with a response schema, as the LLM policy's structured calls are."""

    inner: BaseChatModel
    response_format: dict = {"type": "json_schema"}

    @property
    def _llm_type(self) -> str:
        return "with-schema"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.inner.invoke(messages))])


def test_a_400_to_a_request_with_a_schema_is_not_fatal(tmp_path):
    """It may be the schema the server refuses: the policy asks again in text, and that 400 is fatal."""
    refused = Answer(400, "Invalid request: 'messages' failed validation")
    with ScriptedOpenAIServer(reply, then=refused) as server:
        spec = spec_for(server.url)
        with pytest.raises(LLMCallError) as caught:
            call_model(WithSchema(inner=build_chat_model(spec)), spec, MESSAGES, role="planner", run_dir=str(tmp_path))
        assert not isinstance(caught.value, FatalLLMError)
    assert len(server.requests) == 1


OVERFLOW = Answer(400, "This model's maximum context length is 2048 tokens. However, you requested 2717 tokens "
                       "(1717 in the messages, 1000 in the completion).")
HINT = "lower max_tokens to at most 331"


def test_a_context_overflow_with_a_schema_says_its_fix_and_is_asked_again_in_text(tmp_path):
    """The schema's benefit of the doubt hid the hint, and the text retry never ran."""
    from accelopt.tools.llm import AskInText

    with ScriptedOpenAIServer(reply, then=OVERFLOW) as server:
        spec = spec_for(server.url, max_tokens=1000)
        with pytest.raises(AskInText) as caught:
            call_model(WithSchema(inner=build_chat_model(spec)), spec, MESSAGES, role="planner", run_dir=str(tmp_path))
        assert HINT in str(caught.value), caught.value
        with pytest.raises(FatalLLMError, match=HINT):  # in text, the same overflow is the run's end
            call(spec, tmp_path)
    assert len(server.requests) == 2


@pytest.mark.parametrize("answers, requests", [([OVERFLOW], 2), ([], 2)])
def test_the_planner_asks_again_in_text_after_an_overflow_with_a_schema(answers, requests, tmp_path):
    """Where the text request fits (answers=[OVERFLOW]: only the schema request overflowed) the plans
    come back; where it overflows too, the run ends with the line that says how to fix it."""
    from accelopt.policies.interface import PlanRequest, PolicyError
    from accelopt.policies.llm import LLMPolicy
    from accelopt.tools.task import load_task
    from tests.conftest import TASKS

    with ScriptedOpenAIServer(reply, answers=answers, then=OK if answers else OVERFLOW) as server:
        spec = spec_for(server.url, max_tokens=1000)
        policy = LLMPolicy(build_chat_model(spec), spec, "planner", 0.01, str(tmp_path), structured=True)
        request = PlanRequest(task=load_task(TASKS / "softmax"), iteration=1, member_id="baseline", source=None,
                              measurements="", tried=[], lessons=[], n=1)
        if answers:
            assert policy.plan(request).plans
        else:
            with pytest.raises(PolicyError, match=HINT):
                policy.plan(request)
    assert [bool(r["body"].get("response_format")) for r in server.requests] == [True, False]


def test_a_prompt_alone_past_the_context_with_a_schema_is_fatal_at_once(tmp_path):
    alone = Answer(400, "This model's maximum context length is 2048 tokens. However, your request has 2217 input "
                        "tokens. Please reduce the length of the input messages.")
    with ScriptedOpenAIServer(reply, then=alone) as server:
        spec = spec_for(server.url)
        with pytest.raises(FatalLLMError, match="the prompt alone is 2,217 tokens"):
            call_model(WithSchema(inner=build_chat_model(spec)), spec, MESSAGES, role="planner", run_dir=str(tmp_path))
    assert len(server.requests) == 1


def test_retry_after_is_honoured_up_to_its_cap(tmp_path):
    with ScriptedOpenAIServer(reply, answers=[Answer(429, "slow down", headers={"Retry-After": "1"})]) as server:
        call(spec_for(server.url), tmp_path)
    first, second = server.requests
    assert second["t"] - first["t"] >= 1.0
    # a Retry-After beyond the cap waits the cap
    with ScriptedOpenAIServer(reply, answers=[Answer(429, "slow down", headers={"Retry-After": "3600"})]) as server:
        started = time.monotonic()
        call(spec_for(server.url, retry_max_wait_s=0.3), tmp_path / "capped")
        assert 0.3 <= time.monotonic() - started < 5
    assert len(server.requests) == 2


def test_retry_after_forms():
    def exc(**headers):
        return SimpleNamespace(response=SimpleNamespace(headers=headers))

    assert retry_after_s(exc(**{"retry-after": "7"})) == 7
    assert retry_after_s(exc(**{"retry-after-ms": "1500"})) == 1.5
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 <= retry_after_s(exc(**{"retry-after": date})) <= 31
    assert retry_after_s(exc(**{"retry-after": "soon"})) is None
    assert retry_after_s(exc()) is None and retry_after_s(ValueError()) is None


def test_a_timed_out_call_is_retried_while_the_server_answers_and_is_fatal_once_it_does_not(tmp_path, monkeypatch):
    from accelopt.tools import llm

    monkeypatch.setattr(llm, "LIVENESS_TIMEOUT_S", 0.5)
    slow = Answer(delay_s=1.5)  # busy: this generation outlasts the timeout, the model list answers
    with ScriptedOpenAIServer(reply, answers=[slow], then=OK) as server:
        text, _ = call(spec_for(server.url, timeout_s=0.5), tmp_path / "busy")
        assert text == reply([]) and len(server.requests) == 2 and server.gets == ["/v1/models"]
    with ScriptedOpenAIServer(reply, then=slow) as server:
        server.gets_delay_s = 1.5  # hung: nothing answers
        began = time.monotonic()
        with pytest.raises(FatalLLMError, match=r"did not answer within 0.5 s either — the server hangs"):
            call(spec_for(server.url, timeout_s=0.5, max_attempts=4), tmp_path / "hung")
        assert len(server.requests) == 1 and time.monotonic() - began < 3.5  # no second attempt waited out


def test_a_dead_server_is_fatal_after_the_retries(tmp_path):
    url = dead_url()
    with pytest.raises(FatalLLMError) as caught:
        call(spec_for(url, max_attempts=3), tmp_path)
    line = str(caught.value)
    assert line.startswith(f"planner model openai:gpt-test at {url}: cannot connect") and "server running" in line


def test_a_reply_without_usage_is_estimated_and_marked(tmp_path):
    with ScriptedOpenAIServer(reply, then=Answer(usage=False)) as server:
        text, usage = call(spec_for(server.url), tmp_path)
    assert usage["estimated"] is True and usage["output_tokens"] > 0 and usage["input_tokens"] > 0
    assert usage["input_tokens"] < 100  # the two short messages, not a made-up count


def test_max_tokens_goes_out_as_the_server_reads_it(tmp_path):
    """A local or self-hosted server (Ollama reads only max_tokens) gets max_tokens."""
    with ScriptedOpenAIServer(reply) as server:
        call(spec_for(server.url, max_tokens=123), tmp_path)
    body = server.requests[0]["body"]
    assert body["max_tokens"] == 123 and "max_completion_tokens" not in body


UNSUPPORTED = {
    "max_tokens": (Answer(400, "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
                               "'max_completion_tokens' instead.", "unsupported_parameter"),
                   'reads max_completion_tokens, not max_tokens: set max_tokens_field = "max_completion_tokens"'),
    "max_completion_tokens": (Answer(400, "Unsupported parameter: 'max_completion_tokens' is not supported"),
                              'set max_tokens_field = "max_tokens"'),
    "temperature": (Answer(400, "Unsupported value: 'temperature' does not support 0.2 with this model. Only the "
                                "default (1) value is supported.", "unsupported_value"),
                    "does not take temperature: remove the temperature setting"),
    "reasoning_effort": (Answer(400, "Unrecognized request argument supplied: reasoning_effort"),
                         "does not take reasoning_effort: remove the reasoning_effort setting"),
}


@pytest.mark.parametrize("param", UNSUPPORTED)
def test_an_unsupported_parameter_names_the_setting_to_change(param, tmp_path):
    """Its message names max_tokens, but it is no context overflow: lowering max_tokens would not help.
    Fatal also for a request with a schema: asked again in text, it would carry the same parameter."""
    answer, fix = UNSUPPORTED[param]
    with ScriptedOpenAIServer(reply, then=answer) as server:
        spec = spec_for(server.url, max_tokens=100, temperature=0.2, reasoning_effort="high")
        with pytest.raises(FatalLLMError) as caught:
            call_model(WithSchema(inner=build_chat_model(spec)), spec, MESSAGES, role="planner", run_dir=str(tmp_path))
    line = str(caught.value)
    assert "\n" not in line and "400 Bad Request" in line and fix in line, line
    assert "context" not in line.split(" — ")[-1]
    assert len(server.requests) == 1


def test_max_tokens_field_chooses_the_field_sent(tmp_path):
    with ScriptedOpenAIServer(reply, serve_models=False) as server:
        call(spec_for(server.url, max_tokens=123, max_tokens_field="max_completion_tokens"), tmp_path)
        preflight(spec_for(server.url, max_tokens_field="max_completion_tokens"))  # no model list: a 1-token call
    first, probe = server.requests[0]["body"], server.requests[1]["body"]
    assert first["max_completion_tokens"] == 123 and "max_tokens" not in first
    assert probe["max_completion_tokens"] == 1 and "max_tokens" not in probe


# ---------------------------------------------------------------- preflight

def test_preflight_passes_when_the_model_is_listed_and_spends_no_call():
    with ScriptedOpenAIServer(reply, models=["gpt-test", "other"]) as server:
        preflight(spec_for(server.url), "planner")
    assert server.gets == ["/v1/models"] and server.requests == []


def test_preflight_names_a_model_the_server_does_not_list():
    with ScriptedOpenAIServer(reply, models=["llama3:latest", "qwen"]) as server:
        with pytest.raises(FatalLLMError, match=r"does not list 'gpt-test' \(it serves: llama3:latest, qwen\)"):
            preflight(spec_for(server.url), "planner")
        preflight(ModelSpec.parse("ollama:llama3", base_url=server.url))  # Ollama's untagged name


def test_preflight_refuses_max_tokens_the_served_context_cannot_hold():
    """vLLM lists max_model_len: max_tokens at or above it leaves no room for any prompt."""
    fields = {"gpt-test": {"max_model_len": 8192, "owned_by": "vllm"}}
    with ScriptedOpenAIServer(reply, models=["gpt-test"], model_fields=fields) as server:
        with pytest.raises(FatalLLMError) as caught:
            preflight(spec_for(server.url, max_tokens=8192), "executor")
        preflight(spec_for(server.url, max_tokens=4096), "executor")
        preflight(spec_for(server.url), "executor")  # no max_tokens: the server's own limit
    line = str(caught.value)
    assert line.startswith("executor model openai:gpt-test at http") and "\n" not in line
    assert "max_tokens = 8192" in line and "served context of 8192 tokens" in line
    assert "lower max_tokens well below 8192, or serve the model with a longer --max-model-len" in line
    assert server.requests == []
    with ScriptedOpenAIServer(reply, models=["gpt-test"]) as server:  # no max_model_len listed: nothing to check
        preflight(spec_for(server.url, max_tokens=10 ** 6))


def test_preflight_refuses_a_wrong_key():
    with ScriptedOpenAIServer(reply, models=["gpt-test"], api_key="sk-right") as server:
        with pytest.raises(FatalLLMError, match=r"executor model openai:gpt-test at .*: 401 Unauthorized .* "
                                                r"check the API key in \$OPENAI_API_KEY"):
            preflight(spec_for(server.url), "executor")


def test_preflight_without_a_model_list_makes_one_short_call():
    with ScriptedOpenAIServer(reply, serve_models=False) as server:
        preflight(spec_for(server.url))
        assert len(server.requests) == 1 and server.requests[0]["body"]["max_tokens"] == 1
        # a base URL without /v1: neither the list nor the call is found there
        with pytest.raises(FatalLLMError, match=r"404 Not Found .* base URL usually ends in /v1"):
            preflight(spec_for(server.url.removesuffix("/v1")))


def test_preflight_on_a_dead_server():
    with pytest.raises(FatalLLMError, match="cannot connect .* is the server running"):
        preflight(spec_for(dead_url()), "planner")


# ---------------------------------------------------------------- the run stops

@pytest.mark.slow
def test_a_fatal_error_stops_the_run_with_its_line_and_summary(tmp_path, softmax_task, monkeypatch):
    """The planner is answered; then the key is revoked: the executor's 401 ends the run in its
    first iteration of three, the candidate says why, and the summary is written."""
    with ScriptedOpenAIServer(reply_for, answers=[OK], then=Answer(401, "Incorrect API key provided")) as server:
        ctx = RunContext(beams=1, plans=1, samples=2, fixes=1, iterations=3, device="cpu", use_memory=False,
                         model="openai:gpt-test", base_url=server.url, llm_retry_wait_s=0.01)
        run_dir = tmp_path / "run"
        out = build_graph().compile().invoke({"task_dir": str(softmax_task), "run_dir": str(run_dir)}, context=ctx)
    line = out["fatal"]
    assert line.startswith(f"executor model openai:gpt-test at {server.url}: 401 Unauthorized")
    assert out["stop_reason"] == f"model endpoint failed: {line}" and out["iteration"] == 1
    assert run_failure(out) == line
    failed = [c for c in out["candidates"].values() if c.get("iteration") == 1]
    assert failed and all(c["status"] == "llm_error" for c in failed) and line in failed[0]["error"]
    assert len(server.requests) <= 3  # planner, then at most one 401 per sample: no retries, no fixer
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == out["stop_reason"] and summary["failure"] == line
    from accelopt.evals.reporting.report import load_row

    row = load_row(run_dir)  # the report (and `eval`'s exit) count it as failed, not optimized
    assert row.outcome == "failed" and row.note == line and not row.correct


def test_preflight_checks_each_endpoint_once_and_can_be_skipped():
    from accelopt.nodes.preflight import preflight_context

    with ScriptedOpenAIServer(reply, models=["gpt-test", "coder"]) as server:
        ctx = RunContext(model="openai:gpt-test", base_url=server.url, role_models={"executor": {"model": "openai:coder"}})
        preflight_context(ctx)
        assert server.gets == ["/v1/models"] * 2  # planner, fixer, summarizer share one check; the executor its own
        preflight_context(ctx)  # the CLI's check, then setup's: an endpoint that answered is not asked again
        assert len(server.gets) == 2
        bad = RunContext(model="openai:gpt-test", base_url=server.url, role_models={"fixer": {"model": "openai:gone"}})
        with pytest.raises(FatalLLMError, match=r"^fixer model openai:gone at .*does not list 'gone'"):
            preflight_context(bad)
        with pytest.raises(FatalLLMError):  # a refusal is not remembered as an answer
            preflight_context(bad)
        preflight_context(RunContext(model="openai:gone", base_url=server.url, preflight=False))
        preflight_context(RunContext(model="tuner"))
        assert len(server.gets) == 4 and server.requests == []


@pytest.mark.parametrize("case", ["401 wrong key", "dead server"])
def test_the_cli_stops_before_any_work_on_an_endpoint_that_cannot_answer(case, tmp_path):
    """`accelopt optimize` against a refusing or dead endpoint: one line, non-zero, no run dir."""
    import subprocess
    import sys

    from tests.conftest import ROOT, TASKS

    def optimize(url: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "accelopt", "optimize", str(TASKS / "rmsnorm"), "--model",
                               "openai:gpt-test", "--base-url", url, "--device", "cpu", "--no-memory", "-T", "1",
                               "--run-dir", str(tmp_path / "run")], cwd=ROOT, capture_output=True, text=True,
                              timeout=300, env={**__import__("os").environ, "OPENAI_API_KEY": "sk-test"})

    if case == "dead server":
        done = optimize(dead_url())
    else:
        with ScriptedOpenAIServer(reply, then=Answer(401, "Incorrect API key provided", "invalid_api_key"),
                                  serve_models=False) as server:
            done = optimize(server.url)
    out = done.stdout + done.stderr
    assert done.returncode == 2 and "Traceback" not in out, out[-2000:]
    assert "model openai:gpt-test at http://127.0.0.1:" in out
    assert ("401 Unauthorized" in out) if case == "401 wrong key" else ("refused" in out.lower() or "connect" in out.lower())
    assert not (tmp_path / "run").exists()  # stopped before the run directory was claimed


# ---------------------------------------------------------------- settings, context, planner replies

@pytest.mark.parametrize("setting, value, needle", [
    ("timeout_s", -1, "timeout_s = -1 in the model settings: the seconds one attempt may take: above 0"),
    ("max_tokens", -10, "max_tokens = -10 in the model settings: the longest reply in tokens"),
    ("max_attempts", 0, "max_attempts = 0 in the model settings: attempts per call"),
])
def test_a_model_setting_out_of_its_range_is_refused_before_any_call(setting, value, needle, tmp_path):
    """timeout_s = -1 failed each attempt as a 'malformed reply' after 19 s of retries; max_tokens
    = -10 and max_attempts = 0 were sent as they were."""
    with ScriptedOpenAIServer(reply) as server:
        with pytest.raises(ConfigError) as caught:
            spec_for(server.url, **{setting: value})
        assert str(caught.value).startswith(needle) and "\n" not in str(caught.value)
        spec = ModelSpec(model="gpt-test", base_url=server.url, **{setting: value})  # made without its checks
        with pytest.raises(ConfigError, match=rf"^{setting} = {value}: "):
            call(spec, tmp_path)
    assert server.requests == []


@pytest.mark.parametrize("message, needle", [
    ("This model's maximum context length is 2048 tokens. However, you requested 2217 tokens (2217 in the "
     "messages, 0 in the completion). Please reduce the length of the messages or completion.",
     "the prompt alone is 2,217 tokens against the model's context of 2,048 tokens"),
    ("This model's maximum context length is 2048 tokens. However, your request has 2217 input tokens. Please "
     "reduce the length of the input messages.", "the prompt alone is 2,217 tokens against the model's context"),
])
def test_a_prompt_longer_than_the_context_is_said_as_such(message, needle, tmp_path):
    """It advised to 'lower max_tokens', which was not set: no max_tokens could have helped."""
    with ScriptedOpenAIServer(reply, then=Answer(400, message)) as server:
        with pytest.raises(FatalLLMError) as caught:
            call(spec_for(server.url), tmp_path)
    line = str(caught.value)
    assert needle in line and "--max-model-len" in line and "lower max_tokens" not in line, line


def test_a_prompt_and_its_reply_limit_past_the_context_say_how_far_to_lower_it(tmp_path):
    answer = Answer(400, "This model's maximum context length is 2048 tokens. However, you requested 2717 tokens "
                         "(1717 in the messages, 1000 in the completion).")
    with ScriptedOpenAIServer(reply, then=answer) as server:
        with pytest.raises(FatalLLMError) as caught:
            call(spec_for(server.url, max_tokens=1000), tmp_path)
    line = str(caught.value)
    assert "the prompt (1,717 tokens) and a reply of up to 1,000 tokens do not fit the model's context of 2,048 " \
           "tokens: lower max_tokens to at most 331" in line, line


def test_preflight_holds_the_prompts_templates_against_the_served_context(caplog):
    """vLLM lists max_model_len: a context the roles' templates alone (or with max_tokens) do not
    fit is refused before the run, little room left is warned of; no call is spent."""
    import logging

    from accelopt.policies.llm import least_prompt_tokens

    every = least_prompt_tokens()
    assert every["executor"] > every["planner"] > every["summarizer"] > 100  # the executor's notes and pitfalls
    prompts = {role: every[role] for role in ("planner", "executor")}  # the roles this endpoint serves
    executor = prompts["executor"]

    def served(length: int) -> ScriptedOpenAIServer:
        return ScriptedOpenAIServer(reply, models=["gpt-test"], model_fields={"gpt-test": {"max_model_len": length}})

    with served(executor - 1) as server:
        with pytest.raises(FatalLLMError) as caught:
            preflight(spec_for(server.url), "planner, executor", prompt_tokens=prompts)
    line = str(caught.value)
    assert f"the executor prompt is about {executor:,} tokens before the task's code" in line, line
    assert f"against the served context of {executor - 1:,} tokens" in line and "--max-model-len" in line
    with served(executor + 500) as server:
        with pytest.raises(FatalLLMError, match=r"with max_tokens = 1000 it does not fit .* lower max_tokens to at "
                                                r"most 500,"):
            preflight(spec_for(server.url, max_tokens=1000), "executor", prompt_tokens=prompts)
        with caplog.at_level(logging.WARNING, logger="accelopt"):
            preflight(spec_for(server.url), "executor", prompt_tokens=prompts)  # fits, barely: said
        assert "500 are left for the task's code and the reply" in caplog.text
        assert server.requests == []
    caplog.clear()
    with served(32768) as server, caplog.at_level(logging.WARNING, logger="accelopt"):
        preflight(spec_for(server.url, max_tokens=8000), "executor", prompt_tokens=prompts)
    assert not caplog.records


CUT_OFF_WHILE_REASONING = Answer(text="<think>The row loop reads x twice; consider fusing the max and",
                                 finish_reason="length")


def no_code(messages):
    """Plans for the planner; prose and no kernel for the executor: no evaluation, a fast iteration."""
    if "accelopt planner" in str(messages[0].content):
        return reply_for(messages)
    return "I would restructure the reduction and fuse the exponent."


@pytest.mark.slow
def test_a_planner_reply_cut_off_is_asked_again_not_the_end_of_the_run(tmp_path, softmax_task):
    """A single truncated planner reply ended a 7-iteration run (one beam member: the iteration's
    only planner reply had no plan, which the selector reads as a dead endpoint). It is asked
    again, told to be brief, and the run goes on."""
    with ScriptedOpenAIServer(no_code, answers=[CUT_OFF_WHILE_REASONING]) as server:
        ctx = RunContext(beams=1, plans=2, samples=1, fixes=0, iterations=2, device="cpu", use_memory=False,
                         model="openai:gpt-test", base_url=server.url, llm_retry_wait_s=0.01)
        out = build_graph().compile().invoke({"task_dir": str(softmax_task), "run_dir": str(tmp_path / "run")},
                                             context=ctx)
    assert out["stop_reason"] == "reached T=2 iterations" and out["fatal"] is None, out["stop_reason"]
    first, again = server.requests[0]["body"], server.requests[1]["body"]
    assert "accelopt planner" in first["messages"][0]["content"] and "accelopt planner" in again["messages"][0]["content"]
    assert "cut off at its token limit before a complete plan" in again["messages"][-1]["content"]
    planned = {c.get("plan_id") for c in out["candidates"].values() if c.get("iteration") == 1}
    assert planned == {"i1.m0.p0", "i1.m0.p1"}  # the second reply's plans were written
    planner = [u for u in out["usage"] if u["role"] == "planner" and u["iteration"] == 1]
    assert len(planner) == 1 and planner[0]["requests"] == 2  # both requests' tokens, one record
    assert totals(out["usage"])["calls"] == len(server.requests)


def test_a_planner_asked_again_gives_up_after_its_attempts(tmp_path):
    """Every reply cut off: PLAN_ATTEMPTS requests, then no plan and why (the run's selector decides)."""
    from accelopt.policies.interface import PlanRequest
    from accelopt.policies.llm import PLAN_ATTEMPTS, LLMPolicy
    from accelopt.tools.task import load_task
    from tests.conftest import TASKS

    with ScriptedOpenAIServer(reply, then=CUT_OFF_WHILE_REASONING) as server:
        spec = spec_for(server.url)
        policy = LLMPolicy(build_chat_model(spec), spec, "planner", 0.01, str(tmp_path), structured=False)
        request = PlanRequest(task=load_task(TASKS / "softmax"), iteration=1, member_id="baseline", source=None,
                              measurements="", tried=[], lessons=[], n=2)
        answer = policy.plan(request)
        assert answer.plans == [] and "while the model was still reasoning" in answer.note
        assert f"({PLAN_ATTEMPTS} replies, none with a plan)" in answer.note
        assert len(server.requests) == PLAN_ATTEMPTS and answer.usage["requests"] == PLAN_ATTEMPTS
        policy.plan(request)  # the same again replays every attempt from the run cache
    assert len(server.requests) == PLAN_ATTEMPTS


def test_the_runs_preflight_holds_its_roles_prompts_against_the_served_context():
    """nodes/preflight.preflight_context (the CLI's, before any work) passes each endpoint's roles'
    least prompts to the preflight: a context that cannot hold them is refused there."""
    from accelopt.nodes.preflight import preflight_context
    from accelopt.policies.llm import least_prompt_tokens

    executor = least_prompt_tokens()["executor"]
    fields = {"gpt-test": {"max_model_len": executor - 1}}
    with ScriptedOpenAIServer(reply, models=["gpt-test"], model_fields=fields) as server:
        ctx = RunContext(model="openai:gpt-test", base_url=server.url)
        with pytest.raises(FatalLLMError, match="prompt is about .* against the served context"):
            preflight_context(ctx)
        assert server.requests == []


def test_graph_invoke_refuses_a_dead_endpoint_before_any_work_as_the_cli_does(tmp_path):
    """The README's programmatic run with no server listening retried each call, then returned
    normally with the baseline as its result and the failure only in stop_reason; the CLI refused
    up front (exit 2). Now graph.invoke refuses it too: one line, nothing measured or written."""
    from accelopt.graph.builder import graph
    from accelopt.tools.settings import ConfigError
    from tests.conftest import TASKS

    url = dead_url()
    with pytest.raises(ConfigError) as refused:
        graph.invoke({"task_dir": str(TASKS / "softmax"), "run_dir": str(tmp_path / "run")},
                     context={"model": "vllm:coder", "base_url": url, "device": "cpu", "use_memory": False})
    line = str(refused.value)
    assert line.startswith(f"planner, executor, fixer, summarizer model vllm:coder at {url}: cannot connect"), line
    assert "\n" not in line and not (tmp_path / "run").exists()
