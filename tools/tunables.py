"""A Triton kernel's launch tunables, found and edited through the AST.

A tunable ("knob") is an integer that picks a configuration without changing what the kernel
computes: `num_warps`, `num_stages`, and `tl.constexpr` tile sizes (BLOCK*, TILE*, GROUP*...).
Where it lives:
- a launch keyword `kernel[grid](..., BLOCK=256, num_warps=4)`;
- a launch keyword naming a constant, `BLOCK=BLOCK` with `BLOCK = 256` at module level or in
  the launching function (then the grid that reads it moves with it);
- a `BLOCK: tl.constexpr = 128` default in the @triton.jit signature that no launch overrides;
- Triton's own defaults when no launch passes them (num_warps=4; num_stages=3 for a kernel
  with a loop to pipeline), inserted into the launch when moved.
Shape constants (D=128, PAGE=16) are not tunables: moving them changes the computation.
Edits splice the new value into the exact source span, so formatting and comments survive.
"""

from __future__ import annotations

import ast
import itertools
import math
import re
from dataclasses import dataclass, field

TILE_NAME = re.compile(r"(?i)^(num_warps|num_stages)$|block|tile|chunk|split|group|_size$|^b[mnk]$")
IMPLICIT_DEFAULTS = {"num_warps": 4, "num_stages": 3}
LIMITS = {"num_warps": (1, 32), "num_stages": (1, 7)}
_GROUP_LIMITS = (1, 64)     # GROUP_M, SPLIT_K: small counts, not tile sizes
_TILE_LIMITS = (16, 65536)  # tl.arange extents: powers of two; below 16 rarely pays


@dataclass
class Knob:
    name: str
    value: int
    sites: list[ast.Constant] = field(default_factory=list)   # spans to rewrite; empty when implicit
    launches: list[ast.Call] = field(default_factory=list)    # where to insert an implicit knob

    @property
    def implicit(self) -> bool:
        return not self.sites


def limits(name: str) -> tuple[int, int]:
    if name in LIMITS:
        return LIMITS[name]
    return _GROUP_LIMITS if re.search(r"(?i)group|split", name) else _TILE_LIMITS


def _is_int(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _launches(tree: ast.AST) -> list[tuple[ast.Call, ast.AST | None]]:
    """`kernel[grid](...)` calls, each with the function that contains it (None: module level)."""
    found = []

    def visit(node: ast.AST, owner: ast.AST | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else owner
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Subscript):
                found.append((child, owner))
            visit(child, inner)

    visit(tree, None)
    return found


def _int_assignments(body: list[ast.stmt], nested: bool) -> tuple[dict[str, ast.Constant], set[str]]:
    """`NAME = <int>` assigned exactly once in a block, and every name the block assigns at all.
    Module level: its own statements only; a function: its nested blocks too, not inner functions."""
    seen: dict[str, list[ast.AST]] = {}

    def visit(stmts: list[ast.AST]) -> None:
        for node in stmts:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                continue
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for name in ast.walk(t):
                        if isinstance(name, ast.Name):
                            seen.setdefault(name.id, []).append(node)
            elif isinstance(node, (ast.For, ast.With)) and nested:
                for name in ast.walk(node.target if isinstance(node, ast.For) else node):
                    if isinstance(name, ast.Name) and isinstance(name.ctx, ast.Store):
                        seen.setdefault(name.id, []).append(node)
            if nested:
                visit(list(ast.iter_child_nodes(node)))

    visit(body)
    consts = {}
    for name, nodes in seen.items():
        node = nodes[0]
        if len(nodes) == 1 and isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None \
                and _is_int(node.value):
            consts[name] = node.value
    return consts, set(seen)


def _jit_functions(tree: ast.Module) -> list[ast.FunctionDef]:
    def is_jit(dec: ast.AST) -> bool:
        text = ast.unparse(dec)
        return text.endswith("jit") or ".jit(" in text or text.startswith("triton.autotune")
    return [n for n in tree.body if isinstance(n, ast.FunctionDef) and any(is_jit(d) for d in n.decorator_list)]


def _autotuned(tree: ast.Module) -> bool:
    return any("autotune" in ast.unparse(d) for f in _jit_functions(tree) for d in f.decorator_list)


def find_knobs(source: str) -> dict[str, Knob]:
    """Every tunable of the source, in order of first appearance. Empty if it does not parse, or
    if its kernels are already under @triton.autotune (the autotuner owns those choices)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    if _autotuned(tree):
        return {}
    module_consts, _ = _int_assignments(tree.body, nested=False)
    knobs: dict[str, Knob] = {}
    launches = _launches(tree)
    for call, owner in launches:
        local_consts, local_names = _int_assignments(owner.body, nested=True) if owner is not None else ({}, set())
        for kw in call.keywords:
            if not kw.arg or not TILE_NAME.search(kw.arg):
                continue
            const = kw.value if _is_int(kw.value) else None
            if isinstance(kw.value, ast.Name):
                # a name the function assigns shadows the module's constant, even if not an int
                scope = local_consts if kw.value.id in local_names else module_consts
                const = scope.get(kw.value.id)
            if const is not None:
                knob = knobs.setdefault(kw.arg, Knob(kw.arg, const.value))
                if all(const is not s for s in knob.sites):
                    knob.sites.append(const)
    passed = {kw.arg for call, _ in launches for kw in call.keywords if kw.arg}
    jitted = _jit_functions(tree)
    for fn in jitted:
        args = fn.args.args[len(fn.args.args) - len(fn.args.defaults):]
        for arg, default in zip(args, fn.args.defaults):
            if arg.arg not in passed and _is_int(default) and TILE_NAME.search(arg.arg) \
                    and arg.annotation is not None and "constexpr" in ast.unparse(arg.annotation):
                knobs.setdefault(arg.arg, Knob(arg.arg, default.value, [default]))
    if launches:
        has_loop = any(isinstance(n, (ast.For, ast.While)) for fn in jitted for n in ast.walk(fn))
        for name, default in IMPLICIT_DEFAULTS.items():
            if name not in knobs and (name == "num_warps" or has_loop):
                knobs[name] = Knob(name, default, launches=[c for c, _ in launches])
    return knobs


def config_of(source: str) -> dict[str, int]:
    return {name: knob.value for name, knob in find_knobs(source).items()}


def apply_config(source: str, changes: dict[str, int]) -> str:
    """The source with each named knob set to its new value (unknown names are ignored)."""
    knobs = find_knobs(source)
    edits: list[tuple[int, int, int, int, str]] = []  # (line, col, end_line, end_col, text)
    for name, value in changes.items():
        knob = knobs.get(name)
        if knob is None or knob.value == value:
            continue
        for const in knob.sites:
            edits.append((const.lineno, const.col_offset, const.end_lineno, const.end_col_offset, str(value)))
        for call in knob.launches:
            edits.append(_insertion(source, call, f"{name}={value}"))
    lines = source.splitlines(keepends=True)
    for line, col, end_line, end_col, text in sorted(edits, reverse=True):
        head, tail = lines[line - 1][:col], lines[end_line - 1][end_col:]
        lines[line - 1:end_line] = [head + text + tail]
    return "".join(lines)


def _insertion(source: str, call: ast.Call, keyword: str) -> tuple[int, int, int, int, str]:
    """An edit that adds `keyword` as the launch's last argument, before its closing parenthesis."""
    lines = source.splitlines(keepends=True)
    line, col = call.end_lineno, call.end_col_offset - 1  # the ')'
    before = "".join(lines[:line - 1]) + lines[line - 1][:col]
    stripped = before.rstrip()
    separator = " " if stripped.endswith((",", "(")) else ", "
    return line, col, line, col, separator + keyword


def steps(name: str, value: int) -> list[int]:
    """One step each way, the larger first: x2 / /2 for sizes and warps, +-1 for stages."""
    lo, hi = limits(name)
    options = [value + 1, value - 1] if name == "num_stages" else [value * 2, value // 2]
    return [v for v in options if lo <= v <= hi and v != value]


def neighbours(config: dict[str, int]) -> list[dict[str, int]]:
    """Single-knob moves, round-robin over knobs, so N plans explore N knobs before a second
    step of any one."""
    per_knob = [[{name: v} for v in steps(name, value)] for name, value in config.items()]
    return [m for row in itertools.zip_longest(*per_knob) for m in row if m is not None]


def clamp_to_power_of_two(name: str, value: float) -> int:
    lo, hi = limits(name)
    if name == "num_stages":
        return int(min(max(round(value), lo), hi))
    return int(min(max(2 ** round(math.log2(max(value, 1))), lo), hi))


def describe_moves(moves: dict[str, tuple[int, int]]) -> str:
    """`BLOCK` from 256 to 512 and `num_warps` from 4 to 8: the wording plans and lessons use."""
    return " and ".join(f"`{n}` from {a} to {b}" for n, (a, b) in moves.items())


def format_config(config: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items()) or "(none)"


def parse_config(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"\b(\w+)=(\d+)\b", text)}
