"""A Triton kernel's launch tunables, found and edited through the AST.

A tunable ("knob") is an integer that picks a configuration without changing what the kernel
computes: `num_warps`, `num_stages`, and `tl.constexpr` tile sizes (BLOCK*, TILE*, GROUP*...).
Where it lives:
- a launch keyword `kernel[grid](..., BLOCK=256, num_warps=4)`;
- a launch keyword naming a constant, `BLOCK=BLOCK` with `BLOCK = 256` at module level or in
  the launching function (then the grid that reads it moves with it);
- a `BLOCK: tl.constexpr = 128` default in the @triton.jit signature that no launch overrides;
- Triton's own defaults when no launch passes them (num_warps=4; num_stages=3 for a kernel
  with a loop to pipeline), inserted into the launch when moved;
- for a kernel under @triton.autotune, its `triton.Config` list (`autotune_space`): moving a
  knob pins the list to one configuration (`apply_config`), `pins` lists the configurations the
  autotuner would choose among, `write_configs` leaves it a smaller list.
A knob set at several launches that hold different values (an Inductor seed: one launch per
workload, each as its autotuner chose) is read at its first and moves every launch by the same
step (`_moved_like`), so the launches keep their difference.
Shape constants (D=128, PAGE=16) are not tunables: moving them changes the computation.
Edits splice the new value into the exact source span, so formatting and comments survive.
"""

from __future__ import annotations

import ast
import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeGuard, cast

from accelopt.tools import pyparse

TILE_NAME = re.compile(r"(?i)^(num_warps|num_stages)$|block|tile|chunk|split|group|_size$|^b[mnk]$")
IMPLICIT_DEFAULTS = {"num_warps": 4, "num_stages": 3}
LIMITS = {"num_warps": (1, 32), "num_stages": (1, 7)}
_GROUP_LIMITS = (1, 64)     # GROUP_M, SPLIT_K, UNROLL, a config's PIPE_STAGES: small counts, not tile sizes
_TILE_LIMITS = (16, 65536)  # tl.arange extents: powers of two; below 16 rarely pays
# a matmul template's own tiles and grouping (not its TMA_SIZE, a descriptor's bytes)
_TEMPLATE_TILE = re.compile(r"^(BLOCK|GROUP)_[A-Z]$")


@dataclass
class Knob:
    name: str
    value: int
    sites: list[ast.Constant] = field(default_factory=list)   # spans to rewrite; empty when implicit
    launches: list[ast.Call] = field(default_factory=list)    # where to insert an implicit knob
    passed_at: list[ast.Call] = field(default_factory=list)   # the launches whose keywords set it

    @property
    def implicit(self) -> bool:
        return not self.sites


def limits(name: str) -> tuple[int, int]:
    if name in LIMITS:
        return LIMITS[name]
    return _GROUP_LIMITS if re.search(r"(?i)group|split|unroll|stage", name) else _TILE_LIMITS


def additive(name: str) -> bool:
    """Stage counts step by one (num_stages, a config's NUM_STAGES_LOOP); sizes and warps double."""
    return bool(re.search(r"(?i)stage", name))


def _is_int(node: ast.AST | None) -> TypeGuard[ast.Constant]:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _int_of(node: ast.Constant) -> int:
    """The value of a constant that `_is_int` accepted."""
    return cast(int, node.value)


Function = ast.FunctionDef | ast.AsyncFunctionDef


def _launches(tree: ast.AST) -> list[tuple[ast.Call, Function | None]]:
    """`kernel[grid](...)` calls, each with the function that contains it (None: module level)."""
    found: list[tuple[ast.Call, Function | None]] = []

    def visit(node: ast.AST, owner: Function | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else owner
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Subscript):
                found.append((child, owner))
            visit(child, inner)

    visit(tree, None)
    return found


def _int_assignments(body: list[ast.stmt], nested: bool) -> tuple[dict[str, ast.Constant], set[str]]:
    """`NAME = <int>` assigned exactly once in a block, and every name the block assigns at all.
    Module level: its own statements only; a function: its nested blocks too, not inner functions."""
    seen: dict[str, list[ast.AST]] = {}

    def visit(stmts: Sequence[ast.AST]) -> None:
        for node in stmts:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                continue
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for name in ast.walk(t):
                        if isinstance(name, ast.Name):
                            seen.setdefault(name.id, []).append(node)
            elif isinstance(node, (ast.For, ast.With)) and nested:
                for name in ast.walk(node.target if isinstance(node, ast.For) else node):
                    if isinstance(name, ast.Name) and isinstance(name.ctx, ast.Store):
                        seen.setdefault(name.id, []).append(node)
            if nested:
                visit(list(ast.iter_child_nodes(node)))

    visit(body)
    consts: dict[str, ast.Constant] = {}
    for name, nodes in seen.items():
        node = nodes[0]
        if len(nodes) == 1 and isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None \
                and _is_int(node.value):
            consts[name] = node.value
    return consts, set(seen)


def _body_tiles(fn: ast.FunctionDef) -> dict[str, ast.Constant]:
    """The tiles a tl.dot kernel sets in its own body, `BLOCK_M : tl.constexpr = 64`, each assigned
    once: how torch.compile writes its matmul templates, the tiles its autotuner chose. Only in a
    kernel with a tl.dot: a persistent reduction's `R0_BLOCK : tl.constexpr = 64` is its whole row."""
    tiles = {s.target.id: s.value for s in fn.body
             if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and _TEMPLATE_TILE.match(s.target.id)
             and _is_int(s.value) and "constexpr" in ast.unparse(s.annotation)}
    if not tiles:  # most kernels: nothing to walk for
        return {}
    dot, stores = False, dict.fromkeys(tiles, 0)
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id in stores:
            stores[n.id] += 1
        elif isinstance(n, ast.Attribute) and n.attr == "dot" and isinstance(n.value, ast.Name) and n.value.id == "tl":
            dot = True
    return {name: const for name, const in tiles.items() if dot and stores[name] == 1}


def _jit_functions(tree: ast.Module) -> list[ast.FunctionDef]:
    def is_jit(dec: ast.AST) -> bool:
        text = ast.unparse(dec)
        return text.endswith("jit") or ".jit(" in text or text.startswith("triton.autotune")
    return [n for n in tree.body if isinstance(n, ast.FunctionDef) and any(is_jit(d) for d in n.decorator_list)]


def _autotuned(tree: ast.Module) -> bool:
    return any("autotune" in ast.unparse(d) for f in _jit_functions(tree) for d in f.decorator_list)


# ---- @triton.autotune config lists ------------------------------------------------------------
# A kernel under @triton.autotune gets its knobs from the decorator's `triton.Config` list: the
# kwargs dict (tile sizes and other meta-parameters) and the Config's own num_warps / num_stages
# (Triton's defaults 4 and 3 when absent; a `'num_warps'` key inside the dict is dead: Config's own
# keyword overrides it). While the list holds several configurations the autotuner picks one at
# run time; `apply_config` *pins* it (rewrites the list to the one configuration asked for), and a
# pinned list is then edited in place like any launch. The list is read by a safe evaluation of the
# AST (literals, comprehensions over literal iterables, range/zip/itertools.product, a module-level
# name bound to one of those); nothing is imported and anything else is refused with a reason.

CONFIG_DEFAULTS = {"num_warps": 4, "num_stages": 3}   # triton.Config's own defaults
_CONFIG_NAME = re.compile(r"(?i)unroll|stage|warp")   # meta-parameters tunable only in a config list
_CONFIG_KEYWORDS = ("kwargs", "num_warps", "num_stages", "num_ctas", "maxnreg", "pre_hook", "ir_override")
_KEPT_AS_TEXT = ("pre_hook", "ir_override")            # config keywords that are code, not numbers
_EVAL_LIMIT = 4096                                     # entries / range lengths a list may reach


class _Refused(Exception):
    """The config list is not something this module reads without running code."""


@dataclass
class ConfigEntry:
    """One `triton.Config(...)`: its kwargs dict, the keywords it writes (num_warps, num_stages,
    num_ctas, maxnreg), and pre_hook / ir_override as source text. `node` is its call in the
    source when written literally (None: made by a comprehension)."""
    meta: dict[str, object]
    launch: dict[str, object]
    code: dict[str, str] = field(default_factory=dict)
    node: ast.Call | None = None

    def value(self, name: str) -> object:
        if name in CONFIG_DEFAULTS:
            return self.launch.get(name, CONFIG_DEFAULTS[name])
        return self.meta.get(name)


@dataclass
class AutotuneSpace:
    """The @triton.autotune decorator of the source's autotuned kernel, read as a search space:
    `configs` are the entries' knobs (full configurations, in list order); `key` and the other
    decorator keywords (`options`, as source text: prune_configs_by, reset_to_zero, restore_value,
    warmup, rep, ...) are kept on every edit, which rewrites the config list alone. `reason` says
    why the list was not read (then `entries` is empty and the kernel has no tunables here)."""
    kernel: str
    decorator: ast.Call
    configs_node: ast.expr | None = None
    entries: list[ConfigEntry] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    key: list[str] = field(default_factory=list)
    options: dict[str, str] = field(default_factory=dict)
    callee: str = "triton.Config"
    reason: str = ""

    @property
    def configs(self) -> list[dict[str, int]]:
        return [{n: int(e.value(n)) for n in self.names} for e in self.entries]  # type: ignore[call-overload]

    @property
    def pinned(self) -> bool:
        """One configuration left: the autotuner has nothing to choose, the launch runs it."""
        return len(self.entries) == 1


def _autotune_decorators(tree: ast.Module) -> list[tuple[ast.FunctionDef, ast.Call]]:
    found = []
    for fn in _jit_functions(tree):
        for dec in fn.decorator_list:
            if isinstance(dec, ast.Call) and ast.unparse(dec.func).split(".")[-1] == "autotune":
                found.append((fn, dec))
    return found


def _module_bindings(tree: ast.Module) -> dict[str, ast.expr]:
    """Module-level names assigned exactly once, by a plain `NAME = <expr>`."""
    count: dict[str, int] = {}
    value: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for name in ast.walk(t):
                    if isinstance(name, ast.Name):
                        count[name.id] = count.get(name.id, 0) + 1
                        if isinstance(t, ast.Name) and not isinstance(node, ast.AugAssign) and node.value is not None:
                            value[name.id] = node.value
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            count[node.name] = count.get(node.name, 0) + 1
    return {n: v for n, v in value.items() if count[n] == 1}


class _Evaluator:
    """Evaluates the literal part of Python: what a config list written by hand or by a model is
    made of. Raises _Refused on anything that would need the kernel's module to run."""

    _BINOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b, ast.LShift: lambda a, b: a << b,
               ast.RShift: lambda a, b: a >> b, ast.Pow: lambda a, b: a ** b, ast.Div: lambda a, b: a / b}
    _COMPARE = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
                ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
                ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}

    def __init__(self, bindings: dict[str, ast.expr]):
        self.bindings = bindings
        self.resolving: set[str] = set()
        self.scope: list[dict[str, object]] = []

    def refuse(self, node: ast.AST, why: str = "is not a literal") -> _Refused:
        return _Refused(f"`{ast.unparse(node)[:80]}` {why}")

    def __call__(self, node: ast.AST) -> object:  # noqa: C901 - one case per node type
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            items: list = []
            for elt in node.elts:
                if isinstance(elt, ast.Starred):
                    items.extend(self.iterable(elt.value))
                else:
                    items.append(self(elt))
            return items if isinstance(node, ast.List) else tuple(items)
        if isinstance(node, ast.Dict):
            out: dict = {}
            for k, v in zip(node.keys, node.values):
                if k is None:
                    extra = self(v)
                    if not isinstance(extra, dict):
                        raise self.refuse(v, "is not a dict")
                    out.update(extra)
                else:
                    out[self(k)] = self(v)
            return out
        if isinstance(node, ast.Name):
            for scope in reversed(self.scope):
                if node.id in scope:
                    return scope[node.id]
            if node.id in self.bindings and node.id not in self.resolving:
                self.resolving.add(node.id)
                try:
                    return self(self.bindings[node.id])
                finally:
                    self.resolving.discard(node.id)
            raise self.refuse(node, "is not a name bound once to a literal at module level")
        if isinstance(node, ast.BinOp) and type(node.op) in self._BINOPS:
            left, right = self(node.left), self(node.right)
            if isinstance(node.op, ast.Pow) and (not isinstance(right, int) or abs(right) > 64):
                raise self.refuse(node, "is too large")
            if isinstance(node.op, ast.Mult) and isinstance(left, (list, tuple)) and isinstance(right, int) \
                    and len(left) * right > _EVAL_LIMIT:
                raise self.refuse(node, "is too large")
            try:
                return self._BINOPS[type(node.op)](left, right)
            except Exception as exc:  # noqa: BLE001 - a type error of the literal itself
                raise self.refuse(node, f"cannot be evaluated ({type(exc).__name__})") from None
        if isinstance(node, ast.UnaryOp):
            value = self(node.operand)
            if isinstance(node.op, ast.Not):
                return not value
            if isinstance(node.op, (ast.USub, ast.UAdd)) and isinstance(value, (int, float)):
                return -value if isinstance(node.op, ast.USub) else value
            raise self.refuse(node)
        if isinstance(node, ast.BoolOp):
            values = (self(v) for v in node.values)
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.Compare) and all(type(op) in self._COMPARE for op in node.ops):
            left = self(node.left)
            for op, comparator in zip(node.ops, node.comparators):
                right = self(comparator)
                if not self._COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.IfExp):
            return self(node.body) if self(node.test) else self(node.orelse)
        if isinstance(node, ast.ListComp):
            return self.comprehension(node)
        if isinstance(node, ast.Call):
            return self.call(node)
        raise self.refuse(node)

    def iterable(self, node: ast.AST) -> list:
        value = self(node)
        if not isinstance(value, (list, tuple, range, str)):
            raise self.refuse(node, "is not iterable")
        return list(value)

    def comprehension(self, node: ast.ListComp) -> list:
        out: list = []

        def loop(generators: list[ast.comprehension]) -> None:
            if not generators:
                out.append(self(node.elt))
                if len(out) > _EVAL_LIMIT:
                    raise self.refuse(node, "makes too many configurations")
                return
            gen, rest = generators[0], generators[1:]
            if gen.is_async:
                raise self.refuse(gen.iter)
            for item in self.iterable(gen.iter):
                scope: dict[str, object] = {}
                self.assign(gen.target, item, scope)
                self.scope.append(scope)
                try:
                    if all(self(cond) for cond in gen.ifs):
                        loop(rest)
                finally:
                    self.scope.pop()

        loop(node.generators)
        return out

    def assign(self, target: ast.AST, value: object, scope: dict[str, object]) -> None:
        if isinstance(target, ast.Name):
            scope[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (list, tuple)) \
                and len(value) == len(target.elts):
            for t, v in zip(target.elts, value):
                self.assign(t, v, scope)
        else:
            raise self.refuse(target, "is not a plain loop target")

    def call(self, node: ast.Call) -> object:
        name = ast.unparse(node.func)
        if name.split(".")[-1] == "Config":
            return self.config(node)
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise self.refuse(node, "passes *args or **kwargs")
        args = [self(a) for a in node.args]
        kwargs = {k.arg: self(k.value) for k in node.keywords if k.arg}
        if name == "range" and not kwargs and all(isinstance(a, int) for a in args) and 1 <= len(args) <= 3:
            values = range(*args)  # type: ignore[call-overload]
            if len(values) > _EVAL_LIMIT:
                raise self.refuse(node, "is too long")
            return list(values)
        if name in ("list", "tuple") and len(args) == 1 and not kwargs:
            return list(self.iterable(node.args[0]))
        if name == "dict" and not args:
            return kwargs
        if name == "zip" and not kwargs:
            return [tuple(t) for t in zip(*(self.iterable(a) for a in node.args))]
        if name in ("itertools.product", "product") and not kwargs:
            combos = list(itertools.islice(itertools.product(*(self.iterable(a) for a in node.args)), _EVAL_LIMIT + 1))
            if len(combos) > _EVAL_LIMIT:
                raise self.refuse(node, "makes too many configurations")
            return combos
        raise self.refuse(node, "calls a function, which this reader does not run")

    def config(self, node: ast.Call) -> ConfigEntry:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise self.refuse(node, "passes *args or **kwargs")
        given = dict(zip(_CONFIG_KEYWORDS, node.args))
        given.update({k.arg: k.value for k in node.keywords if k.arg})
        unknown = set(given) - set(_CONFIG_KEYWORDS)
        if "kwargs" not in given or unknown:
            raise self.refuse(node, f"is not a triton.Config this reader knows ({', '.join(sorted(unknown)) or 'no kwargs'})")
        meta = self(given["kwargs"])
        if not isinstance(meta, dict) or not all(isinstance(k, str) for k in meta):
            raise self.refuse(given["kwargs"], "is not a dict of meta-parameters")
        launch: dict[str, object] = {}
        code: dict[str, str] = {}
        for name, value in given.items():
            if name in _KEPT_AS_TEXT:
                bound = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)} & \
                    {k for scope in self.scope for k in scope}
                if bound:
                    raise self.refuse(value, "depends on the comprehension's variables")
                code[name] = ast.unparse(value)
            elif name != "kwargs":
                launch[name] = self(value)
                if launch[name] is not None and type(launch[name]) is not int:
                    raise self.refuse(value, f"is not an integer {name}")
        return ConfigEntry(meta, launch, code, node if not self.scope else None)


def _config_knob(name: str, value: object) -> bool:
    return type(value) is int and name not in ("num_warps", "num_stages", "num_ctas", "maxnreg") \
        and bool(TILE_NAME.search(name) or _CONFIG_NAME.search(name))


def autotune_space(source: str | ast.Module) -> AutotuneSpace | None:
    """The source's @triton.autotune config list as a search space (None: no autotuned kernel).
    Read without importing anything; what cannot be read safely comes back with a `reason`."""
    try:
        tree = pyparse.parsed(source) if isinstance(source, str) else source
    except SyntaxError:
        return None
    decorated = _autotune_decorators(tree)
    if not decorated:
        return None
    fn, dec = decorated[0]
    space = AutotuneSpace(kernel=fn.name, decorator=dec)
    if len(decorated) > 1:
        space.reason = f"{len(decorated)} kernels are autotuned ({', '.join(f.name for f, _ in decorated)}); " \
                       "their config lists are left to the autotuner"
        return space
    given = dict(zip(("configs", "key"), dec.args))
    given.update({k.arg: k.value for k in dec.keywords if k.arg})
    space.options = {k: ast.unparse(v) for k, v in given.items() if k not in ("configs", "key")}
    space.configs_node = given.get("configs")
    evaluate = _Evaluator(_module_bindings(tree))
    try:
        if space.configs_node is None or "key" not in given:
            raise _Refused("the decorator names no configs= or no key=")
        key = evaluate(given["key"])
        if not isinstance(key, (list, tuple)) or not all(isinstance(k, str) for k in key):
            raise evaluate.refuse(given["key"], "is not a list of argument names")
        entries = evaluate(space.configs_node)
        if not isinstance(entries, list) or not entries or not all(isinstance(e, ConfigEntry) for e in entries):
            raise evaluate.refuse(space.configs_node, "is not a non-empty list of triton.Config")
    except _Refused as refused:
        space.reason = f"its @triton.autotune config list is not read: {refused}"
        return space
    space.key, space.entries = list(key), entries
    space.callee = next((ast.unparse(n.func) for n in ast.walk(space.configs_node)
                         if isinstance(n, ast.Call) and ast.unparse(n.func).split(".")[-1] == "Config"),
                        "triton.Config")
    first = entries[0].meta
    names = [n for n, v in first.items() if _config_knob(n, v) and all(_config_knob(n, e.meta.get(n)) for e in entries)]
    has_loop = any(isinstance(n, (ast.For, ast.While)) for n in ast.walk(fn))
    names.append("num_warps")
    if has_loop or any("num_stages" in e.launch for e in entries):
        names.append("num_stages")
    if any(not isinstance(e.value(n), int) for e in entries for n in ("num_warps", "num_stages") if n in names):
        space.reason = "its @triton.autotune config list sets num_warps or num_stages to None"
        space.entries = []
        return space
    space.names = names
    return space


def unpinned(source: str) -> bool:
    """Whether the autotuner still picks the configuration at run time: an @triton.autotune list
    of several configurations. `config_of` then names its first, not necessarily the one that runs."""
    space = autotune_space(source)
    return bool(space and space.entries and not space.pinned)


def pins(source: str) -> list[dict[str, int]]:
    """For a kernel whose autotuner still picks: each distinct configuration of its list, in list
    order, as a full configuration (`apply_config` with one pins it). Empty otherwise."""
    space = autotune_space(source)
    if not space or not space.entries or space.pinned:
        return []
    found: list[dict[str, int]] = []
    for config in space.configs:
        if config not in found:
            found.append(config)
    return found


def _template(space: AutotuneSpace, config: dict[str, int]) -> ConfigEntry:
    """The entry a configuration is written from: one with exactly its knobs, else the one that
    shares most of them (the first of equals), so its other parts (a pre_hook, num_ctas) come along."""
    configs = space.configs
    return space.entries[max(range(len(configs)), key=lambda i: (sum(configs[i][n] == config.get(n)
                                                                      for n in space.names), -i))]


def _entry_text(source: str, space: AutotuneSpace, entry: ConfigEntry, config: dict[str, int]) -> str:
    """`triton.Config(...)` source for the entry set to config: its own text with the values
    spliced in when it is written literally, else made from its values."""
    if entry.node is not None:
        text = ast.get_source_segment(source, entry.node) or ""
        base = (entry.node.lineno, entry.node.col_offset)
        edits = []
        for name, site, insert in _entry_sites(entry, space.names):
            value = config[name]
            if entry.value(name) == value:
                continue
            if site is not None:
                edits.append((_offset(text, base, site.lineno, site.col_offset),
                              _offset(text, base, site.end_lineno or site.lineno, site.end_col_offset or 0), str(value)))
            elif insert:
                end = len(text) - 1  # the ')'
                separator = " " if text[:end].rstrip().endswith((",", "(")) else ", "
                edits.append((end, end, f"{separator}{name}={value}"))
            else:  # written in a way that has no single place to edit: make the entry anew
                edits = []
                break
        else:
            for start, stop, new in sorted(edits, reverse=True):
                text = text[:start] + new + text[stop:]
            return text
    meta = {**entry.meta, **{n: config[n] for n in space.names if n in entry.meta}}
    parts = ["{" + ", ".join(f"{k!r}: {v!r}" for k, v in meta.items()) + "}"]
    launch: dict[str, object] = {**entry.launch, **{n: config[n] for n in CONFIG_DEFAULTS if n in space.names}}
    parts += [f"{k}={v!r}" for k, v in launch.items()] + [f"{k}={v}" for k, v in entry.code.items()]
    return f"{space.callee}({', '.join(parts)})"


def _offset(text: str, base: tuple[int, int], line: int, col: int) -> int:
    """Character offset in a node's source segment of a (line, col) position of the file."""
    lines = text.splitlines(keepends=True)
    row = line - base[0]
    return sum(len(l) for l in lines[:row]) + (col - base[1] if row == 0 else col)


def _entry_sites(entry: ConfigEntry, names: list[str]) -> list[tuple[str, ast.expr | None, bool]]:
    """Where each knob of a literal entry is written: (name, value node or None, insert if absent)."""
    assert entry.node is not None
    call = entry.node
    given = dict(zip(_CONFIG_KEYWORDS, call.args))
    given.update({k.arg: k.value for k in call.keywords if k.arg})
    meta_node = given.get("kwargs")
    sites: list[tuple[str, ast.expr | None, bool]] = []
    for name in names:
        if name in CONFIG_DEFAULTS:
            sites.append((name, given.get(name), True))
        elif isinstance(meta_node, ast.Dict):
            node = next((v for k, v in zip(meta_node.keys, meta_node.values)
                         if isinstance(k, ast.Constant) and k.value == name), None)
            sites.append((name, node, False))
        else:
            sites.append((name, None, False))
    return sites


def _list_text(source: str, space: AutotuneSpace, entries: list[str]) -> str:
    """A config list holding entries, laid out like the list it replaces: one entry a line when
    that was written one entry a line."""
    node = space.configs_node
    assert node is not None
    lines = source.splitlines(keepends=True)
    if isinstance(node, ast.List) and node.elts and node.elts[0].lineno > node.lineno \
            and node.end_lineno and node.end_lineno > node.lineno:
        indent = " " * node.elts[0].col_offset
        closing = lines[node.end_lineno - 1][:(node.end_col_offset or 1) - 1]
        closing = closing if not closing.strip() else ""
        return "[\n" + "".join(f"{indent}{e},\n" for e in entries) + closing + "]"
    return "[" + ", ".join(entries) + "]"


def write_configs(source: str, configs: list[dict[str, int]]) -> str:
    """The source with its @triton.autotune config list replaced by these configurations (each
    written from the entry closest to it; the key and every other decorator keyword kept, and the
    rest of the file byte-identical): one to pin, a few (a winner and its best neighbours) to
    leave the autotuner a smaller choice. Raises ValueError if the list cannot be read."""
    space = autotune_space(source)
    if space is None or not space.entries or space.configs_node is None:
        raise ValueError(space.reason if space else "no @triton.autotune kernel in the source")
    if not configs:
        raise ValueError("an autotune config list needs at least one configuration")
    return splice(source, [_configs_edit(source, space, configs)])


def _configs_edit(source: str, space: AutotuneSpace, configs: list[dict[str, int]]) -> tuple[int, int, int, int, str]:
    """An edit that replaces the decorator's config list (its `configs=` value) by configs."""
    node = space.configs_node
    assert node is not None
    full = [{**space.configs[0], **c} for c in configs]
    texts = [_entry_text(source, space, _template(space, c), c) for c in full]
    return node.lineno, node.col_offset, node.end_lineno or node.lineno, node.end_col_offset or 0, \
        _list_text(source, space, texts)


def find_knobs(source: str) -> dict[str, Knob]:
    """Every tunable of the source, in order of first appearance: for a kernel under
    @triton.autotune, the knobs of its config list first (the first configuration's values; see
    `autotune_space`), then any launch keyword the list does not set. Empty if the source does not
    parse, or if an autotuned kernel's config list cannot be read (`why_untunable` says why)."""
    try:
        tree = pyparse.parsed(source)
    except SyntaxError:
        return {}
    knobs: dict[str, Knob] = {}
    space = autotune_space(tree) if _autotuned(tree) else None
    if _autotuned(tree) and (space is None or not space.entries):
        return {}  # an autotuner this module does not read owns the configuration
    if space is not None:
        knobs = {name: Knob(name, value) for name, value in space.configs[0].items()}
    module_consts, _ = _int_assignments(tree.body, nested=False)
    launches = _launches(tree)
    for call, owner in launches:
        local_consts, local_names = _int_assignments(owner.body, nested=True) if owner is not None else ({}, set())
        for kw in call.keywords:
            if not kw.arg or not TILE_NAME.search(kw.arg) or space is not None and kw.arg in space.names:
                continue
            const = kw.value if _is_int(kw.value) else None
            if isinstance(kw.value, ast.Name):
                # a name the function assigns shadows the module's constant, even if not an int
                scope = local_consts if kw.value.id in local_names else module_consts
                const = scope.get(kw.value.id)
            if const is not None:
                knob = knobs.setdefault(kw.arg, Knob(kw.arg, _int_of(const)))
                if all(const is not s for s in knob.sites):
                    knob.sites.append(const)
                knob.passed_at.append(call)
    passed = {kw.arg for call, _ in launches for kw in call.keywords if kw.arg} | set(space.names if space else ())
    jitted = _jit_functions(tree)
    for fn in jitted:
        args = fn.args.args[len(fn.args.args) - len(fn.args.defaults):]
        for arg, default in zip(args, fn.args.defaults):
            if arg.arg not in passed and _is_int(default) and TILE_NAME.search(arg.arg) \
                    and arg.annotation is not None and "constexpr" in ast.unparse(arg.annotation):
                knobs.setdefault(arg.arg, Knob(arg.arg, _int_of(default), [default]))
    for fn in jitted:
        for name, const in _body_tiles(fn).items():
            if name not in passed and (space is None or name not in space.names):
                knob = knobs.setdefault(name, Knob(name, _int_of(const)))
                knob.sites.append(const)
    if launches and space is None:  # an autotuned kernel's warps and stages are its configs'
        has_loop = any(isinstance(n, (ast.For, ast.While)) for fn in jitted for n in ast.walk(fn))
        for name, implicit in IMPLICIT_DEFAULTS.items():
            if name not in knobs and (name == "num_warps" or has_loop):
                knobs[name] = Knob(name, implicit, launches=[c for c, _ in launches])
    return knobs


def why_untunable(source: str) -> str:
    """Why the source has no tunables, in a sentence (empty when it has some)."""
    if find_knobs(source):
        return ""
    space = autotune_space(source)
    return space.reason if space and space.reason else "it exposes no launch tunables to move"


def launched_with(source: str, name: str) -> set[str]:
    """The knobs some launch sets beside `name` (itself included): the tiles and stages of the
    kernel that launch starts. An implicit knob goes with every launch. A knob no launch sets (an
    @triton.autotune config's, a kernel signature's default) is not told apart: every knob."""
    knobs = find_knobs(source)

    def calls(knob: Knob) -> set[int]:
        return {id(c) for c in (knob.passed_at or knob.launches)}

    mine = calls(knobs[name]) if name in knobs else set()
    return {n for n, k in knobs.items() if mine & calls(k)} if mine else set(knobs)


def config_of(source: str) -> dict[str, int]:
    return {name: knob.value for name, knob in find_knobs(source).items()}


def apply_config(source: str, changes: dict[str, int]) -> str:
    """The source with each named knob set to its new value (unknown names are ignored). A kernel
    whose @triton.autotune list still holds several configurations is pinned: the list becomes
    the one configuration (its first, with the changes), so the launch runs exactly that."""
    knobs = find_knobs(source)
    edits: list[tuple[int, int, int, int, str]] = []  # (line, col, end_line, end_col, text)
    space = autotune_space(source) if knobs else None
    if space is not None and space.entries:
        listed = {n: v for n, v in changes.items() if n in space.names}
        if not space.pinned or any(knobs[n].value != v for n, v in listed.items()):
            edits.append(_configs_edit(source, space, [{**space.configs[0], **listed}]))
    for name, value in changes.items():
        knob = knobs.get(name)
        if knob is None or knob.value == value:
            continue
        for const in knob.sites:
            edits.append((const.lineno, const.col_offset, const.end_lineno or const.lineno,
                          const.end_col_offset or 0, str(_moved_like(knob, _int_of(const), value))))
        for call in knob.launches:
            edits.append(_insertion(source, call, f"{name}={value}"))
    return splice(source, edits)


def _moved_like(knob: Knob, site: int, value: int) -> int:
    """A site's new value when its knob moves from `knob.value` (its first site's) to `value`:
    a site that held another value moves by the same step (one stage more, twice the warps), so
    launches that differ keep their difference. An Inductor seed has one launch per workload,
    each in the configuration its autotuner chose (gemm_n4096_k4096 on the H100: 4, 8 and 4
    warps; 5, 3 and 4 stages); setting them all to one value undid those choices, and moving
    "num_stages 5 -> 6" gave the 3-stage launch of 128x256x64 tiles 6 stages: 288 KB of shared
    memory, past the H100's 227 KB, and a candidate that did not compile."""
    if site == knob.value or knob.value <= 0:
        return value
    low, high = limits(knob.name)  # a limit stops the step; a site already past it is not pulled back
    moved = site + value - knob.value if additive(knob.name) else round(site * value / knob.value)
    return min(max(moved, min(low, site)), max(high, site))


def splice(source: str, edits: list[tuple[int, int, int, int, str]]) -> str:
    """The source with each (line, col, end_line, end_col, text) span replaced: AST positions, 1-based
    lines, applied last first so that earlier spans keep their positions."""
    lines = source.splitlines(keepends=True)
    for line, col, end_line, end_col, text in sorted(edits, reverse=True):
        head, tail = lines[line - 1][:col], lines[end_line - 1][end_col:]
        lines[line - 1:end_line] = [head + text + tail]
    return "".join(lines)


def _insertion(source: str, call: ast.Call, keyword: str) -> tuple[int, int, int, int, str]:
    """An edit that adds `keyword` as the launch's last argument, before its closing parenthesis."""
    lines = source.splitlines(keepends=True)
    assert call.end_lineno is not None and call.end_col_offset is not None  # ast.parse sets both
    line, col = call.end_lineno, call.end_col_offset - 1  # the ')'
    before = "".join(lines[:line - 1]) + lines[line - 1][:col]
    stripped = before.rstrip()
    separator = " " if stripped.endswith((",", "(")) else ", "
    return line, col, line, col, separator + keyword


def steps(name: str, value: int) -> list[int]:
    """One step each way, the larger first: x2 / /2 for sizes and warps, +-1 for stages."""
    lo, hi = limits(name)
    options = [value + 1, value - 1] if additive(name) else [value * 2, value // 2]
    return [v for v in options if lo <= v <= hi and v != value]


def neighbours(config: dict[str, int]) -> list[dict[str, int]]:
    """Single-knob moves, round-robin over knobs, so N plans explore N knobs before a second
    step of any one."""
    per_knob = [[{name: v} for v in steps(name, value)] for name, value in config.items()]
    return [m for row in itertools.zip_longest(*per_knob) for m in row if m is not None]


def clamp_to_power_of_two(name: str, value: float) -> int:
    lo, hi = limits(name)
    if additive(name):
        return int(min(max(round(value), lo), hi))
    return int(min(max(2 ** round(math.log2(max(value, 1))), lo), hi))


def describe_moves(moves: dict[str, tuple[int, int]]) -> str:
    """`BLOCK` from 256 to 512 and `num_warps` from 4 to 8: the wording plans and lessons use.
    A knob that stays (a pinned autotune configuration names every knob) is not a move."""
    return " and ".join(f"`{n}` from {a} to {b}" for n, (a, b) in moves.items() if a != b) \
        or "no knob moved (the configuration pinned as it is)"


def format_config(config: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items()) or "(none)"


def parse_config(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"\b(\w+)=(\d+)\b", text)}
