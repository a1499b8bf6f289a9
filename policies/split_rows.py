"""The split-row rewrite: a kernel that gives each program one row of a 1-D grid and walks the row
in one loop that only reduces it (a maximum, a sum, an online softmax's scaled sum) is split in
two launches. `K_parts`, on an (n, parts) grid, walks `PART_BLOCK` columns of a row a program and
stores each value its loop carried, reduced to one number; the kernel as written, on (n,),
combines each row's parts and runs what followed the loop.

Why: few long rows leave the GPU with too few programs and too few loads in flight. On an H200 the
bundled cross_entropy, already one online pass with its next chunk prefetched, read its logits at
78-80% of a same-size copy's speed with 1024-8192 rows of 32000-128256 columns a program; split in
parts of about 16384 columns it ran at 83-89% (`evals/probe_configs.py`, BENCHMARKS.md). Made
mechanically:

    row = tl.program_id(0)                  K_parts (grid (n, parts)):
    m = tl.full([B], -inf, tl.float32)          <the statements before the loop>
    s = tl.zeros([B], tl.float32)               _split_cols = tl.cdiv(tl.cdiv(b - a, _split_parts), B) * B
    for c in range(a, b, B):                    _split_lo = a + tl.program_id(1) * _split_cols
        x = tl.load(...)                        for c in range(_split_lo, tl.minimum(_split_lo + _split_cols, b), B):
        m = tl.maximum(m, x)                        <the loop>
        s += x                                  tl.store(<this part's slot>, tl.max(m, 0)), ... tl.sum(s, 0)
    tl.store(y + row, tl.max(m, 0) + tl.sum(s, 0))
                                            K (grid (n,)):
                                                <the statements before the loop>
                                                _split_m = tl.max(<the row's parts of m>, 0); _split_s = tl.sum(...)
                                                tl.store(y + row, _split_m + _split_s)

and the launch `K[(n,)](...)` becomes the two, with `_split_parts = triton.cdiv(b - a, PART_BLOCK)`
computed on the host from the launch's own arguments and a float32 buffer of the parts. A part
starts on a multiple of the loop's step, so every iteration of the loop as written runs in exactly
one part, unchanged; only the order in which the parts are added differs.

What the loop may carry (and how parts combine): a maximum `v = tl.maximum(v, e)` from -inf, a
minimum from +inf, a sum `v += e` from zero, and the online softmax's sum scaled to its running
maximum (`v = v * tl.exp(PREV - SHIFT) + e` with `PREV = M` before M's update and `SHIFT =
tl.where(M == -inf, 0.0, M)` after it, M a scalar maximum: what the one-pass rewrite writes),
whose parts are rescaled to the row's maximum. A carried 1-D vector may be used after the loop only
reduced whole (`tl.max(v, 0)` for a maximum, `tl.sum(v, 0)` for a sum); nothing else the loop
binds may be read after it. Refused: any other carried value, float32 only; a loop with a store,
a branch or a nested loop; statements before the loop that store; a second loop; kernels under
@triton.autotune or @triton.heuristics; launches that are not a statement of their own with a
one-element grid; loop bounds that are not the kernel's parameters and constants.
"""

from __future__ import annotations

import ast
import copy

from accelopt.policies.kernel_ast import (
    Refused,
    addressed_params,
    bound_names,
    has_effects,
    is_tl,
    is_tl_call,
    launch_arguments,
    launch_statement,
    loaded,
    names,
    on_host,
    one_element_grid_name,
    program_id_axis,
    split_kernel_edits,
    stored,
    triton_module,
    with_constant,
)
from accelopt.tools import pyparse
from accelopt.tools.tunables import splice

KNOB = "PART_BLOCK"      # columns of a row a program of K_parts walks; the tuner moves it
FIRST_VALUE = 16384      # measured best on all three cross_entropy workloads (H200)
_PARTS, _BUF, _P2 = "_split_parts", "_split_buf", "PARTS_P2"
_PREFIX = "_split_"
_NEG_INF, _POS_INF = "float('-inf')", "float('inf')"


def split_rows(source: str) -> str | None:
    """The module with every one-row, one-reduction-loop kernel split into parts and their
    combine; None where no kernel qualifies."""
    tree = triton_module(source)
    if tree is None:
        return None
    taken = bound_names(tree)
    if KNOB in taken or _P2 in taken or any(n.startswith(_PREFIX) for n in taken):
        return None
    edits = split_kernel_edits(source, tree, _Split)
    if not edits:
        return None
    note = "columns of a row a program of the parts kernel walks (the split-row rewrite); the tuner moves it"
    return with_constant(splice(source, edits), KNOB, FIRST_VALUE, note)


class _Carried:
    """A value the loop carries: its kind ("max", "min", "sum", "scaled"), whether it is a 1-D
    vector, and for a scaled sum the maximum it is scaled to."""

    def __init__(self, name: str, kind: str, vector: bool, by: str | None = None):
        self.name, self.kind, self.vector, self.by = name, kind, vector, by

    @property
    def identity(self) -> str:
        return {"max": _NEG_INF, "min": _POS_INF}.get(self.kind, "0.0")

    @property
    def op(self) -> str:
        """The reduction that combines its parts (a scaled sum: a sum, once rescaled)."""
        return self.kind if self.kind in ("max", "min") else "sum"

    def reduced(self, value: str) -> str:
        """`value` (this value's vector, or scalar) reduced to one number."""
        return f"tl.{self.op}({value}, 0)" if self.vector else value


class _Split:
    def __init__(self, fn: ast.FunctionDef):
        self.fn = fn
        if fn.args.vararg or fn.args.kwarg or fn.args.kwonlyargs or fn.args.posonlyargs:
            raise Refused("a variadic signature")
        if any(isinstance(n, ast.Return) for n in ast.walk(fn)):
            raise Refused("return in the kernel")
        ids = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and is_tl(n.func, ("program_id", "num_programs"))]
        body = list(fn.body)
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # a docstring
        loops = [i for i, s in enumerate(body) if isinstance(s, ast.For | ast.While)]
        if len(loops) != 1 or not isinstance(body[loops[0]], ast.For) or any(
                isinstance(n, ast.For | ast.While) for s in body for n in ast.walk(s) if n is not body[loops[0]]):
            raise Refused("not one loop")
        if len(ids) != 1 or not any(program_id_axis(s) == 0 for s in body[:loops[0]]):
            raise Refused("not one program per row of a 1-D grid")
        loop = body[loops[0]]
        assert isinstance(loop, ast.For)  # checked above
        self.pre, self.loop, self.post = body[:loops[0]], loop, body[loops[0] + 1:]
        if has_effects(self.pre) or has_effects(self.loop.body) or self.loop.orelse:
            raise Refused("a store, return or break before or in the loop")
        if not all(isinstance(s, ast.Assign | ast.AugAssign) for s in self.loop.body):
            raise Refused("the loop is not straight-line assignments")
        self.start, self.stop, self.step = _bounds(self.loop)
        self.carried = self._carried()
        self.post_new = self._combined_post()

    # ---------------------------------------------------------------- the loop's values

    def _carried(self) -> list[_Carried]:
        body = self.loop.body
        assigned: set[str] = set()
        carried: list[str] = []
        for stmt in body:
            reads = loaded([stmt]) | (stored([stmt]) if isinstance(stmt, ast.AugAssign) else set())
            carried += [n for n in sorted(reads & stored(body)) if n not in assigned and n not in carried]
            assigned |= stored([stmt])
        after = loaded(self.post)
        loop_var = {n.id for n in ast.walk(self.loop.target) if isinstance(n, ast.Name)}
        if (stored(body) | loop_var) & after - set(carried):
            raise Refused("a value of the loop's last iteration is read after it")
        found = {name: self._kind(name) for name in carried}
        for value in found.values():
            if value.kind == "scaled" and (value.by not in found or found[value.by].kind != "max"
                                           or found[value.by].vector):
                raise Refused("a scaled sum whose maximum is not a scalar maximum the loop carries")
        return list(found.values())

    def _kind(self, name: str) -> _Carried:
        updates = [s for s in self.loop.body if name in stored([s])]
        inits = [s for s in self.pre if name in stored([s])]
        if len(updates) != 1 or len(inits) != 1 or not isinstance(inits[0], ast.Assign):
            raise Refused(f"{name} is not set once before the loop and once in it")
        update, init = updates[0], inits[0].value
        vector = _vector_init(init)
        if vector is None:
            raise Refused(f"{name} does not start as a float32 scalar or 1-D vector")
        start = _init_value(init)
        if isinstance(update, ast.AugAssign):
            if isinstance(update.op, ast.Add) and start == "0" and name not in loaded([ast.Expr(update.value)]):
                return _Carried(name, "sum", vector)
            raise Refused(f"{name}: an update that is not a sum")
        assert isinstance(update, ast.Assign)  # the loop is straight-line assignments
        value = update.value
        for kind, fn_name, identity in (("max", "maximum", "-inf"), ("min", "minimum", "inf")):
            if isinstance(value, ast.Call) and is_tl(value.func, (fn_name,)) and len(value.args) == 2 \
                    and start == identity:
                args = value.args
                own = [a for a in args if isinstance(a, ast.Name) and a.id == name]
                other = [a for a in args if a not in own]
                if len(own) == 1 and len(other) == 1 and name not in names(other[0]):
                    return _Carried(name, kind, vector)
        if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add) and start == "0":
            sides = [value.left, value.right]
            own = [s for s in sides if isinstance(s, ast.Name) and s.id == name]
            if len(own) == 1 and name not in names(next(s for s in sides if s is not own[0])):
                return _Carried(name, "sum", vector)
            by = self._scaled_by(name, value)
            if by is not None:
                return _Carried(name, "scaled", vector, by)
        raise Refused(f"{name}: not a maximum, minimum, sum or scaled sum")

    def _scaled_by(self, name: str, value: ast.BinOp) -> str | None:
        """M where `value` is `name * tl.exp(PREV - SHIFT) + e`, PREV = M before M's update and
        SHIFT = tl.where(M == -inf, 0.0, M) after it (the one-pass rewrite's online softmax)."""
        scale = value.left
        if not (isinstance(scale, ast.BinOp) and isinstance(scale.op, ast.Mult)
                and isinstance(scale.left, ast.Name) and scale.left.id == name
                and is_tl_call(scale.right, "exp") and name not in names(value.right)):
            return None
        diff = scale.right.args[0] if scale.right.args else None  # type: ignore[attr-defined]
        if not (isinstance(diff, ast.BinOp) and isinstance(diff.op, ast.Sub)
                and isinstance(diff.left, ast.Name) and isinstance(diff.right, ast.Name)):
            return None
        bound = {s.targets[0].id: (i, s.value) for i, s in enumerate(self.loop.body)
                 if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)}
        prev, shift = bound.get(diff.left.id), bound.get(diff.right.id)
        if prev is None or shift is None or not isinstance(prev[1], ast.Name):
            return None
        m = prev[1].id
        updated = bound.get(m)
        expected = f"tl.where({m} == float('-inf'), 0.0, {m})"
        if updated is None or not prev[0] < updated[0] < shift[0] or ast.unparse(shift[1]) != expected:
            return None
        return m

    # ---------------------------------------------------------------- what follows the loop

    def _combined_post(self) -> list[ast.stmt]:
        by_name = {c.name: c for c in self.carried}
        post = [_Combined(by_name).visit(copy.deepcopy(s)) for s in self.post]
        if loaded(post) & set(by_name):
            raise Refused("a carried vector is used after the loop other than reduced whole")
        return post

    # ---------------------------------------------------------------- the two kernels

    def kernels(self) -> str:
        count = len(self.carried)
        slot = f"(tl.program_id(0) * {_PARTS} + tl.program_id(1)) * {count}"
        loop = copy.deepcopy(self.loop)
        lo = f"{_PREFIX}lo"
        loop.iter = pyparse.parse(f"{ast.unparse(self.loop.iter.func)}({lo}, tl.minimum({lo} + {_PREFIX}cols, "  # type: ignore[attr-defined]
                              f"{self.stop}), {self.step})", mode="eval").body
        parts = copy.deepcopy(self.fn)
        parts.name = f"{self.fn.name}_parts"
        parts.decorator_list = [pyparse.parse("triton.jit", mode="eval").body]
        parts.body = copy.deepcopy(self.pre) + pyparse.parse(
            f"{_PREFIX}cols = tl.cdiv(tl.cdiv({self.stop} - ({self.start}), {_PARTS}), {self.step}) * {self.step}\n"
            f"{lo} = {self.start} + tl.program_id(1) * {_PREFIX}cols").body + [loop] + [
            pyparse.parse(f"tl.store({_BUF} + {slot} + {j}, {c.reduced(c.name)})").body[0]
            for j, c in enumerate(self.carried)]
        self._with_params(parts, combine=False)
        combine = copy.deepcopy(self.fn)
        combine.body = copy.deepcopy(self.pre) + self._combine_statements() + self.post_new
        self._with_params(combine, combine=True)
        return "\n\n\n".join(ast.unparse(ast.fix_missing_locations(k)) for k in (parts, combine))

    def _with_params(self, new: ast.FunctionDef, combine: bool) -> None:
        """The buffer and the parts count; the combine also the parts' power of two, and the parts
        kernel PART_BLOCK (unread there: passed so the tuner finds and moves it; the host's parts
        count reads the same constant)."""
        constexpr = pyparse.parse("tl.constexpr", mode="eval").body
        new.args.args += [ast.arg(_BUF), ast.arg(_PARTS), ast.arg(_P2 if combine else KNOB, constexpr)]
        if self.fn.args.defaults:  # parameters after defaulted ones need defaults too
            new.args.defaults += [ast.Constant(None), ast.Constant(1), ast.Constant(1)]

    def _combine_statements(self) -> list[ast.stmt]:
        count = len(self.carried)
        lines = [f"{_PREFIX}at = tl.arange(0, {_P2})",
                 f"{_PREFIX}in = {_PREFIX}at < {_PARTS}",
                 f"{_PREFIX}slot = (tl.program_id(0) * {_PARTS} + {_PREFIX}at) * {count}"]
        for j, c in enumerate(self.carried):
            lines.append(f"{_PREFIX}{c.name}_parts = tl.load({_BUF} + {_PREFIX}slot + {j}, mask={_PREFIX}in, "
                         f"other={c.identity})")
        for c in (c for c in self.carried if c.kind != "scaled"):
            lines.append(f"{_PREFIX}{c.name} = tl.{c.op}({_PREFIX}{c.name}_parts, 0)")
        for c in (c for c in self.carried if c.kind == "scaled"):
            m, parts_m = f"{_PREFIX}{c.by}", f"{_PREFIX}{c.by}_parts"
            lines.append(f"{_PREFIX}{c.name} = tl.sum({_PREFIX}{c.name}_parts * tl.exp("
                         f"tl.where({parts_m} == {_NEG_INF}, 0.0, {parts_m}) - tl.where({m} == {_NEG_INF}, 0.0, {m})), 0)")
        return pyparse.parse("\n".join(lines)).body

    # ---------------------------------------------------------------- the launch

    def launch(self, source: str, call: ast.Call, owner: ast.FunctionDef | None) -> tuple[int, int, int, int, str]:
        """The launch statement replaced by the parts' buffer, the parts launch and the combine."""
        statement = launch_statement(owner, call)
        sub = call.func
        assert isinstance(sub, ast.Subscript)
        if any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
            raise Refused("a launch passing *args or **kwargs")
        rows = _one_element_grid(sub.slice, owner)
        arguments = launch_arguments(self.fn, call)
        # the buffer goes where the tensors are: a parameter loads are addressed from, `*ptr*` first
        pointers = sorted((p for p in addressed_params(self.fn, ("load",)) if p in arguments),
                          key=lambda p: "ptr" not in p)
        if not pointers:
            raise Refused("no tensor the kernel loads from to place the buffer on")
        stop, start = (_on_host(expr, arguments) for expr in (self.stop, self.start))
        written = [ast.unparse(a) for a in call.args] + [f"{k.arg}={ast.unparse(k.value)}" for k in call.keywords]
        extra = ", ".join(written + [f"{_BUF}={_BUF}", f"{_PARTS}={_PARTS}"])
        name = self.fn.name
        line = source.splitlines()[statement.lineno - 1]
        indent = line[:len(line) - len(line.lstrip())]
        span = start if start != "(0)" else None
        lines = [f"{_PARTS} = triton.cdiv({stop}{f' - {span}' if span else ''}, {KNOB})",
                 f"{_BUF} = torch.empty({rows} * {_PARTS} * {len(self.carried)}, dtype=torch.float32, "
                 f"device=({ast.unparse(arguments[pointers[0]])}).device)",
                 f"{name}_parts[({rows}, {_PARTS})]({extra}, {KNOB}={KNOB})",
                 f"{name}[({rows},)]({extra}, {_P2}=triton.next_power_of_2({_PARTS}))"]
        return (statement.lineno, statement.col_offset, statement.end_lineno or statement.lineno,
                statement.end_col_offset or 0, ("\n" + indent).join(lines))


class _Combined(ast.NodeTransformer):
    """After the loop: a carried vector reduced whole, and a carried scalar, read as the parts' combination."""

    def __init__(self, carried: dict[str, _Carried]):
        self.carried = carried

    def visit_Call(self, node: ast.Call) -> ast.expr:
        if node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in self.carried:
            value = self.carried[node.args[0].id]
            axis = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "axis"), None)
            whole = axis is None or isinstance(axis, ast.Constant) and axis.value == 0
            if value.vector and is_tl(node.func, (value.op,)) and whole and len(node.args) <= 2:
                return ast.copy_location(ast.Name(f"{_PREFIX}{value.name}", ast.Load()), node)
        self.generic_visit(node)
        return node

    def visit_Name(self, node: ast.Name) -> ast.Name:
        value = self.carried.get(node.id)
        if value is not None and not value.vector and isinstance(node.ctx, ast.Load):
            return ast.copy_location(ast.Name(f"{_PREFIX}{value.name}", ast.Load()), node)
        return node


def _bounds(loop: ast.For) -> tuple[str, str, str]:
    """(start, stop, step) of `for v in range(...)` or `tl.range(...)`, as kernel expressions."""
    call = loop.iter
    if not (isinstance(call, ast.Call) and (isinstance(call.func, ast.Name) and call.func.id == "range"
                                           or is_tl(call.func, ("range",))) and not call.keywords
            and 1 <= len(call.args) <= 3 and isinstance(loop.target, ast.Name)):
        raise Refused("the loop is not over a range")
    args = [ast.unparse(a) for a in call.args]
    start, stop, step = ("0", args[0], "1") if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else "1")
    return start, stop, step


def _vector_init(init: ast.expr) -> bool | None:
    """True for a float32 1-D `tl.full`/`tl.zeros`, False for a float literal, None otherwise."""
    if isinstance(init, ast.Call) and is_tl(init.func, ("full", "zeros")):
        shape = init.args[0] if init.args else None
        dtype = next((k.value for k in init.keywords if k.arg == "dtype"), None)
        dtype = dtype or (init.args[2] if is_tl(init.func, ("full",)) and len(init.args) > 2
                          else init.args[1] if is_tl(init.func, ("zeros",)) and len(init.args) > 1 else None)
        if isinstance(shape, ast.List | ast.Tuple) and len(shape.elts) == 1 and dtype is not None \
                and ast.unparse(dtype) == "tl.float32":
            return True
        return None
    return False if _init_value(init) in ("0", "-inf", "inf") and not (
        isinstance(init, ast.Constant) and type(init.value) is int) else None


def _init_value(init: ast.expr) -> str | None:
    """"0", "-inf" or "inf" where the initial value is that (a literal or a tl.full/tl.zeros of it)."""
    if isinstance(init, ast.Call) and is_tl(init.func, ("zeros",)):
        return "0"
    if isinstance(init, ast.Call) and is_tl(init.func, ("full",)) and len(init.args) > 1:
        init = init.args[1]
    text = ast.unparse(init).replace('"', "'")
    if text in ("0.0", "0"):
        return "0"
    if text in ("float('-inf')", "-float('inf')", "-math.inf"):
        return "-inf"
    if text in ("float('inf')", "math.inf"):
        return "inf"
    return None


def _one_element_grid(grid: ast.expr, owner: ast.FunctionDef | None) -> str:
    if isinstance(grid, ast.Tuple) and len(grid.elts) == 1 and not isinstance(grid.elts[0], ast.Starred):
        return f"({ast.unparse(grid.elts[0])})"
    if isinstance(grid, ast.Name) and one_element_grid_name(owner, grid):
        return f"{grid.id}[0]"
    raise Refused("the grid is not a one-element tuple")


def _on_host(expr: str, arguments: dict[str, ast.expr]) -> str:
    """A loop bound of the kernel's parameters and constants, as the launch's host expression."""
    tree = pyparse.parse(expr, mode="eval").body
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in arguments:
            raise Refused(f"a loop bound reads {node.id}, not a parameter the launch passes")
        if not isinstance(node, ast.Name | ast.Constant | ast.BinOp | ast.UnaryOp | ast.operator | ast.unaryop
                          | ast.Load):
            raise Refused("a loop bound that is not arithmetic on parameters")

    return f"({ast.unparse(on_host(tree, arguments))})"

