"""The judge's timing rounds: the candidate timed interleaved with its comparators.

The comparators (baseline, parent, the task's own reference) and the copy yardstick of
memory-bound kernels start in sandboxes of their own while the candidate is checked, and make
their first calls then, so their kernels compile before anything is timed. Rounds are the outer
loop: in round r every workload, each function in rotating order; on a GPU the rounds go on
until every comparison of the candidate is decided (stats.py), at most a cap. On a GPU no timed
call can tell whether it is checked or its inputs are new (`_accountable_calls`); on the
interpreter every timed call gets fresh inputs and is checked. Every comparator's outputs but the
task's own reference's are checked too (a comparator wrong when timed is void, `self.void`). Over
all its rounds, the candidate's calls on fresh values must not be slower than on values seen
before, and no work may run in other processes. What each function's rounds gathered becomes its
summary: the median and spread of its samples, each round's median, the secondary figures.

`TimingRounds` is a mixin of the judge (judge.py `Judge`), whose inputs, expected outputs and
trace check it uses. Loaded by path beside judge.py (a script that imports nothing of the
accelopt package), or imported as part of the package.
"""

from __future__ import annotations

import collections
import importlib.util
import math
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

# Calls per timed round, per function: about rep_ms of its own timed work, within these bounds. Each
# call takes 1 ms of cover plus an L2 flush whatever the kernel, and the rounds (at least 3), not
# the calls within one, are what the interval is made of; so a comparator 600x slower than the
# candidate (an eager reference's Python loop: 1.7 s a call on gqa_paged_decode's batch of 64) is
# not timed for 600x the candidate's share. 3: the fewest whose median drops one outlier.
MIN_REPS = 3
MAX_REPS = 40
# Timing rounds: at least MIN, then until every comparison is decided (stats.decided), at most MAX.
# The interpreter runs its minimum only: its times are a CPU emulation's wall clock, and more
# rounds of it buy nothing.
MIN_ROUNDS = {"cuda": 3, "cpu": 2}
MAX_ROUNDS_GPU = 15
WARM_BYTES = 2 << 30    # a new comparator's first calls are sent with the checks up to this much input
# Where the timing step's seconds go (RoundsRun.parts_s); "other" is the rest of the step.
TIMING_PARTS = ("inputs", "calls", "output_checks", "input_writes", "trace_checks", "other")
# Timed calls on a GPU (_accountable_calls): the share of calls on unchanged inputs whose outputs
# the judge reads anyway, the chance of a switch between the two input sets before each call
# after the first change, and the inputs' size up to which the judge keeps the base set's values
# to switch back to (beyond it, one change per round: a KernelBench input is 6 GB). A check costs
# the judge's clock (an output against the reference in float64), so the shares are what makes a
# gain undetectable improbable, no more: about 9 of 40 calls are read (every change, then 10% of
# the rest); a kernel that skips its work on 5% of the calls (a 5% gain: past the noise floor)
# escapes all of one check's ~120 reads with probability 0.2%.
CHECK_SHARE = 0.1
SWITCH_SHARE = 0.15
SWITCH_BYTES = 1 << 30
_RNG = random.SystemRandom()  # the operating system's randomness: nothing a kernel can seed or read
# The yardstick of memory-bound kernels: a device copy of a workload's bytes, timed beside them.
COPY = "copy_yardstick"  # its timings' key: no comparator of a request is named so
COPY_SOURCE = '''"""The judge's copy yardstick: half a workload's bytes read, half written."""


def copy_bytes(source, destination):
    destination.copy_(source)  # nothing handed back: a CUDA tensor received over IPC cannot be sent again
'''


def _load_sibling(name: str, filename: str):
    """A file beside this one: imported as part of the package, the package's own module; in the
    judge (a script that imports nothing of the package), the one judge.py's `_load_sibling`
    loaded by path under `name` before this file."""
    if __package__:
        return importlib.import_module(f"{__package__}.{filename.removesuffix('.py')}")
    return sys.modules[name]


correctness = _load_sibling("accelopt_correctness", "correctness.py")  # the correctness rules (evaluators)
stats = _load_sibling("accelopt_stats", "stats.py")  # the statistic the timing rounds stop on
judge_sandboxes = _load_sibling("accelopt_judge_sandboxes", "judge_sandboxes.py")  # the sandboxes timed
if TYPE_CHECKING:  # how mypy names them (the judge, a script, loads the files by path)
    from accelopt.tools.harness.correctness import Reject
    from accelopt.tools.harness.judge_sandboxes import Sandbox, Sandboxes, SandboxFailure, _call_mode, _owned
else:
    Reject = correctness.Reject
    Sandbox, Sandboxes, SandboxFailure = (
        judge_sandboxes.Sandbox, judge_sandboxes.Sandboxes, judge_sandboxes.SandboxFailure)
    _call_mode, _owned = judge_sandboxes._call_mode, judge_sandboxes._owned


@dataclass
class _WorkloadRounds:
    """One workload's share of the timing rounds: who is timed on it, how many calls per round
    each, and what the rounds gathered."""
    workload: dict
    names: list[str]
    reps: dict[str, int]
    pooled: dict = field(default_factory=dict)     # name -> primary/kernel/event samples, metric
    rounds: dict = field(default_factory=dict)     # name -> median of each round's primary samples
    kernel_rounds: dict = field(default_factory=dict)  # name -> each round's median kernel-only time, or None
    fresh_vs_seen: list = field(default_factory=list)
    child_cpu_s: float = 0.0   # the candidate's children's CPU time that grew over its calls
    children: int = 0          # its children alive after its last call

    def __post_init__(self):
        self.pooled = {n: collections.defaultdict(list) for n in self.names}
        self.rounds = {n: [] for n in self.names}
        self.kernel_rounds = {n: [] for n in self.names}

    def kernel_only(self, name: str) -> list[float]:
        """The function's kernel-only round medians; [] unless every round has one (a round whose
        trace lost its calls has none, and the rounds would no longer pair up)."""
        got = self.kernel_rounds.get(name) or []
        return [] if any(k is None for k in got) else got

    def host_dominated(self, name: str) -> bool:
        """Its calls' kernels fill less than stats.HOST_BOUND_SHARE of their span, so far."""
        p = self.pooled.get(name) or {}
        return bool(p.get("kernel") and p.get("primary")) and stats.host_bound(
            statistics.median(p["kernel"]), statistics.median(p["primary"]))


def _round_limits(req: dict) -> tuple[int, int]:
    """(minimum, cap) of the timing rounds; on the interpreter the cap is the minimum."""
    low = max(1, int(req.get("min_rounds") or MIN_ROUNDS.get(req["device"], 2)))
    if req["device"] != "cuda":
        return low, low
    return low, max(low, int(req.get("max_rounds") or MAX_ROUNDS_GPU))


class TimingRounds:
    """The judge's comparators and timing rounds (a mixin of judge.py's `Judge`). The judge
    provides `torch`, `boxes` (its Sandboxes), `readable` (what every sandbox may read), `seen`
    (every kernel the traced calls ran), `prepare` (a workload x seed's inputs and the reference's
    outputs), `_foreign` (the trace check) and `_give_back_gpu_memory`."""

    parts: dict[str, float] | None = None  # the timing step's seconds by TIMING_PARTS, while it runs

    if TYPE_CHECKING:
        torch: Any
        boxes: Sandboxes | None
        readable: list[str]
        seen: set[str]

        def prepare(self, ref, req: dict, workload: dict, seed: int, where: str | None = None,
                    expect: bool = True) -> Any: ...

        @staticmethod
        def seed(req: dict, phase: str, index: int = 0) -> int: ...

        @staticmethod
        def _foreign(req: dict, seen: list[str], launched: list[str], where: str) -> None: ...

        def _give_back_gpu_memory(self, req: dict) -> None: ...

    # -------------------------------------------------------------- the comparators

    def _start_comparators(self, req: dict, ref, deadline: float) -> dict[str, Sandbox]:
        """Every comparator's sandbox (and the copy yardstick's) with its load sent; a new one also
        gets one call per workload (small enough inputs) sent, so its kernels compile now."""
        sandboxes = self.boxes
        assert sandboxes is not None  # evaluate starts them first
        sources = {name: (path, req["entry_point"]) for name, path in (req.get("compare") or {}).items()}
        if req.get("copy_yardstick") and req["device"] == "cuda":
            path = os.path.join(sandboxes.root, "copy_yardstick.py")
            with open(path, "w") as f:
                f.write(COPY_SOURCE)
            sources[COPY] = (path, "copy_bytes")
        boxes: dict[str, Sandbox] = {}
        self.warming: list = []
        for name, (path, entry) in sources.items():
            try:
                other, new = sandboxes.comparator(path, entry, self.readable, deadline)
                boxes[name] = other
                if new:  # loading; its first calls follow the load
                    for workload in req["workloads"] if req["device"] == "cuda" else []:
                        inputs = self._warm_inputs(req, ref, workload, copy=name == COPY)
                        if inputs is not None:  # kept until answered: the sandbox maps them
                            self.warming.append(inputs)
                            other.send("batch", deadline, inputs=list(inputs), n=1)
            except SandboxFailure as f:
                raise _comparator_failed(name, f) from None
        return boxes

    def _warm_inputs(self, req: dict, ref, workload: dict, copy: bool):
        """A comparator's first call's inputs: the first timing round's, which the judge keeps
        (prepare); None where they are too large to hold beside the checks."""
        if copy:
            half = self._copy_half(req, ref, workload)
            return self._copy_inputs(req, ref, workload)[0] if 1 <= half <= WARM_BYTES // 2 else None
        inputs, _ = self._fresh(ref, req, workload, self.seed(req, "timing", 0), expect=False)
        return inputs if _nbytes(inputs) <= WARM_BYTES else None

    def _await_comparators(self, boxes: dict[str, Sandbox], deadline: float) -> None:
        """Every answer the comparators owe (their loads and first calls), before any timing."""
        for name, other in boxes.items():
            try:
                while name != "candidate" and other.pending:
                    other.answer(deadline)
            except SandboxFailure as f:
                raise _comparator_failed(name, f) from None
        self.warming.clear()

    # -------------------------------------------------------------- the rounds

    def _time_round(self, box, req, ref, workload, r: int, reps: int, deadline: float, check: bool,
                    copy: bool = False, candidate: bool = True) -> dict:
        """One function's share of round r. `check`: its outputs are checked (the candidate's, and
        every comparator's but the trusted ones: a comparator is someone's kernel too); on the
        interpreter every call gets fresh inputs and is checked, on a GPU the judge checks the
        calls it picks once they are over (`_accountable_calls`). `candidate`: its traces are
        checked too and its checked calls poisoned. The copy yardstick (`copy`) runs on buffers of
        the workload's bytes, not on its inputs."""
        torch = self.torch
        where = f"workload {workload['name']} timed call (round {r})"
        if req["device"] != "cuda":  # interpreter: the judge's own clock around each call
            samples = []
            for i in range(req["interpreter_reps"]):
                inputs, expected = self._fresh(ref, req, workload,
                                               self.seed(req, "timed_call", r * req["interpreter_reps"] + i),
                                               expect=check)
                start = time.perf_counter()
                # traced like the checked calls (every function alike): interpreter times are labelled
                # wall clock anyway, and an untraced call is the one a kernel would cheat in
                reply = box.request("call", deadline, inputs=list(inputs), where="timed call",
                                    poison=check and candidate, mode=_call_mode(req))
                samples.append((time.perf_counter() - start) * 1e6)
                if check:
                    _check_timed(torch, req, _owned(torch, reply["outputs"]), expected, where)
                if check and candidate:
                    self._foreign(req, reply["trace"] or [], reply["known"], where)
            return {"primary": samples, "metric": "interpreter_wall"}
        if copy:
            inputs, _ = self._copy_inputs(req, ref, workload)
            reply = box.request("time_calls", deadline, inputs=list(inputs), reps=reps)
            got = _primary(reply, reps)
            return {**got, "fresh_vs_seen": None}
        got = self._accountable_calls(box, req, ref, workload, reps, deadline, where, check,
                                      ("timing", r) if r >= 0 else ("estimate", 0))
        if check and candidate:
            clock = time.monotonic()
            self._foreign(req, got["kernels"], got["known"], where)
            self.seen.update(got["kernels"])
            self._spent("trace_checks", clock)
        return got

    def _spent(self, part: str, since: float) -> float:
        """Adds the seconds since `since` to the timing step's `part` (TIMING_PARTS); returns now."""
        now = time.monotonic()
        if self.parts is not None:  # None outside the timing step (the configurations timed before it)
            self.parts[part] += now - since
        return now

    def _accountable_calls(self, box, req, ref, workload, reps: int, deadline: float, where: str, check: bool,
                           chain: tuple[str, int], checked_before: bool = True) -> dict:
        """`reps` timed calls in which no call can tell whether it is checked or whether its inputs
        are new. The calls start on the chain's base set (its index's seed) and move to the next
        set (index + 1) at a random call after the first, then switch between the two at random;
        the judge writes each change into the shared input buffers itself, between calls, in its
        own process. After each call it decides whether to read the outputs: every call whose
        inputs changed, and a random share of the others (CHECK_SHARE). A stale output fails at a
        change; a kernel that computes only when the values change is slow on the calls on values
        it never saw (`fresh_vs_seen`, judged over the rounds). Inputs too large to keep a second
        copy of (SWITCH_BYTES) change once."""
        torch = self.torch
        phase, index = chain
        clock = time.monotonic()
        base, base_expected = self._fresh(ref, req, workload, self.seed(req, phase, index), expect=check)
        fresh, fresh_expected = self._fresh(ref, req, workload, self.seed(req, phase, index + 1), expect=check)
        pristine = None
        if _nbytes(base) <= SWITCH_BYTES:  # the base values again, to switch back to
            pristine = self._fresh(ref, req, workload, self.seed(req, phase, index), expect=False)[0]
        clock = self._spent("inputs", clock)
        sets = _call_sets(reps, switching=pristine is not None)
        expected = (base_expected, fresh_expected)
        buffers = list(base)
        receive = _receive_buffers(torch, base_expected) if check else None
        box.send("time_calls", deadline, inputs=buffers, reps=reps, steps=True, receive=receive)
        try:
            for i in range(reps):
                self._called(box, deadline)
                clock = self._spent("calls", clock)
                changed = sets[i] != (sets[i - 1] if i else 0)
                if check and (changed or _RNG.random() < CHECK_SHARE):
                    _poison(torch, receive)  # a buffer the sandbox claims but did not fill fails
                    box.tell("outputs")
                    _check_timed(torch, req, _received(self._outputs(box, deadline), receive), expected[sets[i]],
                                 f"{where}, call {i + 1} of {reps}" + (" (its inputs new)" if changed else ""),
                                 checked_before)
                    clock = self._spent("output_checks", clock)
                if i + 1 < reps and sets[i + 1] != sets[i]:
                    source = fresh if sets[i + 1] else pristine
                    _write(torch, buffers, source or [])
                    clock = self._spent("input_writes", clock)
                box.tell("next")
            kind, reply = box.step(deadline)
            self._spent("calls", clock)
        except (Reject, SandboxFailure) as failure:
            if isinstance(failure, Reject) or not failure.dead and box.pending:
                box.kill()  # left between two calls: nothing more can be asked of it (a comparator's is made anew)
            raise
        got = _primary(reply, reps)
        spans = reply["span_us"]
        first = sets.index(1) if 1 in sets else -1
        seen = [spans[i] for i in range(reps) if sets[i] == (sets[i - 1] if i else 0)] if reply.get("complete") else []
        fresh_vs_seen = (spans[first], statistics.median(seen)) if check and first > 0 and len(seen) >= 2 else None
        return {**got, "fresh_vs_seen": fresh_vs_seen, "kernels": reply["kernels"], "known": reply["known"],
                "tuned": reply.get("tuned")}

    @staticmethod
    def _called(box, deadline: float) -> None:
        kind, _ = box.step(deadline)
        if kind != "called":
            raise SandboxFailure("runtime_error", f"the sandbox answered {kind!r} between timed calls")

    @staticmethod
    def _outputs(box, deadline: float) -> list:
        kind, outs = box.step(deadline)
        if kind != "outputs":
            raise SandboxFailure("runtime_error", f"the sandbox answered {kind!r} when asked for a call's outputs")
        return outs

    def _fresh(self, ref, req, workload, seed: int, expect: bool = True):
        return self.prepare(ref, req, workload, seed, expect=expect)

    def _outside(self, box, inputs, est_us: float, deadline: float) -> float:
        n = int(min(200, max(3, 20_000 / max(est_us, 1.0))))
        start = time.perf_counter()
        box.request("batch", deadline, inputs=list(inputs), n=0)
        overhead = time.perf_counter() - start
        start = time.perf_counter()
        box.request("batch", deadline, inputs=list(inputs), n=n)
        return max(0.0, time.perf_counter() - start - overhead) * 1e6 / n

    @staticmethod
    def _copy_half(req, ref, workload) -> int:
        """Bytes the copy yardstick reads, and writes: half the workload's bytes_moved each."""
        return int(float(ref.bytes_moved(workload["params"], req["dtype"])) // 2)

    def _copy_inputs(self, req, ref, workload) -> tuple[list, None]:
        """The copy yardstick's (source, destination)."""
        half = self._copy_half(req, ref, workload)
        return [self.torch.empty(half, dtype=self.torch.uint8, device="cuda") for _ in range(2)], None

    def timing(self, boxes: dict, req, ref, deadline: float) -> tuple[dict, dict]:
        """Rounds are the outer loop: in round r every workload, each function in rotating order.
        From the minimum on (_round_limits), the rounds stop once the candidate's comparison with
        every comparator (not the copy yardstick) is decided (stats.decided, req["noise_floor"]),
        else at the cap, or where another round would not fit in the time left. Returns the
        timings, per function and workload, and what ran: {"ran", "stopped", ...}."""
        low, high = _round_limits(req)
        began_timing = time.monotonic()
        self.parts = spent = dict.fromkeys(TIMING_PARTS, 0.0)
        floor = float(req.get("noise_floor", stats.NOISE_FLOOR))
        self.void: dict[str, str] = {}  # comparators whose comparison is void, and why
        plans = [self._plan_rounds(boxes, req, ref, workload, deadline) for workload in req["workloads"]]
        last = boxes["candidate"].others()
        ran, stopped = 0, "cap"
        widths: dict[int, float] = {}  # after each round: the widest interval's share of its speedup
        for r in range(high):
            began = time.monotonic()
            for plan in plans:
                last = self._one_round(boxes, req, ref, plan, r, deadline, last)
            ran = r + 1
            comparators = [n for n in boxes if n not in ("candidate", COPY) and n not in self.void]
            if ran < low:
                continue
            if req["device"] != "cuda":
                stopped = "interpreter"
            elif not comparators:
                stopped = "no_comparators"
            elif self._decided(plans, comparators, floor, widths, ran):
                stopped = "decided"
            elif stats.stalled(widths):
                stopped = "stalled"
            elif ran < high and time.monotonic() + 2 * (time.monotonic() - began) > deadline:
                stopped = "time_limit"  # fewer rounds, rather than a verified candidate timed out
            else:
                continue
            break
        out: dict = {name: {} for name in boxes if name not in self.void}
        for plan in plans:
            for name, summary in self._after_rounds(boxes, req, ref, plan, deadline).items():
                out[name][plan.workload["name"]] = summary
        self.parts = None
        spent["other"] = max(0.0, time.monotonic() - began_timing - sum(spent.values()))
        # on the interpreter every call is its own request: nothing to split
        parts = {k: round(v, 3) for k, v in spent.items()} if req["device"] == "cuda" else None
        return out, {"ran": ran, "stopped": stopped, "min_rounds": low, "max_rounds": high, "noise_floor": floor,
                     "parts_s": parts}

    def _plan_rounds(self, boxes: dict, req, ref, workload, deadline: float) -> _WorkloadRounds:
        """Who is timed on the workload, and how many calls per round each: on a GPU enough for
        about rep_ms of its timed work, estimated from a few of its calls (unchecked: the rounds
        check the candidate's)."""
        # the copy times on buffers of its own; a workload that moves no bytes has none
        names = [n for n in boxes if n != COPY or self._copy_half(req, ref, workload) >= 1]
        reps = dict.fromkeys(names, MIN_REPS)
        if req["device"] == "cuda":
            for name in names:
                est = self._time_round(boxes[name], req, ref, workload, -1, 3, deadline, check=False,
                                       copy=name == COPY)
                self._give_back_gpu_memory(req)
                per_call_us = max(statistics.median(est["primary"]), 1.0)
                reps[name] = int(min(MAX_REPS, max(MIN_REPS, req["rep_ms"] * 1e3 / per_call_us)))
        return _WorkloadRounds(workload=workload, names=names, reps=reps)

    def _one_round(self, boxes: dict, req, ref, plan: _WorkloadRounds, r: int, deadline: float,
                   last: tuple[float, int]) -> tuple[float, int]:
        """Round r of one workload, every function in its turn. `last`: the candidate's children
        as last read (Sandbox.others); what they grew by since is charged to this workload, so
        no work in another process falls between two readings. Returns the new reading."""
        names = plan.names
        for name in names[r % len(names):] + names[: r % len(names)]:
            if name in self.void:
                continue
            try:
                got = self._time_round(boxes[name], req, ref, plan.workload, r, plan.reps[name], deadline,
                                       check=name == "candidate" or _someones(req, name),
                                       copy=name == COPY, candidate=name == "candidate")
            except SandboxFailure as f:
                whose = "" if name == "candidate" else f" (comparator {name!r}, not the kernel under test)"
                raise Reject(f.status, f"while timing{whose}: {f.error}") from None
            except Reject as rj:
                if name == "candidate" or rj.status == "reference_error":
                    raise
                # A comparator is someone's kernel too (an LLM-written parent, an --against kernel):
                # wrong outputs when timed void the comparison with it, not the candidate's verdict.
                self.void[name] = f"its outputs were wrong when timed as a comparator: {rj.error}"
                continue
            self._give_back_gpu_memory(req)  # the round's inputs and outputs
            if name == "candidate":
                now = boxes["candidate"].others()
                plan.child_cpu_s += now[0] - last[0]
                plan.children, last = now[1], now
            for key in ("primary", "kernel", "event"):
                plan.pooled[name][key] += got.get(key) or []
            plan.pooled[name]["metric"] = got["metric"]
            plan.rounds[name].append(statistics.median(got["primary"]))
            plan.kernel_rounds[name].append(statistics.median(got["kernel"]) if got.get("kernel") else None)
            if name == "candidate" and got.get("fresh_vs_seen"):
                plan.fresh_vs_seen.append(got["fresh_vs_seen"])
        return last

    @staticmethod
    def _decided(plans: list[_WorkloadRounds], comparators: list[str], floor: float,
                 widths: dict[int, float], ran: int) -> bool:
        """Every comparison of the candidate decided, on the rounds so far (stats.py): on the span,
        or, where the calls are host-dominated (the candidate's or the comparator's on some
        workload), on kernel-only time (tools/harness/verdict.py decides the same way). Records the
        widest interval's share of its speedup in `widths[ran]`, each comparison's on the timer
        that can decide it."""
        decided, widths[ran] = True, 0.0
        for name in comparators:
            ratios = _ratios(plans, name, lambda p, n: p.rounds[n])
            if not ratios:
                widths[ran] = math.inf
                return False
            iv = stats.interval(ratios)
            width, settled = stats.width(iv), stats.decided(iv, floor)
            if not settled and any(p.host_dominated("candidate") or p.host_dominated(name) for p in plans):
                kernel = _ratios(plans, name, lambda p, n: p.kernel_only(n))
                if kernel:
                    kiv = stats.interval(kernel)
                    width, settled = min(width, stats.width(kiv)), stats.decided(kiv, floor)
            widths[ran] = max(widths[ran], width)
            decided = decided and settled
        return decided

    def _after_rounds(self, boxes: dict, req, ref, plan: _WorkloadRounds, deadline: float) -> dict:
        """The workload's checks over all its rounds, then each function's summary."""
        where = f"workload {plan.workload['name']} timed calls"
        if not req.get("trusted"):
            _same_processes((0.0, 0), (plan.child_cpu_s, plan.children), where)
        _fresh_not_slower(plan.fresh_vs_seen, where)
        inputs = self._fresh(ref, req, plan.workload, self.seed(req, "timing", 0), expect=False)[0]
        shape = _largest_shape(inputs)
        out = {}
        for name in plan.names:
            if name in self.void:
                continue
            p = plan.pooled[name]
            summary = _summary(p["primary"])
            summary.update(round_medians_us=plan.rounds[name], metric=p["metric"], input_shape=shape,
                           round_kernel_us=plan.kernel_only(name))
            if req["device"] == "cuda":
                summary["kernel_us"] = statistics.median(p["kernel"]) if p["kernel"] else None
                summary["event_us"] = statistics.median(p["event"]) if p["event"] else None
                if name != COPY:  # the bound on what a candidate claims; a comparator's: the host cost honest calls pay
                    summary["outside_us"] = self._outside(boxes[name], inputs, summary["median_us"], deadline)
                summary["disagreement"] = _disagreement(summary)
            out[name] = summary
        return out


def _ratios(plans: list[_WorkloadRounds], name: str, rounds) -> list[float]:
    """Per round, the candidate's ratio to `name` over the workloads both were timed on;
    `rounds(plan, function)` picks which round medians (span or kernel-only)."""
    mine = {p.workload["name"]: rounds(p, "candidate") for p in plans}
    theirs = {p.workload["name"]: rounds(p, name) for p in plans if name in p.rounds}
    return stats.round_ratios(mine, theirs)


def _someones(req: dict, name: str) -> bool:
    """A comparator that is someone's kernel (a baseline, a parent, an --against kernel), not the
    copy yardstick or the task's own reference: its timed outputs are checked."""
    return name != COPY and not req.get("trusted") and name not in (req.get("own_comparators") or ())


def _call_sets(reps: int, switching: bool) -> list[int]:
    """Which input set each timed call runs on (0 the base, 1 the fresh): the base first (the
    warm-up ran on it), the fresh set from a random call on, then, `switching`, a switch before
    each later call with probability SWITCH_SHARE. Drawn in the judge, never sent anywhere."""
    first = _RNG.randrange(1, reps) if reps > 1 else reps
    sets, current = [], 0
    for i in range(reps):
        if i == first:
            current = 1
        elif i > first and switching and _RNG.random() < SWITCH_SHARE:
            current ^= 1
        sets.append(current)
    return sets


def _write(torch, buffers: list, values) -> None:
    """New values into the input buffers the sandbox shares, finished before its next call reads them."""
    for buf, value in zip(buffers, values):
        if isinstance(buf, torch.Tensor):
            buf.copy_(value)
    if any(isinstance(b, torch.Tensor) and b.is_cuda for b in buffers):
        torch.cuda.synchronize()


def _primary(reply: dict, reps: int) -> dict:
    """The samples a round contributes: the spans where the trace kept most calls, else CUDA events."""
    spans = reply["span_us"]
    primary = spans if len(spans) >= max(2, reps // 2) else reply["event_us"]
    return {"primary": primary, "kernel": reply["kernel_us"], "event": reply["event_us"],
            "metric": "gpu_span" if primary is spans else "cuda_event"}


def _comparator_failed(name: str, f: SandboxFailure) -> Reject:
    what = "the copy yardstick" if name == COPY else f"comparator {name!r}"
    return Reject(f.status, f"{what} could not be loaded (not the kernel under test): {f.error}")


def _check_timed(torch, req, outs, expected, where: str, checked_before: bool = True) -> None:
    """A timed call's outputs against the judge's expected ones, by the task's rule. Wrong after the
    checks passed, the kernel behaves when checked and not when timed: `cheat_suspected`. Before
    any check (`checked_before` False: the configurations timed to choose one, which comes first),
    a wrong configuration is just wrong: the check's own status, the configuration and phase named."""
    rule = correctness.for_request(req)
    if rule.surely_passes(torch, outs, expected):
        return
    try:
        rule(torch, outs, expected, where)  # the task's rule, as checked
    except Reject as rj:
        if not checked_before:
            raise
        raise Reject("cheat_suspected", f"correct when checked, not when timed: {rj.error}") from None


def _fresh_not_slower(rounds: list[tuple[float, float]], where: str) -> None:
    """A kernel that keeps results between calls (keyed by pointer, id or a sample of the values)
    is slow on every call on fresh values. Judged over the rounds, not one call: a single span
    with a host stall in it can be several times the median (seen on a real paged-decode kernel)."""
    slow = [(f, s) for f, s in rounds if f > 1.5 * s + 10.0]
    if rounds and 2 * len(slow) > len(rounds):
        figures = ", ".join(f"{f:.1f} vs {s:.1f} µs" for f, s in slow)
        raise Reject("cheat_suspected", f"{where}: the call on fresh values was slower than the calls on values "
                     f"seen before in {len(slow)} of {len(rounds)} rounds ({figures}): results kept between calls")


def _same_processes(before: tuple[float, int], after: tuple[float, int], where: str) -> None:
    """Once compiled, a call runs no other process: children's CPU time must not grow and no
    child may be left running."""
    if after[1] > 0 or after[0] - before[0] > 0.05:
        raise Reject("cheat_suspected", f"{where}: the call did work in another process "
                     f"({after[0] - before[0]:.2f} s of child CPU time, {after[1]} child process(es) left); "
                     "work must run in the kernel's own Triton launches")


def _summary(samples: list[float]) -> dict:
    q = statistics.quantiles(samples, n=4) if len(samples) >= 2 else [samples[0]] * 3
    return {"median_us": statistics.median(samples), "iqr_us": q[2] - q[0], "samples": len(samples)}


def _disagreement(t: dict) -> str | None:
    """Say so when the secondary figures differ from the span by more than the noise."""
    span, noise = t["median_us"], max(0.1, t["iqr_us"] / max(t["median_us"], 1e-9))
    notes = []
    for key, label in (("kernel_us", "kernel-only"), ("event_us", "CUDA events"), ("outside_us", "judge's clock")):
        other = t.get(key)
        if other and abs(other - span) / span > noise and abs(other - span) > 2.0:
            notes.append(f"{label} {other:.1f} µs")
    return f"span {span:.1f} µs; " + ", ".join(notes) if notes else None


def _largest_shape(inputs) -> list[int] | None:
    """The shape of the workload's largest input tensor, from the judge's own inputs: what a
    lesson's scale is read from (memory.features.row_length)."""
    tensors = [t for t in inputs if hasattr(t, "numel") and hasattr(t, "shape")]
    return list(max(tensors, key=lambda t: t.numel()).shape) if tensors else None


# The judge's buffers a checked timed call's outputs are copied into (sandbox.Sandbox._outputs):
# one CUDA handle per request instead of one opened and closed per checked call. Float and
# non-bool integer outputs only (the poison must tell an unfilled buffer), within SWITCH_BYTES.
def _receive_buffers(torch, expected) -> list | None:
    items = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    poisonable = all(isinstance(t, torch.Tensor) and _poisonable(torch, t.dtype) for t in items)
    if not items or not poisonable or _nbytes(items) > SWITCH_BYTES:
        return None
    return [torch.empty_like(t) for t in items]


def _poisonable(torch, dtype) -> bool:
    if dtype.is_floating_point:
        return dtype.itemsize > 1  # fp8 has no NaN in every format; packed fp4 is one byte too
    return dtype != torch.bool and not dtype.is_complex


def _poison(torch, receive: list | None) -> None:
    """NaN (floats) or the largest value (integers) in every buffer, finished before the sandbox copies."""
    if not receive:
        return
    for buf in receive:
        buf.fill_(float("nan") if buf.dtype.is_floating_point else torch.iinfo(buf.dtype).max)
    if any(buf.is_cuda for buf in receive):
        torch.cuda.synchronize()


def _received(outs: list, receive: list | None) -> list:
    """The sandbox's outputs with each {"received": i} replaced by the judge's buffer i; a claim of a
    buffer that does not exist stays a description, which the correctness check rejects."""
    def one(o):
        if isinstance(o, dict) and "received" in o:
            i = o["received"]
            if receive and isinstance(i, int) and 0 <= i < len(receive):
                return receive[i]
            return {"not_a_tensor": f"a claim of the judge's buffer {i!r}", "on": ""}
        return o
    return [one(o) for o in outs]


def _nbytes(values) -> int:
    items = values if isinstance(values, (tuple, list)) else [values]
    return sum(v.numel() * v.element_size() for v in items if hasattr(v, "element_size"))
