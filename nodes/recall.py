"""recall: start an iteration; fetch the lessons that fit each beam member from memory."""

from __future__ import annotations

from langgraph.runtime import Runtime
from langgraph.types import Overwrite

from graph.context import RunContext
from graph.state import RunState
from memory.store import InsightStore
from nodes.common import task_of
from nodes.measurements import describe


def open_store(ctx: RunContext) -> InsightStore | None:
    return InsightStore(ctx.memory_dir) if ctx.use_memory else None


def recall(state: RunState, runtime: Runtime[RunContext]) -> dict:
    ctx = runtime.context
    task = task_of(state["task_dir"])
    store = open_store(ctx)
    recalled: dict[str, list[dict]] = {}
    for member_id in state["beam"]:
        member = state["candidates"][member_id]
        if store is None:
            recalled[member_id] = []
            continue
        query = f"{task.spec.description}\n{describe(member)}\n{member.get('source') or ''}"
        hits = store.recall(query, backend=task.spec.backend, timer=member.get("timer") or "", k=ctx.recall_k)
        recalled[member_id] = [h.model_dump() for h in hits]
    # Per-iteration accumulator: reset deliberately, in a step of its own.
    return {"iteration": state["iteration"] + 1, "recalled": recalled, "plans": Overwrite([])}
