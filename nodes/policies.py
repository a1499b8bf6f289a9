"""The policies behind tools/policy.py's interface, and which one a role gets.

The LLM policy renders a prompt from each typed request (nodes/prompts/), calls the role's chat
model through tools/llm.py (retries, ledger, replay after a crash) and parses the reply: plans
split on their headers, a kernel out of its fences, a lesson out of its JSON. The tuner
(tools/tuner.py) answers the same requests with no model."""

from __future__ import annotations

import json
import re

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage

from accelopt.nodes.common import backend_parts, render
from accelopt.nodes.context import RunContext
from accelopt.nodes.measurements import tried_text
from accelopt.tools.codeparse import extract_kernel, split_plans, strip_reasoning
from accelopt.tools.llm import LLMCallError, ModelSpec, build_chat_model, call_model
from accelopt.tools.policy import (FixRequest, Kernel, LessonDraft, PlanDraft, PlanRequest, Plans, Policy,
                                   PolicyError, SummarizeRequest, WriteRequest)
from accelopt.tools.task import Task
from accelopt.tools.tracing import TracedPolicy, tracing_enabled
from accelopt.tools.tuner import TunerPolicy

LESSON_KEYS = ("title", "lesson", "bottleneck", "kernel_class", "before", "after")

FROM_SCRATCH = ("(There is no Triton kernel yet: this task starts from scratch. The current implementation is the "
                "PyTorch reference above, measured as the baseline; the first kernel must be written from it.)")


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


def _task_parts(task: Task) -> dict[str, str]:
    return {"task_name": task.name, "task_description": task.spec.description, "reference": task.reference_source,
            "entry_point": task.spec.entry_point, **backend_parts(task)}


def parse_lesson(reply: str) -> dict[str, str]:
    """The lesson fields of a summarizer reply's JSON object (empty when there is none)."""
    text = strip_reasoning(reply)
    match = re.search(r"```(?:json)?\s*(\{.*?\})\s*```", text, re.DOTALL) or re.search(r"(\{.*\})", text, re.DOTALL)
    if not match:
        return {}
    try:
        data = json.loads(match.group(1))
    except json.JSONDecodeError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: str(v) for k, v in data.items() if k in LESSON_KEYS and str(v).strip() not in ("", "unknown")}


class LLMPolicy:
    """One role's chat model behind the policy interface."""

    def __init__(self, model: BaseChatModel, spec: ModelSpec, role: str, retry_wait_s: float, run_dir: str | None):
        self.model, self.spec, self.role = model, spec, role
        self.retry_wait_s, self.run_dir = retry_wait_s, run_dir
        self.label = spec.label()

    def _ask(self, prompt: str, iteration: int, candidate_id: str | None = None) -> tuple[str, dict]:
        messages = [SystemMessage(render("system", role=self.role)), HumanMessage(prompt)]
        try:
            return call_model(self.model, self.spec, messages, role=self.role, candidate_id=candidate_id,
                              iteration=iteration, retry_wait_s=self.retry_wait_s, run_dir=self.run_dir)
        except LLMCallError as exc:
            raise PolicyError(str(exc)) from exc

    def plan(self, request: PlanRequest) -> Plans:
        insights = "\n".join(f"- ({i.id}) {i.compact()}" for i in request.lessons) or "(none yet)"
        prompt = render("planner", **_task_parts(request.task), member_id=request.member_id,
                        source=request.source if request.source is not None else FROM_SCRATCH,
                        measurements=request.measurements, tried=tried_text(request.tried), n=request.n,
                        iteration=request.iteration, insights=insights)
        reply, usage = self._ask(prompt, request.iteration)
        plans = [PlanDraft(text) for text in split_plans(reply, request.n)]
        return Plans(plans, usage, note="" if plans else "the reply held no plan")

    def _kernel(self, reply: str, usage: dict, task: Task) -> Kernel:
        source = extract_kernel(reply, task.spec.entry_point)
        if source is not None:
            return Kernel(source, usage=usage)
        excerpt = reply.strip()[:600] or "(empty reply)"
        return Kernel(None, usage=usage, note=(
            "the reply contained no complete kernel module in a ```python block "
            f"(a {task.spec.backend} kernel and `def {task.spec.entry_point}`). Reply began:\n{excerpt}"))

    def write(self, request: WriteRequest) -> Kernel:
        prompt = render("executor", **_task_parts(request.task), plan=request.plan.text,
                        source=request.source if request.source is not None else FROM_SCRATCH)
        reply, usage = self._ask(prompt, request.iteration, request.candidate_id)
        return self._kernel(reply, usage, request.task)

    def fix(self, request: FixRequest) -> Kernel:
        prompt = render("fixer", **_task_parts(request.task), plan=request.plan.text,
                        source=request.source or "(no kernel was produced)", status=request.status,
                        error=request.error, findings=request.findings or "(no static findings)")
        reply, usage = self._ask(prompt, request.iteration, request.candidate_id)
        return self._kernel(reply, usage, request.task)

    def summarize(self, request: SummarizeRequest) -> LessonDraft:
        positive = request.kind == "positive"
        prompt = render("summarizer", task_name=request.task.name, backend=request.task.spec.backend,
                        hardware=request.hardware, speedup=f"{request.speedup_vs_parent:.3f}", plan=request.plan_text,
                        workloads=", ".join(request.workloads), bottleneck=request.bottleneck,
                        baseline_speedup=f"{request.speedup_vs_baseline:.3f}", parent_source=request.parent_source,
                        child_source=request.child_source,
                        direction="faster" if positive else "slower: a regression",
                        direction_hint="" if positive else
                        "It was a regression: phrase the lesson as what to avoid and why.")
        reply, usage = self._ask(prompt, request.iteration, request.child_id)
        return LessonDraft(parse_lesson(reply), usage)
