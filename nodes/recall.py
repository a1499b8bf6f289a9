"""recall: start an iteration; fetch the lessons that fit each beam member from memory."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.runtime import Runtime
from langgraph.types import Overwrite

from accelopt.memory.features import kernel_class, kernel_features
from accelopt.nodes.common import task_of
from accelopt.nodes.context import RunContext
from accelopt.nodes.records import InsightRecord, LessonsDue, insight_record, plans_after, plans_of
from accelopt.nodes.services import open_store
from accelopt.nodes.state import RunState
from accelopt.tools.tunables import config_of


def recall_query(description: str, member: Mapping[str, Any]) -> str:
    """The task, what the kernel is, and what limits it."""
    bottleneck = member.get("profile") or ", ".join(
        sorted({t.get("bound") or "" for t in (member.get("workloads") or {}).values()} - {""}))
    return f"{description}\nKernel: {kernel_features(member.get('source') or '')}\nBottleneck: {bottleneck}"


def recall(state: RunState, runtime: Runtime[RunContext]) -> dict:
    ctx = runtime.context
    task = task_of(state["task_dir"])
    store = open_store(ctx)
    recalled: dict[str, list[InsightRecord]] = {}
    for member_id in state["beam"]:
        member = state["candidates"][member_id]
        if store is None:
            recalled[member_id] = []
            continue
        hits = store.recall(recall_query(task.spec.description, member), backend=task.spec.backend,
                            timer=member.get("timer"), k=ctx.recall_k,
                            kernel_class=kernel_class(member.get("source") or ""),
                            config=config_of(member.get("source") or ""))
        recalled[member_id] = [insight_record(h) for h in hits]
    # Per-iteration accumulator: reset deliberately, in a step of its own. Under the schedules that
    # overlap, the iteration just ended is kept as it stood: its lessons run beside the next one's
    # planners (or kernels); under the pipeline schedule the plans made ahead for the new one stay.
    n = state["iteration"]
    plans = state.get("plans") or []
    due = (LessonsDue(iteration=n, plans=plans_of(plans, n), beam=list(state["beam"]))
           if ctx.schedule.lessons != "after_selection" and n > 0 else None)
    ahead = plans_after(plans, n) if ctx.schedule.plans_ahead else []
    return {"iteration": n + 1, "recalled": recalled, "plans": Overwrite(ahead), "lessons_due": due}
