"""fixer: repair a failed attempt from its error text. Each fix is a new attempt (id suffix .fN)
that goes back to the profiler; the loop ends when it verifies or F fixes are spent. Under
--quorum, a fix whose reply has not landed when the iteration's kernels met their quorum is
in_flight; the next iteration asks it again and collects the same call (tools/inflight.py)."""

from __future__ import annotations

from langgraph.runtime import Runtime

from accelopt.nodes.common import task_of
from accelopt.nodes.context import RunContext
from accelopt.nodes.records import plan_draft, with_outcome
from accelopt.nodes.services import fill_within_quorum, new_attempt
from accelopt.nodes.state import CandidateState
from accelopt.policies.choice import policy_for
from accelopt.policies.interface import FixRequest
from accelopt.policies.measurement_text import describe_findings
from accelopt.tools.tracing import label_run


def fixer(state: CandidateState, runtime: Runtime[RunContext]) -> CandidateState:
    failed, parent = state["current"], state["parent"]
    fixes = state["fixes"] + 1
    root_id = failed["id"].split(".f")[0]
    attempt = new_attempt(state, f"{root_id}.f{fixes}", failed["id"], fixes)
    label_run(attempt["id"])
    status = failed["status"]
    assert status is not None, f"{failed['id']} failed, so it has a status"
    asked_in = state.get("asked_in") or state["iteration"]  # a fix an earlier iteration stopped waiting for: as asked
    request = FixRequest(task=task_of(state["task_dir"]), iteration=asked_in, candidate_id=attempt["id"],
                         plan=plan_draft(state["plan"]),
                         parent_source=None if parent.get("kind") == "reference" else parent["source"],
                         source=failed.get("source"), status=status, error=failed.get("error") or "",
                         findings=describe_findings(failed.get("findings") or []))
    if state.get("unpaid"):  # the budget left cannot pay for the call: recorded, never sent
        return {"fixes": fixes, "current": with_outcome(attempt, "not_sent", state["unpaid"]), "usage": []}
    policy = policy_for(runtime.context, "fixer", state.get("run_dir"))
    return {"fixes": fixes, **fill_within_quorum(state, attempt, asked_in, lambda: policy.fix(request), counted=False)}
