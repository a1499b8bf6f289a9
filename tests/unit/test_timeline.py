"""The harness's reading of a GPU timeline and the audit's tolerance, without a GPU."""

from accelopt.tools.task import load_task
from tests.conftest import TASKS

# ------------------------------------------------ the GPU timeline, read without a GPU

MARK = "at::cuda::(anonymous namespace)::spin_kernel(long)"
FLUSH = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<signed char>>"


def _timeline(calls: list[list[tuple[float, str]]], extra_marks: int = 0) -> list[tuple[float, float, str]]:
    """flush, mark, the call's own activity (start offset, duration, name), mark; per call."""
    gpu, t = [], 0.0
    for call in calls:
        gpu.append((t, t + 80.0, FLUSH))
        gpu.append((t + 90.0, t + 91.0, MARK))
        for offset, (duration, name) in enumerate(call):
            start = t + 100.0 + 10.0 * offset
            gpu.append((start, start + duration, name))
        gpu.append((t + 5000.0, t + 5001.0, MARK))
        t += 10_000.0
    gpu += [(t + k, t + k + 1.0, MARK) for k in range(extra_marks)]
    return sorted(gpu)


def test_a_kernels_own_long_fill_is_part_of_its_call_not_a_boundary():
    from accelopt.tools.harness.sandbox import calls_between_marks

    # measured on a real FlashInfer-Bench kernel: it zeroes a big output first (a fill longer
    # than the L2 flush); splitting at the longest fills had timed it at 1 µs instead of ~775 µs
    own_fill = (700.0, "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>")
    calls, names = calls_between_marks(_timeline([[own_fill, (5.0, "attn_kernel")]] * 4), MARK, reps=4)
    assert len(calls) == 4
    assert all(c.span() >= 700.0 for c in calls)
    assert FLUSH not in names and "attn_kernel" in names and own_fill[1] in names


def test_host_work_counts_the_same_before_the_first_kernel_as_between_kernels():
    from accelopt.tools.harness.sandbox import TimedCall

    # the GPU is free at t=0 (the end of the cover); 20 µs of host work the cover did not hide
    # sits before the first kernel in one launcher and between two kernels in the other: both
    # spans are 30 µs (the old first-to-last span said 10 µs for the front-loaded launcher)
    front_loaded = TimedCall(0.0, [(20.0, 25.0), (25.0, 30.0)])
    in_between = TimedCall(0.0, [(0.0, 5.0), (25.0, 30.0)])
    assert front_loaded.span() == in_between.span() == 30.0
    assert front_loaded.busy() == in_between.busy() == 10.0
    # a kernel that started early on a side stream, while the GPU spun, is timed from its start
    assert TimedCall(0.0, [(-40.0, 10.0)]).span() == 50.0


def test_a_marker_count_off_gives_no_spans():
    from accelopt.tools.harness.sandbox import calls_between_marks

    # a kernel that runs torch's spin kernel itself cannot cut its calls short: no spans at all,
    # so the judge falls back to CUDA events
    assert calls_between_marks(_timeline([[(5.0, "k")]] * 3, extra_marks=1), MARK, reps=3) == ([], [])
    assert calls_between_marks(_timeline([[(5.0, "k")]] * 3), MARK, reps=4) == ([], [])


def test_the_audit_rejects_an_autotuned_kernel_far_off_its_measured_time(monkeypatch):
    from accelopt.tools.harness import audit as audit_mod
    from accelopt.tools.harness.kernel_profile import ProfileRun
    from accelopt.tools.harness.kernel_source import KernelSource
    from accelopt.tools.harness.result import EvalResult, WorkloadTiming

    task = load_task(TASKS / "softmax")
    source = task.baseline_source.replace("@triton.jit", "@triton.autotune(configs=[], key=[])\n@triton.jit")
    own = KernelSource.parse(source).triton_kernels
    monkeypatch.setattr(audit_mod.shutil, "which", lambda _: "/usr/bin/ncu")
    result = EvalResult(status="verified", device="cuda")
    result.workloads = {"w": WorkloadTiming(median_us=1.0, iqr_us=0.0, samples=5, kernel_us=1.0)}
    for ncu_us, agreed in ((1.8, True), (775.0, False)):
        monkeypatch.setattr(audit_mod, "profile_workloads", lambda *a, _t=ncu_us, **k: ProfileRun(
            "ncu", {"w": [{"name": sorted(own)[0], "time_us": _t}]}))
        assert audit_mod.audit(task, source, result).agreed is agreed, ncu_us


def test_a_fresh_call_slow_in_most_rounds_is_a_cache_and_one_slow_round_is_noise():
    from accelopt.tools.harness.judge import Reject
    from accelopt.tools.harness.timing_rounds import _fresh_not_slower

    # one host-stalled span among five rounds (measured: 879 vs 182 µs on a real paged-decode kernel)
    _fresh_not_slower([(879.0, 182.0), (185.0, 181.0), (183.0, 182.0), (190.0, 180.0), (181.0, 182.0)], "w")
    try:  # a kernel that keeps results between calls recomputes on every call on fresh values
        _fresh_not_slower([(900.0, 20.0), (880.0, 21.0), (21.0, 20.0), (905.0, 20.0), (899.0, 22.0)], "w")
    except Reject as r:
        assert r.status == "cheat_suspected" and "4 of 5 rounds" in r.error
    else:
        raise AssertionError("a result cache went unnoticed")
