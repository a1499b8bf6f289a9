"""Timed calls no kernel can tell apart (timing_rounds.TimingRounds._accountable_calls), on the CPU.

The sandbox here is a stand-in that speaks the sandbox's per-call protocol (sandbox.Sandbox.time_calls
with `steps`: "called" after each call, then the judge's "outputs" or "next") and runs a kernel given
as a Python function of (inputs, call index, calls). Everything the kernel can see is what a kernel in
a real sandbox sees: the input buffers' values, its own state, the call's index. The judge's side is
the real code; only the GPU is missing (spans are the kernel's own claim of its time).
"""

from __future__ import annotations

import re

import pytest
import torch

from accelopt.tools.harness import seeds
from accelopt.tools.harness.correctness import Reject
from accelopt.tools.harness.timing_rounds import TimingRounds, _fresh_not_slower

REQ = {"device": "cuda", "correctness": "allclose", "atol": 1e-5, "rtol": 1e-5, "seed": 12345, "trusted": False}
WORKLOAD = {"name": "w", "params": {}}


class StepBox:
    """A sandbox between the judge and `kernel(inputs, i, reps) -> (output, span_us)`."""

    def __init__(self, kernel):
        self.kernel, self.pending, self.killed, self.words = kernel, 0, False, []

    def send(self, op, deadline, **args):
        assert op == "time_calls" and args["steps"]
        self.pending += 1
        self.receive = args.get("receive")
        self.script, self.started = self._calls(args["inputs"], args["reps"]), False

    def hand_over(self, out):
        """As sandbox.Sandbox._outputs: into the judge's buffer where it fits, else the tensor."""
        if self.receive is not None and out.shape == self.receive[0].shape:
            self.receive[0].copy_(out)
            return [{"received": 0}]
        return [out.clone()]

    def _calls(self, inputs, reps):
        self.kernel(inputs, -1, reps)  # the warm-up, outputs unchecked
        spans = []
        for i in range(reps):
            out, span = self.kernel(inputs, i, reps)
            spans.append(span)
            word = yield ("called", None)
            while word == "outputs":
                word = yield ("outputs", self.hand_over(out))
            assert word == "next"
        yield ("ok", {"span_us": spans, "event_us": spans, "kernel_us": spans, "kernels": [], "known": [],
                      "tuned": [], "complete": True, "outputs": []})

    def step(self, deadline):
        message = self.script.send(self.words.pop(0)) if self.started else next(self.script)
        self.started = True
        if message[0] == "ok":
            self.pending -= 1
        return message

    def tell(self, word):
        self.words.append(word)

    def kill(self):
        self.killed = True


class Judge(TimingRounds):
    """The judge's timing mixin over inputs drawn from each seed (the task: doubling a vector)."""

    torch = torch

    def prepare(self, ref, req, workload, seed, where=None, expect=True):
        x = torch.randn(64, generator=torch.Generator().manual_seed(seed))
        return (x,), ((x * 2,) if expect else None)

    @staticmethod
    def seed(req, phase, index=0):
        return seeds.derived(req["seed"], phase, index)

    def _give_back_gpu_memory(self, req):
        pass


def honest(inputs, i, reps):
    return inputs[0] * 2, 50.0


def _round(kernel, r: int = 0, reps: int = 12, judge: Judge | None = None) -> dict:
    return (judge or Judge())._accountable_calls(StepBox(kernel), REQ, None, WORKLOAD, reps, float("inf"),
                                                 f"round {r}", True, ("timing", r))


def test_an_honest_kernel_passes_every_round_and_its_new_values_are_not_slower():
    rounds = [_round(honest, r) for r in range(8)]
    assert all(len(got["primary"]) == 12 for got in rounds)
    _fresh_not_slower([got["fresh_vs_seen"] for got in rounds if got["fresh_vs_seen"]], "w")


def test_a_kernel_honest_only_on_the_last_call_fails_at_a_call_the_judge_picked():
    """The attack of 2026-12: honest while it could be checked (once, on the last call, the only
    one on new values), its previous output on every other call."""
    def last_call_only(inputs, i, reps, kept={}):  # noqa: B006 - the kernel's own state between calls
        if i in (-1, reps - 1) or "out" not in kept:
            kept["out"] = inputs[0] * 2
        return kept["out"].clone(), 5.0

    with pytest.raises(Reject) as caught:
        for r in range(3):
            _round(last_call_only, r)
    assert caught.value.status == "cheat_suspected" and "not when timed" in caught.value.error
    assert "call" in caught.value.error and "of 12" in caught.value.error  # the call is named


def test_a_configuration_wrong_while_the_configurations_are_timed_is_wrong_not_a_cheat():
    """Timing the configurations to choose one comes before any check: a configuration that is
    wrong there (an honest kernel's tile too small for a row, say) gets the check's own status, with
    the phase and call named; after the checks, the same wrong output is a kernel that behaves only
    when checked."""
    def half_wrong(inputs, i, reps):
        out = inputs[0] * 2
        out[32:] = 0.0
        return out, 5.0

    with pytest.raises(Reject) as caught:
        Judge()._accountable_calls(StepBox(half_wrong), REQ, None, WORKLOAD, 12, float("inf"),
                                   "workload w, configuration 0 of k, choosing the configuration", True, ("tuning", 0),
                                   checked_before=False)
    assert caught.value.status == "wrong_output", caught.value.error
    assert re.match(r"workload w, configuration 0 of k, choosing the configuration, call \d+ of 12", caught.value.error)
    assert "not when timed" not in caught.value.error
    with pytest.raises(Reject) as after_checks:
        _round(half_wrong)
    assert after_checks.value.status == "cheat_suspected" and "correct when checked, not when timed" in after_checks.value.error


def test_a_kernel_that_skips_calls_at_random_is_caught_within_a_few_rounds():
    """It cannot know which calls are checked, so it bets: every call it skips may be one."""
    import random

    rng = random.Random(7)

    def sometimes(inputs, i, reps, kept={}):  # noqa: B006
        if "out" not in kept or rng.random() < 0.5:
            kept["out"] = inputs[0] * 2
        return kept["out"].clone(), 5.0

    with pytest.raises(Reject, match="not when timed"):
        for r in range(5):
            _round(sometimes, r)


def test_a_kernel_that_computes_only_when_the_values_change_is_slow_on_new_values():
    """It reads the inputs to tell a change (correct every time), and is fast only on values it
    has seen: the calls on values it never saw are slow in most rounds."""
    def memo(inputs, i, reps, kept={}):  # noqa: B006
        key = inputs[0][:4].tolist().__repr__()
        if key not in kept:
            kept[key] = inputs[0] * 2
            return kept[key].clone(), 200.0
        return kept[key].clone(), 20.0

    fresh = [got["fresh_vs_seen"] for r in range(6) if (got := _round(memo, r))["fresh_vs_seen"]]
    assert fresh
    with pytest.raises(Reject, match="fresh values was slower"):
        _fresh_not_slower(fresh, "w")


def test_the_judge_reads_outputs_after_each_change_and_some_others():
    """Which calls the judge reads, and when the values change, is drawn anew in every round."""
    box_words = []

    class Counting(StepBox):
        def tell(self, word):
            box_words.append(word)
            super().tell(word)

    judge = Judge()
    patterns = set()
    for r in range(6):
        before = len(box_words)
        judge._accountable_calls(Counting(honest), REQ, None, WORKLOAD, 12, float("inf"), "w", True, ("timing", r))
        patterns.add(tuple(box_words[before:]))
        assert box_words[before:].count("next") == 12 and box_words[before:].count("outputs") >= 1
    assert len(patterns) > 1


def test_wrong_outputs_at_a_picked_call_leave_the_sandbox_killed():
    """A sandbox stopped between two calls cannot be asked anything else: a comparator's is made anew."""
    def wrong(inputs, i, reps):
        return inputs[0] * 3, 50.0

    box = StepBox(wrong)
    with pytest.raises(Reject):
        Judge()._accountable_calls(box, REQ, None, WORKLOAD, 6, float("inf"), "w", True, ("timing", 0))
    assert box.killed


def test_seeds_differ_per_evaluation_and_replay_per_seed():
    drawn = {seeds.draw() for _ in range(50)}
    assert len(drawn) == 50 and all(0 <= s < 2**31 for s in drawn)
    assert seeds.derived(5, "check", 0) == seeds.derived(5, "check", 0)
    assert len({seeds.derived(5, phase, i) for phase in ("check", "timing", "ghost") for i in range(4)}) == 12


def test_every_comparator_is_checked_but_the_tasks_own_reference_and_the_copy():
    from accelopt.tools.harness.timing_rounds import COPY, _someones

    req = {**REQ, "own_comparators": ["eager", "torch_compile"]}
    assert _someones(req, "parent") and _someones(req, "baseline") and _someones(req, "against")
    assert not _someones(req, "eager") and not _someones(req, "torch_compile") and not _someones(req, COPY)
    assert not _someones({**req, "trusted": True}, "parent")  # a trusted request times torch comparators only


def test_checked_outputs_reach_the_judge_through_its_own_buffers_poisoned_before_each_read():
    """The judge shares one buffer per output for the request; the sandbox copies a checked call's
    outputs into it. An honest kernel passes so; a sandbox that claims the buffer without filling it
    leaves the judge's poison there, and one that claims a buffer the judge has none of is refused."""
    box = StepBox(honest)
    Judge()._accountable_calls(box, REQ, None, WORKLOAD, 12, float("inf"), "round 0", True, ("timing", 0))
    assert box.receive is not None and len(box.receive) == 1 and box.receive[0].shape == (64,)

    class Liar(StepBox):
        def hand_over(self, out):
            return [{"received": 0}]  # filled nothing

    with pytest.raises(Reject) as caught:
        Judge()._accountable_calls(Liar(honest), REQ, None, WORKLOAD, 12, float("inf"), "round 0", True, ("timing", 0))
    assert caught.value.status == "cheat_suspected" and "nan" in caught.value.error.lower(), caught.value.error

    class Stranger(StepBox):
        def hand_over(self, out):
            return [{"received": 3}]

    with pytest.raises(Reject) as strange:
        Judge()._accountable_calls(Stranger(honest), REQ, None, WORKLOAD, 12, float("inf"), "round 0", True,
                                   ("timing", 0))
    assert "a claim of the judge's buffer 3" in strange.value.error


def test_the_sandbox_copies_what_fits_the_judge_s_buffers_and_sends_the_rest(monkeypatch):
    """sandbox.Sandbox._outputs: an output of its buffer's shape and dtype is copied with the copy_
    saved before the kernel loaded (a patched Tensor.copy_ is not called); one that does not fit
    travels as a tensor, for the check to name the mismatch; a non-tensor as a description."""
    from types import SimpleNamespace

    from accelopt.tools.harness.sandbox import Sandbox

    saved = torch.Tensor.copy_
    box = SimpleNamespace(torch=torch, device="cpu", original={"torch.Tensor.copy_": saved})
    receive = [torch.full((4,), float("nan")), torch.full((2, 2), float("nan"))]
    out = (torch.arange(4.0), torch.ones(3), "text")

    def patched(*args, **kwargs):
        raise AssertionError("the kernel's copy_ was called")

    monkeypatch.setattr(torch.Tensor, "copy_", patched)  # what a kernel could do after the sandbox saved it
    sent = Sandbox._outputs(box, out, receive)
    monkeypatch.undo()
    assert sent[0] == {"received": 0} and torch.equal(receive[0], torch.arange(4.0))
    assert isinstance(sent[1], torch.Tensor) and torch.equal(sent[1], torch.ones(3)) and receive[1].isnan().all()
    assert sent[2]["not_a_tensor"] == "builtins.str"
    (alone,) = Sandbox._outputs(box, torch.arange(4.0))  # no buffers: the tensor itself
    assert isinstance(alone, torch.Tensor) and torch.equal(alone, torch.arange(4.0))
