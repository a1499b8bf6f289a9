"""The float32-dots rewrite (policies/float32_dots.py): a tl.dot told to multiply float32 exactly
made three TF32 products. An Inductor-style matmul template (`ALLOW_TF32 : tl.constexpr = False`)
computes the same on the interpreter; every way a dot names exact products is found, and only
those; the tuner plans it for float32 tasks, not for the bf16 GEMM whose seed reads the same."""

import json
import textwrap

import pytest

from accelopt.policies import rewrites
from accelopt.policies.float32_dots import float32_dots
from accelopt.tools.inductor_seed import seed_source
from tests.conftest import FIXTURES, ROOT
from tests.unit.test_rewrites import MODULE, run_on_interpreter

TEMPLATE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K):
    BLOCK_M : tl.constexpr = 16
    BLOCK_N : tl.constexpr = 16
    BLOCK_K : tl.constexpr = 16
    ALLOW_TF32 : tl.constexpr = False
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        ks = k * BLOCK_K + rk
        a = tl.load(a_ptr + rm[:, None] * K + ks[None, :], mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * N + rn[None, :], mask=(ks[:, None] < K) & (rn[None, :] < N), other=0.0)
        # the template's own comment stays where it was
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32, out_dtype=tl.float32)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    mm_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16))](a, b, c, M, N, K, num_warps=4, num_stages=3)
    return c
'''


def test_an_inductor_style_template_made_tf32x3_computes_the_same(tmp_path):
    rewritten = float32_dots(TEMPLATE)
    assert rewritten is not None
    assert "acc += tl.dot(a, b, out_dtype=tl.float32, input_precision='tf32x3')" in rewritten
    assert "# the template's own comment stays where it was" in rewritten and "allow_tf32" not in rewritten
    run_on_interpreter(tmp_path, f'''
import importlib.util, torch
TMP = {str(tmp_path)!r}
{MODULE}
before, after = module("before", {TEMPLATE!r}), module("after", {rewritten!r})
torch.manual_seed(0)
a, b = torch.randn(37, 50), torch.randn(50, 21)
assert torch.allclose(before.run(a, b), after.run(a, b), atol=1e-5)
assert torch.allclose(after.run(a, b), a @ b, atol=1e-4)
print("ok")
''')


def kernel(dot: str, prelude: str = "", params: str = "a_ptr, b_ptr, c_ptr") -> str:
    return textwrap.dedent(f'''
        import triton
        import triton.language as tl
        {prelude}

        @triton.jit
        def k({params}):
            a = tl.load(a_ptr + tl.arange(0, 16)[:, None] * 16 + tl.arange(0, 16)[None, :])
            b = tl.load(b_ptr + tl.arange(0, 16)[:, None] * 16 + tl.arange(0, 16)[None, :])
            c = {dot}
            tl.store(c_ptr + tl.arange(0, 16)[:, None] * 16 + tl.arange(0, 16)[None, :], c)
        ''')


@pytest.mark.parametrize("dot, prelude, made", [
    ("tl.dot(a, b, allow_tf32=False)", "", "tl.dot(a, b, input_precision='tf32x3')"),
    ("tl.dot(a, b, input_precision='ieee')", "", "tl.dot(a, b, input_precision='tf32x3')"),
    ("tl.dot(a, b, None, 'ieee')", "", "tl.dot(a, b, None, input_precision='tf32x3')"),  # by position
    ("tl.dot(a, b, None, None, False)", "", "tl.dot(a, b, None, input_precision='tf32x3')"),
    ("tl.dot(a, b, input_precision=EXACT)", "EXACT = 'ieee'", "tl.dot(a, b, input_precision='tf32x3')"),  # a module constant
])
def test_each_way_of_asking_for_exact_products_is_rewritten(dot, prelude, made):
    out = float32_dots(kernel(dot, prelude))
    assert out is not None and f"c = {made}" in out


@pytest.mark.parametrize("dot, prelude, params", [
    ("tl.dot(a, b)", "", None),                                   # Triton's default: TF32 already
    ("tl.dot(a, b, allow_tf32=True)", "", None),
    ("tl.dot(a, b, input_precision='tf32')", "", None),
    ("tl.dot(a, b, allow_tf32=EXACT)", "", "a_ptr, b_ptr, c_ptr, EXACT: tl.constexpr"),  # the launch decides
    ("tl.dot(a, b, input_precision=EXACT)", "EXACT = 'ieee'", "a_ptr, b_ptr, c_ptr, EXACT: tl.constexpr"),
    ("a @ b", "", None),
])
def test_dots_that_do_not_ask_for_exact_products_are_left_alone(dot, prelude, params):
    assert float32_dots(kernel(dot, prelude, params or "a_ptr, b_ptr, c_ptr")) is None


def test_a_dot_inside_a_dot_is_rewritten_with_it():
    out = float32_dots(kernel("tl.dot(tl.dot(a, b, allow_tf32=False), b, allow_tf32=False)"))
    assert out is not None
    assert "c = tl.dot(tl.dot(a, b, input_precision='tf32x3'), b, input_precision='tf32x3')" in out


def test_a_name_assigned_twice_in_the_kernel_is_not_read_as_a_constant():
    source = TEMPLATE.replace("    pid_m, pid_n =", "    ALLOW_TF32 = True\n    pid_m, pid_n =")
    assert float32_dots(source) is None


def test_the_tuner_plans_it_for_float32_tasks_only():
    """gemm_bf16's Inductor seed names ALLOW_TF32 = False too: for bf16 operands the precision means
    nothing, so a candidate would run what its parent ran."""
    seed = seed_source(json.loads((FIXTURES / "inductor" / "gemm_bf16.triton.json").read_text())).source
    assert float32_dots(seed) is not None
    assert rewrites.FLOAT32_DOTS not in rewrites.applicable(seed, "bfloat16")
    assert rewrites.FLOAT32_DOTS in rewrites.applicable(seed, "float32")
    assert rewrites.FLOAT32_DOTS in rewrites.applicable(seed)  # no task named: every rewrite that applies


def test_no_llm_written_solution_asks_for_exact_products():
    """The FlashInfer-Bench solutions in evals/realworld are bf16/fp16 kernels: none is changed."""
    solutions = ROOT / "evals" / "realworld" / "solutions"
    assert not [p.name for p in solutions.glob("*.py") if float32_dots(p.read_text())]
