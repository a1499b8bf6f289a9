"""The load-prefetch rewrite (policies/prefetch_loads.py): a loop's loads are issued one iteration
ahead. The bundled looped kernels, the one-pass cross_entropy and an Inductor seed compute
bit for bit what they did on the interpreter (masked tails, a loop that runs once); the load one
step past the end is guarded; loops whose next load is not provably the same load are left alone."""

import json
import textwrap

import pytest

from accelopt.policies.interface import MeasuredKernel, PlanRequest
from accelopt.policies.one_pass_softmax import one_pass_softmax
from accelopt.policies.prefetch_loads import prefetch_loads
from accelopt.policies.replies import plan_title
from accelopt.policies.rewrites import ONE_PASS_SOFTMAX, PREFETCH_LOADS, applicable
from accelopt.policies.tuner import TunerPolicy
from accelopt.tools.inductor_seed import seed_source
from accelopt.tools.task import load_task
from tests.conftest import FIXTURES, TASKS
from tests.unit.test_rewrites import MODULE, run_on_interpreter

HEADER = "import torch\nimport triton\nimport triton.language as tl\n"


LOOP = HEADER + '''

@triton.jit
def k(x_ptr, i_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
{body}
    tl.store(out_ptr + tl.arange(0, BLOCK), acc)
'''


def loop(body: str) -> str:
    return LOOP.format(body=textwrap.indent(textwrap.dedent(body).strip(), " " * 8))


def _rewritten_tasks() -> dict[str, tuple[str, str]]:
    """task -> (kernel as written, rewritten) for the bundled kernels the rewrite takes."""
    out = {}
    for name in ("rmsnorm", "layernorm", "gqa_paged_decode"):
        source = (TASKS / name / "baseline.py").read_text()
        out[name] = (source, prefetch_loads(source))
    ce = (TASKS / "cross_entropy" / "baseline.py").read_text()
    out["cross_entropy"] = (ce, prefetch_loads(ce))
    one_pass = one_pass_softmax(ce)
    out["cross_entropy_one_pass"] = (one_pass, prefetch_loads(one_pass))
    return out


def test_the_bundled_looped_kernels_are_rewritten_and_compute_bit_for_bit_the_same(tmp_path):
    pairs = _rewritten_tasks()
    assert all(after is not None for _, after in pairs.values()), [n for n, (_, a) in pairs.items() if a is None]
    one_pass = pairs["cross_entropy_one_pass"][1]
    assert one_pass.count("_pf0_0 = tl.load(") == 2 and "mask=tl.where(start + BLOCK < vocab, " in one_pass  # past the end
    assert "mask=tl.where(0 < vocab, " in one_pass and prefetch_loads(one_pass) is None  # the first; and only once
    tasks = {name: load_task(TASKS / name.replace("_one_pass", "")) for name in pairs}
    script = '''
import importlib.util, sys, torch
''' + MODULE + '''
for name, (before, after, reference, dtype, workloads) in PAIRS.items():
    ref = module(name + "_reference", reference)
    for params in workloads:
        inputs = ref.make_inputs(params, 0, "cpu", dtype)
        want = module(name + "_before", before).run(*inputs)
        got = module(name + "_after", after).run(*inputs)
        want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
        for a, b in zip(want, got):
            assert torch.equal(a, b), (name, params, (a - b).abs().max())
print("ok")
'''
    pairs_literal = {name: (before, after, tasks[name].reference_source, tasks[name].spec.dtype_for("cpu"), [w.params for w in tasks[name].spec.workloads_for("cpu")])
                     for name, (before, after) in pairs.items()}
    run_on_interpreter(tmp_path, f"TMP = {str(tmp_path)!r}\nPAIRS = {pairs_literal!r}\n" + script)


def test_an_inductor_seed_is_rewritten_and_computes_the_same(tmp_path):
    """Inductor's rmsnorm (torch 2.11, a tl.range loop with eviction policies and positional masks),
    sized down to 3 rows of 300 with R0_BLOCK 128: three chunks, a masked tail."""
    seed = seed_source(json.loads((FIXTURES / "inductor" / "rmsnorm.default.json").read_text())).source
    name = "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0_w0"
    after = prefetch_loads(seed)
    assert after is not None and "tl.range(0, r0_numel, R0_BLOCK)" in after
    script = HEADER + '''
import importlib.util
''' + MODULE + '''
def sized(text):
    return text.replace("xnumel = 4096", "xnumel = 3").replace("r0_numel = 4096", "r0_numel = 300") \\
        .replace("4096*x0", "300*x0").replace("4096 * x0", "300 * x0").replace("4096.0", "300.0")

torch.manual_seed(0)
x, w = torch.randn(3, 300), torch.randn(300)
outs = []
for label, text in (("before", BEFORE), ("after", AFTER)):
    kernel = getattr(module("seed_" + label, sized(text)), NAME)
    out = torch.empty(3, 300)
    kernel[(3,)](x, w, out, 3, 300, XBLOCK=1, R0_BLOCK=128)
    outs.append(out)
assert torch.equal(outs[0], outs[1]), (outs[0] - outs[1]).abs().max()
assert torch.allclose(outs[0], x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-6) * w, atol=1e-5)
print("ok")
'''
    run_on_interpreter(tmp_path, f"TMP = {str(tmp_path)!r}\nNAME = {name!r}\nBEFORE = {seed!r}\nAFTER = {after!r}\n"
                                 + script)


@pytest.mark.parametrize("body, why", [
    ("cols = start + tl.arange(0, BLOCK)\nx = tl.load(x_ptr + cols, mask=cols < n)\n"
     "tl.store(x_ptr + cols, x + 1.0, mask=cols < n)", "a store: a later chunk's load could read it"),
    ("cols = start + tl.arange(0, BLOCK)\nacc += tl.load(x_ptr + cols, mask=cols < n, volatile=True)",
     "a volatile load"),
    ("cols = start + tl.arange(0, BLOCK)\nacc += tl.sum(tl.dot(tl.load(x_ptr + cols[:, None] + cols[None, :]), "
     "tl.load(x_ptr + cols[:, None] + cols[None, :])), 1)", "a dot: Triton pipelines its loads itself"),
    ("cols = start + tl.arange(0, BLOCK)\nif start > 0:\n    acc += tl.load(x_ptr + cols, mask=cols < n)",
     "a load under an if"),
    ("acc += tl.load(x_ptr + off + tl.arange(0, BLOCK))\noff = off + BLOCK", "an offset carried between iterations"),
    ("idx = tl.load(i_ptr + tl.arange(0, BLOCK) * 0 + start // BLOCK)\nacc += tl.load(x_ptr + idx) * 0.0",
     "only the index load moves on its own: checked below"),
    ("cols = start + tl.arange(0, BLOCK)\nacc += tl.load(x_ptr + cols, mask=cols < n)\nbreak", "a break"),
])
def test_what_is_not_provably_the_next_load_is_left_alone(body, why):
    source = loop(body).replace("acc = tl.zeros", "off = 0\n    acc = tl.zeros")
    out = prefetch_loads(source)
    if why.startswith("only the index load"):
        assert out is not None and out.count("_now = ") == 1, why  # the index is prefetched,
        assert "acc += tl.load(x_ptr + idx)" in out, why              # the load through it is not
        return
    assert out is None, why


def test_loops_that_do_not_count_up_by_a_known_step_are_left_alone():
    body = "cols = start + tl.arange(0, BLOCK)\nacc += tl.load(x_ptr + cols, mask=cols < n)"
    assert prefetch_loads(loop(body)) is not None
    for stepped in ("range(n, 0, -BLOCK)", "range(0, n, step)", "range(0, n, 2 * BLOCK)"):
        assert prefetch_loads(loop(body).replace("range(0, n, BLOCK)", stepped)) is None, stepped
    assert prefetch_loads(loop(body).replace("range(0, n, BLOCK)", "range(0, n, 4)")) is not None
    # a loop-invariant load does not move with the loop: nothing to fetch ahead
    assert prefetch_loads(loop("acc += tl.load(x_ptr + tl.arange(0, BLOCK))")) is None


def test_the_tuner_plans_it_after_the_one_pass_rewrite_on_cross_entropy():
    tuner, task = TunerPolicy(), load_task(TASKS / "cross_entropy")
    source = task.baseline_source
    assert [r.name for r in applicable(source)] == [ONE_PASS_SOFTMAX.name, PREFETCH_LOADS.name]
    baseline = MeasuredKernel(id="baseline", title="baseline", status="verified", parent_id=None,
                              speedup_vs_parent=None, speedup=1.0, config={})
    plans = tuner.plan(PlanRequest(task=task, iteration=1, member_id="baseline", source=source, measurements="",
                                   tried=[baseline], lessons=[], n=3)).plans
    # the prefetch waits for the loop rewrites (its double buffer is a carried value they refuse),
    # and is tried right after each of them, as one kernel
    assert [p.rewrite for p in plans[:2]] == [ONE_PASS_SOFTMAX.name, f"{ONE_PASS_SOFTMAX.name}+{PREFETCH_LOADS.name}"]
    one_pass = MeasuredKernel(id="i1.m0.p0.k0", title=plan_title(plans[0].text), status="verified",
                              parent_id="baseline", speedup_vs_parent=0.9, speedup=0.9, config={})
    after = tuner.plan(PlanRequest(task=task, iteration=2, member_id="baseline", source=source, measurements="",
                                   tried=[baseline, one_pass], lessons=[], n=3)).plans
    assert [p.rewrite for p in after[:2]] == [PREFETCH_LOADS.name, ""]
