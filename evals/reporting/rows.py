"""The report's records: a task's row (how its run ended, what its best kernel is worth, every
figure from one evaluation), the timings and speedups in it, the lineage of its best kernel; and
what is computed from rows alone (geomean, fast_p, the best after each iteration). Read from run
directories by report.py; drawn by report_plots.py, laid out by report_html.py, shown by runs.py.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, computed_field

# The CLI's words for the CPU interpreter (one rule everywhere): the kept kernel is the beam's head,
# ranked by the selector's rule, never "best"; INTERPRETER is the harness's own constant.
from accelopt.graph.progress import head_word, interpreter_rule  # noqa: F401
from accelopt.tools.harness.reference_kernel import mode_note

# re-exported: the reporting modules read these names from here
from accelopt.tools.harness.result import (  # noqa: F401
    INTERPRETER,
    TIMER_NAMES,
    TIMER_SHORT,
    interval_coverage,
    interval_label,
)

FAST_P = (0.0, 0.5, 0.8, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0)

# A task's `outcome` says how its run ended: "optimized" (the search finished with a verified best
# kernel; the key `eval` and report.json have always used for a finished search), stopped, skipped,
# failed, running. For a finished search its `verdict` says what the best kernel is worth, and only
# "faster" (beyond the noise of the interleaved rounds) is shown as optimized: a run whose best is
# still its baseline found no faster kernel. `shown_outcome` is the outcome as `accelopt show` and
# `runs` report it, where "optimized" is said of "faster" only. A run on the CPU interpreter is
# none of these: its times are a CPU emulation's wall clock, not performance, and its kernel is
# the one the selector's rule there ranked first (nodes/records.leads_parent), not the fastest.
VERDICTS = {
    "faster": "optimized (faster beyond noise)",
    "within noise": "faster, within noise",
    "no faster kernel": "no faster kernel found",
    "slower": "best kernel slower than baseline",
    "interpreter": "verified on the CPU interpreter, which cannot tell faster from slower",
}
OUTCOMES = {"optimized": "search finished", "stopped": "stopped", "skipped": "skipped", "failed": "failed",
            "running": "running"}
TIMERS, TIMERS_SHORT = TIMER_NAMES, TIMER_SHORT

# What the report calls a kernel's figure against the baseline (baseline time / kernel time): a speedup
# on a real timer; on the CPU interpreter a ratio of emulation wall clocks, named as `accelopt show` names
# it, never a speedup. Nothing there is best, faster, slower or beaten (graph/progress.interpreter_rule).
WALL_RATIO = "baseline/kernel wall time"


def is_interpreter(timer: str | None) -> bool:
    """Whether a timing is the CPU interpreter's wall clock (no speed claim may rest on it)."""
    return timer == INTERPRETER


def kept(timer: str | None) -> str:
    """The kernel a run kept, in prose: "best kernel" on a real timer, "beam head" on the CPU
    interpreter (graph.progress.head_word, as the CLI says it)."""
    word = head_word(timer)
    return word if is_interpreter(timer) else f"{word} kernel"


def ratio(timer: str | None) -> str:
    """A kernel's figure against the baseline: "speedup", or on the CPU interpreter WALL_RATIO."""
    return WALL_RATIO if is_interpreter(timer) else "speedup"


def kinds(timers) -> tuple[bool, bool]:
    """(any real timer, any CPU interpreter) among `timers` (None entries ignored); no timer at all
    reads as a real one: a page of skipped tasks keeps the GPU words."""
    known = {t for t in timers if t}
    interp = INTERPRETER in known
    return (not interp or len(known) > 1), interp


def head_of(timers) -> str:
    """The kept kernel's word for a table over several runs: head_word's, or both where the runs mix
    GPU and CPU-interpreter timers."""
    real, interp = kinds(timers)
    return "best or beam head" if real and interp else head_word(INTERPRETER if interp else None)


def ratio_of(timers) -> str:
    """A column of figures against the baseline over several runs: ratio()'s word, or both where they mix."""
    real, interp = kinds(timers)
    if real and interp:
        return f"speedup, or on the CPU interpreter {WALL_RATIO}"
    return ratio(INTERPRETER if interp else None)


class Timing(BaseModel):
    """One kernel's time on one workload, as the report shows it. iqr_us and round_medians_us are
    None / empty where the evaluation kept only the median (a comparator's: compared_us)."""

    median_us: float
    iqr_us: float | None = None
    round_medians_us: list[float] = []
    flops: float | None = None
    bytes: float | None = None


class Speedup(BaseModel):
    """A speedup measured in one evaluation: the comparator's time over the kernel's, both timed
    interleaved in the same rounds, with the harness's interval (interval_label says what kind).
    No interval where the evaluation recorded none (a per-workload ratio of medians)."""

    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    rounds: int | None = None
    faster: bool | None = None  # the interval lies above the noise floor (never on the interpreter)

    @property
    def text(self) -> str:
        if self.speedup is None:
            return "-"
        interval = interval_text(self.ci_low, self.ci_high, self.rounds) if self.ci_low is not None else None
        return f"{self.speedup:.3f}x" + (f" [{interval}]" if interval else "")


class CandidatePoint(BaseModel):
    """One evaluated candidate: its speedup over the baseline as its own evaluation measured it
    (interleaved with the baseline), or none when it was not verified."""

    id: str
    iteration: int
    status: str
    kind: str | None = None
    speedup: float | None = None
    vs_baseline: Speedup | None = None


class LineageStep(BaseModel):
    """One kernel on the way from the baseline to the best: the plan that produced it, and its
    speedups over the baseline and over the kernel it changed, each from its own evaluation."""

    id: str
    iteration: int
    kind: str | None = None
    parent_id: str | None = None
    plan_title: str | None = None
    fix_of: str | None = None      # a repair of this failed attempt, written for the same plan
    status: str | None = None
    vs_baseline: Speedup
    vs_parent: Speedup


class TaskRow(BaseModel):
    task: str
    run_dir: str
    outcome: str                       # a key of OUTCOMES: how the run ended
    verdict: str | None = None         # a key of VERDICTS, for a finished search: what its best is worth
    note: str | None = None            # stop reason, skip reason, or error line
    timer: str | None = None
    device_name: str | None = None
    baseline_kind: str = "kernel"      # "reference": a from-scratch run
    baseline_us: float | None = None   # geomean over workloads of the median
    baseline_spread_pct: float | None = None  # worst IQR/median over workloads
    best_us: float | None = None
    best_spread_pct: float | None = None
    best_id: str | None = None
    best_kind: str | None = None
    speedup: float | None = None
    ci_low: float | None = None        # the harness's interval; see interval_label
    ci_high: float | None = None
    interval_rounds: int | None = None
    measurements: int | None = None    # evaluations the best's figure pools (tools/best_figure.py)
    confirmed: int | None = None       # of them, confirmations at the run's end or by `show --confirm`
    pct_peak: float | None = None
    pct_achievable: float | None = None
    pct_of_copy: float | None = None  # memory-bound workloads: % of a same-size device copy's speed
    vs_torch_compile: float | None = None  # best kernel / torch.compile(reference), >1: we are faster
    vs_torch_compile_low: float | None = None
    vs_torch_compile_high: float | None = None
    vs_torch_compile_rounds: int | None = None
    torch_compile_mode: str = "default"    # the comparator's mode (reference_kernel.COMPILE_MODES)
    torch_compile_over_baseline: float | None = None
    vs_eager: Speedup | None = None        # best kernel / eager PyTorch, the standing evaluation's
    torch_compile_note: str | None = None  # why there is no torch.compile figure (it failed)
    iterations: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    history: list[tuple[int, float]] = []
    best_by_iteration: list[tuple[int, str]] = []  # the run's best after each iteration
    candidates: list[CandidatePoint] = []
    lineage: list[LineageStep] = []                # baseline first, the best kernel last
    # The best kernel's own evaluation: "best", and "baseline" timed in the same rounds (medians
    # only); when the best is the baseline, its own evaluation. Never the baseline's setup times.
    workloads: dict[str, dict[str, Timing]] = {}
    # torch_compile.json's evaluation (GPU): "best", "torch_compile", "eager", timed in the same rounds
    standing: dict[str, dict[str, Timing]] = {}
    # comparator (baseline, torch_compile, eager) -> workload -> the best's speedup, within one evaluation
    by_workload: dict[str, dict[str, Speedup]] = {}
    flops_kind: str | None = None                  # task.json's: which compute roof applies
    provenance: dict[str, str | None] = {}
    baseline_source: str | None = None
    best_source: str | None = None
    # which configuration each @triton.autotune kernel of the best ran per workload, who chose it, and
    # what a shared tuning key costs (the best's evaluation: AutotuneRecord.summary and notes)
    autotune: list[str] = []

    @property
    def correct(self) -> bool:
        return self.outcome == "optimized" and self.speedup is not None

    @property
    def interpreter(self) -> bool:
        return is_interpreter(self.timer)

    @property
    def shown_outcome(self) -> str:
        """The outcome key as show and runs report it: "optimized" only for a best kernel faster than
        the baseline beyond noise, "finished" for any other finished search (its best the baseline,
        within noise, slower, or on the interpreter), else the outcome."""
        if self.outcome == "optimized":
            return "optimized" if self.verdict == "faster" else "finished"
        return self.outcome

    @computed_field  # type: ignore[prop-decorator]
    @property
    def label(self) -> str:
        """The outcome as the page and the terminal say it."""
        if self.outcome == "optimized" and self.verdict:
            return VERDICTS[self.verdict] + (f" (the {head_word(self.timer)} is torch.compile's own kernel, the "
                                             "Inductor seed)" if self.best_kind == "inductor_seed" else "")
        return OUTCOMES.get(self.outcome, self.outcome)

    @property
    def torch_compile_line(self) -> str | None:
        """One sentence on the best kernel against torch.compile(reference), or None without one."""
        if self.vs_torch_compile is None:
            return self.torch_compile_note
        interval = f" [{interval_text(self.vs_torch_compile_low, self.vs_torch_compile_high, self.vs_torch_compile_rounds)}]" \
            if self.vs_torch_compile_low is not None else ""
        if self.vs_torch_compile < 1:
            beyond = " beyond noise" if self.vs_torch_compile_high is not None and self.vs_torch_compile_high < 1 else ""
            return (f"slower than torch.compile{self.mode_note}{beyond}: the best kernel runs at "
                    f"{self.vs_torch_compile:.3f}x of torch.compile(reference){interval}")
        return f"faster than torch.compile{self.mode_note}: {self.vs_torch_compile:.3f}x{interval}"

    @property
    def mode_note(self) -> str:
        """ " (mode M)" where torch.compile was not in its default mode, else nothing."""
        return mode_note(self.torch_compile_mode)


def geomean(values: list[float | None] | list[float]) -> float | None:
    positive = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, positive)) / len(positive)) if positive else None


def interval_text(low: float | None, high: float | None, rounds: int | None, measurements: int | None = None,
                  confirmed: int | None = None) -> str:
    """An interval and what it is: one evaluation's rounds, or (`measurements`) evaluations of one
    program pooled, widened to hold another evaluation's figure (tools/best_figure.py)."""
    if low is None or high is None:
        return "–"
    if measurements:
        fresh = f", {confirmed} of them confirming it" if confirmed else ""
        return f"{low:.3f}–{high:.3f}, across {measurements} evaluation{'s' if measurements > 1 else ''}{fresh}"
    return f"{low:.3f}–{high:.3f}, {interval_label(rounds)}"


def best_per_iteration(row: TaskRow) -> list[tuple[int, CandidatePoint]]:
    """The run's best after each iteration, with its speedup over the baseline as measured in
    its own evaluation (the baseline itself at 1.0x). The figure the headline quotes, so the
    curve ends where the headline does."""
    by_id = {c.id: c for c in row.candidates}
    return [(it, by_id[b]) for it, b in row.best_by_iteration if b in by_id and by_id[b].speedup is not None]


def fast_p(rows: list[TaskRow], ps=FAST_P) -> dict[float, float]:
    """Share of all tasks that are correct and faster than p (KernelBench's fast_p). Interpreter times
    are not performance: a task timed on the CPU interpreter counts as correct (fast_0) and never as
    faster than any p > 0, and where no task was timed on a real timer only fast_0 is given (as
    `accelopt check` does, evals/reporting/check_suite.py)."""
    timed = any(r.correct and not r.interpreter for r in rows)
    return {p: sum(1 for r in rows if r.correct and (p == 0 or (not r.interpreter and (r.speedup or 0) > p)))
            / len(rows) for p in ps if p == 0 or timed}


def timer_groups(rows: list[TaskRow]) -> dict[str | None, list[TaskRow]]:
    """Rows by timer: figures of different timers (GPU, CPU interpreter) are never pooled. A task
    with no timer (skipped, failed) belongs to every group: it counts among the tasks of fast_p."""
    timers = sorted({r.timer for r in rows if r.timer})
    if len(timers) <= 1:
        return {timers[0] if timers else None: rows}
    return {t: [r for r in rows if r.timer in (t, None)] for t in timers}
