"""The split-KV rewrite (flash-decoding): a kernel whose one loop walks a sequence with an online
softmax (a running maximum and sums kept scaled to it) gets a split form of two launches.
`K_parts`, on the grid with one more axis of parts (at most `KV_SPLITS`), walks one part of each
program's range and stores the state its loop carried; `K_combine`, the kernel as written with its
loop replaced, combines a program's parts (each sum rescaled to the common maximum) and runs what
followed.

Why: decode attention gives a program a (sequence, KV head) and walks the whole sequence. With
few sequences the grid has about one program per SM, each with a long walk and too few loads in
flight: on the H100 the bundled gqa_paged_decode, grouped onto the tensor cores, read its keys and
values at 78.5% of a same-size copy on B16_L4096 (128 programs) and 89-97% on the larger batches
(BENCHMARKS.md, H100, 2026-11-27, 30da4d5). Made mechanically:

    <before the loop>                       K_parts (grid (*grid, parts)):
    m = tl.zeros([H]) - inf                     <before the loop>
    l = tl.zeros([H]); acc = tl.zeros([H, D])   _split_span = cdiv(cdiv(stop - start, step), parts) * step
    for i in range(start, stop, step):          _split_lo = start + tl.program_id(2) * _split_span
        m_new = tl.maximum(m, ...)              for i in range(_split_lo, tl.minimum(_split_lo + _split_span, stop), step):
        alpha = tl.exp(m - m_new)                   <the loop, unchanged>
        l = l * alpha + ...                     store m, l, acc in this part's slots
        acc = acc * alpha[:, None] + ...
        m = m_new
    <after the loop>                        K_combine (the grid as written):
                                                <before the loop>, and the inits
                                                for each part: m_new = max(m, m_p); l = l * a + l_p * b, acc likewise
                                                <after the loop>

and the launch chooses on the host how many parts to take: enough that the grid fills the GPU's
SMs twice, at most `KV_SPLITS`. On the H100 the split paid on B16_L4096's 128 programs (2 parts:
87% of a copy, 80% unsplit) and cost 3-10% on the 512 and 1024 of the larger batches, so a launch
whose grid fills the SMs already runs the kernel as written, kept beside the two; the others get a
float32 buffer per carried value, the parts launch and the combine. A part starts on a multiple of
the loop's step, so every iteration of the loop as written runs in
exactly one part, unchanged; only the order of the sums differs. The split needs no bound the host
knows: each program divides its own range (a sequence's length loaded in the kernel).

What the loop may carry: a maximum `m = m_new` with `m_new = tl.maximum(m, x)`, starting from a
tile (-inf, or a very negative number: the combine starts where the loop started);
sums `v = v * alpha + e` (alpha maybe given new axes) with `alpha = tl.exp(m - m_new)`, starting
from zero. Their shapes come from their initial tiles (`tl.zeros`, `tl.full`), whose sizes must be
powers of two (a tile's are). Refused: anything else carried, or read after the loop; a loop that
stores or branches out; effects before the loop (a store, a return); grids of three axes;
kernels under @triton.autotune or @triton.heuristics; launches that are not a statement of their
own.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass

from accelopt.policies.kernel_ast import (
    Refused,
    addressed_params,
    axis_of,
    before_definitions,
    bound_names,
    docstring_and_body,
    has_effects,
    imports,
    is_tl,
    is_tl_call,
    launch_arguments,
    launch_statement,
    loaded,
    names,
    on_host,
    split_kernel_edits,
    stored,
    triton_module,
    with_constant,
    written_grid,
)
from accelopt.tools import pyparse
from accelopt.tools.tunables import splice

KNOB = "KV_SPLITS"       # the most parts a program's range is split into: a module constant the tuner moves
FIRST_VALUE = 4
_PREFIX = "_split_"
_PARTS = "_split_parts"
_HELPER = "_split_kv_parts"
# How many parts a launch takes, on the host: enough programs to fill the GPU's SMs twice, at most
# KV_SPLITS; one (the kernel as written) where the grid fills them already. Off a GPU (Triton's
# interpreter) there are no SMs to fill: KV_SPLITS, so the split is what runs there.
_HELPER_SOURCE = f'''

def {_HELPER}(programs, device):
    """Parts per program of a split-KV launch: the grid made to fill the SMs twice, at most {KNOB}."""
    if device.type != "cuda":
        return {KNOB}
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min({KNOB}, 2 * sms // max(programs, 1)))
'''


def split_kv(source: str) -> str | None:
    """The module with every online-softmax loop kernel split into parts and their combine; None
    where no kernel qualifies."""
    tree = triton_module(source)
    if tree is None:
        return None
    taken = bound_names(tree)
    # the launch allocates the parts' buffers with torch
    if not imports(tree, "torch") or KNOB in taken or any(n.startswith(_PREFIX) for n in taken):
        return None
    edits = split_kernel_edits(source, tree, _Split)
    if not edits:
        return None
    note = "the most parts a program's sequence is split into (the split-KV rewrite); the tuner moves it"
    return before_definitions(with_constant(splice(source, edits), KNOB, FIRST_VALUE, note), _HELPER_SOURCE + "\n\n")


@dataclass(frozen=True)
class _Carried:
    name: str
    shape: list[ast.expr]    # its initial tile's shape, as written
    scaled_by: str | None    # a sum: the maximum it is kept scaled to; None for the maximum

    @property
    def size(self) -> str:
        return " * ".join(f"({ast.unparse(e)})" for e in self.shape) or "1"


def _tile_shape(value: ast.expr) -> list[ast.expr] | None:
    """The shape of the one `tl.zeros`/`tl.full` tile an initial value is made of."""
    tiles = [n for n in ast.walk(value) if isinstance(n, ast.Call) and is_tl(n.func, ("zeros", "full"))]
    if len(tiles) != 1:
        return None
    shape = tiles[0].args[0] if tiles[0].args else next((k.value for k in tiles[0].keywords if k.arg == "shape"), None)
    return list(shape.elts) if isinstance(shape, ast.Tuple | ast.List) else None


class _Split:
    def __init__(self, fn: ast.FunctionDef):
        self.fn = fn
        if fn.args.vararg or fn.args.kwarg or fn.args.kwonlyargs or fn.args.posonlyargs:
            raise Refused("a variadic signature")
        self.doc, body = docstring_and_body(fn)
        loops = [i for i, s in enumerate(body) if isinstance(s, ast.For | ast.While)]
        if len(loops) != 1 or not isinstance(body[loops[0]], ast.For):
            raise Refused("not one for-loop at the top of the kernel")
        loop = body[loops[0]]
        assert isinstance(loop, ast.For)
        self.before, self.loop, self.after = body[:loops[0]], loop, body[loops[0] + 1:]
        if has_effects(self.before) or any(isinstance(n, ast.For | ast.While) for s in self.before + self.after
                                           for n in ast.walk(s)):
            raise Refused("effects before the loop, or another loop")
        if has_effects(self.loop.body) or self.loop.orelse or not isinstance(self.loop.target, ast.Name):
            raise Refused("a loop that stores or branches out")
        if any(isinstance(n, ast.Call) and is_tl(n.func, ("program_id",)) and axis_of(n) not in (0, 1)
               for n in ast.walk(fn)):
            raise Refused("a grid of three axes")
        it = self.loop.iter
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
                and 2 <= len(it.args) <= 3 and not it.keywords):
            raise Refused("not a loop over range(start, stop[, step])")
        self.start, self.stop = it.args[0], it.args[1]
        self.step = it.args[2] if len(it.args) == 3 else ast.Constant(1)
        if names(it) & stored(self.loop.body):
            raise Refused("the loop's bounds change in the loop")
        self.carried = self._carried()

    def _carried(self) -> list[_Carried]:
        inside = stored(self.loop.body)
        carried = (inside & loaded(self.after)) | {n for n in inside if _read_before_written(self.loop.body, n)}
        carried -= {self.loop.target.id}  # type: ignore[attr-defined]  # checked in __init__
        if self.loop.target.id in loaded(self.after):  # type: ignore[attr-defined]
            raise Refused("the loop variable read after the loop")
        inits = {s.targets[0].id: s.value for s in self.before if isinstance(s, ast.Assign)
                 and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)}
        updates = {s.targets[0].id: s.value for s in self.loop.body if isinstance(s, ast.Assign)
                   and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)}
        maxima = {}
        for name in carried:  # m = m_new, m_new = tl.maximum(m, x)
            update = updates.get(name)
            if isinstance(update, ast.Name) and is_tl_call(updates.get(update.id, ast.Constant(0)), "maximum"):
                call = updates[update.id]
                assert isinstance(call, ast.Call)
                # its first value (-inf, or o3's -1e30) starts the combine as it started the loop
                if any(isinstance(a, ast.Name) and a.id == name for a in call.args) \
                        and name in inits and _tile_shape(inits[name]) is not None:
                    maxima[name] = update.id
        found = [_Carried(m, _tile_shape(inits[m]) or [], None) for m in sorted(maxima)]
        for name in sorted(carried - set(maxima)):
            by = self._scaled_by(name, updates, maxima)
            shape = _tile_shape(inits.get(name, ast.Constant(0)))
            if by is None or shape is None or "zeros" not in ast.unparse(inits[name]):
                raise Refused(f"{name}: carried, but not a maximum or a sum kept scaled to one")
            found.append(_Carried(name, shape, by))
        if not any(c.scaled_by for c in found):
            raise Refused("no online softmax in the loop")
        if any(sum(isinstance(n, ast.Name) and n.id == c.name and isinstance(n.ctx, ast.Store)
                   for s in self.loop.body for n in ast.walk(s)) != 1 for c in found):
            raise Refused("a carried value assigned more than once in the loop")
        return found

    def _scaled_by(self, name: str, updates: dict[str, ast.expr], maxima: dict[str, str]) -> str | None:
        """The maximum `name` is kept scaled to: `v = v * alpha[...] + e`, `alpha = tl.exp(m - m_new)`."""
        update = updates.get(name)
        if not (isinstance(update, ast.BinOp) and isinstance(update.op, ast.Add)
                and isinstance(update.left, ast.BinOp) and isinstance(update.left.op, ast.Mult)
                and isinstance(update.left.left, ast.Name) and update.left.left.id == name):
            return None
        factor = update.left.right
        if isinstance(factor, ast.Subscript):
            factor = factor.value
        if name in names(update.right) or not isinstance(factor, ast.Name):
            return None
        alpha = updates.get(factor.id)
        for m, m_new in maxima.items():
            if ast.dump(alpha or ast.Constant(0)) == ast.dump(pyparse.parse(f"tl.exp({m} - {m_new})", mode="eval").body):
                return m
        return None

    # ------------------------------------------------------------------ the kernels
    def kernels(self) -> str:
        """The kernel as written (launched where one part is all a program gets), its parts and their combine."""
        return "\n\n\n".join(ast.unparse(k) for k in (self.fn, self._parts(), self._combine()))

    def _slot(self, part: str) -> str:
        """The flat index of this program's part `part` among all programs' parts."""
        return f"((tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)) * {_PARTS} + {part})"

    def _signature(self, fn: ast.FunctionDef) -> None:
        fn.args.args += [ast.arg(f"{_PREFIX}{c.name}") for c in self.carried] + [ast.arg(_PARTS)]
        fn.args.args.append(ast.arg(KNOB, pyparse.parse("tl.constexpr", mode="eval").body))
        if self.fn.args.defaults:
            fn.args.defaults += [ast.Constant(None) for _ in self.carried] + [ast.Constant(1), ast.Constant(1)]

    def _parts(self) -> ast.FunctionDef:
        fn = copy.deepcopy(self.fn)
        fn.name = f"{self.fn.name}_parts"
        start, stop, step = (ast.unparse(e) for e in (self.start, self.stop, self.step))
        loop = copy.deepcopy(self.loop)
        span, low = f"{_PREFIX}span", f"{_PREFIX}lo"
        loop.iter = pyparse.parse(f"range({low}, tl.minimum({low} + {span}, {stop}), {step})", mode="eval").body
        head = pyparse.parse(f"{span} = tl.cdiv(tl.cdiv({stop} - ({start}), {step}), {_PARTS}) * ({step})\n"
                         f"{low} = {start} + tl.program_id(2) * {span}").body
        tail = []
        for c in self.carried:
            at = f"{_PREFIX}{c.name} + {self._slot('tl.program_id(2)')} * ({c.size})"
            value = f"tl.reshape({c.name}, [{c.size}])" if c.shape else c.name
            offsets = f" + tl.arange(0, {c.size})" if c.shape else ""
            tail += pyparse.parse(f"tl.store({at}{offsets}, {value})").body
        fn.body = self.doc + self.before + head + [loop] + tail
        self._signature(fn)
        return ast.fix_missing_locations(fn)

    def _combine(self) -> ast.FunctionDef:
        fn = copy.deepcopy(self.fn)
        fn.name = f"{self.fn.name}_combine"
        part = f"{_PREFIX}p"
        lines = []
        for c in self.carried:
            at = f"{_PREFIX}{c.name} + {self._slot(part)} * ({c.size})"
            load = (f"tl.reshape(tl.load({at} + tl.arange(0, {c.size})), [{', '.join(ast.unparse(e) for e in c.shape)}])"
                    if c.shape else f"tl.load({at})")
            lines.append(f"{_PREFIX}{c.name}_p = {load}")
        maxima = [c for c in self.carried if c.scaled_by is None]
        for m in maxima:
            lines += [f"{_PREFIX}{m.name}_new = tl.maximum({m.name}, {_PREFIX}{m.name}_p)",
                      # a part that saw nothing holds -inf: exp(-inf - -inf) would be nan
                      f"{_PREFIX}{m.name}_shift = tl.where({_PREFIX}{m.name}_new == float('-inf'), 0.0, "
                      f"{_PREFIX}{m.name}_new)",
                      f"{_PREFIX}{m.name}_a = tl.exp({m.name} - {_PREFIX}{m.name}_shift)",
                      f"{_PREFIX}{m.name}_b = tl.exp({_PREFIX}{m.name}_p - {_PREFIX}{m.name}_shift)"]
        by_name = {c.name: c for c in self.carried}
        for c in (c for c in self.carried if c.scaled_by):
            m = by_name[c.scaled_by or ""]
            extra = len(c.shape) - len(m.shape)
            if extra < 0:
                raise Refused(f"{c.name} has fewer axes than the maximum it is scaled to")
            index = f"[{', '.join([':'] * len(m.shape) + ['None'] * extra)}]" if m.shape and extra else ""
            a, b = f"{_PREFIX}{m.name}_a{index}", f"{_PREFIX}{m.name}_b{index}"
            lines.append(f"{c.name} = {c.name} * {a} + {_PREFIX}{c.name}_p * {b}")
        lines += [f"{m.name} = {_PREFIX}{m.name}_new" for m in maxima]
        body = "\n".join("        " + line for line in lines)
        # unrolled up to the cap; the launch's parts may be fewer
        loop = pyparse.parse(f"for {part} in tl.static_range({KNOB}):\n    if {part} < {_PARTS}:\n{body}").body
        fn.body = self.doc + self.before + loop + self.after
        self._signature(fn)
        return ast.fix_missing_locations(fn)

    # ------------------------------------------------------------------ the launch
    def launch(self, source: str, call: ast.Call, owner: ast.FunctionDef | None) -> tuple[int, int, int, int, str]:
        """The launch statement replaced by the parts' buffers, the parts launch and the combine."""
        statement = launch_statement(owner, call)
        sub = call.func
        assert isinstance(sub, ast.Subscript)
        if any(k.arg is None or k.arg.startswith(_PREFIX) or k.arg == KNOB for k in call.keywords) \
                or any(isinstance(a, ast.Starred) for a in call.args):
            raise Refused("a launch passing *args or **kwargs, or our names")
        written = written_grid(owner, sub.slice)
        if not (isinstance(written, ast.Tuple) and 1 <= len(written.elts) <= 2
                and not any(isinstance(e, ast.Starred) for e in written.elts)):
            raise Refused("the grid is not a tuple of one or two axes")
        arguments = launch_arguments(self.fn, call)
        pointers = sorted((p for p in addressed_params(self.fn, ("load",)) if p in arguments),
                          key=lambda p: "ptr" not in p)
        if not pointers:
            raise Refused("no tensor the kernel loads from to place the buffers on")
        sizes = {c.name: _size_on_host(c.size, arguments) for c in self.carried}
        grid_name = f"{_PREFIX}grid"
        axes = [f"{grid_name}[{i}]" for i in range(len(written.elts))]
        if len(axes) == 1:
            axes.append("1")
        programs = " * ".join(axes)
        args = [ast.unparse(a) for a in call.args] + [f"{k.arg}={ast.unparse(k.value)}" for k in call.keywords]
        split_args = args + [f"{_PREFIX}{c.name}={_PREFIX}{c.name}" for c in self.carried]
        split_args += [f"{_PARTS}={_PARTS}", f"{KNOB}={KNOB}"]
        name = self.fn.name
        line = source.splitlines()[statement.lineno - 1]
        indent = line[:len(line) - len(line.lstrip())]
        device = f"({ast.unparse(arguments[pointers[0]])}).device"
        lines = [f"{grid_name} = {ast.unparse(written)}",
                 f"{_PARTS} = {_HELPER}({programs}, {device})",
                 f"if {_PARTS} > 1:"]
        lines += [f"    {_PREFIX}{c.name} = torch.empty({programs} * {_PARTS} * {sizes[c.name]}, "
                  f"dtype=torch.float32, device={device})" for c in self.carried]
        lines += [f"    {name}_parts[({axes[0]}, {axes[1]}, {_PARTS})]({', '.join(split_args)})",
                  f"    {name}_combine[{grid_name}]({', '.join(split_args)})",
                  "else:  # one part a program: the kernel as written",
                  f"    {name}[{grid_name}]({', '.join(args)})"]
        return (statement.lineno, statement.col_offset, statement.end_lineno or statement.lineno,
                statement.end_col_offset or 0, ("\n" + indent).join(lines))


def _read_before_written(body: list[ast.stmt], name: str) -> bool:
    for stmt in body:
        if name in loaded([stmt]):
            return True
        if name in stored([stmt]):
            return False
    return False


def _size_on_host(size: str, arguments: dict[str, ast.expr]) -> str:
    """A carried tile's size (of the kernel's parameters) as the host computes it from the launch."""
    tree = pyparse.parse(size, mode="eval").body
    for name in names(tree) - set(arguments):
        raise Refused(f"{name}: not a parameter the launch passes")
    return ast.unparse(on_host(tree, arguments))
