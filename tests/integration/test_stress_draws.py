"""Stress draws (tools/harness/stress_draws.py, Judge.stress): the task's inputs scaled to a large
magnitude, shifted far from zero, constant and one-hot along their rows, where the reference's
outputs are finite. On the interpreter, through the real harness: an honest kernel passes them, a
configuration of an autotuned kernel that would pass the task's own draws but not these rejects the
kernel, named; the unit half checks which inputs are left alone."""

import math

import pytest
import torch

from accelopt.tools.harness import stress_draws
from accelopt.tools.harness.runner import evaluate
from accelopt.tools.task import load_task
from tests.conftest import TASKS

SOFTMAX = load_task(str(TASKS / "softmax"))

# softmax with an autotuned choice of whether to subtract the row's max: configuration 1 skips it,
# right on randn x 4, NaN once a logit passes ~88
AUTOTUNED = '''import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({'SAFE': True}, num_warps=4), triton.Config({'SAFE': False}, num_warps=4)],
                 key=['n_cols'])
@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_cols, BLOCK_SIZE: tl.constexpr, SAFE: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < n_cols
    x = tl.load(in_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    if SAFE:
        x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * n_cols + offs, num / tl.sum(num, axis=0), mask=mask)


def run(x):
    x = x.contiguous()
    out = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](out, x, x.shape[1], BLOCK_SIZE=triton.next_power_of_2(x.shape[1]))
    return out
'''


@pytest.mark.slow
def test_every_autotuned_configuration_meets_the_stress_draws():
    honest = evaluate(SOFTMAX, AUTOTUNED.replace("{'SAFE': False}", "{'SAFE': True}"), device="cpu", seeds=1)
    assert honest.status == "verified", honest.error
    assert any("each of 2 autotuned configurations" in e for e in honest.evidence), honest.evidence
    result = evaluate(SOFTMAX, AUTOTUNED, device="cpu", seeds=1)
    assert result.status == "nan", (result.status, result.error)
    assert "stress draw 'scaled by x" in result.error and "configuration 1 of softmax_kernel (SAFE: False" in result.error


def test_plain_float_inputs_are_stressed_and_structured_ones_left_alone():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 37, generator=g) * 4
    probs = torch.softmax(torch.randn(4, 8, generator=g), dim=-1)
    lengths = torch.tensor([3.0, 5.0, 7.0])  # integer-valued floats
    inputs = (logits, probs, lengths, torch.randint(0, 9, (4,)), torch.tensor(0.5), logits.to(torch.float8_e4m3fn))
    assert stress_draws.chosen(torch, inputs) == [0]
    kinds = {d.kind: d for d in stress_draws.draws(torch, inputs, [0], seed=1)}
    assert set(kinds) == {"scaled", "shifted", "constant", "one-hot"}
    for d in kinds.values():
        assert all(d.inputs[i] is inputs[i] for i in range(1, len(inputs)))  # the others untouched
    scaled = kinds["scaled"].inputs[0]
    factor = float(scaled.abs().max() / logits.abs().max())
    assert 512 <= float(scaled.abs().max()) < 2048 and factor == 2.0 ** round(math.log2(factor))
    assert torch.equal(scaled / factor, logits) and kinds["scaled"].label.startswith(f"scaled by x{factor:g} ")
    shift = float((kinds["shifted"].inputs[0] - logits).mean())
    spread = float(logits.max() - logits.min())
    assert kinds["shifted"].label == f"shifted by +{round(shift):g}" and 32 * spread <= shift <= 128 * spread
    assert bool((kinds["constant"].inputs[0] == logits[:, :1]).all())
    hot = kinds["one-hot"].inputs[0]
    assert torch.equal((hot != 0).sum(dim=-1), torch.ones(4, dtype=torch.long)) and float(hot.max()) == 1024.0


def test_a_draw_already_large_is_not_scaled_and_a_row_of_one_is_not_made_constant():
    big = torch.randn(3, 1) * 5000  # rows of one value: nothing to make constant or one-hot
    kinds = [d.kind for d in stress_draws.draws(torch, (big,), [0], seed=1)]
    assert kinds == ["shifted"]


def test_an_ulp_perturbation_moves_each_value_by_about_an_ulp():
    x = torch.randn(1000, dtype=torch.float32) * 1000
    moved = stress_draws.perturbed(torch, (x,), [0], seed=3)[0]
    ratio = ((moved.double() - x.double()) / x.double()).abs()
    assert float(ratio.max()) <= 2.5 * torch.finfo(torch.float32).eps and float(ratio.mean()) > 0
