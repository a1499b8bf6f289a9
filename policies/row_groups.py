"""The row-group rewrite: a kernel that gives each program one row (a 1-D grid, one
`tl.program_id(0)`) is made to give each program `ROW_GROUP` consecutive rows, in a loop.

Why: a row of a small hidden size (FlashInfer-Bench's rmsnorm_h128: 256 bytes) is too little work
for a whole program: half a million programs each load one short row, and the launch spends its
time scheduling blocks and waiting on one load at a time. AccelOpt's LLM-written best for that
task is exactly this change (rows per program, autotuned). Made mechanically:

    row = tl.program_id(0)            _row_group = tl.program_id(0)
    <body>                      ->    for _row_in_group in range(ROW_GROUP):
                                          row = _row_group * ROW_GROUP + _row_in_group
                                          if row < _rows_total:
                                              <body>

and at each launch the grid `(n,)` becomes `(triton.cdiv(n, ROW_GROUP),)` with `_rows_total=n`.
`ROW_GROUP` is a module constant passed by name, so the tuner moves it like any tile
(tools/tunables.py: a `group` knob, 1-64). The `if` keeps the rows past the end untouched, so a
kernel that updates its outputs in place stays correct. A body that rebinds a name bound before
the loop (`x_ptr += row * stride`) would carry it into the next row: such a rebinding at the top of
the body is renamed (`x_ptr_row`), one inside a nested block refuses the rewrite. Refused too:
kernels under @triton.autotune or @triton.heuristics, kernels with `return`, `tl.num_programs`, a
second `tl.program_id`, or a launch whose grid is not a one-element tuple, and kernels that walk
their row in a loop: their rows are long enough already (measured: grouping them lost 20-45% on
every bundled kernel of that shape, and won 1.49x on rmsnorm_h128 and 2.35x on merge_attn_states,
whose rows are one tile).
"""

from __future__ import annotations

import ast
import copy

from accelopt.policies.kernel_ast import (
    Refused,
    is_tl,
    one_element_grid_name,
    program_id_axis,
    rewrite_launched_kernels,
    stored,
    with_knob_params,
)
from accelopt.tools import pyparse

KNOB = "ROW_GROUP"
FIRST_VALUE = 4          # where the tuner starts; it steps from here (1-64)
_TOTAL = "_rows_total"
_GROUP = "_row_group"
_INDEX = "_row_in_group"
_OWN_NAMES = (KNOB, _TOTAL, _GROUP, _INDEX)


def row_groups(source: str) -> str | None:
    """The module with every one-row-per-program kernel made to take ROW_GROUP rows; None where no
    kernel qualifies."""
    note = "rows per program (the row-group rewrite); the tuner moves it"
    return rewrite_launched_kernels(source, _OWN_NAMES, _grouped_kernel, _grouped_launch, (KNOB, FIRST_VALUE, note))


# ------------------------------------------------------------------ the kernel

def _grouped_kernel(fn: ast.FunctionDef) -> ast.FunctionDef:
    calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and is_tl(n.func, ("program_id", "num_programs"))]
    if any(isinstance(n, ast.Return) for n in ast.walk(fn)):
        raise Refused("return in the kernel")
    body = list(fn.body)
    at = next((i for i, s in enumerate(body) if program_id_axis(s) == 0), None)
    if at is None or len(calls) != 1:
        raise Refused("not one program per row")
    row_name = body[at].targets[0].id  # type: ignore[attr-defined]  # checked by program_id_axis
    before, moved = body[:at], body[at + 1:]
    if any(isinstance(n, ast.For | ast.While) for s in moved for n in ast.walk(s)):
        # a program that loops over its row already has a long row's work: grouping such rows was
        # slower on every bundled one measured (0.55-0.80x on an H200, BENCHMARKS.md)
        raise Refused("the row is already walked in a loop")
    outer = {a.arg for a in fn.args.args} | stored(before)
    moved = _renamed(moved, outer)
    group = pyparse.parse(
        f"{_GROUP} = tl.program_id(0)\n"
        f"for {_INDEX} in range({KNOB}):\n"
        f"    {row_name} = {_GROUP} * {KNOB} + {_INDEX}\n"
        f"    if {row_name} < {_TOTAL}:\n"
        f"        pass\n").body
    group[1].body[1].body = moved or [ast.Pass()]  # type: ignore[attr-defined]
    new = copy.deepcopy(fn)
    new.body = before + group
    with_knob_params(fn, new, _TOTAL, KNOB)
    return ast.fix_missing_locations(new)




def _renamed(moved: list[ast.stmt], outer: set[str]) -> list[ast.stmt]:
    """The body with each top-level rebinding of a name bound before the loop given a name of its
    own (reads after it follow), so nothing carries from one row to the next."""
    mapping: dict[str, str] = {}
    out: list[ast.stmt] = []
    for stmt in moved:
        stmt = _Loads(mapping).visit(copy.deepcopy(stmt))
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id in outer:
            old = stmt.target.id
            read = ast.Name(mapping.get(old, old), ast.Load())
            stmt = ast.Assign([ast.Name(old, ast.Store())], ast.BinOp(read, stmt.op, stmt.value))
        if isinstance(stmt, ast.Assign | ast.AnnAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                for name in (n for n in ast.walk(target) if isinstance(n, ast.Name)):
                    if name.id in outer:
                        mapping[name.id] = name.id = _fresh(name.id, outer | set(mapping.values()))
        elif stored([stmt]) & (outer | set(mapping)):
            raise Refused("a name bound before the loop is rebound inside a nested block")
        out.append(stmt)
    return out


class _Loads(ast.NodeTransformer):
    def __init__(self, mapping: dict[str, str]):
        self.mapping = mapping

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if isinstance(node.ctx, ast.Load) and node.id in self.mapping:
            return ast.copy_location(ast.Name(self.mapping[node.id], ast.Load()), node)
        return node


def _fresh(name: str, taken: set[str]) -> str:
    candidate = f"{name}_row"
    while candidate in taken:
        candidate += "_"
    return candidate


# ------------------------------------------------------------------ the launches

def _grouped_launch(call: ast.Call, owner: ast.FunctionDef | None, _kernel: ast.FunctionDef) \
        -> tuple[int, int, int, int, str]:
    """One edit replacing `kernel[GRID](args)` with the grouped launch."""
    sub = call.func
    assert isinstance(sub, ast.Subscript)
    if any(k.arg in _OWN_NAMES for k in call.keywords) or any(k.arg is None for k in call.keywords):
        raise Refused("the launch already names our parameters, or passes **kwargs")
    grid = sub.slice
    if isinstance(grid, ast.Tuple) and len(grid.elts) == 1 and not isinstance(grid.elts[0], ast.Starred):
        rows = ast.unparse(grid.elts[0])
    elif isinstance(grid, ast.Name) and owner is not None and _one_element_grid(owner, grid.id):
        rows = f"{grid.id}[0]"
    else:
        raise Refused("the grid is not a one-element tuple")
    args = [ast.unparse(a) for a in call.args] + [f"{k.arg}={ast.unparse(k.value)}" for k in call.keywords]
    args += [f"{_TOTAL}={rows}", f"{KNOB}={KNOB}"]
    new = f"{ast.unparse(sub.value)}[(triton.cdiv({rows}, {KNOB}),)]({', '.join(args)})"
    return (call.lineno, call.col_offset, call.end_lineno or call.lineno, call.end_col_offset or 0, new)


def _one_element_grid(owner: ast.FunctionDef, name: str) -> bool:
    return one_element_grid_name(owner, ast.Name(name))
