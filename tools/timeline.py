"""Where a run's seconds go: spans appended to the run directory's `timeline.jsonl`.

One line per span, written when it ends: `kind` (`node`: a graph node's call; `llm`: a model
call that reached a server; `eval`: a harness evaluation, its judge's steps in `phases_s`;
`profile`: the planner's profile of a verified kernel), wall-clock `start` and `end`, and what
the span was about (node name, role, candidate, iteration). Replayed replies and cached
evaluations cost nothing and write nothing. `evals/reporting/timeline.py` reads the file: per
iteration, the time spent waiting on models, the time a GPU was held, and evaluations a minute.

Appends are one `write` of one line under a process-wide lock, in append mode: threads of one run
(and a resumed run's process after a killed one) never interleave a line.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

FILE = "timeline.jsonl"
_lock = threading.Lock()


def append(run_dir: str | Path | None, record: dict[str, Any]) -> None:
    """One span, as it ended; nothing where the run has no directory (graph.invoke without one)."""
    if not run_dir:
        return
    path = Path(run_dir) / FILE
    line = json.dumps(record, default=str) + "\n"
    with _lock:
        try:
            with path.open("a") as f:
                f.write(line)
        except OSError:  # the run directory went away under a test or a user: timing is not worth a crash
            pass


@contextmanager
def span(run_dir: str | Path | None, kind: str, **fields: Any) -> Iterator[dict[str, Any]]:
    """Time the block; the yielded dict takes fields known only at its end (a status, phases).
    A block that raised is still recorded, with `error` set to the exception's class."""
    extra: dict[str, Any] = {}
    start = time.time()
    try:
        yield extra
    except BaseException as exc:
        extra.setdefault("error", type(exc).__name__)
        raise
    finally:
        append(run_dir, {"kind": kind, "start": round(start, 3), "end": round(time.time(), 3), **fields, **extra})


def read(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every span of the run, in the order written; a line torn by a kill is skipped."""
    path = Path(run_dir) / FILE
    if not path.is_file():
        return []
    spans = []
    for line in path.read_text().splitlines():
        try:
            spans.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return spans


def timed_node(name: str, node: Callable[..., Any]) -> Callable[..., Any]:
    """A graph node whose calls are spans of kind `node` in its run's timeline. The wrapper keeps
    the node's signature (LangGraph reads it for `runtime`) and its annotations' module (its state
    schema): `functools.wraps`."""

    @functools.wraps(node)
    def timed(state: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.time()
        result: Any = None
        try:
            result = node(state, *args, **kwargs)
            return result
        finally:
            out = result if isinstance(result, dict) else {}
            run_dir = state.get("run_dir") or out.get("run_dir")
            append(run_dir, {"kind": "node", "node": name, "iteration": out.get("iteration", state.get("iteration")),
                             "start": round(start, 3), "end": round(time.time(), 3)})

    return timed
