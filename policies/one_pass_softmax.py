"""The one-pass softmax rewrite: a kernel that walks a row twice, once for its maximum and once
for its sum of exponentials, is made to walk it once (an online softmax, chunk by chunk).

Why: cross-entropy, softmax and log-softmax kernels written by people and by LLMs take a row's
maximum in one loop and its sum of `exp(x - max)` in a second loop over the same columns, so every
element is read from memory twice. A row of a vocabulary (128256 bf16 logits: 256 KB) does not
stay in cache between the two loops, and the bundled cross_entropy baseline measured at 48% of a
same-size copy's speed on an H200 (BENCHMARKS.md). The two loops become one:

    m = tl.full([B], -inf)                 m = tl.full([B], -inf)
    for c in range(0, n, B):               s = tl.zeros([B])
        x = load(c)                        _run = -inf
        m = tl.maximum(m, x)         ->    for c in range(0, n, B):
    mx = tl.max(m, 0)                          x = load(c)
    s = tl.zeros([B])                          _prev = _run
    for c in range(0, n, B):                   _run = tl.maximum(_run, tl.max(x, 0))
        x = load(c)                            _shift = where(_run == -inf, 0, _run)
        s += tl.exp(x - mx)                    s = s * tl.exp(_prev - _shift) + tl.exp(x - _shift)
                                           mx = _run

The sum stays scaled to the running maximum, which moves once per chunk (one cross-lane max), so
an element costs one exponential, as before; after the loop the running maximum is the row's, so
`mx` and `s` hold what they held. The lanes' maximum `m`, reduced, is the running maximum (a
maximum rounds nothing), so where nothing else reads `m` its per-element update is dropped (on an
H200 it cost cross_entropy 4-6 points of a copy's speed); where something does, it stays, and
`mx = tl.max(m, 0)` as before. The rewrite is exact algebra only where the second loop's
accumulation is a sum of terms each proportional to `exp(... - mx)`; it checks that (sums, masks
with zero, products with terms free of `mx`, casts), and refuses anything else: other uses of the
maximum in the loop, stores in either loop, a loop whose first statements differ from the first
loop's (the element must be the same one), an accumulator that does not start at zero. A third
loop (softmax's normalising write) is left as it is: three reads become two.
"""

from __future__ import annotations

import ast
import copy

from accelopt.policies.kernel_ast import (
    has_effects,
    is_tl_call,
    kernel_span,
    loaded,
    plain_kernels,
    reads,
    stored,
    triton_module,
)
from accelopt.tools import pyparse
from accelopt.tools.tunables import splice

_RUN, _PREV, _SHIFT = "_row_max_run", "_row_max_prev", "_row_max_shift"
_OWN_NAMES = (_RUN, _PREV, _SHIFT)


class _Refused(Exception):
    pass


def one_pass_softmax(source: str) -> str | None:
    """The module with every max pass and exp-sum pass over the same columns fused into one online
    pass; None where no kernel has the pattern."""
    tree = triton_module(source)
    if tree is None:
        return None
    if any(isinstance(n, ast.Name) and n.id in _OWN_NAMES for n in ast.walk(tree)):
        return None
    edits = []
    for fn in plain_kernels(tree, autotuned=True):  # the signature stays: an autotuner's configs still apply
        new = copy.deepcopy(fn)
        if _fuse_in(new.body):
            edits.append((*kernel_span(source, fn), ast.unparse(ast.fix_missing_locations(new))))
    return splice(source, edits) if edits else None


def _fuse_in(stmts: list[ast.stmt]) -> bool:
    """Fuse every (max loop, exp-sum loop) pair in this statement list and the blocks inside it."""
    changed = False
    for stmt in stmts:
        for block in ("body", "orelse"):
            inner = getattr(stmt, block, None)
            if isinstance(stmt, ast.For | ast.While | ast.If) and isinstance(inner, list):
                changed |= _fuse_in(inner)
    i = 0
    while i < len(stmts):
        first = stmts[i]
        if isinstance(first, ast.For):
            for j in range(i + 1, len(stmts)):
                second = stmts[j]
                if not isinstance(second, ast.For) or ast.dump(second.iter) != ast.dump(first.iter):
                    continue
                try:
                    stmts[i:j + 1] = _fused(stmts[:i], first, stmts[i + 1:j], second, stmts[j + 1:])
                except _Refused:
                    break
                changed = True
                break
        i += 1
    return changed


def _fused(before: list[ast.stmt], first: ast.For, between: list[ast.stmt], second: ast.For,
           after: list[ast.stmt]) -> list[ast.stmt]:
    """The statements replacing `first, *between, second` (`after`: what follows them)."""
    if first.orelse or second.orelse or ast.dump(first.target) != ast.dump(second.target):
        raise _Refused("loops differ in their targets, or have else blocks")
    if has_effects(first.body) or has_effects(second.body) or has_effects(between):
        raise _Refused("a loop, or what lies between them, writes memory or leaves early")
    *prefix, update = first.body
    m, element = _max_update(update)
    vector = _max_is_vector(before, m)
    if m in stored(prefix) or _carried(prefix):
        raise _Refused("the first loop carries more than its maximum from one chunk to the next")
    # the second loop must begin with the first's element computation, unchanged
    head = second.body[:len(prefix)]
    if len(second.body) <= len(prefix) or [ast.dump(s) for s in head] != [ast.dump(s) for s in prefix]:
        raise _Refused("the second loop does not recompute the first loop's element")
    *rest, accumulate = second.body[len(prefix):]
    total, term = _sum_update(accumulate)
    row_max, between = _row_max(between, m, vector)
    if total in {m, row_max} | loaded(first.body) | stored(first.body) \
            or total not in _zero_initialised(before + between):
        raise _Refused("the sum does not start at zero before its loop")
    if (loaded(between) | stored(between)) & (stored(first.body) | {m, row_max}):
        raise _Refused("a statement between the loops touches what the first loop computed")
    proportional = _proportional_names(rest, row_max, total)
    if loaded(after) & proportional:
        raise _Refused("a term the loop scales by exp(-max) is read after it: it would hold another scale")
    if reads(term, total) or not _proportional(term, row_max, proportional):
        raise _Refused("the summed term is not proportional to exp(x - max)")
    chunk_max = f"tl.max({ast.unparse(element)}, 0)" if vector else ast.unparse(element)
    shifted = [_Replaced(row_max, _SHIFT).visit(copy.deepcopy(s)) for s in rest]
    new_term = _Replaced(row_max, _SHIFT).visit(copy.deepcopy(term))
    body = [*prefix, *_parsed(f"{_PREV} = {_RUN}", f"{_RUN} = tl.maximum({_RUN}, {chunk_max})"), update,
            *_parsed(f"{_SHIFT} = tl.where({_RUN} == float('-inf'), 0.0, {_RUN})"), *shifted,
            *_parsed(f"{total} = {total} * tl.exp({_PREV} - {_SHIFT}) + ({ast.unparse(new_term)})")]
    if vector and m not in loaded(rest) | loaded(between) | loaded(after):
        # the lanes' maximum, reduced, is the running maximum (a max rounds nothing): no second max per element
        body.remove(update)
        tail = _parsed(f"{row_max} = {_RUN}")
    elif vector:  # the lanes' maximum, reduced after the loop as it was between the loops
        tail = _parsed(f"{row_max} = tl.max({m}, 0)")
    else:
        tail = _parsed(f"{row_max} = {m}") if row_max != m else []
    loop = ast.For(target=first.target, iter=first.iter, body=body, orelse=[], type_comment=None)
    return [*between, *_parsed(f"{_RUN} = float('-inf')"), loop, *tail]


def _parsed(*lines: str) -> list[ast.stmt]:
    return pyparse.parse("\n".join(lines)).body


def _carried(stmts: list[ast.stmt]) -> set[str]:
    """Names a loop body reads before it binds them (in its own order): carried between chunks."""
    bound: set[str] = set()
    carried: set[str] = set()
    every = stored(stmts)
    for stmt in stmts:
        # an assignment reads its value before it binds its targets; any other statement, all of it
        value = stmt.value if isinstance(stmt, ast.Assign | ast.AugAssign) else None
        carried |= (loaded([ast.Expr(value)] if value is not None else [stmt]) & every) - bound
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            carried.add(stmt.target.id)
        bound |= stored([stmt])
    return carried


# ------------------------------------------------------------------ the first loop

def _max_update(stmt: ast.stmt) -> tuple[str, ast.expr]:
    """`m = tl.maximum(m, e)` (either order): (m, e)."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        raise _Refused("the first loop does not end in a maximum")
    m, call = stmt.targets[0].id, stmt.value
    if not (is_tl_call(call, "maximum") and isinstance(call, ast.Call) and len(call.args) == 2):
        raise _Refused("the first loop does not end in a maximum")
    a, b = call.args
    if isinstance(a, ast.Name) and a.id == m and not reads(b, m):
        return m, b
    if isinstance(b, ast.Name) and b.id == m and not reads(a, m):
        return m, a
    raise _Refused("the first loop does not end in a running maximum")


def _max_is_vector(before: list[ast.stmt], m: str) -> bool:
    """True for a per-lane maximum `tl.full([B], -inf, ...)`, False for a scalar `-inf`."""
    value = _last_value(before, m)
    if value is None:
        raise _Refused("the maximum has no start before its loop")
    if _is_minus_inf(value):
        return False
    if is_tl_call(value, "full") and isinstance(value, ast.Call) and len(value.args) >= 2 \
            and isinstance(value.args[0], ast.List | ast.Tuple) and len(value.args[0].elts) == 1 \
            and _is_minus_inf(value.args[1]):
        return True
    raise _Refused("the maximum does not start at -inf, as one lane vector or a scalar")


def _row_max(between: list[ast.stmt], m: str, vector: bool) -> tuple[str, list[ast.stmt]]:
    """The name the second loop subtracts, and what lies between the loops without its definition."""
    found = [s for s in between if isinstance(s, ast.Assign) and len(s.targets) == 1
             and isinstance(s.targets[0], ast.Name) and reads(s.value, m)]
    if vector:
        if len(found) != 1 or not _is_row_reduction(found[0].value, m):
            raise _Refused("the lanes' maximum is not reduced once between the loops")
        name = found[0].targets[0].id  # type: ignore[attr-defined]  # checked above
        return name, [s for s in between if s is not found[0]]
    if not found:
        return m, list(between)
    if len(found) == 1 and isinstance(found[0].value, ast.Name):  # `row_max = m`
        return found[0].targets[0].id, [s for s in between if s is not found[0]]  # type: ignore[attr-defined]
    raise _Refused("the scalar maximum is used between the loops")


def _is_row_reduction(value: ast.expr, m: str) -> bool:
    """`tl.max(m)`, `tl.max(m, 0)`, `tl.max(m, axis=0)`."""
    if not (is_tl_call(value, "max") and isinstance(value, ast.Call)) or not value.args:
        return False
    first = value.args[0]
    axes = value.args[1:] + [k.value for k in value.keywords if k.arg == "axis"]
    others = [k for k in value.keywords if k.arg != "axis"]
    return isinstance(first, ast.Name) and first.id == m and not others \
        and all(isinstance(a, ast.Constant) and a.value in (0, -1) for a in axes)


# ------------------------------------------------------------------ the second loop

def _sum_update(stmt: ast.stmt) -> tuple[str, ast.expr]:
    """`s += t` or `s = s + t` / `s = t + s`: (s, t)."""
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add) and isinstance(stmt.target, ast.Name):
        return stmt.target.id, stmt.value
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
            and isinstance(stmt.value, ast.BinOp) and isinstance(stmt.value.op, ast.Add):
        s, (a, b) = stmt.targets[0].id, (stmt.value.left, stmt.value.right)
        if isinstance(a, ast.Name) and a.id == s:
            return s, b
        if isinstance(b, ast.Name) and b.id == s:
            return s, a
    raise _Refused("the second loop does not end in a sum")


def _zero_initialised(stmts: list[ast.stmt]) -> set[str]:
    """Names whose last binding in stmts is zero: `0.0`, `tl.zeros(...)`, `tl.full(shape, 0, ...)`."""
    out: set[str] = set()
    for stmt in stmts:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            name, value = stmt.targets[0].id, stmt.value
            zero = _is_zero(value) or is_tl_call(value, "zeros") \
                or (is_tl_call(value, "full") and isinstance(value, ast.Call) and len(value.args) >= 2
                    and isinstance(value.args[1], ast.Constant) and value.args[1].value == 0)
            (out.add if zero else out.discard)(name)
        else:
            out -= stored([stmt])
    return out


def _proportional_names(rest: list[ast.stmt], row_max: str, total: str) -> set[str]:
    """Names the loop binds to a term proportional to exp(x - max); refused where the maximum flows
    anywhere else (a store, a second accumulator, a condition)."""
    proportional: set[str] = set()
    for stmt in rest:
        if not (reads(stmt, row_max) or any(reads(stmt, n) for n in proportional)):
            if stored([stmt]) & (proportional | {row_max, total}):
                raise _Refused("the loop rebinds the maximum or the sum")
            continue
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            raise _Refused("the maximum flows into something other than a plain binding")
        if not _proportional(stmt.value, row_max, proportional):
            raise _Refused("the maximum is used other than in exp(x - max)")
        proportional.add(stmt.targets[0].id)
    return proportional


def _proportional(expr: ast.expr, row_max: str, names: set[str]) -> bool:
    """Whether expr is a sum of terms each exp(a - row_max) times something free of row_max."""
    if isinstance(expr, ast.Name):
        return expr.id in names
    if _is_exp_of_shift(expr, row_max):
        return True
    if isinstance(expr, ast.BinOp):
        left, right = expr.left, expr.right
        if isinstance(expr.op, ast.Add | ast.Sub):
            return _proportional(left, row_max, names) and _proportional(right, row_max, names)
        if isinstance(expr.op, ast.Mult):
            return (_proportional(left, row_max, names) and _free(right, row_max, names)) \
                or (_free(left, row_max, names) and _proportional(right, row_max, names))
        if isinstance(expr.op, ast.Div):
            return _proportional(left, row_max, names) and _free(right, row_max, names)
        return False
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        return _proportional(expr.operand, row_max, names)
    if isinstance(expr, ast.Call):
        if is_tl_call(expr, "sum") and expr.args:
            return _proportional(expr.args[0], row_max, names) \
                and all(_free(a, row_max, names) for a in expr.args[1:] + [k.value for k in expr.keywords])
        if is_tl_call(expr, "where") and len(expr.args) == 3:
            condition, a, b = expr.args
            return _free(condition, row_max, names) and all(
                _is_zero(v) or _proportional(v, row_max, names) for v in (a, b)) \
                and not (_is_zero(a) and _is_zero(b))
        if isinstance(expr.func, ast.Attribute) and expr.func.attr == "to":  # a cast
            return _proportional(expr.func.value, row_max, names) \
                and all(_free(a, row_max, names) for a in expr.args + [k.value for k in expr.keywords])
    return False


def _is_exp_of_shift(expr: ast.expr, row_max: str) -> bool:
    """`tl.exp(a - row_max)` with row_max not in a."""
    if not (isinstance(expr, ast.Call) and (is_tl_call(expr, "exp") or ast.unparse(expr.func) == "tl.math.exp")
            and len(expr.args) == 1 and not expr.keywords):
        return False
    arg = expr.args[0]
    return isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Sub) and isinstance(arg.right, ast.Name) \
        and arg.right.id == row_max and not reads(arg.left, row_max)


def _free(expr: ast.expr, row_max: str, names: set[str]) -> bool:
    return not reads(expr, row_max) and not any(reads(expr, n) for n in names)


def _is_zero(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Constant) and expr.value == 0 and not isinstance(expr.value, bool)


# ------------------------------------------------------------------ helpers

class _Replaced(ast.NodeTransformer):
    def __init__(self, old: str, new: str):
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if isinstance(node.ctx, ast.Load) and node.id == self.old:
            return ast.copy_location(ast.Name(self.new, ast.Load()), node)
        return node


def _last_value(stmts: list[ast.stmt], name: str) -> ast.expr | None:
    for stmt in reversed(stmts):
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
            return stmt.value if len(stmt.targets) == 1 else None
        if name in stored([stmt]):
            return None
    return None


def _is_minus_inf(expr: ast.expr) -> bool:
    """`-float('inf')`, `float('-inf')`, `-math.inf`."""
    text = ast.unparse(expr).replace('"', "'").replace(" ", "")
    return text in ("-float('inf')", "float('-inf')", "-math.inf", "-float('Inf')")


