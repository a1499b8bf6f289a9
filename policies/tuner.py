"""The tuner: a deterministic local policy (`--model tuner`) behind the policy interface
(interface.py). It reads typed requests, never prompt text, and moves a kernel's launch
tunables (tools/tunables.py): num_warps, num_stages, tl.constexpr tile sizes.

- plan: recalled recipes measured on rows unlike this kernel's (memory.features.near_rows: more
  than 8x longer or shorter) are left out; first a recalled recipe that rests on rewrites (a
  chain of them and the configuration reached after it, as data), as one plan, where the chain
  applies to this kernel; then the configurations that recalled lessons reached on kernels of
  the same class and tiles (their recipes, as data), strongest evidence first, each knob only
  the way its recipe moved it, and where two knobs one like kernel moved apart from one
  configuration both helped, the pair (ranked by its estimate, one's reach times the other's
  gain); then, for a recipe measured in this run, the configuration halfway (geometrically)
  between here and there if it lost, or if it won halfway back towards where it jumped from and
  as far again the other way (the distance may be wrong either way); then single-knob steps,
  those recalled lessons measured as helping from the same starting configuration first and
  those they warned against last. Never a configuration measured already on this program
  (reached from the same rewrite by launch moves; one measured before a rewrite is planned again
  after it).
  A kernel whose @triton.autotune list still picks at run time: first each configuration of the
  list pinned (in list order, one plan each), then the same moves from the fastest pinned one.
- rewrites: a source rewrite of a known pattern (rewrites.py: Inductor's element-wise online
  softmax made chunk-wise, a max loop and an exp-sum loop made one pass, one-tile rows grouped,
  a 2-D grid's second axis tiled, launches of one kernel joined) is planned first, once per beam
  member whose source has the pattern (the joining once no other rewrite is left: none can follow
  it); one that hides latency rather than removing work (a loop's loads prefetched) is a bet
  on the kernel, planned after the recalled recipes and before the plain steps, and (its double
  buffer closes the loop to the loop rewrites) only once those were tried. Once any rewrite
  measured within noise, each plain step is also tried on top of it. A rewrite a recalled lesson
  measured hurting a like kernel from this same configuration, or this run measured hurting this
  program in another launch configuration, waits until after the plain steps.
- write: applies the plan's moves to the source (AST edits), or its rewrite.
- fix: a failed multi-knob move drops its largest step (on a resource error, the largest growth);
  a failed big single step is halved (geometrically); a failed single step has nothing smaller,
  except after a resource error (shared memory, registers), where the failed configuration itself
  shrinks (its largest tile halved, else a stage fewer; for a step, only a knob of the launch the
  step moved): how a pinned autotune config that does not fit as written is repaired.
- summarize: a lesson's text (which knobs moved, from what to what, the measured effect); the
  summarizer node attaches the recipe itself, from the measured sources.

Its notes are labelled "(tuner)"; nothing it writes is presented as model output.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re

from accelopt.memory.features import kernel_class, near_rows
from accelopt.memory.schema import Insight, Recipe
from accelopt.policies import rewrites
from accelopt.policies.interface import (
    FixRequest,
    Kernel,
    LessonDraft,
    MeasuredKernel,
    PlanDraft,
    PlanRequest,
    Plans,
    SummarizeRequest,
    WriteRequest,
)
from accelopt.policies.replies import plan_title
from accelopt.tools.tunables import (
    IMPLICIT_DEFAULTS,
    additive,
    apply_config,
    config_of,
    describe_moves,
    format_config,
    launched_with,
    limits,
    neighbours,
    pins,
    steps,
    why_untunable,
    write_configs,
)

# the harness's error text for a launch that asks for more than the GPU has
_RESOURCE_ERROR = re.compile(r"(?i)out of resource|shared memory|registers|too many resources")

Config = dict[str, int]


def _same_tiles(other: Config, config: Config) -> bool:
    """A lesson's configuration speaks about this kernel only if it tuned the same tiles
    (num_warps / num_stages every launch has): BLOCK_N says nothing about a BLOCK, and a
    kernel with no tile at all says little about one that has some."""
    return set(other) - set(IMPLICIT_DEFAULTS) == set(config) - set(IMPLICIT_DEFAULTS)


def _applies(recipe: Recipe | None, config: Config, klass: str) -> bool:
    """A launch recipe (no rewrites) measured on a kernel of this class with these tiles."""
    return recipe is not None and not recipe.rewrites and recipe.kernel_class == klass \
        and _same_tiles(recipe.result, config)


def _evidence(insight: Insight, config: Config) -> tuple:
    """Rank of a recipe: one that started where this kernel stands transfers whole; then the
    speedup it reached over its own baseline, then how many measured pairs support it."""
    assert insight.recipe is not None
    return _rank(insight.recipe, insight.evidence.speedup, insight.support, config)


def _rank(recipe: Recipe, speedup: float, support: int, config: Config) -> tuple:
    same_start = all(config.get(k) == v for k, v in recipe.start.items())
    return (not same_start, -(recipe.speedup_vs_baseline or speedup), -support)


def _transfer(recipe: Recipe, config: Config) -> Config:
    """This configuration taken where a like kernel's recipe ended, except a knob the recipe moved
    that this kernel already stands past, the way it moved: a like kernel helped by 4 -> 2 warps
    says nothing for 1 -> 2. A knob it did not move still goes to its value: the like kernel ran
    well there (merge_attn_states' row groups at 1 warp made o3's rmsnorm_h128 kernel 1.59x)."""
    moved = recipe.moves()
    changes = {}
    for name, value in recipe.result.items():
        here = config.get(name)
        if here is None or here == value or not limits(name)[0] <= value <= limits(name)[1]:
            continue
        if name not in moved or (value > moved[name][0]) == (value > here):
            changes[name] = value
    return changes


def combined(lessons: list[Insight], klass: str) -> list[tuple[Recipe, str, int, float]]:
    """Two launch recipes one like kernel measured helping from the same configuration, moving
    different knobs, taken together where that kernel never measured the pair: (the recipe, why,
    support, its speedup). The speedup is an estimate, one's reach times the other's gain. A search that ends
    on its budget leaves such pairs behind: fused_add_rmsnorm at BLOCK 1024 gained from BLOCK 2048
    (1.17x) and from 8 warps (1.10x) apart; rmsnorm's best on the H100 is BLOCK 2048 with 8 warps."""
    launch = [i for i in lessons if i.kind == "positive" and i.recipe is not None and not i.recipe.rewrites
              and i.recipe.kernel_class == klass]
    measured = {(i.evidence.task, frozenset(i.recipe.result.items())) for i in lessons
                if i.recipe is not None and not i.recipe.rewrites}
    found = []
    for a, b in itertools.combinations(launch, 2):
        ra, rb = a.recipe, b.recipe
        assert ra is not None and rb is not None
        if a.evidence.task != b.evidence.task or ra.start != rb.start or set(ra.moves()) & set(rb.moves()):
            continue
        result = {**ra.result, **{k: v for k, (_, v) in rb.moves().items()}}
        if (a.evidence.task, frozenset(result.items())) in measured:
            continue
        reach = max((ra.speedup_vs_baseline or a.evidence.speedup) * b.evidence.speedup,
                    (rb.speedup_vs_baseline or b.evidence.speedup) * a.evidence.speedup)
        recipe = Recipe(kernel_class=klass, start=ra.start, result=result, speedup_vs_baseline=reach, row=ra.row)
        found.append((recipe, f"recalled lessons {a.id} and {b.id} together", min(a.support, b.support), reach))
    return found


def recipes(lessons: list[Insight], config: Config, klass: str) -> list[tuple[Config, str]]:
    """Changes that take this configuration where a positive recalled lesson went on a kernel of
    this class with the same tiles (`_transfer`), or where two of them would go together
    (`combined`), strongest evidence first (an estimate ranks as a measurement): (changes, why)."""
    candidates: list[tuple[Recipe, str, int, float]] = [
        (i.recipe, f"recalled lesson {i.id}", i.support, i.evidence.speedup) for i in lessons
        if i.kind == "positive" and i.recipe is not None and _applies(i.recipe, config, klass)]
    candidates += [c for c in combined(lessons, klass) if _applies(c[0], config, klass)]
    found = []
    for recipe, why, _, _ in sorted(candidates, key=lambda c: _rank(c[0], c[3], c[2], config)):
        if changes := _transfer(recipe, config):
            found.append((changes, f"following {why}"))
    return found


def directions(lessons: list[Insight], config: Config, klass: str) -> tuple[set, set]:
    """Moves (knob, from, to) that recalled lessons measured as helping, and as hurting, where
    they apply: on a kernel of their class with the same tiles, from a configuration that agrees
    with the one they started from (4 -> 8 warps may hurt at a small tile and help at a large one)."""
    liked: set = set()
    avoided: set = set()
    for insight in lessons:
        recipe = insight.recipe
        if recipe is None or recipe.rewrites or recipe.kernel_class != klass or not _same_tiles(recipe.start, config) \
                or any(config.get(k, v) != v for k, v in recipe.start.items()):
            continue
        for name, (a, b) in recipe.moves().items():
            (avoided if insight.kind == "negative" else liked).add((name, a, b))
    return liked, avoided


def warned_rewrites(lessons: list[Insight], config: Config, klass: str) -> set[str]:
    """The rewrite chains recalled lessons measured as hurting, alone, on a kernel of this class
    with the same tiles and from the configuration this kernel stands at (a prefetch that slows a
    kernel of small chunks may pay at large ones): planned after the plain steps, not first."""
    warned = set()
    for insight in lessons:
        recipe = insight.recipe
        if insight.kind == "negative" and recipe is not None and recipe.rewrites and recipe.kernel_class == klass \
                and recipe.result == recipe.start and _same_tiles(recipe.start, config) \
                and all(config.get(k, v) == v for k, v in recipe.start.items()):
            warned.add(rewrites.CHAIN.join(recipe.rewrites))
    return warned


def lost_rewrites(request: PlanRequest) -> set[str]:
    """The rewrites this run measured slower than the kernel they were applied to, where that
    kernel is this member's program in another launch configuration: planned after the plain
    steps, as a recalled warning is. On the H100 gqa_paged_decode's baseline lost 0.82x to the
    prefetch; its child at BLOCK_N 128 then spent one of its iteration's two evaluations on the
    same prefetch (within noise), and no warp count was tried in the run."""
    program = {k["id"] for k in _same_program(request)}
    by_title = {_recorded(r.title): r.name for r in rewrites.REWRITES}
    return {by_title[k["title"]] for k in request.tried
            if k["title"] in by_title and k["parent_id"] in program and k.get("versus_parent") == "slower"}


def _tried_from(request: PlanRequest) -> set[str]:
    """The titles of the plans already measured from this beam member, as the run records them."""
    return {k["title"] for k in request.tried if k["parent_id"] == request.member_id}


def _same_program(request: PlanRequest) -> list[MeasuredKernel]:
    """The kernels measured in this run that are the member's program in another launch
    configuration: those reached from the same rewrite (or start) by launch moves alone. A
    configuration measured on another program (the baseline before a rewrite) says nothing here."""
    by_id = {k["id"]: k for k in request.tried}

    def root(kernel: MeasuredKernel) -> str:
        for _ in range(len(by_id) + 1):  # a lineage is no longer than the run
            parent = kernel["parent_id"]
            if parent is None or kernel["title"].startswith("rewrite"):
                break
            if parent not in by_id:
                return parent
            kernel = by_id[parent]
        return kernel["id"]

    member = by_id.get(request.member_id)
    mine = root(member) if member is not None else request.member_id
    return [k for k in request.tried if root(k) == mine]


def _recorded(title: str) -> str:
    """A plan title as the run records it (cut to a few words): what `_tried_from` holds."""
    return plan_title(f"### Plan 0: {title}")


def recalled_rewrites(request: PlanRequest, klass: str) -> list[PlanDraft]:
    """Plans from positive recalled lessons whose recipe is a chain of rewrites (and the launch
    configuration reached after them), where every rewrite of the chain applies to this kernel in
    turn and leaves the tiles the recipe tuned: the whole way a like kernel went, as one kernel.
    Strongest evidence first; none already tried from this member."""
    source = request.source or ""
    done = _tried_from(request)
    plans: dict[tuple, tuple[tuple, PlanDraft]] = {}
    for insight in request.lessons:
        recipe = insight.recipe
        if insight.kind != "positive" or recipe is None or not recipe.rewrites or recipe.kernel_class != klass:
            continue
        chain = rewrites.CHAIN.join(recipe.rewrites)
        rewritten = rewrites.apply_chain(chain, source)
        config = config_of(rewritten) if rewritten else {}
        if rewritten is None or not _same_tiles(recipe.result, config):
            continue
        changes = _transfer(recipe, config)
        moves = {k: (config[k], v) for k, v in changes.items()}
        if len(recipe.rewrites) == 1 and not moves:  # the rewrite alone: its own plan, brought forward
            rule = rewrites.BY_NAME[chain]
            title, why = rule.title, f"{rule.why} (Recalled lesson {insight.id} measured it helping on a like kernel.)"
        else:
            title = f"rewrite {' then '.join(recipe.rewrites)}" + (f", then {_moves_text(moves)}" if moves else "")
            why = (f"(tuner rewrite, following recalled lesson {insight.id}) Apply the source rewrites "
                   f"{', '.join(recipe.rewrites)} in that order, then set {describe_moves(moves) or 'nothing more'}: "
                   f"the kernel a like kernel reached ({recipe.speedup_vs_baseline or insight.evidence.speedup:.2f}x "
                   f"over its baseline). Resulting launch config: {format_config({**config, **changes})}.")
        key = (chain, frozenset({**config, **changes}.items()))
        if _recorded(title) not in done and key not in plans:
            plans[key] = (_evidence(insight, config), PlanDraft(f"### Plan 0: {title}\n{why}", moves=moves, rewrite=chain))
    return [plan for _, plan in sorted(plans.values(), key=lambda p: p[0])]


def on_tied_rewrites(request: PlanRequest, moves: dict[str, tuple[int, int]]) -> list[PlanDraft]:
    """A plain step, also taken on each rewrite that measured within noise of this member. A tie
    is no verdict on a rewrite: hiding latency pays only once something else makes the kernel wait
    (fewer warps, a larger chunk), and a program reshaped may want another launch (o3's
    rmsnorm_h128 kernel on the H100: row groups alone 1.02x, with 2 warps 1.40x). The beam keeps
    the parent of a tie: without this, the rewrite and the step that needs it are never tried
    together, and a search whose steps are all measured stops."""
    done = _tried_from(request)
    tied = [r for r in rewrites.REWRITES if any(
        k["parent_id"] == request.member_id and k["title"] == _recorded(r.title) and k.get("versus_parent") == "within noise"
        for k in request.tried)]
    plans = []
    for rule in tied:
        rewritten = rule.apply(request.source or "")
        config = config_of(rewritten) if rewritten else {}
        if not rewritten or not set(moves) <= set(config):
            continue
        on_it = {k: (config[k], b) for k, (_, b) in moves.items()}
        title = f"rewrite {rule.name}, then {_moves_text(on_it)}"
        if _recorded(title) not in done:
            plans.append(PlanDraft(
                f"### Plan 0: {title}\n(tuner rewrite and move) {rule.why} Then set {describe_moves(on_it)}: the "
                f"rewrite alone measured within noise of this kernel, and this step may be the one it pays for.",
                moves=on_it, rewrite=rule.name))
    return plans


def _between(name: str, a: int, b: int) -> int:
    """Halfway from a to b: geometrically for sizes and warps, arithmetically for stages."""
    if additive(name):
        return (a + b + 1) // 2
    return 2 ** round((math.log2(a) + math.log2(b)) / 2) if a > 0 and b > 0 else b


def _beyond(name: str, a: int, b: int) -> int:
    """As far again past b as b is from a (geometrically for sizes and warps, by stages for
    stages), but at most two steps: past what anyone measured, a long step is a guess."""
    lo, hi = limits(name)
    if additive(name):
        value = b + max(-2, min(2, b - a))
    else:
        value = 2 ** round(math.log2(b) + max(-2.0, min(2.0, math.log2(b) - math.log2(a)))) if a > 0 and b > 0 else b
    return min(max(value, lo), hi)


def _as_far_again(request: PlanRequest, config: Config, parent: Config) -> Config:
    """After a jump that won here: each knob it moved, as far again the same way, unless a kernel
    measured in this run one step or more that way from here (the rest as here) was no faster."""
    mine = next((k["speedup"] for k in request.tried if k["id"] == request.member_id), None)
    changes = {}
    for name, value in config.items():
        start = parent.get(name)
        if start is None or start == value:
            continue
        target = _beyond(name, start, value)
        up = value > start
        stalled = any(
            k["status"] == "verified" and k["config"] and (k["speedup"] or 0.0) <= (mine or 0.0)
            and all(k["config"].get(n) == v for n, v in config.items() if n != name)
            and name in k["config"] and (k["config"][name] > value if up else k["config"][name] < value)
            for k in request.tried)
        if target != value and not stalled:
            changes[name] = target
    return changes


def around_recipes(request: PlanRequest, config: Config, klass: str) -> list[tuple[Config, str]]:
    """Around each recalled recipe measured in this run: its direction was right often enough to
    be recalled, its distance may not have been. One that lost (the beam stands elsewhere): the
    configuration halfway between here and there. One that won by a jump of several steps (the
    beam stands on it): halfway back towards where it jumped from, the step it skipped; then as
    far again the way it jumped (a like kernel's search ended where its budget did, not
    necessarily where its best was: fused_add_rmsnorm's siblings stopped at BLOCK 1024, its own
    best is 4096)."""
    measured = {frozenset(k["config"].items()): k for k in request.tried if k["config"]}
    by_id = {k["id"]: k for k in request.tried}
    found = []
    for insight in request.lessons:
        if insight.kind != "positive" or not _applies(insight.recipe, config, klass):
            continue
        assert insight.recipe is not None
        target = {**config, **{k: v for k, v in insight.recipe.result.items() if k in config}}
        kernel = measured.get(frozenset(target.items()))
        if kernel is None or kernel["status"] != "verified":
            continue
        if target != config:
            middle, why = target, f"halfway to recalled lesson {insight.id}, which lost here as {kernel['id']}"
        else:
            parent = by_id.get(kernel["parent_id"] or "")
            if not parent or not parent["config"]:
                continue
            middle, why = parent["config"], f"halfway back from recalled lesson {insight.id}, which won as {kernel['id']}"
        changes = {k: _between(k, config[k], v) for k, v in middle.items() if k in config and v != config[k]}
        changes = {k: v for k, v in changes.items() if v != config[k]}
        if changes:
            found.append((changes, why))
        if target == config and (further := _as_far_again(request, config, middle)):
            found.append((further, f"as far again as recalled lesson {insight.id} jumped, which won as {kernel['id']}"))
    return found


def _moves_text(moves: dict[str, tuple[int, int]]) -> str:
    return ", ".join(f"{k} {a} -> {b}" for k, (a, b) in moves.items() if a != b)


def _best_measured(request: PlanRequest, config: Config) -> Config:
    """Where a search over an autotuned kernel's list goes on from: the fastest verified kernel
    measured in this run with the same knobs (a pinned configuration), else the list's first."""
    same = [k for k in request.tried if k["id"] != request.member_id and k["status"] == "verified"
            and k["config"] and set(k["config"]) == set(config) and k["speedup"] is not None]
    return dict(max(same, key=lambda k: k["speedup"] or 0.0)["config"]) if same else config


def _shrink(config: Config, start: Config, among: set[str] | None = None) -> Config:
    """After a resource error with nothing of the plan left to undo (a pinned autotune
    configuration fails on its own): the largest tile halved, else one pipeline stage fewer,
    never back to where the plan started; `among`: only these knobs (those launched with the
    step that failed)."""
    names = [n for n in config if among is None or n in among]
    tiles = sorted((n for n in names if limits(n)[0] > 1), key=lambda n: -config[n])
    stages = [n for n in names if additive(n)]
    for name in tiles + stages:
        value = config[name] - 1 if additive(name) else config[name] // 2
        if limits(name)[0] <= value and {**config, name: value} != start:
            return {name: value}
    return {}


WINNERS = "autotune over the per-workload winners"


def per_workload_winners(request: PlanRequest, listed: list[Config], config: Config) -> list[Config]:
    """The configurations of an @triton.autotune list that were fastest, pinned, on at least one
    workload, in list order: once every configuration was measured pinned and the workloads
    disagree (a GEMM whose best tile depends on M), a list of just these lets the autotuner keep
    choosing per workload where no single pin can. Empty otherwise, or if that was tried.
    `config`: the autotuned kernel's own; a pin keeps its knobs outside the list (a constexpr
    passed at the launch, like BLOCK_SIZE_N), so a kernel that moved one of those is no pin."""
    if not listed or any(k["title"].startswith(WINNERS) for k in request.tried):
        return []
    knobs = set(listed[0])
    outside = {name: value for name, value in config.items() if name not in knobs}
    measured = {frozenset((n, k["config"][n]) for n in knobs): k.get("workload_speedups") or {} for k in request.tried
                if k["id"] != request.member_id and k["status"] == "verified" and knobs <= set(k["config"])
                and all(k["config"].get(n) == v for n, v in outside.items())}
    per_pin = [measured.get(frozenset(c.items())) or {} for c in listed]
    if not all(per_pin):
        return []
    workloads = sorted(set.intersection(*(set(m) for m in per_pin)))
    won = {max(range(len(listed)), key=lambda i: per_pin[i][w]) for w in workloads}
    return [listed[i] for i in sorted(won)] if 1 < len(won) < len(listed) else []


def _rewrite_plans(request: PlanRequest) -> tuple[list[PlanDraft], list[PlanDraft]]:
    """A plan for each rewrite whose pattern is in the member's source and not yet tried from it:
    (those that remove work, planned first; those that hide latency, planned after recalled recipes).
    A rewrite that closes the kernel to the others (`Rewrite.last`) waits until none of them is
    left, and is also tried right after each of them, as one kernel: were the other to tie, the
    beam would keep its parent, and the closing rewrite it may pay for would never follow it."""
    source = request.source or ""
    done = _tried_from(request)
    todo = [r for r in rewrites.applicable(source, request.task.spec.dtype) if _recorded(r.title) not in done]
    if any(not r.last for r in todo):  # a closing rewrite waits for the others, which could not follow it
        todo = [r for r in todo if not r.last]

    def drafts(chosen: list[rewrites.Rewrite]) -> list[PlanDraft]:
        return [PlanDraft(f"### Plan 0: {r.title}\n{r.why}", rewrite=r.name) for r in chosen]

    opening: list[PlanDraft] = []
    for rule in (r for r in todo if not r.hides_latency):
        opening += drafts([rule])
        if rule.last:
            continue
        rewritten = rule.apply(source) or ""
        for closing in (c for c in rewrites.REWRITES if c.last and c.apply(rewritten) is not None):
            title = f"rewrite {rule.name} then {closing.name}"
            if _recorded(title) not in done:
                opening.append(PlanDraft(f"### Plan 0: {title}\n{rule.why} Then, on the result: {closing.why}",
                                         rewrite=rewrites.CHAIN.join((rule.name, closing.name))))
    return opening, drafts([r for r in todo if r.hides_latency])


def _numbered(plans: list[PlanDraft]) -> list[PlanDraft]:
    """The plans numbered in their final order."""
    return [dataclasses.replace(p, text=re.sub(r"^### Plan \d+:", f"### Plan {i}:", p.text))
            for i, p in enumerate(plans, 1)]


class TunerPolicy:
    """Deterministic tuning policy; see the module docstring."""

    label = "tuner:tuner"

    def plan(self, request: PlanRequest) -> Plans:
        # a launch recipe carries to rows alike only: one measured on rows of 128 elements says
        # nothing for rows of 32000 (memory.features.near_rows)
        request = dataclasses.replace(request, lessons=[
            i for i in request.lessons if i.recipe is None or near_rows(i.recipe.row, request.row)])
        source = request.source
        klass = kernel_class(source or "")
        # what recalled lessons measured on like kernels first: a rewrite chain and where it went
        recalled = recalled_rewrites(request, klass)
        brought = {p.rewrite for p in recalled if not p.moves}
        rewritten, latency = ([p for p in found if p.rewrite not in brought] for found in _rewrite_plans(request))
        config = config_of(source) if source else {}
        warned = warned_rewrites(request.lessons, config, klass) | lost_rewrites(request)
        deferred = [p for p in rewritten + latency if p.rewrite in warned]
        rewritten, latency = ([p for p in found if p not in deferred] for found in (rewritten, latency))
        if not config:
            if recalled or rewritten or latency or deferred:
                return Plans(_numbered((recalled + rewritten + latency + deferred)[:request.n]))
            return Plans([], note=f"(tuner) This kernel has no launch tunables to move: {why_untunable(source or '')}.")
        # A kernel whose @triton.autotune list still picks at run time was measured as the
        # autotuner's choice, not as its first configuration: its own record proves nothing
        # about any one configuration. Its plans pin the list's configurations, in order, then
        # step from the fastest one measured.
        listed = pins(source or "")
        tried = {frozenset(k["config"].items()) for k in _same_program(request)
                 if k["config"] and not (listed and k["id"] == request.member_id)}
        base = _best_measured(request, config) if listed else config
        if not listed:
            tried.add(frozenset(config.items()))
        liked, avoided = directions(request.lessons, base, klass)

        def rank(move: Config) -> int:
            (name, value), = move.items()
            key = (name, base[name], value)
            return 0 if key in liked else 2 if key in avoided else 1

        options: list[tuple[Config, str] | PlanDraft]
        options = [(c, f"pinning the autotuner's config {i + 1} of {len(listed)}") for i, c in enumerate(listed)]
        options += recipes(request.lessons, base, klass)
        options += around_recipes(request, base, klass)
        options += latency  # after what memory recalls, before the plain steps
        options += [(m, "one step" + (" from the fastest pinned config" if base != config else ""))
                    for m in sorted(neighbours(base), key=rank)]
        options += deferred
        plans: list[PlanDraft] = (recalled + rewritten)[:request.n]
        winners = per_workload_winners(request, listed, config)
        if winners and len(plans) < request.n:
            plans.append(PlanDraft(
                text=f"### Plan {len(plans) + 1}: {WINNERS} ({len(winners)} of {len(listed)} configs)\n"
                     f"(tuner move) Every configuration of the @triton.autotune list was measured pinned, and "
                     f"different workloads were fastest under different ones. Replace the list by those "
                     f"configurations alone, keeping its key, so the autotuner still picks per workload: "
                     + "; ".join(format_config(c) for c in winners) + ".",
                configs=tuple(winners)))
        for option in options:
            if len(plans) >= request.n:
                break
            if isinstance(option, PlanDraft):
                plans.append(option)
                continue
            changes, why = option
            result = {**base, **changes}
            if frozenset(result.items()) in tried:
                continue
            tried.add(frozenset(result.items()))
            # a pin names every knob: the write pins the whole configuration, even where it agrees
            moves = {k: (config[k], v) for k, v in result.items() if listed or v != config[k]}
            where = "as the @triton.autotune list's only config (pinned)" if listed else "in the kernel launch"
            plans.append(PlanDraft(
                text=f"### Plan {len(plans) + 1}: {'pin ' if listed else ''}{_moves_text(moves) or 'as listed'}\n"
                     f"(tuner move, {why}) Set {describe_moves(moves)} {where}. Resulting launch config: "
                     f"{format_config(result)}.",
                moves=moves))
            if why == "one step" and not listed:
                plans += on_tied_rewrites(request, moves)[:request.n - len(plans)]
        return Plans(_numbered(plans),
                     note="" if plans else "(tuner) Every neighbouring launch configuration was measured already.")

    def write(self, request: WriteRequest) -> Kernel:
        if request.plan.rewrite:
            rewritten = rewrites.apply_chain(request.plan.rewrite, request.source or "")
            if rewritten is None:
                return Kernel(None, "(tuner) The rewrite's pattern is not in this kernel.")
            moves = {n: b for n, (a, b) in request.plan.moves.items()}
            return Kernel(apply_config(rewritten, moves) if moves else rewritten)
        if request.source and request.plan.configs:
            return Kernel(write_configs(request.source, list(request.plan.configs)))
        if not request.source or not request.plan.moves:
            return Kernel(None, "(tuner) The plan names no launch parameter move, so there is no kernel to write.")
        return Kernel(apply_config(request.source, {n: b for n, (a, b) in request.plan.moves.items()}))

    def fix(self, request: FixRequest) -> Kernel:
        if request.plan.rewrite and not request.plan.moves:
            return Kernel(None, "(tuner) A rewrite that fails has no smaller step to try; its parent stays.")
        source = request.source
        current = config_of(source) if source else {}
        moves = {n: (a, current[n]) for n, (a, _) in request.plan.moves.items() if n in current and current[n] != a}
        resource = bool(_RESOURCE_ERROR.search(f"{request.status}\n{request.error}"))
        start = {**current, **{n: a for n, (a, _) in request.plan.moves.items() if n in current}}
        if not source or not moves:
            shrunk = _shrink(current, start) if source and resource else {}
            if shrunk:  # a pinned autotune config that fails as written: shrink it
                return Kernel(apply_config(source or "", shrunk))
            return Kernel(None, "(tuner) Nothing to revert: the failed kernel has none of the plan's moves left.")
        span = {n: abs(math.log2(b / a)) if a > 0 and b > 0 else 1.0 for n, (a, b) in moves.items()}
        if len(moves) > 1:
            # Drop the biggest step; on a resource error, the biggest growth of a tile or stage count.
            grown = [n for n, (a, b) in moves.items() if b > a and n != "num_warps"]
            culprit = max(grown if resource and grown else moves, key=lambda n: span[n])
            return Kernel(apply_config(source, {culprit: moves[culprit][0]}))
        (name, (old, new)), = moves.items()
        if span[name] <= 1.0 or additive(name) and abs(new - old) <= 1:
            # only a knob of the launch the step moved can make it fit: a GEMM seed's stage step
            # out of shared memory once had a pointwise kernel's XBLOCK halved, twice, in vain
            shrunk = _shrink(current, start, launched_with(source, name)) if resource else {}
            if shrunk:
                return Kernel(apply_config(source, shrunk))
            return Kernel(None, f"(tuner) `{name}` {old} -> {new} is a single step with nothing smaller to try; "
                                "the parent configuration is already measured.")
        middle = 2 ** math.ceil((math.log2(old) + math.log2(new)) / 2) if not additive(name) \
            else (old + new + 1) // 2
        if middle in (old, new):
            middle = next(v for v in steps(name, new) if (v - new) * (old - new) > 0)
        return Kernel(apply_config(source, {name: middle}))

    def summarize(self, request: SummarizeRequest) -> LessonDraft:
        found = rewrites.chain_between(request.parent_source, request.child_source)
        if found is None:
            return LessonDraft({})  # not the tuner's kind of change: the node writes its own plain lesson
        chain, start = found
        before, after = config_of(start), config_of(request.child_source)
        moves = {k: (before[k], v) for k, v in after.items() if k in before and before[k] != v}
        if not (chain or moves):
            return LessonDraft({})  # no change at all
        ratio = request.speedup_vs_parent
        positive = request.kind == "positive"
        klass = kernel_class(request.parent_source)
        parts = ([f"the rewrite {' then '.join(chain)}"] if chain else []) + ([describe_moves(moves)] if moves else [])
        change = " then ".join(parts)
        reached = f" Resulting launch config: {format_config(after)} ({request.speedup_vs_baseline:.2f}x over the " \
                  "baseline)." if positive else ""
        return LessonDraft({
            "title": ("" if positive else "Avoid: ") + change,
            "lesson": (f"On {request.task.name} ({klass}; workloads {', '.join(request.workloads)}), "
                       f"{'applying ' if chain else 'moving '}{change} {'helped' if positive else 'hurt'}: "
                       f"{ratio:.2f}x against the parent. Starting launch config: {format_config(before)}.{reached}"),
            "kernel_class": klass, "before": format_config(before), "after": format_config(after)})
