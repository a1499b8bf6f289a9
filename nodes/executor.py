"""executor: write one full kernel for a plan. A reply with no usable code is a failed
candidate (status no_code, or truncated when the reply hit the token limit) that the fixer may
repair, never a crash. Under --quorum, a reply that has not landed when the iteration's quorum of
replies has is no longer waited on: the attempt is in_flight, and the next iteration's branch for
it (entered here with that attempt) asks the very same call and collects it (tools/inflight.py)."""

from __future__ import annotations

from langgraph.runtime import Runtime

from accelopt.nodes.common import task_of
from accelopt.nodes.context import RunContext
from accelopt.nodes.records import plan_draft, with_outcome
from accelopt.nodes.services import fill_within_quorum, new_attempt
from accelopt.nodes.state import CandidateState
from accelopt.policies.choice import policy_for
from accelopt.policies.interface import WriteRequest
from accelopt.tools.tracing import label_run


def executor(state: CandidateState, runtime: Runtime[RunContext]) -> CandidateState:
    parent = state["parent"]
    waiting = state.get("current")  # in_flight: asked by an earlier iteration, collected here
    attempt = new_attempt(state, waiting["id"] if waiting else f"{state['plan']['id']}.k{state['sample']}", None, 0)
    label_run(attempt["id"])
    # asked as it was first asked (the iteration is part of the call's key): the same call, not another
    asked_in = state.get("asked_in") or state["iteration"]
    request = WriteRequest(task=task_of(state["task_dir"]), iteration=asked_in, candidate_id=attempt["id"],
                           source=None if parent.get("kind") == "reference" else parent["source"],
                           plan=plan_draft(state["plan"]))
    if state.get("unpaid"):  # the budget left cannot pay for the call: recorded, never sent
        return {"fixes": 0, "current": with_outcome(attempt, "not_sent", state["unpaid"]), "usage": []}
    policy = policy_for(runtime.context, "executor", state.get("run_dir"))
    return {"fixes": 0, **fill_within_quorum(state, attempt, asked_in, lambda: policy.write(request), counted=True)}
