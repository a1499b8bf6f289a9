"""What the source rewrites (row_groups.py, axis_tiles.py, one_pass_softmax.py, prefetch_loads.py)
ask of a kernel module's syntax tree: its Triton kernels and their launches, names bound and read,
`tl.` calls."""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Callable
from typing import Protocol

from accelopt.tools import pyparse
from accelopt.tools.tunables import splice


def plain_kernels(tree: ast.Module, autotuned: bool = False) -> list[ast.FunctionDef]:
    """Module-level @triton.jit kernels; those under @triton.autotune or @triton.heuristics only
    where `autotuned` (a rewrite that keeps the signature may take them)."""
    found = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or not node.decorator_list:
            continue
        names = [ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list]
        tuned = any(re.search(r"autotune|heuristics", n) for n in names)
        if any(n.endswith("jit") for n in names) and (autotuned or not tuned):
            found.append(node)
    return found


def is_tl(func: ast.expr, names: tuple[str, ...]) -> bool:
    """`tl.<one of names>` (the function of a call)."""
    return isinstance(func, ast.Attribute) and func.attr in names \
        and isinstance(func.value, ast.Name) and func.value.id == "tl"


def is_tl_call(expr: ast.expr, name: str) -> bool:
    return isinstance(expr, ast.Call) and is_tl(expr.func, (name,))


def imports(tree: ast.Module, module: str) -> bool:
    """A plain `import <module>` at the module's top level."""
    return any(isinstance(n, ast.Import) and any(a.name == module and a.asname is None for a in n.names)
               for n in tree.body)


def triton_module(source: str) -> ast.Module | None:
    """The source's tree where it parses and imports triton, every rewrite's first condition; None
    otherwise. The tree is the text's shared parse (pyparse.parsed): a rewrite changes copies of
    the nodes it takes (copy.deepcopy), never the tree itself."""
    try:
        tree = pyparse.parsed(source)
    except SyntaxError:
        return None
    return tree if imports(tree, "triton") else None


# calls that write memory, synchronise or print: a rewrite that moves or merges work must not cross them
EFFECTS = ("store", "atomic_add", "atomic_max", "atomic_min", "atomic_cas", "atomic_xchg", "atomic_and",
           "atomic_or", "atomic_xor", "device_print", "device_assert", "debug_barrier")


def has_effects(stmts: list[ast.stmt]) -> bool:
    """A call in EFFECTS (`tl.store`, `ptr.store`, ...), or a return, break or continue."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in EFFECTS
               for s in stmts for n in ast.walk(s)) \
        or any(isinstance(n, ast.Return | ast.Break | ast.Continue) for s in stmts for n in ast.walk(s))


def addressed_params(fn: ast.FunctionDef, calls: tuple[str, ...]) -> list[str]:
    """The kernel's parameters, in order, that an address of one of `calls` (`tl.load`, `tl.store`,
    a descriptor's `.store`, ...) may be based on: the pointers added up in it, followed through
    any chain of assignments (loops included). Offsets (products, quotients, `tl.arange`, program
    ids) are no base; anything this does not know counts every parameter it mentions."""
    params = [p.arg for p in fn.args.args]
    bound = bindings(fn)
    hit: set[str] = set()
    for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
        func = call.func
        if not (isinstance(func, ast.Attribute) and func.attr in calls):
            continue
        if is_tl(func, calls):
            addressed = call.args[:1] + [k.value for k in call.keywords if k.arg == "pointer"]
        else:
            addressed = [func.value]  # `desc.store(...)`, `ptr.atomic_add(...)`
        for expr in addressed:
            hit |= _bases(expr, bound, set(params), set())
    return [name for name in params if name in hit]


def bindings(fn: ast.FunctionDef) -> dict[str, list[ast.expr]]:
    """Every value each name of the kernel is assigned, loops included."""
    bound: dict[str, list[ast.expr]] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value if not isinstance(node, ast.AugAssign) else ast.BinOp(node.target, node.op, node.value)
            for name in (t.id for target in targets for t in ast.walk(target) if isinstance(t, ast.Name)):
                bound.setdefault(name, []).append(value)
        elif isinstance(node, ast.For):  # a loop variable: an offset over a range, else whatever it walks
            over_range = isinstance(node.iter, ast.Call) and (
                isinstance(node.iter.func, ast.Name) and node.iter.func.id == "range"
                or is_tl(node.iter.func, ("range", "static_range")))
            for name in (t.id for t in ast.walk(node.target) if isinstance(t, ast.Name)):
                bound.setdefault(name, []).append(ast.Constant(0) if over_range else node.iter)
    return bound


def loaded_params(fn: ast.FunctionDef, exprs: list[ast.expr]) -> list[str]:
    """The kernel's parameters, in order, that the loads whose values reach `exprs` read from: the
    names the expressions read followed through every assignment, and each load's address bases
    (as addressed_params finds them)."""
    params = [p.arg for p in fn.args.args]
    bound = bindings(fn)
    seen: set[str] = set()
    todo = [n.id for e in exprs for n in ast.walk(e) if isinstance(n, ast.Name)]
    values = list(exprs)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            values += bound.get(name, [])
            todo += [n.id for v in bound.get(name, []) for n in ast.walk(v) if isinstance(n, ast.Name)]
    hit: set[str] = set()
    for call in (n for v in values for n in ast.walk(v) if isinstance(n, ast.Call) and is_tl(n.func, ("load",))):
        for pointer in call.args[:1] + [k.value for k in call.keywords if k.arg == "pointer"]:
            hit |= _bases(pointer, bound, set(params), set())
    return [name for name in params if name in hit]


_OFFSET_OPS = (ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.LShift, ast.RShift, ast.BitAnd, ast.BitOr, ast.BitXor,
               ast.Pow)


def _bases(expr: ast.expr, bound: dict[str, list[ast.expr]], params: set[str], seen: set[str]) -> set[str]:
    """The parameters an address expression may be based on (see addressed_params)."""
    if isinstance(expr, ast.Constant):
        return set()
    if isinstance(expr, ast.Name):
        if expr.id in seen:
            return set()
        found = {expr.id} & params
        for value in bound.get(expr.id, []):
            found |= _bases(value, bound, params, seen | {expr.id})
        return found
    if isinstance(expr, ast.BinOp):
        if isinstance(expr.op, _OFFSET_OPS):
            return set()
        return _bases(expr.left, bound, params, seen) | _bases(expr.right, bound, params, seen)
    if isinstance(expr, ast.Subscript):
        return _bases(expr.value, bound, params, seen)
    if isinstance(expr, ast.IfExp):
        return _bases(expr.body, bound, params, seen) | _bases(expr.orelse, bound, params, seen)
    if isinstance(expr, ast.Call):
        if is_tl(expr.func, ("arange", "program_id", "num_programs", "full", "zeros", "cdiv")):
            return set()
        if is_tl(expr.func, ("where",)) and len(expr.args) == 3:
            return _bases(expr.args[1], bound, params, seen) | _bases(expr.args[2], bound, params, seen)
        if isinstance(expr.func, ast.Attribute) and expr.func.attr == "to":  # a cast of an offset
            return _bases(expr.func.value, bound, params, seen)
    # anything else: every parameter it mentions, through what its names are bound to
    mentioned: set[str] = set()
    for name in (n for n in ast.walk(expr) if isinstance(n, ast.Name)):
        mentioned |= _bases(name, bound, params, seen)
    return mentioned


def docstring_and_body(fn: ast.FunctionDef) -> tuple[list[ast.stmt], list[ast.stmt]]:
    """(the kernel's docstring as a one-statement list, or empty; the rest of its body)."""
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        return body[:1], body[1:]
    return [], body


def written_grid(owner: ast.FunctionDef | None, grid: ast.expr) -> ast.expr:
    """A launch's grid as written: for a name the launching function binds once, that value."""
    bound = grid_bindings(owner, grid)
    return bound[0] if isinstance(grid, ast.Name) and len(bound) == 1 else grid


def launch_statement(owner: ast.FunctionDef | None, call: ast.Call) -> ast.stmt:
    """The expression statement that is the launch, in a host function."""
    if owner is not None:
        for node in ast.walk(owner):
            if isinstance(node, ast.Expr) and node.value is call:
                return node
    raise Refused("the launch is not a statement of its own in a function")


def on_host(expr: ast.expr, arguments: dict[str, ast.expr]) -> ast.expr:
    """A kernel expression as the host computes it: each name in `arguments` (a launch's, see
    launch_arguments) replaced by its value; other names (module constants) kept."""

    class Arguments(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.expr:
            return copy.deepcopy(arguments[node.id]) if node.id in arguments else node

    return Arguments().visit(copy.deepcopy(expr))


def launch_arguments(fn: ast.FunctionDef, call: ast.Call) -> dict[str, ast.expr]:
    """Each parameter of the kernel that a launch of it gives a value: the argument, or the default."""
    params = [a.arg for a in fn.args.args]
    bound: dict[str, ast.expr] = dict(zip(params[len(params) - len(fn.args.defaults):], fn.args.defaults))
    bound.update(zip(params, call.args))
    bound.update({k.arg: k.value for k in call.keywords if k.arg in params})
    return bound


def names(node: ast.AST) -> set[str]:
    """Every name the node mentions, read or written."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def axis_of(call: ast.Call) -> int | None:
    """The axis of a `tl.program_id(axis)` call, where it is a literal."""
    axis = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "axis"), None)
    return axis.value if isinstance(axis, ast.Constant) and isinstance(axis.value, int) else None


def program_id_axis(stmt: ast.stmt) -> int | None:
    """The axis of `NAME = tl.program_id(axis)`; None for any other statement."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
            and isinstance(stmt.value, ast.Call) and is_tl(stmt.value.func, ("program_id",)):
        return axis_of(stmt.value)
    return None


def bound_names(tree: ast.Module) -> set[str]:
    """Every name the module mentions, binds as a parameter, or defines as a function or class: the
    names a rewrite may not take for its own. One walk (rewrites check several names on every
    measured pair the summarizer compares)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.arg):
            found.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            found.add(node.name)
    return found


def stored(stmts: list[ast.stmt]) -> set[str]:
    return {n.id for s in stmts for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def loaded(stmts: list[ast.stmt]) -> set[str]:
    return {n.id for s in stmts for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def reads(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in ast.walk(node))


def _line(source: str, number: int) -> str:
    return source.splitlines()[number - 1]


def kernel_span(source: str, fn: ast.FunctionDef) -> tuple[int, int, int, int]:
    """The (line, col, end_line, end_col) of a kernel with its decorators, for tools.tunables.splice."""
    start = min(d.lineno for d in fn.decorator_list) if fn.decorator_list else fn.lineno
    end = fn.end_lineno or fn.lineno
    return start, 0, end, len(_line(source, end))


def launches_of(tree: ast.Module, kernel: str) -> list[tuple[ast.Call, ast.FunctionDef | None]]:
    """Every `kernel[grid](...)` launch in the module, with the function it is in (None at module level)."""
    found: list[tuple[ast.Call, ast.FunctionDef | None]] = []
    owners = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == kernel:
            owner = next((f for f in owners if f.lineno <= node.lineno <= (f.end_lineno or f.lineno)
                          and node in ast.walk(f)), None)
            found.append((node, owner))
    return found


def references(tree: ast.Module, name: str) -> int:
    """How often the module reads `name` (a kernel read only by its launches can change its signature)."""
    return sum(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in ast.walk(tree))


def before_definitions(source: str, block: str) -> str:
    """`block` after the module's imports and constants, before its first function or class (the
    blank lines before that point replaced by the block's own)."""
    first = re.search(r"(?m)^(@|def |class )", source)
    at = first.start() if first else len(source)
    return source[:at].rstrip("\n") + block + source[at:]


def with_constant(source: str, name: str, value: int, note: str) -> str:
    """`NAME = value` once, with its note, after the module's imports (before its first function)."""
    return before_definitions(source, f"\n\n# {note}\n{name} = {value}\n\n\n")


def grid_bindings(owner: ast.FunctionDef | None, grid: ast.expr) -> list[ast.expr]:
    """What a launch's grid is: the expression written in the launch, or for a name, the values the
    launching function assigns to it (empty where it assigns none)."""
    if not isinstance(grid, ast.Name):
        return [grid]
    if owner is None:
        return []
    return [n.value for n in ast.walk(owner) if isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == grid.id for t in n.targets)]


def one_element_grid_name(owner: ast.FunctionDef | None, grid: ast.expr) -> bool:
    """A grid written as a name that the launching function binds only to one-element tuples."""
    bound = grid_bindings(owner, grid)
    return isinstance(grid, ast.Name) and bool(bound) \
        and all(isinstance(v, ast.Tuple) and len(v.elts) == 1 for v in bound)


class Refused(Exception):
    """A rewrite's reason for leaving a kernel as written."""


Launch = tuple[ast.Call, ast.FunctionDef | None]


def rewrite_launched_kernels(
        source: str, own_names: tuple[str, ...], kernel: Callable[[ast.FunctionDef], ast.FunctionDef],
        launch: Callable[[ast.Call, ast.FunctionDef | None, ast.FunctionDef], tuple[int, int, int, int, str]],
        constant: tuple[str, int, str] | None = None) -> str | None:
    """Each plain kernel read only by its launches rewritten by `kernel`, and each of its launches
    by `launch` (given the launch, the function it is in and the kernel as written; an edit for
    tools.tunables.splice), either refusing that kernel by raising Refused; the knob's module
    constant (name, value, note) added where there is one. None where no kernel was rewritten, the
    module does not parse or already binds one of the rewrite's own names."""
    tree = triton_module(source)
    if tree is None or set(own_names) & bound_names(tree):
        return None
    edits: list[tuple[int, int, int, int, str]] = []
    for fn in plain_kernels(tree):
        launches = launches_of(tree, fn.name)
        if not launches or references(tree, fn.name) != len(launches):
            continue  # also called as a device function, or passed around: its signature must stay
        if fn.args.vararg or fn.args.kwarg or fn.args.kwonlyargs or fn.args.posonlyargs:
            continue  # a variadic signature: the parameters a grid rewrite adds have no place
        try:
            new_fn = kernel(fn)
            launch_edits = [launch(call, owner, fn) for call, owner in launches]
        except Refused:
            continue
        edits.append((*kernel_span(source, fn), ast.unparse(new_fn)))
        edits.extend(launch_edits)
    if not edits:
        return None
    return with_constant(splice(source, edits), *constant) if constant else splice(source, edits)


class KernelSplit(Protocol):
    """A kernel rewritten into kernels of its own making, with the launches to match."""

    def kernels(self) -> str: ...

    def launch(self, source: str, call: ast.Call, owner: ast.FunctionDef | None) -> tuple[int, int, int, int, str]: ...


def split_kernel_edits(source: str, tree: ast.Module,
                       split: Callable[[ast.FunctionDef], KernelSplit]) -> list[tuple[int, int, int, int, str]]:
    """The edits (for tools.tunables.splice) that replace each plain kernel read only by its
    launches with `split(kernel).kernels()`, and each launch with its `launch(...)`; a kernel whose
    split or launches raise Refused is left as written."""
    edits: list[tuple[int, int, int, int, str]] = []
    for fn in plain_kernels(tree):
        launches = launches_of(tree, fn.name)
        if not launches or references(tree, fn.name) != len(launches):
            continue
        try:
            made = split(fn)
            launch_edits = [made.launch(source, call, owner) for call, owner in launches]
        except Refused:
            continue
        edits.append((*kernel_span(source, fn), made.kernels()))
        edits += launch_edits
    return edits


def with_knob_params(written: ast.FunctionDef, new: ast.FunctionDef, total: str, knob: str) -> None:
    """`new` (a copy of `written`) given the parameters a grid rewrite adds: the axis's length and
    the knob, a constexpr; with defaults where `written` has defaulted parameters before them."""
    new.args.args += [ast.arg(total), ast.arg(knob, pyparse.parse("tl.constexpr", mode="eval").body)]
    if written.args.defaults:
        new.args.defaults += [ast.Constant(0), ast.Constant(1)]
