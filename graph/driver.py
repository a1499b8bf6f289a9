"""Drive one run of the graph with a SQLite checkpoint in its run directory and a rich progress
bar: used by `accelopt optimize`, `accelopt resume` and the suite runner (`accelopt eval`)."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

from langgraph.checkpoint.sqlite import SqliteSaver
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from accelopt.nodes.context import RunContext
from accelopt.tools.llm import totals
from accelopt.tools.tracing import flush_traces


def drive(ctx: RunContext, run_dir: Path, inputs: dict | None, console: Console) -> dict:
    """Run (inputs given) or resume (inputs None) the graph with its checkpoint in run_dir, showing
    progress; return the final state."""
    from accelopt.graph.builder import build_graph  # heavy imports after argument checks

    with closing(sqlite3.connect(run_dir / "checkpoints.sqlite", check_same_thread=False)) as conn:
        graph = build_graph().compile(checkpointer=SqliteSaver(conn))
        config = {"configurable": {"thread_id": run_dir.resolve().name}, "recursion_limit": 10_000,
                  "run_name": "accelopt", "metadata": {"run_dir": str(run_dir.resolve()), **_task_metadata(run_dir)}}
        try:
            _stream_with_progress(graph, inputs, config, ctx, console)
        finally:
            flush_traces()
        return graph.get_state(config).values


def _task_metadata(run_dir: Path) -> dict:
    """Trace metadata every node and model call inherits: which task, which search shape."""
    try:
        meta = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        return {}
    ctx = meta.get("context") or {}
    return {"task": Path(meta.get("task_dir", "")).name,
            **{k: ctx.get(k) for k in ("beams", "plans", "samples", "fixes", "iterations", "model", "device")}}


def _stream_with_progress(graph, inputs, config, ctx: RunContext, console: Console) -> None:
    seen: dict[str, dict] = {}
    usage: list[dict] = []
    iteration, best = 0, 1.0
    columns = (SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task("measuring baseline", total=ctx.iterations, info="")
        for namespace, update in graph.stream(inputs, config, context=ctx, stream_mode="updates", subgraphs=True):
            for node, values in (update or {}).items():
                values = values or {}
                for cand in (values.get("candidates") or {}).values():
                    seen[cand["id"]] = cand
                if not namespace:  # top level only: the subgraph's usage reaches it through `candidate`
                    usage += values.get("usage") or []
                if node == "recall":
                    iteration = values.get("iteration", iteration)
                if node == "selector":
                    progress.advance(bar)
                    # The beam's head, not the largest median: a child within noise is no win.
                    best = seen.get(values["beam"][0], {}).get("speedup") or best
            spent = totals(usage)
            timer = "interpreter time" if any(c.get("timer") == "interpreter_wall" for c in seen.values()) else "GPU"
            progress.update(bar, description=f"iteration {iteration}/{ctx.iterations}", info=(
                f"{max(len(seen) - 1, 0)} evaluated · best {best:.2f}x ({timer}) · "
                f"{spent['input_tokens'] + spent['output_tokens']:,} tok · ${spent['cost_usd']:.4f}"))


