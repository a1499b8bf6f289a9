"""@triton.autotune config lists as the tuner's search space (issue 17): read by a safe AST
evaluation (no import of the kernel), pinned to one configuration, edited in place once pinned,
written back as a shorter list; and the tuner, the fixer and the --autotune node working on them.
Real kernels: LLM-written FlashInfer-Bench solutions vendored under evals/realworld/solutions."""

import ast
from types import SimpleNamespace

import pytest

from accelopt.nodes import autotune as autotune_node
from accelopt.nodes.context import RunContext
from accelopt.nodes.summarizer import recipe_of
from accelopt.policies.interface import FixRequest, MeasuredKernel, PlanDraft, PlanRequest, WriteRequest
from accelopt.policies.tuner import TunerPolicy
from accelopt.tools.task import load_task
from accelopt.tools.tunables import (
    apply_config,
    autotune_space,
    config_of,
    describe_moves,
    neighbours,
    pins,
    unpinned,
    why_untunable,
    write_configs,
)
from tests.conftest import FIXTURES, ROOT, TASKS

SOLUTIONS = ROOT / "evals" / "realworld" / "solutions"
GEMM = (SOLUTIONS / "gpt-5_gemm_n4096_k4096_14f133.py").read_text()
RAGGED = (SOLUTIONS / "accelopt-gpt-oss-120b_gqa_ragged_prefill_causal_h32_kv8_d128_728c5634.py").read_text()
DEAD_DICT = (SOLUTIONS / "gemini-2.5-pro_fused_add_rmsnorm_h7168_05pwmx.py").read_text()
WARPS_ONLY = (SOLUTIONS / "gemini-2.5-pro_rmsnorm_h1536_xndzsl.py").read_text()
RMSNORM = (FIXTURES / "autotuned" / "rmsnorm_autotuned.py").read_text()
TASK = load_task(TASKS / "rmsnorm")
TUNER = TunerPolicy()

KERNEL = '''
@triton.jit
def matmul_kernel(a_ptr, c_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN: tl.constexpr):
    for k in range(0, 4):
        pass


def run(a, c):
    matmul_kernel[lambda META: (triton.cdiv(a.shape[0], META["BLOCK_M"]),)](a, c, a.shape[0], c.shape[1])
    return c
'''

COMPREHENSION = '''import itertools
import triton
import triton.language as tl

SIZES = [64, 128]
CONFIGS = [triton.Config({'BLOCK_M': bm, 'BLOCK_N': bn, 'EVEN': True}, num_warps=w, num_stages=s)
           for bm in SIZES for bn in (32, 64) for w in [4, 8] for s in range(2, 4) if bm * bn < 128 * 64]


def prune(configs, named_args, **kwargs):
    return configs


@triton.autotune(configs=CONFIGS, key=['M', 'N'], prune_configs_by={'early_config_prune': prune, 'top_k': 4},
                 reset_to_zero=['c_ptr'], restore_value=['a_ptr'], warmup=5, rep=20)''' + KERNEL

PRODUCT = '''import itertools
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({'BLOCK_M': m, 'BLOCK_N': n, 'EVEN': False}, num_warps=w)
             for (m, n), w in itertools.product(zip([32, 64], [64, 128]), [2, 4])]
    + [triton.Config({'BLOCK_M': 128, 'BLOCK_N': 128, 'EVEN': False}, num_warps=8, num_ctas=1, pre_hook=hook)],
    key=['M'],
)''' + KERNEL


def realworld_autotuned() -> list:
    return sorted(p for p in SOLUTIONS.glob("*.py") if "triton.autotune" in p.read_text())


def outside_the_list(source: str) -> tuple[str, str]:
    """The source before and after its config list: what every edit must leave byte-identical."""
    node = autotune_space(source).configs_node
    lines = source.splitlines(keepends=True)
    before = "".join(lines[:node.lineno - 1]) + lines[node.lineno - 1][:node.col_offset]
    after = lines[node.end_lineno - 1][node.end_col_offset:] + "".join(lines[node.end_lineno:])
    return before, after


def test_reads_real_world_config_lists():
    assert len(realworld_autotuned()) >= 3
    space = autotune_space(GEMM)
    assert (space.kernel, space.key, space.reason) == ("_gemm_n4096_k4096_kernel", ["M"], "")
    assert space.names == ["BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages"]
    assert space.configs[1] == {"BLOCK_M": 64, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 4}
    assert config_of(GEMM) == space.configs[0] and unpinned(GEMM) and len(pins(GEMM)) == 4
    # meta-parameters other than tiles (stage counts, unrolls) are knobs of a config list too
    ragged = autotune_space(RAGGED)
    assert ragged.names == ["BLOCK_N", "Q_BLOCK", "NUM_STAGES_LOOP", "UNROLL", "num_warps", "num_stages"]
    assert [c["UNROLL"] for c in ragged.configs] == [1, 1, 2, 2, 2, 2]
    assert {"NUM_STAGES_LOOP": 3} in neighbours(ragged.configs[0]) and {"UNROLL": 2} in neighbours(ragged.configs[0])
    # `triton.Config({...})` with no keywords runs at Triton's defaults (4 warps, 3 stages): the
    # 'num_warps' / 'num_stages' keys in its dict are dead, overridden by Config's own keywords.
    dead = autotune_space(DEAD_DICT)
    assert [(c["BLOCK_SIZE_N"], c["num_warps"], c["num_stages"]) for c in dead.configs] == \
        [(1024, 4, 3), (1024, 4, 3), (2048, 4, 3), (4096, 4, 3), (8192, 4, 3)]
    assert len(pins(DEAD_DICT)) == 4  # the first two entries are one configuration
    # a list that only moves warps, on a kernel with no loop: no num_stages to tune
    assert autotune_space(WARPS_ONLY).configs == [{"num_warps": 4}, {"num_warps": 8}, {"num_warps": 16}]


@pytest.mark.parametrize("path", realworld_autotuned(), ids=lambda p: p.stem[:40])
def test_pinning_real_world_kernels_touches_the_config_list_alone(path):
    source = path.read_text()
    space = autotune_space(source)
    assert space.reason == "" and space.entries
    listed = pins(source)
    assert listed and len(listed) <= len(space.entries)
    for config in listed[:3]:
        pinned = apply_config(source, config)
        ast.parse(pinned)
        after = autotune_space(pinned)
        assert after.pinned and not unpinned(pinned) and pins(pinned) == []
        assert after.configs == [config] and config_of(pinned) == config_of(source) | config
        assert (after.key, after.options) == (space.key, space.options)
        assert outside_the_list(pinned) == outside_the_list(source)
        # the entry is the list's own text, byte for byte
        entry = next(e for e in space.entries if e.node is not None and space.configs[space.entries.index(e)] == config)
        assert ast.get_source_segment(source, entry.node) in pinned


def test_a_pinned_list_is_edited_in_place():
    pinned = apply_config(GEMM, pins(GEMM)[2])
    assert "        triton.Config({'BLOCK_M': 256, 'BLOCK_N': 64, 'BLOCK_K': 64}, num_warps=8, num_stages=4),\n" \
        in pinned
    moved = apply_config(pinned, {"BLOCK_M": 128, "num_stages": 3})
    assert moved == pinned.replace("{'BLOCK_M': 256,", "{'BLOCK_M': 128,").replace("num_stages=4)", "num_stages=3)")
    assert apply_config(pinned, config_of(pinned)) == pinned  # nothing moves: nothing changes
    # a keyword the entry does not write is inserted; a dead dict key is not mistaken for it
    one = apply_config(DEAD_DICT, pins(DEAD_DICT)[0])
    warps = apply_config(one, {"num_warps": 8})
    assert "triton.Config({'BLOCK_SIZE_N': 1024, 'num_warps': 4, 'num_stages': 2}, num_warps=8)," in warps
    assert config_of(warps)["num_warps"] == 8
    stages = apply_config(apply_config(RMSNORM, pins(RMSNORM)[0]), {"num_stages": 2})
    assert "triton.Config({'BLOCK': 64}, num_warps=2, num_stages=2)," in stages


def test_comprehensions_and_module_names_are_read_and_pinned_locally():
    space = autotune_space(COMPREHENSION)
    assert space.reason == "" and space.key == ["M", "N"] and len(space.entries) == 12
    assert space.names == ["BLOCK_M", "BLOCK_N", "num_warps", "num_stages"]  # EVEN is a flag, not a knob
    assert space.configs[0] == {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}
    assert {c["BLOCK_M"] * c["BLOCK_N"] for c in space.configs} == {2048, 4096}  # the comprehension's filter
    assert space.options == {"prune_configs_by": "{'early_config_prune': prune, 'top_k': 4}",
                             "reset_to_zero": "['c_ptr']", "restore_value": "['a_ptr']", "warmup": "5", "rep": "20"}
    pinned = apply_config(COMPREHENSION, {"BLOCK_M": 128, "num_warps": 8})
    # the decorator's argument is replaced; the module-level CONFIGS (maybe shared) is left alone
    assert "@triton.autotune(configs=[triton.Config({'BLOCK_M': 128, 'BLOCK_N': 32, 'EVEN': True}, num_warps=8, " \
           "num_stages=2)], key=['M', 'N'], prune_configs_by={'early_config_prune': prune, 'top_k': 4}," in pinned
    assert pinned.count("CONFIGS = [triton.Config(") == 1
    assert autotune_space(pinned).options == space.options and autotune_space(pinned).pinned

    product = autotune_space(PRODUCT)
    assert product.reason == "" and [(c["BLOCK_M"], c["BLOCK_N"], c["num_warps"]) for c in product.configs] == \
        [(32, 64, 2), (32, 64, 4), (64, 128, 2), (64, 128, 4), (128, 128, 8)]
    assert product.names == ["BLOCK_M", "BLOCK_N", "num_warps", "num_stages"]  # the kernel loops
    last = apply_config(PRODUCT, {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 3})
    # the literal entry comes with its pre_hook and num_ctas, byte for byte
    assert "configs=[triton.Config({'BLOCK_M': 128, 'BLOCK_N': 128, 'EVEN': False}, num_warps=8, num_ctas=1, " \
           "pre_hook=hook)],\n    key=['M'],\n)" in last


@pytest.mark.parametrize("configs, why", [
    ("get_configs()", "calls a function"),
    ("CONFIGS", "not a name bound once"),
    ("[triton.Config({'BLOCK_M': b}) for b in sizes]", "not a name bound once"),
    ("[triton.Config({'BLOCK_M': b}, pre_hook=hooks[b]) for b in [32, 64]]", "depends on the comprehension"),
    ("[triton.Config({'BLOCK_M': 64}, num_warps=x.warps)]", "is not a literal"),
    ("[]", "non-empty list"),
])
def test_what_cannot_be_read_safely_is_refused_with_a_reason(configs, why):
    source = f"import triton\nCONFIGS = []\nCONFIGS = [1]\n\n@triton.autotune(configs={configs}, key=['M'])" + KERNEL
    assert config_of(source) == {} and pins(source) == [] and apply_config(source, {"BLOCK_M": 32}) == source
    assert why in why_untunable(source)
    request = PlanRequest(task=TASK, iteration=1, member_id="baseline", source=source, measurements="", tried=[],
                          lessons=[], n=2)
    reply = TUNER.plan(request)
    assert reply.plans == [] and why in reply.note
    with pytest.raises(ValueError, match="not read"):
        write_configs(source, [{"BLOCK_M": 32}])


def test_two_autotuned_kernels_are_left_to_the_autotuner():
    second = KERNEL.replace("matmul_kernel", "other_kernel")
    source = "import triton\n@triton.autotune(configs=[triton.Config({'BLOCK_M': 32})], key=['M'])" + KERNEL + \
        "\n@triton.autotune(configs=[triton.Config({'BLOCK_M': 32})], key=['M'])" + second
    assert config_of(source) == {} and "2 kernels are autotuned" in why_untunable(source)


def test_a_shorter_list_keeps_the_key_and_each_entrys_own_text():
    winner, *_ = pins(GEMM)[1:2]
    shortlist = [winner, {**winner, "BLOCK_K": 128}, {**winner, "num_warps": 4}]
    written = write_configs(GEMM, shortlist)
    space = autotune_space(written)
    assert space.configs == shortlist and space.key == ["M"] and unpinned(written)
    assert outside_the_list(written) == outside_the_list(GEMM)
    assert written.count("triton.Config(") == 3 and "    ],\n    key=['M'],\n)" in written
    # each written from its closest entry: the winner's line unchanged, the others one number apart
    assert "        triton.Config({'BLOCK_M': 64, 'BLOCK_N': 256, 'BLOCK_K': 64}, num_warps=8, num_stages=4),\n" \
        in written
    assert "        triton.Config({'BLOCK_M': 64, 'BLOCK_N': 256, 'BLOCK_K': 128}, num_warps=8, num_stages=4),\n" \
        in written


def request(source: str, n: int, tried: list[MeasuredKernel] = ()) -> PlanRequest:
    return PlanRequest(task=TASK, iteration=1, member_id="baseline", source=source, measurements="",
                       tried=list(tried), lessons=[], n=n)


def measured(ident: str, config: dict, speedup: float, status: str = "verified") -> MeasuredKernel:
    return MeasuredKernel(id=ident, title="", status=status, parent_id="baseline", speedup_vs_parent=speedup,
                          speedup=speedup, config=config)


def test_tuner_pins_the_list_in_order_then_steps_from_the_fastest_pin():
    listed = pins(GEMM)
    # The autotuned kernel itself was measured as the autotuner's choice: its own record (the
    # first configuration, by config_of) does not stop the first configuration being pinned.
    plans = TUNER.plan(request(GEMM, 3, [measured("baseline", config_of(GEMM), 1.0)])).plans
    assert [p.text.splitlines()[0] for p in plans] == [
        "### Plan 1: pin as listed",
        "### Plan 2: pin BLOCK_M 128 -> 64, BLOCK_N 128 -> 256",
        "### Plan 3: pin BLOCK_M 128 -> 256, BLOCK_N 128 -> 64"]
    assert all("pinning the autotuner's config" in p.text for p in plans)
    written = [TUNER.write(WriteRequest(task=TASK, iteration=1, candidate_id=f"k{i}", source=GEMM, plan=p)).source
               for i, p in enumerate(plans)]
    assert [autotune_space(s).configs for s in written] == [[c] for c in listed[:3]]
    # Next iteration, the beam still on the autotuned kernel: the last entry, then single steps
    # from the fastest pinned configuration (the second), never one measured.
    tried = [measured("baseline", config_of(GEMM), 1.0)] + \
        [measured(f"i1.m0.p{i}.k0", c, s) for i, (c, s) in enumerate(zip(listed, [0.9, 1.02, 0.7]))]
    plans = TUNER.plan(request(GEMM, 3, tried)).plans
    assert plans[0].moves == {k: (listed[0][k], v) for k, v in listed[3].items()}
    best = listed[1]
    assert [{k: b for k, (_, b) in p.moves.items()} for p in plans[1:]] == \
        [{**best, **m} for m in neighbours(best)[:2]]
    assert "one step from the fastest pinned config" in plans[1].text
    # once pinned, a kernel is tuned like any launch
    pinned = written[1]
    assert [p.moves for p in TUNER.plan(request(pinned, 1)).plans] == [{"BLOCK_M": (64, 128)}]


def test_tuner_writes_back_the_per_workload_winners_once_every_pin_is_measured():
    """Where no single pin wins every workload (the FlashInfer-Bench GEMM of BENCHMARKS.md: 0.11-0.90x
    over its 9 pins), the tuner proposes the list of the pins that won somewhere, with the same key."""
    listed, workloads = pins(GEMM), ["M1", "M128", "M4096"]

    def pinned(i: int, speeds: list[float]) -> MeasuredKernel:
        kernel = measured(f"i1.m0.p{i}.k0", listed[i], min(speeds))
        kernel["workload_speedups"] = dict(zip(workloads, speeds))
        return kernel

    original = measured("baseline", config_of(GEMM), 1.0)
    original["workload_speedups"] = dict.fromkeys(workloads, 1.0)
    # the first config wins M1, the third wins M128 and M4096; every other one loses everywhere
    speeds = {0: [1.0, 0.5, 0.4], 2: [0.6, 0.95, 0.9]}
    tried = [original] + [pinned(i, speeds.get(i, [0.3, 0.3, 0.3])) for i in range(len(listed))]
    plans = TUNER.plan(request(GEMM, 2, tried)).plans
    assert len(plans) == 2 and plans[0].configs == (listed[0], listed[2]) and not plans[0].moves
    assert plans[0].text.startswith(f"### Plan 1: autotune over the per-workload winners (2 of {len(listed)} configs)")
    assert plans[1].text.startswith("### Plan 2: ") and plans[1].moves  # a step from the fastest pin follows
    written = TUNER.write(WriteRequest(task=TASK, iteration=1, candidate_id="k", source=GEMM, plan=plans[0])).source
    assert pins(written) == [listed[0], listed[2]] and autotune_space(written).key == ["M"] and unpinned(written)
    assert outside_the_list(written) == outside_the_list(GEMM)

    # not before every pin is measured, not once it was tried, and not where one pin wins everywhere
    assert not TUNER.plan(request(GEMM, 1, tried[:-1])).plans[0].configs
    done = measured("i2.m0.p0.k0", listed[0], 1.1)
    done["title"] = plans[0].text.splitlines()[0].split(": ", 1)[1]
    assert not TUNER.plan(request(GEMM, 1, [*tried, done])).plans[0].configs
    one_wins = [original] + [pinned(i, [1.0, 1.0, 1.0] if i == 1 else [0.5, 0.5, 0.5]) for i in range(len(listed))]
    assert not TUNER.plan(request(GEMM, 1, one_wins)).plans[0].configs


def test_lessons_and_recipes_from_a_pin():
    child = apply_config(GEMM, pins(GEMM)[2])
    recipe = recipe_of(GEMM, child, 1.1)
    assert recipe is not None and recipe.start == pins(GEMM)[0] and recipe.result == pins(GEMM)[2]
    assert describe_moves({"BLOCK_M": (128, 128)}) == "no knob moved (the configuration pinned as it is)"


def test_fixer_shrinks_a_pinned_config_that_does_not_fit():
    def fix(source: str, moves: dict, error: str) -> object:
        return TUNER.fix(FixRequest(task=TASK, iteration=1, candidate_id="k.f1", plan=PlanDraft("p", moves),
                                    parent_source=GEMM, source=source, status="compile_error", error=error,
                                    findings=""))

    first = pins(GEMM)[0]
    pinned = apply_config(GEMM, first)
    pin_moves = {k: (v, v) for k, v in first.items()}  # pinning the first config moves nothing
    fixed = fix(pinned, pin_moves, "triton.runtime.errors.OutOfResources: out of resource: shared memory, "
                                   "Required: 262144, Hardware limit: 232448")
    assert autotune_space(fixed.source).configs == [{**first, "BLOCK_M": 64}]  # the largest tile halved
    assert fix(pinned, pin_moves, "some other compile error").source is None  # nothing to revert
    # a single step that failed for resources: the tile it grew goes back only as far as a new config
    grown = apply_config(pinned, {"BLOCK_K": 128})
    fixed = fix(grown, {"BLOCK_K": (64, 128)}, "out of resource: shared memory")
    assert autotune_space(fixed.source).configs == [{**first, "BLOCK_K": 128, "BLOCK_M": 64}]


def test_autotune_node_measures_the_pins_then_the_neighbours_of_the_fastest(monkeypatch):
    measured_sources: list[str] = []
    speed = {64: 0.95, 128: 1.02, 256: 0.8}  # BLOCK -> speedup: the second entry is the fastest

    def fake_measure(task, source, ctx, *, baseline, parent, run_dir, candidate_id=None):
        measured_sources.append(source)
        s = speed.get(config_of(source)["BLOCK"], 0.9)
        return {"status": "verified", "speedup": s, "speedup_vs_parent": s, "beats_parent": False,
                "loses_to_parent": False}

    monkeypatch.setattr(autotune_node, "measure", fake_measure)
    rewrite = {"id": "i1.m0.p0.k0", "source": RMSNORM, "speedup": 1.0, "status": "verified", "plan_id": "i1.m0.p0"}
    state = {"task_dir": str(TASKS / "rmsnorm"), "current": rewrite, "iteration": 1, "baseline": None,
             "parent": {"id": "baseline", "source": (TASKS / "rmsnorm" / "baseline.py").read_text()}}
    out = autotune_node.autotune(state, SimpleNamespace(context=RunContext(autotune=5, device="cpu")))
    variants = [out["candidates"][f"i1.m0.p0.k0.a{j}"] for j in range(1, 6)]
    configs = [config_of(v["source"]) for v in variants]
    assert configs[:3] == pins(RMSNORM) and all(autotune_space(v["source"]).pinned for v in variants)
    fastest = pins(RMSNORM)[1]
    assert configs[3:] == [{**fastest, **m} for m in neighbours(fastest)[:2]]
    assert len({tuple(c.items()) for c in configs}) == 5 and all(v["parent_id"] == rewrite["id"] for v in variants)
    assert variants[0]["plan_title"] == "autotune: no knob moved (the configuration pinned as it is)"
    assert out["current"]["autotune"]["tried"] == 5
    # with room to spare, the walk ends once the fastest pin's neighbours are measured
    out = autotune_node.autotune(state, SimpleNamespace(context=RunContext(autotune=50, device="cpu")))
    assert out["current"]["autotune"]["tried"] == 3 + len(neighbours(fastest))


def test_per_workload_winners_come_from_pins_the_tuner_wrote_whose_launch_passes_a_constexpr_outside_the_list():
    """The FlashInfer-Bench GEMM (gemini-2.5-pro, gemm_n128_k2048) passes BLOCK_SIZE_N=128 at its
    launch, outside the autotune list: a pin's measured config carries that knob too. On the H100
    the run pinned all nine configurations and then never proposed the winners' list, because the
    pins' configs (five knobs) were compared with the list's (four)."""
    source = (SOLUTIONS / "gemini-2.5-pro_gemm_n128_k2048_kmw3sz.py").read_text()
    listed = pins(source)
    assert "BLOCK_SIZE_N" in config_of(source) and "BLOCK_SIZE_N" not in listed[0]
    tried = [measured("baseline", config_of(source), 1.0)]
    tried[0]["workload_speedups"] = {"M2": 1.0, "M12853": 1.0}
    for iteration in range(1, 4):  # three pins an iteration, as -N 3 ran them
        for p, plan in enumerate(TUNER.plan(request(source, 3, tried)).plans):
            written = TUNER.write(WriteRequest(task=TASK, iteration=iteration, candidate_id="k", source=source,
                                               plan=plan)).source
            config = config_of(written)
            i = listed.index({n: config[n] for n in listed[0]})
            record = measured(f"i{iteration}.m0.p{p}.k0", config, 0.5)
            record["workload_speedups"] = {"M2": 0.9 if i == 0 else 0.5, "M12853": 0.95 if i == 3 else 0.5}
            tried.append(record)
    assert len(tried) == 1 + len(listed)
    plans = TUNER.plan(request(source, 3, tried)).plans
    assert plans[0].configs == (listed[0], listed[3])
    # a step that moved the outside knob is no pin: with it standing for config 4, no list is proposed
    moved = measured("i4.m0.p0.k0", {**tried[4]["config"], "BLOCK_SIZE_N": 64}, 2.0)
    moved["workload_speedups"] = {"M2": 2.0, "M12853": 2.0}
    assert TUNER.plan(request(source, 3, [*tried, moved])).plans[0].configs == (listed[0], listed[3])
