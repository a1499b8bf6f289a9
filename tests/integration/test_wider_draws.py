"""A task that draws only values >= 0 (KernelBench's torch.rand) cannot tell abs from identity:
the judge draws the task's inputs once more with random signs where they were all >= 0, and where
the reference is defined there, the kernel must match it. On the interpreter, a softmax task whose
inputs are torch.rand."""

import shutil

import pytest

from accelopt.tools.harness.runner import evaluate
from accelopt.tools.task import load_task
from tests.conftest import TASKS

NON_NEGATIVE = '''x = torch.rand(workload["M"], workload["N"], generator=gen, device=device, dtype=torch.float32) * 4.0'''
ABS = 'x = tl.where(mask, tl.abs(x), x)\n    x = x - tl.max(x, axis=0)'


@pytest.fixture
def rand_softmax(tmp_path):
    task = tmp_path / "softmax_rand"
    shutil.copytree(TASKS / "softmax", task)
    reference = (task / "reference.py").read_text()
    drawn = reference.replace(
        'x = torch.randn(workload["M"], workload["N"], generator=gen, device=device, dtype=torch.float32) * 4.0',
        NON_NEGATIVE)
    assert drawn != reference
    (task / "reference.py").write_text(drawn)
    return load_task(str(task))


def test_a_kernel_right_only_on_the_tasks_own_draws_is_wrong(rand_softmax):
    honest = evaluate(rand_softmax, rand_softmax.baseline_source, device="cpu")
    assert honest.status == "verified", honest.error
    assert any("signed values" in e for e in honest.evidence), honest.evidence
    narrow = rand_softmax.baseline_source.replace("x = x - tl.max(x, axis=0)", ABS)
    assert narrow != rand_softmax.baseline_source
    result = evaluate(rand_softmax, narrow, device="cpu")
    assert result.status == "wrong_output", (result.status, result.error)
    assert "correct on the task's own draws" in result.error and "signs of its non-negative inputs" in result.error


def test_a_task_whose_draws_have_both_signs_is_not_widened():
    task = load_task(str(TASKS / "softmax"))  # torch.randn: nothing to widen, no extra reference call
    result = evaluate(task, task.baseline_source, device="cpu")
    assert result.status == "verified" and not any("signed values" in e for e in result.evidence)


# KernelBench's reverse cumsum (level 1, problem 91) draws torch.rand: with signs, its long sums
# cross zero, where any order of float32 additions other than the reference's misses atol=1e-4.
CUMSUM_TASK = {"name": "reverse_cumsum_rand", "backend": "triton", "dtype": "float32", "entry_point": "run",
               "description": "Reverse cumulative sum along dim 1 of a [R, N] float32 tensor drawn with torch.rand.",
               "workloads": [{"name": "R2_N16384", "params": {"R": 2, "N": 16384}}],
               "interpreter_workloads": [{"name": "R2_N16384", "params": {"R": 2, "N": 16384}}],
               "seeds": 1, "atol": 1e-4, "rtol": 1e-4}
CUMSUM_REFERENCE = '''import torch


def make_inputs(workload, seed, device, dtype):
    gen = torch.Generator(device=device).manual_seed(seed)
    return (torch.rand(workload["R"], workload["N"], generator=gen, device=device, dtype=torch.float32) * 100.0,)


def reference(x):
    return torch.cumsum(x.flip(1), dim=1).flip(1)


def flops(workload, dtype):
    return workload["R"] * workload["N"]


def bytes_moved(workload, dtype):
    return 8 * workload["R"] * workload["N"]
'''
# an honest scan: chunks of 256 from the row's end, each chunk's running sum carried to the next
CUMSUM_KERNEL = '''import torch
import triton
import triton.language as tl


@triton.jit
def reverse_cumsum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    carry = 0.0
    for start in range(0, n, BLOCK):
        offs = n - 1 - (start + tl.arange(0, BLOCK))
        mask = offs >= 0
        x = tl.load(x_ptr + row * n + offs, mask=mask, other=0.0)
        tl.store(out_ptr + row * n + offs, tl.cumsum(x, 0) + carry, mask=mask)
        carry += tl.sum(x, 0)


def run(x):
    out = torch.empty_like(x)
    reverse_cumsum_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=256)
    return out
'''


def test_an_honest_scan_is_held_to_the_references_own_rounding_on_signed_draws(tmp_path):
    import json

    task_dir = tmp_path / "reverse_cumsum_rand"
    task_dir.mkdir()
    (task_dir / "task.json").write_text(json.dumps(CUMSUM_TASK))
    (task_dir / "reference.py").write_text(CUMSUM_REFERENCE)
    (task_dir / "baseline.py").write_text(CUMSUM_KERNEL)
    task = load_task(str(task_dir))
    honest = evaluate(task, CUMSUM_KERNEL, device="cpu")
    assert honest.status == "verified", honest.error
    assert any("signed values" in e for e in honest.evidence), honest.evidence
    # the same scan that drops the sign (sums |x|) is still wrong: off by the size of the values
    dropped = CUMSUM_KERNEL.replace("other=0.0)\n", "other=0.0)\n        x = tl.abs(x)\n")
    assert dropped != CUMSUM_KERNEL
    result = evaluate(task, dropped, device="cpu")
    assert result.status == "wrong_output" and "correct on the task's own draws" in result.error, result.error
