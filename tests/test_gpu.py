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
        assert timing.samples >= 10 and timing.median_us > 0 and timing.metric == "cupti_kernel"
        assert 0 < timing.pct_peak <= 100  # above the roofline would be a bug or a cheat


def test_wrong_kernel_is_rejected_on_gpu():
    from tests.scripted import WRONG

    result = evaluate(load_task(TASKS / "softmax"), WRONG, device="cuda")
    assert result.status == "wrong_output"


def test_illegal_memory_access_costs_one_candidate():
    from evals.bench_harness import bad_variants

    task = load_task(TASKS / "softmax")
    bad = evaluate(task, bad_variants()["illegal_address"], device="cuda", timeout_s=60)
    assert bad.status in ("runtime_error", "crashed"), bad.error
    assert evaluate(task, task.baseline_source, device="cuda").status == "verified"


def test_cupti_kernel_time_close_to_event_time_on_large_kernels():
    task = load_task(TASKS / "rmsnorm")
    events = evaluate(task, task.baseline_source, device="cuda", cupti_below_us=0.0)
    kernel = evaluate(task, task.baseline_source, device="cuda", cupti_below_us=1e9)
    assert events.status == kernel.status == "verified", kernel.error
    assert set(kernel.workloads) == set(events.workloads) == {w.name for w in task.spec.workloads}
    for name, t in kernel.workloads.items():
        assert t.metric == "cupti_kernel"
        # Kernel-only time excludes launch overhead: a little less than event time, never more than noise above.
        assert 0.7 * events.workloads[name].median_us < t.median_us < 1.05 * events.workloads[name].median_us


def test_profile_summary_for_the_planner():
    from tools.harness.kernel_profile import profile_kernel

    task = load_task(TASKS / "rmsnorm")
    prof = profile_kernel(task, task.baseline_source)
    assert prof is not None and prof["kernels"] and "rmsnorm_kernel" in prof["summary"]


def test_compile_ahead_fills_the_shared_triton_cache(tmp_path):
    from tools.harness.pool import make_pool
    from tools.harness.runner import build_request

    task = load_task(TASKS / "softmax")
    pool = make_pool("cuda", 1, compile_ahead=True)
    try:
        src = tmp_path / "candidate.py"
        src.write_text(task.baseline_source.replace("num_warps=4", "num_warps=2"))
        compiled = pool.compilers[0].request({**build_request(task, "cuda", str(src), {}), "compile_only": True}, 120)
        assert compiled["status"] == "compiled", compiled
        assert any(pool.workers[0].cache.rglob("*.cubin"))  # the timing worker will start with a cache hit
        assert evaluate(task, src.read_text(), device="cuda", pool=pool).status == "verified"
    finally:
        pool.close()
