"""executor: write one full kernel for a plan. A reply with no usable code is a failed
candidate (status no_code) that the fixer may repair, never a crash."""

from __future__ import annotations

from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.runtime import Runtime

from graph.context import RunContext
from graph.state import CandidateState
from nodes.common import backend_parts, chat_model, kernel_text, render, task_of
from tools.codeparse import extract_kernel, plan_title
from tools.llm import LLMCallError, call_model


def new_attempt(state: CandidateState, attempt_id: str, fix_of: str | None, fix_attempt: int) -> dict:
    return {"id": attempt_id, "iteration": state["iteration"], "parent_id": state["parent"]["id"],
            "plan_id": state["plan"]["id"], "plan_title": plan_title(state["plan"]["text"]), "fix_of": fix_of,
            "fix_attempt": fix_attempt,
            "source": None, "status": None, "error": None, "tokens": 0, "cost_usd": 0.0}


def generate(state: CandidateState, ctx: RunContext, role: str, prompt: str, attempt: dict) -> dict:
    """Call the role's model, parse a kernel out of its reply, and fill in the attempt."""
    task = task_of(state["task_dir"])
    model, spec = chat_model(ctx, role)
    messages = [SystemMessage(render("system", role=role)), HumanMessage(prompt)]
    try:
        reply, usage = call_model(model, spec, messages, role=role, candidate_id=attempt["id"],
                                  iteration=state["iteration"], retry_wait_s=ctx.llm_retry_wait_s,
                                  run_dir=state.get("run_dir"))
    except LLMCallError as exc:
        attempt.update(status="llm_error", error=str(exc))
        return {"current": attempt, "usage": []}
    attempt.update(tokens=usage["input_tokens"] + usage["output_tokens"], cost_usd=usage["cost_usd"])
    source = extract_kernel(reply, task.spec.entry_point)
    if source is None:
        excerpt = reply.strip()[:600] or "(empty reply)"
        attempt.update(status="no_code", error=(
            "the reply contained no complete kernel module in a ```python block "
            f"(a {task.spec.backend} kernel and `def {task.spec.entry_point}`). Reply began:\n{excerpt}"))
    else:
        attempt["source"] = source
    return {"current": attempt, "usage": [usage]}


def executor(state: CandidateState, runtime: Runtime[RunContext]) -> dict:
    task = task_of(state["task_dir"])
    attempt = new_attempt(state, f"{state['plan']['id']}.k{state['sample']}", None, 0)
    prompt = render("executor", task_name=task.name, task_description=task.spec.description,
                    reference=task.reference_source, source=kernel_text(state["parent"]),
                    plan=state["plan"]["text"], entry_point=task.spec.entry_point, **backend_parts(task))
    return {"fixes": 0, **generate(state, runtime.context, "executor", prompt, attempt)}
