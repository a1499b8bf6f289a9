"""The judge's timing rounds and its reference-output cache, without sandboxes: the rounds are the
outer loop and stop once every comparison is decided (or at the cap; on the interpreter at the
minimum), and a workload x seed's inputs and reference outputs are made once and handed out as
clones."""

import os
import types

import pytest
import torch

from accelopt.tools.harness import judge as judge_mod
from accelopt.tools.harness.judge import Judge, Reject, _Prepared, _ReferenceCache
from accelopt.tools.harness.timing_rounds import COPY

WORKLOADS = [{"name": "w1", "params": {"n": 1}}, {"name": "w2", "params": {"n": 2}}]


class Box:
    def __init__(self, name: str, child_cpu_per_call: float = 0.0):
        self.name, self.cpu, self.step = name, 0.0, child_cpu_per_call

    def others(self) -> tuple[float, int]:
        self.cpu += self.step
        return self.cpu, 0


class RoundsJudge(Judge):
    """A judge whose calls are timed by `times[name](round, workload)`, in µs."""

    def __init__(self, times, estimates=None):
        self.times, self.calls, self.reps = times, [], {}
        self.estimates = estimates or {}  # name -> µs a call in the calls that size the rounds

    def _time_round(self, box, req, ref, workload, r, reps, deadline, check, copy=False, candidate=True):
        us = self.estimates.get(box.name, 10.0) if r < 0 else self.times[box.name](r, workload["name"])
        if r >= 0:
            self.calls.append((r, workload["name"], box.name))
            self.reps.setdefault(box.name, set()).add(reps)
        return {"primary": [us] * 3, "kernel": [us] * 3, "event": [us] * 3, "metric": "gpu_span",
                "fresh_vs_seen": None}

    def _give_back_gpu_memory(self, req):
        pass

    def _copy_half(self, req, ref, workload):
        return 1 << 20

    def _fresh(self, ref, req, workload, seed, expect=True):
        return (), None

    def _outside(self, box, inputs, est_us, deadline):
        return 0.0


def _run(times, device="cuda", names=("candidate", "baseline", COPY), deadline_s=600.0, estimates=None, **req):
    judge = RoundsJudge(times, estimates)
    boxes = {n: Box(n) for n in names}
    request = {"device": device, "workloads": WORKLOADS, "rep_ms": 20.0, "seed": 0, **req}
    timings, rounds = judge.timing(boxes, request, None, judge_mod.time.monotonic() + deadline_s)
    return judge, timings, rounds


def steady(us):
    return lambda r, w: us * (1.0 + 0.001 * (r % 2))


def test_rounds_are_the_outer_loop_and_stop_once_decided():
    judge, timings, rounds = _run({"candidate": steady(10.0), "baseline": steady(20.0), COPY: steady(5.0)})
    assert (rounds["ran"], rounds["stopped"]) == (3, "decided")
    assert (rounds["min_rounds"], rounds["max_rounds"], rounds["noise_floor"]) == (3, 15, 0.02)
    # round r: every workload, each function in rotating order
    assert judge.calls[:6] == [(0, "w1", "candidate"), (0, "w1", "baseline"), (0, "w1", COPY),
                               (0, "w2", "candidate"), (0, "w2", "baseline"), (0, "w2", COPY)]
    assert judge.calls[6:9] == [(1, "w1", "baseline"), (1, "w1", COPY), (1, "w1", "candidate")]
    assert all(len(timings[n][w]["round_medians_us"]) == 3 for n in timings for w in ("w1", "w2"))


def test_each_function_gets_about_rep_ms_of_calls_a_round_within_bounds():
    # a 30 µs kernel against a 19 ms eager reference (a Python loop): the reference is not timed
    # for 40 calls a round because the kernel is fast; 20 ms of calls, at least 3, at most 40
    times = {"candidate": steady(30.0), "baseline": steady(19_000.0), COPY: steady(800.0)}
    judge, _, _ = _run(times, estimates={"candidate": 30.0, "baseline": 19_000.0, COPY: 800.0})
    assert judge.reps == {"candidate": {40}, "baseline": {3}, COPY: {25}}
    judge, _, _ = _run(times, estimates={"candidate": 30.0, "baseline": 4_000.0, COPY: 800.0})
    assert judge.reps["baseline"] == {5}


def test_an_undecided_comparison_stops_when_more_rounds_stop_narrowing_it_else_at_the_cap():
    noisy = lambda r, w: 15.0 if r % 2 else 25.0  # noqa: E731 - 1.5x or 2.5x faster, round by round
    _, timings, rounds = _run({"candidate": steady(10.0), "baseline": noisy, COPY: steady(5.0)})
    assert (rounds["ran"], rounds["stopped"]) == (6, "stalled")
    assert len(timings["baseline"]["w1"]["round_medians_us"]) == 6
    _, _, capped = _run({"candidate": steady(10.0), "baseline": noisy, COPY: steady(5.0)}, min_rounds=4, max_rounds=5)
    assert (capped["ran"], capped["stopped"], capped["min_rounds"]) == (5, "cap", 4)
    # an interval still narrowing round by round is given its rounds: 2x, with a wobble that shrinks
    narrowing = lambda r, w: 20.0 * (1 + (0.6 if r % 2 else -0.6) / (r + 1) ** 2)  # noqa: E731
    _, _, longer = _run({"candidate": steady(10.0), "baseline": narrowing, COPY: steady(5.0)})
    assert longer["ran"] > 6 and longer["stopped"] == "decided"


def test_equivalence_decides_and_the_copy_yardstick_is_no_comparison():
    noisy = lambda r, w: 5.0 if r % 2 else 9.0  # noqa: E731
    _, _, rounds = _run({"candidate": steady(10.0), "baseline": steady(10.02), COPY: noisy})
    assert (rounds["ran"], rounds["stopped"]) == (3, "decided")
    _, _, alone = _run({"candidate": steady(10.0), COPY: noisy}, names=("candidate", COPY))
    assert (alone["ran"], alone["stopped"]) == (3, "no_comparators")


def test_every_comparator_must_be_decided():
    noisy = lambda r, w: 15.0 if r % 2 else 25.0  # noqa: E731
    _, _, rounds = _run({"candidate": steady(10.0), "baseline": steady(20.0), "parent": noisy, COPY: steady(5.0)},
                        names=("candidate", "baseline", "parent", COPY))
    assert rounds["stopped"] == "stalled"


def test_the_interpreter_runs_its_minimum_only():
    noisy = lambda r, w: 15.0 if r % 2 else 25.0  # noqa: E731
    _, timings, rounds = _run({"candidate": steady(10.0), "baseline": noisy}, device="cpu", names=("candidate", "baseline"))
    assert (rounds["ran"], rounds["stopped"], rounds["max_rounds"]) == (2, "interpreter", 2)
    assert "outside_us" not in timings["candidate"]["w1"]


def test_rounds_stop_short_of_the_time_limit():
    noisy = lambda r, w: 15.0 if r % 2 else 25.0  # noqa: E731
    _, _, rounds = _run({"candidate": steady(10.0), "baseline": noisy, COPY: steady(5.0)}, deadline_s=0.0)
    assert (rounds["ran"], rounds["stopped"]) == (3, "time_limit")


def test_work_in_another_process_is_charged_to_its_workload():
    judge = RoundsJudge({"candidate": steady(10.0), "baseline": steady(20.0)})
    boxes = {"candidate": Box("candidate", child_cpu_per_call=0.1), "baseline": Box("baseline")}
    with pytest.raises(Reject, match="workload w1 timed calls: the call did work in another process"):
        judge.timing(boxes, {"device": "cpu", "workloads": WORKLOADS, "seed": 0}, None, judge_mod.time.monotonic() + 60)
    boxes["candidate"] = Box("candidate", child_cpu_per_call=0.1)
    judge.timing(boxes, {"device": "cpu", "workloads": WORKLOADS, "trusted": True, "seed": 0}, None,
                 judge_mod.time.monotonic() + 60)  # the task's own reference may use other processes


# ---------------------------------------------------------------- the reference-output cache

def test_the_cache_evicts_the_least_recently_used_and_keeps_nothing_too_large():
    cache = _ReferenceCache()

    def entry(n_floats):
        return _Prepared(inputs=(torch.zeros(n_floats),), expected=None)

    assert cache.put("a", entry(100), limit=1000) and cache.put("b", entry(100), limit=1000)
    assert cache.get("a") is not None  # a is now the most recently used
    assert cache.put("c", entry(100), limit=1000)
    assert set(cache.entries) == {"a", "c"} and cache.bytes == 800
    assert not cache.put("d", entry(1000), limit=1000) and set(cache.entries) == {"a", "c"}
    grown = cache.get("a")
    grown.expected = torch.zeros(200)  # its expected outputs came later: counted, and too large now
    assert not cache.put("a", grown, limit=1000) and set(cache.entries) == {"c"} and cache.bytes == 400


@pytest.fixture
def counting(tmp_path):
    path = tmp_path / "reference.py"
    path.write_text("# counted\n")
    made, ran = [], []

    def make_inputs(params, seed, device, dtype):
        made.append((params["n"], seed))
        return (torch.arange(4, dtype=torch.float32) + 10 * seed,)

    def reference(x):
        ran.append(float(x.sum()))
        return x * 2

    ref = types.SimpleNamespace(make_inputs=make_inputs, reference=reference)
    judge = Judge.__new__(Judge)  # no sandboxes: only what prepare uses
    judge.torch, judge.prepared = torch, _ReferenceCache()
    req = {"reference_path": str(path), "device": "cpu", "dtype": "float32"}
    return judge, ref, req, made, ran


def test_inputs_and_expected_outputs_are_made_once_and_handed_out_as_clones(counting):
    judge, ref, req, made, ran = counting
    inputs, expected = judge.prepare(ref, req, WORKLOADS[0], 3)
    inputs[0].fill_(-1.0)  # a kernel that writes into its inputs
    again, expected_again = judge.prepare(ref, req, WORKLOADS[0], 3)
    assert made == [(1, 3)] and len(ran) == 1 and expected_again is expected
    assert torch.equal(again[0], torch.arange(4, dtype=torch.float32) + 30)  # not the written-into clone
    # inputs first, without the reference (a comparator's timed call); its outputs once a call needs them
    judge.prepare(ref, req, WORKLOADS[1], 3, expect=False)
    assert len(ran) == 1
    judge.prepare(ref, req, WORKLOADS[1], 3)
    judge.prepare(ref, req, WORKLOADS[1], 3)
    assert made == [(1, 3), (2, 3)] and len(ran) == 2
    # another seed, dtype or a changed reference file is another key
    judge.prepare(ref, {**req, "dtype": "float16"}, WORKLOADS[0], 3)
    judge.prepare(ref, req, WORKLOADS[0], 4)
    stat = os.stat(req["reference_path"])
    os.utime(req["reference_path"], ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    judge.prepare(ref, req, WORKLOADS[0], 3)
    assert len(made) == len(ran) == 5


def test_inputs_too_large_to_keep_are_made_every_time(counting, monkeypatch):
    judge, ref, req, made, ran = counting
    monkeypatch.setitem(judge_mod.REFERENCE_CACHE_BYTES, "cpu", 16)  # 4 floats of inputs fit; with outputs, not
    judge.prepare(ref, req, WORKLOADS[0], 0, expect=False)
    judge.prepare(ref, req, WORKLOADS[0], 0, expect=False)
    assert len(made) == 1
    judge.prepare(ref, req, WORKLOADS[0], 0)
    judge.prepare(ref, req, WORKLOADS[0], 0)
    assert len(made) == 2 and len(ran) == 2 and not judge.prepared.entries


class HostJudge(RoundsJudge):
    """Spans from `times`, kernel-only times from `kernels` (µs)."""

    def __init__(self, times, kernels):
        super().__init__(times)
        self.kernels = kernels

    def _time_round(self, box, req, ref, workload, r, reps, deadline, check, copy=False, candidate=True):
        got = super()._time_round(box, req, ref, workload, r, reps, deadline, check, copy, candidate)
        got["kernel"] = [self.kernels[box.name]] * 3
        return got


def test_host_dominated_calls_stop_once_their_kernel_only_times_decide_and_report_each_rounds_kernel_median():
    noisy = lambda r, w: 15.0 if r % 2 else 25.0  # noqa: E731 - the spans scatter round by round
    times = {"candidate": steady(10.0), "baseline": noisy, COPY: steady(5.0)}
    host = HostJudge(times, {"candidate": 3.0, "baseline": 9.0, COPY: 5.0})  # kernels fill 30% of the spans
    boxes = {n: Box(n) for n in times}
    request = {"device": "cuda", "workloads": WORKLOADS, "rep_ms": 20.0, "seed": 0}
    timings, rounds = host.timing(boxes, request, None, judge_mod.time.monotonic() + 600)
    assert (rounds["ran"], rounds["stopped"]) == (3, "decided")
    assert timings["candidate"]["w1"]["round_kernel_us"] == [3.0, 3.0, 3.0]
    assert timings["baseline"]["w2"]["round_kernel_us"] == [9.0, 9.0, 9.0]
    # kernels that fill their calls: the span alone decides, and the same scatter is not decided
    filled = HostJudge(times, {"candidate": 10.0, "baseline": 19.0, COPY: 5.0})
    _, rounds = filled.timing({n: Box(n) for n in times}, request, None, judge_mod.time.monotonic() + 600)
    assert rounds["stopped"] == "stalled"
