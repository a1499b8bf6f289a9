"""What a timed comparison says, and on which timer.

Every GPU workload is timed two ways in the same calls (sandbox.time_calls): the call's span (from
the moment the GPU could start it to its last activity, host gaps included) and its kernels alone
(CUPTI's summed GPU activity). Both are compared over the same rounds. The span decides, unless
the calls are host-dominated (kernels fill less than stats.HOST_BOUND_SHARE of a span, the
candidate's or the comparator's): then host work between launches, which varies from round to
round, decides the span, and the comparison is decided on kernel-only time, as FlashInfer-Bench's
evaluator times kernels. Either way the verdict names its timer and gives both figures.

A verdict is `faster` or `slower` where its rounds' interval clears the noise floor, and `no
verdict` on the CPU interpreter, whose times are not performance. Otherwise it is a tie, `within
noise`, where the speedup itself lies inside the floor and its interval is a figure (no wider than
stats.DECIDED_WIDTH), and `undecided` where the speedup lies beyond the floor but its interval
reaches inside (more rounds might tell) or the interval is too wide to be a figure. The word is a
function of the interval and the floor alone: a kernel at a tie is `within noise` in every process,
whether or not its rounds happen to straddle a bound. The interval it reports is the rounds' widened
by the floor (stats.across), so that it holds another evaluation's figure: it lies above 1 exactly
where the verdict is `faster`.
"""

from __future__ import annotations

import math

from accelopt.tools.harness import stats
from accelopt.tools.harness.result import (
    INTERPRETER,
    Basis,
    Comparison,
    EvalResult,
    Verdict,
    VerdictWord,
    compare_rounds,
)

# A comparator timed this much slower than in its own evaluation (geomean over workloads, on the
# timer its verdict rests on) voids the comparison: an LLM-written parent can tell it is a
# comparator (its calls are never the checked ones) and pad them, which made an honest kernel
# 2.62x "faster" than its own twin on an H100. 10% is well beyond the spread between evaluations
# of one kernel (a few percent) and far below what padding must add to matter.
COMPARATOR_DRIFT = 1.10

_WORDS: dict[str, VerdictWord] = {"faster": "faster", "slower": "slower", "equivalent": "within noise", "unclear": "undecided"}


def host_dominated(result: EvalResult, comparator: str | None = None) -> list[str]:
    """The workloads whose calls are host-dominated, as figures ("b1: candidate kernels 103.5 of
    442.0 µs"): the candidate's, and the comparator's where one is named."""
    timed = [("candidate", result.workloads)]
    if comparator is not None:
        timed.append((comparator, result.compare.get(comparator, {})))
    return [f"{workload}: {who} kernels {t.kernel_us:.1f} of {t.median_us:.1f} µs"
            for who, timings in timed for workload, t in timings.items()
            if stats.host_bound(t.kernel_us, t.median_us)]


def kernel_comparison(result: EvalResult, comparator: str) -> Comparison | None:
    """The comparison on kernel-only rounds; None where a workload has none (the interpreter, a
    trace that lost calls, or a record written before kernel rounds were kept)."""
    theirs = result.compare.get(comparator, {})
    names = [n for n in result.workloads if n in theirs]
    if not names or not all(result.workloads[n].round_kernel_us and theirs[n].round_kernel_us for n in names):
        return None
    floor = _floor(result, comparator)
    try:
        return compare_rounds(result.workloads, theirs, timer=result.timer, noise_floor=floor, kernel_only=True)
    except ValueError:
        return None


def _floor(result: EvalResult, comparator: str) -> float:
    vs = result.versus.get(comparator)
    return vs.noise_floor if vs is not None and vs.noise_floor else stats.NOISE_FLOOR


def _interval(c: Comparison) -> stats.Interval:
    return stats.Interval(c.speedup, c.ci_low, c.ci_high, c.rounds)


def word_for(iv: stats.Interval, floor: float) -> VerdictWord:
    """The word for an interval against a noise floor (see the module's docstring): one
    comparison's rounds, or several evaluations' pooled mean (tools/best_figure.py)."""
    side = stats.side(iv, floor)
    if side != "unclear":
        return _WORDS[side]
    tie = 1.0 / (1.0 + floor) <= iv.speedup <= 1.0 + floor and stats.width(iv) <= stats.DECIDED_WIDTH
    return "within noise" if tie else "undecided"


def word_of(c: Comparison) -> VerdictWord:
    """The word for one comparison's rounds against its noise floor."""
    return word_for(_interval(c), c.noise_floor or stats.NOISE_FLOOR)


def _figure(label: str, c: Comparison) -> str:
    return f"{label} {c.speedup:.3f}x [{c.ci_low:.3f}, {c.ci_high:.3f}]"


def _said(word: VerdictWord, basis: Basis, c: Comparison, reason: str) -> Verdict:
    """A verdict on comparison `c`, reporting the interval across evaluations (stats.across)."""
    floor = c.noise_floor or stats.NOISE_FLOOR
    wide = stats.across(_interval(c), floor)
    if word == "within noise" and stats.side(_interval(c), floor) == "unclear":
        reason = (f"a tie: the speedup lies inside the {floor:.0%} floor, its rounds reach past it on one side "
                  f"without clearing it; {reason}")
    return Verdict(word=word, basis=basis, speedup=c.speedup, ci_low=wide.low, ci_high=wide.high, reason=reason,
                   rounds_low=c.ci_low, rounds_high=c.ci_high)


def verdict(result: EvalResult, comparator: str) -> Verdict | None:
    """The comparator's verdict; None where the candidate was not compared with it."""
    span = result.versus.get(comparator)
    if span is None:
        return None
    if result.timer == "interpreter_wall":
        return Verdict(word="no verdict", basis="interpreter", speedup=span.speedup, ci_low=span.ci_low,
                       ci_high=span.ci_high, reason="the CPU interpreter's wall clock cannot tell faster from slower",
                       rounds_low=span.ci_low, rounds_high=span.ci_high)
    kernel = result.versus_kernel.get(comparator)
    host = host_dominated(result, comparator)
    span_word = word_of(span)
    kernel_word = word_of(kernel) if kernel is not None else "undecided"
    both = _figure("span", span) + (f", {_figure('kernel-only', kernel)}" if kernel is not None else "")
    if host and kernel is not None and kernel_word != "undecided":
        return _said(kernel_word, "kernel_only", kernel,
                     f"host-dominated calls ({'; '.join(host)}): decided on kernel-only time (CUPTI); {both}")
    if span_word != "undecided":
        why = f"decided on the span; {both}"
        if host:
            why = f"host-dominated calls ({'; '.join(host)}), kernel-only time undecided: {why}"
        return _said(span_word, "span", span, why)
    if host:
        why = (f"host-dominated calls ({'; '.join(host)}): "
               + ("no kernel-only rounds to decide on" if kernel is None else "kernel-only time undecided too"))
    else:
        why = "no workload is host-dominated: the rounds themselves disagree"
    return _said("undecided", "span", span, f"{why}; {both}")


def ranked(result: EvalResult) -> dict[str, tuple[Comparison, Basis]]:
    """Per comparator, the comparison on the timer its verdict rests on, and that timer: what the
    search ranks a candidate by is what `check` says of it (kernel-only where the calls are
    host-dominated and that decides, else the span)."""
    out: dict[str, tuple[Comparison, Basis]] = {}
    for name, span in result.versus.items():
        v = result.verdicts.get(name)
        if v is not None and v.basis == "kernel_only" and name in result.versus_kernel:
            out[name] = (result.versus_kernel[name], "kernel_only")
        else:
            out[name] = (span, "interpreter" if result.timer == "interpreter_wall" else "span")
    return out


def with_verdicts(result: EvalResult) -> EvalResult:
    """Fills `versus_kernel` and `verdicts` from the timings and `versus`; returns the result."""
    result.versus_kernel = {name: c for name in result.versus if (c := kernel_comparison(result, name)) is not None}
    result.verdicts = {name: v for name in result.versus if (v := verdict(result, name)) is not None}
    return result


def why_undecided(result: EvalResult) -> str:
    """Said when the rounds stopped undecided (at their cap, or no longer narrowing): how wide the
    intervals still are, and whether the calls are host-bound (their kernels fill little of the
    span, so host work between launches, which varies from round to round, decides the time),
    with the figures."""
    wide = ", ".join(f"vs {name} {v.ci_low:.3f}-{v.ci_high:.3f} ({(v.ci_high - v.ci_low) / v.speedup:.0%} of "
                     f"{v.speedup:.3f}x)" for name, v in result.versus.items())
    host = [f"{name} kernels {t.kernel_us:.0f} of {t.median_us:.0f} µs" for name, t in result.workloads.items()
            if stats.host_bound(t.kernel_us, t.median_us)]
    cause = (f"host-bound calls ({'; '.join(host)}): host work between launches varies from round to round"
             if host else "no workload is host-bound: the rounds themselves disagree")
    stalled = " (the last rounds no longer narrowed it)" if result.rounds and result.rounds.stopped == "stalled" else ""
    return f"undecided after {result.rounds.ran if result.rounds else '?'} rounds{stalled}, {wide}: {cause}"



def void_comparisons(result: EvalResult, recorded: dict[str, dict[str, dict]] | None = None,
                     reasons: dict[str, str] | None = None) -> EvalResult:
    """Voids comparisons. Without `recorded` or `reasons`: those the judge voided (`result.void`: a
    comparator's outputs were wrong when timed). With `recorded` (comparator -> workload -> its
    WorkloadTiming fields, from its own evaluation): those with a comparator timed far slower here
    than there (COMPARATOR_DRIFT). With `reasons` (comparator -> why): those, as given (a comparator
    that failed its own evaluation). A void comparison's verdict is `undecided`, and its reason and
    the evidence say why."""
    if recorded is None and reasons is None:
        voided = dict(result.void)
    else:
        voided = {name: why for name, own in (recorded or {}).items()
                  if name not in result.void and (why := _slowed(result, name, own))}
        voided.update({name: why for name, why in (reasons or {}).items() if name not in result.void})
        result.void.update(voided)
    for name, why in voided.items():
        v = result.verdicts.get(name)
        if v is not None:
            result.verdicts[name] = v.model_copy(update={"word": "undecided", "reason": f"void: {why}"})
        result.evidence.append(f"vs {name}: the comparison is void: {why}")
    return result


def _slowed(result: EvalResult, name: str, own: dict[str, dict]) -> str | None:
    """Why the comparator's time here contradicts its own recorded time, or None (always on the
    interpreter, whose wall clock is no performance and drifts with the machine's load)."""
    if result.timer == INTERPRETER:
        return None
    timed, v = result.compare.get(name) or {}, result.verdicts.get(name)
    key = "kernel_us" if v is not None and v.basis == "kernel_only" else "median_us"
    pairs = {w: (getattr(t, key), own[w].get(key)) for w, t in timed.items() if w in own}
    pairs = {w: (now, then) for w, (now, then) in pairs.items() if now and then}
    if not pairs:
        return None
    ratio = math.exp(sum(math.log(now / then) for now, then in pairs.values()) / len(pairs))
    if ratio <= COMPARATOR_DRIFT:
        return None
    figures = ", ".join(f"{w} {now:.1f} µs against {then:.1f} µs" for w, (now, then) in pairs.items())
    timer = "kernel-only" if key == "kernel_us" else "span"
    return (f"it ran {ratio:.2f}x slower as a comparator than in its own evaluation ({timer}: {figures}), beyond "
            f"the {COMPARATOR_DRIFT:.2f}x two evaluations of one kernel differ by")
