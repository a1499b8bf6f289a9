"""The tuner policy and the tunables it moves: discovery, AST edits, planning from recalled
recipes (as data) and from what was already measured, fixing, and the lessons it writes. The
tuner reads typed requests (policies/interface.py); no prompt text reaches it."""

import ast
import json
import re

from accelopt.memory.features import kernel_class
from accelopt.memory.schema import Evidence, Insight, Provenance, Recipe
from accelopt.nodes.summarizer import recipe_of
from accelopt.policies.interface import (
    FixRequest,
    MeasuredKernel,
    PlanDraft,
    PlanRequest,
    SummarizeRequest,
    WriteRequest,
)
from accelopt.policies.replies import plan_title
from accelopt.policies.rewrites import GROUPED_HEADS, PREFETCH_LOADS, REWRITES, SPLIT_KV
from accelopt.policies.tuner import TunerPolicy
from accelopt.tools.task import load_task
from accelopt.tools.tunables import apply_config, config_of, neighbours
from tests.conftest import TASKS

RMSNORM = (TASKS / "rmsnorm" / "baseline.py").read_text()
ROW = kernel_class(RMSNORM)
GEMM = "GEMM / tiled matrix multiply"
TASK = load_task(TASKS / "rmsnorm")
TUNER = TunerPolicy()

MODULE_CONSTANT = '''import triton
import triton.language as tl

BLOCK = 128  # tile width


@triton.jit
def kernel(x_ptr, n, D: tl.constexpr, BLOCK: tl.constexpr, GROUP: tl.constexpr = 4):
    pass


def run(x):
    grid = (triton.cdiv(x.numel(), BLOCK),)
    kernel[grid](x, x.numel(), D=128, BLOCK=BLOCK,
                 )
    return x
'''


def lesson(ident: str, start: dict, result: dict, speedup: float, *, kind: str = "positive", klass: str = ROW,
           task: str = "layernorm", support: int = 1) -> Insight:
    return Insight(id=ident, kind=kind, title="t", lesson="l", kernel_class=klass, support=support,
                   evidence=Evidence(speedup=speedup, hardware="H100", timer="cuda_event", task=task, backend="triton"),
                   provenance=Provenance(run_id="r", parent_id="a", child_id="b", iteration=1),
                   recipe=Recipe(kernel_class=klass, start=start, result=result, speedup_vs_baseline=speedup))


def measured(ident: str, config: dict, status: str = "verified", speedup: float | None = 1.0) -> MeasuredKernel:
    return MeasuredKernel(id=ident, title="", status=status, parent_id="baseline", speedup_vs_parent=speedup,
                          speedup=speedup, config=config)


def plan(source: str, n: int, lessons: list[Insight] = (), tried: list[MeasuredKernel] = ()) -> list[PlanDraft]:
    """The first n launch-move plans (the source rewrites the tuner also plans have tests of their own)."""
    request = PlanRequest(task=TASK, iteration=1, member_id="baseline", source=source, measurements="",
                          tried=list(tried), lessons=list(lessons), n=n + len(REWRITES))
    return [p for p in TUNER.plan(request).plans if not p.rewrite][:n]


def titles(plans: list[PlanDraft]) -> list[str]:
    return [p.text.splitlines()[0].split(": ", 1)[1] for p in plans]


def test_tunables_of_the_bundled_baselines():
    assert config_of(RMSNORM) == {"BLOCK": 256, "num_warps": 4, "num_stages": 3}  # num_stages: Triton's default
    gemm = config_of((TASKS / "gemm_bf16" / "baseline.py").read_text())
    assert gemm == {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 2}
    # Shape constants (HQ=hq, D=d, PAGE=page) are not tunables; the tile BLOCK_N is.
    assert config_of((TASKS / "gqa_paged_decode" / "baseline.py").read_text()) == \
        {"BLOCK_N": 64, "num_warps": 4, "num_stages": 3}
    # softmax's block is computed from the row length: only the warps can move.
    assert config_of((TASKS / "softmax" / "baseline.py").read_text()) == {"num_warps": 4}


def test_edits_keep_formatting_and_insert_implicit_defaults():
    edited = apply_config(RMSNORM, {"BLOCK": 1024, "num_stages": 2})
    assert edited == RMSNORM.replace("BLOCK=256, num_warps=4)", "BLOCK=1024, num_warps=4, num_stages=2)")
    assert config_of(edited) == {"BLOCK": 1024, "num_warps": 4, "num_stages": 2}
    # A module constant moves with the grid that reads it; a signature default and an absent
    # num_warps are edited in place; the shape constant D is left alone.
    assert config_of(MODULE_CONSTANT) == {"BLOCK": 128, "GROUP": 4, "num_warps": 4}
    edited = apply_config(MODULE_CONSTANT, {"BLOCK": 256, "GROUP": 8, "num_warps": 8, "D": 64})
    ast.parse(edited)
    assert "BLOCK = 256  # tile width" in edited and "GROUP: tl.constexpr = 8" in edited
    assert "D=128" in edited and "num_warps=8)" in edited
    assert config_of(edited) == {"BLOCK": 256, "GROUP": 8, "num_warps": 8}
    # An @triton.autotune list that cannot be read (empty here) leaves nothing to tune (readable ones:
    # tests/unit/test_autotune_configs.py); broken source has nothing to tune.
    assert config_of("import triton\n@triton.autotune(configs=[], key=[])\n@triton.jit\ndef k(B: tl.constexpr):\n"
                     "    pass\ndef run(x):\n    k[(1,)](x, B=16)\n") == {}
    assert config_of("def run(:") == {}


def test_neighbours_step_each_knob_before_a_second_step():
    assert neighbours({"BLOCK": 256, "num_warps": 32, "num_stages": 1}) == [
        {"BLOCK": 512}, {"num_warps": 16}, {"num_stages": 2}, {"BLOCK": 128}]


def test_planner_skips_measured_configs_and_orders_by_recalled_directions():
    plans = plan(RMSNORM, 2)
    assert titles(plans) == ["BLOCK 256 -> 512", "num_warps 4 -> 8"]
    assert plans[0].moves == {"BLOCK": (256, 512)}
    written = TUNER.write(WriteRequest(task=TASK, iteration=1, candidate_id="k", source=RMSNORM, plan=plans[0]))
    assert config_of(written.source) == {"BLOCK": 512, "num_warps": 4, "num_stages": 3}
    start = {"BLOCK": 256, "num_warps": 4, "num_stages": 3}
    lessons = [
        lesson("ins-1", start, {**start, "num_warps": 8}, 0.7, kind="negative"),
        # a row reduction with no tile at all (softmax): says nothing about one with a BLOCK
        lesson("ins-5", {"num_warps": 4}, {"num_warps": 2}, 0.6, kind="negative", task="softmax"),
        # the same move measured on a GEMM: another class, so it does not apply here
        lesson("ins-4", start, {**start, "num_warps": 2}, 1.5, klass=GEMM, task="gemm"),
        lesson("ins-2", start, {**start, "num_stages": 2}, 1.2, task="softmax"),
        # measured from another starting configuration: its warning does not apply to this kernel
        lesson("ins-3", {**start, "num_warps": 16}, {**start, "num_warps": 16, "BLOCK": 128}, 0.7, kind="negative",
               task="rmsnorm"),
    ]
    plans = plan(RMSNORM, 6, lessons, [measured("i1.m0.p0.k0", {**start, "BLOCK": 512})])
    assert "BLOCK 256 -> 512" not in titles(plans)  # measured already
    # the one recipe that applies first, then single steps with the warned-against move last
    assert titles(plans) == ["num_stages 3 -> 2", "num_stages 3 -> 4", "BLOCK 256 -> 128", "num_warps 4 -> 2",
                             "num_warps 4 -> 8"]
    assert "ins-2" in plans[0].text and all("recalled" not in p.text for p in plans[1:])


def test_planner_jumps_to_recalled_recipes_strongest_evidence_first():
    start = {"BLOCK": 256, "num_warps": 4, "num_stages": 3}
    lessons = [  # in recall order
        lesson("ins-a", start, {**start, "BLOCK": 512}, 1.3),
        lesson("ins-b", start, {**start, "BLOCK": 2048, "num_warps": 8}, 1.9),
        lesson("ins-d", {"BLOCK_N": 64, "num_warps": 4}, {"BLOCK_N": 32, "num_warps": 2}, 2.0, task="decode"),
        lesson("ins-c", {"BLOCK": 64, "num_warps": 4}, {"BLOCK": 64, "num_warps": 2}, 3.0, klass=GEMM, task="gemm"),
        lesson("ins-e", {**start, "BLOCK": 128}, {**start, "BLOCK": 1024}, 2.5),
    ]
    plans = plan(RMSNORM, 4, lessons)
    # Recipes that started where this kernel stands, strongest first; then the one that started
    # elsewhere; the GEMM recipe is not applied to a reduction, nor the decode recipe about another
    # tile (BLOCK_N) to this BLOCK.
    assert titles(plans)[:3] == ["BLOCK 256 -> 2048, num_warps 4 -> 8", "BLOCK 256 -> 512", "BLOCK 256 -> 1024"]
    assert ["ins-b" in plans[0].text, "ins-a" in plans[1].text, "ins-e" in plans[2].text] == [True] * 3
    assert "one step" in plans[3].text and "num_warps 4 -> 2" not in plans[3].text


def test_planner_explores_halfway_to_a_recipe_that_lost():
    start = {"BLOCK": 256, "num_warps": 4, "num_stages": 3}
    far = {**start, "BLOCK": 4096, "num_warps": 16}
    lessons = [lesson("ins-f", start, far, 2.55, task="fused_add_rmsnorm")]
    assert titles(plan(RMSNORM, 1, lessons)) == ["BLOCK 256 -> 4096, num_warps 4 -> 16"]
    # measured here, and it lost: halfway (geometrically) between here and there comes next
    plans = plan(RMSNORM, 2, lessons, [measured("i1.m0.p0.k0", far, speedup=0.88)])
    assert titles(plans)[0] == "BLOCK 256 -> 1024, num_warps 4 -> 8" and "lost here as i1.m0.p0.k0" in plans[0].text
    assert "one step" in plans[1].text


def test_planner_tries_the_skipped_step_after_a_recipe_that_won_by_a_far_jump():
    start = {"BLOCK": 256, "num_warps": 4, "num_stages": 3}
    far = {**start, "BLOCK": 2048}
    lessons = [lesson("ins-g", start, far, 1.8, task="fused_add_rmsnorm")]
    # the recipe was measured here and won: the beam stands on it, its parent was the baseline
    tried = [measured("baseline", start), measured("i1.m0.p0.k0", far, speedup=1.16)]
    plans = plan(apply_config(RMSNORM, far), 2, lessons, tried)
    # layernorm on the H100: 256 -> 2048 won at 1.16x, but 1024 (skipped) was the best at 1.31x
    assert titles(plans)[0] == "BLOCK 2048 -> 1024" and "won as i1.m0.p0.k0" in plans[0].text
    # and as far again the way it jumped, at most two steps past what anyone measured
    assert titles(plans)[1] == "BLOCK 2048 -> 8192" and "as far again" in plans[1].text
    plans = plan(apply_config(RMSNORM, far), 3, lessons, tried)
    assert "one step" in plans[2].text
    # a recipe one step away leaves nothing between: no halfway plan
    near = {**start, "BLOCK": 512}
    plans = plan(apply_config(RMSNORM, near), 3, [lesson("ins-h", start, near, 1.2)],
                 [measured("baseline", start), measured("i1.m0.p0.k0", near)])
    assert all("halfway" not in p.text for p in plans)


def test_fixer_shrinks_or_reverts_the_failed_move():
    def fix(source: str, moves: dict, error: str = "x") -> object:
        return TUNER.fix(FixRequest(task=TASK, iteration=1, candidate_id="k.f1", plan=PlanDraft("p", moves),
                                    parent_source=RMSNORM, source=source, status="compile_error", error=error,
                                    findings=""))

    big = apply_config(RMSNORM, {"BLOCK": 4096})
    assert config_of(fix(big, {"BLOCK": (256, 4096)}).source)["BLOCK"] == 1024  # halfway (geometrically) back
    both = apply_config(RMSNORM, {"BLOCK": 4096, "num_warps": 8})
    fixed = fix(both, {"BLOCK": (256, 4096), "num_warps": (4, 8)}, "out of resources: shared memory")
    assert config_of(fixed.source) == {"BLOCK": 256, "num_warps": 8, "num_stages": 3}  # the big step dropped
    reply = fix(apply_config(RMSNORM, {"BLOCK": 512}), {"BLOCK": (256, 512)})
    assert reply.source is None and "nothing smaller" in reply.note
    assert fix(None, {"BLOCK": (256, 512)}).source is None  # no kernel to revert


def test_summarizer_lesson_and_the_recipe_the_node_attaches():
    child = apply_config(RMSNORM, {"BLOCK": 1024, "num_warps": 8})
    draft = TUNER.summarize(SummarizeRequest(
        task=TASK, iteration=1, child_id="c", kind="positive", hardware="NVIDIA H100", plan_text="x",
        parent_source=RMSNORM, child_source=child, speedup_vs_parent=1.4, speedup_vs_baseline=1.82,
        workloads=["T4096_H4096"], bottleneck="memory-bound"))
    assert draft.fields["title"] == "`BLOCK` from 256 to 1024 and `num_warps` from 4 to 8"
    assert "1.40x against the parent" in draft.fields["lesson"] and "T4096_H4096" in draft.fields["lesson"]
    assert draft.fields["kernel_class"] == ROW and draft.fields["after"] == "BLOCK=1024, num_warps=8, num_stages=3"
    # The recipe comes from the two sources, whoever wrote the lesson; only for a pure
    # launch-configuration change.
    recipe = recipe_of(RMSNORM, child, 1.82)
    assert recipe == Recipe(kernel_class=ROW, start={"BLOCK": 256, "num_warps": 4, "num_stages": 3},
                            result={"BLOCK": 1024, "num_warps": 8, "num_stages": 3}, speedup_vs_baseline=1.82)
    assert recipe_of(RMSNORM, child.replace("tl.float32", "tl.float16"), 1.82) is None
    assert recipe_of(RMSNORM, RMSNORM, 1.0) is None
    # read back by a later run on another row reduction, it is the first plan
    layernorm = (TASKS / "layernorm" / "baseline.py").read_text()
    stored = lesson("ins-z", recipe.start, recipe.result, 1.82, task="rmsnorm")
    assert titles(plan(layernorm, 1, [stored])) == ["BLOCK 256 -> 1024, num_warps 4 -> 8"]


def test_a_rewrite_that_hides_latency_comes_after_recalled_recipes_and_before_plain_steps():
    start = {"BLOCK": 256, "num_warps": 4, "num_stages": 3}
    recalled = [lesson("ins-2", start, {**start, "BLOCK": 1024}, 1.3, task="layernorm")]
    for lessons, first in (([], PREFETCH_LOADS.title), (recalled, "BLOCK 256 -> 1024")):
        request = PlanRequest(task=TASK, iteration=1, member_id="baseline", source=RMSNORM, measurements="",
                              tried=[], lessons=lessons, n=3)
        plans = TUNER.plan(request).plans
        assert titles(plans)[0] == first, lessons
        assert [p.rewrite for p in plans].index(PREFETCH_LOADS.name) == (1 if lessons else 0)
        assert all(not p.rewrite for p in plans if p.rewrite != PREFETCH_LOADS.name)
        assert [p.text.split(":")[0] for p in plans] == [f"### Plan {i}" for i in range(1, 4)]


def test_a_rewrite_recalled_as_hurting_from_this_configuration_waits_until_after_the_plain_steps():
    """The warm layernorm and rmsnorm runs of BENCHMARKS.md's H200, 2026-11-26, 1c4fd98: a sibling's cold run had
    measured the prefetch at 0.83x from BLOCK 256, and both warm runs still spent their second
    evaluation on it there (0.81x, 0.83x). From another configuration the warning says nothing:
    at BLOCK 2048 the same prefetch won (1.34x)."""
    start = {"BLOCK": 256, "num_warps": 4, "num_stages": 3}
    hurt = lesson("ins-p", start, start, 0.83, kind="negative", task="rmsnorm")
    hurt.recipe.rewrites = [PREFETCH_LOADS.name]
    other_class = lesson("ins-q", start, start, 0.8, kind="negative", klass=GEMM)
    other_class.recipe.rewrites = [PREFETCH_LOADS.name]

    def planned(source: str, lessons: list[Insight], n: int = 3) -> list[str | None]:
        request = PlanRequest(task=TASK, iteration=1, member_id="baseline", source=source, measurements="",
                              tried=[], lessons=lessons, n=n)
        return [p.rewrite for p in TUNER.plan(request).plans]

    assert PREFETCH_LOADS.name in planned(RMSNORM, [other_class])  # a GEMM's warning is not about a norm
    assert PREFETCH_LOADS.name not in planned(RMSNORM, [hurt])
    everything = planned(RMSNORM, [hurt], n=64)
    assert everything[-1] == PREFETCH_LOADS.name and everything.count(PREFETCH_LOADS.name) == 1
    larger = apply_config(RMSNORM, {"BLOCK": 2048})
    assert planned(larger, [hurt])[0] == PREFETCH_LOADS.name


def test_a_configuration_measured_on_another_program_is_still_planned_after_a_rewrite():
    """BLOCK 512 measured on the baseline says nothing of the baseline put through a rewrite: the
    rewritten member plans it again; a step from the rewritten member is not planned twice."""
    start = {"BLOCK": 256, "num_warps": 4, "num_stages": 3}
    step = MeasuredKernel(id="i1.m0.p1.k0", title="BLOCK 256 -> 512", status="verified", parent_id="baseline",
                          speedup_vs_parent=1.0, speedup=1.0, config={**start, "BLOCK": 512})
    rewritten = MeasuredKernel(id="i1.m0.p0.k0", title="rewrite: something", status="verified",
                               parent_id="baseline", speedup_vs_parent=1.2, speedup=1.2, config=start)
    tried = [step, rewritten]

    def planned(member: str, more: list[MeasuredKernel]) -> list[str]:
        request = PlanRequest(task=TASK, iteration=2, member_id=member, source=RMSNORM, measurements="",
                              tried=tried + more, lessons=[], n=8 + len(REWRITES))
        return titles([p for p in TUNER.plan(request).plans if not p.rewrite])

    assert "BLOCK 256 -> 512" not in planned("baseline", [])
    assert "BLOCK 256 -> 512" in planned(rewritten["id"], [])
    again = MeasuredKernel(id="i2.m0.p0.k0", title="BLOCK 256 -> 512", status="verified", parent_id=rewritten["id"],
                           speedup_vs_parent=1.0, speedup=1.2, config={**start, "BLOCK": 512})
    assert "BLOCK 256 -> 512" not in planned(rewritten["id"], [again])


def test_a_recipe_transfers_only_the_way_it_went():
    start = {"BLOCK": 256, "num_warps": 4, "num_stages": 3}
    lessons = [lesson("ins-up", start, {**start, "BLOCK": 512}, 1.3),
               lesson("ins-far", start, {**start, "BLOCK": 2048, "num_warps": 2}, 1.6)]
    # this kernel already stands past where both recipes took BLOCK: only the warps go their way
    here = {"BLOCK": 4096, "num_warps": 8, "num_stages": 3}
    assert titles(plan(apply_config(RMSNORM, here), 1, lessons)) == ["num_warps 8 -> 2"]
    # at 1 warp, 4 -> 2 warps points the other way: nothing transfers, plain steps follow
    plans = plan(apply_config(RMSNORM, {**here, "num_warps": 1}), 2, lessons[1:])
    assert all("recalled" not in p.text for p in plans)
    # a knob the recipe left alone goes to the value the like kernel ran well at
    assert titles(plan(apply_config(RMSNORM, {**start, "num_stages": 2}), 1, lessons[:1])) == \
        ["BLOCK 256 -> 512, num_stages 2 -> 3"]


def test_a_recalled_rewrite_leaves_a_knob_that_already_stands_past_the_recipe():
    """merge_attn_states (1 warp) recalled rmsnorm_h128's row groups with 4 -> 2 warps: on the
    H200 that plan set 2 warps and lost to the plain rewrite at 1 (2.12x against 2.31x)."""
    task = load_task(TASKS / "merge_attn_states")
    source = (TASKS / "merge_attn_states" / "baseline.py").read_text()
    assert config_of(source)["num_warps"] == 1
    grouped = {"num_warps": 4, "ROW_GROUP": 4, "num_stages": 3}
    recalled = lesson("ins-h128", grouped, {**grouped, "num_warps": 2}, 1.44, task="rmsnorm_h128")
    recalled.recipe.rewrites = ["row_groups"]
    plans = TUNER.plan(PlanRequest(task=task, iteration=1, member_id="baseline", source=source, measurements="",
                                   tried=[], lessons=[recalled], n=2)).plans
    assert plans[0].rewrite == "row_groups" and not plans[0].moves and "ins-h128" in plans[0].text


def test_after_a_recalled_jump_won_the_search_goes_as_far_again_unless_that_way_stalled():
    """fused_add_rmsnorm on the H200: siblings' lessons reached BLOCK 1024, its own best is 4096,
    and the warm run walked there one doubling per iteration."""
    start = {"BLOCK": 256, "num_warps": 4, "num_stages": 3}
    jumped = {**start, "BLOCK": 1024}
    lessons = [lesson("ins-j", start, jumped, 1.33, task="layernorm")]
    tried = [measured("baseline", start), measured("i1.m0.p0.k0", jumped, speedup=1.52),
             measured("i1.m0.p1.k0", {**start, "BLOCK": 512}, speedup=1.31)]
    request = dict(lessons=lessons, tried=tried)
    plans = TUNER.plan(PlanRequest(task=TASK, iteration=2, member_id="i1.m0.p0.k0",
                                   source=apply_config(RMSNORM, jumped), measurements="", n=2, **request)).plans
    assert titles(plans)[0] == "BLOCK 1024 -> 4096" and "as far again" in plans[0].text  # 512 is measured
    # one step that way measured no faster here (layernorm: 2048 lost to 1024): no far step
    stalled = tried + [measured("i1.m0.p2.k0", {**start, "BLOCK": 2048}, speedup=1.18)]
    plans = TUNER.plan(PlanRequest(task=TASK, iteration=2, member_id="i1.m0.p0.k0", lessons=lessons, tried=stalled,
                                   source=apply_config(RMSNORM, jumped), measurements="", n=3)).plans
    assert all("as far again" not in p.text for p in plans)


def test_two_moves_a_like_kernel_measured_helping_apart_are_tried_together():
    """fused_add_rmsnorm's cold run on the H100 ended with BLOCK 2048 and 8 warps each helping from
    BLOCK 1024, apart; the warm rmsnorm run found the pair, its best, only at its fifth kernel."""
    here = {"BLOCK": 1024, "num_warps": 4, "num_stages": 3}
    wider = lesson("ins-w", here, {**here, "BLOCK": 2048}, 1.17, task="fused_add_rmsnorm")
    warps = lesson("ins-8", here, {**here, "num_warps": 8}, 1.10, task="fused_add_rmsnorm")
    wider.recipe.speedup_vs_baseline, warps.recipe.speedup_vs_baseline = 1.68, 1.58
    plans = plan(apply_config(RMSNORM, here), 3, [wider, warps])
    # the pair's estimate (1.68 x 1.10) ranks above either measured alone
    assert titles(plans) == ["BLOCK 1024 -> 2048, num_warps 4 -> 8", "BLOCK 1024 -> 2048", "num_warps 4 -> 8"]
    assert "ins-w and ins-8 together" in plans[0].text
    # from elsewhere, the pair transfers as any recipe does, after those that started here
    baseline = {**here, "BLOCK": 256}
    plans = plan(RMSNORM, 4, [wider, warps, lesson("ins-b", baseline, {**baseline, "BLOCK": 512}, 1.2)])
    assert titles(plans)[:2] == ["BLOCK 256 -> 512", "BLOCK 256 -> 2048, num_warps 4 -> 8"]
    # no pair where the like kernel measured it already, or the two came from different kernels
    tried_pair = lesson("ins-x", here, {**here, "BLOCK": 2048, "num_warps": 8}, 0.9, kind="negative",
                        task="fused_add_rmsnorm")
    for lessons in ([wider, warps, tried_pair], [wider, warps.model_copy(update={"evidence": warps.evidence.model_copy(
            update={"task": "layernorm"})})]):
        assert all("together" not in p.text for p in plan(apply_config(RMSNORM, here), 3, lessons))


def test_a_lesson_measured_on_rows_unlike_this_kernels_does_not_steer_it():
    """softmax (rows of 1k-32k elements) on the H100 recalled merge_attn_states' row groups at 1 warp
    (0.46x) and rmsnorm_h128's "8 warps hurt" (which put 8 warps, its only win, last): both measured
    on rows of 128 elements. Rows within 8x still take the lessons; unknown rows (stores written
    before rows were recorded) too."""
    task = load_task(TASKS / "softmax")
    source = (TASKS / "softmax" / "baseline.py").read_text()
    grouped = {"num_warps": 1, "ROW_GROUP": 4, "num_stages": 3}
    rows = lesson("ins-merge", grouped, grouped, 2.3, task="merge_attn_states")
    rows.recipe.rewrites, rows.recipe.row = ["row_groups"], 128.0
    eight = lesson("ins-h128", {"num_warps": 4}, {"num_warps": 8}, 0.8, kind="negative", task="rmsnorm_h128")
    eight.recipe.row = 128.0

    def plans(row):
        return TUNER.plan(PlanRequest(task=task, iteration=1, member_id="baseline", source=source, measurements="",
                                      tried=[], lessons=[rows, eight], n=4, row=row)).plans

    far = plans(5080.0)
    assert all("ins-" not in p.text for p in far)
    assert [p.moves for p in far if p.moves][:2] == [{"num_warps": (4, 8)}, {"num_warps": (4, 2)}]
    for row in (128.0, 900.0, None):
        near = plans(row)
        assert "ins-merge" in near[0].text and near[0].moves == {"num_warps": (4, 1)}
        assert [p.moves for p in near if p.moves and "ins-" not in p.text][:2] == \
            [{"num_warps": (4, 2)}, {"num_warps": (4, 8)}]


def test_a_lesson_records_the_row_length_its_parent_ran_at():
    """The judge records each workload's largest input shape; the lesson's recipe keeps the row
    length (its last dimension, geometric mean over workloads) for near_rows to read."""
    from accelopt.nodes.summarizer import build_insight

    parent = {"id": "p", "source": RMSNORM, "workloads": {
        "a": {"input_shape": [4096, 1024]}, "b": {"input_shape": [64, 2, 16384]}, "c": {"input_shape": None}}}
    child = {"id": "c", "source": apply_config(RMSNORM, {"BLOCK": 1024}), "speedup": 1.3}
    made = build_insight(parent, child, "positive", "### Plan 1: BLOCK 256 -> 1024\nx", {},
                         Evidence(speedup=1.3, hardware="H100", timer="cuda_event", task="rmsnorm", backend="triton"),
                         Provenance(run_id="r", parent_id="p", child_id="c", iteration=1), "tuner:tuner")
    assert made.recipe is not None and round(made.recipe.row) == 4096 and "rows of 4096" in made.compact()
    assert build_insight({**parent, "workloads": {}}, child, "positive", "### Plan 1: x\ny", {}, made.evidence,
                         made.provenance, "tuner:tuner").recipe.row is None
    # the same change on rows 32x apart is two lessons, not one
    assert not made.recipe.same_change(made.recipe.model_copy(update={"row": 128.0}))
    assert made.recipe.same_change(made.recipe.model_copy(update={"row": 2048.0}))


def test_a_rewrite_that_tied_is_tried_again_under_each_plain_step():
    """o3's rmsnorm_h128 kernel on the H100: row groups measured 1.02x (within noise, so the beam
    kept the baseline), 8 warps lost, and the search stopped after 2 warps with nothing left to
    plan. Row groups at 2 warps was 1.40x in another run."""
    from tests.conftest import ROOT

    task = load_task(ROOT / "evals" / "realworld" / "tasks" / "rmsnorm_h128")
    source = (ROOT / "evals" / "realworld" / "solutions" / "o3_rmsnorm_h128_35b90e.py").read_text()
    rows = next(r for r in REWRITES if r.name == "row_groups")
    assert rows.apply(source) and config_of(source)["num_warps"] == 4

    def tried(versus: str) -> list[MeasuredKernel]:
        grouped = MeasuredKernel(id="i1.m0.p0.k0", title=plan_title(f"### Plan 0: {rows.title}"), status="verified", parent_id="baseline",
                                 speedup_vs_parent=1.02, speedup=1.02, config=config_of(rows.apply(source)),
                                 versus_parent=versus)
        return [measured("baseline", config_of(source)), grouped,
                {**measured("i1.m0.p1.k0", {**config_of(source), "num_warps": 8}, speedup=0.79), "parent_id": "baseline"}]

    def plans(versus: str) -> list[PlanDraft]:
        return TUNER.plan(PlanRequest(task=task, iteration=2, member_id="baseline", source=source, measurements="",
                                      tried=tried(versus), lessons=[], n=4)).plans

    step, combined, *rest = plans("within noise")
    assert step.moves == {"num_warps": (4, 2)} and not step.rewrite and not rest
    assert combined.rewrite == "row_groups" and combined.moves == {"num_warps": (4, 2)}
    written = TUNER.write(WriteRequest(task=task, iteration=2, candidate_id="k", plan=combined, source=source)).source
    assert written == apply_config(rows.apply(source), {"num_warps": 2})
    assert [p.rewrite for p in plans("slower")] == [""]  # a rewrite that lost is not tried again


def test_a_rewrite_this_run_measured_losing_waits_on_the_programs_other_configurations():
    """gqa_paged_decode on the H100: the prefetch lost on the baseline (0.82x) and BLOCK_N 128 won
    (1.37x); the second iteration then spent one of its two evaluations on the same prefetch under
    BLOCK_N 128 (within noise) and never tried a warp count."""
    task = load_task(TASKS / "gqa_paged_decode")
    baseline = task.baseline_source
    child = apply_config(baseline, {"BLOCK_N": 128})
    prefetched = PREFETCH_LOADS.apply(baseline)
    assert prefetched and PREFETCH_LOADS.apply(child)
    tried = [
        MeasuredKernel(id="baseline", title="the starting kernel", status="verified", parent_id=None,
                       speedup_vs_parent=None, speedup=1.0, config=config_of(baseline)),
        MeasuredKernel(id="i1.m0.p0.k0", title=plan_title(f"### Plan 0: {PREFETCH_LOADS.title}"), status="verified",
                       parent_id="baseline", speedup_vs_parent=0.82, speedup=0.82, config=config_of(prefetched),
                       versus_parent="slower"),
        MeasuredKernel(id="i1.m0.p1.k0", title="BLOCK_N 64 -> 128", status="verified", parent_id="baseline",
                       speedup_vs_parent=1.37, speedup=1.37, config=config_of(child), versus_parent="faster"),
    ]

    def planned(n: int, versus: str = "slower") -> list[PlanDraft]:
        kernels = [{**k, "versus_parent": versus} if k["id"] == "i1.m0.p0.k0" else k for k in tried]
        return TUNER.plan(PlanRequest(task=task, iteration=2, member_id="i1.m0.p1.k0", source=child, measurements="",
                                      tried=kernels, lessons=[], n=n)).plans

    # untried, the grouped-heads and split-KV rewrites lead (they remove loads, or add programs)
    assert [p.rewrite for p in planned(2)] == [GROUPED_HEADS.name, SPLIT_KV.name]
    for n, rule in enumerate((GROUPED_HEADS, SPLIT_KV)):
        rewritten = rule.apply(child)
        assert rewritten
        tried.append(MeasuredKernel(id=f"i2.m0.p{n}.k0", title=plan_title(f"### Plan 0: {rule.title}"),
                                    status="verified", parent_id="i1.m0.p1.k0", speedup_vs_parent=0.9, speedup=1.23,
                                    config=config_of(rewritten), versus_parent="slower"))
    first = planned(2)
    assert [p.rewrite for p in first] == ["", ""] and all(len(p.moves) == 1 for p in first)
    everything = planned(64)
    assert everything[-1].rewrite == PREFETCH_LOADS.name and sum(p.rewrite == PREFETCH_LOADS.name for p in everything) == 1
    # a prefetch that tied on the baseline is no verdict: it still comes before the plain steps
    assert planned(2, versus="within noise")[0].rewrite == PREFETCH_LOADS.name


def test_launches_that_differ_move_by_the_same_step_and_keep_their_difference():
    """An Inductor seed launches one kernel per workload, each as its autotuner chose (the FIB
    gemm_n4096_k4096 seed on the H100: 5, 3 and 4 stages). "num_stages 5 -> 6" used to set all
    three to 6, and the 3-stage launch of 128x256x64 tiles no longer fit in shared memory."""
    seed = '''import triton
import triton.language as tl


@triton.jit
def k0(x, BLOCK: tl.constexpr):
    for i in range(4):
        pass


def run(x):
    k0[(1,)](x, BLOCK=64, num_warps=4, num_stages=5)
    k0[(2,)](x, BLOCK=256, num_warps=8, num_stages=3)
    return x
'''
    assert config_of(seed) == {"BLOCK": 64, "num_warps": 4, "num_stages": 5}
    moved = apply_config(seed, {"num_stages": 6, "num_warps": 8, "BLOCK": 128})
    assert "BLOCK=128, num_warps=8, num_stages=6)" in moved
    assert "BLOCK=512, num_warps=16, num_stages=4)" in moved
    assert apply_config(moved, {"num_stages": 5, "num_warps": 4, "BLOCK": 64}) == seed  # and back
    assert "BLOCK=256, num_warps=32, num_stages=3)" in apply_config(seed, {"num_warps": 32})  # 64: past the limit
    small = seed.replace("BLOCK=256", "BLOCK=16")  # at the tile floor already: a halving leaves it there
    assert "BLOCK=16, num_warps=8" in apply_config(small, {"BLOCK": 32})


def test_a_matmul_templates_tiles_in_its_body_are_knobs_and_a_reductions_are_not():
    """torch.compile's matmul templates set their tiles in the kernel's body (`BLOCK_M :
    tl.constexpr = 64`), one kernel per workload: each moves by the same step. A persistent
    reduction's `R0_BLOCK : tl.constexpr` is its whole row, and a TMA descriptor's size is bytes:
    neither is a knob."""
    from accelopt.tools.inductor_seed import seed_source
    from tests.conftest import FIXTURES

    gemm = seed_source(json.loads((FIXTURES / "inductor" / "gemm_bf16.triton.json").read_text())).source
    config = config_of(gemm)
    assert {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"} <= set(config) and "TMA_SIZE" not in config
    before = re.findall(r"BLOCK_N : tl\.constexpr = (\d+)", gemm)
    after = re.findall(r"BLOCK_N : tl\.constexpr = (\d+)", apply_config(gemm, {"BLOCK_N": 2 * config["BLOCK_N"]}))
    assert len(before) > 1 and after == [str(2 * int(b)) for b in before]
    norm = seed_source(json.loads((FIXTURES / "inductor" / "rmsnorm.default.json").read_text())).source
    assert re.search(r"R0_BLOCK: tl\.constexpr = \d+", norm)  # in the body of its persistent kernel
    assert config_of(norm) == {"XBLOCK": 1, "R0_BLOCK": 4096, "num_warps": 16, "num_stages": 1}  # its launches'


def test_a_step_out_of_shared_memory_shrinks_only_a_knob_of_its_own_launch():
    """The FIB gemm_n2048_k4096 seed on the H100: a stage more on its GEMM launch ran out of shared
    memory, and the fixer halved its largest tile, the XBLOCK of a pointwise launch beside it, twice
    (the same error each time). The GEMM launch sets no tile of its own: nothing smaller to try."""
    seed = '''import triton
import triton.language as tl


@triton.jit
def gemm(a, b, c):
    for k in range(4):
        pass


@triton.jit
def cast(x, y, XBLOCK: tl.constexpr):
    pass


def run(a, b, c):
    gemm[(1,)](a, b, c, num_warps=8, num_stages=5)
    cast[(1,)](c, a, XBLOCK=512, num_warps=4)
    return c
'''

    def fix(source: str, moves: dict) -> object:
        return TUNER.fix(FixRequest(task=TASK, iteration=1, candidate_id="k.f1", plan=PlanDraft("p", moves),
                                    parent_source=source, source=source, status="compile_error",
                                    error="OutOfResources: out of resource: shared memory, Required: 245800",
                                    findings=""))

    reply = fix(seed, {"num_stages": (4, 5)})
    assert reply.source is None and "nothing smaller" in reply.note
    # where the launch that failed sets a tile, halving it is the repair
    tiled = seed.replace("a, b, c, num_warps=8", "a, b, c, BLOCK_N=256, num_warps=8")
    assert config_of(fix(tiled, {"num_stages": (4, 5)}).source)["BLOCK_N"] == 128
