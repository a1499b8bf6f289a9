"""`ast.parse` that is safe to call from several threads at once.

The graph runs its Send branches (planners, executors, profilers) in threads, and several of them
parse kernel sources. CPython 3.11 keeps the AST constructor's recursion depth in state shared by
the interpreter's threads (python/cpython#106905), so a parse that overlaps another can fail with
"SystemError: AST constructor recursion depth mismatch": a tuner planner branch failed that way in
a CI run here (3.11.7), and the run with it. One lock serializes our parses (milliseconds each);
a parse by other code in another thread can still collide, so that error, which says nothing
about the source, is retried."""

from __future__ import annotations

import ast
import threading
from typing import Any

_LOCK = threading.Lock()
_RETRIES = 3


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> Any:
    """ast.parse(source, filename, mode), one thread at a time; a SyntaxError is the source's."""
    with _LOCK:
        for attempt in range(_RETRIES):
            try:
                return ast.parse(source, filename=filename, mode=mode)
            except SystemError as exc:
                if "recursion depth mismatch" not in str(exc) or attempt == _RETRIES - 1:
                    raise
    raise AssertionError("unreachable")
