"""The one statistic behind every speedup (tools/harness/stats.py) and the decision rule of
result.compare_rounds: the noise floor, the width that makes a comparison decided, and the
interpreter, which decides nothing."""

import pytest

from accelopt.tools.harness import stats
from accelopt.tools.harness.result import WorkloadTiming, compare_rounds


def _interval(ratios):
    return stats.interval(ratios)


def test_per_round_ratios_are_the_geomean_over_workloads_of_other_over_candidate():
    mine = {"a": [10.0, 10.0, 10.0], "b": [1.0, 2.0]}
    theirs = {"a": [20.0, 40.0, 10.0], "b": [2.0, 2.0], "only_theirs": [5.0]}
    # rounds past the shorter record are left out; a workload only one side ran is not compared
    assert stats.round_ratios(mine, theirs) == pytest.approx([2.0, 2.0])  # round 1: sqrt(4 x 1)
    assert stats.round_ratios(mine, {"c": [1.0]}) == []
    with pytest.raises(ValueError):
        stats.interval([])


def test_the_interval_is_seeded_and_is_the_range_up_to_5_rounds():
    ratios = [1.10, 1.30, 1.20, 1.25, 1.15]
    iv = _interval(ratios)
    assert iv == _interval(ratios)  # the same rounds always give the same interval
    assert (iv.speedup, iv.low, iv.high, iv.rounds) == (1.20, 1.10, 1.30, 5)
    wide = _interval([1.0 + 0.01 * i for i in range(15)])
    assert wide.low > 1.0 and wide.high < 1.14 and wide.rounds == 15  # a bootstrap interval inside the range


@pytest.mark.parametrize("ratios, side, decided", [
    ([1.50, 1.52, 1.55, 1.51], "faster", True),          # above 1.02 and tight
    ([0.60, 0.61, 0.62], "slower", True),                # below 1/1.02 and tight
    ([0.995, 1.0, 1.01, 1.005], "equivalent", True),     # inside [1/1.02, 1.02]
    ([1.20, 1.60, 1.40], "faster", False),               # faster, but 0.4 wide at 1.4x: not a figure yet
    ([1.01, 1.03, 1.05], "unclear", False),              # reaches into the floor from above
    ([0.97, 1.00, 1.03], "unclear", False),              # straddles a bound of the floor
    ([1.015, 1.025, 1.03], "unclear", False),            # clears 1, not the floor: no difference called
])
def test_sides_and_decisions_against_the_noise_floor(ratios, side, decided):
    iv = _interval(ratios)
    assert stats.side(iv, 0.02) == side
    assert stats.decided(iv, 0.02) is decided


def test_the_floor_moves_the_bounds():
    iv = _interval([1.03, 1.04, 1.05])
    assert stats.side(iv, 0.0) == "faster" and stats.side(iv, 0.02) == "faster"
    assert stats.side(iv, 0.04) == "unclear"  # straddles 1.04
    assert stats.side(_interval([1.03, 1.04, 1.05]), 0.06) == "equivalent"


def _timings(us_per_round: dict[str, list[float]], metric: str = "gpu_span") -> dict[str, WorkloadTiming]:
    return {w: WorkloadTiming(median_us=sorted(r)[len(r) // 2], iqr_us=0.0, samples=len(r), metric=metric,
                              round_medians_us=r) for w, r in us_per_round.items()}


def test_compare_rounds_decides_only_beyond_the_floor():
    candidate = _timings({"w1": [100.0, 100.0, 100.0], "w2": [50.0, 50.0, 50.0]})
    slightly = _timings({"w1": [101.0, 101.5, 101.2], "w2": [50.5, 50.7, 50.6]})  # 1.0-1.5% slower than it
    vs = compare_rounds(candidate, slightly)
    assert vs.ci_low > 1.0 and not vs.faster and not vs.slower and vs.noise_floor == 0.02
    assert compare_rounds(candidate, slightly, noise_floor=0.0).faster  # the old rule: the interval excludes 1
    clearly = _timings({"w1": [130.0, 131.0, 129.0], "w2": [65.0, 66.0, 64.0]})
    assert compare_rounds(candidate, clearly).faster and compare_rounds(clearly, candidate).slower


def test_compare_rounds_on_the_interpreter_is_never_faster_nor_slower():
    candidate = _timings({"w": [100.0, 101.0]}, metric="interpreter_wall")
    other = _timings({"w": [1000.0, 1010.0]}, metric="interpreter_wall")
    for vs in (compare_rounds(candidate, other), compare_rounds(other, candidate),
               compare_rounds(_timings({"w": [100.0, 101.0]}), _timings({"w": [1000.0, 1010.0]}),
                              timer="interpreter_wall")):
        assert not vs.faster and not vs.slower
    assert compare_rounds(candidate, other).speedup == pytest.approx(10.0, rel=0.01)  # the figure is still reported


def test_an_undecided_result_says_whether_its_calls_are_host_bound():
    from accelopt.tools.harness.result import Comparison, EvalResult, RoundsRun, WorkloadTiming
    from accelopt.tools.harness.verdict import why_undecided

    def result(kernel_us: float) -> EvalResult:
        timing = WorkloadTiming(median_us=447.0, iqr_us=40.0, samples=600, kernel_us=kernel_us)
        return EvalResult(status="verified", device="cuda", workloads={"b1": timing}, rounds=RoundsRun(ran=15, stopped="cap"),
                          versus={"baseline": Comparison(speedup=1.29, ci_low=0.975, ci_high=2.01, rounds=15,
                                                         faster=False, slower=False)})

    host_bound = why_undecided(result(kernel_us=103.0))
    assert "undecided after 15 rounds" in host_bound and "0.975-2.010" in host_bound
    assert "host-bound" in host_bound and "kernels 103 of 447 µs" in host_bound
    assert "no workload is host-bound" in why_undecided(result(kernel_us=440.0))


def test_an_interval_stalls_only_from_the_sixth_round_when_three_rounds_narrowed_it_under_10_percent():
    from accelopt.tools.harness.stats import stalled

    assert not stalled({})
    assert not stalled({3: 0.3, 4: 0.3, 5: 0.3})                     # too early to say
    assert stalled({3: 0.3, 4: 0.3, 5: 0.3, 6: 0.28})                # 7% narrower in three rounds
    assert not stalled({3: 0.3, 4: 0.29, 5: 0.27, 6: 0.26})          # 13% narrower: still worth rounds
    assert not stalled({4: 0.3, 5: 0.3, 6: 0.3})                     # no figure three rounds back


def test_one_measurement_pools_to_its_own_reported_interval():
    from accelopt.tools.harness.stats import Interval, across, pool

    one = Interval(1.286, 1.286, 1.321, 3)
    pooled = pool([one], 0.02)
    assert pooled.measurements == 1 and pooled.interval == across(one, 0.02)


def test_agreeing_measurements_narrow_the_pooled_figure_and_disagreeing_ones_widen_it():
    """Issue 65's run: the best measured 1.286x [1.286, 1.321] once; the same program measured
    again near 1.37-1.39x. Pooled, the figure moves between them and its interval holds both, wider
    than either alone; two agreeing measurements give a narrower interval than either."""
    from accelopt.tools.harness.stats import Interval, across, pool

    low, high = Interval(1.286, 1.286, 1.321, 3), Interval(1.39, 1.385, 1.395, 4)
    apart = pool([low, high], 0.02)
    assert 1.286 < apart.interval.speedup < 1.39 and apart.spread > 0.02
    assert apart.interval.low < 1.286 and apart.interval.high > 1.39
    a, b = Interval(1.375, 1.372, 1.378, 4), Interval(1.376, 1.373, 1.379, 4)
    together = pool([a, b], 0.02)
    assert together.spread == 0.0 and together.measurements == 2
    assert together.interval.high - together.interval.low < across(a, 0.02).high - across(a, 0.02).low
