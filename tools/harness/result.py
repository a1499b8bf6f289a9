"""What an evaluation returns. JSON-friendly: it goes straight into graph state and the run dir."""

from __future__ import annotations

import re
from typing import Any, Literal, cast

from pydantic import BaseModel

from accelopt.tools.harness import autotune_record, stats
from accelopt.tools.harness.autotune_record import How as AutotuneHow

Status = Literal[
    "verified",        # correct on every workload and seed, and timed
    "no_code",         # the model's reply held no usable kernel
    "truncated",       # the model's reply was cut off at its token limit before the kernel was complete
    "llm_error",       # the model call failed after its retries
    "not_sent",        # the model call was not made: the run's budget could not pay for it
    "in_flight",       # its reply had not landed when its iteration moved on (--quorum): a later one collects it
    "cancelled",       # in flight when the run stopped: its reply, if one came, was never evaluated
    "duplicate",       # the same program as a kernel already evaluated in this run: not evaluated again
    "compile_error",   # syntax error, missing @triton.jit / entry point, Triton compilation failure
    "runtime_error",   # raised while running
    "crashed",         # the worker died from a signal (segfault, abort)
    "timeout",         # killed after the per-candidate time limit
    "wrong_output",    # values outside tolerance
    "nan",             # NaN/Inf where the reference is finite
    "shape_mismatch",
    "dtype_mismatch",
    "input_mutated",   # the kernel wrote to its inputs
    "cheat_suspected",  # torch fallback, side streams/threads, timer patching, cached results, above roofline
    "reference_error",  # the task, not the kernel: its reference or flops() failed, or it cannot run here
    "infra_error",     # the evaluation itself was lost (a Ray node or actor died twice under it): not the kernel's
]
# Candidates that hold no evaluation of their own: not counted as evaluated anywhere.
NOT_EVALUATED = {"not_sent", "duplicate", "in_flight", "cancelled"}
# Candidates that never reached the judge: no kernel to judge (no reply, none in it) or not judged.
NOT_JUDGED = NOT_EVALUATED | {"no_code", "truncated", "llm_error"}
FIXABLE = {"no_code", "truncated", "compile_error", "runtime_error", "crashed", "timeout", "wrong_output", "nan",
           "shape_mismatch", "dtype_mismatch", "input_mutated", "cheat_suspected"}

# Timings on the interpreter are labelled so and must never be compared with GPU timings.
Timer = Literal["cuda_event", "interpreter_wall", "nki_benchmark"]
# What each timer is, in words: in full (report pages), short (tables), and as a live line's label.
# Interpreter times are never called GPU times.
TIMER_NAMES = {"cuda_event": "GPU time (CUDA)", "interpreter_wall": "CPU Triton-interpreter wall time",
               "nki_benchmark": "Trainium (NKI benchmark)"}
TIMER_SHORT = {"cuda_event": "GPU", "interpreter_wall": "CPU interpreter", "nki_benchmark": "Trainium"}
TIMER_LIVE = {"cuda_event": "GPU", "interpreter_wall": "interpreter time", "nki_benchmark": "Trainium"}
INTERPRETER = "interpreter_wall"  # the timer (and workload metric) that never decides faster or slower


class WorkloadTiming(BaseModel):
    """One workload's time. `median_us` is the primary metric named by `metric`: on a GPU the
    call's real span (from the moment the GPU could start the call, launched while the GPU spun
    for sandbox.COVER_CYCLES, to its last GPU activity: copies and uncovered host work included),
    on the interpreter the judge's own wall clock around each call. The secondary figures are
    reported beside it and `disagreement` says when they differ by more than the noise."""

    median_us: float
    iqr_us: float
    samples: int
    metric: str = "gpu_span"  # gpu_span, cuda_event (fallback without CUPTI), or interpreter_wall
    round_medians_us: list[float] = []
    kernel_us: float | None = None   # median over calls of the summed GPU activity (kernel-only)
    round_kernel_us: list[float] = []  # per timing round, the median kernel-only time of its calls
    event_us: float | None = None    # median over calls of CUDA events around the call (same start)
    outside_us: float | None = None  # the judge's wall clock around a batch of calls, per call
    disagreement: str | None = None
    flops: float | None = None
    bytes: float | None = None
    pct_peak: float | None = None
    pct_achievable: float | None = None
    bound: str | None = None
    # A device copy of the same bytes (half read, half written), timed by the same timer in the
    # same rounds: what moving this workload's bytes costs on this GPU at this size, launch and
    # ramp-up included. pct_of_copy (memory-bound workloads): copy_us / median_us, in %.
    copy_us: float | None = None
    pct_of_copy: float | None = None
    # What the reference's outputs take, and the copy floor: the time to write them at the copy's
    # bandwidth (runner.copy_floor_us); a time far below it is cheat_suspected (runner.FLOOR_SHARE).
    output_bytes: float | None = None
    floor_us: float | None = None
    input_shape: list[int] | None = None  # the workload's largest input tensor (the judge's own inputs)


Severity = Literal["info", "warning", "serious"]


class Finding(BaseModel):
    """A static observation about a source. It advises (the fixer, the user); it never rejects:
    only runtime evidence does."""

    rule: str
    severity: Severity
    line: int | None = None
    message: str


class Audit(BaseModel):
    """A winner re-measured in a fresh process under an external profiler (nsys or ncu)."""

    tool: str                      # "nsys", "ncu", or "none" when no profiler is installed
    agreed: bool | None = None     # None: not audited (no tool)
    kernels: list[str] = []        # the kernel names the profiler saw in one call
    measured_us: dict[str, float] = {}  # per workload, the profiler's time of one call
    note: str = ""


class Comparison(BaseModel):
    """Candidate against one comparator timed interleaved in the same worker (tools/harness/stats.py)."""

    speedup: float     # comparator time / candidate time: geomean over workloads, median over rounds
    ci_low: float      # bootstrap interval of the median over rounds: see interval_label
    ci_high: float
    rounds: int
    faster: bool       # ci_low > 1 + noise_floor: faster beyond noise; never on the interpreter
    slower: bool       # ci_high < 1 / (1 + noise_floor): slower beyond noise; never on the interpreter
    noise_floor: float = 0.0  # the smallest difference called one (0.0 in records written before it was)


VerdictWord = Literal["faster", "slower", "within noise", "undecided", "no verdict"]
Basis = Literal["span", "kernel_only", "interpreter"]


class Verdict(BaseModel):
    """What one comparison says and on which timer: the call's span, or its kernels alone where the
    span is host-dominated (tools/harness/verdict.py). `reason` says why, with the figures."""

    word: VerdictWord
    basis: Basis
    speedup: float
    ci_low: float      # the reported interval: the rounds' widened by the noise floor (stats.across)
    ci_high: float
    reason: str
    rounds_low: float | None = None   # the rounds' own interval (interval_label), which the judge stops on
    rounds_high: float | None = None  # (None in records written before it was kept apart)


StopReason = Literal["decided", "stalled", "cap", "interpreter", "no_comparators", "time_limit"]


class RoundsRun(BaseModel):
    """How many timing rounds the judge ran, and why it stopped: every comparison decided (stats.decided),
    undecided with intervals no longer narrowing (stats.stalled), the cap reached undecided, the interpreter (its rounds are fixed: more buy nothing), nothing to
    compare, or another round would not have fit in the evaluation's time limit."""

    ran: int
    stopped: StopReason
    min_rounds: int | None = None
    max_rounds: int | None = None
    noise_floor: float | None = None
    # where the timing step's seconds went: drawing inputs and the reference's outputs, waiting on
    # the timed calls, checking the outputs the judge picked, writing fresh inputs between calls,
    # the trace checks, and the rest (estimates' bookkeeping, the rounds' summaries)
    parts_s: dict[str, float] | None = None


class TunedKernel(BaseModel):
    """One `@triton.autotune` kernel as the judge ran it (autotune_rounds.py): its configurations,
    which one each tuning key and each workload ran, and how that was decided. The judge's record
    of it is autotune_record.TunedKernel: the same keys, of the same types (a key the judge leaves
    out reads as its default here, as do keys of records written before it was kept)."""

    kernel: str
    key: list[str] = []
    configs: list[str] = []        # each configuration as Triton prints it, in list order
    fields: list[dict[str, Any]] = []  # each configuration's every field as it ran (sandbox.config_fields)
    digest: str = ""               # the list named by those fields (autotune_record.configs_digest)
    controlled: bool = True        # False: its own autotuner chose (`why`)
    why: str | None = None
    choices: dict[str, int] = {}   # tuning key (as the judge names it) -> configuration index
    default: int = 0               # for a key no workload showed
    ran: dict[str, int] = {}       # workload -> configuration index it ran
    keys: dict[str, str] = {}      # workload -> its tuning key
    timed: bool = False            # chosen on the GPU from the judge's rounds
    checked: int = 0               # configurations checked for correctness (the interpreter: all)
    times_us: dict[str, list[float | None]] = {}  # workload -> per configuration (None: cannot run)
    timer: dict[str, str] = {}     # workload -> "span" or "kernel_only" (host-dominated calls)
    failed: dict[str, str] = {}    # configuration index -> why it cannot run on this GPU (left out)
    advice: list[str] = []         # what its shared tuning key costs (shared_key_notes), kept with its pins

    def ran_text(self, workload: str) -> str | None:
        index = self.ran.get(workload)
        return None if index is None or index >= len(self.configs) else f"{index}: {self.configs[index]}"


class AutotuneRecord(BaseModel):
    """Who chose each autotuned configuration of one timed function (the candidate or a
    comparator): `timed` by the judge on the GPU, `checked` (every configuration's correctness, no
    GPU: the first runs), `given` (pinned from an earlier evaluation of the same source), `first`
    (a comparator on the interpreter). `notes`: what the choice costs, said with figures. The
    judge's record, as it sends it back, is autotune_record.AutotuneRecord; its pins are read
    with that module's readers alone (`record`: this record as that type)."""

    kernels: list[TunedKernel] = []
    notes: list[str] = []
    how: AutotuneHow | None = None

    def record(self) -> autotune_record.AutotuneRecord:
        """This record as the judge's type: every key of it present (the defaults filled in)."""
        return cast(autotune_record.AutotuneRecord, self.model_dump())

    def pins(self) -> autotune_record.Pins:
        """What the sandbox pins (sandbox.AutotuneControl.pins): the same choice, in another process
        (autotune_record.pins, the reader the judge pins with)."""
        return autotune_record.pins(self.record())

    def given(self) -> dict[str, autotune_record.GivenPin]:
        """The pins as handed to a later evaluation of the same source: per kernel its choices and
        the configuration list they index, named by every field (autotune_record.given; the judge
        reads them back with autotune_record.stale)."""
        return autotune_record.given(self.record())

    def summary(self) -> list[str]:
        """A line per kernel: what ran on each workload and how it was chosen."""
        lines = []
        for k in self.kernels:
            if not k.controlled:
                lines.append(f"{k.kernel}: its own autotuner chose ({k.why})")
            elif self.how == "checked":
                lines.append(f"{k.kernel}: all {k.checked} configurations checked correct on every workload, none "
                             f"timed (no GPU); configuration 0 ran: {k.configs[0] if k.configs else '?'}")
            else:
                ran = "; ".join(f"{w}: {k.ran_text(w)}" for w in k.ran)
                how = {"timed": f"the judge timed {len(k.configs)} configurations", "given": "pinned as chosen before",
                       "first": "the first configuration"}.get(self.how or "", "")
                lines.append(f"{k.kernel} ({how}): {ran}" if ran else f"{k.kernel} ({how})")
        return lines


class EvalResult(BaseModel):
    status: Status
    error: str | None = None
    device: str
    seed: int | None = None  # the evaluation's seed: every input the judge drew derives from it (seeds.py)
    device_name: str | None = None
    timer: Timer | None = None
    workloads: dict[str, WorkloadTiming] = {}
    compare: dict[str, dict[str, WorkloadTiming]] = {}
    versus: dict[str, Comparison] = {}
    versus_kernel: dict[str, Comparison] = {}  # the same comparisons on kernel-only time (GPU, CUPTI)
    verdicts: dict[str, Verdict] = {}  # per comparator: what it says, on which timer, and why (verdict.py)
    rounds: RoundsRun | None = None  # the timing rounds the judge ran and why it stopped
    # per comparator, why its comparison is void (its outputs wrong when timed, or its time far from
    # its own recorded one): no verdict against it counts (verdict.void_comparisons)
    void: dict[str, str] = {}
    flags: list[str] = []
    findings: list[Finding] = []   # static advice; travels to prompts and reports
    evidence: list[str] = []       # the runtime checks this verdict rests on, in words
    kernels_seen: list[str] = []   # GPU kernels (or host ops on the interpreter) one call launched
    audit: Audit | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    eval_s: float | None = None
    phases_s: dict[str, float] = {}  # the judge's seconds per step (load, checks, ghost, timing, ...)
    profile: str | None = None  # the planner's profile summary (ncu/torch.profiler; NKI: neuron-profile)
    gpu: str | None = None      # which of its host's GPUs judged it (CUDA_VISIBLE_DEVICES index); None: no GPU
    node: str | None = None     # on a Ray cluster, the node that evaluated it (IP/node id); None: this host
    # per timed function ("candidate", each comparator): the configurations its autotuned kernels ran
    autotune: dict[str, AutotuneRecord] = {}

    @property
    def ok(self) -> bool:
        return self.status == "verified"


def compare_rounds(candidate: dict[str, WorkloadTiming], other: dict[str, WorkloadTiming],
                   resamples: int = stats.RESAMPLES, *, timer: str | None = None,
                   noise_floor: float = stats.NOISE_FLOOR, kernel_only: bool = False) -> Comparison:
    """Per round, the geomean over workloads of other/candidate; then the median over rounds
    and a bootstrap interval of that median (stats.py, the statistic the judge stops on).
    Faster or slower only where the interval clears the noise floor, and never on the interpreter
    (`timer` interpreter_wall, or workloads timed so): its times are the wall clock of a CPU
    emulation, not performance. `kernel_only`: on the rounds' kernel-only medians
    (round_kernel_us) instead of their spans; ValueError where a workload has none."""
    names = [n for n in candidate if n in other]

    def rounds(t: WorkloadTiming) -> list[float]:
        return t.round_kernel_us if kernel_only else t.round_medians_us

    iv = stats.interval(stats.round_ratios({n: rounds(candidate[n]) for n in names},
                                           {n: rounds(other[n]) for n in names}), resamples)
    interpreter = timer == INTERPRETER or any(t.metric == INTERPRETER for n in names for t in (candidate[n], other[n]))
    where = stats.side(iv, noise_floor)
    return Comparison(speedup=iv.speedup, ci_low=iv.low, ci_high=iv.high, rounds=iv.rounds,
                      faster=where == "faster" and not interpreter, slower=where == "slower" and not interpreter,
                      noise_floor=noise_floor)


RANGE_MAX_ROUNDS = 5  # up to this many rounds the bootstrap interval is the min-max range of the rounds


def interval_label(rounds: int | None) -> str:
    """What the recorded speedup interval is. The harness bootstraps the median over rounds; with
    5 rounds or fewer every resampled median lies between the smallest and the largest round, and
    the 2.5% and 97.5% quantiles are those two: the interval is the range of the rounds. The range
    of n rounds covers the median of the rounds' distribution with probability 1 - 2 * 0.5^n."""
    if not rounds:
        return "interval (rounds not recorded)"
    if rounds <= RANGE_MAX_ROUNDS:
        return f"range over {rounds} rounds"
    return f"bootstrap 95% interval over {rounds} rounds"


def interval_coverage(rounds: int | None) -> float | None:
    """The probability that the min-max range of `rounds` rounds covers their distribution's median."""
    return 1 - 2 * 0.5 ** rounds if rounds and rounds <= RANGE_MAX_ROUNDS else None


def short_reason(error: str | None, width: int = 110) -> str:
    """One line of why an evaluation failed: a traceback's exception line, else the first line."""
    lines = [line.strip() for line in (error or "").splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[0]
    if any(line.startswith("Traceback") for line in lines):
        raised = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Exit|Interrupt)\b", line)]
        line = (raised or lines)[-1]
    return line if len(line) <= width else line[:width - 1] + "…"


_SANDBOX_KERNEL = re.compile(r'"[^"\n]*/sandbox-[^/"\n]+/kernel\.py"')


def user_paths(error: str | None, label: str) -> str | None:
    """A verdict's traceback with the sandbox's copy of the kernel named as the user knows it
    (`label`: their file, or the run's candidates/ID/kernel.py): the sandbox's temporary folder
    means nothing to them and is gone."""
    return _SANDBOX_KERNEL.sub(lambda _: f'"{label}"', error) if error else error
