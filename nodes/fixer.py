"""fixer: repair a failed attempt from its error text. Each fix is a new attempt (id suffix .fN)
that goes back to the profiler; the loop ends when it verifies or F fixes are spent."""

from __future__ import annotations

from langgraph.runtime import Runtime

from accelopt.nodes.context import RunContext
from accelopt.nodes.state import CandidateState
from accelopt.nodes.common import backend_parts, render, task_of
from accelopt.nodes.services import generate, new_attempt
from accelopt.nodes.measurements import describe_findings


def fixer(state: CandidateState, runtime: Runtime[RunContext]) -> dict:
    task = task_of(state["task_dir"])
    failed = state["current"]
    fixes = state["fixes"] + 1
    root_id = failed["id"].split(".f")[0]
    attempt = new_attempt(state, f"{root_id}.f{fixes}", failed["id"], fixes)
    prompt = render("fixer", task_name=task.name, task_description=task.spec.description,
                    reference=task.reference_source, plan=state["plan"]["text"],
                    source=failed.get("source") or "(no kernel was produced)",
                    status=failed["status"], error=failed.get("error") or "",
                    findings=describe_findings(failed.get("findings") or []) or "(no static findings)",
                    entry_point=task.spec.entry_point, **backend_parts(task))
    return {"fixes": fixes, **generate(state, runtime.context, "fixer", prompt, attempt)}
