"""The statistic every speedup rests on, in one place. Standard library only: the judge (run as
a script, importing nothing of the accelopt package) loads this file by path to decide when its
timing rounds may stop, and result.compare_rounds uses it for the recorded comparison.

Per round, the geomean over workloads of comparator time / candidate time; the speedup is the
median over rounds, with a bootstrap 95% interval of that median. Rounds, not pooled samples,
are the unit: samples inside one round share clocks and thermal state.

Where the interval lies decides, against a noise floor: above 1 + floor, faster; below
1 / (1 + floor), slower; inside both bounds, equivalent. A comparison is decided (more rounds
would not change what it says) when it lies on one of those sides and is tight: no wider than
DECIDED_WIDTH of the speedup.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

RESAMPLES = 2000
NOISE_FLOOR = 0.02     # a GPU difference under 2% is not called a difference
DECIDED_WIDTH = 0.10   # an interval wider than 10% of its speedup is not a figure yet
# Undecided comparisons whose interval stopped narrowing: from the 6th round on, when the last 3
# rounds narrowed the widest interval by less than 10%, more rounds are not deciding it (a
# comparator whose rounds fall in two modes, measured on real FlashInfer-Bench solutions).
STALL_AFTER, STALL_LOOKBACK, STALL_GAIN = 6, 3, 0.9
_TINY_US = 1e-9        # a zero time must not stop the statistic (log of 0)
# A call whose kernels (CUPTI's summed GPU activity) fill less of its span than this waits on its
# host: host work between launches, which varies from round to round, decides the span; the
# comparison is then decided on kernel-only time (FlashInfer-Bench's own evaluator times that).
HOST_BOUND_SHARE = 0.6

Side = Literal["faster", "slower", "equivalent", "unclear"]


@dataclass(frozen=True)
class Interval:
    speedup: float  # median over rounds of the per-round ratio
    low: float
    high: float
    rounds: int


def round_ratios(candidate: Mapping[str, Sequence[float]], other: Mapping[str, Sequence[float]]) -> list[float]:
    """Per round, the geomean over the workloads both were timed on of other/candidate (each
    workload's round medians, in µs). Rounds past the shorter record are left out."""
    names = [n for n in candidate if n in other]
    if not names:
        return []
    count = min(min(len(candidate[n]), len(other[n])) for n in names)
    ratios = []
    for r in range(count):
        logs = [math.log(max(other[n][r], _TINY_US) / max(candidate[n][r], _TINY_US)) for n in names]
        ratios.append(math.exp(sum(logs) / len(logs)))
    return ratios


def interval(ratios: Sequence[float], resamples: int = RESAMPLES, seed: int = 0) -> Interval:
    """The median of `ratios` and a bootstrap 95% interval of it; seeded, so the same rounds
    always give the same interval. Up to 5 rounds the interval is their min-max range."""
    if not ratios:
        raise ValueError("no rounds to compare")
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(resamples))
    return Interval(speedup=statistics.median(ratios), low=medians[int(0.025 * resamples)],
                    high=medians[int(0.975 * resamples) - 1], rounds=len(ratios))


def side(iv: Interval, floor: float) -> Side:
    """Where the interval lies against the noise floor."""
    up, down = 1.0 + floor, 1.0 / (1.0 + floor)
    if iv.low > up:
        return "faster"
    if iv.high < down:
        return "slower"
    if down <= iv.low and iv.high <= up:
        return "equivalent"
    return "unclear"


def decided(iv: Interval, floor: float) -> bool:
    """Faster, slower or equivalent, and tight enough that the speedup is a figure."""
    return side(iv, floor) != "unclear" and iv.high - iv.low <= DECIDED_WIDTH * iv.speedup


def host_bound(kernel_us: float | None, span_us: float) -> bool:
    """True where a call's kernels fill less than HOST_BOUND_SHARE of its span."""
    return kernel_us is not None and kernel_us < HOST_BOUND_SHARE * span_us


def width(iv: Interval) -> float:
    """The interval's width as a share of its speedup."""
    return (iv.high - iv.low) / max(iv.speedup, _TINY_US)


def stalled(widths: Mapping[int, float]) -> bool:
    """`widths`: after round n (1-based), the widest interval's share of its speedup. True when,
    from STALL_AFTER rounds on, the last STALL_LOOKBACK rounds narrowed it by less than 10%."""
    if not widths:
        return False
    last = max(widths)
    before = widths.get(last - STALL_LOOKBACK)
    return last >= STALL_AFTER and before is not None and widths[last] > STALL_GAIN * before


# ---------------------------------------------------------------- across evaluations

_Z95 = 1.96


def across(iv: Interval, floor: float) -> Interval:
    """The interval a verdict reports: the rounds' interval widened by the noise floor on each
    side. The rounds of one evaluation share its process, its inputs' placement and its stretch of
    the GPU's clocks, so their interval says nothing of the next evaluation's; the floor is what
    two evaluations of one program may differ by (the reason a smaller difference is not called
    one). So a reported interval lies above 1 exactly where the rounds clear the floor (`side`
    "faster"), below 1 exactly where they fall under it."""
    up = 1.0 + floor
    return Interval(speedup=iv.speedup, low=iv.low / up, high=iv.high * up, rounds=iv.rounds)


@dataclass(frozen=True)
class Pooled:
    """Several evaluations of one program against one comparator, as one figure: `interval` is
    reported as `across` reports one evaluation's, `spread` the between-evaluation standard
    deviation (log scale) the figures themselves showed, beyond what their rounds explain."""

    interval: Interval
    measurements: int
    spread: float
    inner: Interval  # the mean's own interval, before the floor's widening (what a word is decided on)


def pool(measured: Sequence[Interval], floor: float) -> Pooled:
    """One figure from several evaluations' rounds' intervals (not `across`'s), by a random-effects
    mean on the log scale (DerSimonian-Laird): each evaluation's standard error read off its
    interval, the between-evaluation variance estimated from how far the figures disagree beyond
    those errors, each evaluation weighted by both. The pooled interval is that mean's 95% interval,
    widened by the floor as one evaluation's is (`across`): one measurement pools to its own
    reported interval, and figures that disagree widen it."""
    if not measured:
        raise ValueError("no measurements to pool")
    ys = [math.log(max(m.speedup, _TINY_US)) for m in measured]
    ses = [max(math.log(max(m.high, _TINY_US) / max(m.low, _TINY_US)), 0.0) / (2 * _Z95) or 1e-6 for m in measured]
    w = [1.0 / s ** 2 for s in ses]
    fixed = sum(wi * y for wi, y in zip(w, ys)) / sum(w)
    q = sum(wi * (y - fixed) ** 2 for wi, y in zip(w, ys))
    scale = sum(w) - sum(wi ** 2 for wi in w) / sum(w)
    tau2 = max(0.0, (q - (len(ys) - 1)) / scale) if scale > 0 else 0.0
    w_re = [1.0 / (s ** 2 + tau2) for s in ses]
    mean = sum(wi * y for wi, y in zip(w_re, ys)) / sum(w_re)
    half = _Z95 * math.sqrt(1.0 / sum(w_re))
    if len(measured) == 1:  # its own interval, asymmetric as the rounds made it
        inner = measured[0]
    else:
        inner = Interval(speedup=math.exp(mean), low=math.exp(mean - half), high=math.exp(mean + half),
                         rounds=sum(m.rounds for m in measured))
    return Pooled(interval=across(inner, floor), measurements=len(measured), spread=math.sqrt(tau2), inner=inner)
