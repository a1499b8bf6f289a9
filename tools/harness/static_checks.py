"""Checks on a candidate's source that need no execution.

They run before any process is spawned, so an obviously unusable kernel costs nothing.
"""

from __future__ import annotations

import ast


def check_triton_source(source: str, entry_point: str) -> tuple[str, str] | None:
    """Return (status, message) when the source cannot be a valid candidate, else None."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        line = (e.text or "").strip()
        return "compile_error", f"SyntaxError: {e.msg} (line {e.lineno}: {line})"

    functions = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    jitted = {name for name, fn in functions.items() if any(_is_triton_jit(d) for d in fn.decorator_list)}
    if not jitted:
        return "compile_error", "no @triton.jit kernel is defined; the work must be done in a Triton kernel"
    entry = functions.get(entry_point)
    if entry is None or entry not in tree.body:
        return "compile_error", f"no top-level entry point `def {entry_point}(...)` is defined"
    launched = {
        sub.value.id
        for sub in ast.walk(entry)
        if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name)
    }
    if not (launched & jitted) and not _calls_any(entry, functions, jitted):
        return ("compile_error",
                f"`{entry_point}` never launches a @triton.jit kernel (expected `kernel[grid](...)`)")
    return None


def _is_triton_jit(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    text = ast.unparse(target)
    return text in {"triton.jit", "jit", "triton.autotune", "autotune", "triton.heuristics", "heuristics"}


def _calls_any(entry: ast.FunctionDef, functions: dict[str, ast.FunctionDef], jitted: set[str]) -> bool:
    """The entry may launch through a host-side helper: follow one level of plain calls."""
    called = {c.func.id for c in ast.walk(entry) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
    for name in called & set(functions):
        helper = functions[name]
        if any(isinstance(s, ast.Subscript) and isinstance(s.value, ast.Name) and s.value.id in jitted
               for s in ast.walk(helper)):
            return True
    return False
