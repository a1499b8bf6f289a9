"""The axis-tile rewrite: a kernel launched on a 2-D grid whose second axis gives each program one
short row (one head of one token, say) is made to give each program `AXIS1_GROUP` of them as the
first dimension of a 2-D tile, with what the rows share loaded once.

Why: rotary embeddings, per-head norms and other per-(token, head) kernels written by people and
LLMs launch a program per head: 128 elements of bf16 (256 bytes) a program, plus the loads every
head of the token repeats (a position, its cos/sin row). On an H200 the bundled rope baseline ran at
22-34% of a same-size copy whatever its `num_warps`; the same kernel with 8 heads a program as a
[8, 64] tile ran at 78-87% (`evals/probe_configs.py`, BENCHMARKS.md). Made mechanically:

    t = tl.program_id(0)                  t = tl.program_id(0)
    h = tl.program_id(1)            ->    h = tl.program_id(1) * AXIS1_GROUP + tl.arange(0, AXIS1_GROUP)[:, None]
    offs = tl.arange(0, D)                _axis1_mask = h < _axis1_total
    x = tl.load(P(t, h) + offs)           offs = tl.arange(0, D)[None, :]
    tl.store(Q(t, h) + offs, f(x))        x = tl.load(P(t, h) + offs, mask=_axis1_mask)
                                          tl.store(Q(t, h) + offs, f(x), mask=_axis1_mask)

and each launch's grid `(a, b)` becomes `(a, triton.cdiv(b, AXIS1_GROUP))` with `_axis1_total=b`.
Every 1-D tile becomes a row vector and the head a column, so element-wise code broadcasts to the
[AXIS1_GROUP, D] tile and computes per element what it computed; a load or store whose address
moves with the head is masked to the heads that exist (rows past the end touch nothing); a load that
does not move with it (the cos/sin row) stays 1-D and is loaded once a program. `AXIS1_GROUP` is a
module constant the tuner moves like any tile. The rewrite demands straight-line code (no loop, no
branch), element-wise `tl.` functions only (no reduction, scan, dot, reshape or indexing, whose
axes would change meaning), one `tl.program_id(1)` bound to a name, and launches whose grid is a
two-element tuple; it refuses anything else, and kernels under @triton.autotune or
@triton.heuristics (their configs do not know the new tile).
"""

from __future__ import annotations

import ast
import copy

from accelopt.policies.kernel_ast import (
    Refused,
    axis_of,
    is_tl,
    loaded,
    names,
    program_id_axis,
    rewrite_launched_kernels,
    stored,
    with_knob_params,
    written_grid,
)
from accelopt.tools import pyparse

KNOB = "AXIS1_GROUP"
FIRST_VALUE = 8          # where the tuner starts (measured best on two of rope's three workloads)
# named a group, not a block: tools/tunables.py then steps it by doubling within 1-64, as ROW_GROUP,
# where a tile's floor (16) would keep it from the 4 and 8 that rope runs best at
_TOTAL = "_axis1_total"
_MASK = "_axis1_mask"
_OWN_NAMES = (KNOB, _TOTAL, _MASK)
# element-wise `tl.` functions: they broadcast, so a row vector and a column give the tile
_ELEMENTWISE = ("load", "store", "arange", "program_id", "full", "zeros", "where", "maximum", "minimum", "exp",
                "exp2", "log", "log2", "sqrt", "sqrt_rn", "rsqrt", "abs", "sin", "cos", "sigmoid", "fma", "cast",
                "fdiv", "div_rn", "clamp", "erf", "floor", "ceil", "umulhi")


def axis_tiles(source: str) -> str | None:
    """The module with every one-row-per-program 2-D-grid kernel made to take AXIS1_GROUP rows of
    its second axis as a tile; None where no kernel qualifies."""
    note = "rows of the grid's second axis a program takes as a tile (the axis-tile rewrite); the tuner moves it"
    return rewrite_launched_kernels(source, _OWN_NAMES, _tiled_kernel, _tiled_launch, (KNOB, FIRST_VALUE, note))


# ------------------------------------------------------------------ the kernel

def _tiled_kernel(fn: ast.FunctionDef) -> ast.FunctionDef:
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # a docstring
    _check_straight_and_elementwise(body)
    at = [i for i, s in enumerate(body) if program_id_axis(s) == 1]
    ids = [n for s in body for n in ast.walk(s) if isinstance(n, ast.Call) and is_tl(n.func, ("program_id",))]
    if len(at) != 1 or sum(axis_of(c) == 1 for c in ids) != 1:
        raise Refused("not one program per row of the second axis")
    head = body[at[0]].targets[0].id  # type: ignore[attr-defined]  # checked by program_id_axis
    moving = _moving_with(body, head)
    new_body: list[ast.stmt] = []
    for index, stmt in enumerate(body):
        if index == at[0]:
            new_body += pyparse.parse(f"{head} = tl.program_id(1) * {KNOB} + tl.arange(0, {KNOB})[:, None]\n"
                                  f"{_MASK} = {head} < {_TOTAL}").body
            continue
        stmt = _RowVectors().visit(copy.deepcopy(stmt))
        for call in (n for n in ast.walk(stmt) if isinstance(n, ast.Call) and is_tl(n.func, ("load", "store"))):
            _mask_if_moving(call, moving)
        new_body.append(stmt)
    new = copy.deepcopy(fn)
    new.body = (fn.body[:1] if len(body) < len(fn.body) else []) + new_body
    with_knob_params(fn, new, _TOTAL, KNOB)
    return ast.fix_missing_locations(new)


def _check_straight_and_elementwise(body: list[ast.stmt]) -> None:
    for stmt in body:
        if not isinstance(stmt, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Expr):
            raise Refused(f"{type(stmt).__name__}: not straight-line code")
        for node in ast.walk(stmt):
            if isinstance(node, ast.Subscript | ast.IfExp | ast.Lambda | ast.Starred) \
                    or isinstance(node, ast.Attribute) and node.attr in ("shape", "T"):
                raise Refused("indexing or shapes: their axes would change meaning")
            if isinstance(node, ast.Call):
                tl_call = is_tl(node.func, _ELEMENTWISE)
                cast = isinstance(node.func, ast.Attribute) and node.func.attr == "to"
                literal = isinstance(node.func, ast.Name) and node.func.id in ("float", "int")
                if not (tl_call or cast or literal):
                    raise Refused(f"{ast.unparse(node.func)}: not known to be element-wise")






def _moving_with(body: list[ast.stmt], head: str) -> set[str]:
    """The names whose value depends on `head` (straight-line code: one pass in order)."""
    moving = {head}
    for stmt in body:
        if loaded([stmt]) & moving:
            moving |= stored([stmt])
    return moving


class _RowVectors(ast.NodeTransformer):
    """Every `tl.arange(...)` as a row vector, `tl.arange(...)[None, :]`."""

    def visit_Call(self, node: ast.Call) -> ast.expr:
        self.generic_visit(node)
        if is_tl(node.func, ("arange",)):
            return pyparse.parse(f"{ast.unparse(node)}[None, :]", mode="eval").body
        return node


def _mask_if_moving(call: ast.Call, moving: set[str]) -> None:
    """A load or store whose address moves with the head: masked to the heads that exist."""
    store = is_tl(call.func, ("store",))
    pointer = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "pointer"), None)
    if pointer is None:
        raise Refused("a load or store without its pointer")
    value = (call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "value"), None)) \
        if store else None
    if not names(pointer) & moving:
        if value is not None and names(value) & moving:
            raise Refused("a store of a value that moves with the head to an address that does not")
        return
    position = 2 if store else 1
    mask_kw = next((k for k in call.keywords if k.arg == "mask"), None)
    old = mask_kw.value if mask_kw else call.args[position] if len(call.args) > position else None
    # tl.where: a scalar mask `&` a block is not a boolean block on Triton's interpreter
    new = pyparse.parse(f"tl.where({_MASK}, {ast.unparse(old)}, False)" if old is not None else _MASK, mode="eval").body
    if mask_kw:
        mask_kw.value = new
    elif len(call.args) > position:
        call.args[position] = new
    else:
        call.keywords.append(ast.keyword("mask", new))


# ------------------------------------------------------------------ the launches

def _tiled_launch(call: ast.Call, owner: ast.FunctionDef | None, _kernel: ast.FunctionDef) \
        -> tuple[int, int, int, int, str]:
    """One edit replacing `kernel[(a, b)](args)` with the tiled launch."""
    sub = call.func
    assert isinstance(sub, ast.Subscript)
    if any(k.arg in _OWN_NAMES or k.arg is None for k in call.keywords) or any(
            isinstance(a, ast.Starred) for a in call.args):
        raise Refused("the launch names our parameters, or passes *args or **kwargs")
    grid = written_grid(owner, sub.slice)
    if not (isinstance(grid, ast.Tuple) and len(grid.elts) == 2
            and not any(isinstance(e, ast.Starred) for e in grid.elts)):
        raise Refused("the grid is not a two-element tuple")
    first, rows = (ast.unparse(e) for e in grid.elts)
    args = [ast.unparse(a) for a in call.args] + [f"{k.arg}={ast.unparse(k.value)}" for k in call.keywords]
    args += [f"{_TOTAL}={rows}", f"{KNOB}={KNOB}"]
    new = f"{ast.unparse(sub.value)}[({first}, triton.cdiv({rows}, {KNOB}))]({', '.join(args)})"
    return (call.lineno, call.col_offset, call.end_lineno or call.lineno, call.end_col_offset or 0, new)
