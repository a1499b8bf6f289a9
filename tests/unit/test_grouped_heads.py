"""The grouped-heads rewrite (policies/grouped_heads.py): a per-query-head GQA decode kernel gives
each program a KV head's query heads as one tile, q·k and p·v as tl.dot. The bundled baseline and a
kernel written the way the gpt-5 FlashInfer-Bench solution is (a while loop, an early return, a
log-sum-exp output, the group size bound to a name) compute what the reference computes on the
interpreter, for groups of 1, 2, 3 and 20 heads; kernels whose meaning would change are left alone;
the launch picks the dot's precision by its tensors' dtypes; the tuner plans it first on the task."""

import ast
import textwrap

import pytest

from accelopt.policies.grouped_heads import PRECISION, TILE, grouped_heads
from accelopt.policies.interface import MeasuredKernel, PlanRequest
from accelopt.policies.rewrites import GROUPED_HEADS, chain_between
from accelopt.policies.tuner import TunerPolicy
from accelopt.tools.task import load_task
from accelopt.tools.tunables import apply_config, config_of
from tests.conftest import ROOT, TASKS
from tests.unit.test_rewrites import MODULE, run_on_interpreter

HEADER = "import torch\nimport triton\nimport triton.language as tl\n"

# After the gpt-5 FlashInfer-Bench gqa_paged_decode solution (evals/realworld/solutions/), on a 2-D
# grid and pages of one token: indptr/indices, an empty sequence's early return, lse beside the output.
LIKE_GPT5 = HEADER + '''

@triton.jit
def decode(q_ptr, k_ptr, v_ptr, indptr_ptr, indices_ptr, sm_scale, out_ptr, lse_ptr, num_qo_heads,
           BLOCK_M: tl.constexpr, D_HEAD: tl.constexpr, NUM_QO: tl.constexpr, NUM_KV: tl.constexpr):
    """out[b, h] = softmax(q k^T * scale) v over the sequence's pages; lse in base 2."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    page_start = tl.load(indptr_ptr + b).to(tl.int32)
    seq_len = tl.load(indptr_ptr + (b + 1)).to(tl.int32) - page_start
    d_offsets = tl.arange(0, D_HEAD)
    if seq_len <= 0:
        tl.store(out_ptr + (b * num_qo_heads + h) * D_HEAD + d_offsets, tl.zeros((D_HEAD,), dtype=tl.float32))
        tl.store(lse_ptr + b * num_qo_heads + h, tl.full((), -float("inf"), dtype=tl.float32))
        return
    q_vec = tl.load(q_ptr + (b * num_qo_heads + h) * D_HEAD + d_offsets).to(tl.float32)
    neg_inf = tl.full((), -float("inf"), dtype=tl.float32)
    m_i = neg_inf
    l_i = tl.zeros((), dtype=tl.float32)
    acc = tl.zeros((D_HEAD,), dtype=tl.float32)
    gqa_ratio = NUM_QO // NUM_KV
    kv_head = (h // gqa_ratio).to(tl.int32)
    pos = tl.zeros((), dtype=tl.int32)
    while pos < seq_len:
        curr = pos + tl.arange(0, BLOCK_M)
        mask_t = curr < seq_len
        page_ids = tl.load(indices_ptr + page_start + curr, mask=mask_t, other=0)
        kv = (page_ids[:, None] * NUM_KV + kv_head) * D_HEAD + d_offsets[None, :]
        k_block = tl.load(k_ptr + kv, mask=mask_t[:, None], other=0).to(tl.float32)
        logits = tl.where(mask_t, tl.sum(k_block * q_vec[None, :], axis=1) * sm_scale, neg_inf)
        m_new = tl.maximum(m_i, tl.max(logits, axis=0))
        p = tl.exp(logits - m_new)
        l_i = l_i * tl.exp(m_i - m_new) + tl.sum(p, axis=0)
        v_block = tl.load(v_ptr + kv, mask=mask_t[:, None], other=0).to(tl.float32)
        acc = acc * tl.exp(m_i - m_new) + tl.sum(v_block * p[:, None], axis=0)
        m_i = m_new
        pos += BLOCK_M
    nonempty = l_i > 0.0
    out_vec = tl.where(nonempty, acc / l_i, tl.zeros((D_HEAD,), dtype=tl.float32))
    tl.store(out_ptr + (b * num_qo_heads + h) * D_HEAD + d_offsets, out_vec)
    tl.store(lse_ptr + b * num_qo_heads + h, (tl.log(l_i) + m_i) * 1.4426950408889634)


def run(q, k, v, indptr, indices, sm_scale):
    batch, heads, dim = q.shape
    out = torch.empty(batch, heads, dim, dtype=torch.float32)
    lse = torch.empty(batch, heads, dtype=torch.float32)
    decode[(batch, heads)](q, k, v, indptr, indices, sm_scale, out, lse, heads, BLOCK_M=4, D_HEAD=dim,
                           NUM_QO=heads, NUM_KV=k.shape[1])
    return out, lse
'''

# The gpt-5 solution's own grid: one axis of (row, head) programs split by the head count.
LIKE_GPT5_ONE_AXIS = LIKE_GPT5.replace(
    "    b = tl.program_id(0)\n    h = tl.program_id(1)\n",
    "    pid = tl.program_id(0)\n    h = pid % num_qo_heads\n    b = pid // num_qo_heads\n").replace(
    "decode[(batch, heads)]", "decode[(batch * heads,)]")


def test_the_bundled_kernel_is_grouped():
    out = grouped_heads((TASKS / "gqa_paged_decode" / "baseline.py").read_text())
    assert out is not None and grouped_heads(out) is None
    assert out.count("tl.dot(") == 2 and "tl.sum(k *" not in out and "tl.sum(p[:, None] * v" not in out
    assert "kvh = _kv_head" in out and "k = tl.load(k_ptr + kv_off, mask=valid[:, None], other=0.0)" in out
    assert "decode_kernel[(batch, triton.cdiv(hq, (hq // hkv)))]" in out and "_heads_total=hq" in out
    assert f"{TILE}=max(4, triton.next_power_of_2((hq // hkv)))" in out
    assert config_of(out) == config_of((TASKS / "gqa_paged_decode" / "baseline.py").read_text())


@pytest.mark.parametrize("precision, dtype, out_dtype", [
    ("tf32", "torch.bfloat16", "torch.bfloat16"), ("tf32", "torch.float16", "torch.float16"),
    ("tf32x3", "torch.float32", "torch.float32"),
    ("tf32", "torch.bfloat16", "torch.float32"),  # a float32 output (FIB's lse) is no operand
])
def test_the_launch_keeps_float32_inputs_to_float32_accuracy(precision, dtype, out_dtype):
    """One TF32 product is exact on values cast up from 16 bits; operands loaded from float32 get three."""
    import torch

    out = grouped_heads((TASKS / "gqa_paged_decode" / "baseline.py").read_text())
    launch = next(n for n in ast.walk(ast.parse(out)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript))
    chosen = next(k.value for k in launch.keywords if k.arg == PRECISION)
    tensors = {name: torch.zeros(1, dtype=eval(dtype)) for name in ("q", "k_cache", "v_cache")}
    tensors |= {"block_table": torch.zeros(1, dtype=torch.int32), "seq_lens": torch.zeros(1, dtype=torch.int32),
                "out": torch.zeros(1, dtype=eval(out_dtype))}
    assert eval(compile(ast.Expression(chosen), "launch", "eval"), {}, tensors) == precision


def test_grouped_kernels_compute_what_they_did(tmp_path):
    """Groups of 2 (the tile padded to 4), 1, 3 (not a power of two) and 20 (a tile of 32); a batch
    with an empty sequence (the early return stores every head of the group, masked)."""
    bundled = (TASKS / "gqa_paged_decode" / "baseline.py").read_text()
    pairs = {"bundled": (bundled, grouped_heads(bundled)), "gpt5": (LIKE_GPT5, grouped_heads(LIKE_GPT5)),
             "gpt5_one_axis": (LIKE_GPT5_ONE_AXIS, grouped_heads(LIKE_GPT5_ONE_AXIS))}
    assert all(after for _, after in pairs.values()) and LIKE_GPT5_ONE_AXIS != LIKE_GPT5
    assert pairs["gpt5"][1].count("tl.dot(") == 2 and "kv_head = _kv_head" in pairs["gpt5"][1]
    assert "decode[(triton.cdiv(batch * heads, (heads // k.shape[1])),)]" in pairs["gpt5_one_axis"][1]
    run_on_interpreter(tmp_path, f'''
import importlib.util, sys, torch
sys.path.insert(0, {str(TASKS / "gqa_paged_decode")!r})
import reference

TMP = {str(tmp_path)!r}
{MODULE}
PAIRS = {pairs!r}
before, after = (module("bundled_" + label, text) for label, text in zip(("before", "after"), PAIRS["bundled"]))
for params in ({{"B": 2, "L": 10, "HQ": 4, "HKV": 2, "D": 16, "PAGE": 4}}, {{"B": 1, "L": 7, "HQ": 2, "HKV": 2, "D": 8, "PAGE": 4}},
               {{"B": 2, "L": 37, "HQ": 6, "HKV": 2, "D": 16, "PAGE": 4}}, {{"B": 1, "L": 9, "HQ": 20, "HKV": 1, "D": 8, "PAGE": 8}}):
    inputs = reference.make_inputs(params, 0, "cpu", "float32")
    want = reference.reference(*inputs)
    assert torch.allclose(before.run(*inputs), want, atol=1e-5), params
    assert torch.allclose(after.run(*inputs), want, atol=1e-5), params

torch.manual_seed(0)
for name in ("gpt5", "gpt5_one_axis"):
    before, after = (module(name + "_" + label, text) for label, text in zip(("before", "after"), PAIRS[name]))
    for batch, heads, kv_heads, lens in ((3, 6, 2, [5, 0, 11]), (2, 4, 4, [9, 3])):
        dim, lens = 16, torch.tensor(lens)
        indptr = torch.cat([torch.zeros(1, dtype=torch.int64), lens.cumsum(0)]).to(torch.int32)
        indices = torch.randperm(20)[: int(lens.sum())].to(torch.int32)
        q, k, v = torch.randn(batch, heads, dim), torch.randn(20, kv_heads, dim), torch.randn(20, kv_heads, dim)
        want_out, want_lse = before.run(q, k, v, indptr, indices, 0.25)
        got_out, got_lse = after.run(q, k, v, indptr, indices, 0.25)
        assert torch.allclose(got_out, want_out, atol=1e-5) and torch.allclose(got_lse, want_lse, atol=1e-5), name
        assert not (lens == 0).any() or torch.isneginf(got_lse[1]).all() and (got_out[1] == 0).all()
print("ok")
''')


def kernel(body: str, launch: str = "k[(x.shape[0], x.shape[1])]") -> str:
    return HEADER + '''

@triton.jit
def k(q_ptr, kv_ptr, y_ptr, HQ: tl.constexpr, HKV: tl.constexpr, N: tl.constexpr, D: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    kvh = h // (HQ // HKV)
    offs = tl.arange(0, D)
    rows = tl.arange(0, N)
    q = tl.load(q_ptr + (b * HQ + h) * D + offs)
    kv = tl.load(kv_ptr + ((b * N + rows[:, None]) * HKV + kvh) * D + offs[None, :])
{body}


def run(x, kv):
    y = torch.empty(x.shape[0], x.shape[1], kv.shape[1], dtype=x.dtype)
    {launch}(x, kv, y, HQ=x.shape[1], HKV=kv.shape[2], N=kv.shape[1], D=x.shape[2])
    return y
'''.format(body=textwrap.indent(textwrap.dedent(body).strip(), " " * 4), launch=launch)


STORE = "tl.store(y_ptr + (b * HQ + h) * N + rows, s)"


@pytest.mark.parametrize("body, why", [
    ("s = tl.sum(kv * q[None, :], axis=0)\n" + STORE, "summed over the other axis: an outer product's reduction"),
    ("qq = q[None, :]\ns = tl.sum(kv * qq, axis=1)\n" + STORE, "a 2-D value moving with the head: a 3-D tile"),
    ("s = tl.sum(kv * q[None, :], axis=1)\nif h > 0:\n    " + STORE, "a branch on the head"),
    ("s = tl.sum(kv * q[None, :], axis=1)\ntl.store(y_ptr + b * N + rows, s)", "stored where the head is not"),
    ("s = helper(tl.sum(kv * q[None, :], axis=1))\n" + STORE, "a call not known"),
    ("s = tl.sum(kv * q[None, :], axis=1)\ntl.atomic_add(y_ptr + (b * HQ + h) * N + rows, s)", "an atomic"),
    ("s = tl.sum(kv * kv, axis=1) + tl.sum(q)\n" + STORE, "no product for the tensor cores"),
])
def test_what_would_change_meaning_is_left_alone(body, why):
    assert grouped_heads(kernel("s = tl.sum(kv * q[None, :], axis=1)\n" + STORE)) is not None
    assert grouped_heads(kernel(body)) is None, why


def test_kernels_of_other_shapes_are_left_alone():
    plain = kernel("s = tl.sum(kv * q[None, :], axis=1)\n" + STORE)
    assert grouped_heads(plain.replace("kvh = h // (HQ // HKV)", "kvh = h")) is None                 # no group
    assert grouped_heads(plain.replace("kvh = h // (HQ // HKV)", "kvh = h // (HQ // h)")) is None    # group moves
    assert grouped_heads(plain.replace("h = tl.program_id(1)", "h = tl.program_id(0)")) is None      # no second axis
    assert grouped_heads(plain.replace("k[(x.shape[0], x.shape[1])]", "k[(x.shape[0] * x.shape[1],)]")) is None
    assert grouped_heads(plain.replace("@triton.jit", "@triton.autotune(configs=[], key=[])\n@triton.jit")) is None
    for name in ("softmax", "rmsnorm", "rope", "merge_attn_states", "gemm_bf16", "cross_entropy", "layernorm"):
        assert grouped_heads((TASKS / name / "baseline.py").read_text()) is None, name


def test_the_flashinfer_bench_solutions_written_per_query_head_are_grouped():
    """o3's and gpt-5's gqa_paged_decode solutions (one axis of programs; the o3 one binds the group
    size to a name of its own); gpt-oss-120b's, written grouped already, are left alone."""
    solutions = ROOT / "evals" / "realworld" / "solutions"
    for path in sorted(solutions.glob("*gqa_paged_decode*")):
        out = grouped_heads(path.read_text())
        if path.name.startswith("accelopt-gpt-oss"):
            assert out is None, path.name
        else:
            assert out is not None and out.count("tl.dot(") == 2 and ",)](" in out, path.name
            assert config_of(out) == config_of(path.read_text())


def test_the_tuner_plans_it_first_and_a_recipe_finds_it_again():
    task = load_task(TASKS / "gqa_paged_decode")
    source = task.baseline_source
    baseline = MeasuredKernel(id="baseline", title="baseline", status="verified", parent_id=None,
                              speedup_vs_parent=None, speedup=1.0, config=config_of(source))
    plans = TunerPolicy().plan(PlanRequest(task=task, iteration=1, member_id="baseline", source=source,
                                           measurements="", tried=[baseline], lessons=[], n=2)).plans
    assert plans[0].rewrite == GROUPED_HEADS.name
    grouped = GROUPED_HEADS.apply(source)
    assert grouped
    tuned = apply_config(grouped, {"BLOCK_N": 128, "num_warps": 8})
    assert chain_between(source, tuned) == ([GROUPED_HEADS.name], grouped)
