"""On a GPU: the bundled baselines verify at real shapes and are timed with CUDA events."""

import pytest

from tests.conftest import TASKS
from tools.harness.runner import evaluate
from tools.task import load_task

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", ["softmax", "rmsnorm"])
def test_baseline_verifies_and_is_timed_on_gpu(name):
    task = load_task(TASKS / name)
    result = evaluate(task, task.baseline_source, device="cuda")
    assert result.status == "verified", result.error
    assert result.timer == "cuda_event"
    for timing in result.workloads.values():
        assert timing.samples >= 10 and timing.median_us > 0
        assert 0 < timing.pct_peak <= 100  # above the roofline would be a bug or a cheat


def test_wrong_kernel_is_rejected_on_gpu():
    from tests.scripted import WRONG

    result = evaluate(load_task(TASKS / "softmax"), WRONG, device="cuda")
    assert result.status == "wrong_output"
