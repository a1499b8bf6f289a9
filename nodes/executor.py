"""executor: write one full kernel for a plan. A reply with no usable code is a failed
candidate (status no_code) that the fixer may repair, never a crash."""

from __future__ import annotations

from langgraph.runtime import Runtime

from accelopt.nodes.common import backend_parts, kernel_text, render, task_of
from accelopt.nodes.context import RunContext
from accelopt.nodes.services import generate, new_attempt
from accelopt.nodes.state import CandidateState


def executor(state: CandidateState, runtime: Runtime[RunContext]) -> dict:
    task = task_of(state["task_dir"])
    attempt = new_attempt(state, f"{state['plan']['id']}.k{state['sample']}", None, 0)
    prompt = render("executor", task_name=task.name, task_description=task.spec.description,
                    reference=task.reference_source, source=kernel_text(state["parent"]),
                    plan=state["plan"]["text"], entry_point=task.spec.entry_point, **backend_parts(task))
    return {"fixes": 0, **generate(state, runtime.context, "executor", prompt, attempt)}
