"""The counted-loop rewrite (policies/counted_loops.py): `while i < n: ...; i += STEP` made
`for i in range(i, n, STEP)`. A kernel written like the gpt-5 FlashInfer-Bench decode solution
computes the same on the interpreter; the LLM-written FIB solutions that count with `while` are
rewritten; loops whose meaning would change are left alone; o3's decode kernel, grouped and
counted, is open to the split-KV rewrite."""

import textwrap

import pytest

from accelopt.policies.counted_loops import counted_loops
from accelopt.policies.grouped_heads import grouped_heads
from accelopt.policies.split_kv import split_kv
from tests.conftest import ROOT
from tests.unit.test_grouped_heads import LIKE_GPT5
from tests.unit.test_rewrites import MODULE, run_on_interpreter

SOLUTIONS = ROOT / "evals" / "realworld" / "solutions"


def test_a_decode_kernel_counted_computes_the_same(tmp_path):
    counted = counted_loops(LIKE_GPT5)
    assert counted is not None and "while" not in counted and "for pos in range(pos, seq_len, BLOCK_M):" in counted
    pairs = {"plain": (LIKE_GPT5, counted), "grouped": (LIKE_GPT5, counted_loops(grouped_heads(LIKE_GPT5) or ""))}
    run_on_interpreter(tmp_path, f'''
import importlib.util, torch
TMP = {str(tmp_path)!r}
{MODULE}
PAIRS = {pairs!r}
torch.manual_seed(0)
for name, (before_text, after_text) in PAIRS.items():
    before, after = module(name + "_before", before_text), module(name + "_after", after_text)
    lens = torch.tensor([5, 0, 11])
    indptr = torch.cat([torch.zeros(1, dtype=torch.int64), lens.cumsum(0)]).to(torch.int32)
    indices = torch.randperm(20)[: int(lens.sum())].to(torch.int32)
    q, k, v = torch.randn(3, 6, 16), torch.randn(20, 2, 16), torch.randn(20, 2, 16)
    for want, got in zip(before.run(q, k, v, indptr, indices, 0.25), after.run(q, k, v, indptr, indices, 0.25)):
        assert torch.allclose(want, got, atol=1e-5), name
print("ok")
''')


def test_the_llm_written_solutions_that_count_with_while_are_rewritten():
    counted = {p.name for p in SOLUTIONS.glob("*.py") if counted_loops(p.read_text())}
    assert counted == {"gpt-5_gemm_n6144_k4096_793693.py", "gpt-5_gqa_paged_decode_h32_kv4_d128_ps1_f88811.py",
                       "gpt-5_mla_paged_prefill_causal_h16_ckv512_kpe64_ps1_88089a.py",
                       "o3_gqa_paged_decode_h32_kv8_d128_ps1_c3c0cc.py"}
    # a binary search (`while low <= high`) is no count
    assert counted_loops((SOLUTIONS / "accelopt-gpt-oss-120b_gqa_ragged_prefill_causal_h32_kv8_d128_728c5634.py")
                         .read_text()) is None


def test_o3s_decode_kernel_grouped_and_counted_is_split():
    o3 = (SOLUTIONS / "o3_gqa_paged_decode_h32_kv8_d128_ps1_c3c0cc.py").read_text()
    grouped = grouped_heads(o3) or ""
    assert split_kv(grouped) is None  # a while loop: not the loop split_kv takes
    assert split_kv(counted_loops(grouped) or "") is not None


def kernel(loop: str, after: str = "") -> str:
    return '''import torch
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, y_ptr, n, step, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], tl.float32)
    i = 0
{loop}
    tl.store(y_ptr + tl.arange(0, BLOCK), acc){after}


def run(x):
    y = torch.empty(16)
    k[(1,)](x, y, x.numel(), 16, BLOCK=16)
    return y
'''.format(loop=textwrap.indent(textwrap.dedent(loop).strip(), " " * 4), after=after)


PLAIN = "while i < n:\n    acc += tl.load(x_ptr + i + tl.arange(0, BLOCK), mask=i + tl.arange(0, BLOCK) < n, other=0.0)\n    i += BLOCK"


@pytest.mark.parametrize("loop, after, why", [
    (PLAIN, "\n    tl.store(y_ptr, i)", "the counter read after the loop"),
    (PLAIN.replace("i += BLOCK", "i += step"), "", "a step not known to be positive"),
    (PLAIN.replace("while i < n:", "while i <= n:"), "", "not `<`"),
    (PLAIN.replace("    i += BLOCK", "    n = n - 1\n    i += BLOCK"), "", "the bound changes in the body"),
    (PLAIN.replace("    i += BLOCK", "    i = i * 2\n    i += BLOCK"), "", "the counter changes in the body"),
    (PLAIN.replace("    i += BLOCK", "    i += BLOCK\n    acc = acc * 2"), "", "the count is not the last statement"),
])
def test_loops_whose_meaning_would_change_are_left_alone(loop, after, why):
    assert counted_loops(kernel(PLAIN)) is not None
    assert counted_loops(kernel(loop, after)) is None, why
