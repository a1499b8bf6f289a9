"""Drive one run of the graph with a SQLite checkpoint in its run directory and a live display
(graph/progress.py): used by `accelopt optimize`, `accelopt resume` and the suite runner (`accelopt eval`).

A finished step is never redone. It holds the run directory's lock (tools/rundir.py) for the
process's life and uses the checkpoint thread named in run.json, so a copied directory resumes;
where the run directory or the task moved, the paths stored in the checkpoint are rewritten
(`_relocate`). A finished run that the selector's rule would not stop under the resumed context (a
larger T, a fatal model error) is reopened as `record` (`_reopen_if_extended`). As each iteration's
record lands only what a resume reads is kept (`prune_checkpoints`: the latest `KEEP_CHECKPOINTS`
and their writes), and the file is vacuumed at the run's end: every checkpoint holds the whole
candidate map. Every iteration's plans are in plans.jsonl (the record node), not old checkpoints.
Plan review: `drive(..., on_plans=callable)` answers the dispatch node's interrupt; without one the
plans run as proposed."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command, Overwrite, Send
from rich.console import Console

from accelopt.graph.progress import LiveDisplay
from accelopt.nodes.context import RunContext
from accelopt.tools.budget import ledger
from accelopt.tools.llm_spec import totals
from accelopt.tools.run_record import run_summary, write_summary
from accelopt.tools.rundir import lock_run_dir
from accelopt.tools.tracing import flush_traces, task_label

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

    from accelopt.nodes.state import RunState

PlanReviewer = Callable[[list[dict]], list[dict]]  # the iteration's plans -> the plans to run


def drive(ctx: RunContext, run_dir: Path, inputs: dict | None, console: Console,
          on_plans: PlanReviewer | None = None) -> dict:
    """Run (inputs given) or resume (inputs None) the graph with its checkpoint in run_dir, showing
    progress; return the final state. Holds run_dir's lock until the process exits.

    With `ctx.review_plans`, each iteration pauses after its planners: `on_plans(plans)` returns
    the plans to run (edited, fewer, [] to skip the iteration's kernels), checked here before the
    run resumes with them (a malformed answer raises PlanReviewError and the run stays paused,
    resumable); without on_plans the proposed plans run as they are."""
    lock_run_dir(run_dir)
    meta = _run_meta(run_dir)
    _start_judge(ctx, (inputs or {}).get("task_dir") or meta.get("task_dir"))
    from accelopt.graph.builder import compile_graph  # heavy imports after argument checks

    with closing(sqlite3.connect(run_dir / "checkpoints.sqlite", check_same_thread=False)) as conn:
        saver = SqliteSaver(conn)
        graph = compile_graph(checkpointer=saver)
        config: RunnableConfig = {
            "configurable": {"thread_id": thread_id(run_dir, meta, conn)}, "recursion_limit": 10_000,
            "run_name": "accelopt", "metadata": {"run_dir": str(run_dir.resolve()), **_task_metadata(meta)}}
        if inputs is None:
            _relocate(saver, graph, config, run_dir, meta)
            _reopen_if_extended(graph, config, ctx)
        try:
            payload: dict | Command | None = inputs
            while True:
                _stream_with_progress(graph, payload, config, ctx, console,
                                      on_iteration=lambda: prune_checkpoints(saver, config))
                review = pending_plan_review(graph, config)
                if review is None:
                    break
                payload = Command(resume=answer_plan_review(review, on_plans))
        finally:
            flush_traces()
        prune_checkpoints(saver, config, vacuum=True)
        state = graph.get_state(config).values
        if inputs is None and state.get("stop_reason") and state.get("beam") and state.get("run_dir"):
            # A resume that found the graph already finished ran no `record`: summary.json may
            # still be the one written mid-run (stop_reason null), which eval reads as unfinished.
            # The standing node's figure (torch.compile) lives in the state's summary: kept, not re-measured.
            summary = run_summary(state).with_standing((state.get("summary") or {}).get("versus_torch_compile"))
            write_summary(state["run_dir"], summary, state["candidates"][state["beam"][0]].get("source"))
        return state


def pending_plan_review(graph, config: RunnableConfig) -> dict | None:
    """The plan-review interrupt the run is paused at, if any: its payload (plans, beam, iteration)."""
    from accelopt.nodes.planner import REVIEW

    for pending in graph.get_state(config).interrupts:
        if isinstance(pending.value, dict) and pending.value.get("review") == REVIEW:
            return pending.value
    return None


def answer_plan_review(review: dict, on_plans: PlanReviewer | None) -> list[dict]:
    """The resume value for a plan-review interrupt: on_plans' answer, checked (PlanReviewError,
    with what is wrong, before the graph sees it); the proposed plans when nobody reviews. (A
    payload with `error` was answered badly elsewhere, e.g. in Studio: it is simply asked again.)"""
    from accelopt.nodes.planner import reviewed_plans

    if on_plans is None:
        return review["plans"]
    answer = on_plans([dict(p) for p in review["plans"]])
    reviewed_plans(answer, review["plans"], review["beam"], review["iteration"])  # raises with the reason
    return answer


def _start_judge(ctx: RunContext, task_dir: str | None) -> None:
    """The local judge the run's first evaluation (its baseline's) will get, started before the
    graph's imports and setup, so that they overlap its start; not for a Ray cluster's runs or a
    backend other than Triton's, nor where the task does not load (setup says why)."""
    from accelopt.nodes.common import task_of
    from accelopt.tools.harness.runner import start_first_judge
    from accelopt.tools.task import TaskError

    if ctx.ray_address or not task_dir:
        return
    try:
        if task_of(task_dir).spec.backend != "triton":
            return
    except (TaskError, OSError):
        return
    start_first_judge(ctx.device if ctx.device in ("cuda", "cpu") else None)


def _run_meta(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        return {}


def thread_id(run_dir: Path, meta: dict, conn: sqlite3.Connection) -> str:
    """The checkpoint thread: run.json's; for a run directory from before run.json named it, the
    only thread its checkpoint holds (a copy's name is not the original's), else the folder's name."""
    if meta.get("thread_id"):
        return str(meta["thread_id"])
    try:
        threads = [r[0] for r in conn.execute("SELECT DISTINCT thread_id FROM checkpoints LIMIT 2")]
    except sqlite3.DatabaseError:
        threads = []
    return threads[0] if len(threads) == 1 else run_dir.resolve().name


def _relocate(saver: SqliteSaver, graph, config: RunnableConfig, run_dir: Path, meta: dict) -> None:
    """A copied or moved run directory, or a task moved with `resume --task`: the checkpoints
    (state, pending Sends, subgraph states) still name the old folders, and nodes write and read
    where they say. Rewrite those paths in place, so the run goes on where it is now."""
    state = graph.get_state(config).values
    moves = {old: new for old, new in ((state.get("run_dir"), str(run_dir.resolve())),
                                       (state.get("task_dir"), meta.get("task_dir")))
             if old and new and old != new}
    if not moves:
        return
    thread = config["configurable"]["thread_id"]
    with saver.conn:  # one transaction: all rows moved, or none
        for table, column in (("checkpoints", "checkpoint"), ("writes", "value")):
            rows = saver.conn.execute(f"SELECT rowid, type, {column} FROM {table} WHERE thread_id = ?",
                                      (thread,)).fetchall()
            for rowid, kind, blob in rows:
                value = saver.serde.loads_typed((kind, blob))
                moved = _moved(value, moves)
                if moved != value:
                    saver.conn.execute(f"UPDATE {table} SET type = ?, {column} = ? WHERE rowid = ?",
                                       (*saver.serde.dumps_typed(moved), rowid))


def _moved(value: Any, moves: dict[str, str]) -> Any:
    """value with every path under an old folder re-rooted at its new one (whole strings only:
    a message that quotes a path is history, not a place to write)."""
    if isinstance(value, str):
        for old, new in moves.items():
            if value == old or value.startswith(old + "/"):
                return new + value[len(old):]
        return value
    if isinstance(value, dict):
        return {k: _moved(v, moves) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_moved(v, moves) for v in value)
    if isinstance(value, Send):
        return Send(value.node, _moved(value.arg, moves))
    if isinstance(value, Overwrite):
        return Overwrite(_moved(value.value, moves))
    return value


def _reopen_if_extended(graph, config: RunnableConfig, ctx: RunContext) -> None:
    """A finished run resumed with a larger T goes on (so does one a fatal model error stopped,
    once resumed): if the selector's stopping rule, under the new context, would not have stopped
    it, the stop is undone as though `record` had routed back to `recall`, and the search
    continues from its last beam."""
    from accelopt.nodes.selector import stop_reason

    snapshot = graph.get_state(config)
    state = snapshot.values
    if snapshot.next or not state.get("beam") or not state.get("stop_reason"):
        return  # still under way, or stopped before any search (setup refused the task)
    best = state["candidates"][state["beam"][0]]
    # the iteration a model failure cut short runs again (its answered calls replay from the run's
    # cache, its measured kernels from the measurement cache; the failed calls are made again)
    again: RunState = {"iteration": state["iteration"] - 1} if state.get("fatal") else {}
    if stop_reason({**state, **again}, ctx, best, totals(state.get("usage", []))) is None:
        ledger(state.get("run_dir")).reopen()
        graph.update_state(config, {"stop_reason": None, "fatal": None, **again}, as_node="record")


def _task_metadata(meta: dict) -> dict:
    """Trace metadata every node and model call inherits: which task, which search shape."""
    if not meta:
        return {}
    ctx = meta.get("context") or {}
    return {"task": task_label(meta.get("task_dir") or ""),
            **{k: ctx.get(k) for k in ("beams", "plans", "samples", "fixes", "iterations", "model", "device")}}


def _stream_with_progress(graph, inputs, config, ctx: RunContext, console: Console,
                          on_iteration: Callable[[], None] | None = None) -> None:
    """Run the graph until it ends or pauses, showing what it does (graph/progress.py): the node
    updates give the phase and each candidate's result, the nodes' custom events setup's steps and
    the evaluations in flight. `on_iteration` is called as each iteration's record lands."""
    done = None if isinstance(inputs, dict) else graph.get_state(config).values  # a resumed run counts on
    with LiveDisplay(console, ctx, done) as display:
        for namespace, mode, chunk in graph.stream(inputs, config, context=ctx, stream_mode=["updates", "custom"],
                                                   subgraphs=True):
            display.feed(namespace, mode, chunk)
            if on_iteration is not None and not namespace and mode == "updates" and "record" in chunk:
                on_iteration()


KEEP_CHECKPOINTS = 4  # the run's latest checkpoints kept at each iteration's end (resume needs the last)


def prune_checkpoints(saver: SqliteSaver, config: RunnableConfig, vacuum: bool = False) -> None:
    """Drop what no resume reads: the run's older checkpoints (each holds the whole candidate map,
    so a T=16 run at B=2 N=4 K=2 grew its file to 237 MB on an H100, quadratic in candidates) and
    every checkpoint of the candidate subgraphs, which have all ended when an iteration's record
    lands; then the writes of checkpoints that are gone. `vacuum` gives the pages back to the
    file system (at the run's end). The latest checkpoints and their pending writes stay, so a
    kill at any moment resumes as before."""
    thread = config["configurable"]["thread_id"]
    try:
        _prune(saver, thread, vacuum)
    except sqlite3.OperationalError:  # no checkpoint written yet (no tables), or the file is busy: next time
        pass


def _prune(saver: SqliteSaver, thread: str, vacuum: bool) -> None:
    with saver.lock, saver.conn:  # one transaction, the saver's own lock
        saver.conn.execute(
            "DELETE FROM checkpoints WHERE thread_id = ? AND (checkpoint_ns != '' OR checkpoint_id NOT IN "
            "(SELECT checkpoint_id FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = '' "
            "ORDER BY checkpoint_id DESC LIMIT ?))", (thread, thread, KEEP_CHECKPOINTS))
        saver.conn.execute(
            "DELETE FROM writes WHERE thread_id = ? AND NOT EXISTS (SELECT 1 FROM checkpoints c WHERE "
            "c.thread_id = writes.thread_id AND c.checkpoint_ns = writes.checkpoint_ns AND "
            "c.checkpoint_id = writes.checkpoint_id)", (thread,))
    if vacuum:
        with saver.lock:
            saver.conn.execute("VACUUM")
