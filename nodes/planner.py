"""planner: N plans (text) for one beam member, from the task, the kernel, its measurements and
the recalled insights. One branch per beam member (Send)."""

from __future__ import annotations

from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.runtime import Runtime

from accelopt.nodes.context import RunContext
from accelopt.nodes.state import PlannerInput
from accelopt.memory.schema import Insight
from accelopt.nodes.common import backend_parts, chat_model, kernel_text, render, task_of
from accelopt.nodes.measurements import describe
from accelopt.tools.codeparse import split_plans
from accelopt.tools.llm import LLMCallError, call_model


def planner(state: PlannerInput, runtime: Runtime[RunContext]) -> dict:
    ctx = runtime.context
    task = task_of(state["task_dir"])
    member = state["member"]
    insights = [Insight.model_validate(i) for i in state["recalled"]]
    prompt = render(
        "planner", task_name=task.name, task_description=task.spec.description,
        reference=task.reference_source, member_id=member["id"], source=kernel_text(member),
        measurements=describe(member), tried=state.get("tried") or "(none yet)", n=ctx.plans,
        iteration=state["iteration"], **backend_parts(task),
        insights="\n".join(f"- ({i.id}) {i.compact()}" for i in insights) or "(none yet)")
    model, spec = chat_model(ctx, "planner")
    messages = [SystemMessage(render("system", role="planner")), HumanMessage(prompt)]
    try:
        reply, usage = call_model(model, spec, messages, role="planner", iteration=state["iteration"],
                                  retry_wait_s=ctx.llm_retry_wait_s, run_dir=state.get("run_dir"))
    except LLMCallError as exc:
        return {"plans": [], "history": [{"iteration": state["iteration"], "event": "planner_failed",
                                          "member": member["id"], "error": str(exc)}]}
    texts = split_plans(reply, ctx.plans)
    plans = [{"id": f"i{state['iteration']}.m{state['member_index']}.p{j}", "parent_id": member["id"], "text": text,
              "insight_ids": [i.id for i in insights]}
             for j, text in enumerate(texts)]
    return {"plans": plans, "usage": [usage]}
