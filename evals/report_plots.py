"""The report's matplotlib figures, as PNG bytes: suite overviews (best speedup per iteration,
speedup bars with their intervals, cost when anything cost money, fast_p) and per task a
roofline, the latency of every candidate per iteration, and each workload's latency with its
spread. Figures of different timers are never drawn together; interpreter figures say so in
their titles."""

from __future__ import annotations

import io
import math
import re
from typing import NamedTuple

from accelopt.evals.report import (INTERPRETER, TaskRow, fast_p, interval_label, timer_groups)
from accelopt.tools.roofline import DevicePeak, lookup_peak

BLUE, ORANGE, GREY, RED, GREEN = "#3070c0", "#e08a20", "#999999", "#c03030", "#40a060"


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
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
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
        if roofline_refusal(r) is None:
            plots[plot_key("roofline", r.task)] = Plot(roofline(r), f"{r.task}: roofline", r.task)
        if any(c.latency_us for c in r.candidates):
            plots[plot_key("latency", r.task)] = Plot(latency_per_iteration(r), f"{r.task}: latency of every "
                                                      "candidate per iteration", r.task)
        if r.workloads:
            plots[plot_key("workloads", r.task)] = Plot(workload_latency(r), f"{r.task}: latency per workload",
                                                        r.task)
    return plots


# ---------------------------------------------------------------- suite overviews

def overview(rows: list[TaskRow], timer: str | None) -> dict[str, Plot]:
    plt = _pyplot()
    tag = timer_tag(timer)
    done = [r for r in rows if r.correct]
    plots = {}

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in done:
        xs, ys = zip(*r.history)
        ax.plot(xs, ys, marker="o", label=r.task)
    ax.axhline(1.0, color=GREY, lw=0.8)
    ax.set(xlabel="iteration", ylabel="best speedup vs baseline (x)", title="Best speedup per iteration" + tag)
    ax.xaxis.get_major_locator().set_params(integer=True)
    if done:
        ax.legend(fontsize=7, ncol=2)
    plots["speedup_per_iteration"] = Plot(_png(fig), "Best speedup per iteration" + tag)

    plots["per_task"] = Plot(speedup_bars(done, tag), "Speedup of each task's best kernel, against its baseline and "
                             "torch.compile(reference)" + tag)

    if any(r.cost_usd > 0 for r in done):  # a tuner run costs nothing: no column of points at $0
        fig, ax = plt.subplots(figsize=(6, 4))
        for r in done:
            ax.scatter(r.cost_usd, r.speedup)
            ax.annotate(r.task, (r.cost_usd, r.speedup), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.axhline(1.0, color=GREY, lw=0.8)
        ax.set(xlabel="LLM cost ($)", ylabel="best speedup vs baseline (x)", title="Speedup against cost" + tag)
        plots["speedup_vs_cost"] = Plot(_png(fig), "Speedup against LLM cost" + tag)

    fig, ax = plt.subplots(figsize=(6, 4))
    curve = fast_p(rows, ps=[p / 20 for p in range(0, 81)])
    ax.plot(list(curve), [100 * v for v in curve.values()])
    ax.set(xlabel="p (speedup threshold)", ylabel="% of tasks correct and faster than p", title="fast_p" + tag,
           ylim=(0, 105))
    plots["fast_p"] = Plot(_png(fig), "fast_p curve" + tag)
    return plots


def _whiskers(values: list[float], lows: list[float | None], highs: list[float | None]) -> list[list[float]]:
    return [[v - lo if lo is not None else 0.0 for v, lo in zip(values, lows)],
            [hi - v if hi is not None else 0.0 for v, hi in zip(values, highs)]]


def speedup_bars(done: list[TaskRow], tag: str) -> bytes:
    """Bars that start at 1.0x on a log axis (up: faster, down: slower), with the recorded
    interval as whiskers: best vs baseline, and best vs torch.compile where it was timed."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(done) + 2), 4.2))
    x = list(range(len(done)))
    versus = [r for r in done if r.vs_torch_compile]
    width = 0.3 if versus else 0.45
    series = [("best / baseline", BLUE, [r.speedup for r in done], [r.ci_low for r in done],
               [r.ci_high for r in done], [r.interval_rounds for r in done])]
    if versus:
        series.append(("best / torch.compile(reference)", ORANGE, [r.vs_torch_compile for r in done],
                       [r.vs_torch_compile_low for r in done], [r.vs_torch_compile_high for r in done],
                       [r.vs_torch_compile_rounds for r in done]))
    extremes = [1.0]
    for i, (label, color, values, lows, highs, rounds) in enumerate(series):
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
    span = max(abs(math.log(v)) for v in extremes if v > 0) * 1.25 or math.log(1.1)
    span = max(span, math.log(1.1))
    ax.set_yscale("log")
    ax.set_ylim(math.exp(-span), math.exp(span))
    ax.axhline(1.0, color="#333333", lw=0.9)
    ax.set_xticks(x, [r.task for r in done], rotation=30, ha="right", fontsize=8)
    ax.set_xlim(-0.7, len(done) - 0.3)
    rounds = sorted({n for r in done for n in (r.interval_rounds, r.vs_torch_compile_rounds) if n})
    whisker = ", ".join(interval_label(n) for n in rounds) or "no interval recorded"
    ax.set(ylabel="speedup (x, log scale; above 1: faster)", title=f"Best kernel per task{tag}\nwhiskers: {whisker}")
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}x" if span < math.log(2.5) else ""))
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.legend(fontsize=8)
    return _png(fig)


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
    kernel reached (FLOPs / median time), for the baseline, the best and torch.compile, under the
    device's bandwidth and compute ceilings (datasheet solid, measured achievable dashed)."""
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
        return {name: (counts[name][0] / counts[name][1], counts[name][0] / (t.median_us * 1e-6))
                for name, t in (row.workloads.get(series) or {}).items() if name in counts and t.median_us}

    # marker: which kernel; colour: which workload (workloads of one task often share an intensity)
    from matplotlib.lines import Line2D

    colors = {name: plt.get_cmap("tab10")(i % 10) for i, name in enumerate(counts)}
    kernels = [("baseline", "o", "baseline"), ("best", "^", "best"), ("torch_compile", "s", "torch.compile(reference)")]
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


def latency_per_iteration(row: TaskRow) -> bytes:
    """Every candidate's latency by iteration (its own evaluation), failed ones marked along the
    bottom, the baseline's as a line and the run's best after each iteration as a step line."""
    plt = _pyplot()
    from matplotlib.transforms import blended_transform_factory

    fig, ax = plt.subplots(figsize=(7, 4))
    by_id = {c.id: c for c in row.candidates}
    crowd: dict[int, int] = {}
    for c in row.candidates:
        crowd[c.iteration] = crowd.get(c.iteration, 0) + 1
    seen: dict[int, int] = {}
    ok_x, ok_y, bad_x, where = [], [], [], {}
    for c in row.candidates:  # an iteration's candidates side by side, centred on it
        n = seen[c.iteration] = seen.get(c.iteration, -1) + 1
        x = where[c.id] = c.iteration + (n - (crowd[c.iteration] - 1) / 2) * min(0.08, 0.6 / crowd[c.iteration])
        if c.latency_us:
            ok_x.append(x)
            ok_y.append(c.latency_us)
        else:
            bad_x.append(x)
    ax.scatter(ok_x, ok_y, color=BLUE, s=22, label="verified", zorder=3)
    if bad_x:
        below = blended_transform_factory(ax.transData, ax.transAxes)
        ax.scatter(bad_x, [0.04] * len(bad_x), marker="x", color=RED, s=30, transform=below, zorder=3,
                   label=f"failed ({len(bad_x)}, no time)")
    steps = [(it, by_id[b].latency_us) for it, b in row.best_by_iteration if b in by_id and by_id[b].latency_us]
    if steps:
        xs, ys = zip(*steps)
        ax.step(list(xs) + [max(row.iterations, xs[-1]) + 0.3], list(ys) + [ys[-1]], where="post", color=GREEN,
                lw=1.5, label="the run's best so far")
    base = by_id.get("baseline")
    if base and base.latency_us:
        ax.axhline(base.latency_us, color=GREY, ls="--", lw=0.9, label="baseline")
    if row.best_id in by_id and by_id[row.best_id].latency_us:
        ax.scatter([where[row.best_id]], [by_id[row.best_id].latency_us], marker="*", s=140,
                   color=GREEN, zorder=4, label=f"best ({row.best_id})")
    if ok_y and max(ok_y) / min(ok_y) > 8:
        ax.set_yscale("log")
    ax.xaxis.get_major_locator().set_params(integer=True)
    unit = "µs, CPU interpreter wall time" if row.interpreter else "µs"
    ax.set(xlabel="iteration", ylabel=f"latency ({unit})\ngeomean over workloads of the median",
           title=f"{row.task}: every candidate{timer_tag(row.timer)}")
    ax.legend(fontsize=7)
    return _png(fig)


def workload_latency(row: TaskRow) -> bytes:
    """Per workload, the median latency of the baseline, the best and torch.compile (and eager
    PyTorch) with whiskers one IQR long, centred on the median (the quartiles are not recorded)."""
    plt = _pyplot()
    names = list((row.workloads.get("best") or row.workloads.get("baseline") or {}).keys())
    series = [(k, label, color) for k, label, color in (
        ("baseline", "baseline" + (" (PyTorch reference)" if row.baseline_kind == "reference" else ""), GREY),
        ("best", "best", BLUE), ("torch_compile", "torch.compile(reference)", ORANGE),
        ("eager", "eager PyTorch", "#8060b0")) if row.workloads.get(k)]
    fig, ax = plt.subplots(figsize=(max(5.5, 1.3 * len(names) + 2.5), 4))
    width = 0.5 / max(len(series), 1)
    values = []
    for i, (key, label, color) in enumerate(series):
        timings = row.workloads[key]
        xs, ys, errs = [], [], []
        for j, name in enumerate(names):
            t = timings.get(name)
            if t:
                xs.append(j + (i - (len(series) - 1) / 2) * width)
                ys.append(t.median_us)
                errs.append((t.iqr_us or 0.0) / 2)
        ax.errorbar(xs, ys, yerr=errs, fmt="o", color=color, capsize=4, label=label, ms=5)
        values += ys
    if values and max(values) / min(values) > 8:
        ax.set_yscale("log")
    else:  # a linear axis starts at zero, so the gaps between kernels look as large as they are
        ax.set_ylim(bottom=0)
    ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
    unit = "µs, CPU interpreter wall time" if row.interpreter else "µs"
    ax.set(ylabel=f"median latency ({unit})", title=f"{row.task}: per workload, whiskers one IQR long"
           + timer_tag(row.timer))
    ax.legend(fontsize=7, loc="lower right")
    return _png(fig)
