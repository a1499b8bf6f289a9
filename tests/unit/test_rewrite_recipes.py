"""Recipes that carry the tuner's rewrites: the summarizer records a rewrite chain (and the launch
configuration reached after it) as data, only when applying it reproduces the child exactly; a
later run on a like kernel plans the whole chain as one kernel, first."""

from accelopt.memory.features import kernel_class
from accelopt.memory.schema import Evidence, Insight, Provenance, Recipe
from accelopt.nodes.summarizer import recipe_of
from accelopt.policies import rewrites
from accelopt.policies.interface import FixRequest, MeasuredKernel, PlanRequest, SummarizeRequest, WriteRequest
from accelopt.policies.replies import plan_title
from accelopt.policies.tuner import TunerPolicy
from accelopt.tools.task import load_task
from accelopt.tools.tunables import apply_config, config_of
from tests.conftest import TASKS
from tests.unit.test_one_pass_softmax import THREE_PASS_SOFTMAX

CROSS_ENTROPY = (TASKS / "cross_entropy" / "baseline.py").read_text()
RMSNORM = (TASKS / "rmsnorm" / "baseline.py").read_text()
ROW = kernel_class(CROSS_ENTROPY)
TUNER = TunerPolicy()
# an LLM's three-pass softmax, its tile named as the bundled cross_entropy's is
SOFTMAX = THREE_PASS_SOFTMAX.replace("BLOCK_SIZE", "BLOCK")


def one_pass_then(source: str, **config: int) -> str:
    return apply_config(rewrites.apply_chain("one_pass_softmax", source) or "", config)


def stored(recipe: Recipe, ident: str = "ins-1", kind: str = "positive") -> Insight:
    return Insight(id=ident, kind=kind, title="t", lesson="l", kernel_class=recipe.kernel_class,
                   evidence=Evidence(speedup=1.5, hardware="H200", timer="cuda_event", task="cross_entropy",
                                     backend="triton"),
                   provenance=Provenance(run_id="r", parent_id="a", child_id="b", iteration=2), recipe=recipe)


def plans(source: str, lessons: list[Insight], n: int = 3, tried: list[MeasuredKernel] = ()) -> list:
    request = PlanRequest(task=load_task(TASKS / "softmax"), iteration=1, member_id="baseline", source=source,
                          measurements="", tried=list(tried), lessons=lessons, n=n)
    return TUNER.plan(request).plans


def test_a_rewrite_then_a_launch_move_is_recorded_as_one_recipe():
    child = one_pass_then(CROSS_ENTROPY, BLOCK=2048, num_warps=2)
    assert recipe_of(CROSS_ENTROPY, child, 1.51) == Recipe(
        kernel_class=ROW, start={"BLOCK": 1024, "num_warps": 4, "num_stages": 3},
        result={"BLOCK": 2048, "num_warps": 2, "num_stages": 3}, speedup_vs_baseline=1.51,
        rewrites=["one_pass_softmax"])
    # two rewrites in turn, and a rewrite with no launch move
    both = rewrites.apply_chain("one_pass_softmax+prefetch_loads", CROSS_ENTROPY) or ""
    assert recipe_of(CROSS_ENTROPY, apply_config(both, {"BLOCK": 2048}), 1.6).rewrites == \
        ["one_pass_softmax", "prefetch_loads"]
    assert recipe_of(CROSS_ENTROPY, one_pass_then(CROSS_ENTROPY), 1.26).rewrites == ["one_pass_softmax"]
    # a launch change alone stays a launch recipe, as before
    assert recipe_of(RMSNORM, apply_config(RMSNORM, {"BLOCK": 1024}), 1.2).rewrites == []


def test_no_recipe_where_the_child_is_not_exactly_rewrites_and_a_launch():
    child = one_pass_then(CROSS_ENTROPY, BLOCK=2048)
    assert recipe_of(CROSS_ENTROPY, child.replace("tl.float32", "tl.float16"), 1.5) is None
    assert recipe_of(CROSS_ENTROPY, CROSS_ENTROPY, 1.0) is None
    assert recipe_of(CROSS_ENTROPY, "def broken(:\n", 1.0) is None


def test_a_like_kernel_plans_the_recalled_chain_first_and_the_tuner_writes_it():
    recipe = recipe_of(CROSS_ENTROPY, one_pass_then(CROSS_ENTROPY, BLOCK=2048, num_warps=2), 1.51)
    assert recipe is not None and kernel_class(SOFTMAX) == ROW
    first, second = plans(SOFTMAX, [stored(recipe)], n=2)
    assert first.rewrite == "one_pass_softmax" and first.moves == {"BLOCK": (128, 2048), "num_warps": (4, 2)}
    assert "recalled lesson ins-1" in first.text
    assert second.rewrite == "one_pass_softmax" and not second.moves  # the rewrite alone still follows
    written = TUNER.write(WriteRequest(task=load_task(TASKS / "softmax"), iteration=1, candidate_id="k", plan=first,
                                        source=SOFTMAX))
    assert written.source == one_pass_then(SOFTMAX, BLOCK=2048, num_warps=2)
    # once tried from this member it is not planned again
    title = first.text.splitlines()[0].split(": ", 1)[1]
    tried = [MeasuredKernel(id="k", title=title, status="verified", parent_id="baseline", speedup_vs_parent=1.0,
                            speedup=1.0, config={})]
    assert all(p.moves != first.moves for p in plans(SOFTMAX, [stored(recipe)], tried=tried) if p.rewrite)


def test_a_chain_is_not_recalled_where_it_does_not_fit():
    recipe = recipe_of(CROSS_ENTROPY, one_pass_then(CROSS_ENTROPY, BLOCK=2048), 1.5)
    assert recipe is not None
    # the pattern is not in the kernel (a norm has no max loop)
    assert not any(p.rewrite for p in plans(RMSNORM, [stored(recipe)]) if p.moves)
    # other tiles: BLOCK_SIZE says nothing about BLOCK
    assert not any(p.moves for p in plans(THREE_PASS_SOFTMAX, [stored(recipe)]) if p.rewrite)
    # a lesson against it is no recipe to follow
    assert not any(p.moves for p in plans(SOFTMAX, [stored(recipe, kind="negative")]) if p.rewrite)
    # nor does a chain recipe steer the launch moves of a kernel that has no such pattern
    assert all(not p.rewrite and "recalled" not in p.text for p in plans(RMSNORM, [stored(recipe)], n=4)
               if p.moves)


def test_a_recalled_rewrite_alone_is_brought_forward_not_planned_twice():
    prefetched = rewrites.apply_chain("prefetch_loads", RMSNORM) or ""
    recipe = recipe_of(RMSNORM, prefetched, 1.1)
    assert recipe is not None and recipe.rewrites == ["prefetch_loads"]
    launch = stored(Recipe(kernel_class=ROW, start=config_of(RMSNORM), result={**config_of(RMSNORM), "BLOCK": 1024}),
                    ident="ins-0")
    without = plans(RMSNORM, [launch], n=12)
    assert without[0].moves == {"BLOCK": (256, 1024)}  # a latency bet comes after what memory recalls
    assert without[1].rewrite == "prefetch_loads"
    recalled = plans(RMSNORM, [launch, stored(recipe)], n=12)
    assert recalled[0].rewrite == "prefetch_loads" and "ins-1" in recalled[0].text
    assert recalled[1].moves == {"BLOCK": (256, 1024)}
    assert [p.rewrite for p in recalled].count("prefetch_loads") == 1


def test_the_tuner_lesson_names_the_rewrites_and_a_failed_chain_move_is_undone():
    task = load_task(TASKS / "cross_entropy")
    child = one_pass_then(CROSS_ENTROPY, BLOCK=2048)
    draft = TUNER.summarize(SummarizeRequest(
        task=task, iteration=2, child_id="c", kind="positive", hardware="H200", plan_text="x",
        parent_source=CROSS_ENTROPY, child_source=child, speedup_vs_parent=1.5, speedup_vs_baseline=1.5,
        workloads=["w"], bottleneck="memory-bound"))
    assert draft.fields["title"] == "the rewrite one_pass_softmax then `BLOCK` from 1024 to 2048"
    first = plans(SOFTMAX, [stored(recipe_of(CROSS_ENTROPY, child, 1.5))], n=1)[0]
    failed = TUNER.write(WriteRequest(task=task, iteration=1, candidate_id="k", plan=first, source=SOFTMAX)).source or ""
    fixed = TUNER.fix(FixRequest(task=task, iteration=1, candidate_id="k.f1", plan=first, parent_source=SOFTMAX,
                                 source=failed, status="compile_error", error="out of resource: shared memory",
                                 findings=""))
    assert fixed.source is not None and config_of(fixed.source)["BLOCK"] < 2048
    assert "_online" in fixed.source or fixed.source.count("for ") < SOFTMAX.count("for ")  # still rewritten


def test_a_latency_rewrite_that_tied_is_tried_again_under_each_plain_step():
    one_pass = one_pass_then(CROSS_ENTROPY)
    prefetch = rewrites.PREFETCH_LOADS

    def kernel(ident: str, title: str, versus: str, config: dict) -> MeasuredKernel:
        return MeasuredKernel(id=ident, title=title, status="verified", parent_id="m", speedup_vs_parent=1.01,
                              speedup=1.5, config=config, versus_parent=versus)

    def planned(versus: str) -> list:
        request = PlanRequest(task=load_task(TASKS / "cross_entropy"), iteration=3, member_id="m", source=one_pass,
                              measurements="", tried=[kernel("i2.k", prefetch.title, versus, config_of(one_pass)),
                                                      kernel("i2.s", plan_title(f"### Plan 0: {rewrites.SPLIT_ROWS.title}"), "slower", {})],
                              lessons=[], n=4)
        return TUNER.plan(request).plans

    step, combined, *_ = planned("within noise")
    assert not step.rewrite and step.moves and combined.rewrite == "prefetch_loads"
    assert combined.moves == step.moves and "within noise" in combined.text
    written = TUNER.write(WriteRequest(task=load_task(TASKS / "cross_entropy"), iteration=3, candidate_id="k",
                                       plan=combined, source=one_pass)).source
    moved = {k: b for k, (_, b) in step.moves.items()}
    assert written == apply_config(rewrites.apply_chain("prefetch_loads", one_pass) or "", moved)
    # a rewrite that lost beyond noise (or won: it would be the member) is not tried again
    assert not any(p.rewrite for p in planned("slower"))
