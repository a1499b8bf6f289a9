"""Source rewrites the tuner proposes beside its launch moves: mechanical transformations of a
known code pattern, applied wherever the pattern is found. A rewrite claims no speed-up: its
candidate is judged like any other, and the beam keeps it only where it measured faster.

`row_groups` (row_groups.py): a one-row-per-program kernel made to take ROW_GROUP rows a program.

`one_pass_softmax` (one_pass_softmax.py): a max loop and an exp-sum loop over the same columns made
one online loop, so a row is read once instead of twice.

`axis_tiles` (axis_tiles.py): a per-(token, head) kernel on a 2-D grid made to take AXIS1_GROUP
heads a program as a tile.

`split_rows` (split_rows.py): a one-row-per-program kernel whose one loop only reduces its row
split into parts of PART_BLOCK columns a program and a launch that combines them.

`prefetch_loads` (prefetch_loads.py): a loop's loads issued one iteration ahead (a register double
buffer), for the loops Triton does not pipeline itself (no tl.dot in them).

`grouped_heads` (grouped_heads.py): a grouped-query attention kernel with a program per query head
made to give each program a KV head and its query heads as one tile, q·k and p·v as tl.dot.

`float32_dots` (float32_dots.py): a tl.dot told to multiply float32 exactly (`allow_tf32=False`,
`input_precision="ieee"`: the CUDA cores) made three TF32 products on the tensor cores, float32's
accuracy within two bits; planned for float32 tasks only.

`counted_loops` (counted_loops.py): a `while` loop that counts up by a fixed step made a `for` loop
over a range, which Triton pipelines (num_stages) and the loop rewrites take.

`split_kv` (split_kv.py): a loop that walks a sequence with an online softmax split into KV_SPLITS
parts a program, each storing its state, and a combine that rescales the parts (flash-decoding).

`fused_launches` (fused_launches.py): launches of one kernel made one after another on independent
tensors (rope's q, then k) made one launch, the grids joined along their last axis.

`chunkwise_online_softmax`: Inductor writes an online softmax (a row's maximum and its sum of
exponentials in one pass) as an element-wise combine (`triton_helpers.online_softmax_combine`):
every lane of the chunk keeps a running maximum of its own, so each element costs two
exponentials (its own and the rescale of its lane's sum) and two selects. Cross-entropy and the
looped softmax kernels of torch.compile are built this way. On the H100 the cross_entropy seed
(one pass over the logits) took as long as the bundled two-pass baseline (695 vs 694 µs at
T4096, V128256), which reads every logit twice: it is not limited by the bytes it reads. The
rewrite moves the row's maximum once per chunk (one cross-lane max), so an element costs one
exponential; the chunk's lanes keep partial sums scaled to that one maximum, so the final reduce
(Inductor's `online_softmax_reduce`, another exponential per lane) becomes a plain max and sum.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass

from accelopt.policies import (
    axis_tiles,
    counted_loops,
    float32_dots,
    fused_launches,
    grouped_heads,
    one_pass_softmax,
    prefetch_loads,
    row_groups,
    split_kv,
    split_rows,
)
from accelopt.policies.kernel_ast import before_definitions
from accelopt.tools import pyparse
from accelopt.tools.tunables import apply_config, config_of


@dataclass(frozen=True)
class Rewrite:
    name: str
    title: str                          # the plan's title: how the run's records name it
    why: str                            # the plan's text
    apply: Callable[[str], str | None]  # the rewritten module, or None where the pattern is absent
    # hides latency rather than removing traffic: a bet on this kernel, planned after recalled recipes
    hides_latency: bool = False
    # leaves nothing for the other rewrites to find (a plain launch, a plain loop): planned once
    # none of them is left to try
    last: bool = False
    # the task dtypes it can change anything for (None: all); elsewhere its candidate would run
    # what its parent ran, an evaluation spent on nothing
    dtypes: frozenset[str] | None = None


CHUNK_HELPER = "_online_softmax_chunk"

_HELPER_SOURCE = f'''

@triton.jit
def {CHUNK_HELPER}(row_max, lane_sum, x, mask):
    """One chunk of an online softmax: the row's maximum ([rows, 1]) moves once per chunk, so an
    element costs one exponential; lane_sum ([rows, chunk]) stays scaled to the row's maximum."""
    x = tl.where(mask, x, float("-inf"))
    new_max = tl.maximum(row_max, tl.max(x, 1)[:, None])
    shift = tl.where(new_max == float("-inf"), 0.0, new_max)  # a row with nothing yet: exp(-inf) = 0
    lane_sum = lane_sum * tl.exp(row_max - shift) + tl.exp(x - shift)
    return new_max, lane_sum
'''

# The loop body Inductor emits (torch 2.11's captures on the H100, tests/unit/test_rewrites.py): the combine, then both accumulators kept where
# the chunk is masked (no tl.where when nothing needs a mask).
_COMBINE = re.compile(
    r"(?P<indent>[ \t]*)(?P<acc>_tmp\w+?)_max_next, (?P=acc)_sum_next = triton_helpers\.online_softmax_combine\(\s*"
    r"(?P=acc)_max, (?P=acc)_sum, (?P<x>\w+), \w+\s*\)\s*\n"
    r"\s*(?P=acc)_max = (?:tl\.where\((?P<mask>[^\n]+?), (?P=acc)_max_next, (?P=acc)_max\)|(?P=acc)_max_next)\s*\n"
    r"[ \t]*(?P=acc)_sum = (?:tl\.where\((?P=mask), (?P=acc)_sum_next, (?P=acc)_sum\)|(?P=acc)_sum_next)[ \t]*\n")


def _reduce(acc: str) -> re.Pattern[str]:
    return re.compile(rf"(?P<out>\w+, \w+) = triton_helpers\.online_softmax_reduce\(\s*{re.escape(acc)}_max, "
                      rf"{re.escape(acc)}_sum, 1, \w+\)")


def _max_init(acc: str) -> re.Pattern[str]:
    return re.compile(rf"(?m)^(?P<lead>[ \t]*{re.escape(acc)}_max = tl\.full\(\[XBLOCK), R0?_?BLOCK\]"
                      rf"(?P<rest>, float\('-inf'\), tl\.float32\))")


def chunkwise_online_softmax(source: str) -> str | None:
    """Every element-wise online-softmax combine in a loop, made chunk-wise; None where there is none."""
    try:
        tree = pyparse.parsed(source)
    except SyntaxError:
        return None
    lines = source.splitlines(keepends=True)
    count = 0
    # function by function (a seed repeats its accumulators' names in each kernel), last first so
    # that the line numbers of those before stay true
    for fn in sorted((n for n in tree.body if isinstance(n, ast.FunctionDef)), key=lambda n: -n.lineno):
        start, end = fn.lineno - 1, fn.end_lineno or fn.lineno
        text = "".join(lines[start:end])
        changed, n = _chunkwise_in(text)
        if n:
            lines[start:end] = [changed]
            count += n
    return _with_helper("".join(lines)) if count else None


def _chunkwise_in(text: str) -> tuple[str, int]:
    count = 0
    for found in list(_COMBINE.finditer(text)):
        acc, indent = found["acc"], found["indent"]
        init, reduce = _max_init(acc), _reduce(acc)
        if len(init.findall(text)) != 1 or len(reduce.findall(text)) != 1:
            continue  # not the one-dimensional reduction this rewrite knows: leave it as Inductor wrote it
        mask = found["mask"] or "tl.full([1, 1], 1, tl.int1)"  # nothing masked
        body = f"{indent}{acc}_max, {acc}_sum = {CHUNK_HELPER}({acc}_max, {acc}_sum, {found['x']}, {mask})\n"
        text = text.replace(found.group(0), body, 1)
        text = init.sub(lambda m: f"{m['lead']}, 1]{m['rest']}", text, count=1)
        text = reduce.sub(_reduced(acc), text, count=1)
        count += 1
    return text, count


def _reduced(acc: str) -> Callable[[re.Match[str]], str]:
    """The replacement of the reduction's line: the chunkwise helper's running max and sum of `acc`."""
    return lambda m: f"{m['out']} = tl.max({acc}_max, 1), tl.sum({acc}_sum, 1)"


def _with_helper(source: str) -> str:
    """The helper once, after the module's imports (before the first function or kernel)."""
    if f"def {CHUNK_HELPER}(" in source:
        return source
    return before_definitions(source, _HELPER_SOURCE + "\n\n")


CHUNKWISE_ONLINE_SOFTMAX = Rewrite(
    name="chunkwise_online_softmax",
    title="rewrite: chunk-wise online softmax (one exponential per element)",
    why="(tuner rewrite) The kernel's online softmax combines element by element "
        "(triton_helpers.online_softmax_combine): every lane keeps its own running maximum, so each "
        "element costs two exponentials. Move the row's maximum once per chunk (one cross-lane max) "
        "and keep the lanes' partial sums scaled to it: one exponential per element, the same single "
        "pass over the data, and a plain max and sum at the end.",
    apply=chunkwise_online_softmax)

ROW_GROUPS = Rewrite(
    name="row_groups",
    title="rewrite: several rows per program (ROW_GROUP, moved by the tuner)",
    why="(tuner rewrite) The kernel gives each program one row of a 1-D grid. Give each program "
        f"{row_groups.FIRST_VALUE} consecutive rows in a loop (ROW_GROUP, a module constant the tuner moves "
        "afterwards; rows past the end are skipped): fewer, longer programs, so a short row no longer "
        "pays a whole block's scheduling and a lone load's latency.",
    apply=row_groups.row_groups)

ONE_PASS_SOFTMAX = Rewrite(
    name="one_pass_softmax",
    title="rewrite: the max loop and the exp-sum loop made one online pass",
    why="(tuner rewrite) The kernel walks each row twice over the same columns: once for its maximum, "
        "once for its sum of exp(x - max), so every element is read from memory twice (a long row does "
        "not stay in cache between the loops). Walk it once: keep the sum scaled to a running maximum "
        "that moves once per chunk (one exponential per element, as before, plus one per chunk), and "
        "the maximum and the sum end the loop holding what they held.",
    apply=one_pass_softmax.one_pass_softmax)

PREFETCH_LOADS = Rewrite(
    name="prefetch_loads",
    title="rewrite: each loop's next chunk loaded before this one is worked on",
    why="(tuner rewrite) The kernel's loop loads a chunk, then reduces it (across warps: a barrier) "
        "before its next load goes out, so each program has one load in flight; Triton pipelines "
        "(num_stages) only the loads that feed a tl.dot. Issue the next iteration's loads at the top of "
        "the loop (the same addresses, masks and fill values, one step on, nothing read past the end) "
        "and work on the chunk loaded the iteration before: two loads in flight, the same values.",
    # its double buffer is carried by the loop, which the loop rewrites (one pass, split rows) refuse
    apply=prefetch_loads.prefetch_loads, hides_latency=True, last=True)

AXIS_TILES = Rewrite(
    name="axis_tiles",
    title=f"rewrite: {axis_tiles.KNOB} rows of the grid's second axis a program, as a tile (moved by the tuner)",
    why="(tuner rewrite) The kernel gives each program of its 2-D grid one short row of the second axis "
        "(one head of one token): a few hundred bytes a program, and the loads the rows share (a position, "
        f"its cos/sin row) repeated by each. Give each program {axis_tiles.FIRST_VALUE} of them as the first "
        f"dimension of a 2-D tile ({axis_tiles.KNOB}, a module constant the tuner moves afterwards; rows past "
        "the end masked): the shared loads once a program, one wide load per tensor instead of many short ones.",
    apply=axis_tiles.axis_tiles)

GROUPED_HEADS = Rewrite(
    name="grouped_heads",
    title="rewrite: a KV head's query heads in one program, q·k and p·v as tl.dot",
    why="(tuner rewrite) The kernel gives each query head of a grouped-query attention its own program: "
        "the query heads that share a KV head each load its keys and values, and q·k and p·v are "
        "element-wise products summed on the CUDA cores. Give each program one KV head and all its "
        "query heads as the rows of a tile (padded to a power of two, at least 4, the "
        "padding masked): the keys and values loaded once, and the two matrix-vector products per head "
        "made two matrix products (tl.dot, float32 accuracy), which Triton also pipelines (num_stages).",
    apply=grouped_heads.grouped_heads)

FLOAT32_DOTS = Rewrite(
    name="float32_dots",
    title="rewrite: exact float32 tl.dot made three TF32 products on the tensor cores",
    why="(tuner rewrite) The kernel's tl.dot multiplies float32 exactly (allow_tf32=False or "
        "input_precision='ieee'), which runs on the CUDA cores, an order of magnitude below the tensor "
        "cores' TF32 rate. One TF32 product keeps 11 bits of each operand, too few once values of both "
        "signs cancel; three (each operand split into a high and a low TF32 half, the low-by-low product "
        "dropped) keep about 22 of float32's 24 bits and still run on the tensor cores: "
        "input_precision='tf32x3'. Nothing else changes.",
    apply=float32_dots.float32_dots, dtypes=frozenset({"float32"}))

COUNTED_LOOPS = Rewrite(
    name="counted_loops",
    title="rewrite: while loops that count up made for loops (pipelined by Triton)",
    why="(tuner rewrite) The kernel counts through its data with a `while` loop (`while i < n: ...; "
        "i += STEP`). Triton software-pipelines only `for` loops (num_stages: the next iterations' loads "
        "issued while this one computes), so each iteration waits for its own loads. Make it "
        "`for i in range(i, n, STEP)`: the same iterations in the same order, now pipelined, and open "
        "to the rewrites that take for loops.",
    apply=counted_loops.counted_loops)

SPLIT_KV = Rewrite(
    name="split_kv",
    title=f"rewrite: each program's sequence walked in {split_kv.KNOB} parts, then combined (flash-decoding)",
    why="(tuner rewrite) The kernel walks a whole sequence per program with an online softmax (a running "
        "maximum, sums kept scaled to it): with few sequences the grid has about one program per SM, each "
        "with a long walk and too few loads in flight. Split each program's range into "
        f"{split_kv.FIRST_VALUE} parts ({split_kv.KNOB}, a module constant the tuner moves afterwards) on a "
        "new grid axis, each storing the maximum and sums its part reached; a second launch combines a "
        "program's parts, each sum rescaled to the common maximum, and runs what followed the loop. Every "
        "iteration of the loop runs once, unchanged. A launch whose grid fills the SMs twice already runs "
        "the kernel as written.",
    apply=split_kv.split_kv)

SPLIT_ROWS = Rewrite(
    name="split_rows",
    title=f"rewrite: each row reduced in parts of {split_rows.KNOB} columns, then combined",
    why="(tuner rewrite) The kernel gives each program a whole row and walks it in one loop that only "
        "reduces it (a maximum, a sum, an online softmax): with few long rows the GPU has too few programs, "
        "and too few loads in flight, to read at full speed. Walk each row in parts instead, a program a "
        f"part of {split_rows.FIRST_VALUE} columns ({split_rows.KNOB}, a module constant the tuner moves "
        "afterwards), each storing what its loop carried reduced to one number; a second launch combines a "
        "row's parts (maxima by max, sums by sum, the online softmax's sums rescaled to the row's maximum) "
        "and runs what followed the loop. Every iteration of the loop runs once, unchanged.",
    apply=split_rows.split_rows)

FUSED_LAUNCHES = Rewrite(
    name="fused_launches",
    title="rewrite: launches of one kernel on independent tensors made one launch",
    why="(tuner rewrite) The host launches the same kernel several times in a row on independent tensors "
        "(q, then k), so each launch pays its own start, first wave and tail, where one launch of all the "
        "work pays them once. Make them one launch: the grids joined along their last axis, each program "
        "running the body with the arguments of the launch its place falls in. At run time the launches "
        "are joined only where their constexprs, options and other grid axes agree and no tensor one "
        "writes overlaps another's; otherwise they run as written, one by one.",
    apply=fused_launches.fused_launches, last=True)

# in plan order: a rewrite that removes a pass over memory before one that hides its latency
REWRITES: tuple[Rewrite, ...] = (CHUNKWISE_ONLINE_SOFTMAX, ONE_PASS_SOFTMAX, GROUPED_HEADS, FLOAT32_DOTS, COUNTED_LOOPS,
                                 SPLIT_ROWS, SPLIT_KV, PREFETCH_LOADS, AXIS_TILES, ROW_GROUPS, FUSED_LAUNCHES)
BY_NAME = {r.name: r for r in REWRITES}


def applicable(source: str, dtype: str | None = None) -> list[Rewrite]:
    """The rewrites whose pattern is in source, and that can change something for a task of
    `dtype` (None: any)."""
    return [r for r in REWRITES if (dtype is None or r.dtypes is None or dtype in r.dtypes)
            and r.apply(source) is not None]


CHAIN = "+"  # a plan's `rewrite` may name several, applied in order: "one_pass_softmax+prefetch_loads"
MAX_CHAIN = 3


def apply_chain(names: str, source: str) -> str | None:
    """The source put through each named rewrite in order; None where a name is unknown or one's
    pattern is not in what the ones before it left."""
    result: str | None = source
    for name in names.split(CHAIN):
        rewrite = BY_NAME.get(name)
        if rewrite is None or result is None:
            return None
        result = rewrite.apply(result)
    return result


def chain_between(parent: str, child: str) -> tuple[list[str], str] | None:
    """The shortest sequence of rewrites (up to MAX_CHAIN) that takes `parent` to a program that
    differs from `child` in its launch configuration alone, and that program: ([], parent) for a
    launch change alone, None where no sequence does (an LLM's edit, a rewrite not listed here).
    Decided by applying them: the child must be that program with its own launch configuration,
    node for node."""
    try:
        target = pyparse.program(child).dump
    except SyntaxError:
        return None
    knobs = set(config_of(child))
    level: list[tuple[list[str], str]] = [([], parent)]
    seen = {parent}
    for _ in range(MAX_CHAIN + 1):
        following: list[tuple[list[str], str]] = []
        for names, source in level:
            if set(config_of(source)) == knobs:
                try:
                    if pyparse.program(apply_config(source, config_of(child))).dump == target:
                        return names, source
                except SyntaxError:
                    pass
            if len(names) < MAX_CHAIN:
                for rewrite in REWRITES:
                    rewritten = rewrite.apply(source)
                    if rewritten is not None and rewritten not in seen:
                        seen.add(rewritten)
                        following.append((names + [rewrite.name], rewritten))
        level = following
    return None
