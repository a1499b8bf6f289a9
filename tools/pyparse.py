"""`ast.parse` that is safe to call from several threads at once.

The graph runs its Send branches (planners, executors, profilers) in threads, and several of them
parse kernel sources. CPython 3.11 keeps the AST constructor's recursion depth in state shared by
the interpreter's threads (python/cpython#106905), so a parse that overlaps another can fail with
"SystemError: AST constructor recursion depth mismatch": a tuner planner branch failed that way in
a CI run here (3.11.7), and the run with it. One lock serializes our parses (milliseconds each);
a parse by other code in another thread can still collide, so that error, which says nothing
about the source, is retried.

A candidate's source is parsed once: `program`/`parsed` keep each text's tree by its digest, and
every reader of a kernel's source (tunables, the program key, the judge's KernelSource, the
policies) reads that one tree. `parse` stays for trees of one's own (snippets a rewrite splices
in, a file a converter edits)."""

from __future__ import annotations

import ast
import copy
import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

_LOCK = threading.Lock()
_RETRIES = 3


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> Any:
    """ast.parse(source, filename, mode), one thread at a time; a SyntaxError is the source's."""
    with _LOCK:
        return _parse(source, filename, mode)


def _parse(source: str, filename: str, mode: str) -> Any:
    for attempt in range(_RETRIES):
        try:
            return ast.parse(source, filename=filename, mode=mode)
        except SystemError as exc:
            if "recursion depth mismatch" not in str(exc) or attempt == _RETRIES - 1:
                raise
    raise AssertionError("unreachable")


# the shared parses, by the text's digest: the judge's static checks and audit, the program key
# taken before every measurement, the tunables every planner, measurement and summary reads, and
# the source rewrites all read a kernel's text through `program`
_PROGRAMS: OrderedDict[str, Program] = OrderedDict()
# the least recently read dropped first past either bound: a tree takes about 30 bytes a character
# of its text (0.3 MB for a 10 KB kernel), so the cache holds at most some 60 MB of trees
_KEEP, _KEEP_CHARS = 128, 2_000_000
_kept_chars = 0


@dataclass(frozen=True, eq=False)
class Program:
    """A source's one parse, shared by every reader of the text: its syntax tree (None where it does
    not parse, `error` then says why). Read the tree, never change it: a reader that transforms it
    changes a `copy.deepcopy` of the nodes it takes (kernel_ast.triton_module's rewrites do)."""

    text: str
    digest: str
    tree: ast.Module | None = field(repr=False)
    error: SyntaxError | ValueError | None = field(default=None, repr=False)

    def module(self) -> ast.Module:
        """The tree, or the parse's own error raised afresh (a SyntaxError, as `parse` raises it)."""
        if self.tree is None:
            assert self.error is not None
            raise copy.copy(self.error)  # a new exception each time: no traceback piled on a shared one
        return self.tree

    @cached_property
    def dump(self) -> str:
        """ast.dump of the tree: what two sources that differ only in comments and layout share."""
        return ast.dump(self.module())


def source_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def program(text: str) -> Program:
    """The text's one parse (module mode), shared: parsed on the first call, then read from the
    cache. The tree is not to be changed (see Program)."""
    global _kept_chars
    key = source_digest(text)
    with _LOCK:
        found = _PROGRAMS.get(key)
        if found is not None:
            _PROGRAMS.move_to_end(key)
            return found
        try:
            found = Program(text, key, _parse(text, "<unknown>", "exec"))
        except (SyntaxError, ValueError) as exc:
            found = Program(text, key, None, exc.with_traceback(None))
        _PROGRAMS[key] = found
        _kept_chars += len(text)
        while len(_PROGRAMS) > 1 and (len(_PROGRAMS) > _KEEP or _kept_chars > _KEEP_CHARS):
            _kept_chars -= len(_PROGRAMS.popitem(last=False)[1].text)
        return found


def forget() -> None:
    """Drop every kept parse (tests start from none)."""
    global _kept_chars
    with _LOCK:
        _PROGRAMS.clear()
        _kept_chars = 0


def parsed(text: str) -> ast.Module:
    """The text's shared syntax tree (`program(text).module()`): raises the SyntaxError (or
    ValueError) `parse` would. Read it, never change it; `parse` gives a tree of one's own."""
    return program(text).module()
