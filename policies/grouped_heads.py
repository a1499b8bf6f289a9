"""The grouped-heads rewrite: a grouped-query attention kernel that gives each query head a program
is made to give each program one KV head and all the query heads that share it, as the rows of a
tile, with the two products (q·k and p·v) as `tl.dot` on the tensor cores.

Why: decode kernels written per query head (the bundled gqa_paged_decode baseline; the o3 and
gpt-5 FlashInfer-Bench solutions) load a KV head once for each of the query heads that read it,
and compute q·k and p·v as element-wise products summed on the CUDA cores. On the H100 the bundled
baseline stood at 44-52% of a same-size copy under its best launch configuration (BENCHMARKS.md):
launch moves cannot close it. Made mechanically:

    b = tl.program_id(0)                  b = tl.program_id(0)
    h = tl.program_id(1)            ->    _kv_head = tl.program_id(1)
                                          _head_in_group = tl.arange(0, HEADS_TILE)
                                          h = _kv_head * (G) + _head_in_group
                                          _head_mask = (_head_in_group < (G)) & (h < _heads_total)
    kvh = h // G                          kvh = _kv_head
    q = tl.load(Q(b, h) + offs)           q = tl.load(Q(b, h)[:, None] + offs, mask=_head_mask[:, None])
    ...                                   ...
    s = tl.sum(k * q[None, :], axis=1)    s = tl.dot(q, tl.trans(k), input_precision=...)
    acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
                                    ->    acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=...)

and each launch's grid `(a, b)` becomes `(a, triton.cdiv(b, G))` with `_heads_total=b` and
`HEADS_TILE` = G rounded up to a power of two, at least MIN_HEADS_TILE. A kernel
on one axis of (row, head) programs (`h = pid % H` beside `b = pid // H`, as o3 and gpt-5 wrote
theirs) gets `_kv_head = pid % (H // G)`, `b = pid // (H // G)` and the grid `(cdiv(n, G),)`.

Every value that depends on the query head (found by following assignments, loops included, to a
fixed point) gains the heads as a new first axis; what does not (the KV head, its keys and values,
the token positions) stays as it was and is loaded once a program. Element-wise code broadcasts
once a head-dependent operand of lower rank is given singleton axes after its heads; a reduction
of one moves to the next axis; a load or store of one is masked to the heads that exist. A
reduction of a head-dependent vector times a head-independent matrix (a matrix-vector product)
becomes a `tl.dot` of the heads' tile with the matrix. Its precision is the launch's choice
(`DOT_PRECISION`, a constexpr): where no tensor the products' operands are loaded from is float32
(an fp32 output such as a log-sum-exp does not count), one TF32 product, exact on values cast up
from bf16 or fp16 (q, k, v) and 11 bits on the probabilities, eight times finer than a bf16
output's own rounding; where one is float32, three TF32 products (float32
accuracy). On the H100 the bundled task's grouped kernel ran at 80-97% of a same-size copy with one
TF32 product, 50-59% with three, 2% with `ieee` (no tensor cores). The rewrite refuses anything else:
a head that steers control flow, a head-dependent value of rank two or more (a 3-D tile), a call
it does not know, the KV head not found as `h // G` with G independent of the head, kernels
under @triton.autotune or @triton.heuristics.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass

from accelopt.policies.kernel_ast import (
    Refused,
    axis_of,
    docstring_and_body,
    is_tl,
    launch_arguments,
    loaded_params,
    names,
    on_host,
    program_id_axis,
    rewrite_launched_kernels,
    written_grid,
)
from accelopt.tools import pyparse

TILE = "HEADS_TILE"        # the heads a program holds, padded: a constexpr the launch computes
# Triton pads a dot's rows to the tensor cores' 16 itself (its min_dot_size takes fewer), so a tile
# of 16 heads padded here only made the softmax's element-wise work around the dots wider: on the
# H100, o3's FIB decode kernel grouped and counted ran 1.84x over itself with 4 rows, 1.71x with 16
# (BENCHMARKS.md, H100, 2026-11-27, 9768189). 4: the fewest rows measured on a GPU.
MIN_HEADS_TILE = 4
PRECISION = "DOT_PRECISION"  # tl.dot's input precision: a constexpr the launch chooses by its operands' memory
_KV = "_kv_head"
_LANE = "_head_in_group"
_MASK = "_head_mask"
_TOTAL = "_heads_total"
_OWN_NAMES = (TILE, PRECISION, _KV, _LANE, _MASK, _TOTAL)

_ELEMENTWISE = ("where", "maximum", "minimum", "exp", "exp2", "log", "log2", "sqrt", "sqrt_rn", "rsqrt", "abs",
                "sin", "cos", "sigmoid", "fma", "cast", "fdiv", "div_rn", "clamp", "erf", "floor", "ceil", "umulhi",
                "multiple_of", "max_contiguous")
_REDUCTIONS = ("sum", "max", "min", "argmax", "argmin")
_SCALARS = ("program_id", "num_programs", "cdiv")


def grouped_heads(source: str) -> str | None:
    """The module with every per-query-head GQA kernel made to take a KV head's query heads as one
    tile; None where no kernel qualifies."""
    return rewrite_launched_kernels(source, _OWN_NAMES, _grouped_kernel, _grouped_launch)


# ------------------------------------------------------------------ what a kernel must look like

@dataclass(frozen=True)
class _Shape:
    head: str                 # the query head's name
    head_at: int              # the index in the body of its statement
    kv_at: int                # ... of `kvh = h // G`
    group: ast.expr           # G, in the kernel's parameters and module constants only
    # a 1-D grid of (row, head) programs: `b = pid // H` at row_at, `h = pid % H`; None on a 2-D grid
    heads: ast.expr | None = None
    row_at: int | None = None


def _shape_of(fn: ast.FunctionDef, body: list[ast.stmt]) -> _Shape:
    """Where the query head comes from: `h = tl.program_id(1)` (a 2-D grid of rows and heads), or
    `h = pid % H` beside `b = pid // H` with `pid = tl.program_id(0)` (one axis of rows times heads)."""
    ids = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and is_tl(n.func, ("program_id",))]
    second = [i for i, s in enumerate(body) if program_id_axis(s) == 1]
    if len(second) == 1 and sum(axis_of(c) == 1 for c in ids) == 1:
        head_at, heads, row_at = second[0], None, None
    elif len(ids) == 1:
        head_at, heads, row_at = _rows_times_heads(body)
    else:
        raise Refused("not one program per query head")
    head = body[head_at].targets[0].id  # type: ignore[attr-defined]  # checked above
    if sum(isinstance(n, ast.Name) and n.id == head and isinstance(n.ctx, ast.Store) for n in ast.walk(fn)) != 1:
        raise Refused("the query head is assigned more than once")
    found = [(i, s) for i, s in enumerate(body) if i > head_at and _divides(s, head)]
    if len(found) != 1:
        raise Refused("no KV head computed as `h // G`")
    kv_at, stmt = found[0]
    value = stmt.value  # type: ignore[attr-defined]
    division = value.func.value if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) else value
    assert isinstance(division, ast.BinOp)  # checked by _divides
    group = _in_parameters(division.right, fn, body, head)
    return _Shape(head, head_at, kv_at, group, heads and _in_parameters(heads, fn, body, head), row_at)


def _rows_times_heads(body: list[ast.stmt]) -> tuple[int, ast.expr, int]:
    """(the index of `h = pid % H`, H, the index of `b = pid // H`) on a 1-D grid."""
    pids = [s.targets[0].id for s in body if program_id_axis(s) == 0]  # type: ignore[attr-defined]
    if len(pids) != 1:
        raise Refused("no program id bound to a name")

    def split(op: type) -> list[tuple[int, ast.expr]]:
        return [(i, s.value.right) for i, s in enumerate(body) if isinstance(s, ast.Assign) and len(s.targets) == 1
                and isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.BinOp)
                and isinstance(s.value.op, op) and isinstance(s.value.left, ast.Name) and s.value.left.id == pids[0]]

    heads, rows = split(ast.Mod), split(ast.FloorDiv)
    if len(heads) != 1 or len(rows) != 1 or ast.dump(heads[0][1]) != ast.dump(rows[0][1]):
        raise Refused("the program id not split into rows and heads by one count")
    return heads[0][0], heads[0][1], rows[0][0]


def _divides(stmt: ast.stmt, head: str) -> bool:
    """`name = head // G` or `name = (head // G).to(...)`."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return False
    value = stmt.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "to":
        value = value.func.value
    return isinstance(value, ast.BinOp) and isinstance(value.op, ast.FloorDiv) \
        and isinstance(value.left, ast.Name) and value.left.id == head


def _in_parameters(expr: ast.expr, fn: ast.FunctionDef, body: list[ast.stmt], head: str) -> ast.expr:
    """`expr` with every name the body binds once, at its top level, replaced by what it binds,
    until only parameters and module names are left (the group size, which the new first lines
    and the launch both need)."""
    params = {a.arg for a in fn.args.args}
    stores: dict[str, int] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            stores[node.id] = stores.get(node.id, 0) + 1
    top = {s.targets[0].id: s.value for s in body if isinstance(s, ast.Assign) and len(s.targets) == 1
           and isinstance(s.targets[0], ast.Name)}

    class Inline(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.expr:
            if node.id == head:
                raise Refused("the group size depends on the query head")
            if node.id in params or node.id not in stores:
                return node
            if stores[node.id] != 1 or node.id not in top:
                raise Refused(f"the group size reads {node.id}, bound more than once or in a block")
            return self.visit(copy.deepcopy(top[node.id]))

    out = Inline().visit(copy.deepcopy(expr))
    if any(isinstance(n, ast.Call) for n in ast.walk(out)):
        raise Refused("the group size is computed by a call")
    return out


def _moving(fn: ast.FunctionDef, shape: _Shape, kv_name: str) -> set[str]:
    """The names whose value depends on the query head: assignments followed to a fixed point,
    loops included (an accumulator initialised before a loop moves if the loop gives it a moving
    value). The KV head, which the rewrite makes the program's own, does not."""
    moving = {shape.head}
    while True:
        grown = set(moving)
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                stored = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
                if stored != {kv_name} and names(node.value) & grown:
                    grown |= stored
        if grown == moving:
            return moving
        moving = grown


# ------------------------------------------------------------------ the kernel

@dataclass
class _Value:
    node: ast.expr
    moving: bool   # has the heads as a new first axis
    rank: int      # the rank it had before the rewrite


def _expr_of(text: str) -> ast.expr:
    return pyparse.parse(text, mode="eval").body


def _expanded(value: _Value, rank: int) -> ast.expr:
    """A moving value given singleton axes after its heads, up to `rank` axes besides them."""
    if not value.moving or value.rank >= rank:
        return value.node
    index = ", ".join([":"] + ["None"] * (rank - value.rank) + [":"] * value.rank)
    return _expr_of(f"({ast.unparse(value.node)})[{index}]")


def _head_mask(rank: int) -> ast.expr:
    return _expr_of(_MASK if rank == 0 else f"{_MASK}[:{', None' * rank}]")


def _one_per_head(value: _Value) -> ast.expr:
    """A head-independent value given the heads' axis: an accumulator's first value, before the
    loop that makes it move. Its tiles (`tl.zeros`, `tl.full`) get the heads' axis where they make
    the whole value's shape; anything else is broadcast by a select."""

    class Tiles(ast.NodeTransformer):
        found = 0

        def visit_Call(self, node: ast.Call) -> ast.expr:
            if is_tl(node.func, ("zeros", "full")):
                shape = node.args[0] if node.args else next(k.value for k in node.keywords if k.arg == "shape")
                if isinstance(shape, ast.Tuple | ast.List) and len(shape.elts) == value.rank:
                    shape.elts.insert(0, ast.Name(TILE, ast.Load()))
                    self.found += 1
            return node

    tiles = Tiles()
    lifted = tiles.visit(copy.deepcopy(value.node))
    calls = sum(isinstance(n, ast.Call) and not (isinstance(n.func, ast.Name) and n.func.id in ("float", "int"))
                for n in ast.walk(value.node))
    if tiles.found and tiles.found == calls:  # nothing but tiles and arithmetic on them
        return lifted
    mask, written = ast.unparse(_head_mask(value.rank)), ast.unparse(value.node)
    return _expr_of(f"tl.where({mask}, {written}, {written})")


class _Grouper:
    """Rewrites a kernel's statements in order, tracking every name's rank."""

    def __init__(self, moving: set[str], params: set[str]) -> None:
        self.moving = moving
        self.ranks: dict[str, int] = {p: 0 for p in params}
        self.dot_operands: list[ast.expr] = []  # as written: what the launch's precision looks at

    # -------------------------------------------------------------- statements
    def block(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        return [out for s in stmts for out in self.stmt(s)]

    def stmt(self, stmt: ast.stmt) -> list[ast.stmt]:
        if isinstance(stmt, ast.Assign):
            if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
                if names(stmt) & self.moving:
                    raise Refused("a moving value assigned to several names or an element")
                return [self._static(stmt)]
            name = stmt.targets[0].id
            return [ast.Assign([ast.Name(name, ast.Store())], self._assigned(name, stmt.value))]
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            name = stmt.target.id
            value = ast.BinOp(ast.Name(name, ast.Load()), stmt.op, stmt.value)
            return [ast.Assign([ast.Name(name, ast.Store())], self._assigned(name, value))]
        if isinstance(stmt, ast.Expr):
            if isinstance(stmt.value, ast.Constant):
                return [stmt]
            return [ast.Expr(self.call_statement(stmt.value))]
        if isinstance(stmt, ast.For):
            if names(stmt.iter) & self.moving or names(stmt.target) & self.moving or stmt.orelse:
                raise Refused("a loop over something that depends on the head")
            for target in (n for n in ast.walk(stmt.target) if isinstance(n, ast.Name)):
                self.ranks[target.id] = 0
            return [ast.For(stmt.target, stmt.iter, self.block(stmt.body), [])]
        if isinstance(stmt, ast.While | ast.If):
            if names(stmt.test) & self.moving:
                raise Refused("control flow that depends on the head")
            self.expr(stmt.test)
            kind = type(stmt)
            return [kind(stmt.test, self.block(stmt.body), self.block(stmt.orelse))]
        if isinstance(stmt, ast.Return) and stmt.value is None or isinstance(stmt, ast.Pass | ast.Break | ast.Continue):
            return [stmt]
        raise Refused(f"{type(stmt).__name__}: not a statement the rewrite knows")

    def _static(self, stmt: ast.stmt) -> ast.stmt:
        for target in (n for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)):
            self.ranks.setdefault(target.id, 0)
        return stmt

    def _assigned(self, name: str, value: ast.expr) -> ast.expr:
        """What `name = value` assigns after the rewrite; the name's rank checked and recorded."""
        got = self.expr(value)
        if self.ranks.setdefault(name, got.rank) != got.rank:
            raise Refused(f"{name} is assigned values of different ranks")
        if name in self.moving and not got.moving:
            return _one_per_head(got)
        if got.moving and name not in self.moving:
            raise Refused(f"{name}: moves with the head where the analysis said it does not")
        return got.node

    def call_statement(self, node: ast.expr) -> ast.expr:
        if isinstance(node, ast.Call) and is_tl(node.func, ("store",)):
            return self._store(node)
        if isinstance(node, ast.Call) and is_tl(node.func, ("debug_barrier", "static_assert")) \
                and not names(node) & self.moving:
            return node
        raise Refused(f"{ast.unparse(node)[:40]}: a statement the rewrite does not know")

    # -------------------------------------------------------------- expressions
    def expr(self, node: ast.expr) -> _Value:
        if isinstance(node, ast.Constant):
            return _Value(node, False, 0)
        if isinstance(node, ast.Name):
            return _Value(node, node.id in self.moving, self.ranks.get(node.id, 0))
        if isinstance(node, ast.Attribute):  # a dtype, `x.dtype.element_ty`
            if node.attr in ("T", "shape") or names(node) & self.moving:
                raise Refused("the shape of a value that moves with the head")
            return _Value(node, False, 0)
        if isinstance(node, ast.UnaryOp):
            inner = self.expr(node.operand)
            return _Value(ast.UnaryOp(node.op, inner.node), inner.moving, inner.rank)
        if isinstance(node, ast.BinOp):
            left, right = self.expr(node.left), self.expr(node.right)
            rank = max(left.rank, right.rank)
            return self._checked(_Value(ast.BinOp(_expanded(left, rank), node.op, _expanded(right, rank)),
                                        left.moving or right.moving, rank))
        if isinstance(node, ast.Compare) and len(node.comparators) == 1:
            left, right = self.expr(node.left), self.expr(node.comparators[0])
            rank = max(left.rank, right.rank)
            return self._checked(_Value(ast.Compare(_expanded(left, rank), node.ops, [_expanded(right, rank)]),
                                        left.moving or right.moving, rank))
        if isinstance(node, ast.Subscript):
            return self._subscript(node)
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.BoolOp | ast.IfExp) and not names(node) & self.moving:
            return _Value(node, False, 0)
        raise Refused(f"{type(node).__name__}: not an expression the rewrite knows")

    @staticmethod
    def _checked(value: _Value) -> _Value:
        if value.moving and value.rank >= 2:
            raise Refused("a value of rank 2 that moves with the head would be a 3-D tile")
        return value

    def _subscript(self, node: ast.Subscript) -> _Value:
        inner = self.expr(node.value)
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if not all(isinstance(p, ast.Slice) and p.lower is p.upper is p.step is None
                   or isinstance(p, ast.Constant) and p.value is None for p in parts):
            raise Refused("indexing other than new axes")
        if sum(isinstance(p, ast.Slice) for p in parts) != inner.rank:
            raise Refused("indexing that does not keep every axis")
        if not inner.moving:
            return _Value(node, False, len(parts))
        index = ", ".join([":"] + [ast.unparse(p) or ":" for p in parts])
        return self._checked(_Value(_expr_of(f"({ast.unparse(inner.node)})[{index}]"), True, len(parts)))

    def _call(self, node: ast.Call) -> _Value:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "to" and not is_tl(func, ("to",)):
            inner = self.expr(func.value)
            return _Value(ast.Call(ast.Attribute(inner.node, "to", ast.Load()), node.args, node.keywords),
                          inner.moving, inner.rank)
        if isinstance(func, ast.Name) and func.id in ("float", "int", "min", "max") \
                or is_tl(func, _SCALARS) or is_tl(func, ("static_range", "range")):
            if names(node) & self.moving:
                raise Refused(f"{ast.unparse(func)} of a value that moves with the head")
            return _Value(node, False, 0)
        if is_tl(func, ("arange",)):
            return _Value(node, False, 1)
        if is_tl(func, ("zeros", "full")):
            shape = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "shape"), None)
            if not isinstance(shape, ast.Tuple | ast.List) or names(node) & self.moving:
                raise Refused("a tile whose shape is not written out")
            return _Value(node, False, len(shape.elts))
        if is_tl(func, ("load",)):
            return self._load(node)
        if is_tl(func, _REDUCTIONS):
            return self._reduction(node)
        if is_tl(func, ("dot", "trans")) and not names(node) & self.moving:
            return _Value(node, False, 2)
        if is_tl(func, _ELEMENTWISE) and not any(k.arg in ("mask",) for k in node.keywords):
            values = [self.expr(a) for a in node.args]
            keywords = [(k, self.expr(k.value)) for k in node.keywords]
            rank = max([v.rank for v in values] + [v.rank for _, v in keywords], default=0)
            moving = any(v.moving for v in values) or any(v.moving for _, v in keywords)
            call = ast.Call(func, [_expanded(v, rank) for v in values],
                            [ast.keyword(k.arg, _expanded(v, rank)) for k, v in keywords])
            return self._checked(_Value(call, moving, rank))
        raise Refused(f"{ast.unparse(func)}: a call the rewrite does not know")

    def _argument(self, node: ast.Call, position: int, keyword: str) -> ast.expr | None:
        if len(node.args) > position:
            return node.args[position]
        return next((k.value for k in node.keywords if k.arg == keyword), None)

    def _with_argument(self, node: ast.Call, position: int, keyword: str, value: ast.expr) -> None:
        if len(node.args) > position:
            node.args[position] = value
            return
        node.keywords = [k for k in node.keywords if k.arg != keyword] + [ast.keyword(keyword, value)]

    def _load(self, node: ast.Call) -> _Value:
        pointer = self._argument(node, 0, "pointer")
        if pointer is None or len(node.args) > 3:
            raise Refused("a load without its pointer, or with more than pointer, mask and other")
        address = self.expr(pointer)
        new = ast.Call(node.func, list(node.args), list(node.keywords))
        self._with_argument(new, 0, "pointer", address.node)
        mask, other = self._argument(node, 1, "mask"), self._argument(node, 2, "other")
        if not address.moving:
            if mask is not None and names(mask) & self.moving or other is not None and names(other) & self.moving:
                raise Refused("a load from an address that does not move with the head, masked by one that does")
            return _Value(node, False, address.rank)
        self._with_argument(new, 1, "mask", self._masked(mask, address.rank))
        if other is not None:
            self._with_argument(new, 2, "other", _expanded(self.expr(other), address.rank))
        return self._checked(_Value(new, True, address.rank))

    def _masked(self, mask: ast.expr | None, rank: int) -> ast.expr:
        """The heads' mask at `rank`, and the written one where there is one (tl.where: a scalar
        mask `&` a block is not a boolean block on Triton's interpreter)."""
        if mask is None:
            return _head_mask(rank)
        written = _expanded(self.expr(mask), rank)
        return _expr_of(f"tl.where({ast.unparse(_head_mask(rank))}, {ast.unparse(written)}, False)")

    def _store(self, node: ast.Call) -> ast.Call:
        pointer, value = self._argument(node, 0, "pointer"), self._argument(node, 1, "value")
        if pointer is None or value is None or len(node.args) > 3:
            raise Refused("a store without its pointer and value, or with more")
        address, stored = self.expr(pointer), self.expr(value)
        if not address.moving:
            if stored.moving or names(node) & self.moving:
                raise Refused("a value that moves with the head stored where it does not")
            return node
        new = ast.Call(node.func, list(node.args), list(node.keywords))
        self._with_argument(new, 0, "pointer", address.node)
        self._with_argument(new, 1, "value", _expanded(stored, address.rank))
        self._with_argument(new, 2, "mask", self._masked(self._argument(node, 2, "mask"), address.rank))
        return new

    def _reduction(self, node: ast.Call) -> _Value:
        if len(node.args) > 2 or any(k.arg not in ("axis",) for k in node.keywords):
            raise Refused("a reduction with more than its input and axis")
        axis_node = self._argument(node, 1, "axis")
        if axis_node is not None and not (isinstance(axis_node, ast.Constant) and isinstance(axis_node.value, int)
                                          or isinstance(axis_node, ast.UnaryOp) and isinstance(axis_node.op, ast.USub)
                                          and isinstance(axis_node.operand, ast.Constant)):
            raise Refused("a reduction over an axis that is not written out")
        axis = None if axis_node is None else ast.literal_eval(axis_node)
        product = self._product(node.args[0] if node.args else None, axis) \
            if is_tl(node.func, ("sum",)) else None
        if product is not None:
            return product
        inner = self.expr(node.args[0])
        rank = max(inner.rank - 1, 0) if axis is not None else 0
        if not inner.moving:
            return _Value(node, False, rank)
        if axis is None:
            if inner.rank != 1:
                raise Refused("a whole-tile reduction of a value of rank 2 that moves with the head")
            axis = 0
        new_axis = axis + 1 if axis >= 0 else axis
        return _Value(ast.Call(node.func, [inner.node], [ast.keyword("axis", ast.Constant(new_axis))]), True, rank)

    def _product(self, node: ast.expr | None, axis: int | None) -> _Value | None:
        """`tl.sum(M * u[None, :], axis=1)` or `tl.sum(u[:, None] * M, axis=0)` (either order), with u
        moving with the head and M a matrix that does not: a matrix-vector product per head, which
        is a `tl.dot` of the heads' tile with M. None where the sum is not one."""
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)) or axis is None:
            return None
        sides = [node.left, node.right]
        moving = [names(s) & self.moving != set() for s in sides]
        if moving.count(True) != 1:
            return None
        vector, matrix = sides[moving.index(True)], sides[moving.index(False)]
        if not (isinstance(vector, ast.Subscript) and isinstance(vector.slice, ast.Tuple)
                and len(vector.slice.elts) == 2):
            return None
        kinds = ["new" if isinstance(p, ast.Constant) else "keep" for p in vector.slice.elts]
        u, m = self.expr(vector.value), self.expr(matrix)
        if not (u.moving and u.rank == 1 and not m.moving and m.rank == 2):
            return None
        precision = f"input_precision={PRECISION}"
        self.dot_operands += [vector.value, matrix]
        if kinds == ["new", "keep"] and axis in (1, -1):   # out[n] = sum_d M[n, d] u[d]
            return _Value(_expr_of(f"tl.dot({ast.unparse(u.node)}, tl.trans({ast.unparse(m.node)}), {precision})"),
                          True, 1)
        if kinds == ["keep", "new"] and axis in (0, -2):   # out[d] = sum_n u[n] M[n, d]
            return _Value(_expr_of(f"tl.dot({ast.unparse(u.node)}, {ast.unparse(m.node)}, {precision})"), True, 1)
        return None


def _grouped_kernel(fn: ast.FunctionDef) -> ast.FunctionDef:
    return _grouped(fn)[0]


def _grouped(fn: ast.FunctionDef) -> tuple[ast.FunctionDef, list[str], _Shape]:
    """The grouped kernel, the parameters whose memory the dots' operands are loaded from, and
    where the kernel's query head came from."""
    doc, body = docstring_and_body(fn)
    shape = _shape_of(fn, body)
    kv_name = body[shape.kv_at].targets[0].id  # type: ignore[attr-defined]  # checked by _divides
    moving = _moving(fn, shape, kv_name)
    if kv_name in moving or names(shape.group) & moving or shape.heads and names(shape.heads) & moving:
        raise Refused("the KV head or the group size moves with the query head")
    group = ast.unparse(shape.group)
    grouper = _Grouper(moving, {a.arg for a in fn.args.args})
    new_body: list[ast.stmt] = []
    for index, stmt in enumerate(body):
        if index == shape.kv_at:
            new_body.append(pyparse.parse(f"{kv_name} = {_KV}").body[0])
        elif index == shape.head_at:
            if shape.heads is None:  # a 2-D grid: its second axis counts KV heads now
                kv_head, total = "tl.program_id(1)", _TOTAL
            else:                    # rows times heads: the row's KV heads
                pid = stmt.value.left.id  # type: ignore[attr-defined]  # checked by _rows_times_heads
                kv_head, total = f"{pid} % (({ast.unparse(shape.heads)}) // ({group}))", f"({ast.unparse(shape.heads)})"
            new_body += pyparse.parse(f"{_KV} = {kv_head}\n"
                                  f"{_LANE} = tl.arange(0, {TILE})\n"
                                  f"{shape.head} = {_KV} * ({group}) + {_LANE}\n"
                                  f"{_MASK} = ({_LANE} < ({group})) & ({shape.head} < {total})").body
        elif index == shape.row_at:
            row, pid = stmt.targets[0].id, stmt.value.left.id  # type: ignore[attr-defined]  # as above
            new_body += pyparse.parse(f"{row} = {pid} // (({ast.unparse(shape.heads)}) // ({group}))").body  # type: ignore[arg-type]
        else:
            new_body += grouper.stmt(stmt)
    if not any(isinstance(n, ast.Call) and is_tl(n.func, ("dot",)) for s in new_body for n in ast.walk(s)):
        raise Refused("no matrix-vector product to make a tl.dot: nothing for the tensor cores")
    new = copy.deepcopy(fn)
    new.body = doc + new_body
    added = ([_TOTAL] if shape.heads is None else []) + [TILE, PRECISION]
    new.args.args += [ast.arg(a, None if a == _TOTAL else _expr_of("tl.constexpr")) for a in added]
    if fn.args.defaults:  # parameters after defaulted ones need defaults
        defaults: dict[str, int | str] = {_TOTAL: 0, TILE: MIN_HEADS_TILE, PRECISION: "tf32x3"}
        new.args.defaults += [ast.Constant(defaults[a]) for a in added]
    return ast.fix_missing_locations(new), loaded_params(fn, grouper.dot_operands), shape


# ------------------------------------------------------------------ the launches

def _grouped_launch(call: ast.Call, owner: ast.FunctionDef | None, fn: ast.FunctionDef) -> tuple[int, int, int, int, str]:
    """One edit replacing `kernel[grid](args)` with the grouped launch: `(a, b)` -> `(a, cdiv(b, G))`
    on a 2-D grid, `(n,)` -> `(cdiv(n, G),)` on rows times heads."""
    sub = call.func
    assert isinstance(sub, ast.Subscript)
    if any(k.arg in _OWN_NAMES or k.arg is None for k in call.keywords) or any(
            isinstance(a, ast.Starred) for a in call.args):
        raise Refused("the launch names our parameters, or passes *args or **kwargs")
    _, loaded_from, shape = _grouped(fn)
    grid = written_grid(owner, sub.slice)
    axes = 2 if shape.heads is None else 1
    if not (isinstance(grid, ast.Tuple) and len(grid.elts) == axes
            and not any(isinstance(e, ast.Starred) for e in grid.elts)):
        raise Refused(f"the grid is not a {axes}-element tuple")
    group = f"({ast.unparse(_launch_side(shape.group, fn, call))})"
    args = [ast.unparse(a) for a in call.args] + [f"{k.arg}={ast.unparse(k.value)}" for k in call.keywords]
    passed = launch_arguments(fn, call)
    sources = [passed[p] for p in loaded_from if p in passed]
    tensors = ", ".join(f"({ast.unparse(a)})" for a in sources)
    # float32 memory among them: three TF32 products; none found: the same, to be safe
    exact = f"'tf32x3' if any(str(getattr(a, 'dtype', '')) == 'torch.float32' for a in ({tensors},)) else 'tf32'" \
        if sources else "'tf32x3'"
    extra = [f"{TILE}=max({MIN_HEADS_TILE}, triton.next_power_of_2({group}))", f"{PRECISION}=({exact})"]
    programs = ast.unparse(grid.elts[-1])
    if shape.heads is None:
        new_grid = f"({ast.unparse(grid.elts[0])}, triton.cdiv({programs}, {group}))"
        extra.insert(0, f"{_TOTAL}={programs}")
    else:
        new_grid = f"(triton.cdiv({programs}, {group}),)"
    new = f"{ast.unparse(sub.value)}[{new_grid}]({', '.join(args + extra)})"
    return (call.lineno, call.col_offset, call.end_lineno or call.lineno, call.end_col_offset or 0, new)


def _launch_side(group: ast.expr, fn: ast.FunctionDef, call: ast.Call) -> ast.expr:
    """The group size as the launch computes it: each kernel parameter replaced by the argument the
    launch passes for it (or its default)."""
    passed = launch_arguments(fn, call)
    missing = names(group) & {a.arg for a in fn.args.args} - set(passed)
    if missing:
        raise Refused(f"the launch does not pass {', '.join(sorted(missing))}, which the group size reads")
    return on_host(group, passed)  # module constants stay: the launch sees them as the kernel does
