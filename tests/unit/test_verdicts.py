"""Which timer a comparison is decided on (tools/harness/verdict.py): the span, unless the calls are
host-dominated, then kernel-only time; every verdict names its timer and carries both figures."""

import pytest

from accelopt.tools.harness.result import EvalResult, WorkloadTiming, compare_rounds
from accelopt.tools.harness.verdict import host_dominated, with_verdicts

# gqa_paged_decode as measured on an H100 (issue 52): the candidate's span 442 µs around 103.5 µs of
# kernels, the baseline's 498 µs around 326 µs; span rounds that scatter, kernel rounds that do not.
SPAN_CANDIDATE = [442.0, 560.0, 380.0, 520.0, 300.0, 540.0, 410.0, 600.0, 430.0]
SPAN_BASELINE = [498.0, 520.0, 470.0, 505.0, 480.0, 530.0, 490.0, 500.0, 515.0]
KERNEL_CANDIDATE = [103.5, 103.0, 104.1, 103.2, 103.8, 103.4, 103.6, 103.3, 103.9]
KERNEL_BASELINE = [326.0, 325.5, 326.4, 325.8, 326.9, 326.1, 325.7, 326.3, 326.0]


def timing(spans, kernels, kernel_us=None) -> WorkloadTiming:
    span = sorted(spans)[len(spans) // 2]
    return WorkloadTiming(median_us=span, iqr_us=1.0, samples=len(spans) * 10, round_medians_us=spans,
                          round_kernel_us=kernels,
                          kernel_us=kernel_us if kernel_us is not None else (sorted(kernels)[len(kernels) // 2]
                                                                            if kernels else None))


def result(candidate: WorkloadTiming, baseline: WorkloadTiming, timer: str = "cuda_event") -> EvalResult:
    r = EvalResult(status="verified", device="cuda" if timer == "cuda_event" else "cpu", timer=timer,
                   workloads={"b1": candidate}, compare={"baseline": {"b1": baseline}})
    r.versus = {"baseline": compare_rounds(r.workloads, r.compare["baseline"], timer=timer)}
    return with_verdicts(r)


def test_host_dominated_calls_are_decided_on_kernel_only_time_with_both_figures():
    r = result(timing(SPAN_CANDIDATE, KERNEL_CANDIDATE), timing(SPAN_BASELINE, KERNEL_BASELINE))
    span, kernel, v = r.versus["baseline"], r.versus_kernel["baseline"], r.verdicts["baseline"]
    assert not span.faster and span.ci_low < 1.02  # the span alone cannot say
    assert kernel.speedup == pytest.approx(326.0 / 103.5, rel=0.01) and kernel.faster
    assert (v.word, v.basis) == ("faster", "kernel_only") and v.speedup == kernel.speedup
    assert "host-dominated" in v.reason and "candidate kernels 103.5 of 442.0 µs" in v.reason
    assert "span 1." in v.reason and "kernel-only 3.1" in v.reason


def test_calls_their_kernels_fill_are_decided_on_the_span():
    spans_c, spans_b = [100.0, 101.0, 100.5, 100.2], [150.0, 151.0, 150.4, 150.8]
    r = result(timing(spans_c, [95.0, 95.5, 95.2, 95.1]), timing(spans_b, [140.0, 141.0, 140.2, 140.5]))
    v = r.verdicts["baseline"]
    assert (v.word, v.basis) == ("faster", "span") and v.speedup == pytest.approx(1.5, rel=0.01)
    assert "decided on the span" in v.reason and "kernel-only" in v.reason
    assert host_dominated(r, "baseline") == []


def test_an_interval_inside_the_floor_is_within_noise_and_one_across_a_bound_is_undecided():
    same = result(timing([100.0, 100.5, 99.8], [95.0] * 3), timing([100.2, 100.1, 99.9], [95.0] * 3))
    assert same.verdicts["baseline"].word == "within noise"
    straddling = result(timing([100.0, 80.0, 120.0], [90.0, 70.0, 110.0]), timing([100.0] * 3, [90.0] * 3))
    v = straddling.verdicts["baseline"]
    assert v.word == "undecided" and "no workload is host-dominated" in v.reason


def test_host_dominated_calls_without_kernel_rounds_stay_undecided_and_say_why():
    r = result(timing(SPAN_CANDIDATE, [], kernel_us=103.5), timing(SPAN_BASELINE, [], kernel_us=326.0))
    v = r.verdicts["baseline"]
    assert r.versus_kernel == {} and (v.word, v.basis) == ("undecided", "span")
    assert "no kernel-only rounds" in v.reason


def test_the_interpreter_gives_no_verdict_whatever_its_rounds_say():
    r = result(timing([100.0, 101.0], []), timing([1000.0, 1010.0], []), timer="interpreter_wall")
    v = r.verdicts["baseline"]
    assert (v.word, v.basis) == ("no verdict", "interpreter") and "cannot tell" in v.reason


def test_a_verdict_survives_the_json_round_trip():
    r = result(timing(SPAN_CANDIDATE, KERNEL_CANDIDATE), timing(SPAN_BASELINE, KERNEL_BASELINE))
    again = EvalResult.model_validate_json(r.model_dump_json())
    assert again.verdicts == r.verdicts and again.versus_kernel == r.versus_kernel


def test_check_prints_the_timer_that_decided_and_why(capsys):
    from pathlib import Path

    from accelopt.cli.check import show

    r = result(timing(SPAN_CANDIDATE, KERNEL_CANDIDATE), timing(SPAN_BASELINE, KERNEL_BASELINE))
    show(r, Path("k.py"))
    text = " ".join(capsys.readouterr().out.split())  # rich folds long lines
    kernel = r.versus_kernel["baseline"]
    assert f"vs baseline: {kernel.speedup:.3f}x" in text and "faster on kernel-only time" in text
    assert "why: host-dominated calls (b1: candidate kernels 103.5 of 442.0 µs" in text


def test_a_comparator_timed_far_slower_than_its_own_evaluation_voids_the_comparison():
    """A sandbagging parent: 2.6x slower as a comparator than when it was judged itself; an honest
    one within a few percent of its own time keeps its verdict."""
    from accelopt.tools.harness.verdict import void_comparisons

    spans_c, spans_b = [100.0, 101.0, 100.5, 100.2], [262.0, 263.0, 262.5, 261.8]
    padded = result(timing(spans_c, [95.0] * 4), timing(spans_b, [250.0] * 4))
    assert padded.verdicts["baseline"].word == "faster"
    void_comparisons(padded, {"baseline": {"b1": {"median_us": 101.0, "kernel_us": 96.0}}})
    v = padded.verdicts["baseline"]
    assert v.word == "undecided" and v.reason.startswith("void: it ran 2.60x slower as a comparator")
    assert "b1 262.5 µs against 101.0 µs" in v.reason and any("void" in line for line in padded.evidence)
    honest = result(timing(spans_c, [95.0] * 4), timing([103.0, 104.0, 103.5, 103.2], [98.0] * 4))
    void_comparisons(honest, {"baseline": {"b1": {"median_us": 98.0, "kernel_us": 93.0}}})  # 5% slower: noise
    assert honest.verdicts["baseline"].word == "faster" and not honest.void
    interpreted = result(timing(spans_c, []), timing(spans_b, []), timer="interpreter_wall")
    void_comparisons(interpreted, {"baseline": {"b1": {"median_us": 101.0}}})  # a wall clock under load: no evidence
    assert not interpreted.void


def test_a_comparator_the_judge_voided_is_said_once():
    from accelopt.tools.harness.verdict import void_comparisons

    r = result(timing([100.0] * 3, [95.0] * 3), timing([150.0] * 3, [140.0] * 3))
    r.void = {"baseline": "its outputs were wrong when timed as a comparator: x"}
    void_comparisons(r)
    void_comparisons(r, {})
    assert r.verdicts["baseline"].word == "undecided" and sum("void" in e for e in r.evidence) == 1


def test_a_run_never_ranks_a_child_above_a_parent_that_sandbagged_as_its_comparator(monkeypatch):
    """nodes/services._measure holds the parent's time as a comparator against its own evaluation's:
    2.6x slower there, the child's 2.6x is void and it does not beat its parent."""
    from accelopt.nodes import services
    from accelopt.nodes.context import RunContext

    spans_c = [100.0, 101.0, 100.5, 100.2]
    r = EvalResult(status="verified", device="cuda", timer="cuda_event", workloads={"b1": timing(spans_c, [95.0] * 4)},
                   compare={"baseline": {"b1": timing(spans_c, [95.0] * 4)},
                            "parent": {"b1": timing([262.0, 263.0, 262.5, 261.8], [250.0] * 4)}})
    r.versus = {k: compare_rounds(r.workloads, v, timer="cuda_event") for k, v in r.compare.items()}
    with_verdicts(r)

    class Backend:
        def evaluate(self, *args, **kwargs):
            return r.model_copy(deep=True)

    monkeypatch.setattr(services, "backend_for", lambda *a, **k: Backend())
    parent = {"id": "p", "source": "p", "workloads": {"b1": {"median_us": 101.0, "kernel_us": 96.0}}}
    baseline = {"id": "baseline", "source": "b"}
    fields = services._measure(None, "c", RunContext(device="cuda"), "cuda", {"baseline": "b", "parent": "p"},
                               baseline, parent, False)
    assert "slower as a comparator" in fields["void"]["parent"] and fields["speedup_vs_parent"] > 2.0
    assert not fields["beats_parent"] and not fields["loses_to_parent"]
    honest = {**parent, "workloads": {"b1": {"median_us": 255.0, "kernel_us": 245.0}}}
    fields = services._measure(None, "c", RunContext(device="cuda"), "cuda", {"baseline": "b", "parent": "p"},
                               baseline, honest, False)
    assert fields["beats_parent"] and not fields["void"]


def test_a_tie_whose_rounds_reach_past_a_bound_is_within_noise_in_every_draw():
    """Issue 65: one honest kernel at a tie was `within noise` in 5 processes and `undecided` in 3,
    0.999-1.000x each time. The word now depends on the interval and the floor alone: at a tie
    (the speedup inside the floor, the interval a figure) it is `within noise`, however the rounds
    fall. 300 draws of 3-15 rounds, each round 1.2% noisy: the old rule (inside the floor or
    undecided) says `undecided` in many of them."""
    import random

    rng = random.Random(7)
    words, straddled = set(), 0
    for _ in range(300):
        n = rng.randint(3, 15)
        base = [100.0 * rng.gauss(1.0, 0.012) for _ in range(n)]
        r = result(timing([100.0] * n, [95.0] * n), timing(base, [95.0] * n))
        words.add(r.verdicts["baseline"].word)
        straddled += not (1 / 1.02 <= r.versus["baseline"].ci_low and r.versus["baseline"].ci_high <= 1.02)
    assert words == {"within noise"} and straddled > 30


def test_the_reported_interval_is_the_rounds_widened_by_the_floor_and_clears_1_only_when_faster():
    faster = result(timing([100.0, 100.2, 99.9, 100.1], [95.0] * 4), timing([104.0, 104.5, 104.2, 103.9], [95.0] * 4))
    v = faster.verdicts["baseline"]
    assert v.word == "faster" and v.rounds_low == faster.versus["baseline"].ci_low
    assert v.ci_low == pytest.approx(v.rounds_low / 1.02) and v.ci_high == pytest.approx(v.rounds_high * 1.02)
    assert v.ci_low > 1.0
    near = result(timing([100.0, 100.2, 99.9, 100.1], [95.0] * 4), timing([102.5, 103.5, 101.0, 103.0], [95.0] * 4))
    assert near.verdicts["baseline"].word == "undecided" and near.verdicts["baseline"].ci_low < 1.0


def test_intervals_across_evaluations_hold_each_others_figures():
    """Ten evaluations of one program whose figures differ by a between-evaluation effect (0.6%
    standard deviation, as wide as the H200's 10-process spread of issue 56 and then some) beyond
    their rounds' noise: every pair of reported intervals overlaps, where the rounds' own intervals
    do not."""
    import random

    rng = random.Random(3)
    reported, rounds = [], []
    for _ in range(10):
        shift = rng.gauss(0.0, 0.006)
        cand = [100.0 * rng.gauss(1.0, 0.001) for _ in range(4)]
        base = [137.5 * (1 + shift) * rng.gauss(1.0, 0.001) for _ in range(4)]
        v = result(timing(cand, [95.0] * 4), timing(base, [95.0] * 4)).verdicts["baseline"]
        reported.append((v.ci_low, v.ci_high))
        rounds.append((v.rounds_low, v.rounds_high))

    def all_overlap(intervals):
        return all(a[0] <= b[1] and b[0] <= a[1] for a in intervals for b in intervals)

    assert all_overlap(reported) and not all_overlap(rounds)


class _AloneBackend:
    """A backend whose evaluation of the --against kernel alone gives `own` (check_kernel's second call)."""

    def __init__(self, own: EvalResult):
        self.own, self.calls = own, []

    def evaluate(self, task, source, *, device, timeout_s, compare, trusted, seed=None):
        self.calls.append((source, device, compare, trusted))
        return self.own


def _against(spans_c, spans_a) -> EvalResult:
    r = EvalResult(status="verified", device="cuda", timer="cuda_event", workloads={"b1": timing(spans_c, [95.0] * 4)},
                   compare={"against": {"b1": timing(spans_a, [250.0] * 4)}})
    r.versus = {"against": compare_rounds(r.workloads, r.compare["against"], timer="cuda_event")}
    return with_verdicts(r)


def test_an_against_kernel_that_pads_only_when_compared_voids_check_s_comparison():
    """`check --against K` on a GPU also evaluates K alone, untrusted, with nothing to compare: 2.6x
    slower as the comparator than alone, the comparison is void; as fast, it stands, and says so;
    failing alone, it is void with K's status."""
    from accelopt.tools.harness.check_kernel import hold_against_to_its_own_time

    spans_c, padded = [100.0, 101.0, 100.5, 100.2], [262.0, 263.0, 262.5, 261.8]
    alone = EvalResult(status="verified", device="cuda", timer="cuda_event", seed=7,
                       workloads={"b1": timing([101.0] * 4, [96.0] * 4)})
    backend = _AloneBackend(alone)
    sandbagged = _against(spans_c, padded)
    assert sandbagged.verdicts["against"].word == "faster"
    hold_against_to_its_own_time(backend, None, "K", sandbagged, 60.0)
    assert backend.calls == [("K", "cuda", {}, False)] and "against_alone" in sandbagged.phases_s
    v = sandbagged.verdicts["against"]
    assert v.word == "undecided" and v.reason.startswith("void: it ran 2.60x slower as a comparator")

    honest = _against(spans_c, [262.0, 263.0, 262.5, 261.8])
    backend.own = alone.model_copy(update={"workloads": {"b1": timing([260.0] * 4, [249.0] * 4)}})
    hold_against_to_its_own_time(backend, None, "K", honest, 60.0)
    assert honest.verdicts["against"].word == "faster" and not honest.void
    assert "vs against: evaluated alone too (seed 7), it ran as fast alone as when compared, within noise" in honest.evidence

    failing = _against(spans_c, padded)
    backend.own = EvalResult(status="wrong_output", device="cuda", error="max abs err 3.0 at b1\nmore")
    hold_against_to_its_own_time(backend, None, "K", failing, 60.0)
    assert failing.verdicts["against"].word == "undecided"
    assert failing.void["against"] == "the --against kernel failed its own evaluation (wrong_output: max abs err 3.0 at b1)"

    backend.calls.clear()
    failed_candidate = EvalResult(status="wrong_output", device="cuda")
    hold_against_to_its_own_time(backend, None, "K", failed_candidate, 60.0)
    assert backend.calls == []  # nothing to hold: no comparison was made
