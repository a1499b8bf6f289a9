"""The policies behind tools/policy.py's interface, and which one a role gets.

The LLM policy renders a prompt from each typed request (nodes/prompts/), calls the role's chat
model through tools/llm.py (retries, ledger, replay after a crash) and reads the reply as real
models write it (tools/codeparse.py): reasoning stripped, a reply cut off at the token limit
is `truncated`, plans from headings, lists or JSON, a kernel out of its fences or a tool call,
a lesson out of its last JSON object. Plans and lessons are asked for with a JSON schema where
the server takes one, in text otherwise. The tuner (tools/tuner.py) answers the same requests
with no model."""

from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Callable
from typing import Any, TypeVar

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableConfig
from openai import LengthFinishReasonError

from accelopt.memory.schema import Insight
from accelopt.nodes.common import backend_parts, render, workloads_text
from accelopt.nodes.context import RunContext
from accelopt.nodes.measurements import tried_text
from accelopt.tools.codeparse import (Reply, as_text, code_from_tool_calls, decode_reply, encode_reply, find_kernel,
                                      is_complete_python, last_object_with, reply_of, split_plans, strip_reasoning)
from accelopt.tools.llm import LLMCallError, ModelSpec, build_chat_model, call_model
from accelopt.tools.policy import (FixRequest, Kernel, LessonDraft, PlanDraft, PlanRequest, Plans, Policy,
                                   PolicyError, SummarizeRequest, WriteRequest)
from accelopt.tools.task import Task
from accelopt.tools.tracing import TracedPolicy, tracing_enabled
from accelopt.tools.tuner import TunerPolicy

T = TypeVar("T")

LESSON_KEYS = ("title", "lesson", "bottleneck", "kernel_class", "before", "after")

FROM_SCRATCH = ("(There is no Triton kernel yet: this task starts from scratch. The current implementation is the "
                "PyTorch reference above, measured as the baseline; the first kernel must be written from it.)")

SNIPPET_LINES = 8  # of a recalled lesson's before/after code: enough to show the change, no more


def policy_for(ctx: RunContext, role: str, run_dir: str | None) -> Policy:
    """The role's policy: a chat model given in code, else the tuner, else the configured endpoint."""
    spec = ctx.model_spec(role)
    given = ctx.chat_models or {}
    model = given.get(role) or given.get("default")
    policy: Policy
    if model is None and spec.provider == "tuner":
        policy = TunerPolicy()
    else:
        policy = LLMPolicy(model if model is not None else build_chat_model(spec), spec, role, ctx.llm_retry_wait_s,
                           run_dir)
    return TracedPolicy(policy, role) if tracing_enabled() else policy


# ---------------------------------------------------------------- prompt parts

def _task_parts(task: Task) -> dict[str, str]:
    return {"task_name": task.name, "task_description": task.spec.description, "reference": task.reference_source,
            "entry_point": task.spec.entry_point, "workloads": workloads_text(task), **backend_parts(task)}


def lessons_text(lessons: list[Insight]) -> str:
    """Recalled lessons for the planner, each with the code it changed (the snippets are what
    makes a lesson concrete enough to apply)."""
    return "\n".join(_lesson_text(i) for i in lessons) or "(none yet)"


def _lesson_text(insight: Insight) -> str:
    text = f"- ({insight.id}) {insight.compact()}"
    for label, code in (("before", insight.before), ("after", insight.after)):
        lines = textwrap.dedent(code.strip("\n")).splitlines()
        if lines:
            cut = "\n    ..." if len(lines) > SNIPPET_LINES else ""
            text += f"\n  {label}:\n" + "\n".join("    " + line for line in lines[:SNIPPET_LINES]) + cut
    return text


PLAN_FORMAT = {
    False: ("Each plan must start with a line `### Plan <number>: <short title>` followed by a few sentences\n"
            "that say exactly what to change and why it should be faster given the measurements."),
    True: ('Reply with one JSON object: {"plans": [{"title": "<short title>", "text": "<a few sentences that say '
           'exactly what to change and why it should be faster given the measurements>"}, ...]}.'),
}
LESSON_FORMAT = {False: "Reply with a single JSON object in a ```json block",
                 True: "Reply with a single JSON object"}

FIX_ADVICE = {
    "truncated": ("The previous reply was cut off at the token limit before the kernel was complete, so nothing "
                  "could be run. Write a much shorter reply: reason briefly, then give the kernel module alone, "
                  "with no explanation, no commented-out code and no alternative versions; keep the kernel compact "
                  "(no unused helpers, few autotune configs)."),
    "no_code": ("The previous reply held no complete kernel module. Implement the plan on the kernel above and "
                "return the whole module."),
}
FIX_DEFAULT = ("Fix the kernel so that it compiles, runs and matches the reference, keeping the plan's optimization "
               "where you can.")


def _fix_attempt(request: FixRequest) -> str:
    """The failed kernel; after a reply with no kernel, the kernel the plan was to modify."""
    if request.source is not None:
        return f"## Kernel that failed\n```python\n{request.source}\n```"
    parent = request.parent_source if request.parent_source is not None else FROM_SCRATCH
    return f"## Kernel the plan modifies (the failed reply produced no kernel)\n```python\n{parent}\n```"


# ---------------------------------------------------------------- structured output

def _schema(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def _response_format(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}


PLANS_SCHEMA = _response_format("plans", _schema({"plans": {"type": "array", "items": _schema(
    {"title": {"type": "string"}, "text": {"type": "string"}})}}))
LESSON_SCHEMA = _response_format("lesson", _schema({k: {"type": "string"} for k in LESSON_KEYS}))

_TEXT_ONLY: set[str] = set()  # endpoints that refused a response schema in this process
# what a server says when it refuses a response schema (tools/llm.py makes such a 400 this call's failure)
_REFUSED = re.compile(r"response_format|json_schema|structured|guided|NotImplemented", re.IGNORECASE)


def _takes_schema(model: BaseChatModel) -> bool:
    """OpenAI-compatible endpoints (OpenAI, vLLM, SGLang, Ollama) take response_format json_schema;
    ACCELOPT_STRUCTURED_OUTPUT=0 asks in text everywhere."""
    if os.environ.get("ACCELOPT_STRUCTURED_OUTPUT", "1") == "0":
        return False
    from langchain_openai import ChatOpenAI

    return isinstance(model, ChatOpenAI)


class AnsweringModel(BaseChatModel):
    """The role's chat model, with what call_model's text would drop (finish_reason, tool calls,
    reasoning that came in a field of its own) folded into the reply's text, so that the run
    cache replays it too; and with a response schema when one is asked for. It passes the call
    and its config straight through (no run of its own in a trace: the model's run is the one)."""

    inner: BaseChatModel
    response_format: dict[str, Any] | None = None

    @property
    def _llm_type(self) -> str:
        return "accelopt-answering"

    def invoke(self, input: LanguageModelInput, config: RunnableConfig | None = None, *,
               stop: list[str] | None = None, **kwargs: Any) -> AIMessage:
        if self.response_format is not None:
            kwargs["response_format"] = self.response_format
        try:
            message = self.inner.invoke(input, streamed_to_the_graph(config), stop=stop, **kwargs)
        except LengthFinishReasonError as exc:  # openai's parse() raises on a cut-off schema reply
            message = _cut_off_message(exc.completion)
        return AIMessage(content=encode_reply(reply_of(message)), usage_metadata=message.usage_metadata,
                         response_metadata=message.response_metadata)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.invoke(messages, stop=stop, **kwargs))])


def streamed_to_the_graph(config: RunnableConfig | None) -> RunnableConfig | None:
    """The model call's config, so that `graph.stream(..., stream_mode="messages")` sees its chunks
    from whichever node makes it. LangGraph's messages stream drops a model call made inside a
    subgraph (the executor's and fixer's, in the `candidate` subgraph) unless the graph is
    streamed with `subgraphs=True`; while such a stream listens, the call is labelled with its
    node's own namespace (metadata `langgraph_checkpoint_ns`; `checkpoint_ns` keeps the full one),
    so its chunks reach the stream with the node's name and the call's role, candidate and
    iteration. Anything else (graph.invoke, a stream with subgraphs, no stream) gets the config as
    it is; the call itself (request, reply, retries, ledger) is the same either way."""
    try:
        from langchain_core.callbacks import BaseCallbackManager
        from langchain_core.runnables.config import ensure_config
        from langgraph.pregel._messages import StreamMessagesHandler, graph_namespace

        callbacks = ensure_config(config).get("callbacks")
        if not isinstance(callbacks, BaseCallbackManager):
            return config
        seen = {**callbacks.metadata, **((config or {}).get("metadata") or {})}
        if "langgraph_checkpoint_ns" not in seen:
            return config  # not in a graph's node
        ns = graph_namespace(seen)
        dropping = [h for h in callbacks.handlers if isinstance(h, StreamMessagesHandler)
                    and not h.subgraphs and ns and ns != h.parent_ns]
        if not dropping:
            return config
        own = str(seen["langgraph_checkpoint_ns"]).split("|")[len(ns):]  # the node's segment(s) below the graph's
        within = list(dropping[0].parent_ns or ())
        metadata = {**((config or {}).get("metadata") or {}), "langgraph_checkpoint_ns": "|".join(within + own)}
        return {**(config or {}), "metadata": metadata}
    except Exception:  # noqa: BLE001 - another LangGraph's internals: the call goes on unstreamed, as before
        return config


def _cut_off_message(completion: Any) -> AIMessage:
    """The reply inside openai's LengthFinishReasonError, with its token counts."""
    choices = getattr(completion, "choices", None) or []
    content = (choices[0].message.content or "") if choices else ""
    usage = getattr(completion, "usage", None)
    metadata = None  # no counts from the server: tools/llm.py estimates them
    if usage is not None:
        tokens_in, tokens_out = int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0)
        details = getattr(usage, "completion_tokens_details", None)
        metadata = UsageMetadata(input_tokens=tokens_in, output_tokens=tokens_out, total_tokens=tokens_in + tokens_out,
                                 output_token_details={"reasoning": int(getattr(details, "reasoning_tokens", 0) or 0)})
    return AIMessage(content=content, usage_metadata=metadata, response_metadata={"finish_reason": "length"})


def _merged(usages: list[dict]) -> dict:
    """One ledger record for a schema call and its text fallback: their sums, and `requests`,
    how many requests reached the server (tools/llm_spec.totals counts calls by it)."""
    out = dict(usages[-1])
    for key in ("input_tokens", "output_tokens", "reasoning_tokens", "cost_usd", "prompt_chars"):
        out[key] = sum(u.get(key) or 0 for u in usages)
    out["requests"] = sum(int(u.get("requests") or 1) for u in usages)
    return out


# ---------------------------------------------------------------- reading replies

def parse_lesson(reply: str) -> dict[str, str]:
    """The lesson fields of a summarizer reply's last JSON object (empty when there is none)."""
    data = last_object_with(reply, LESSON_KEYS)
    fields = {k: as_text(data[k], "\n" if k in ("before", "after") else ", " if k != "lesson" else " ")
              for k in LESSON_KEYS if k in data}
    return {k: v for k, v in fields.items() if v.strip() not in ("", "unknown")}


class LLMPolicy:
    """One role's chat model behind the policy interface."""

    def __init__(self, model: BaseChatModel, spec: ModelSpec, role: str, retry_wait_s: float, run_dir: str | None,
                 structured: bool | None = None):
        self.model, self.spec, self.role = model, spec, role
        self.retry_wait_s, self.run_dir = retry_wait_s, run_dir
        self.label = spec.label()
        self.structured = _takes_schema(model) if structured is None else structured

    def _endpoint(self) -> str:
        return f"{self.spec.label()}@{self.spec.base_url}"

    def _ask(self, prompt: str, iteration: int, candidate_id: str | None = None,
             schema: dict[str, Any] | None = None) -> tuple[Reply, dict]:
        system = render("system", role=self.role)
        model = AnsweringModel(inner=self.model, response_format=schema)
        try:
            text, usage = call_model(model, self.spec, [SystemMessage(system), HumanMessage(prompt)], role=self.role,
                                     candidate_id=candidate_id, iteration=iteration,
                                     retry_wait_s=self.retry_wait_s, run_dir=self.run_dir)
        except LLMCallError as exc:
            raise PolicyError(str(exc)) from exc
        # the prompt's size, so that runs show which prompts grow
        return decode_reply(text), {**usage, "prompt_chars": len(system) + len(prompt)}

    def _ask_parsed(self, prompt: Callable[[bool], str], schema: dict[str, Any], parse: Callable[[Reply], T],
                    iteration: int, candidate_id: str | None) -> tuple[T, Reply, dict]:
        """Ask with a response schema where the endpoint takes one; in text when it refuses it or
        its answer cannot be read (the two prompts differ, so the run cache keeps both)."""
        spent: list[dict] = []
        if self.structured and self._endpoint() not in _TEXT_ONLY:
            try:
                reply, usage = self._ask(prompt(True), iteration, candidate_id, schema)
            except PolicyError as exc:
                # asked again in text only when the schema was refused: a call that failed for
                # another reason already spent its retries, and a second round of them doubles the wait
                if not _REFUSED.search(str(exc)):
                    raise
                _TEXT_ONLY.add(self._endpoint())
            else:
                parsed = parse(reply)
                if parsed or reply.truncated:  # a cut-off reply would be cut off in text too
                    return parsed, reply, usage
                spent.append(usage)
        reply, usage = self._ask(prompt(False), iteration, candidate_id)
        return parse(reply), reply, _merged([*spent, usage])

    def plan(self, request: PlanRequest) -> Plans:
        def prompt(structured: bool) -> str:
            return render("planner", **_task_parts(request.task), member_id=request.member_id,
                          source=request.source if request.source is not None else FROM_SCRATCH,
                          measurements=request.measurements, tried=tried_text(request.tried), n=request.n,
                          iteration=request.iteration, insights=lessons_text(request.lessons),
                          format=PLAN_FORMAT[structured])

        texts, reply, usage = self._ask_parsed(prompt, PLANS_SCHEMA,
                                               lambda r: split_plans(r.text, request.n, r.truncated),
                                               request.iteration, None)
        note = "" if texts else (_cut_off_note(reply, self.spec, "a complete plan") if reply.truncated
                                 else "the reply held no plan")
        return Plans([PlanDraft(text) for text in texts], usage, note=note)

    def _kernel(self, reply: Reply, usage: dict, task: Task, echo: str | None) -> Kernel:
        entry = task.spec.entry_point
        block = find_kernel(reply.text, entry, echo)
        whole = block is not None and block.closed and is_complete_python(block.source)
        if reply.truncated and not whole:
            return Kernel(None, usage=usage, status="truncated",
                          note=_cut_off_note(reply, self.spec, "the kernel module was complete"))
        called = code_from_tool_calls(reply.tool_calls, entry)
        if block is not None and (whole or called is None):
            return Kernel(block.source, usage=usage)
        if called is not None:
            return Kernel(called, usage=usage)
        return Kernel(None, usage=usage, note=_no_code_note(reply, task))

    def write(self, request: WriteRequest) -> Kernel:
        prompt = render("executor", **_task_parts(request.task), plan=request.plan.text,
                        source=request.source if request.source is not None else FROM_SCRATCH)
        reply, usage = self._ask(prompt, request.iteration, request.candidate_id)
        return self._kernel(reply, usage, request.task, request.source)

    def fix(self, request: FixRequest) -> Kernel:
        prompt = render("fixer", **_task_parts(request.task), plan=request.plan.text, attempt=_fix_attempt(request),
                        status=request.status, error=request.error,
                        findings=request.findings or "(no static findings)",
                        advice=FIX_ADVICE.get(request.status, FIX_DEFAULT))
        reply, usage = self._ask(prompt, request.iteration, request.candidate_id)
        return self._kernel(reply, usage, request.task, request.source or request.parent_source)

    def summarize(self, request: SummarizeRequest) -> LessonDraft:
        positive = request.kind == "positive"

        def prompt(structured: bool) -> str:
            return render("summarizer", task_name=request.task.name, backend=request.task.spec.backend,
                          hardware=request.hardware, speedup=f"{request.speedup_vs_parent:.3f}",
                          plan=request.plan_text, workloads=", ".join(request.workloads),
                          bottleneck=request.bottleneck, baseline_speedup=f"{request.speedup_vs_baseline:.3f}",
                          parent_source=request.parent_source, child_source=request.child_source,
                          direction="faster" if positive else "slower: a regression",
                          direction_hint="" if positive else
                          "It was a regression: phrase the lesson as what to avoid and why.",
                          format=LESSON_FORMAT[structured])

        fields, _, usage = self._ask_parsed(prompt, LESSON_SCHEMA, lambda r: parse_lesson(r.text),
                                            request.iteration, request.child_id)
        return LessonDraft(fields, usage)


def _cut_off_note(reply: Reply, spec: ModelSpec, before: str) -> str:
    """What the fixer (or the run log) is told about a reply that hit the token limit."""
    limit = f" ({spec.max_tokens} output tokens)" if spec.max_tokens else ""
    answer = strip_reasoning(reply.text)
    if not answer:
        reasoned = f" ({reply.reasoning_chars} characters of it)" if reply.reasoning_chars else ""
        return (f"the reply was cut off at the token limit{limit} while the model was still reasoning{reasoned}, "
                f"before any answer")
    return (f"the reply was cut off at the token limit{limit} before {before}. "
            f"It ended with:\n...{answer[-400:]}")


def _no_code_note(reply: Reply, task: Task) -> str:
    answer = strip_reasoning(reply.text)
    if answer:
        began = answer[:600]
    elif reply.reasoning_chars:
        began = f"(no answer after {reply.reasoning_chars} characters of reasoning)"
    else:
        began = "(empty reply)"
    return ("the reply contained no complete kernel module in a ```python block "
            f"(a {task.spec.backend} kernel and `def {task.spec.entry_point}`). Reply began:\n{began}")
