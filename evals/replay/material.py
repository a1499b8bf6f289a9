"""What the replay server serves, per role, for one task: real kernels, mechanical variants of
them, realistic failures, plan texts and lessons. A rehearsal's material, not an LLM's output.

Kernels (executor, fixer): the LLM-written kernels the repository holds for the task's
FlashInfer-Bench definition (evals/realworld/manifest.json: the FlashInfer-Bench solutions;
evals/realworld/accelopt_bests/manifest.json: AccelOpt's optimized kernels, gpt-oss-120b with
fixers), served verbatim; a task with none (a task of evals/tasks) serves its own baseline.py,
not LLM-written. Besides them, mechanical variants: the launch tunables that
`accelopt.tools.tunables` finds (num_warps, num_stages, BLOCK_* constexprs, an autotune list's
knobs) moved by x2 / x4 (stages +-1, +-2), one knob first, then two, up to
`MAX_VARIANTS_PER_KERNEL` per real kernel. A variant is judged like any kernel: a moved tile
size may break it, as it would a model's. The fixer gets a real kernel or a variant that moves
only num_warps / num_stages (what the kernel computes is unchanged).

Failures (a share of executor replies): a reply cut off mid-kernel at the token limit, or a real
kernel with a realistic bug: a name used in a @triton.jit function that nothing defines (a
wrapper's variable), or a keyword a Triton call does not take (`axis=` written `dim=`).

Plans and lessons come from plans.json (its `origin` says where they come from).
"""

from __future__ import annotations

import ast
import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from accelopt.policies.kernel_ast import bound_names
from accelopt.tools import pyparse, tunables

HERE = Path(__file__).resolve().parent
REALWORLD = HERE.parent / "realworld"
PLANS_FILE = HERE / "plans.json"
MAX_VARIANTS_PER_KERNEL = 200
SEMANTICS_KEPT = {"num_warps", "num_stages"}  # knobs whose move leaves what the kernel computes alone
FAILURES = ("truncated", "undefined_name", "wrong_keyword")


@dataclass(frozen=True)
class Served:
    """A kernel as served: its source, where it comes from, and how it was made."""

    source: str
    kind: str      # real | variant | truncated | undefined_name | wrong_keyword
    origin: str    # the real kernel's file (relative to evals/), and the moves or the bug


@dataclass(frozen=True)
class RealKernel:
    name: str      # its file, relative to evals/ (or the task's baseline.py)
    source: str
    author: str


def definition_of(task_dir: Path) -> str:
    """The FlashInfer-Bench definition a task was imported from (task.json origin), else its name."""
    spec = json.loads((task_dir / "task.json").read_text())
    return str((spec.get("origin") or {}).get("definition") or spec.get("name") or task_dir.name)


def real_kernels(task_dir: Path) -> list[RealKernel]:
    """The LLM-written kernels of the task's definition; the task's baseline.py when it has none."""
    definition = definition_of(task_dir)
    found: list[RealKernel] = []
    manifest = json.loads((REALWORLD / "manifest.json").read_text())
    for pair in manifest["pairs"]:
        if Path(pair["task"]).name == definition:
            path = REALWORLD / pair["solution"]
            found.append(RealKernel(f"realworld/{pair['solution']}", path.read_text(), pair.get("author", "")))
    bests = json.loads((REALWORLD / "accelopt_bests" / "manifest.json").read_text())
    best = (bests.get("bests") or {}).get(definition)
    if best:
        path = REALWORLD / "accelopt_bests" / best["file"]
        found.append(RealKernel(f"realworld/accelopt_bests/{best['file']}", path.read_text(), "AccelOpt (gpt-oss-120b)"))
    if not found and (task_dir / "baseline.py").is_file():
        found.append(RealKernel(f"{task_dir.name}/baseline.py (the task's own, not LLM-written)",
                                (task_dir / "baseline.py").read_text(), "the task"))
    if not found:
        known = sorted({Path(p["task"]).name for p in manifest["pairs"]})
        raise ValueError(f"no kernels to serve for {task_dir} (definition {definition}): it is none of the realworld "
                         f"definitions ({', '.join(known)}) and has no baseline.py")
    return found


def _options(name: str, value: int) -> list[int]:
    """A knob's values one and two steps away, nearest first (x2 / /2, stages +-1)."""
    low, high = tunables.limits(name)
    out = []
    for step in (1, 2):
        for v in ((value + step, value - step) if tunables.additive(name) else (value * 2 ** step, value // 2 ** step)):
            if low <= v <= high and v != value and v not in out and (tunables.additive(name) or v > 0):
                out.append(v)
    return out


def variant_moves(config: dict[str, int], limit: int = MAX_VARIANTS_PER_KERNEL) -> list[dict[str, int]]:
    """Configurations near `config`: every one-knob move, then two-knob moves, ..., at most `limit`."""
    per_knob = {name: _options(name, value) for name, value in config.items()}
    names = [n for n in per_knob if per_knob[n]]
    out: list[dict[str, int]] = []
    for count in range(1, len(names) + 1):
        for chosen in itertools.combinations(names, count):
            for values in itertools.product(*(per_knob[n] for n in chosen)):
                out.append(dict(zip(chosen, values)))
                if len(out) >= limit:
                    return out
    return out


class Material:
    """One task's material: real kernels, their variants (made on first use), plans, lessons."""

    def __init__(self, task_dir: str | Path, max_variants: int = MAX_VARIANTS_PER_KERNEL):
        self.task_dir = Path(task_dir)
        self.definition = definition_of(self.task_dir)
        self.real = real_kernels(self.task_dir)
        self.moves: list[tuple[int, dict[str, int]]] = []
        for index, kernel in enumerate(self.real):
            self.moves += [(index, m) for m in variant_moves(tunables.config_of(kernel.source), max_variants)]
        self.fix_moves = [(i, m) for i, m in self.moves if set(m) <= SEMANTICS_KEPT]
        data = json.loads(PLANS_FILE.read_text())
        self.plans: list[dict[str, str]] = data["plans"]
        self.lessons: list[dict[str, str]] = data["lessons"]
        self._variants: dict[tuple[int, tuple], Served] = {}

    @property
    def kernel_class(self) -> str:
        name = self.definition
        if "rmsnorm" in name or "norm" in name or "softmax" in name:
            return "row reduction"
        if name.startswith("gemm") or "matmul" in name:
            return "GEMM"
        if name.startswith(("gqa", "mla", "mha")) or "attention" in name:
            return "attention"
        return "elementwise"

    def describe(self) -> dict:
        return {"definition": self.definition, "real_kernels": [k.name for k in self.real],
                "variants": len(self.moves), "fixer_variants": len(self.fix_moves),
                "plans": len(self.plans), "lessons": len(self.lessons)}

    def real_kernel(self, index: int) -> Served:
        kernel = self.real[index % len(self.real)]
        return Served(kernel.source, "real", kernel.name)

    def variant(self, index: int, fixer: bool = False) -> Served:
        """The index-th variant (of the fixer's list when fixer): the real kernel with its moves."""
        moves = self.fix_moves if fixer else self.moves
        if not moves:
            return self.real_kernel(index)
        real, move = moves[index % len(moves)]
        key = (real, tuple(sorted(move.items())))
        if key not in self._variants:
            kernel = self.real[real]
            try:
                source = tunables.apply_config(kernel.source, move)
            except Exception:  # noqa: BLE001 - a kernel the tunables cannot edit is served as it is
                source = kernel.source
            moved = ", ".join(f"{n}={v}" for n, v in move.items())
            self._variants[key] = Served(source, "variant", f"{kernel.name} with {moved}")
        return self._variants[key]

    def kernel(self, pick: float, which: float, real_share: float, fixer: bool = False) -> Served:
        """A real kernel (a `real_share` of draws) or a variant; pick and which are in [0, 1)."""
        moves = self.fix_moves if fixer else self.moves
        if pick < real_share or not moves:
            return self.real_kernel(int(which * len(self.real)))
        return self.variant(int(which * len(moves)), fixer)

    def plan_choice(self, n: int, order: list[float]) -> list[dict[str, str]]:
        """n plans in the order the draws give (cycling when more are asked than there are)."""
        ranked = [p for _, p in sorted(zip(order, self.plans), key=lambda t: t[0])]
        return [ranked[i % len(ranked)] for i in range(n)]

    def lesson(self, which: float) -> dict[str, str]:
        lesson = self.lessons[int(which * len(self.lessons))]
        return {"title": lesson["title"], "lesson": lesson["lesson"], "bottleneck": lesson["bottleneck"],
                "kernel_class": self.kernel_class, "before": lesson["before"], "after": lesson["after"]}


# ---------------------------------------------------------------- failures


def truncated(source: str, fraction: float) -> str:
    """The first `fraction` of the source's lines (at least one): a reply cut off at the token limit."""
    lines = source.split("\n")
    return "\n".join(lines[:max(1, int(len(lines) * fraction))])


def _jit_functions(tree: ast.Module) -> list[ast.FunctionDef]:
    return [n for n in tree.body if isinstance(n, ast.FunctionDef)
            and any("jit" in ast.unparse(d) for d in n.decorator_list)]


def _identifiers(tree: ast.Module) -> set[str]:
    """Every name the module uses (kernel_ast.bound_names) and every name it imports."""
    imported = {(n.asname or n.name).split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.alias)}
    return bound_names(tree) | imported


def _splice(source: str, line: int, col: int, end_col: int, text: str) -> str:
    """The source with one span of one line replaced; AST columns count UTF-8 bytes."""
    lines = source.split("\n")
    raw = lines[line - 1].encode()
    lines[line - 1] = (raw[:col] + text.encode() + raw[end_col:]).decode()
    return "\n".join(lines)


UNDEFINED_TILES = ("BLOCK_SIZE", "BLOCK_N", "BLOCK_M", "TILE_SIZE")
UNDEFINED_VALUES = ("n_cols", "num_rows", "row_stride", "hidden_size", "seq_len")


def undefined_name(source: str, which: float) -> str | None:
    """One use of a @triton.jit parameter replaced by a name nothing defines: the wrapper's
    variable (`n_cols`, `BLOCK_SIZE`) used inside the kernel. None when there is no such use."""
    tree = pyparse.parsed(source)  # read, never changed: the shared parse
    uses: list[ast.Name] = []
    for fn in _jit_functions(tree):
        params = {a.arg for a in fn.args.args}
        for stmt in fn.body:
            uses += [n for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                     and n.id in params]
    uses = [u for u in uses if not u.id.endswith("ptr")] or uses  # a size or stride, as in a wrapper
    if not uses:
        return None
    use = uses[int(which * len(uses))]
    taken = _identifiers(tree)
    options = UNDEFINED_TILES if use.id.isupper() else UNDEFINED_VALUES
    name = next((o for o in (*options, *UNDEFINED_VALUES, *UNDEFINED_TILES) if o not in taken), None)
    if name is None or use.end_col_offset is None:
        return None
    return _splice(source, use.lineno, use.col_offset, use.end_col_offset, name)


# keywords as another library spells them (PyTorch's dim=, keepdim=) or as no version of Triton did
WRONG_KEYWORDS = {"axis": "dim", "keep_dims": "keepdim", "other": "fill_value", "out_dtype": "dtype",
                  "eviction_policy": "cache_policy", "num_warps": "num_warp", "num_stages": "num_stage"}


def wrong_keyword(source: str, which: float) -> str | None:
    """One keyword of a `tl.*` call in a @triton.jit function (else of a kernel launch) written
    as Triton does not take it. None when there is none to misspell."""
    tree = pyparse.parsed(source)  # read, never changed: the shared parse
    sites: list[ast.keyword] = []
    for fn in _jit_functions(tree):
        for node in ast.walk(fn):
            if isinstance(node, ast.Call) and ast.unparse(node.func).startswith("tl."):
                sites += [k for k in node.keywords if k.arg in WRONG_KEYWORDS and k.arg not in ("num_warps",
                                                                                              "num_stages")]
    if not sites:  # a launch's keyword: kernel[grid](..., num_warps=4)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript):
                sites += [k for k in node.keywords if k.arg in ("num_warps", "num_stages")]
    if not sites:
        return None
    site = sites[int(which * len(sites))]
    assert site.arg is not None
    return _splice(source, site.lineno, site.col_offset, site.col_offset + len(site.arg.encode()),
                   WRONG_KEYWORDS[site.arg])


def failure(kernel: Served, kind: str, which: float) -> Served:
    """The kernel with a realistic failure of the kind asked; cut off when that bug has no place."""
    if kind in ("undefined_name", "wrong_keyword"):
        try:
            broken = (undefined_name if kind == "undefined_name" else wrong_keyword)(kernel.source, which)
        except SyntaxError:
            broken = None
        if broken is not None and broken != kernel.source:
            return Served(broken, kind, f"{kernel.origin}, with a bug ({kind})")
    return Served(truncated(kernel.source, 0.5 + 0.35 * which), "truncated", f"{kernel.origin}, cut off")
