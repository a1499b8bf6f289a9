"""executor: write one full kernel for a plan. A reply with no usable code is a failed
candidate (status no_code, or truncated when the reply hit the token limit) that the fixer may
repair, never a crash."""

from __future__ import annotations

from langgraph.runtime import Runtime

from accelopt.nodes.common import task_of
from accelopt.nodes.context import RunContext
from accelopt.nodes.records import plan_draft
from accelopt.nodes.services import fill_attempt, new_attempt
from accelopt.nodes.state import CandidateState
from accelopt.policies.choice import policy_for
from accelopt.policies.interface import WriteRequest
from accelopt.tools.tracing import label_run


def executor(state: CandidateState, runtime: Runtime[RunContext]) -> CandidateState:
    parent = state["parent"]
    attempt = new_attempt(state, f"{state['plan']['id']}.k{state['sample']}", None, 0)
    label_run(attempt["id"])
    request = WriteRequest(task=task_of(state["task_dir"]), iteration=state["iteration"], candidate_id=attempt["id"],
                           source=None if parent.get("kind") == "reference" else parent["source"],
                           plan=plan_draft(state["plan"]))
    policy = policy_for(runtime.context, "executor", state.get("run_dir"))
    return {"fixes": 0, **fill_attempt(attempt, lambda: policy.write(request))}
