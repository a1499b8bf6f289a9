"""The load-prefetch rewrite: a loop that loads a chunk and then works on it is made to issue the
next chunk's load before it works on this one (a double buffer in registers).

Why: Triton software-pipelines (`num_stages`) the loads that feed a `tl.dot`; the loads of a row
loop in a reduction kernel (cross-entropy, softmax, the norms) are issued, waited for, then
reduced across the program's warps (a barrier) before the next load goes out: one load in flight
per program. Measured on an H200 (BENCHMARKS.md): the one-pass cross_entropy kernel stood at 67-75%
of a same-size copy whatever `num_stages` (identical times at 1-4). Made mechanically:

    for c in range(a, n, B):                  _pf0_first_cols = a + tl.arange(0, B)
        cols = c + tl.arange(0, B)            _pf0_0 = tl.load(P(_pf0_first_cols), mask=where(a < n, M(..), False), other=o)
        x = tl.load(P(cols), mask=M(cols),    for c in range(a, n, B):
                    other=o)            ->        _pf0_0_now = _pf0_0
        <work on x>                               _pf0_next_cols = c + B + tl.arange(0, B)
                                                  _pf0_0 = tl.load(P(_pf0_next_cols), mask=where(c + B < n, M(..), False), other=o)
                                                  cols = c + tl.arange(0, B)
                                                  x = _pf0_0_now
                                                  <work on x>

The load an iteration uses is the one the previous iteration issued with the same address, mask
and `other`, computed from the same statements with the loop variable one step on, so each value
is what it was. The guard `next < n` keeps the load one step past the end (and the one before a
loop that runs no iteration) from touching memory. What the rewrite demands, and refuses
otherwise: an innermost `range`/`tl.range` loop with no store, atomic, barrier or print in it (a
later chunk's load could read what this one stores); no `break`/`continue`/`return`; a step that
is absent, a positive literal or a `tl.constexpr` parameter (a tile size); loads at the top level
of the body (not under an `if`); no `tl.dot` in the loop (Triton pipelines a dot's loads itself);
addresses built only from the loop variable, names the loop does
not change, and earlier plain assignments in the body built the same way with side-effect-free
`tl.` calls (no load through a loaded index). Loads that do not move with the loop are left alone.
"""

from __future__ import annotations

import ast
import copy

from accelopt.policies.kernel_ast import (
    Refused,
    has_effects,
    is_tl,
    kernel_span,
    names,
    plain_kernels,
    stored,
    triton_module,
)
from accelopt.tools import pyparse
from accelopt.tools.tunables import splice

_PREFIX = "_pf"
# side-effect-free `tl.` functions an address, a mask or an `other` may be built with
_PURE_TL = ("arange", "full", "zeros", "where", "minimum", "maximum", "multiple_of", "max_contiguous",
            "broadcast_to", "reshape", "expand_dims", "cast", "cdiv", "abs")
_LOAD_KEYWORDS = ("mask", "other", "cache_modifier", "eviction_policy")


def prefetch_loads(source: str) -> str | None:
    """The module with every qualifying loop's loads issued one iteration ahead; None where no
    loop qualifies."""
    tree = triton_module(source)
    if tree is None:
        return None
    if any(isinstance(n, ast.Name) and n.id.startswith(_PREFIX) for n in ast.walk(tree)):
        return None  # already rewritten, or names of ours taken
    edits = []
    for fn in plain_kernels(tree, autotuned=True):  # the signature stays: an autotuner's configs still apply
        new = copy.deepcopy(fn)
        if _prefetch_in(new.body, _constexpr_params(new), stored(new.body), count=[0]):
            edits.append((*kernel_span(source, fn), ast.unparse(ast.fix_missing_locations(new))))
    return splice(source, edits) if edits else None


def _constexpr_params(fn: ast.FunctionDef) -> set[str]:
    return {a.arg for a in fn.args.args if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)}


def _prefetch_in(stmts: list[ast.stmt], constexprs: set[str], kernel_stores: set[str], count: list[int]) -> bool:
    """Rewrite every innermost loop of this statement list and the blocks inside it; `count`
    numbers the kernel's rewritten loops, so each has names of its own."""
    changed = False
    i = 0
    while i < len(stmts):
        stmt = stmts[i]
        if isinstance(stmt, ast.For) and not _has_loop(stmt.body):
            replacement = _prefetched(stmt, constexprs, kernel_stores, f"{_PREFIX}{count[0]}")
            if replacement is not None:
                count[0] += 1
                stmts[i:i + 1] = replacement
                i += len(replacement)
                changed = True
                continue
        for block in ("body", "orelse"):
            inner = getattr(stmt, block, None)
            if isinstance(stmt, ast.For | ast.While | ast.If | ast.With) and isinstance(inner, list):
                changed |= _prefetch_in(inner, constexprs, kernel_stores, count)
        i += 1
    return changed


def _has_loop(stmts: list[ast.stmt]) -> bool:
    return any(isinstance(n, ast.For | ast.While) for s in stmts for n in ast.walk(s))


def _prefetched(loop: ast.For, constexprs: set[str], kernel_stores: set[str], name: str) -> list[ast.stmt] | None:
    """The statements replacing `loop`: the first loads before it, the loop issuing the next ones
    (buffers `<name>_<k>`); None where the loop does not qualify."""
    try:
        var, start, stop, step = _range_of(loop, constexprs, kernel_stores)
        if has_effects(loop.body) or _feeds_dot(loop.body):
            return None
        body_stores = stored(loop.body)
        if var in body_stores or body_stores & names(stop):
            return None
        assigns = _top_level_assigns(loop.body)
        loads = [(index, call) for index, stmt in enumerate(loop.body) for call in _top_level_loads(stmt)]
        chosen: list[tuple[int, ast.Call, list[int]]] = []
        for index, call in loads:
            try:
                slice_ = _slice_of(call, index, loop.body, assigns, body_stores, var)
            except Refused:
                continue
            if slice_ is not None:
                chosen.append((index, call, slice_))
    except Refused:
        return None
    if not chosen:
        return None
    needed = sorted({s for _, _, slice_ in chosen for s in slice_})
    bound = {loop.body[s].targets[0].id for s in needed}  # type: ignore[attr-defined]
    step_expr = step if step is not None else ast.Constant(1)
    next_var = ast.BinOp(ast.Name(var, ast.Load()), ast.Add(), copy.deepcopy(step_expr))

    def issued(at: ast.expr, prefix: str) -> list[ast.stmt]:
        """The slice and the loads for the iteration whose loop variable is `at`."""
        out: list[ast.stmt] = []
        for s in needed:
            assign = copy.deepcopy(loop.body[s])
            assert isinstance(assign, ast.Assign) and isinstance(assign.targets[0], ast.Name)
            assign.value = _Renamed(var, at, bound, prefix).visit(assign.value)
            assign.targets[0].id = prefix + assign.targets[0].id
            out.append(assign)
        guard = ast.Compare(copy.deepcopy(at), [ast.Lt()], [copy.deepcopy(stop)])
        for k, (_, call, _) in enumerate(chosen):
            load = _Renamed(var, at, bound, prefix).visit(copy.deepcopy(call))
            _guard_mask(load, guard)
            out.append(ast.Assign([ast.Name(f"{name}_{k}", ast.Store())], load, lineno=0))
        return out

    before = issued(copy.deepcopy(start), f"{name}_first_")
    top = [ast.Assign([ast.Name(f"{name}_{k}_now", ast.Store())], ast.Name(f"{name}_{k}", ast.Load()), lineno=0)
           for k in range(len(chosen))]
    ahead = issued(next_var, f"{name}_next_")
    for k, (index, call, _) in enumerate(chosen):
        _replace_call(loop.body[index], call, ast.Name(f"{name}_{k}_now", ast.Load()))
    loop.body = top + ahead + loop.body
    return [*before, loop]


def _range_of(loop: ast.For, constexprs: set[str], kernel_stores: set[str]) \
        -> tuple[str, ast.expr, ast.expr, ast.expr | None]:
    """(loop variable, start, stop, step) of `for v in range(...)` / `tl.range(...)`."""
    it = loop.iter
    is_range = isinstance(it, ast.Call) and (isinstance(it.func, ast.Name) and it.func.id == "range"
                                            or is_tl(it.func, ("range",)))
    if not is_range or not isinstance(loop.target, ast.Name) or loop.orelse:
        raise Refused
    assert isinstance(it, ast.Call)
    if not 1 <= len(it.args) <= 3 or any(k.arg in ("start", "end", "step", None) for k in it.keywords):
        raise Refused
    args = it.args
    start, stop = (ast.Constant(0), args[0]) if len(args) == 1 else (args[0], args[1])
    step = args[2] if len(args) == 3 else None
    positive_literal = isinstance(step, ast.Constant) and isinstance(step.value, int) and step.value > 0
    tile = isinstance(step, ast.Name) and step.id in constexprs and step.id not in kernel_stores
    if step is not None and not (positive_literal or tile):
        raise Refused  # the guard `next < stop` holds only for a loop that counts up
    return loop.target.id, start, stop, step




def _feeds_dot(stmts: list[ast.stmt]) -> bool:
    """A loop with a `tl.dot`: Triton software-pipelines its loads already (`num_stages`)."""
    return any(isinstance(n, ast.Call) and is_tl(n.func, ("dot", "dot_scaled")) for s in stmts for n in ast.walk(s))




def _top_level_assigns(body: list[ast.stmt]) -> dict[str, list[int]]:
    """name -> the indices of the body's top-level `name = expr` statements binding it."""
    found: dict[str, list[int]] = {}
    for index, stmt in enumerate(body):
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            found.setdefault(stmt.targets[0].id, []).append(index)
    return found


def _top_level_loads(stmt: ast.stmt) -> list[ast.Call]:
    """The `tl.load` calls a top-level statement always evaluates (none under a conditional
    expression, a lambda or a comprehension)."""
    if not isinstance(stmt, ast.Assign | ast.AugAssign | ast.Expr | ast.AnnAssign):
        return []
    found: list[ast.Call] = []

    def walk(node: ast.AST) -> None:
        if isinstance(node, ast.IfExp | ast.BoolOp | ast.Lambda | ast.comprehension | ast.ListComp
                      | ast.GeneratorExp | ast.SetComp | ast.DictComp):
            return
        if isinstance(node, ast.Call) and is_tl(node.func, ("load",)):
            found.append(node)
            return  # a load inside a load's arguments is an indirect load: refused by the slice
        for child in ast.iter_child_nodes(node):
            walk(child)

    walk(stmt)
    return found


def _slice_of(call: ast.Call, index: int, body: list[ast.stmt], assigns: dict[str, list[int]],
              body_stores: set[str], var: str) -> list[int] | None:
    """The indices of the body's statements the load's address, mask and `other` are built from;
    None where they do not move with the loop (nothing to prefetch). Raises Refused where the
    load cannot be issued an iteration early."""
    if any(k.arg not in _LOAD_KEYWORDS for k in call.keywords) or len(call.args) > 3 or not call.args:
        raise Refused  # volatile, a block pointer's boundary_check, or keywords this rule does not know
    exprs: list[ast.expr] = [*call.args, *(k.value for k in call.keywords)]
    needed: set[int] = set()
    moves = False
    todo = [(e, index) for e in exprs]
    while todo:
        expr, before = todo.pop()
        _check_pure(expr)
        for name in names(expr):
            if name == var:
                moves = True
            elif name in body_stores:
                earlier = [i for i in assigns.get(name, []) if i < before]
                if not earlier or _bound_elsewhere(name, body, assigns):
                    raise Refused  # carried from the previous iteration, or bound in a nested block
                at = earlier[-1]
                if at not in needed:
                    needed.add(at)
                    value = body[at].value  # type: ignore[attr-defined]
                    todo.append((value, at))
    return sorted(needed) if moves else None


def _bound_elsewhere(name: str, body: list[ast.stmt], assigns: dict[str, list[int]]) -> bool:
    """Whether the loop binds `name` other than by its top-level plain assignments."""
    plain = set(assigns.get(name, []))
    return any(index not in plain and name in stored([stmt]) for index, stmt in enumerate(body))


def _check_pure(expr: ast.expr) -> None:
    for node in ast.walk(expr):
        if isinstance(node, ast.Call):
            pure_tl = is_tl(node.func, _PURE_TL)
            cast = isinstance(node.func, ast.Attribute) and node.func.attr == "to"
            literal = isinstance(node.func, ast.Name) and node.func.id in ("float", "int", "bool") \
                and all(isinstance(a, ast.Constant) for a in node.args)
            if not (pure_tl or cast or literal):
                raise Refused
        elif not isinstance(node, ast.Name | ast.Constant | ast.BinOp | ast.UnaryOp | ast.Compare | ast.Subscript
                            | ast.Slice | ast.Tuple | ast.Attribute | ast.Load | ast.operator | ast.unaryop
                            | ast.cmpop | ast.keyword | ast.expr_context):
            raise Refused


class _Renamed(ast.NodeTransformer):
    """The loop variable as `at`, and the names the slice binds under `prefix`."""

    def __init__(self, var: str, at: ast.expr, bound: set[str], prefix: str):
        self.var, self.at, self.bound, self.prefix = var, at, bound, prefix

    def visit_Name(self, node: ast.Name) -> ast.expr:
        if node.id == self.var:
            return copy.deepcopy(self.at)
        if node.id in self.bound:
            return ast.Name(self.prefix + node.id, node.ctx)
        return node


def _guard_mask(load: ast.Call, guard: ast.expr) -> None:
    """The load's mask made false where `guard` is: `tl.where(guard, mask, False)` (a scalar
    condition `&` a block mask is not a boolean block on Triton's interpreter); a load with no mask
    gets a block of its pointer's shape."""
    def where(mask: ast.expr) -> ast.expr:
        return ast.Call(ast.Attribute(ast.Name("tl", ast.Load()), "where", ast.Load()),
                        [guard, mask, ast.Constant(False)], [])

    for keyword in load.keywords:
        if keyword.arg == "mask" and not _is_none(keyword.value):
            keyword.value = where(keyword.value)
            return
    if len(load.args) >= 2 and not _is_none(load.args[1]):
        load.args[1] = where(load.args[1])
        return
    pointer = load.args[0]
    everywhere = pyparse.parse(f"tl.full(({ast.unparse(pointer)}).shape, 1, tl.int1)", mode="eval").body
    load.keywords = [k for k in load.keywords if k.arg != "mask"]
    if len(load.args) >= 2:
        load.args[1] = where(everywhere)
    else:
        load.keywords.append(ast.keyword("mask", where(everywhere)))


def _is_none(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Constant) and expr.value is None


def _replace_call(stmt: ast.stmt, call: ast.Call, by: ast.expr) -> None:
    for node in ast.walk(stmt):
        for field, value in ast.iter_fields(node):
            if value is call:
                setattr(node, field, by)
            elif isinstance(value, list):
                for i, item in enumerate(value):
                    if item is call:
                        value[i] = by

