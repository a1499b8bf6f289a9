"""The figure a run reports for its best kernel: every evaluation of the best's program against the
baseline, pooled (tools/harness/stats.pool), and the confirmations the run's end and `accelopt
show --confirm` add (fresh inputs, the rules of `check`; nodes/standing.py, nodes/services.confirm).

One evaluation's interval says only what its own rounds did; the pooled figure's interval is
widened by the noise floor as a verdict's is (stats.across) and by however far the evaluations
themselves disagree, so it holds the next evaluation's figure. A program is its source up to
comments and layout, with the judge's autotune choice written in (`pinned_source`): two sources
that pin one configuration of one kernel are one program.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from accelopt.tools.harness import stats
from accelopt.tools.harness.autotune_choices import pinned_source as _pinned
from accelopt.tools.harness.result import INTERPRETER, AutotuneRecord
from accelopt.tools.harness.verdict import word_for
from accelopt.tools.pyparse import program
from accelopt.tools.runcache import digest


class Confirmation(BaseModel):
    """One fresh evaluation of the best against the baseline: its rounds' interval on the timer
    its verdict rests on, or why it gave none (a status other than verified: the best failed on
    inputs it had not seen)."""

    model_config = ConfigDict(extra="allow")

    status: str
    speedup: float | None = None
    ci_low: float | None = None   # the rounds' interval (stats.pool reads it)
    ci_high: float | None = None
    rounds: int | None = None
    basis: str | None = None      # span | kernel_only | interpreter
    timer: str | None = None
    device_name: str | None = None
    seed: int | None = None       # `accelopt check --replay SEED` draws its inputs again
    error: str | None = None


class BestFigure(BaseModel):
    """What summary.json, `show`, `runs`, the report, MCP and `graph.invoke` report for the best."""

    model_config = ConfigDict(extra="allow")

    speedup: float
    ci_low: float
    ci_high: float
    measurements: int           # evaluations pooled: the run's of this program, and confirmations
    confirmed: int = 0          # of them, fresh confirmations
    rounds: int = 0
    spread: float = 0.0         # the between-evaluation standard deviation (log scale) they showed
    word: str                   # faster | slower | within noise | undecided | no verdict
    basis: str | None = None
    pooled: list[str] = []      # the candidates whose evaluations it pools
    failed_confirmation: str | None = None  # a confirmation that did not verify: what it said


def program_key(source: str) -> str:
    """What makes two sources one program: the syntax tree, not comments or layout (the source
    itself where it does not parse)."""
    try:
        return digest(program(source).dump)
    except (SyntaxError, ValueError):
        return digest(source)


def pinned_source(candidate: Mapping[str, Any]) -> str | None:
    """The candidate's source as best_kernel.py holds it: with the configuration the judge chose for
    its autotuned kernel written in (a user's process would otherwise tune anew, and may pick another)."""
    source = candidate.get("source")
    chosen = (candidate.get("autotune_choice") or {}).get("candidate")
    return _pinned(source, AutotuneRecord(**chosen)).text if source and chosen else source


def _measured(versus: Mapping[str, Any] | None) -> stats.Interval | None:
    if not versus or versus.get("ci_low") is None or versus.get("ci_high") is None:
        return None
    return stats.Interval(versus["speedup"], versus["ci_low"], versus["ci_high"], versus.get("rounds") or 0)


def _versus_baseline(candidate: Mapping[str, Any]) -> Mapping[str, Any]:
    return (candidate.get("versus") or {}).get("baseline") or {}


def measurements(candidates: Mapping[str, Mapping[str, Any]], best: Mapping[str, Any]) -> dict[str, stats.Interval]:
    """Per candidate of the run that is the best's program, verified, and measured against the
    baseline on the timer the best's own figure rests on: its rounds' interval."""
    source = pinned_source(best)
    basis = _versus_baseline(best).get("basis")
    if source is None:
        return {}
    key = program_key(source)
    out = {}
    for cid, c in candidates.items():
        vs = _versus_baseline(c)
        if c.get("status") != "verified" or vs.get("basis") != basis or (iv := _measured(vs)) is None:
            continue
        if cid == best.get("id") or ((s := pinned_source(c)) is not None and program_key(s) == key):
            out[cid] = iv
    return out


def best_figure(candidates: Mapping[str, Mapping[str, Any]], best: Mapping[str, Any],
                confirmations: Sequence[Confirmation] = ()) -> BestFigure | None:
    """The best's figure against the baseline, every measurement of its program pooled; None where
    it has none (the baseline itself, or a best never compared), and on the CPU interpreter until a
    confirmation is asked for (`show --confirm`: its figure is then said with no verdict)."""
    interpreter = best.get("timer") == INTERPRETER
    if interpreter and not confirmations:  # its wall clock is no performance: nothing to pool unless asked
        return None
    runs = measurements(candidates, best)
    fresh = [(c, iv) for c in confirmations if c.status == "verified" and (iv := _measured(c.model_dump()))]
    pooled = list(runs.values()) + [iv for _, iv in fresh]
    if not pooled:
        return None
    vs = _versus_baseline(best)
    floor = vs.get("noise_floor") or stats.NOISE_FLOOR
    p = stats.pool(pooled, floor)
    failed = next((f"{c.status}: {c.error}" for c in confirmations if c.status != "verified"), None)
    return BestFigure(speedup=p.interval.speedup, ci_low=p.interval.low, ci_high=p.interval.high,
                      measurements=p.measurements, confirmed=len(fresh), rounds=p.interval.rounds,
                      spread=p.spread, word="no verdict" if interpreter else word_for(p.inner, floor),
                      basis=vs.get("basis"), pooled=list(runs), failed_confirmation=failed)
