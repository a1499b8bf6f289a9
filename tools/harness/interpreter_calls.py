"""Triton's interpreter, spared re-patching the language on every nested @jit call.

The interpreter (TRITON_INTERPRET=1) patches triton.language's builtins at the start of a launch
and restores them at its end. A @jit function called from the kernel (Inductor's
`triton_helpers.maximum` inside a `tl.reduce`, a user's helper) patches them all again on every
call, walking each module with `inspect.getmembers`, and never restores that patch. In a reduction
with a helper combine function that is one patch per element pair: an Inductor softmax seed on a
3 x 130 input took 1.5 s per call, 3.6 s of each 4.7 s in the patching. Within one launch the
modules are already patched, so a nested call that sees no module the launch did not patch skips
it; everything else is Triton's own code, unchanged.

Loaded by path in the sandbox template (zygote.py), on the interpreter only: stdlib and Triton
imports, nothing from accelopt. `install()` does nothing where Triton's interpreter lacks the
names this relies on (another Triton version), so the worst case is Triton's own speed.
"""

from __future__ import annotations

import inspect
import threading

_launches = threading.local()  # per thread: a stack of the language modules each open launch patched


class _Patched:
    """The scope of a skipped patch: nothing to restore."""

    def restore(self) -> None:
        pass


def install() -> bool:
    """Patch Triton's interpreter in this process; whether it was patched."""
    try:
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        return False
    grid_executor = getattr(interpreter, "GridExecutor", None)
    patch_lang = getattr(interpreter, "_patch_lang", None)
    if grid_executor is None or patch_lang is None or getattr(patch_lang, "_accelopt", False):
        return getattr(patch_lang, "_accelopt", False)

    def languages(fn) -> frozenset[int]:
        return frozenset(id(v) for v in fn.__globals__.values() if inspect.ismodule(v) and v in (tl, tl.core))

    def once_per_launch(fn):
        stack = getattr(_launches, "stack", None)
        if stack:
            seen = stack[-1]
            if seen is not None and languages(fn) <= seen:
                return _Patched()
            stack[-1] = (seen or frozenset()) | languages(fn)
        return patch_lang(fn)

    launch = grid_executor.__call__

    def launch_once_patched(self, *args, **kwargs):
        stack = _launches.__dict__.setdefault("stack", [])
        stack.append(None)  # the launch's own patch comes first, and always runs
        try:
            return launch(self, *args, **kwargs)
        finally:
            stack.pop()

    once_per_launch._accelopt = True  # type: ignore[attr-defined]
    interpreter._patch_lang = once_per_launch
    grid_executor.__call__ = launch_once_patched
    return True
