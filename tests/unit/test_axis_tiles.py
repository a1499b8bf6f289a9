"""The axis-tile rewrite (policies/axis_tiles.py): a per-(token, head) kernel on a 2-D grid takes
AXIS1_GROUP heads a program as a tile. The bundled rope computes bit for bit what it did on the
interpreter (head counts that are not a multiple of the block, a masked kernel); kernels whose
axes would change meaning are left alone; the tuner plans it and then moves the block."""

import textwrap

import pytest

from accelopt.policies.axis_tiles import FIRST_VALUE, KNOB, axis_tiles
from accelopt.policies.interface import MeasuredKernel, PlanRequest, WriteRequest
from accelopt.policies.replies import plan_title
from accelopt.policies.rewrites import AXIS_TILES, FUSED_LAUNCHES, applicable
from accelopt.policies.tuner import TunerPolicy
from accelopt.tools.task import load_task
from accelopt.tools.tunables import config_of
from tests.conftest import TASKS
from tests.unit.test_rewrites import MODULE, run_on_interpreter

HEADER = "import torch\nimport triton\nimport triton.language as tl\n"

# A per-head scale with a mask on the columns, an in-place update and a launch through a named grid.
MASKED = HEADER + '''

@triton.jit
def scale_kernel(x_ptr, s_ptr, n_heads, dim, BLOCK: tl.constexpr):
    """x[t, h, :dim] *= s[h] in place."""
    t = tl.program_id(0)
    h = tl.program_id(1)
    cols = tl.arange(0, BLOCK)
    keep = cols < dim
    scale = tl.load(s_ptr + h)
    ptr = x_ptr + (t * n_heads + h) * dim + cols
    tl.store(ptr, tl.load(ptr, mask=keep, other=0.0) * scale, mask=keep)


def run(x, s):
    grid = (x.shape[0], x.shape[1])
    scale_kernel[grid](x, s, x.shape[1], x.shape[2], BLOCK=triton.next_power_of_2(x.shape[2]))
    return x
'''


def kernel(body: str) -> str:
    return HEADER + '''

@triton.jit
def k(x_ptr, y_ptr, n, D: tl.constexpr):
    t = tl.program_id(0)
    h = tl.program_id(1)
    offs = tl.arange(0, D)
{body}


def run(x):
    y = torch.empty_like(x)
    k[(x.shape[0], x.shape[1])](x, y, x.shape[1], D=x.shape[2])
    return y
'''.format(body=textwrap.indent(textwrap.dedent(body).strip(), " " * 4))


@pytest.mark.parametrize("block", [1, 4, 8, 16])
def test_rope_and_a_masked_kernel_compute_bit_for_bit_what_they_did(tmp_path, block):
    rope = (TASKS / "rope" / "baseline.py").read_text()
    rewritten = {name: axis_tiles(text) for name, text in (("rope", rope), ("masked", MASKED))}
    assert all(rewritten.values())
    out = rewritten["rope"]
    assert f"[(tokens, triton.cdiv(heads, {KNOB}))]" in out and "_axis1_total=heads" in out
    assert out.count("mask=_axis1_mask") == 4 and "cos = tl.load(cache_ptr + pos * 2 * HALF + offs)" in out
    assert config_of(out)[KNOB] == FIRST_VALUE and axis_tiles(out) is None
    pairs = {name: (before, rewritten[name].replace(f"{KNOB} = {FIRST_VALUE}", f"{KNOB} = {block}"))
             for name, before in (("rope", rope), ("masked", MASKED))}
    run_on_interpreter(tmp_path, f'''
import importlib.util, sys, torch
sys.path.insert(0, {str(TASKS / "rope")!r})
import reference

TMP = {str(tmp_path)!r}
{MODULE}
PAIRS = {pairs!r}
for params in ({{"T": 3, "HQ": 5, "HK": 2, "D": 16, "P": 32}}, {{"T": 2, "HQ": 17, "HK": 1, "D": 8, "P": 16}}):
    inputs = reference.make_inputs(params, 0, "cpu", "float32")
    before, after = (module("rope_" + label, text).run(*inputs) for label, text in zip(("before", "after"), PAIRS["rope"]))
    assert all(torch.equal(a, b) for a, b in zip(before, after)), params
torch.manual_seed(0)
x, s = torch.randn(3, 5, 12), torch.randn(5)
want = module("masked_before", PAIRS["masked"][0]).run(x.clone(), s)
got = module("masked_after", PAIRS["masked"][1]).run(x.clone(), s)
assert torch.equal(want, got) and torch.allclose(want, x * s[None, :, None])
print("ok")
''')


@pytest.mark.parametrize("body, why", [
    ("tl.store(y_ptr + t * D + offs, tl.sum(tl.load(x_ptr + (t * n + h) * D + offs), 0))", "a reduction"),
    ("x = tl.load(x_ptr + (t * n + h) * D + offs)\ntl.store(y_ptr + (t * n + h) * D + offs[:, None], x)",
     "indexing"),
    ("x = tl.load(x_ptr + (t * n + h) * D + offs)\nif t > 0:\n    tl.store(y_ptr + (t * n + h) * D + offs, x)",
     "a branch"),
    ("for i in range(2):\n    tl.store(y_ptr + (t * n + h) * D + offs, tl.load(x_ptr + (t * n + h) * D + offs))",
     "a loop"),
    ("tl.store(y_ptr + t * D + offs, tl.load(x_ptr + (t * n + h) * D + offs))",
     "a value that moves with the head stored where it does not"),
    ("tl.atomic_add(y_ptr + t * D + offs, tl.load(x_ptr + (t * n + h) * D + offs))", "an atomic"),
    ("x = tl.load(x_ptr + (t * n + h) * D + offs)\ntl.store(y_ptr + (t * n + h) * D + offs, helper(x))",
     "a call not known to be element-wise"),
])
def test_what_would_change_meaning_is_left_alone(body, why):
    plain = "tl.store(y_ptr + (t * n + h) * D + offs, tl.load(x_ptr + (t * n + h) * D + offs) * 2.0)"
    assert axis_tiles(kernel(plain)) is not None
    assert axis_tiles(kernel(body)) is None, why


def test_kernels_on_other_grids_are_left_alone():
    plain = kernel("tl.store(y_ptr + (t * n + h) * D + offs, tl.load(x_ptr + (t * n + h) * D + offs))")
    assert axis_tiles(plain.replace("k[(x.shape[0], x.shape[1])]", "k[(x.shape[0],)]")) is None  # 1-D grid
    assert axis_tiles(plain.replace("h = tl.program_id(1)", "h = tl.program_id(0)")) is None      # no second axis
    assert axis_tiles(plain.replace("@triton.jit", "@triton.autotune(configs=[], key=[])\n@triton.jit")) is None
    for name in ("softmax", "rmsnorm", "merge_attn_states", "gqa_paged_decode", "gemm_bf16"):
        assert axis_tiles((TASKS / name / "baseline.py").read_text()) is None, name


def test_the_tuner_plans_it_on_rope_writes_it_and_then_moves_the_block():
    tuner, task = TunerPolicy(), load_task(TASKS / "rope")
    source = task.baseline_source
    assert [r.name for r in applicable(source)] == [AXIS_TILES.name, FUSED_LAUNCHES.name]
    baseline = MeasuredKernel(id="baseline", title="baseline", status="verified", parent_id=None,
                              speedup_vs_parent=None, speedup=1.0, config=config_of(source))
    plans = tuner.plan(PlanRequest(task=task, iteration=1, member_id="baseline", source=source, measurements="",
                                   tried=[baseline], lessons=[], n=2)).plans
    assert plans[0].rewrite == AXIS_TILES.name and FUSED_LAUNCHES.name not in {p.rewrite for p in plans}
    # once measured from the baseline (the run records a plan's title cut to a few words), not planned again
    recorded = MeasuredKernel(id="i1.m0.p0.k0", title=plan_title(plans[0].text), status="verified",
                              parent_id="baseline", speedup_vs_parent=1.0, speedup=1.0, config={})
    assert len(AXIS_TILES.title) > len(recorded["title"])
    again = tuner.plan(PlanRequest(task=task, iteration=2, member_id="baseline", source=source, measurements="",
                                   tried=[baseline, recorded], lessons=[], n=2)).plans
    assert AXIS_TILES.name not in {p.rewrite for p in again}
    tiled = tuner.write(WriteRequest(task=task, iteration=1, candidate_id="i1.m0.p0.k0", source=source,
                                     plan=plans[0])).source
    assert tiled == axis_tiles(source)
    child = MeasuredKernel(id="i1.m0.p0.k0", title=AXIS_TILES.title, status="verified", parent_id="baseline",
                           speedup_vs_parent=3.0, speedup=3.0, config=config_of(tiled))
    later = tuner.plan(PlanRequest(task=task, iteration=2, member_id="i1.m0.p0.k0", source=tiled, measurements="",
                                   tried=[baseline, child], lessons=[], n=8)).plans
    assert {p.rewrite for p in later} == {FUSED_LAUNCHES.name, ""} and any(KNOB in (p.moves or {}) for p in later)
