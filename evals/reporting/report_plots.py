"""The report's matplotlib figures, as PNG bytes: suite overviews (best speedup per iteration,
speedup bars with their intervals, cost when anything cost money, fast_p) and per task a
roofline, every candidate's speedup over the baseline per iteration, the best kernel's lineage
from the baseline, and its speedup per workload. Figures of different timers are never drawn
together; interpreter figures say so in their titles, and name no kernel best and no figure a
speedup: there the kept kernel is the beam head and its figure the baseline's wall time over its
own (rows.kept, rows.ratio: the CLI's words).

A figure never sets times from different evaluations side by side: speedups are drawn as each
evaluation measured them (the kernel and its comparator timed interleaved in the same rounds),
with the recorded interval as whiskers (report.py says why)."""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from typing import NamedTuple

from accelopt.evals.reporting.rows import (
    INTERPRETER,
    LineageStep,
    Speedup,
    TaskRow,
    best_per_iteration,
    fast_p,
    head_word,
    interval_label,
    is_interpreter,
    kept,
    ratio,
    timer_groups,
)
from accelopt.tools.roofline import DevicePeak, lookup_peak

BLUE, ORANGE, GREY, RED, GREEN, PURPLE = "#3070c0", "#e08a20", "#999999", "#c03030", "#40a060", "#8060b0"
NICE_SPEEDUPS = (0.05, 0.1, 0.2, 0.5, 0.67, 0.8, 0.9, 0.95, 1.05, 1.1, 1.25, 1.5, 2, 5, 10, 20)
LABEL_WIDTH = 46  # characters of a plan title per line in the lineage figure (two lines at most)
DPI = 110  # pixels per inch of every figure's PNG: a point of text is DPI / 72 px at the PNG's own size
LINEAGE_FONT = 9  # pt, the lineage figure's labels: 13.75 px in its PNG, which the page shows across its width


class Plot(NamedTuple):
    png: bytes
    caption: str
    task: str | None = None  # None: a suite overview


def plot_key(kind: str, task: str) -> str:
    """A file-name-safe key for a task's figure."""
    return f"{kind}_{re.sub(r'[^A-Za-z0-9_.-]+', '_', task)}"


def timer_tag(timer: str | None) -> str:
    return " (CPU interpreter wall time: not GPU performance)" if timer == INTERPRETER else ""


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    _pyplot().close(fig)
    return buf.getvalue()


def make_plots(rows: list[TaskRow]) -> dict[str, Plot]:
    """Every figure of the page, keyed by file name (plots/KEY.png)."""
    plots: dict[str, Plot] = {}
    groups = timer_groups(rows)
    for timer, group in groups.items():
        suffix = "" if len(groups) == 1 else "_" + re.sub(r"\W+", "_", str(timer))
        plots.update({key + suffix: plot for key, plot in overview(group, timer).items()})
    for r in rows:
        if not r.correct:
            continue
        tag = timer_tag(r.timer)
        if roofline_refusal(r) is None:
            plots[plot_key("roofline", r.task)] = Plot(roofline(r), f"{r.task}: roofline", r.task)
        figure = "wall-time ratio to" if is_interpreter(r.timer) else "speedup over"
        if any(c.speedup is not None for c in r.candidates):
            plots[plot_key("candidates", r.task)] = Plot(candidate_speedups(r), f"{r.task}: every candidate's "
                                                         f"{figure} the baseline, per iteration{tag}", r.task)
        if len(r.lineage) > 1:
            plots[plot_key("lineage", r.task)] = Plot(lineage_figure(r), f"{r.task}: the {kept(r.timer)}'s lineage "
                                                      f"from the baseline{tag}", r.task)
        if any(r.by_workload.values()):
            plots[plot_key("workloads", r.task)] = Plot(workload_speedups(r), f"{r.task}: the {kept(r.timer)}'s "
                                                        f"{figure.split()[0]} per workload{tag}", r.task)
    return plots


# ---------------------------------------------------------------- suite overviews

def overview(rows: list[TaskRow], timer: str | None) -> dict[str, Plot]:
    """The suite's figures for one timer's tasks. On the CPU interpreter each says what it draws: the
    beam head's ratio of wall times to the baseline, and fast_0 (the share verified) alone."""
    plt = _pyplot()
    tag = timer_tag(timer)
    interp = is_interpreter(timer)
    done = [r for r in rows if r.correct]
    plots = {}
    # what each task's figure is: its best's speedup, or its beam head's ratio of wall times (rows.ratio)
    axis = f"{ratio(timer)}, {head_word(timer)} (x)" if interp else "best speedup vs baseline (x)"

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in done:
        xs, ys = zip(*r.history)
        ax.plot(xs, ys, marker="o", label=r.task)
    ax.axhline(1.0, color=GREY, lw=0.8)
    title = f"The beam head per iteration: {ratio(timer)}" if interp else "Best speedup per iteration"
    ax.set(xlabel="iteration", ylabel=axis, title=title + tag)
    ax.xaxis.get_major_locator().set_params(integer=True)
    if done:
        ax.legend(fontsize=7, ncol=2)
    plots["speedup_per_iteration"] = Plot(_png(fig), title + tag)

    caption = ("Each task's beam head: the baseline's wall time over its own" if interp else
               "Speedup of each task's best kernel, against its baseline and torch.compile(reference)")
    plots["per_task"] = Plot(speedup_bars(done, tag, timer), caption + tag)

    if any(r.cost_usd > 0 for r in done):  # a tuner run costs nothing: no column of points at $0
        fig, ax = plt.subplots(figsize=(6, 4))
        for r in done:
            ax.scatter(r.cost_usd, r.speedup)
            ax.annotate(r.task, (r.cost_usd, r.speedup), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.axhline(1.0, color=GREY, lw=0.8)
        what = f"The beam head ({ratio(timer)})" if interp else "Speedup"
        ax.set(xlabel="LLM cost ($)", ylabel=axis, title=f"{what} against cost" + tag)
        plots["speedup_vs_cost"] = Plot(_png(fig), f"{what} against LLM cost" + tag)

    fig, ax = plt.subplots(figsize=(6, 4))
    curve = fast_p(rows, ps=[p / 20 for p in range(0, 81)])
    ax.plot(list(curve), [100 * v for v in curve.values()], marker="o" if len(curve) == 1 else None)
    if interp and len(curve) == 1:  # rows.fast_p: no threshold above 0 on the interpreter's wall clock
        ax.set(xlabel="p (fast_0 only: the CPU interpreter sets no threshold above 0)", ylabel="% of tasks verified",
               title="fast_0: the share of tasks verified" + tag, ylim=(0, 105))
        plots["fast_p"] = Plot(_png(fig), "fast_0, the share of tasks verified" + tag)
    else:
        ax.set(xlabel="p (speedup threshold)", ylabel="% of tasks correct and faster than p", title="fast_p" + tag,
               ylim=(0, 105))
        plots["fast_p"] = Plot(_png(fig), "fast_p curve" + tag)
    return plots


def _whiskers(values: list[float], lows: list[float | None], highs: list[float | None]) -> list[list[float]]:
    return [[v - lo if lo is not None else 0.0 for v, lo in zip(values, lows)],
            [hi - v if hi is not None else 0.0 for v, hi in zip(values, highs)]]


def speedup_bars(done: list[TaskRow], tag: str, timer: str | None = None) -> bytes:
    """Bars that start at 1.0x on a log axis (up: faster, down: slower), with the recorded
    interval as whiskers: best vs baseline, and best vs torch.compile where it was timed. On the
    CPU interpreter (timer) the beam head's ratio of wall times, up and down no verdict."""
    plt = _pyplot()
    interp = is_interpreter(timer)
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(done) + 2), 4.2))
    x = list(range(len(done)))
    versus = [r for r in done if r.vs_torch_compile]
    width = 0.3 if versus else 0.45
    mine = f"{ratio(timer)}, {head_word(timer)}" if interp else "best / baseline"
    series = [(mine, BLUE, [r.speedup for r in done], [r.ci_low for r in done],
               [r.ci_high for r in done], [r.interval_rounds for r in done])]
    if versus:
        series.append(("best / torch.compile(reference)", ORANGE, [r.vs_torch_compile for r in done],
                       [r.vs_torch_compile_low for r in done], [r.vs_torch_compile_high for r in done],
                       [r.vs_torch_compile_rounds for r in done]))
    extremes = [1.0]
    for i, (label, color, values, lows, highs, _rounds) in enumerate(series):
        offset = (i - (len(series) - 1) / 2) * width
        xs = [j + offset for j, v in zip(x, values) if v]
        vs = [v for v in values if v]
        lo = [lw for v, lw in zip(values, lows) if v]
        hi = [h for v, h in zip(values, highs) if v]
        ax.bar(xs, [v - 1.0 for v in vs], bottom=1.0, width=width, color=color, label=label,
               yerr=_whiskers(vs, lo, hi), capsize=3, ecolor="#333333")
        for xv, v in zip(xs, vs):
            ax.annotate(f"{v:.3f}x", (xv + width / 2, v), fontsize=7, ha="left", va="center", xytext=(2, 0),
                        textcoords="offset points")
        extremes += vs + [v for v in lo + hi if v]
    _log_speedup_axis(ax, extremes)
    ax.set_xticks(x, [r.task for r in done], rotation=30, ha="right", fontsize=8)
    ax.set_xlim(-0.7, len(done) - 0.3)
    rounds = sorted({n for r in done for n in (r.interval_rounds, r.vs_torch_compile_rounds) if n})
    whisker = ", ".join(interval_label(n) for n in rounds) or "no interval recorded"
    if interp:
        ax.set(ylabel=f"{ratio(timer)} (x, log scale; not performance)",
               title=f"The beam head per task{tag}\nwhiskers: {whisker}")
    else:
        ax.set(ylabel="speedup (x, log scale; above 1: faster)", title=f"Best kernel per task{tag}\nwhiskers: {whisker}")
    ax.legend(fontsize=8)
    return _png(fig)


def _log_speedup_axis(ax, values: list[float], axis: str = "y") -> None:
    """A log speedup axis symmetric about 1.0x (above: faster), wide enough for `values`, with a
    line at 1.0x and ticks written as speedups."""
    from matplotlib.ticker import FixedLocator, FuncFormatter

    span = max([abs(math.log(v)) for v in values if v and v > 0] + [0.0]) * 1.25
    span = max(span, math.log(1.1))
    scale, limit, which = ((ax.set_yscale, ax.set_ylim, ax.yaxis) if axis == "y" else
                           (ax.set_xscale, ax.set_xlim, ax.xaxis))
    scale("log")
    limit(math.exp(-span), math.exp(span))
    (ax.axhline if axis == "y" else ax.axvline)(1.0, color="#333333", lw=0.9)
    which.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    if span < math.log(40):  # a few round speedups on either side, where the decades leave none
        which.set_minor_locator(FixedLocator([v for v in NICE_SPEEDUPS if math.exp(-span) < v < math.exp(span)
                                              and abs(math.log(v)) >= 0.08 * span]))  # none crowding 1x
        which.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    else:
        which.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.tick_params(axis=axis, which="minor", labelsize=7)


def _whisker_note(speedups: Sequence[Speedup | None]) -> str:
    rounds = sorted({s.rounds for s in speedups if s is not None and s.rounds and s.ci_low is not None})
    return ", ".join(interval_label(n) for n in rounds) or "no interval recorded"


# ---------------------------------------------------------------- per task

def roofline_refusal(row: TaskRow) -> str | None:
    """Why the task has no roofline chart, in one line; None when it has one."""
    if row.timer == INTERPRETER:
        return ("No roofline: a CPU Triton-interpreter run; interpreter wall times have nothing to do with a GPU's "
                "compute and bandwidth ceilings.")
    if row.timer == "nki_benchmark":
        return "No roofline: the report charts GPU rooflines only (Trainium figures are in the table)."
    if not row.device_name or lookup_peak(row.device_name) is None:
        return (f"No roofline: no ceilings known for the device {row.device_name or '(not recorded)'} "
                "(tools/roofline.py).")
    if not any(t.flops and t.bytes for t in (row.workloads.get("best") or {}).values()):
        return "No roofline: the run records no FLOP or byte counts for its workloads."
    return None


def _compute_roofs(peak: DevicePeak, kind: str) -> tuple[float, float | None]:
    """The compute ceiling (FLOP/s) and its achievable figure, for vector or tensor work."""
    if kind == "tensor":
        return peak.tensor_tflops * 1e12, (peak.achievable_tensor_tflops or 0) * 1e12 or None
    return peak.vector_tflops * 1e12, None


def roofline(row: TaskRow) -> bytes:
    """Each workload's arithmetic intensity (reference FLOPs / bytes) against the throughput the
    kernel reached (FLOPs / median time), under the device's bandwidth and compute ceilings
    (datasheet solid, measured achievable dashed): the baseline and the best from the best's
    evaluation (same rounds), torch.compile from the standing evaluation, labelled so."""
    plt = _pyplot()
    peak = lookup_peak(row.device_name or "")
    assert peak is not None
    kind = row.flops_kind or "vector"
    compute, compute_ach = _compute_roofs(peak, kind)
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    # FLOP and byte counts are the reference's, per workload (torch.compile's times come without them)
    counts = {name: (t.flops, t.bytes) for series in ("baseline", "best")
              for name, t in (row.workloads.get(series) or {}).items() if t.flops and t.bytes}

    def points(series: str) -> dict[str, tuple[float, float]]:
        timings = row.standing.get(series) if series == "torch_compile" else row.workloads.get(series)
        return {name: (counts[name][0] / counts[name][1], counts[name][0] / (t.median_us * 1e-6))
                for name, t in (timings or {}).items() if name in counts and t.median_us}

    # marker: which kernel; colour: which workload (workloads of one task often share an intensity)
    from matplotlib.lines import Line2D

    colors = {name: plt.get_cmap("tab10")(i % 10) for i, name in enumerate(counts)}
    kernels = [("baseline", "o", "baseline (the best's evaluation)"), ("best", "^", "best"),
               ("torch_compile", "s", "torch.compile(reference) (standing evaluation)")]
    handles = []
    for series, marker, label in kernels:
        found = points(series)
        for name, (ai, reached) in found.items():
            ax.scatter([ai], [reached], marker=marker, color=colors[name], s=36, zorder=3, edgecolors="#222222",
                       linewidths=0.4)
        if found:
            handles.append(Line2D([], [], ls="", marker=marker, color="#777777", label=label))
    before, after = points("baseline"), points("best")
    for name, (ai, reached) in after.items():
        if name in before and before[name] != (ai, reached):
            ax.annotate("", xy=(ai, reached), xytext=before[name],
                        arrowprops={"arrowstyle": "->", "color": colors[name], "lw": 0.9})
    handles += [Line2D([], [], ls="", marker="o", color=colors[name], label=name) for name in counts]
    intensities = [f / b for f, b in counts.values()]
    ridge = compute / (peak.hbm_tbps * 1e12)
    lo = min(intensities + [ridge]) / 8
    hi = max(intensities + [ridge]) * 8
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(compute, x * peak.hbm_tbps * 1e12) for x in xs], color="#222222", lw=1.4,
            label=f"datasheet: {peak.hbm_tbps:g} TB/s, {compute / 1e12:g} TFLOP/s ({kind})")
    if peak.achievable_hbm_tbps:
        roof = compute_ach or compute
        ax.plot(xs, [min(roof, x * peak.achievable_hbm_tbps * 1e12) for x in xs], color="#222222", lw=1, ls="--",
                label=f"achievable (measured): {peak.achievable_hbm_tbps:g} TB/s"
                      + (f", {roof / 1e12:g} TFLOP/s" if compute_ach else ""))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set(xlabel="arithmetic intensity (FLOP/byte, the reference's counts)", ylabel="achieved FLOP/s",
           title=f"{row.task}: roofline on {peak.name} ({row.device_name})")
    ax.grid(True, which="major", alpha=0.3)
    roofs, roof_labels = ax.get_legend_handles_labels()
    ax.legend(handles=handles + roofs, labels=[h.get_label() for h in handles] + roof_labels, fontsize=7,
              loc="lower right")
    return _png(fig)


def _spots(row: TaskRow) -> dict[str, float]:
    """Each candidate's x: its iteration, an iteration's candidates side by side around it."""
    crowd: dict[int, int] = {}
    for c in row.candidates:
        crowd[c.iteration] = crowd.get(c.iteration, 0) + 1
    seen: dict[int, int] = {}
    where = {}
    for c in row.candidates:
        n = seen[c.iteration] = seen.get(c.iteration, -1) + 1
        where[c.id] = c.iteration + (n - (crowd[c.iteration] - 1) / 2) * min(0.08, 0.6 / crowd[c.iteration])
    return where


def candidate_speedups(row: TaskRow) -> bytes:
    """Every candidate's speedup over the baseline by iteration, each as its own evaluation measured
    it (timed interleaved with the baseline) with its interval as whiskers; candidates that were
    not verified along the bottom; the run's best after each iteration as a step line, ending
    at the figure the headline quotes."""
    plt = _pyplot()
    from matplotlib.transforms import blended_transform_factory

    interp = is_interpreter(row.timer)
    head = head_word(row.timer)  # the run's best, or on the CPU interpreter its beam head
    fig, ax = plt.subplots(figsize=(7, 4.2))
    where = _spots(row)
    ok = [c for c in row.candidates if c.speedup is not None and c.id != "baseline"]
    values: list[float] = []
    if ok:
        vs = [c.vs_baseline or Speedup(speedup=c.speedup) for c in ok]
        ys = [v.speedup or 1.0 for v in vs]
        ax.errorbar([where[c.id] for c in ok], ys, yerr=_whiskers(ys, [v.ci_low for v in vs], [v.ci_high for v in vs]),
                    fmt="o", color=BLUE, ms=4, capsize=2, elinewidth=0.8, label="verified candidate", zorder=3)
        values += ys + [x for v in vs for x in (v.ci_low, v.ci_high) if x]
    bad = [where[c.id] for c in row.candidates if c.speedup is None]
    if bad:
        below = blended_transform_factory(ax.transData, ax.transAxes)
        ax.scatter(bad, [0.04] * len(bad), marker="x", color=RED, s=30, transform=below, zorder=3,
                   label=f"not verified ({len(bad)}, no {'ratio' if interp else 'speedup'})")
    steps = best_per_iteration(row)
    if steps:
        xs, ys = [it for it, _ in steps], [c.speedup or 1.0 for _, c in steps]
        ax.step(xs + [max(row.iterations, xs[-1]) + 0.3], ys + [ys[-1]], where="post", color=GREEN, lw=1.5,
                label=f"the run's {head} after each iteration")
        values += ys
    best = next((c for c in row.candidates if c.id == row.best_id), None)
    if best is not None and best.speedup is not None:
        ax.scatter([where[best.id]], [best.speedup], marker="*", s=140, color=GREEN, zorder=4,
                   label=f"{head} ({best.id}): {best.speedup:.3f}x")
    _log_speedup_axis(ax, values)
    ax.xaxis.get_major_locator().set_params(integer=True)
    axis = f"{ratio(row.timer)} (x, log scale)" if interp else "speedup over the baseline (x, log scale)"
    ax.set(xlabel="iteration", ylabel=f"{axis}\neach kernel timed interleaved with it",
           title=f"{row.task}: every candidate against the baseline{timer_tag(row.timer)}\nwhiskers: "
                 f"{_whisker_note([c.vs_baseline for c in ok])}")
    ax.legend(fontsize=7)
    return _png(fig)


def _step_label(n: int, step: LineageStep) -> str:
    import textwrap

    title = step.plan_title or ("(start)" if step.id == "baseline" else "(no plan recorded)")
    if step.fix_of:
        title += f" (repair of {step.fix_of})"
    lines = textwrap.wrap(title, LABEL_WIDTH) or [""]
    if len(lines) > 2:
        lines = [lines[0], lines[1][: LABEL_WIDTH - 1] + "…"]
    return "\n".join([f"{n}. {step.id}"] + lines)


def lineage_figure(row: TaskRow) -> bytes:
    """The best kernel's lineage from the baseline, one bar per step (baseline at the top): the
    step's plan title, its speedup over the baseline from its own evaluation with the interval
    as whiskers, and its speedup over the kernel it changed. The page shows it across its whole
    width (report_html), at most about its own size, so every label of it is LINEAGE_FONT pt."""
    plt = _pyplot()
    steps = row.lineage
    fig, ax = plt.subplots(figsize=(7.5, 1.5 + 0.7 * len(steps)))
    ys = [len(steps) - 1 - i for i in range(len(steps))]
    vals = [s.vs_baseline.speedup or 1.0 for s in steps]
    colors = [GREY if s.id == "baseline" else GREEN if s.id == row.best_id else BLUE for s in steps]
    ax.barh(ys, [v - 1.0 for v in vals], left=1.0, height=0.55, color=colors,
            xerr=_whiskers(vals, [s.vs_baseline.ci_low for s in steps], [s.vs_baseline.ci_high for s in steps]),
            capsize=3, ecolor="#333333")
    extremes = vals + [x for s in steps for x in (s.vs_baseline.ci_low, s.vs_baseline.ci_high) if x]
    _log_speedup_axis(ax, extremes, axis="x")
    for y, v, s in zip(ys, vals, steps):
        text = "baseline" if s.id == "baseline" else s.vs_baseline.text.replace(", range over", ",").replace(
            ", bootstrap 95% interval over", ", 95% over")
        if s.id != "baseline" and s.vs_parent.speedup is not None and s.parent_id != "baseline":
            text += f"; {s.vs_parent.speedup:.3f}x its parent"
        edge = max([v] + [x for x in (s.vs_baseline.ci_high,) if x])
        ax.annotate(text, (edge, y), fontsize=LINEAGE_FONT, va="center", xytext=(4, 0), textcoords="offset points")
    ax.set_yticks(ys, [_step_label(n, s) for n, s in enumerate(steps)], fontsize=LINEAGE_FONT)
    ax.tick_params(axis="x", which="both", labelsize=LINEAGE_FONT)
    ax.spines[["top", "right"]].set_visible(False)  # the step's figures run past the axes: no line across them
    ax.set_ylim(-0.6, len(steps) - 0.4)
    what = f"{ratio(row.timer)} (x, log scale" if is_interpreter(row.timer) else \
        "speedup over the baseline (x, log scale"
    ax.set_xlabel(f"{what}; each step's own evaluation, interleaved with the baseline)", fontsize=LINEAGE_FONT + 1)
    ax.set_title(f"{row.task}: how {row.best_id} came from the baseline{timer_tag(row.timer)}\nwhiskers: "
                 f"{_whisker_note([s.vs_baseline for s in steps])}", fontsize=LINEAGE_FONT + 2)
    return _png(fig)


WORKLOAD_SERIES = (  # comparator, legend (which evaluation), colour
    ("baseline", "best / baseline (the best kernel's evaluation)", BLUE),
    ("torch_compile", "best / torch.compile(reference) (standing evaluation)", ORANGE),
    ("eager", "best / eager PyTorch (standing evaluation)", PURPLE))
# the same on the CPU interpreter (no standing evaluation there: it is a GPU's)
INTERPRETER_SERIES = {"baseline": "baseline/beam head wall time (the beam head's evaluation)"}


def workload_speedups(row: TaskRow) -> bytes:
    """Per workload, the best kernel's speedup over each comparator, each ratio from one
    evaluation (over the baseline: the best's own; over torch.compile and eager PyTorch: the
    standing one), with whiskers where both kept their rounds; then all workloads together,
    the verdicts with their recorded intervals."""
    plt = _pyplot()
    names = list(dict.fromkeys(w for per in row.by_workload.values() for w in per))
    overall = {"baseline": Speedup(speedup=row.speedup, ci_low=row.ci_low, ci_high=row.ci_high,
                                   rounds=row.interval_rounds),
               "torch_compile": Speedup(speedup=row.vs_torch_compile, ci_low=row.vs_torch_compile_low,
                                        ci_high=row.vs_torch_compile_high, rounds=row.vs_torch_compile_rounds),
               "eager": row.vs_eager or Speedup()}
    interp = is_interpreter(row.timer)
    series = [(k, INTERPRETER_SERIES.get(k, label) if interp else label, color)
              for k, label, color in WORKLOAD_SERIES if row.by_workload.get(k)]
    groups = names + ["all workloads\n(geomean, as the headline)"]
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(groups) + 2.5), 4.4))
    width = 0.7 / max(len(series), 1)
    extremes: list[float] = []
    shown: list[Speedup] = []
    for i, (key, label, color) in enumerate(series):
        cells = [row.by_workload[key].get(n) for n in names] + [overall[key]]
        xs = [j + (i - (len(series) - 1) / 2) * width for j, c in enumerate(cells) if c and c.speedup]
        got = [c for c in cells if c is not None and c.speedup]
        vs = [c.speedup or 1.0 for c in got]
        ax.bar(xs, [v - 1.0 for v in vs], bottom=1.0, width=width, color=color, label=label)
        spread = [(x, c) for x, c in zip(xs, got) if c.ci_low is not None]  # no cap where none was measured
        if spread:
            ax.errorbar([x for x, _ in spread], [c.speedup or 1.0 for _, c in spread], fmt="none", capsize=3,
                        ecolor="#333333", yerr=_whiskers([c.speedup or 1.0 for _, c in spread],
                                                         [c.ci_low for _, c in spread], [c.ci_high for _, c in spread]))
        for xv, v in zip(xs, vs):
            ax.annotate(f"{v:.3g}x", (xv, v), fontsize=6, ha="center", va="bottom" if v >= 1 else "top",
                        xytext=(0, 2 if v >= 1 else -2), textcoords="offset points")
        extremes += vs + [x for c in got for x in (c.ci_low, c.ci_high) if x]
        shown += got
    _log_speedup_axis(ax, extremes)
    ax.set_xticks(range(len(groups)), groups, rotation=20, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(groups) - 0.4)
    ax.set(ylabel=f"{ratio(row.timer)}, beam head (x, log scale)" if interp else
           "speedup of the best kernel (x, log scale)",
           title=f"{row.task}: the {kept(row.timer)} per workload{timer_tag(row.timer)}\nwhiskers: {_whisker_note(shown)}"
                 + ("; none where only the comparator's median was kept" if any(c.ci_low is None for c in shown)
                    else ""))
    ax.legend(fontsize=7)
    return _png(fig)
