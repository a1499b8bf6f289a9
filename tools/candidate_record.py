"""The candidate record, typed in parts: the solution (what a policy wrote), its lineage (where it
comes from) and its evaluation (what the harness, or the run, said of it). The graph's state and
the run directory keep one flat dict per candidate (state.candidates[id], candidates/ID/result.json):
flat as it has always been, so that earlier runs' checkpoints and result files load and resume, and
Studio shows its fields. `Candidate` is that dict, the union of the three parts; a reader that wants
one part reads it through `solution_of`, `lineage_of` or `evaluation_of` (the same keys, the others
left out), and a solution's parsed program through `program_of` (tools/pyparse.py's shared parse,
never kept in the state).

An evaluation's status is the harness's `Status` (tools/harness/result.py), the strings on disk; the
fields that go with each status are `evaluation_refusal`'s rules, checked where a verdict is written
into a candidate (nodes/records.py `with_measurement`, `with_outcome`).

Here on the tools floor so that tools/run_record.py reads the parts; nodes/records.py re-exports them
beside the constructors that build a candidate."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, cast, get_args

from typing_extensions import TypedDict  # pydantic accepts it on every Python

from accelopt.tools.harness.result import NOT_JUDGED, Status
from accelopt.tools.pyparse import Program, program

CandidateKind = Literal["kernel", "reference", "autotuned", "inductor_seed"]

# The evaluation's status: the harness's Literal itself, so that the record holds the same strings
# (`c["status"] == "verified"` everywhere) and a new harness status is a candidate's at once.
EvaluationStatus = Status
STATUSES: frozenset[str] = frozenset(get_args(Status))
# What each status says of the record, one rule set each (`evaluation_refusal`): judged and verified;
# judged and failed (a compile error, wrong outputs, ... the task's or the harness's own failure);
# a program evaluated before (duplicate); never judged (no reply, no kernel in it, not sent, not
# collected).
VERIFIED: frozenset[str] = frozenset({"verified"})
DUPLICATE: frozenset[str] = frozenset({"duplicate"})
UNJUDGED: frozenset[str] = frozenset(NOT_JUDGED) - DUPLICATE
FAILED: frozenset[str] = STATUSES - VERIFIED - DUPLICATE - UNJUDGED
# the verdict's own timers: the Triton judge (GPU, interpreter) states the checks it rests on
JUDGE_TIMERS = frozenset({"cuda_event", "interpreter_wall"})


class AutotuneSummary(TypedDict):
    tried: int
    verified: int
    best_id: str
    gain: float  # the best variant's speedup over the rewrite's, both measured against the baseline


class CandidateSolution(TypedDict, total=False):
    """What the policy wrote: the kernel's source (None while unwritten, or where the reply held
    none), and what writing it cost. The cost belongs to the solution, not to its evaluation: it is
    set when the kernel is written (a cancelled attempt's landed reply too), and the judge's time
    is not counted in it. Its parsed program: `program_of`."""

    source: str | None
    tokens: int
    cost_usd: float


class CandidateLineage(TypedDict, total=False):
    """Where the candidate comes from, set when it is born (nodes/records.py's constructors)."""

    id: str                 # i{iteration}.m{member}.p{plan}.k{sample}[.f{fix}][.a{variant}], or "baseline"
    iteration: int
    kind: CandidateKind     # absent for LLM/tuner rewrites (a "kernel")
    parent_id: str | None
    plan_id: str | None
    plan_title: str
    plan_text: str          # autotuned variants: the configuration change, as a plan would say it
    fix_of: str | None      # the failed attempt this one repairs
    fix_attempt: int
    asked_in: int           # in_flight (--quorum): the iteration its model call was asked in (part of the call's key)
    autotune_of: str        # autotuned variants: the rewrite whose launch was searched


class CandidateEvaluation(TypedDict, total=False):
    """What was said of it: the harness's verdict (nodes/records.py `with_measurement`), or the
    run's where the judge never saw it (`with_outcome`: no_code, llm_error, not_sent, ...). The
    status ties the other fields (`evaluation_refusal`)."""

    status: EvaluationStatus | None  # None: an attempt not evaluated yet
    error: str | None
    duplicate_of: str       # status duplicate: the candidate that evaluated the same program first
    device: str
    device_name: str | None
    timer: str | None       # cuda_event | interpreter_wall | nki_benchmark
    workloads: dict[str, dict[str, Any]]  # per workload: median_us, iqr_us, kernel_us, ..., pct_peak, bound
    flags: list[str]        # above_estimated_roofline, over_10x_reverified, timing_contradicted, unaudited
    findings: list[dict[str, Any]]  # static advice
    evidence: list[str]     # the runtime checks the verdict rests on
    kernels_seen: list[str]
    audit: dict[str, Any] | None
    eval_s: float | None
    versus: dict[str, dict[str, Any]]     # comparator -> speedup and interval over interleaved rounds
    compared_us: dict[str, dict[str, float]]  # comparator -> workload -> median µs, same rounds
    void: dict[str, str]  # comparator -> why its comparison is void (verdict.void_comparisons)
    speedup: float | None   # geomean over workloads vs the baseline
    speedup_vs_parent: float | None
    beats_parent: bool
    loses_to_parent: bool
    pct_peak: float | None
    pct_achievable: float | None
    pct_of_copy: float | None  # mean over memory-bound workloads: % of a same-size device copy's speed
    max_abs_err: float | None
    max_rel_err: float | None
    profile: str | None     # ncu / torch.profiler / neuron-profile summary for the planner
    node: str               # on a Ray cluster: the node that evaluated it (IP/node id)
    # per timed function (candidate, comparators): the configuration each @triton.autotune kernel ran
    # and who chose it (harness AutotuneRecord); best_kernel.py is written with the candidate's
    autotune_choice: dict[str, dict[str, Any]]
    # after autotuning (the rewrite only): what the search over its launch found
    autotune: AutotuneSummary


class Candidate(CandidateLineage, CandidateSolution, CandidateEvaluation, total=False):
    """Every kernel evaluated or attempted (state.candidates, by id): its lineage, its solution and
    its evaluation, in one flat record (the parts' fields, side by side)."""


SOLUTION_FIELDS = frozenset(CandidateSolution.__annotations__)
LINEAGE_FIELDS = frozenset(CandidateLineage.__annotations__)
EVALUATION_FIELDS = frozenset(CandidateEvaluation.__annotations__)


def solution_of(candidate: Mapping[str, Any]) -> CandidateSolution:
    """The candidate's solution part: its own keys of it, nothing else."""
    return cast(CandidateSolution, {k: v for k, v in candidate.items() if k in SOLUTION_FIELDS})


def lineage_of(candidate: Mapping[str, Any]) -> CandidateLineage:
    """The candidate's lineage part: its own keys of it, nothing else."""
    return cast(CandidateLineage, {k: v for k, v in candidate.items() if k in LINEAGE_FIELDS})


def evaluation_of(candidate: Mapping[str, Any]) -> CandidateEvaluation:
    """The candidate's evaluation part: its own keys of it, nothing else."""
    return cast(CandidateEvaluation, {k: v for k, v in candidate.items() if k in EVALUATION_FIELDS})


def program_of(candidate: Mapping[str, Any]) -> Program | None:
    """The solution's parsed program (tools/pyparse.program: one parse per text, shared by every
    reader); None for an attempt with no source. A source that does not parse gives a Program whose
    `error` says why."""
    source = candidate.get("source")
    return program(source) if source is not None else None


# ---------------------------------------------------------------- the status, tied to the fields

# what only a judge's timed evaluation gives: a record the judge never timed holds none of them
_MEASURED = ("timer", "workloads", "speedup")


def evaluation_refusal(candidate: Mapping[str, Any]) -> str | None:
    """Why the candidate's evaluation contradicts its status (the rule it breaks), or None. The
    rules are what the harness and the run write (nodes/services.py `_measure`, `measure`,
    `fill_attempt`; nodes/selector.py `settle_in_flight`):
    - a status is the harness's (`Status`), or None for an attempt not evaluated yet, which holds
      nothing measured;
    - verified: no error and no duplicate_of; timed (a timer) exactly where it has workload times
      (NKI's simulator checks correctness and times nothing: neither); on the Triton judge's
      timers, the evidence its verdict rests on;
    - a failure (FAILED): an error, which may be empty, says why; no speedup, not ahead of its
      parent, no duplicate_of (its workload times may stay: cheat_suspected below the copy floor);
    - duplicate: duplicate_of names the candidate evaluated first; nothing measured;
    - never judged (UNJUDGED: no_code, truncated, llm_error, not_sent, in_flight, cancelled):
      nothing measured, no duplicate_of."""
    status = candidate.get("status")
    if status is None:
        return _measured_without_judge(candidate, "an attempt not evaluated yet (status None)")
    if status not in STATUSES:
        return f"status {status!r} is none of the harness's (tools/harness/result.Status)"
    if status in VERIFIED:
        return _verified_refusal(candidate)
    if candidate.get("duplicate_of") and status not in DUPLICATE:
        return f"status {status} with duplicate_of: only a duplicate names the candidate evaluated first"
    if status in FAILED:
        if candidate.get("error") is None:
            return f"status {status} without an error: a failure says why"
        if candidate.get("speedup") is not None or candidate.get("beats_parent"):
            return f"status {status} with a speedup: only a verified kernel has one"
        return None
    if status in DUPLICATE and not candidate.get("duplicate_of"):
        return "status duplicate without duplicate_of: it names the candidate that evaluated the program first"
    return _measured_without_judge(candidate, f"status {status}: never timed")


def _verified_refusal(candidate: Mapping[str, Any]) -> str | None:
    if candidate.get("error"):
        return "status verified with an error"
    if candidate.get("duplicate_of"):
        return "status verified with duplicate_of: a duplicate is not evaluated"
    timer = candidate.get("timer")
    if bool(timer) != bool(candidate.get("workloads")):
        return (f"status verified with timer {timer!r} and {len(candidate.get('workloads') or {})} workload "
                "times: a timed verdict has both, an untimed one neither")
    if timer in JUDGE_TIMERS and not candidate.get("evidence"):
        return f"status verified on timer {timer} without evidence: the judge states the checks it rests on"
    return None


def _measured_without_judge(candidate: Mapping[str, Any], what: str) -> str | None:
    held = [k for k in _MEASURED if candidate.get(k) not in (None, {})]
    return f"{what}, yet with {', '.join(held)}: nothing of it was measured" if held else None


def checked_evaluation(candidate: Candidate) -> Candidate:
    """The candidate, whose evaluation keeps `evaluation_refusal`'s rules: else ValueError naming
    the candidate and the rule it breaks (a verdict written wrong fails where it is written)."""
    refusal = evaluation_refusal(candidate)
    if refusal is not None:
        raise ValueError(f"candidate {candidate.get('id')}: {refusal}")
    return candidate
