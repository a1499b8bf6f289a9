"""On a GPU the judge owns an @triton.autotune kernel's choice (tools/harness/autotune_rounds.py):
every configuration timed on every workload, one chosen per tuning key and pinned, the same choice
handed back for a later evaluation of the same source, and written into best_kernel.py's source."""

import pytest

from accelopt.tools.harness.autotune_choices import pinned_source
from accelopt.tools.harness.runner import evaluate
from accelopt.tools.task import load_task
from accelopt.tools.tunables import autotune_space
from tests.conftest import FIXTURES, TASKS

pytestmark = pytest.mark.gpu
AUTOTUNED = (FIXTURES / "autotuned" / "rmsnorm_autotuned.py").read_text()


def test_the_judge_times_every_configuration_and_a_later_evaluation_runs_its_choice():
    task = load_task(TASKS / "rmsnorm")
    first = evaluate(task, AUTOTUNED, device="cuda", compare={"baseline": task.baseline_source})
    assert first.status == "verified", first.error
    record = first.autotune["candidate"]
    (kernel,) = record.kernels
    assert record.how == "timed" and kernel.timed and set(kernel.ran) == set(first.workloads)
    assert all(len(times) == 3 and all(t is None or t > 0 for t in times) for times in kernel.times_us.values())
    assert first.phases_s["autotune"] > 0
    again = evaluate(task, AUTOTUNED, device="cuda", compare={"baseline": task.baseline_source})
    assert again.status == "verified" and again.autotune["candidate"].how == "given"
    assert again.autotune["candidate"].pins() == record.pins()
    chosen = set(kernel.choices.values()) | {kernel.default}
    if len(chosen) == 1:  # one configuration for every key: best_kernel.py lists it alone
        space = autotune_space(pinned_source(AUTOTUNED, record).text)
        assert space.pinned and space.configs == [autotune_space(AUTOTUNED).configs[chosen.pop()]]
