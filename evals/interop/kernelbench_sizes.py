"""The sizes of a KernelBench problem: its module-level assignments (`N = 2048 * 2`,
`groups = in_channels`, `depth, height, width = (16, 32, 32)`, `bias_shape = (out_channels, 1, 1)`,
`layers = [3, 4, 23, 3]`), re-evaluated in file order so that a size computed from another follows
it when that one is overridden.

A knob is every number such an assignment binds: `N`, or one element of a tuple or list, named
`bias_shape[0]`. A knob is free when its own expression names no other size (`2048 * 2`, the 1 in
`(out_channels, 1, 1)`); the others follow the knobs they name unless overridden themselves.

Copied beside reference.py into every imported task: no imports beyond the standard library.
"""

from __future__ import annotations

import ast
import builtins
from typing import Any

Number = int | float
# What a size expression may call: `[1024] * 16`, `int(...)`, `max(...)`; never the problem's code.
_SAFE = {n: getattr(builtins, n) for n in ("int", "float", "tuple", "list", "len", "range", "min", "max", "abs",
                                           "round", "sum", "pow", "divmod")}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _bindings(node: ast.stmt) -> list[tuple[list[str], ast.expr]]:
    """(names bound, value) for each target of `a = ...`, `a = b = ...`, `a: int = ...`, `a, b = ...`."""
    if isinstance(node, ast.Assign):
        targets, value = node.targets, node.value
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        targets, value = [node.target], node.value
    else:
        return []
    out = []
    for target in targets:
        if isinstance(target, ast.Name):
            out.append(([target.id], value))
        elif isinstance(target, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Name) for e in target.elts):
            out.append(([e.id for e in target.elts], value))  # type: ignore[attr-defined]
    return out


def assignments(tree: ast.Module) -> list[tuple[list[str], ast.expr]]:
    return [b for node in tree.body for b in _bindings(node)]


def _eval(expr: ast.expr, env: dict[str, Any]) -> Any:
    code = compile(ast.Expression(expr), "<kernelbench sizes>", "eval")
    return eval(code, {"__builtins__": _SAFE, **env})  # noqa: S307 - only the file's own size expressions


def _with_overrides(name: str, value: Any, overrides: dict[str, Number]) -> Any:
    if _is_number(value):
        return overrides.get(name, value)
    if isinstance(value, (tuple, list)):
        items = [overrides.get(f"{name}[{i}]", v) if _is_number(v) else v for i, v in enumerate(value)]
        return type(value)(items)
    return value


def evaluate(tree: ast.Module, overrides: dict[str, Number] | None = None) -> dict[str, Any]:
    """Every size the module binds, in file order, with `overrides` applied where each is bound,
    so later sizes see them. Assignments that are not sizes (calls into the problem's code) are skipped."""
    overrides = overrides or {}
    env: dict[str, Any] = {}
    for names, value in assignments(tree):
        try:
            result = _eval(value, env)
        except Exception:  # noqa: BLE001 - not a size expression (calls the module's own functions)
            continue
        if len(names) == 1:
            bound = {names[0]: result}
        elif isinstance(result, (tuple, list)) and len(result) == len(names):
            bound = dict(zip(names, result))
        else:
            continue
        for name, item in bound.items():
            if _is_number(item) or _is_sequence_of_sizes(item):
                env[name] = _with_overrides(name, item, overrides)
    return env


def _is_sequence_of_sizes(value: Any) -> bool:
    return isinstance(value, (tuple, list)) and any(_is_number(v) for v in value)


def flatten(sizes: dict[str, Any]) -> dict[str, Number]:
    """Knob name -> value: `N`, and `kernel_size[0]` for each number in a tuple or list."""
    out: dict[str, Number] = {}
    for name, value in sizes.items():
        if _is_number(value):
            out[name] = value
        elif isinstance(value, (tuple, list)):
            out.update({f"{name}[{i}]": v for i, v in enumerate(value) if _is_number(v)})
    return out


def _names(expr: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)} - set(_SAFE)


def _literal(expr: ast.expr) -> list[ast.expr] | None:
    if isinstance(expr, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in expr.elts):
        return list(expr.elts)
    return None


def dependencies(tree: ast.Module) -> dict[str, set[str]]:
    """Knob -> the sizes its expression names (empty: a free knob). Element-wise where the value
    is a tuple or list literal, so the 1 in `(out_channels, 1, 1)` stays free."""
    sizes = evaluate(tree)
    known = set(sizes)
    deps: dict[str, set[str]] = {}
    for names, value in assignments(tree):
        parts = _literal(value)
        for j, name in enumerate(names):
            if name not in sizes:
                continue
            own = parts[j] if len(names) > 1 and parts is not None and len(parts) == len(names) else value
            elements = _literal(own)
            if elements is not None:  # `shape = (c, 1, 1)`: each element its own
                deps.update({f"{name}[{i}]": _names(e) & known for i, e in enumerate(elements)})
            else:
                used = _names(own) & known
                deps.update({key: used for key in flatten({name: sizes[name]})})
    knobs = flatten(sizes)
    return {k: v for k, v in deps.items() if k in knobs}


def free_knobs(tree: ast.Module) -> dict[str, Number]:
    """The knobs that name no other size, with their values in the file: a workload's params.
    An integer at or below zero (`padding = 0`, `dim = -1`, NetVLAD's `ghost_clusters = 0`) is no
    size to shrink, and a task's sizes must be positive: it stays as the file has it (an
    --interpreter-param override can still set it)."""
    deps = dependencies(tree)
    return {k: v for k, v in flatten(evaluate(tree)).items()
            if not deps.get(k) and not (isinstance(v, int) and v <= 0)}
