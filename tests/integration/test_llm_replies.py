"""The LLM policy reading replies as real models send them: cut off at the token limit, reasoning
only, code in a tool call, plans and lessons under a response schema (and without one when the
server refuses it). Driven through fake chat models and, for the real ChatOpenAI client, a
local OpenAI-compatible server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import openai
import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from openai import LengthFinishReasonError
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice

from accelopt.nodes.common import task_of
from accelopt.nodes.records import attempt
from accelopt.nodes.services import fill_attempt
from accelopt.policies import structured_output
from accelopt.policies.interface import (
    FixRequest,
    Kernel,
    PlanDraft,
    PlanRequest,
    PolicyError,
    SummarizeRequest,
    WriteRequest,
)
from accelopt.policies.llm import LLMPolicy
from accelopt.policies.replies import plan_title
from accelopt.policies.structured_output import LESSON_SCHEMA, PLANS_SCHEMA
from accelopt.tools.llm import ModelSpec, build_chat_model
from tests.scripted import BASELINE, GOOD, INSIGHT, PLANS

PLAN = PlanDraft("### Plan 1: exp2 with more warps\nUse exp2 with a folded log2(e) scale and 8 warps per row.")
USAGE = {"input_tokens": 900, "output_tokens": 4096, "total_tokens": 4996}


class RecordingModel(BaseChatModel):
    """Answers from a list (an exception in it is raised), and records every call's prompt and
    keyword arguments (a response schema arrives as `response_format`)."""

    replies: list[Any]
    calls: list[dict] = []

    @property
    def _llm_type(self) -> str:
        return "recording-test"

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs) -> ChatResult:
        self.calls.append({"prompt": str(messages[-1].content), "kwargs": kwargs})
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, str):
            reply = AIMessage(content=reply, usage_metadata={"input_tokens": 100, "output_tokens": 50,
                                                             "total_tokens": 150})
        return ChatResult(generations=[ChatGeneration(message=reply)])


def _policy(role: str, *replies: Any, structured: bool = False, spec: str = "vllm:openai/gpt-oss-120b",
            ) -> tuple[LLMPolicy, RecordingModel]:
    model = RecordingModel(replies=list(replies), calls=[])
    return LLMPolicy(model, ModelSpec.parse(spec, max_tokens=4096), role, 0.0, None, structured=structured), model


def _plan_request(task) -> PlanRequest:
    return PlanRequest(task=task, iteration=1, member_id="baseline", source=BASELINE, measurements="- x: 10 us",
                       tried=[], lessons=[], n=4)


def _summarize_request(task) -> SummarizeRequest:
    return SummarizeRequest(task=task, iteration=1, child_id="i1.m0.p0.k0", kind="positive", hardware="H100",
                            plan_text=PLAN.text, parent_source=BASELINE, child_source=GOOD, speedup_vs_parent=1.2,
                            speedup_vs_baseline=1.2, workloads=["M4096_N4096"], bottleneck="memory-bound")


def _fix_request(task, status: str, error: str) -> FixRequest:
    return FixRequest(task=task, iteration=1, candidate_id="i1.m0.p0.k0.f1", plan=PLAN, parent_source=BASELINE,
                      source=None, status=status, error=error, findings="")


def test_a_truncated_kernel_is_its_own_status_and_the_fixer_is_told(softmax_task):
    task = task_of(str(softmax_task))
    cut = AIMessage(content=f"Here is the kernel:\n```python\n{GOOD[:300]}", usage_metadata=USAGE,
                    response_metadata={"finish_reason": "length"})
    executor, _ = _policy("executor", cut)
    kernel = executor.write(WriteRequest(task=task, iteration=1, candidate_id="i1.m0.p0.k0", source=BASELINE,
                                         plan=PLAN))
    assert kernel.source is None and kernel.status == "truncated"
    assert "cut off at the token limit (4096 output tokens)" in kernel.note
    assert kernel.usage is not None and kernel.usage["output_tokens"] == 4096 and kernel.usage["prompt_chars"] > 0
    # The executor node keeps that status (fill_attempt alone would say no_code).
    filled = fill_attempt(attempt("i1.m0.p0.k0", 1, "baseline", "i1.m0.p0", "exp2", None, 0), lambda: kernel)
    assert filled["current"]["status"] == "truncated" and filled["current"]["error"] == kernel.note

    fixer, model = _policy("fixer", f"```python\n{GOOD}```")
    fixed = fixer.fix(_fix_request(task, "truncated", kernel.note))
    prompt = model.calls[0]["prompt"]
    assert fixed.source == GOOD
    assert "## What went wrong: truncated" in prompt and "cut off at the token limit" in prompt
    assert "Write a much shorter reply" in prompt
    # no kernel came back: the fixer starts from the kernel the plan modifies, with the Triton notes
    assert "Kernel the plan modifies" in prompt and BASELINE in prompt
    assert "Triton API pitfalls" in prompt and "Fast Triton kernels on Hopper" in prompt


def test_reasoning_that_used_every_token_is_truncated_not_an_empty_reply(softmax_task):
    task = task_of(str(softmax_task))
    thinking = AIMessage(content="", additional_kwargs={"reasoning_content": "We need to... " * 400},
                         response_metadata={"finish_reason": "length"}, usage_metadata=USAGE)
    executor, _ = _policy("executor", thinking)
    kernel = executor.write(WriteRequest(task=task, iteration=1, candidate_id="c", source=BASELINE, plan=PLAN))
    assert kernel.status == "truncated" and "still reasoning (5600 characters of it)" in kernel.note
    # The same in harmony text: the analysis channel never closed.
    harmony = AIMessage(content="<|channel|>analysis<|message|>We need to fuse", usage_metadata=USAGE,
                        response_metadata={"finish_reason": "length"})
    executor, _ = _policy("executor", harmony)
    assert executor.write(WriteRequest(task=task, iteration=1, candidate_id="c", source=BASELINE,
                                       plan=PLAN)).status == "truncated"


def test_a_complete_kernel_before_the_cut_is_kept(softmax_task):
    task = task_of(str(softmax_task))
    reply = AIMessage(content=f"```python\n{GOOD}```\nExplanation: exp2 is faster because the hard",
                      usage_metadata=USAGE,
                      response_metadata={"finish_reason": "length"})
    executor, _ = _policy("executor", reply)
    assert executor.write(WriteRequest(task=task, iteration=1, candidate_id="c", source=BASELINE,
                                       plan=PLAN)).source == GOOD


def test_no_code_gives_the_fixer_the_parent_kernel(softmax_task):
    task = task_of(str(softmax_task))
    executor, _ = _policy("executor", "I would rather describe the kernel than write it.")
    kernel = executor.write(WriteRequest(task=task, iteration=1, candidate_id="c", source=BASELINE, plan=PLAN))
    assert kernel.source is None and kernel.status == "no_code"
    fixer, model = _policy("fixer", f"```python\n{GOOD}```")
    fixer.fix(_fix_request(task, "no_code", kernel.note))
    prompt = model.calls[0]["prompt"]
    assert BASELINE in prompt and "the failed reply produced no kernel" in prompt
    assert "held no complete kernel module" in prompt and "(no kernel was produced)" not in prompt


def test_kernel_from_a_tool_call(softmax_task):
    task = task_of(str(softmax_task))
    call = AIMessage(content="", tool_calls=[{"name": "submit_kernel", "args": {"source": GOOD}, "id": "call_0"}],
                     response_metadata={"finish_reason": "tool_calls"}, usage_metadata=USAGE)
    executor, _ = _policy("executor", call)
    kernel = executor.write(WriteRequest(task=task, iteration=1, candidate_id="c", source=BASELINE, plan=PLAN))
    assert kernel.source == GOOD


def test_plans_under_a_response_schema(softmax_task):
    task = task_of(str(softmax_task))
    answer = json.dumps({"plans": [{"title": "Online softmax", "text": "One pass with a running max and sum."},
                                   {"title": "Eight warps", "text": "More warps per row for the long rows."}]})
    planner, model = _policy("planner", answer, structured=True, spec="vllm:schema-ok")
    plans = planner.plan(_plan_request(task))
    assert [plan_title(p.text) for p in plans.plans] == ["Online softmax", "Eight warps"]
    assert model.calls[0]["kwargs"]["response_format"] == PLANS_SCHEMA
    assert '{"plans": [{"title"' in model.calls[0]["prompt"]
    assert plans.usage is not None and plans.usage["input_tokens"] == 100


def test_a_refused_schema_falls_back_to_text_and_is_not_asked_again(softmax_task):
    task = task_of(str(softmax_task))
    message = "'response_format' of type 'json_schema' is not supported with this model"
    refused = openai.BadRequestError(message, response=httpx.Response(400, request=httpx.Request("POST", "http://x")),
                                     body={"message": message})
    planner, model = _policy("planner", refused, PLANS, PLANS, structured=True, spec="vllm:no-schema")
    plans = planner.plan(_plan_request(task))
    assert len(plans.plans) == 4 and plan_title(plans.plans[0].text) == "exp2 with more warps"
    assert "response_format" not in model.calls[1]["kwargs"] and "### Plan <number>" in model.calls[1]["prompt"]
    # the endpoint is remembered: the next planner asks in text at once
    again = LLMPolicy(model, planner.spec, "planner", 0.0, None, structured=True)
    again.plan(_plan_request(task))
    assert len(model.calls) == 3 and "response_format" not in model.calls[2]["kwargs"]


def test_a_fatal_error_under_a_schema_is_not_asked_again_in_text(softmax_task, tmp_path):
    task = task_of(str(softmax_task))
    response = httpx.Response(401, request=httpx.Request("POST", "http://x"))
    denied = openai.AuthenticationError("bad key", response=response, body={"message": "invalid api key"})
    model = RecordingModel(replies=[denied, PLANS], calls=[])
    # a run directory of its own: a fatal error fails every later call of its run
    planner = LLMPolicy(model, ModelSpec.parse("vllm:fatal"), "planner", 0.0, str(tmp_path), structured=True)
    with pytest.raises(PolicyError):
        planner.plan(_plan_request(task))
    assert len(model.calls) == 1


def test_a_schema_reply_cut_off_keeps_its_complete_plans_and_its_tokens(softmax_task):
    task = task_of(str(softmax_task))
    content = '{"plans": [{"title": "A", "text": "first plan"}, {"title": "B", "text": "second"}, {"title": "C", "t'
    completion = ChatCompletion(
        id="c1", object="chat.completion", created=0, model="m",
        choices=[Choice(index=0, finish_reason="length",
                        message=ChatCompletionMessage(role="assistant", content=content))],
        usage=CompletionUsage(prompt_tokens=700, completion_tokens=4096, total_tokens=4796))
    planner, model = _policy("planner", LengthFinishReasonError(completion=completion), structured=True,
                             spec="vllm:cut-schema")
    plans = planner.plan(_plan_request(task))
    assert [plan_title(p.text) for p in plans.plans] == ["A", "B"]
    assert plans.usage is not None and (plans.usage["input_tokens"], plans.usage["output_tokens"]) == (700, 4096)
    assert len(model.calls) == 1  # no text retry: it would be cut off as well


def test_an_unreadable_schema_lesson_is_asked_again_in_text(softmax_task):
    task = task_of(str(softmax_task))
    summarizer, model = _policy("summarizer", "I cannot comply.", INSIGHT, structured=True, spec="vllm:lesson")
    draft = summarizer.summarize(_summarize_request(task))
    assert draft.fields["title"] == "exp2 and 8 warps for row softmax"
    assert model.calls[0]["kwargs"]["response_format"] == LESSON_SCHEMA
    assert "```json block" in model.calls[1]["prompt"] and "```json block" not in model.calls[0]["prompt"]
    assert draft.usage is not None and draft.usage["input_tokens"] == 200  # both calls are in the ledger


# ---------------------------------------------------------------- through the real ChatOpenAI client

class _Server:
    """An OpenAI-compatible endpoint answering (content, finish_reason) pairs in order."""

    def __init__(self, answers: list[tuple[str, str]]):
        self.answers, self.bodies = answers, []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                server.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                content, finish = server.answers.pop(0)
                data = json.dumps({
                    "id": "x", "object": "chat.completion", "created": int(time.time()), "model": "m",
                    "usage": {"prompt_tokens": 321, "completion_tokens": 64, "total_tokens": 385},
                    "choices": [{"index": 0, "finish_reason": finish,
                                 "message": {"role": "assistant", "content": content}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server([])
    yield srv
    srv.httpd.shutdown()


def test_chat_openai_schema_and_finish_reason_end_to_end(softmax_task, server):
    task = task_of(str(softmax_task))
    server.answers += [
        (json.dumps({"plans": [{"title": "Online softmax", "text": "one pass"}]}), "stop"),
        ('{"plans": [{"title": "A", "text": "first"}, {"title": "B", "te', "length"),
        (f"```python\n{GOOD[:200]}", "length"),
    ]
    spec = ModelSpec.parse("vllm:served-model", base_url=server.url, max_tokens=64)
    model = build_chat_model(spec)
    planner = LLMPolicy(model, spec, "planner", 0.0, None)
    assert planner.structured  # an OpenAI-compatible endpoint is asked with a schema
    plans = planner.plan(_plan_request(task))
    assert [plan_title(p.text) for p in plans.plans] == ["Online softmax"]
    assert server.bodies[0]["response_format"]["type"] == "json_schema"
    # openai's client raises on a schema reply cut off at max_tokens: read as truncated, tokens kept
    cut = planner.plan(_plan_request(task))
    assert [plan_title(p.text) for p in cut.plans] == ["A"]
    assert cut.usage is not None and cut.usage["input_tokens"] == 321
    executor = LLMPolicy(model, spec, "executor", 0.0, None)
    kernel = executor.write(WriteRequest(task=task, iteration=1, candidate_id="c", source=BASELINE, plan=PLAN))
    assert kernel.status == "truncated" and kernel.usage is not None and kernel.usage["output_tokens"] == 64
    assert "response_format" not in server.bodies[2]


def test_fill_attempt_keeps_no_code_and_kernels_as_they_are():
    blank = attempt("a", 1, "baseline", "p", "t", None, 0)
    assert fill_attempt(blank, lambda: Kernel(None, note="nothing"))["current"]["status"] == "no_code"
    assert fill_attempt(attempt("b", 1, "baseline", "p", "t", None, 0),
                      lambda: Kernel(GOOD))["current"]["source"] == GOOD


@pytest.fixture(autouse=True)
def _fresh_endpoints():
    """Each test starts with no endpoint known to refuse a schema."""
    structured_output.TEXT_ONLY.clear()
    yield
    structured_output.TEXT_ONLY.clear()
