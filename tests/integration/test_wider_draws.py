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
