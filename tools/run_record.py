"""The run record, summary.json: its model, built from the graph's state, written, and read back.

summary.json is a published run format: its keys and their meaning stay. Fields added since the
first runs (marked below) have defaults, so a file written by an older accelopt still loads. The
graph's state keeps the record as a plain dict (`RunSummary.dump()`): state stays JSON.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from accelopt.tools.best_figure import BestFigure, Confirmation, best_figure
from accelopt.tools.candidate_record import evaluation_of, lineage_of
from accelopt.tools.harness.result import NOT_JUDGED
from accelopt.tools.llm_spec import totals
from accelopt.tools.rundir import atomic_write

SUMMARY_FILE = "summary.json"


class Record(BaseModel):
    # keys this version does not know (a newer accelopt's) are kept, not dropped, when a record is
    # read and written again
    model_config = ConfigDict(extra="allow")


class UsageBucket(Record):
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0


class UsageTotals(UsageBucket):
    """`tools/llm_spec.totals` of the run's ledger."""

    estimated_calls: int = 0  # added: calls counted from an estimate
    unpriced_calls: int = 0   # added: calls of a model with no price, counted as $0
    by_role: dict[str, UsageBucket] = {}
    by_iteration: dict[str, UsageBucket] = {}  # added
    by_candidate: dict[str, UsageBucket] = {}  # added


class IterationRecord(Record):
    """The selector's record of a finished iteration."""

    iteration: int
    evaluated: int = 0
    verified: int = 0
    best_id: str | None = None
    best_speedup: float | None = None
    beam: list[str] = []
    tokens: int = 0
    cost_usd: float = 0.0


class IterationEvent(Record):
    """A planner call that failed, was skipped or deferred for the budget, or answered no plan."""

    iteration: int
    event: str  # planner_failed | planner_skipped | planner_empty | planner_deferred
    member: str | None = None
    error: str | None = None


# an entry with `event` is an event, any other an iteration's record
Iteration = Annotated[IterationEvent | IterationRecord, Field(union_mode="left_to_right")]


class AutotuneSummary(Record):
    """What --autotune added apart from the rewrites: best speedup = rewrite speedup x autotune gain."""

    rewrites_tuned: int
    variants: int
    gain_geomean: float | None = None
    best_is_autotuned: bool
    best_rewrite_speedup: float | None = None
    best_autotune_gain: float


class TorchCompileStanding(Record):
    """The best kernel timed interleaved with torch.compile(reference) (speedups > 1: the best is faster)."""

    speedup: float
    ci_low: float | None = None
    ci_high: float | None = None
    rounds: int | None = None
    verdict: str  # faster | slower | within noise
    eager: float | None = None  # over eager PyTorch
    device_name: str | None = None
    mode: str = "default"  # torch.compile's mode (reference_kernel.COMPILE_MODES); records before it: default


class NotMeasured(Record):
    not_measured: str  # why there is no standing against torch.compile


Standing = Annotated[TorchCompileStanding | NotMeasured, Field(union_mode="left_to_right")]


class RunSummary(Record):
    """summary.json. Written by the record node at the end of every iteration; the standing node
    adds versus_torch_compile at the run's end (absent from the file until then)."""

    task_dir: str
    iteration: int = 0
    stop_reason: str | None = None  # null while the run goes on
    best_id: str
    best_speedup: float | None = None
    # added. "kernel": speedups are against the task's baseline.py; "reference": a from-scratch run,
    # against the eager PyTorch reference
    baseline_kind: str = "kernel"
    best_speedup_vs_parent: float | None = None  # added
    best_parent_id: str | None = None            # added
    timer: str | None = None
    device_name: str | None = None
    best_pct_peak: float | None = None
    best_pct_achievable: float | None = None
    # added. memory-bound workloads: % of the speed of a device copy of the same bytes, same rounds
    best_pct_of_copy: float | None = None
    beam: list[str] = []
    # added. why a finished run failed (a fatal model error, no planner call ever answered), else null
    failure: str | None = None
    candidates_evaluated: int = 0  # the baseline and programs never evaluated not counted
    statuses: dict[str, int] = {}  # the candidates by status, the baseline not counted (candidate_counts)
    usage: UsageTotals = UsageTotals()
    iterations: list[Iteration] = []  # the state's history
    insights: int = 0
    autotune: AutotuneSummary | None = None  # added; null without --autotune
    note: str | None = None
    # added. best_speedup is this figure's: every evaluation of the best's program pooled, with the
    # confirmations (tools/best_figure.py); null where the best has none (the baseline)
    best_figure: BestFigure | None = None
    confirmations: list[Confirmation] = []  # added: fresh evaluations of the best, the run's end's first
    not_confirmed: str | None = None        # added: why the run's end did not confirm the best
    versus_torch_compile: Standing | None = None  # added

    def with_standing(self, standing: Mapping[str, Any] | None) -> RunSummary:
        """The record with the standing node's torch.compile figure (unchanged given None)."""
        if standing is None:
            return self
        return RunSummary.model_validate({**self.dump(), "versus_torch_compile": standing})

    def with_confirmations(self, candidates: Mapping[str, Mapping[str, Any]],
                           confirmations: list[Confirmation], not_confirmed: str | None = None) -> RunSummary:
        """The record with the best's figure pooled anew over the run's evaluations of its program
        and `confirmations` (all of them: earlier ones and new)."""
        figure = best_figure(candidates, candidates[self.best_id], confirmations)
        return self.model_copy(update={
            "confirmations": confirmations, "best_figure": figure, "not_confirmed": not_confirmed,
            "best_speedup": figure.speedup if figure is not None else self.best_speedup})

    def dump(self) -> dict:
        """The record as summary.json holds it (and the graph's state)."""
        exclude = {"versus_torch_compile"} if self.versus_torch_compile is None else None
        # python mode: json.dumps writes the numbers as before (an infinite speedup as Infinity, not null)
        return self.model_dump(exclude=exclude)


def load_summary(run_dir: str | Path) -> RunSummary | None:
    """The run directory's summary.json; None where it has none (no iteration finished yet) or it
    cannot be read as a run record."""
    path = Path(run_dir) / SUMMARY_FILE
    try:
        return RunSummary.model_validate(json.loads(path.read_text())) if path.is_file() else None
    except (OSError, ValueError):  # pydantic's ValidationError is a ValueError
        return None


def write_summary(run_dir: str | None, summary: RunSummary, best_source: str | None) -> None:
    """summary.json, and best_kernel.py where the source is given (nothing without a run directory)."""
    if not run_dir:
        return
    atomic_write(Path(run_dir) / SUMMARY_FILE, json.dumps(summary.dump(), indent=2))
    if best_source:
        atomic_write(Path(run_dir) / "best_kernel.py", best_source)


def run_failure(state: Mapping[str, Any]) -> str | None:
    """One line when the run failed: a fatal model error stopped it, setup stopped it (the task did
    not load, or cannot run here: no beam), every planner call failed, or the budget was spent,
    so that nothing was ever evaluated; None for a run that searched (every door says it alike:
    the CLI exits 1, graph/doors.py raises RunFailed)."""
    if state.get("fatal"):
        return str(state["fatal"])
    stop = state.get("stop_reason")
    if stop and not state.get("beam"):
        return str(stop)
    failed = [h for h in state.get("history") or [] if h.get("event") == "planner_failed"]
    searched = any(c.get("iteration") for c in (state.get("candidates") or {}).values())
    if failed and not searched:
        return (f"every planner call failed ({len(failed)} calls), so nothing was evaluated; "
                f"the last: {failed[-1].get('error')}")
    if str(stop or "").startswith("budget spent") and not searched:
        return f"{stop}, before any candidate was evaluated"
    return None


def iterations_done(history: Iterable[Mapping[str, Any]]) -> int:
    """The last iteration that searched: its selector's record is in the history, and it evaluated
    something or no planner call of it failed. An iteration whose planners never answered did not
    search (a run whose planner never answered has done 0 of its iterations, not 1)."""
    entries = list(history)
    failed = {h.get("iteration") for h in entries if h.get("event")}  # a planner failed, skipped or empty
    searched = [h.get("iteration") or 0 for h in entries
                if not h.get("event") and (h.get("evaluated") or h.get("iteration") not in failed)]
    return max(searched, default=0)


def candidate_counts(candidates: Mapping[str, Mapping[str, Any]],
                     baseline_id: str = "baseline") -> tuple[int, dict[str, int]]:
    """How many candidates were evaluated, and by status: every candidate except the baseline; what
    summary.json, the live bar, the CLI's summary and MCP's answer all show. Only what reached the
    judge is evaluated: a call the budget did not pay for (`not_sent`), one that failed (`llm_error`),
    a reply without a whole kernel (`no_code`, `truncated`), one never collected (`in_flight`,
    `cancelled`) and a program already evaluated (`duplicate`) are counted by status only."""
    statuses: dict[str, int] = {}
    for cid, cand in candidates.items():
        if cid != baseline_id and cand.get("status"):
            statuses[cand["status"]] = statuses.get(cand["status"], 0) + 1
    return sum(n for status, n in statuses.items() if status not in NOT_JUDGED), statuses


def split_statuses(statuses: Mapping[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """The statuses of candidates evaluated (they add up to `candidates_evaluated`), and of those
    that never reached the judge (`candidate_counts`: a duplicate, a call not sent or failed, a reply
    without a whole kernel, one never collected)."""
    done = {k: v for k, v in sorted(statuses.items()) if k not in NOT_JUDGED}
    return done, {k: v for k, v in sorted(statuses.items()) if k in NOT_JUDGED}


def counts_text(evaluated: int, statuses: Mapping[str, int]) -> str:
    """`5 evaluated: verified 5; 1 not evaluated: duplicate 1`: the evaluated statuses add up to the
    count, and a program never evaluated is not among them (the CLI's summary and `show`)."""
    done, skipped = split_statuses(statuses)
    text = f"{evaluated} evaluated" + (": " + ", ".join(f"{k} {v}" for k, v in done.items()) if done else "")
    if skipped:
        text += f"; {sum(skipped.values())} not evaluated: " + ", ".join(f"{k} {v}" for k, v in skipped.items())
    return text


def run_summary(state: Mapping[str, Any]) -> RunSummary:
    """The run record as of the state's last iteration: the best's figures are its evaluation's
    (pooled over its program's evaluations: best_figure), its parent its lineage's."""
    candidates, beam = state["candidates"], state["beam"]
    best = candidates[beam[0]]
    born, said = lineage_of(best), evaluation_of(best)
    evaluated, statuses = candidate_counts(candidates, state["baseline_id"])
    figure = best_figure(candidates, best)
    return RunSummary(
        task_dir=state["task_dir"], iteration=state["iteration"], stop_reason=state.get("stop_reason"),
        best_id=born["id"], best_speedup=figure.speedup if figure is not None else said.get("speedup"),
        best_figure=figure,
        baseline_kind=lineage_of(candidates[state["baseline_id"]]).get("kind", "kernel"),
        best_speedup_vs_parent=said.get("speedup_vs_parent"), best_parent_id=born.get("parent_id"),
        timer=said.get("timer"), device_name=said.get("device_name"), best_pct_peak=said.get("pct_peak"),
        best_pct_achievable=said.get("pct_achievable"), best_pct_of_copy=said.get("pct_of_copy"), beam=beam,
        failure=run_failure(state),
        candidates_evaluated=evaluated, statuses=statuses, usage=UsageTotals.model_validate(totals(state.get("usage", []))),
        iterations=state.get("history", []), insights=len(state.get("insights", [])),
        autotune=autotune_summary(candidates, best),
        note=("timer interpreter_wall: CPU Triton-interpreter times, not GPU performance"
              if said.get("timer") == "interpreter_wall" else None))


def autotune_summary(candidates: dict[str, dict], best: dict) -> AutotuneSummary | None:
    """What --autotune added, apart from the rewrites: per tuned rewrite, the best variant's
    speedup over the rewrite (both against the baseline); and the best kernel's split."""
    tuned = [c for c in candidates.values() if c.get("autotune")]
    if not tuned:
        return None
    gains = [c["autotune"]["gain"] for c in tuned if c["autotune"].get("gain")]
    origin = candidates.get(lineage_of(best).get("autotune_of") or "")
    return AutotuneSummary(
        rewrites_tuned=len(tuned), variants=sum(c["autotune"]["tried"] for c in tuned),
        gain_geomean=math.exp(sum(math.log(g) for g in gains) / len(gains)) if gains else None,
        best_is_autotuned=origin is not None,
        best_rewrite_speedup=origin.get("speedup") if origin else best.get("speedup"),
        best_autotune_gain=((best.get("speedup") or 0) / origin["speedup"]
                            if origin and origin.get("speedup") else 1.0))
