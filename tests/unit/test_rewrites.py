"""Source rewrites on real Inductor output (torch 2.11 on an H100): the chunk-wise online softmax
finds every looped online-softmax combine, leaves persistent reductions alone, computes what the
reference computes (run here on the Triton interpreter at small sizes; Inductor's own online-softmax
helpers do not run there: their `exp` helper fails in the interpreter), and reaches runs through
the tuner's plan/write/fix."""

import ast
import json
import os
import subprocess
import sys

from accelopt.policies.interface import FixRequest, MeasuredKernel, PlanRequest, WriteRequest
from accelopt.policies.rewrites import CHUNK_HELPER, CHUNKWISE_ONLINE_SOFTMAX, chunkwise_online_softmax
from accelopt.policies.tuner import TunerPolicy
from accelopt.tools.inductor_seed import _HEADER as HEADER  # a seed's imports
from accelopt.tools.inductor_seed import seed_source
from accelopt.tools.task import load_task
from tests.conftest import FIXTURES, TASKS

SOFTMAX_SEED = seed_source(json.loads((FIXTURES / "inductor" / "softmax.default.json").read_text())).source

# What Inductor (torch 2.11, default mode) emitted for cross_entropy's reference on the H100 at
# T1024 V128256 (evals/tasks/cross_entropy), captured into its seed; the kernel as written there.
CROSS_ENTROPY_KERNEL = '''
@triton.jit
def triton_red_fused__log_softmax__to_copy_nll_loss_forward_prepare_softmax_online_sub_0_w0(in_out_ptr0, in_ptr0, in_ptr1, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 1024
    r0_numel = 128256
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    x0 = xindex
    _tmp3_max = tl.full([XBLOCK, R0_BLOCK], float('-inf'), tl.float32)
    _tmp3_sum = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + 128256*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0).to(tl.float32)
        tmp1 = tmp0.to(tl.float32)
        tmp2 = tl.broadcast_to(tmp1, [XBLOCK, R0_BLOCK])

        _tmp3_max_next, _tmp3_sum_next = triton_helpers.online_softmax_combine(
            _tmp3_max, _tmp3_sum, tmp2, False
        )

        _tmp3_max = tl.where(r0_mask & xmask, _tmp3_max_next, _tmp3_max)
        _tmp3_sum = tl.where(r0_mask & xmask, _tmp3_sum_next, _tmp3_sum)

    tmp3, tmp4 = triton_helpers.online_softmax_reduce(
        _tmp3_max, _tmp3_sum, 1, False)
    tmp3 = tmp3[:, None]
    tmp4 = tmp4[:, None]
    tmp5 = tl.load(in_ptr1 + (x0), xmask, eviction_policy='evict_last')
    tmp6 = tl.full([1, 1], -100, tl.int64)
    tmp7 = tmp5 != tmp6
    tmp8 = tl.full([1, 1], 0, tl.int64)
    tmp9 = tl.where(tmp7, tmp5, tmp8)
    tmp10 = tl.full([1, 1], 128256, tl.int32)
    tmp11 = tmp9 + tmp10
    tmp12 = tmp9 < 0
    tmp13 = tl.where(tmp12, tmp11, tmp9)
    tl.device_assert(((0 <= tmp13) & (tmp13 < 128256)) | ~(xmask), "index out of bounds: 0 <= tmp13 < 128256")
    tmp15 = tl.load(in_ptr0 + (tmp13 + 128256*x0), xmask, eviction_policy='evict_last').to(tl.float32)
    tmp16 = tmp15.to(tl.float32)
    tmp17 = tmp16 - tmp3
    tmp18 = tl_math.log(tmp4)
    tmp19 = tmp17 - tmp18
    tmp20 = -tmp19
    tmp21 = tl.full([1, 1], 0.0, tl.float32)
    tmp22 = tl.where(tmp7, tmp20, tmp21)
    tl.debug_barrier()
    tl.store(in_out_ptr0 + (x0), tmp22, xmask)
'''

def kernel_text(module: str, name: str) -> str:
    """One function of a module, as its source text."""
    tree = ast.parse(module)
    node = next(f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == name)
    return "@triton.jit\n" + ast.get_source_segment(module, node)


# the checks' loader: a module from a source text, written under the test's TMP folder
MODULE = '''
def module(name, text):
    path = TMP + "/" + name + ".py"
    open(path, "w").write(text)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod
'''


def run_on_interpreter(tmp_path, script: str) -> None:
    path = tmp_path / "check.py"
    path.write_text(script)
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TRITON_INTERPRET": "1"})
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout[-2000:] + done.stderr[-3000:]


def test_every_looped_combine_is_made_chunkwise_and_persistent_reductions_are_left_alone():
    combines = SOFTMAX_SEED.count("triton_helpers.online_softmax_combine(")
    assert combines == 2  # M4096_N4096 and M1024_N32000 loop over the row; M16384_N1024 holds it whole
    out = chunkwise_online_softmax(SOFTMAX_SEED)
    assert out is not None and "online_softmax_combine(" not in out
    assert out.count(f"{CHUNK_HELPER}(") == combines + 1  # each loop calls it; defined once
    assert out.count("tl.full([XBLOCK, 1], float('-inf'), tl.float32)") == combines  # the row's maximum
    assert "online_softmax_reduce(" not in out and out.count("tl.max(_tmp2_max, 1), tl.sum(_tmp2_sum, 1)") == combines
    ast.parse(out)
    assert chunkwise_online_softmax(out) is None  # nothing left to rewrite
    assert chunkwise_online_softmax((TASKS / "softmax" / "baseline.py").read_text()) is None


def test_the_rewritten_softmax_computes_the_softmax(tmp_path):
    """Inductor's M1024_N32000 kernel rewritten, sized down (5 rows of 300) so that a row takes
    five chunks with a masked tail, run on the interpreter against torch.softmax."""
    name = "triton_red_fused__softmax_exp_prepare_softmax_online_sub_0_w1"
    rewritten = chunkwise_online_softmax(SOFTMAX_SEED)
    text = kernel_text(rewritten, name).replace("xnumel = 1024", "xnumel = 5").replace("r0_numel = 32000", "r0_numel = 300")
    script = HEADER + "\n" + kernel_text(rewritten, CHUNK_HELPER) + "\n\n" + text.replace("32000*x0", "300*x0") + f'''

torch.manual_seed(0)
x = torch.randn(5, 300) * torch.tensor([[1.0], [30.0], [0.01], [80.0], [5.0]])
for xblock in (1, 2):  # two rows a program: the row mask and the [rows, 1] maximum
    out = torch.full_like(x, float("nan"))
    {name}[(triton.cdiv(5, xblock),)](x, out, 5, 300, XBLOCK=xblock, R0_BLOCK=64)
    assert torch.allclose(out, torch.softmax(x, 1), rtol=1e-5, atol=1e-7), (xblock, out)
print("ok")
'''
    run_on_interpreter(tmp_path, script)


def test_the_rewritten_cross_entropy_computes_the_loss(tmp_path):
    name = "triton_red_fused__log_softmax__to_copy_nll_loss_forward_prepare_softmax_online_sub_0_w0"
    module = HEADER + CROSS_ENTROPY_KERNEL
    rewritten = chunkwise_online_softmax(module)
    assert rewritten is not None and rewritten.count(f"{CHUNK_HELPER}(") == 2
    text = kernel_text(rewritten, name)
    for big, little in {"xnumel = 1024": "xnumel = 6", "r0_numel = 128256": "r0_numel = 700", "128256": "700"}.items():
        text = text.replace(big, little)
    script = HEADER + "\n" + kernel_text(rewritten, CHUNK_HELPER) + "\n\n" + text + f'''

torch.manual_seed(0)
logits = 3.0 * torch.randn(6, 700)
logits[2] *= 40.0  # a row whose maximum moves by a lot between chunks
labels = torch.tensor([0, 699, 5, 300, 128, 64])
expected = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
loss = torch.full((6,), float("nan"))
{name}[(6,)](loss, logits, labels, 6, 700, XBLOCK=1, R0_BLOCK=128)  # six chunks, the last masked
assert torch.allclose(loss, expected, rtol=1e-5, atol=1e-5), (loss, expected)
print("ok")
'''
    run_on_interpreter(tmp_path, script)


def test_the_tuner_plans_the_rewrite_once_per_member_and_writes_it():
    tuner, task = TunerPolicy(), load_task(TASKS / "softmax")

    def request(tried: list[MeasuredKernel]) -> PlanRequest:
        return PlanRequest(task=task, iteration=1, member_id="seed", source=SOFTMAX_SEED, measurements="",
                           tried=tried, lessons=[], n=3)

    seed = MeasuredKernel(id="seed", title="Inductor seed", status="verified", parent_id=None,
                          speedup_vs_parent=None, speedup=1.0, config={})
    plans = tuner.plan(request([seed])).plans
    assert plans[0].rewrite == CHUNKWISE_ONLINE_SOFTMAX.name
    assert plans[0].text.startswith(f"### Plan 1: {CHUNKWISE_ONLINE_SOFTMAX.title}\n(tuner rewrite)")
    assert [p.text.split(":")[0] for p in plans] == [f"### Plan {i}" for i in range(1, len(plans) + 1)]
    # the seed's loops load one chunk at a time: the prefetch waits for the loop rewrites, and follows this one
    assert len(plans) == 3 and plans[1].rewrite == f"{CHUNKWISE_ONLINE_SOFTMAX.name}+prefetch_loads"
    assert plans[2].moves and not plans[2].rewrite  # launch moves fill the other slots
    kernel = tuner.write(WriteRequest(task=task, iteration=1, candidate_id="i1.m0.p0.k0", source=SOFTMAX_SEED,
                                      plan=plans[0]))
    assert kernel.source == chunkwise_online_softmax(SOFTMAX_SEED)
    fixed = tuner.fix(FixRequest(task=task, iteration=1, candidate_id="i1.m0.p0.k0.f1", plan=plans[0],
                                 parent_source=SOFTMAX_SEED, source=kernel.source, status="compile_error",
                                 error="boom", findings=""))
    assert fixed.source is None and "rewrite" in fixed.note

    tried = MeasuredKernel(id="i1.m0.p0.k0", title=CHUNKWISE_ONLINE_SOFTMAX.title, status="verified",
                           parent_id="seed", speedup_vs_parent=0.9, speedup=0.9, config={})
    again = tuner.plan(request([seed, tried])).plans
    assert again and CHUNKWISE_ONLINE_SOFTMAX.name not in [p.rewrite for p in again]  # tried from this member
