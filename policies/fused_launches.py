"""The fused-launch rewrite: launches of one kernel that the host makes one after another on
independent tensors (rope's q and then k, each tensor of a group) made one launch: the grids
joined along their last axis, each program running the kernel's body with the arguments of the
launch its place on that axis falls in.

Why: a short launch pays a fixed cost (the launch, the first wave filling the GPU, the tail of the
last) that a same-size copy, one launch, does not. On an H200 the bundled rope, after the
axis-tile rewrite, ran at 75-86% of a same-size copy as two launches (q, then k) and at 92-94% as
one (`evals/probe_configs.py`, BENCHMARKS.md). Made mechanically:

    def _apply(x, ...):                         def _apply_deferred(x, ...):
        out = torch.empty_like(x)                   out = torch.empty_like(x)
        k[(a, b)](x, out, ...)            ->        _fused_launch = _k_later[(a, b)](x, out, ...)
        return out                                  return out, _fused_launch

    def run(q, k, ...):                         def run(q, k, ...):
        return _apply(q, ...), _apply(k, ...)       _fused_out0, _fused_launch0 = _apply_deferred(q, ...)
                                                    _fused_out1, _fused_launch1 = _apply_deferred(k, ...)
                                                    _launch_k(_fused_launch0, _fused_launch1)
                                                    return _fused_out0, _fused_out1

and consecutive launch statements `k[g1](...)`, `k[g2](...)` become `_launch_k(_k_later[g1](...),
_k_later[g2](...))`. `_k_later[grid](...)` records a launch exactly as it was written (so the
tuner still finds and moves its keywords); `_launch_k` makes the recorded launches one launch of
`k_fused_2`:

    if tl.program_id(AXIS) < _fused_start_1:  <the body, with launch 1's arguments>
    else:                                     <the body with launch 2's, its program id on AXIS shifted back>

At run time the launches are joined only where that cannot change a result or fail: the same
constexprs and launch options, the same extents on the other grid axes, the joined axis within
CUDA's limit, and no tensor that one launch may write (a pointer parameter the kernel stores
through) overlapping any tensor of another. Otherwise each is launched as written, in order.

Refused: kernels under @triton.autotune or @triton.heuristics, kernels with `return` or a program
id on an axis that is not a literal, a kernel referenced other than by its launches, grids that
are not tuples written out, a helper whose launch is not its own statement followed only by a
`return` of what it made, and calls of a helper that read what an earlier one returned. The
rewrite closes the kernel to the other grid rewrites (their pattern is a plain launch), so the
tuner plans it once no other rewrite is left to try (`Rewrite.last`).
"""

from __future__ import annotations

import ast
import copy
import re
from typing import TypeGuard

from accelopt.policies.kernel_ast import (
    EFFECTS,
    Refused,
    addressed_params,
    axis_of,
    before_definitions,
    bound_names,
    grid_bindings,
    is_tl,
    kernel_span,
    launches_of,
    loaded,
    names,
    plain_kernels,
    references,
    stored,
    triton_module,
)
from accelopt.tools import pyparse
from accelopt.tools.tunables import splice

PREFIX = "_fused_"       # every name the rewrite adds to a function starts so: a module using it is left alone
LATER, LAUNCH = "_{}_later", "_launch_{}"
_DEFERRED = "{}_deferred"

_SHARED = f'''

# The fused-launch rewrite's recorder and joiner: launches of one kernel recorded as written, then
# made as one where that changes no result (policies/fused_launches.py in accelopt).
{PREFIX}GRID_LIMITS = (2**31 - 1, 65535, 65535)


class {PREFIX}LaunchLater:
    """`later[grid](*args, **kwargs)`: a launch as written, recorded to be made with others:
    (grid, args, kwargs, runtime arguments, constexprs, launch options)."""

    def __init__(self, bind):
        self.bind = bind

    def __getitem__(self, grid):
        return lambda *args, **kwargs: (tuple(grid), args, kwargs, *self.bind(*args, **kwargs))


def {PREFIX}span(value):
    """The bytes a tensor argument covers, [start, end); None for anything else or an empty tensor.
    (Read on every call: kept to a few attribute reads for the contiguous tensors kernels take.)"""
    nbytes = getattr(value, "nbytes", None)
    if not nbytes or not hasattr(value, "data_ptr"):
        return None
    start = value.data_ptr()
    if value.is_contiguous():
        return start, start + nbytes
    last = sum((size - 1) * stride for size, stride in zip(value.shape, value.stride()))
    return start, start + (last + 1) * value.element_size()


def {PREFIX}joined(records, written):
    """One launch for the recorded launches of a kernel: (grid, runtime arguments in launch order,
    where launches 2.. start on the joined last axis, constexprs, options); None where they must be
    made one by one: other constexprs, options or extents on the other axes, a joined axis past
    CUDA's limit, or a tensor one launch may write (`written`: positions among its runtime
    arguments) overlapping any tensor of another launch."""
    grid, _, _, _, constexprs, options = records[0]
    axis = len(grid) - 1
    for other in records[1:]:
        if len(other[0]) != axis + 1 or other[0][:axis] != grid[:axis] or other[4] != constexprs \
                or other[5] != options:
            return None
    sizes = [r[0][axis] for r in records]
    total = sum(sizes)
    if total > {PREFIX}GRID_LIMITS[axis]:
        return None
    spans = [[{PREFIX}span(value) for value in r[3]] for r in records] if written else []
    for i, mine in enumerate(spans):
        for w in (mine[p] for p in written):
            if w is not None and any(s is not None and w[0] < s[1] and s[0] < w[1]
                                     for j, theirs in enumerate(spans) if j != i for s in theirs):
                return None
    starts, at = [], 0
    for size in sizes[:-1]:
        at += size
        starts.append(at)
    return (*grid[:axis], total), [value for r in records for value in r[3]], starts, constexprs, options
'''


def fused_launches(source: str) -> str | None:
    """The module with each group of launches of one kernel made one launch; None where there is
    no such group, the module does not parse or already holds the rewrite's names."""
    tree = triton_module(source)
    if tree is None:
        return None
    if any(n.startswith(PREFIX) for n in bound_names(tree)):
        return None
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    edits: list[tuple[int, int, int, int, str]] = []
    for fn in plain_kernels(tree):
        try:
            edits += _fuse_kernel(source, tree, fn, functions)
        except Refused:
            continue
    return _with_shared(splice(source, edits)) if edits else None


# ------------------------------------------------------------------ finding the launches

class _Group:
    """Launches of one kernel made one after another: direct launch statements, or calls of a helper
    that makes one launch each."""

    def __init__(self, statements: list[ast.stmt], calls: list[ast.Call], helper: ast.FunctionDef | None):
        self.statements, self.calls, self.helper = statements, calls, helper
        self.number = 0  # told apart in the names of its temporaries where a module has several groups


def _fuse_kernel(source: str, tree: ast.Module, fn: ast.FunctionDef,
                 functions: dict[str, ast.FunctionDef]) -> list[tuple[int, int, int, int, str]]:
    launches = launches_of(tree, fn.name)
    if not launches or references(tree, fn.name) != len(launches):
        raise Refused("the kernel is referenced other than by its launches")
    if len(fn.decorator_list) != 1 or ast.unparse(fn.decorator_list[0]) not in ("triton.jit", "jit"):
        raise Refused("a decorator other than a plain @triton.jit")
    if fn.args.vararg or fn.args.kwarg or fn.args.kwonlyargs or fn.args.posonlyargs:
        raise Refused("a variadic signature")
    arity = {_grid_arity(call, owner) for call, owner in launches}
    if len(arity) != 1:
        raise Refused("launches with grids of different ranks")
    axis = arity.pop() - 1
    helpers = _helpers(fn.name, launches, functions)
    groups = _direct_groups(fn.name, functions) + [g for h in helpers for g in _helper_groups(h, functions)]
    if not groups:
        raise Refused("no launches made one after another")
    for helper in {id(g.helper): g.helper for g in groups if g.helper is not None}.values():
        grouped = sum(len(g.calls) for g in groups if g.helper is helper)
        if references(tree, helper.name) != grouped:
            raise Refused(f"{helper.name} is also called outside the launches joined")
    counts = sorted({len(g.calls) for g in groups})
    kernels = [_fused_kernel(fn, count, axis) for count in counts]
    fresh = all(_writes_fresh(fn, launch, owner, [c for c in group.calls if c is not launch])
                for group in groups for launch, owner in _launches_of_group(group, launches))
    code = "\n\n\n".join([ast.unparse(k) for k in kernels] + [_binder(fn), _launcher(fn, counts, not fresh)])
    end = kernel_span(source, fn)
    edits = [(end[2], end[3], end[2], end[3], "\n\n\n" + code)]
    for number, group in enumerate(groups):
        group.number = number
        edits += _group_edits(source, fn.name, group)
    for helper in {id(g.helper): g.helper for g in groups if g.helper is not None}.values():
        edits += _helper_edits(source, fn.name, helper)
    return edits


def _launches_of_group(group: _Group, launches: list[tuple[ast.Call, ast.FunctionDef | None]]
                       ) -> list[tuple[ast.Call, ast.FunctionDef]]:
    """The launches a group makes, each with the function it is written in."""
    if group.helper is not None:
        return [(call, group.helper) for call, owner in launches if owner is group.helper]
    owners = {id(call): owner for call, owner in launches}
    return [(call, owner) for call in group.calls if (owner := owners.get(id(call))) is not None]


def _grid_arity(call: ast.Call, owner: ast.FunctionDef | None) -> int:
    grid = _grid_of(call, owner)
    if not (isinstance(grid, ast.Tuple) and 1 <= len(grid.elts) <= 3
            and not any(isinstance(e, ast.Starred) for e in grid.elts)):
        raise Refused("a grid that is not a tuple written out")
    if any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
        raise Refused("a launch passing *args or **kwargs")
    return len(grid.elts)


def _grid_of(call: ast.Call, owner: ast.FunctionDef | None) -> ast.expr:
    grid = call.func.slice  # type: ignore[attr-defined]  # a launch: kernel[grid](...)
    bound = grid_bindings(owner, grid)
    return bound[0] if len(bound) == 1 else grid


def _is_launch_stmt(stmt: ast.stmt, kernel: str) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) \
        and isinstance(stmt.value.func, ast.Subscript) and isinstance(stmt.value.func.value, ast.Name) \
        and stmt.value.func.value.id == kernel


def _blocks(fn: ast.FunctionDef) -> list[list[ast.stmt]]:
    """Every statement list of a host function (its body, and those of its loops and branches)."""
    found = [fn.body]
    for node in ast.walk(fn):
        if node is not fn and isinstance(node, ast.FunctionDef | ast.ClassDef | ast.Lambda):
            continue
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if node is not fn and isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                found.append(block)
    return found


def _runs(block: list[ast.stmt], fits) -> list[list[ast.stmt]]:
    """Maximal runs of two or more consecutive statements that `fits`."""
    runs, current = [], []
    for stmt in block + [None]:  # type: ignore[list-item]  # a sentinel ends the last run
        if stmt is not None and fits(stmt):
            current.append(stmt)
            continue
        if len(current) >= 2:
            runs.append(current)
        current = []
    return runs


def _independent(statements: list[ast.stmt], calls: list[ast.Call]) -> bool:
    """No call reads a name an earlier statement of the run binds."""
    bound: set[str] = set()
    for stmt, call in zip(statements, calls):
        if loaded([ast.Expr(call)]) & bound:
            return False
        bound |= stored([stmt])
    return True


def _direct_groups(kernel: str, functions: dict[str, ast.FunctionDef]) -> list[_Group]:
    groups = []
    for fn in functions.values():
        for block in _blocks(fn):
            for run in _runs(block, lambda s: _is_launch_stmt(s, kernel)):
                calls = [s.value for s in run]  # type: ignore[attr-defined]  # launch statements
                if _independent(run, calls):
                    groups.append(_Group(run, calls, None))
    return groups


def _helpers(kernel: str, launches: list[tuple[ast.Call, ast.FunctionDef | None]],
             functions: dict[str, ast.FunctionDef]) -> list[ast.FunctionDef]:
    """Host functions that make one launch of the kernel as a statement of their own, then return
    what they made (a `return` with no call in it) and nothing more."""
    found = []
    for fn in functions.values():
        mine = [call for call, owner in launches if owner is fn]
        if len(mine) != 1 or fn.decorator_list or any(isinstance(n, ast.Yield | ast.YieldFrom) for n in ast.walk(fn)):
            continue
        at = next((i for i, s in enumerate(fn.body) if _is_launch_stmt(s, kernel)), None)
        if at is None or len(fn.body) != at + 2:
            continue
        last = fn.body[-1]
        returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
        if isinstance(last, ast.Return) and last.value is not None and returns == [last] \
                and not any(isinstance(n, ast.Call) for n in ast.walk(last.value)):
            found.append(fn)
    return found


def _calls_of(expr: ast.expr | None, helper: str) -> TypeGuard[ast.Call]:
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == helper


def _call_of(stmt: ast.stmt, helper: str) -> ast.Call | None:
    """The helper's call that is the whole of `x = helper(...)` or `helper(...)`."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 or isinstance(stmt, ast.Expr):
        return stmt.value if _calls_of(stmt.value, helper) else None
    return None


def _helper_groups(helper: ast.FunctionDef, functions: dict[str, ast.FunctionDef]) -> list[_Group]:
    groups = []
    for fn in functions.values():
        if fn is helper:
            continue
        for block in _blocks(fn):
            # one statement whose value is a tuple holding two or more calls: `return h(q), h(k)`
            for stmt in block:
                value = stmt.value if isinstance(stmt, ast.Return | ast.Assign | ast.Expr) else None
                if isinstance(value, ast.Tuple):
                    calls: list[ast.Call] = [e for e in value.elts if _calls_of(e, helper.name)]
                    others = [e for e in value.elts if not _calls_of(e, helper.name)]
                    if len(calls) >= 2 and not any(isinstance(n, ast.Call) for e in others for n in ast.walk(e)):
                        groups.append(_Group([stmt], calls, helper))
            # consecutive statements each one call: `a = h(q)`, `b = h(k)`
            for run in _runs(block, lambda s: _call_of(s, helper.name) is not None):
                calls = [c for c in (_call_of(s, helper.name) for s in run) if c is not None]
                if _independent(run, calls):
                    groups.append(_Group(run, calls, helper))
    return groups


# ------------------------------------------------------------------ the fused kernel

def _fused_kernel(fn: ast.FunctionDef, count: int, axis: int) -> ast.FunctionDef:
    """`fn` made to run `count` launches' programs, the launches side by side along grid axis `axis`."""
    if any(isinstance(n, ast.Return) for n in ast.walk(fn)):
        raise Refused("return in the kernel")
    for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call) and is_tl(n.func, ("program_id", "num_programs"))):
        if axis_of(call) is None:
            raise Refused("a program id on an axis that is not a literal")
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # a docstring
    params = fn.args.args
    runtime = _runtime(fn)
    own = set(runtime) | stored(body) | {t.id for n in ast.walk(fn) if isinstance(n, ast.For | ast.comprehension)
                                         for t in ast.walk(n.target) if isinstance(t, ast.Name)}
    starts = [f"{PREFIX}start_{i}" for i in range(1, count)]
    branches = [_branch(body, i, own, axis, starts) for i in range(count)]
    chain: list[ast.stmt] = branches[-1]
    for i in range(count - 2, -1, -1):
        test = pyparse.parse(f"{PREFIX}pid < {starts[i]}", mode="eval").body
        chain = [ast.If(test=test, body=branches[i], orelse=chain)]
    new = copy.deepcopy(fn)
    new.name = f"{fn.name}_fused_{count}"
    new.args = ast.arguments(
        posonlyargs=[], kwonlyargs=[], kw_defaults=[], defaults=[],
        args=[ast.arg(_suffixed(name, i)) for i in range(count) for name in runtime]
        + [ast.arg(s) for s in starts] + [copy.deepcopy(p) for p in params if _constexpr(p)])
    new.body = pyparse.parse(f"{PREFIX}pid = tl.program_id({axis})").body + chain
    return ast.fix_missing_locations(new)


def _constexpr(param: ast.arg) -> bool:
    return param.annotation is not None and "constexpr" in ast.unparse(param.annotation)


def _suffixed(name: str, index: int) -> str:
    return name if index == 0 else f"{name}{PREFIX}{index}"


def _branch(body: list[ast.stmt], index: int, own: set[str], axis: int, starts: list[str]) -> list[ast.stmt]:
    """The body as launch `index` runs it: its own names renamed (so no name is shared between
    branches: Triton gives a name bound in both one type), its program id on `axis` shifted back
    to where that launch's programs start, and that axis's program count its own."""
    start = starts[index - 1] if index else None
    end = starts[index] if index < len(starts) else None
    count = f"({end or f'tl.num_programs({axis})'}{f' - {start}' if start else ''})"
    out = []
    for stmt in body:
        stmt = _Branch(index, own, axis, start, count).visit(copy.deepcopy(stmt))
        out.append(stmt)
    return out


class _Branch(ast.NodeTransformer):
    def __init__(self, index: int, own: set[str], axis: int, start: str | None, count: str):
        self.index, self.own, self.axis, self.start, self.count = index, own, axis, start, count

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id in self.own and self.index:
            return ast.copy_location(ast.Name(_suffixed(node.id, self.index), node.ctx), node)
        return node

    def visit_Call(self, node: ast.Call) -> ast.expr:
        self.generic_visit(node)
        if is_tl(node.func, ("program_id",)) and axis_of(node) == self.axis and self.start:
            return pyparse.parse(f"({ast.unparse(node)} - {self.start})", mode="eval").body
        if is_tl(node.func, ("num_programs",)) and axis_of(node) == self.axis:
            return pyparse.parse(self.count, mode="eval").body
        return node


# ------------------------------------------------------------------ the host code

def _binder(fn: ast.FunctionDef) -> str:
    """A function with the kernel's parameters that sorts a launch's arguments as Triton binds them."""
    params = fn.args.args
    defaults = [None] * (len(params) - len(fn.args.defaults)) + list(fn.args.defaults)
    signature = ", ".join(p.arg + (f"={ast.unparse(d)}" if d is not None else "") for p, d in zip(params, defaults))
    runtime = _runtime(fn)
    constexprs = ", ".join(f"{p.arg!r}: {p.arg}" for p in params if _constexpr(p))
    return (f"def _{fn.name}_arguments({signature}, **options):\n"
            f'    """A launch of {fn.name} as Triton binds it: (runtime arguments, constexprs, launch options)."""\n'
            f"    return ({', '.join(runtime)}{',' if len(runtime) == 1 else ''}), {{{constexprs}}}, options\n\n\n"
            f"{LATER.format(fn.name)} = {PREFIX}LaunchLater(_{fn.name}_arguments)")


def _written(fn: ast.FunctionDef) -> list[str]:
    """The kernel's runtime parameters a store or atomic may write through."""
    return [name for name in addressed_params(fn, EFFECTS) if name in _runtime(fn)]


def _runtime(fn: ast.FunctionDef) -> list[str]:
    return [p.arg for p in fn.args.args if not _constexpr(p)]


_ALLOCATIONS = ("empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",  # torch.
                "empty_strided")


def _writes_fresh(fn: ast.FunctionDef, call: ast.Call, owner: ast.FunctionDef, others: list[ast.Call]) -> bool:
    """Every tensor this launch may write is one its function allocated (bound once, to a torch
    allocation) and no other launch of the group is passed: it can overlap nothing they touch, so
    the joiner need not look at run time (what it does costs microseconds a call, as much as a
    short kernel)."""
    params = [p.arg for p in fn.args.args]
    passed = {p: a for p, a in zip(params, call.args)} | {k.arg: k.value for k in call.keywords if k.arg}
    for name in _written(fn):
        arg = passed.get(name)
        if not isinstance(arg, ast.Name) or any(arg.id in names(other) for other in others):
            return False
        values = [n.value for n in ast.walk(owner) if isinstance(n, ast.Assign | ast.AnnAssign | ast.AugAssign)
                  and arg.id in stored([n])]
        value = values[0] if len(values) == 1 else None
        fresh = isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and (
            value.func.attr.startswith("new_")  # x.new_empty(...): new memory whatever x is
            or value.func.attr in _ALLOCATIONS and isinstance(value.func.value, ast.Name)
            and value.func.value.id == "torch")
        if not (fresh and isinstance(value, ast.Call) and arg.id in {
                    t.id for n in ast.walk(owner) if isinstance(n, ast.Assign) and n.value is value
                    for t in n.targets if isinstance(t, ast.Name)}):
            return False
    return True


def _launcher(fn: ast.FunctionDef, counts: list[int], checked: bool) -> str:
    """`checked`: whether the joiner must compare the written tensors' bytes with the others' at run time."""
    runtime = _runtime(fn)
    written = tuple(runtime.index(name) for name in _written(fn)) if checked else ()
    lines = [f"def {LAUNCH.format(fn.name)}(*records):",
             f'    """Launches of {fn.name} recorded by {LATER.format(fn.name)}, made as one launch where they can be,',
             '    else one by one as written."""',
             f"    joined = {PREFIX}joined(records, written={written!r})"]
    for count in counts:
        lines += [f"    if joined is not None and len(records) == {count}:",
                  "        grid, runtime, starts, constexprs, options = joined",
                  "        # bound before the call: the tuner's launch keywords are the recorded launches'",
                  f"        launch = {fn.name}_fused_{count}[grid]",
                  "        launch(*runtime, *starts, **constexprs, **options)",
                  "        return"]
    lines += ["    for grid, args, kwargs, *_ in records:",
              f"        launch = {fn.name}[grid]",
              "        launch(*args, **kwargs)"]
    return "\n".join(lines)


def _span(node: ast.AST) -> tuple[int, int, int, int]:
    return (node.lineno, node.col_offset, node.end_lineno or node.lineno,  # type: ignore[attr-defined]
            node.end_col_offset or 0)  # type: ignore[attr-defined]


def _recorded(source: str, kernel: str, call: ast.Call) -> str:
    """The launch's own text with the kernel's name replaced by its recorder's."""
    text = ast.get_source_segment(source, call) or ast.unparse(call)
    return LATER.format(kernel) + text[len(kernel):]


def _indent_of(source: str, stmt: ast.stmt) -> str:
    line = source.splitlines()[stmt.lineno - 1]
    return line[:len(line) - len(line.lstrip())]


def _group_edits(source: str, kernel: str, group: _Group) -> list[tuple[int, int, int, int, str]]:
    first, last = group.statements[0], group.statements[-1]
    indent = _indent_of(source, first)
    start, end = _span(first), _span(last)
    if group.helper is None:
        text = f"{LAUNCH.format(kernel)}({', '.join(_recorded(source, kernel, c) for c in group.calls)})"
        return [(start[0], start[1], end[2], end[3], text)]
    deferred = _DEFERRED.format(group.helper.name)
    n = group.number or ""
    lines: list[str] = []
    launches = [f"{PREFIX}launch{n}{i}" for i in range(len(group.calls))]
    if len(group.statements) == 1 and len(group.calls) >= 2 and isinstance(
            getattr(group.statements[0], "value", None), ast.Tuple):
        stmt = group.statements[0]
        outs = {id(c): f"{PREFIX}out{n}{i}" for i, c in enumerate(group.calls)}
        for call, launch in zip(group.calls, launches):
            lines.append(f"{outs[id(call)]}, {launch} = {deferred}{_arguments_text(source, call)}")
        lines.append(f"{LAUNCH.format(kernel)}({', '.join(launches)})")
        value = stmt.value  # type: ignore[attr-defined]  # a Return, Assign or Expr holding the tuple
        elements = ", ".join(outs.get(id(e)) or (ast.get_source_segment(source, e) or ast.unparse(e))
                             for e in value.elts)
        lines.append(_with_value(source, stmt, f"({elements})" if len(value.elts) == 1 else elements))
    else:
        for stmt, call, launch in zip(group.statements, group.calls, launches):
            target = _target_text(source, stmt)
            lines.append(f"{target}, {launch} = {deferred}{_arguments_text(source, call)}")
        lines.append(f"{LAUNCH.format(kernel)}({', '.join(launches)})")
    return [(start[0], start[1], end[2], end[3], ("\n" + indent).join(lines))]


def _arguments_text(source: str, call: ast.Call) -> str:
    """`(args...)` of a call as written."""
    text = ast.get_source_segment(source, call) or ast.unparse(call)
    func = ast.get_source_segment(source, call.func) or ast.unparse(call.func)
    return text[len(func):]


def _target_text(source: str, stmt: ast.stmt) -> str:
    if isinstance(stmt, ast.Assign):
        target = stmt.targets[0]
        text = ast.get_source_segment(source, target) or ast.unparse(target)
        return f"({text})" if isinstance(target, ast.Tuple | ast.List) else text
    return "_"


def _with_value(source: str, stmt: ast.stmt, value: str) -> str:
    if isinstance(stmt, ast.Return):
        return f"return {value}"
    if isinstance(stmt, ast.Assign):
        return " = ".join(ast.get_source_segment(source, t) or ast.unparse(t) for t in stmt.targets) + f" = {value}"
    return value


def _helper_edits(source: str, kernel: str, helper: ast.FunctionDef) -> list[tuple[int, int, int, int, str]]:
    launch_stmt, ret = helper.body[-2], helper.body[-1]
    assert isinstance(ret, ast.Return) and ret.value is not None and isinstance(launch_stmt, ast.Expr)
    call = launch_stmt.value
    assert isinstance(call, ast.Call)
    value = ret.value
    returned = ast.unparse(value) if isinstance(value, ast.Tuple) else (ast.get_source_segment(source, value)
                                                                          or ast.unparse(value))
    line = source.splitlines()[helper.lineno - 1]
    at = re.search(rf"\bdef\s+{re.escape(helper.name)}\b", line)
    assert at is not None  # the helper's own def line
    name_col = at.end() - len(helper.name)
    return [
        (helper.lineno, name_col, helper.lineno, name_col + len(helper.name), _DEFERRED.format(helper.name)),
        (*_span(call), f"{PREFIX}launch = {_recorded(source, kernel, call)}"),
        (*_span(value), f"{returned}, {PREFIX}launch"),
    ]


def _with_shared(source: str) -> str:
    """The recorder and joiner once, after the module's imports (before its first function)."""
    return before_definitions(source, "\n" + _SHARED + "\n\n")
