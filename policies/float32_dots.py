"""The float32-dots rewrite: a `tl.dot` told to multiply float32 exactly (`allow_tf32=False`,
`input_precision="ieee"`) is made three TF32 products on the tensor cores (`"tf32x3"`).

Why: "ieee" runs a float32 product on the CUDA cores, an order of magnitude below the tensor
cores' TF32 rate on Hopper. One TF32 product rounds each operand to 11 bits of mantissa, too coarse
for float32 tolerances (KernelBench's 1e-4) once values of both signs cancel. Three
(a_hi*b_hi + a_hi*b_lo + a_lo*b_hi, each operand split into two TF32 halves) keep about 22 bits,
near float32's 24, and still run on the tensor cores. torch.compile writes its float32 matmul
templates with `ALLOW_TF32 = False` when `torch.backends.cuda.matmul.allow_tf32` is off (the
default), so every float32 GEMM of KernelBench's level 1 that Inductor seeds is of this shape.

The precision is decided where the dot names it: a literal, or a name the kernel assigns once
from a literal (Inductor's `ALLOW_TF32 : tl.constexpr = False`), or a module constant. A dot that
names no precision already uses TF32 for float32 operands (Triton's default): left as it is. For
16-bit operands the precision means nothing, and the rewrite changes nothing that runs. The
judge, not this module, decides whether the accuracy is enough: its checks draw signed values.
"""

from __future__ import annotations

import ast
import copy

from accelopt.policies.kernel_ast import Refused, bindings, is_tl, plain_kernels, triton_module
from accelopt.tools.tunables import splice

PRECISION = "tf32x3"
# tl.dot(input, other, acc=None, input_precision=None, allow_tf32=None, ...): positions of the two
_INPUT_PRECISION, _ALLOW_TF32 = 3, 4


def float32_dots(source: str) -> str | None:
    """The module with every exact float32 `tl.dot` of its kernels made three TF32 products; None
    where there is none."""
    tree = triton_module(source)
    if tree is None:
        return None
    constants = _module_literals(tree)
    edits: list[tuple[int, int, int, int, str]] = []  # each dot's own span: the rest stays as written
    for fn in plain_kernels(tree, autotuned=True):
        known = _known(fn, constants)
        changed = []  # rewritten in place in a copy (positions kept), so a dot inside a dot is in both
        for node in ast.walk(copy.deepcopy(fn)):
            if isinstance(node, ast.Call) and is_tl(node.func, ("dot",)):
                try:
                    _make_tf32x3(node, known)
                    changed.append(node)
                except Refused:
                    continue
        inner = {id(n) for outer in changed for n in ast.walk(outer) if n is not outer}
        edits += [(n.lineno, n.col_offset, n.end_lineno or n.lineno, n.end_col_offset or 0, ast.unparse(n))
                  for n in changed if id(n) not in inner]  # spans must not overlap: the outermost only
    return splice(source, edits) if edits else None


def _make_tf32x3(call: ast.Call, known: dict[str, object]) -> None:
    """Rewrite `call` in place where it asks for exact float32 products; Refused otherwise."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        raise Refused("*args or **kwargs")
    precision = _argument(call, "input_precision", _INPUT_PRECISION)
    allow_tf32 = _argument(call, "allow_tf32", _ALLOW_TF32)
    exact = (precision is not None and _value(precision, known) == "ieee"
             or allow_tf32 is not None and _value(allow_tf32, known) is False)
    if not exact:
        raise Refused("the dot does not ask for exact float32 products")
    if len(call.args) > _ALLOW_TF32 + 1:
        raise Refused("arguments after allow_tf32 given by position")
    call.args = call.args[:_INPUT_PRECISION]
    call.keywords = [k for k in call.keywords if k.arg not in ("input_precision", "allow_tf32")]
    call.keywords.append(ast.keyword("input_precision", ast.Constant(PRECISION)))


def _argument(call: ast.Call, name: str, position: int) -> ast.expr | None:
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return call.args[position] if len(call.args) > position else None


_UNKNOWN = object()


def _value(expr: ast.expr, known: dict[str, object]) -> object:
    """A literal's value, or that of a name bound to one; _UNKNOWN otherwise."""
    if isinstance(expr, ast.Constant):
        return expr.value
    if isinstance(expr, ast.Name):
        return known.get(expr.id, _UNKNOWN)
    return _UNKNOWN


def _module_literals(tree: ast.Module) -> dict[str, object]:
    """Module-level names bound to a literal (`EXACT = "ieee"`)."""
    found: dict[str, object] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign | ast.AnnAssign) and isinstance(stmt.value, ast.Constant):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if len(targets) == 1 and isinstance(targets[0], ast.Name):
                found[targets[0].id] = stmt.value.value
    return found


def _known(fn: ast.FunctionDef, constants: dict[str, object]) -> dict[str, object]:
    """What the kernel's names hold where it is a literal: a name the kernel binds exactly once, to
    one (Inductor's `ALLOW_TF32 : tl.constexpr = False`), or a module constant it does not rebind."""
    params = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
    bound = bindings(fn)
    known = {k: v for k, v in constants.items() if k not in params and k not in bound}
    known.update({k: values[0].value for k, values in bound.items()
                  if k not in params and len(values) == 1 and isinstance(values[0], ast.Constant)})
    return known
