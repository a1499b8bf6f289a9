"""The judge owns autotuning: which configuration of each `@triton.autotune` kernel is timed.

Triton's autotuner times its configurations at the first call of each tuning key, in each process,
so the configuration a kernel ran was that process's moment: AccelOpt's rmsnorm_h128 best came out
1.35x in 4 of 9 `check` processes and 1.0x in 5 (H100), because its two workloads share one key
and the small one, where every configuration takes about 2 µs, was tuned first.

Here the sandbox's autotuners time nothing (sandbox.AutotuneControl); the judge does:
- on a GPU, each configuration on each workload in rounds of their own (every configuration of a
  round before the next round; its outputs checked at calls it cannot foresee, as in the timing
  rounds: timing_rounds._accountable_calls), one autotuned kernel after another,
  the others held at their current choice;
- per tuning key, the configuration with the least time over the workloads that share the key
  (their geometric mean, what the task's speedup is), a tie within noise going to the earlier
  configuration; on workloads whose calls are host-dominated, on kernel-only time. The tie is
  decided on that geometric mean, never workload by workload: a 2 µs workload timed 2.25 µs
  where another configuration takes 2.0 is a real 12% there, and evening it out per workload let
  configuration 9 of AccelOpt's rmsnorm best (2.25-2.5 µs and 160 µs) win over 4 (2.0 and 171 µs)
  in one process of three: 1.27x where the others gave 1.37x (H200). A time is the interquartile
  mean of all its timed calls, so a kernel that sits between two of the timer's steps is read
  between them, not at whichever step its median fell on;
- on the interpreter (no GPU to time on), every configuration's correctness on every workload,
  since a GPU's autotuner may pick any of them; the first configuration is then the one checked.

Configurations are named by every field (sandbox.config_fields): before pinning, the judge lists
them again and rejects a kernel whose list changed under its calls; pins handed back from an
earlier evaluation carry the list they index (autotune_record.configs_digest) and are chosen
anew where it differs. What it chose is pinned for the rest of the evaluation, returned in the result, and handed back
by the runner for the re-check, the audit, later evaluations and best_kernel.py. A kernel whose
configuration is wrong is rejected, naming the configuration. An autotuner the judge cannot
replay (prune_configs_by, hooks, a key of other values) keeps its own choice, and the record
says why.

The record is autotune_record.py's type, built and read (its pins) with its functions alone.

A mixin of the judge (judge.py `Judge`), loaded by path beside it, or imported as part of the package.
"""

from __future__ import annotations

import importlib.util
import math
import statistics
import sys
from typing import TYPE_CHECKING, Any


def _load_sibling(name: str, filename: str):
    if __package__:
        return importlib.import_module(f"{__package__}.{filename.removesuffix('.py')}")
    return sys.modules[name]


correctness = _load_sibling("accelopt_correctness", "correctness.py")
stats = _load_sibling("accelopt_stats", "stats.py")
judge_sandboxes = _load_sibling("accelopt_judge_sandboxes", "judge_sandboxes.py")
if TYPE_CHECKING:
    from accelopt.tools.harness import autotune_record
    from accelopt.tools.harness.autotune_record import AutotuneRecord, GivenPin, Pins, TunedKernel, pins
    from accelopt.tools.harness.correctness import Reject
    from accelopt.tools.harness.judge_sandboxes import Sandbox, SandboxFailure, _call_mode, _owned
else:
    autotune_record = _load_sibling("accelopt_autotune_record", "autotune_record.py")  # the record, typed once
    AutotuneRecord, pins = autotune_record.AutotuneRecord, autotune_record.pins  # its one pins reader
    Reject = correctness.Reject
    Sandbox, SandboxFailure = judge_sandboxes.Sandbox, judge_sandboxes.SandboxFailure
    _call_mode, _owned = judge_sandboxes._call_mode, judge_sandboxes._owned

TUNE_ROUNDS = 3          # rounds per autotuned kernel; each round times every configuration once per workload
TUNE_REPS = 5            # timed calls per configuration, workload and round
STEP_US = 0.25           # CUPTI reports a 2 µs kernel's time in steps of 0.25 µs
TIE_US = 0.3             # what Triton's own autotuner cannot tell apart on one workload (a step, and a bit)
# What Triton's autotuner reports for a configuration that cannot run on this GPU; the judge leaves
# such a configuration out, as the autotuner does, and fails the kernel on any other error.
NOT_RUNNABLE = ("OutOfResources", "PTXASError", "CompileTimeAssertionFailure", "out of resource")


# ---------------------------------------------------------------- the choice (pure)

def central(samples: list[float]) -> float:
    """The interquartile mean: the middle half of the timed calls, averaged (all of them under four)."""
    ordered = sorted(samples)
    cut = len(ordered) // 4
    middle = ordered[cut:len(ordered) - cut] if len(ordered) >= 4 else ordered
    return statistics.fmean(middle)


def evened(times: list[float], floor: float) -> list[float]:
    """One workload's times with those Triton's own autotuner could not tell apart from its best
    (within the noise floor, or TIE_US) counted as the best: what it may pick there."""
    best = min(times)
    return [best if t <= best * (1 + floor) + TIE_US else t for t in times]


def choose(times: dict[str, list[float]], keys: dict[str, str], floor: float) -> dict[str, int]:
    """Per tuning key, the configuration index that minimizes the geometric mean of the times of
    the workloads sharing the key (`times`: workload -> a time per configuration, inf where it
    cannot run; `keys`: workload -> its key). A tie within noise goes to the earlier index: each
    configuration's mean log time carries a margin of half the noise floor plus half a timer step
    on each workload, and the earliest whose lower edge reaches the least upper edge is chosen."""
    chosen: dict[str, int] = {}
    for key in dict.fromkeys(keys.values()):
        group = [w for w, k in keys.items() if k == key and w in times]
        n = len(times[group[0]])
        runnable = [i for i in range(n) if all(times[w][i] < math.inf for w in group)]
        if not runnable:
            chosen[key] = 0
            continue
        score = {i: statistics.fmean(math.log(max(times[w][i], 1e-9)) for w in group) for i in runnable}
        margin = {i: statistics.fmean(math.log1p(floor / 2 + STEP_US / (2 * max(times[w][i], 1e-9))) for w in group)
                  for i in runnable}
        reach = min(score[i] + margin[i] for i in runnable)
        chosen[key] = next(i for i in runnable if score[i] - margin[i] <= reach)
    return chosen


def shared_key_notes(kernel: str, key_names: list[str], times: dict[str, list[float]], keys: dict[str, str],
                     chosen: dict[str, int], floor: float, unit: dict[str, str]) -> list[str]:
    """Wherever workloads share a tuning key, one note per workload after the first, by that rule
    alone, so that it is said in every process or in none (a threshold on measured costs said it in
    2 of 8 processes of one kernel). With its figures: what Triton's own autotuner may run on it in a
    process where the first shape of the key comes first (any configuration within noise there),
    and what the judge's choice for the key costs it against its own best. Advice for the kernel's
    author: tell the shapes apart in `key`."""
    notes = []
    for key, index in chosen.items():
        group = [w for w, k in keys.items() if k == key and w in times]
        if len(group) < 2:
            continue
        first = group[0]
        tied = [i for i, t in enumerate(evened(times[first], floor)) if t == min(times[first])]
        for w in group[1:]:
            best, worst, ran = min(times[w]), max(times[w][i] for i in tied), times[w][index]
            costs = (f"any of the {len(tied)} of {len(times[first])} configurations within noise on {first} may run "
                     f"on {w}: up to {worst:.1f} µs against its best {best:.1f} µs ({unit[w]})"
                     if worst < math.inf else f"a configuration within noise on {first} cannot run on {w}")
            notes.append(f"{kernel}: {w} shares one tuning key with {first} (key={key_names}), so Triton's autotuner "
                         f"tunes once for both, on the shape that comes first; {costs}; the judge's choice for the "
                         f"key, configuration {index}, runs at {ran:.1f} µs; add the dimension that tells {first} and "
                         f"{w} apart to `key`")
    return notes


def field_differences(before: dict, after: dict) -> list[str]:
    """The fields of one configuration that differ between two readings, as 'name: a -> b'."""
    names = [*dict.fromkeys([*before, *after])]
    out = []
    for name in names:
        a, b = before.get(name), after.get(name)
        if name == "kwargs" and isinstance(a, dict) and isinstance(b, dict):
            out += [f"{m}: {a.get(m, '(unset)')!r} -> {b.get(m, '(unset)')!r}"
                    for m in dict.fromkeys([*a, *b]) if (type(a.get(m)), a.get(m)) != (type(b.get(m)), b.get(m))]
        elif (type(a), a) != (type(b), b):
            out.append(f"{name}: {a!r} -> {b!r}")
    return out


def list_differences(before: list[dict], after: list[dict]) -> list[str]:
    """How a configuration list changed between two readings, configuration by configuration."""
    if len(before) != len(after):
        return [f"{len(before)} configurations -> {len(after)}"]
    return [f"configuration {i}: {', '.join(d)}" for i, (a, b) in enumerate(zip(before, after))
            if (d := field_differences(a, b))]


def _default(chosen: dict[str, int], keys: dict[str, str]) -> int:
    """The configuration for a key no workload showed (a seed that changes a key's value): the one
    most workloads run, the earlier of equals."""
    runs = [chosen[k] for k in keys.values() if k in chosen]
    return min(set(runs), key=lambda i: (-runs.count(i), i)) if runs else 0


UNNAMED_KEY = "a tuning key whose values are not plain numbers or strings (the judge cannot name it across processes)"
_OWN_CHOICE = "<its own choice>"


def _ran_key(reply: dict, k: TunedKernel) -> str | None:
    """The tuning key the kernel ran under in this call; _OWN_CHOICE where the sandbox left the
    choice to Triton (a key it cannot name); None where the kernel was not called."""
    for name, key, index in reply.get("tuned") or []:
        if name == k["kernel"]:
            return _OWN_CHOICE if index is None else key
    return None


# ---------------------------------------------------------------- the judge's side

class AutotuneRounds:
    """The judge's autotuning (a mixin of judge.py's `Judge`, which provides `torch`, `prepare`
    and `_give_back_gpu_memory`)."""

    if TYPE_CHECKING:
        torch: Any

        def prepare(self, ref, req: dict, workload: dict, seed: int, where: str | None = None,
                    expect: bool = True) -> Any: ...

        @staticmethod
        def seed(req: dict, phase: str, index: int = 0) -> int: ...

        def _accountable_calls(self, box: Sandbox, req: dict, ref, workload: dict, reps: int, deadline: float,
                               where: str, check: bool, chain: tuple[str, int],
                               checked_before: bool = True) -> dict: ...

        def _give_back_gpu_memory(self, req: dict) -> None: ...

        @staticmethod
        def _foreign(req: dict, seen: list[str], launched: list[str], where: str) -> None: ...

    def autotune(self, box: Sandbox, req: dict, ref, deadline: float, given: dict[str, GivenPin] | None = None,
                 check: bool = True) -> AutotuneRecord | None:
        """Choose and pin the configuration of every autotuner of the sandbox's module. `given` pins
        (from an earlier evaluation of the same source, autotune_record.given: per kernel its
        `choices` and the `configs` digest of the list they index) are pinned as given where every
        kernel's list is that one (else chosen anew, and the notes say why); else, on a GPU and
        with timing ahead, the configurations are timed, and otherwise (the interpreter, a check
        only) each is checked for correctness and the first pinned. `check`: the configurations'
        outputs are checked (the candidate's; a comparator's are trusted). Returns the record,
        or None where the module has no autotuner of several configurations."""
        tuners = box.request("autotuners", deadline)["tuners"]
        if not tuners:
            return None
        kernels = [autotune_record.tuned_kernel(t) for t in tuners]
        controlled = [k for k in kernels if k["controlled"]]
        notes = autotune_record.stale(controlled, given) if given else []
        given = None if notes else given
        record = AutotuneRecord(kernels=kernels, notes=notes, how="given" if given else None)
        if given:
            for k in controlled:
                autotune_record.pinned_as_given(k, given[k["kernel"]])
                record["notes"] += k.get("advice", [])  # said as when they were chosen
            if check:  # what each workload runs under them, said as when they were chosen
                box.request("pin", deadline, choices=pins(record))
                self._which_ran(box, req, ref, deadline, controlled)
        elif req["device"] == "cuda" and not req.get("check_only"):
            record["how"] = "timed"
            advice = []  # what shared keys cost, said once every kernel is timed
            for k in controlled:
                advice += self._time_configs(box, req, ref, deadline, k, pins(record), check)
            record["notes"] += advice
        elif check:
            record["how"] = "checked"
            for k in controlled:
                self._check_configs(box, req, ref, deadline, k, pins(record))
        else:  # a comparator with nothing timed (the interpreter): verified already, its first configuration
            record["how"] = "first"
        for k in kernels:  # left to Triton from the start, or found so on its first call
            if not k["controlled"]:
                record["notes"].append(f"{k['kernel']}: its own autotuner chooses ({k['why']}); another process may "
                                       "time another configuration")
        self._confirm_listed(box, deadline, kernels)
        box.request("pin", deadline, choices=pins(record))
        return record

    @staticmethod
    def _confirm_listed(box: Sandbox, deadline: float, kernels: list[TunedKernel]) -> None:
        """Before pinning: every configuration is still the one checked and timed, every field
        compared. A list that changed under the judge's calls (the module swapped or edited its
        configurations) is the kernel's doing: what was chosen is not what would run."""
        now = {t["kernel"]: t.get("fields") or [] for t in box.request("autotuners", deadline)["tuners"]}
        for k in kernels:
            if k["controlled"] and (changed := list_differences(k["fields"], now.get(k["kernel"], []))):
                raise Reject("cheat_suspected", f"{k['kernel']}: its configurations changed while the judge checked "
                             f"and timed them ({'; '.join(changed)[:500]}): what was chosen is not what would run")

    def _which_ran(self, box: Sandbox, req: dict, ref, deadline: float, kernels: list[TunedKernel]) -> None:
        """One checked call per workload under the pins: the tuning key each kernel ran under, so the
        record says which configuration each workload ran."""
        for workload in req["workloads"]:
            reply = self._checked_call(box, req, ref, deadline, workload,
                                       f"workload {workload['name']}, the configurations pinned as chosen before")
            for k in kernels:
                key = _ran_key(reply, k)
                if key is not None and key is not _OWN_CHOICE:
                    autotune_record.ran_under(k, workload["name"], key)

    def _checked_call(self, box: Sandbox, req: dict, ref, deadline: float, workload: dict, where: str) -> dict:
        """One call on the workload's first input set, its outputs checked and its trace too (no
        compute outside its Triton launches); the reply, its outputs dropped."""
        inputs, expected = self.prepare(ref, req, workload, self.seed(req, "configs"), where)
        try:
            reply = box.request("call", deadline, inputs=list(inputs), where=where, mode=_call_mode(req))
        except SandboxFailure as f:
            raise Reject(f.status, f"{where}: {f.error}") from None
        correctness.for_request(req)(self.torch, _owned(self.torch, reply.pop("outputs")), expected, where)
        self._foreign(req, reply.get("trace") or [], reply.get("known") or [], where)
        del inputs, expected
        self._give_back_gpu_memory(req)
        return reply

    def _configuration(self, k: TunedKernel, i: int) -> str:
        return f"configuration {i} of {k['kernel']} ({k['configs'][i]})"

    def _check_configs(self, box: Sandbox, req: dict, ref, deadline: float, k: TunedKernel, held: Pins) -> None:
        """Every configuration's outputs on every workload, one input set each: on the interpreter
        nothing is timed, and a GPU's autotuner may pick any of them. The first is pinned."""
        keys: dict[str, str] = {}
        for i in range(len(k["configs"])):
            box.request("pin", deadline, choices={**held, k["kernel"]: {"*": i}})
            for workload in req["workloads"]:
                reply = self._checked_call(box, req, ref, deadline, workload,
                                           f"workload {workload['name']}, {self._configuration(k, i)}")
                key = _ran_key(reply, k)
                if key is _OWN_CHOICE:
                    autotune_record.left_to_triton(k, UNNAMED_KEY)
                    return
                keys.setdefault(workload["name"], key or "?")
        autotune_record.checked_all(k, keys=keys)

    def _time_configs(self, box: Sandbox, req: dict, ref, deadline: float, k: TunedKernel, held: Pins,
                      check: bool) -> list[str]:
        """Each configuration on each workload in TUNE_ROUNDS rounds (a round: every configuration,
        every workload); the candidate's outputs checked at calls the judge picks once they are over
        (_accountable_calls). Chooses per key; returns what a shared key costs (shared_key_notes)."""
        timed = self._timing_rounds(box, req, ref, deadline, k, held, check)
        if timed is None:
            autotune_record.left_to_triton(k, UNNAMED_KEY)
            return []
        spans, kernel, keys, failures = timed
        _none_runs(k, failures)
        names = [w["name"] for w in req["workloads"]]
        times, unit = _timer_per_workload(names, spans, kernel, set(failures))
        return _record_choice(k, req, names, times, unit, {w: keys.get(w, "?") for w in names}, failures)

    def _timing_rounds(self, box: Sandbox, req: dict, ref, deadline: float, k: TunedKernel, held: Pins, check: bool
                       ) -> tuple[dict[str, list[list[float]]], dict[str, list[list[float]]], dict[str, str],
                                  dict[int, str]] | None:
        """The timing: per workload and configuration its spans and kernel-only times over the rounds,
        the tuning key each workload ran under, and why each configuration left out cannot run on this
        GPU (its first failure; it is timed no more). None where the sandbox left the choice to Triton."""
        n, names = len(k["configs"]), [w["name"] for w in req["workloads"]]
        spans: dict[str, list[list[float]]] = {w: [[] for _ in range(n)] for w in names}
        kernel: dict[str, list[list[float]]] = {w: [[] for _ in range(n)] for w in names}
        keys: dict[str, str] = {}
        failures: dict[int, str] = {}
        for r in range(TUNE_ROUNDS):
            for i in range(n):
                if i in failures:
                    continue
                box.request("pin", deadline, choices={**held, k["kernel"]: {"*": i}})
                for workload in req["workloads"]:
                    got = self._time_one(box, req, ref, deadline, k, i, workload, r, check)
                    if isinstance(got, str):
                        failures[i] = got
                        break
                    span, busy, key = got
                    if key is _OWN_CHOICE:
                        return None
                    spans[workload["name"]][i] += span
                    kernel[workload["name"]][i] += busy
                    if key is not None:
                        keys.setdefault(workload["name"], key)
        return spans, kernel, keys, failures

    def _time_one(self, box: Sandbox, req: dict, ref, deadline: float, k: TunedKernel, i: int, workload: dict, r: int,
                  check: bool) -> tuple[list[float], list[float], str | None] | str:
        """(the spans, the kernel-only times, the key the kernel ran under) of one configuration's
        timed calls on one workload in round r; a string: why it cannot run on this GPU (left out)."""
        where = f"workload {workload['name']}, {self._configuration(k, i)}, choosing the configuration"
        try:  # every configuration's outputs checked at calls it cannot foresee (the candidate's), before any check
            got = self._accountable_calls(box, req, ref, workload, TUNE_REPS, deadline, where, check, ("tuning", r),
                                          checked_before=False)
        except SandboxFailure as f:
            if not f.dead and any(s in f.error for s in NOT_RUNNABLE):
                return f.error.strip().splitlines()[-1][:300]
            raise Reject(f.status, f"{where}: {f.error}") from None
        if check:  # and its trace: no compute outside its Triton launches
            self._foreign(req, got["kernels"], got["known"], where)
        spans = got["primary"] if got["metric"] == "gpu_span" else got["event"]
        busy = got["kernel"] or spans
        key = _ran_key(got, k)
        self._give_back_gpu_memory(req)
        return list(spans), list(busy), key


# ---------------------------------------------------------------- the timing's outcome (pure)


def _none_runs(k: TunedKernel, failures: dict[int, str]) -> None:
    """The failures: a kernel none of whose configurations runs on this GPU is rejected, with each one's reason."""
    if len(failures) == len(k["configs"]):
        raise Reject("runtime_error", f"no configuration of {k['kernel']} runs on this GPU: "
                     + "; ".join(f"{i}: {e}" for i, e in failures.items()))


def _timer_per_workload(names: list[str], spans: dict[str, list[list[float]]], kernel: dict[str, list[list[float]]],
                        out: set[int]) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Span against kernel-only: per workload each configuration's central time (inf: left out) on
    the span, or on kernel-only time where the runnable configurations' calls are host-dominated;
    and which of the two it is, in words."""
    times, unit = {}, {}
    for w in names:
        n = len(spans[w])
        med = [central(s) if s and i not in out else math.inf for i, s in enumerate(spans[w])]
        kmed = [central(s) if s and i not in out else math.inf for i, s in enumerate(kernel[w])]
        runnable = [i for i in range(n) if i not in out]
        host = stats.host_bound(statistics.median(kmed[i] for i in runnable),
                                statistics.median(med[i] for i in runnable))
        times[w], unit[w] = (kmed, "kernel-only: host-dominated calls") if host else (med, "span")
    return times, unit


def _record_choice(k: TunedKernel, req: dict, names: list[str], times: dict[str, list[float]],
                   unit: dict[str, str], keys: dict[str, str], failures: dict[int, str]) -> list[str]:
    """The choice: per tuning key the configuration chosen (choose), the default for a key no
    workload showed, what each workload ran, its times and timer, and the failures, written into
    the kernel's record `k`; returns the advice on a shared key (shared_key_notes)."""
    floor = float(req.get("noise_floor", stats.NOISE_FLOOR))
    chosen = choose(times, keys, floor)
    autotune_record.timed_choice(
        k, choices=chosen, default=_default(chosen, keys), keys=keys,
        times_us={w: [round(t, 3) if t < math.inf else None for t in times[w]] for w in names},
        timer={w: "kernel_only" if unit[w].startswith("kernel") else "span" for w in names},
        failed={str(i): e[:300] for i, e in failures.items()})
    advice = shared_key_notes(k["kernel"], k["key"], times, keys, chosen, floor, unit)
    if advice:  # kept with the pins: a later evaluation pinned as given says it too
        k["advice"] = advice
    return advice
