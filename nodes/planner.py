"""planner: N plans for one beam member, from the task, the kernel, its measurements, what this
run measured already and the recalled insights. One branch per beam member (Send)."""

from __future__ import annotations

from langgraph.runtime import Runtime

from accelopt.memory.schema import Insight
from accelopt.nodes.common import task_of
from accelopt.nodes.context import RunContext
from accelopt.nodes.measurements import describe
from accelopt.nodes.policies import policy_for
from accelopt.nodes.records import plan_record
from accelopt.nodes.state import PlannerInput
from accelopt.tools.llm import BudgetExceeded
from accelopt.tools.policy import PlanRequest, PolicyError


def planner(state: PlannerInput, runtime: Runtime[RunContext]) -> dict:
    ctx = runtime.context
    member = state["member"]
    insights = [Insight.model_validate(i) for i in state["recalled"]]
    request = PlanRequest(task=task_of(state["task_dir"]), iteration=state["iteration"], member_id=member["id"],
                          source=None if member.get("kind") == "reference" else member["source"],
                          measurements=describe(member), tried=state["tried"], lessons=insights, n=ctx.plans)
    try:
        answer = policy_for(ctx, "planner", state.get("run_dir")).plan(request)
    except PolicyError as exc:
        # not called for the budget: skipped, not failed (a run whose every planner failed failed)
        event = "planner_skipped" if isinstance(exc.__cause__, BudgetExceeded) else "planner_failed"
        return {"plans": [], "history": [{"iteration": state["iteration"], "event": event,
                                          "member": member["id"], "error": str(exc)}]}
    plans = [plan_record(f"i{state['iteration']}.m{state['member_index']}.p{j}", member["id"], draft,
                         [i.id for i in insights])
             for j, draft in enumerate(answer.plans)]
    return {"plans": plans, "usage": [answer.usage] if answer.usage else []}
