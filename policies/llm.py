"""The LLM policy: one role's chat model behind the policy interface (interface.py).

It renders a prompt from each typed request (prompting.py, measurement_text.py), calls the model
through tools/llm.py (retries, ledger, replay after a crash) and reads the reply as real models
write it (replies.py): reasoning stripped, a reply cut off at the token limit is `truncated`,
plans from headings, lists or JSON, a kernel out of its fences or a tool call, a lesson out of
its last JSON object. Plans and lessons are asked for with a JSON schema where the server takes
one, in text otherwise (structured_output.py).

A planner reply with no whole plan in it (cut off at its token limit, or unreadable) is asked
again, told why, up to `PLAN_ATTEMPTS` requests in one usage record. A reply with no kernel is
`no_code`, or `truncated` when the model hit its token limit (the fixer is then told to write
less); a failed call is a `PolicyError`, which the nodes turn into an `llm_error` candidate."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import SimpleNamespace
from typing import Any, TypeVar, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage

from accelopt.policies.answering import AnsweringModel
from accelopt.policies.interface import (
    FixRequest,
    Kernel,
    LessonDraft,
    PlanDraft,
    PlanRequest,
    Plans,
    PolicyError,
    SummarizeRequest,
    WriteRequest,
)
from accelopt.policies.measurement_text import tried_text
from accelopt.policies.prompting import (
    FIX_ADVICE,
    FIX_DEFAULT,
    FROM_SCRATCH,
    LESSON_FORMAT,
    PLAN_FORMAT,
    backend_parts,
    fix_attempt,
    lessons_text,
    render,
    task_parts,
)
from accelopt.policies.replies import (
    Reply,
    code_from_tool_calls,
    decode_reply,
    find_kernel,
    is_complete_python,
    parse_lesson,
    split_plans,
    strip_reasoning,
)
from accelopt.policies.structured_output import LESSON_SCHEMA, PLANS_SCHEMA, REFUSED, TEXT_ONLY, takes_schema
from accelopt.tools.budget import JOINED, estimate_tokens
from accelopt.tools.llm import ROLES, AskInText, LLMCallError, ModelSpec, call_model
from accelopt.tools.task import Task

T = TypeVar("T")

# A planner reply with no plan in it (cut off at its token limit, or nothing readable) is asked
# again, up to this many requests in all: with one beam member, one bad reply was the whole
# iteration's, and the run ended as though the endpoint were dead.
PLAN_ATTEMPTS = 3
AGAIN = {True: ("\n\n(Your previous reply was cut off at its token limit before a complete plan. Reason briefly "
                "and keep each plan to a few sentences.)"),
         False: ("\n\n(Your previous reply held no plan that could be read. Give the plans in the format asked "
                 "for above.)")}


class LLMPolicy:
    """One role's chat model behind the policy interface."""

    def __init__(self, model: BaseChatModel, spec: ModelSpec, role: str, retry_wait_s: float, run_dir: str | None,
                 structured: bool | None = None):
        self.model, self.spec, self.role = model, spec, role
        self.retry_wait_s, self.run_dir = retry_wait_s, run_dir
        self.label = spec.label()
        self.structured = takes_schema(model) if structured is None else structured

    def _endpoint(self) -> str:
        return f"{self.spec.label()}@{self.spec.base_url}"

    def _ask(self, prompt: str, iteration: int, candidate_id: str | None = None,
             schema: dict[str, Any] | None = None, attempt: int = 1) -> tuple[Reply, dict]:
        system = render("system", role=self.role)
        model = AnsweringModel(inner=self.model, response_format=schema)
        try:
            text, usage = call_model(model, self.spec, [SystemMessage(system), HumanMessage(prompt)], role=self.role,
                                     candidate_id=candidate_id, iteration=iteration,
                                     retry_wait_s=self.retry_wait_s, run_dir=self.run_dir, attempt=attempt)
        except LLMCallError as exc:
            raise PolicyError(str(exc)) from exc
        # the prompt's size, so that runs show which prompts grow
        return decode_reply(text), {**usage, "prompt_chars": len(system) + len(prompt)}

    def _ask_parsed(self, prompt: Callable[[bool], str], schema: dict[str, Any], parse: Callable[[Reply], T],
                    iteration: int, candidate_id: str | None, attempt: int = 1) -> tuple[T, Reply, dict]:
        """Ask with a response schema where the endpoint takes one; in text when it refuses it or
        its answer cannot be read (the two prompts differ, so the run cache keeps both)."""
        spent: list[dict] = []
        if self.structured and self._endpoint() not in TEXT_ONLY:
            try:
                reply, usage = self._ask(prompt(True), iteration, candidate_id, schema, attempt)
            except PolicyError as exc:
                # asked again in text only when the schema was refused, or may be why the prompt did not
                # fit: a call that failed for another reason already spent its retries, and a second
                # round of them doubles the wait
                overflow = isinstance(exc.__cause__, AskInText)
                if not overflow and not REFUSED.search(str(exc)):
                    raise
                if not overflow:
                    TEXT_ONLY.add(self._endpoint())
            else:
                parsed = parse(reply)
                if parsed or reply.truncated:  # a cut-off reply would be cut off in text too
                    return parsed, reply, usage
                spent.append(usage)
        reply, usage = self._ask(prompt(False), iteration, candidate_id, attempt=attempt)
        return parse(reply), reply, _merged([*spent, usage])

    def plan(self, request: PlanRequest) -> Plans:
        """The member's plans. A reply with none in it is asked again (PLAN_ATTEMPTS in all),
        saying why: the one cut off at its token limit to be brief. Every request's tokens go in
        the one usage record; a retry that fails leaves the replies so far and a note."""
        def prompt(again: str) -> Callable[[bool], str]:
            return lambda structured: render(
                "planner", **task_parts(request.task), member_id=request.member_id,
                source=request.source if request.source is not None else FROM_SCRATCH,
                measurements=request.measurements, tried=tried_text(request.tried), n=request.n,
                iteration=request.iteration, insights=lessons_text(request.lessons),
                format=PLAN_FORMAT[structured]) + again

        usages: list[dict] = []
        texts: list[str] = []
        note, again = "", ""
        for attempt in range(1, PLAN_ATTEMPTS + 1):
            try:
                texts, reply, usage = self._ask_parsed(prompt(again), PLANS_SCHEMA,
                                                       lambda r: split_plans(r.text, request.n, r.truncated),
                                                       request.iteration, None, attempt)
            except PolicyError as exc:
                if not usages:
                    raise
                note += f"; asked again: {exc}"
                break
            usages.append(usage)
            if texts:
                break
            note = (_cut_off_note(reply, self.spec, "a complete plan") if reply.truncated
                    else "the reply held no plan")
            if attempt > 1:
                note = f"{note} ({attempt} replies, none with a plan)"
            again = AGAIN[reply.truncated]
        usage = usages[0] if len(usages) == 1 else _merged(usages)
        return Plans([PlanDraft(text) for text in texts], usage, note="" if texts else note)

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
        prompt = render("executor", **task_parts(request.task), plan=request.plan.text,
                        source=request.source if request.source is not None else FROM_SCRATCH)
        reply, usage = self._ask(prompt, request.iteration, request.candidate_id)
        return self._kernel(reply, usage, request.task, request.source)

    def fix(self, request: FixRequest) -> Kernel:
        prompt = render("fixer", **task_parts(request.task), plan=request.plan.text, attempt=fix_attempt(request),
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


def _merged(usages: list[dict]) -> dict:
    """One ledger record for several requests (a schema call and its text fallback, a planner
    asked again): their sums, `requests`, how many requests reached the server (tools/llm_spec.totals
    counts calls by it), and their `call` ids joined: replayed, the same record again."""
    out = dict(usages[-1])
    for key in ("input_tokens", "output_tokens", "reasoning_tokens", "cost_usd", "prompt_chars"):
        out[key] = sum(u.get(key) or 0 for u in usages)
    out["requests"] = sum(int(u.get("requests") or 1) for u in usages)
    out["estimated"] = any(u.get("estimated") for u in usages)
    calls = [u.get("call") for u in usages]
    if all(calls):
        out["call"] = JOINED.join(str(c) for c in calls)
    else:
        out.pop("call", None)
    return out


def least_prompt_tokens(roles: Iterable[str] = ROLES, backend: str = "triton") -> dict[str, int]:
    """Each role's prompt before any task is in it: its templates (the system prompt, the role's,
    the backend's rules, notes and pitfalls) with every part a request fills left empty, in
    tokens (tools/budget.estimate_tokens). A run's prompts are longer: the preflight holds these
    against a served context length (tools/llm.preflight's `prompt_tokens`)."""
    stub = cast(Task, SimpleNamespace(spec=SimpleNamespace(backend=backend, entry_point="run")))
    parts = backend_parts(stub)
    out = {}
    for role in roles:
        system = render("system", role=role)
        formats = PLAN_FORMAT if role == "planner" else LESSON_FORMAT
        out[role] = min(estimate_tokens(system + "\n" + _with_blanks(role, {**parts, "format": f}))
                        for f in formats.values())
    return out


def _with_blanks(name: str, values: dict[str, str]) -> str:
    """The template with `values`, and every other part it asks for empty."""
    values = dict(values)
    while True:
        try:
            return render(name, **values)
        except KeyError as exc:
            values[str(exc.args[0])] = ""

