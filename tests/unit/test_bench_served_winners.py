"""The served-winners bench judges the figure a run reports (its best's evaluations pooled with the
confirmation: summary.json best_figure) against the standalone verdict, both intervals reported
across evaluations: a pass is an overlap, so a run's figure well below or well above the
standalone verdict fails, and a run never handed the winner gets no verdict."""

import pytest

from accelopt.evals.bench_served_winners import overlaps, passes, widened
from accelopt.tools.harness.stats import NOISE_FLOOR

STANDALONE = [1.36 / (1 + NOISE_FLOOR), 1.43 * (1 + NOISE_FLOOR)]
SERVED = [{"id": "i1.m0.p0.k0"}]


@pytest.mark.parametrize("figure, verdict", [
    ([1.30, 1.35], True),     # reaches the standalone interval's widened low end
    ([1.26, 1.32], False),    # the low single measurement, pooled with nothing
    ([1.48, 1.52], False),    # a run reporting more than the kernel gives fails too
    ([1.37, 1.40], True),
])
def test_a_served_run_passes_where_its_reported_figure_overlaps_the_standalone_verdict(figure, verdict):
    assert passes({"best_interval": figure, "served_best_evaluations": SERVED}, STANDALONE) is verdict


def test_a_run_never_handed_the_winner_gets_no_verdict_and_a_missing_interval_fails():
    assert passes({"best_interval": [1.37, 1.40], "served_best_evaluations": []}, STANDALONE) is None
    assert passes({"served_best_evaluations": SERVED}, STANDALONE) is False
    assert passes({"best_interval": [None, 1.4], "served_best_evaluations": SERVED}, STANDALONE) is False


def test_an_evaluation_s_rounds_are_widened_by_its_floor_as_a_verdict_reports_them():
    low, high = widened({"speedup": 1.368, "ci_low": 1.361, "ci_high": 1.369, "noise_floor": 0.05})
    assert low == pytest.approx(1.361 / 1.05) and high == pytest.approx(1.369 * 1.05)
    assert widened({"speedup": 1.0, "ci_low": None, "ci_high": 1.0}) is None
    # the pair: 1.286x [1.286, 1.321] and 1.368x [1.361, 1.369] did not overlap as rounds, and do across
    assert not overlaps([1.286, 1.321], [1.361, 1.369])
    assert overlaps(widened({"speedup": 1.286, "ci_low": 1.286, "ci_high": 1.321}),
                    widened({"speedup": 1.368, "ci_low": 1.361, "ci_high": 1.369}))
