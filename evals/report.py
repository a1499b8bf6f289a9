"""Reports: one table row per task, suite-level figures (geomean speedup, fast_p, cost per
speedup), matplotlib plots, and a single self-contained HTML page with the best kernels shown as
diffs against their baselines. Everything is rebuilt from run directories on disk.

Interpreter timings (timer interpreter_wall) are CPU Triton-interpreter wall times: the page says
so in its header and beside every such number, and never mixes them with GPU figures.
"""

from __future__ import annotations

import base64
import difflib
import html
import io
import json
import math
from pathlib import Path

from pydantic import BaseModel

FAST_P = (0.0, 0.5, 0.8, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0)


class TaskRow(BaseModel):
    task: str
    run_dir: str
    outcome: str                       # optimized, stopped, skipped, failed, running
    note: str | None = None            # stop reason, skip reason, or error line
    timer: str | None = None
    device_name: str | None = None
    baseline_kind: str = "kernel"      # "reference": a from-scratch run
    baseline_us: float | None = None   # geomean over workloads of the median
    baseline_spread_pct: float | None = None  # worst IQR/median over workloads
    best_us: float | None = None
    best_spread_pct: float | None = None
    best_id: str | None = None
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    pct_peak: float | None = None
    pct_achievable: float | None = None
    vs_torch_compile: float | None = None  # best kernel / torch.compile(reference), >1: we are faster
    torch_compile_over_baseline: float | None = None
    iterations: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    history: list[tuple[int, float]] = []
    baseline_source: str | None = None
    best_source: str | None = None

    @property
    def correct(self) -> bool:
        return self.outcome == "optimized" and self.speedup is not None


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def latency(workloads: dict) -> tuple[float | None, float | None]:
    """A kernel's latency over its workloads: geomean of the medians (us), and the worst IQR/median %."""
    if not workloads:
        return None, None
    medians = [t["median_us"] for t in workloads.values()]
    spread = max((t["iqr_us"] / t["median_us"] * 100 for t in workloads.values() if t["median_us"]), default=None)
    return geomean(medians), spread


def _read(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def load_row(run_dir: Path) -> TaskRow:
    run = _read(run_dir / "run.json") or {}
    name = Path(run.get("task_dir", run_dir.name)).name
    for marker, outcome in (("skipped.json", "skipped"), ("stopped.json", "stopped")):
        if (run_dir / marker).is_file():
            return TaskRow(task=name, run_dir=str(run_dir), outcome=outcome, note=_read(run_dir / marker)["reason"])
    if (run_dir / "error.txt").is_file():
        last = (run_dir / "error.txt").read_text().strip().splitlines()[-1:]
        return TaskRow(task=name, run_dir=str(run_dir), outcome="failed", note=" ".join(last))
    summary = _read(run_dir / "summary.json")
    if summary is None:
        return TaskRow(task=name, run_dir=str(run_dir), outcome="running", note="no finished iteration yet")
    name = Path(summary["task_dir"]).name
    best = _read(run_dir / "candidates" / summary["best_id"] / "result.json") or {}
    baseline = _read(run_dir / "candidates" / "baseline" / "result.json") or {}
    best_us, best_spread = latency(best.get("workloads") or {})
    # the baseline as timed in the same interleaved rounds as the best kernel, when it was
    same_rounds = (best.get("compared_us") or {}).get("baseline")
    if same_rounds:
        base_us = geomean(list(same_rounds.values()))
        base_spread = latency(baseline.get("workloads") or {})[1]
    else:
        base_us, base_spread = latency(baseline.get("workloads") or {})
    vs = (best.get("versus") or {}).get("baseline") or {}
    row = TaskRow(
        task=name, run_dir=str(run_dir), outcome="optimized" if summary.get("stop_reason") else "running",
        note=summary.get("stop_reason"), timer=summary.get("timer"), device_name=summary.get("device_name"),
        baseline_kind=summary.get("baseline_kind", "kernel"), baseline_us=base_us, baseline_spread_pct=base_spread,
        best_us=best_us, best_spread_pct=best_spread, best_id=summary["best_id"],
        speedup=summary.get("best_speedup") or 1.0, ci_low=vs.get("ci_low"), ci_high=vs.get("ci_high"),
        pct_peak=summary.get("best_pct_peak"), pct_achievable=summary.get("best_pct_achievable"),
        iterations=summary.get("iteration") or 0, tokens=(summary.get("usage") or {}).get("input_tokens", 0)
        + (summary.get("usage") or {}).get("output_tokens", 0), cost_usd=(summary.get("usage") or {}).get("cost_usd", 0.0),
        history=[(0, 1.0)] + [(h["iteration"], h.get("best_speedup") or 1.0) for h in summary.get("iterations", [])],
        baseline_source=_text(run_dir / "candidates" / "baseline" / "kernel.py"),
        best_source=_text(run_dir / "best_kernel.py"))
    torch_cmp = _read(run_dir / "torch_compile.json")
    if torch_cmp and torch_cmp.get("versus"):
        row.vs_torch_compile = torch_cmp["versus"]["torch_compile"]["speedup"]
        row.torch_compile_over_baseline = row.speedup / row.vs_torch_compile
    return row


def _text(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None


def load_rows(path: Path) -> list[TaskRow]:
    """A run directory, or an eval directory of run directories."""
    if (path / "run.json").is_file():
        return [load_row(path)]
    markers = ("run.json", "skipped.json", "stopped.json", "error.txt")
    rows = [load_row(p) for p in sorted(path.iterdir()) if p.is_dir() and any((p / m).is_file() for m in markers)]
    if not rows:
        raise FileNotFoundError(f"{path} holds no accelopt run (run.json) nor eval directory of runs")
    return rows


def fast_p(rows: list[TaskRow], ps=FAST_P) -> dict[float, float]:
    """Share of all tasks that are correct and faster than p (KernelBench's fast_p)."""
    return {p: sum(1 for r in rows if r.correct and r.speedup > p) / len(rows) for p in ps}


def suite_figures(rows: list[TaskRow]) -> dict:
    done = [r for r in rows if r.correct]
    geo = geomean([r.speedup for r in done])
    cost = sum(r.cost_usd for r in rows)
    return {
        "tasks": len(rows), "optimized": len(done), "geomean_speedup": geo, "fast_p": fast_p(rows),
        "total_cost_usd": cost, "total_tokens": sum(r.tokens for r in rows),
        # $ spent per +1% of geomean speedup (None when nothing got faster)
        "usd_per_pct_geomean": cost / ((geo - 1) * 100) if geo and geo > 1 and cost else None,
        "geomean_vs_torch_compile": geomean([r.vs_torch_compile for r in done if r.vs_torch_compile]),
        "timers": sorted({r.timer for r in done if r.timer}),
    }


# ---------------------------------------------------------------- plots

def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def make_plots(rows: list[TaskRow], interpreter: bool) -> dict[str, bytes]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tag = " (CPU interpreter times: not GPU performance)" if interpreter else ""
    done = [r for r in rows if r.correct]
    plots = {}

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in done:
        xs, ys = zip(*r.history)
        ax.plot(xs, ys, marker="o", label=r.task)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set(xlabel="iteration", ylabel="best speedup vs baseline", title="Best speedup per iteration" + tag)
    ax.xaxis.get_major_locator().set_params(integer=True)
    if done:
        ax.legend(fontsize=7, ncol=2)
    plots["speedup_per_iteration"] = _png(fig)

    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(done) + 2), 4))
    names = [r.task for r in done]
    x = range(len(done))
    ax.bar([i - 0.27 for i in x], [1.0] * len(done), width=0.27, label="baseline", color="#bbbbbb")
    ax.bar(list(x), [r.torch_compile_over_baseline or 0 for r in done], width=0.27, label="torch.compile(reference)",
           color="#f0a040")
    ax.bar([i + 0.27 for i in x], [r.speedup for r in done], width=0.27, label="accelopt best", color="#3070c0")
    ax.set_xticks(list(x), names, rotation=30, ha="right", fontsize=8)
    ax.set(ylabel="speedup vs baseline (higher is better)", title="Per task" + tag)
    ax.legend(fontsize=8)
    plots["per_task"] = _png(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in done:
        ax.scatter(r.cost_usd, r.speedup)
        ax.annotate(r.task, (r.cost_usd, r.speedup), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set(xlabel="LLM cost ($)", ylabel="best speedup vs baseline", title="Speedup against cost" + tag)
    plots["speedup_vs_cost"] = _png(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    curve = fast_p(rows, ps=[p / 20 for p in range(0, 81)])
    ax.plot(list(curve), [100 * v for v in curve.values()])
    ax.set(xlabel="p (speedup threshold)", ylabel="% of tasks correct and faster than p", title="fast_p" + tag,
           ylim=(0, 105))
    plots["fast_p"] = _png(fig)
    return plots


# ---------------------------------------------------------------- HTML

CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;font-size:13px;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}.warn{background:#fff3cd;padding:.6em;border:1px solid #e0c060}
pre.diff{font-size:12px;background:#fafafa;border:1px solid #ddd;padding:.5em;overflow-x:auto}
.add{background:#e6ffed;display:block}.del{background:#ffeef0;display:block}.hunk{color:#888;display:block}
img{max-width:100%;border:1px solid #eee;margin:.5em 0}"""


def _fmt(value, spec: str = ".2f", suffix: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{suffix}"


def _diff(before: str, after: str) -> str:
    lines = []
    for line in difflib.unified_diff(before.splitlines(), after.splitlines(), "baseline", "best", lineterm="", n=3):
        cls = ("add" if line.startswith("+") and not line.startswith("+++") else
               "del" if line.startswith("-") and not line.startswith("---") else
               "hunk" if line.startswith("@@") else "")
        text = html.escape(line)
        lines.append(f'<span class="{cls}">{text}</span>' if cls else text)
    return "\n".join(lines) or "(identical)"


def render_html(title: str, rows: list[TaskRow], figures: dict, plots: dict[str, bytes]) -> str:
    interpreter = "interpreter_wall" in figures["timers"]
    unit = "µs (interpreter)" if interpreter else "µs"
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
           f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>"]
    if interpreter:
        out.append("<p class='warn'><b>CPU Triton-interpreter timings.</b> These runs checked correctness on the "
                   "CPU; their times are interpreter wall times and say nothing about GPU performance.</p>")
    devices = sorted({r.device_name for r in rows if r.device_name})
    out.append(f"<p>Device: {html.escape(', '.join(devices) or 'n/a')}. Speedups are medians over interleaved rounds "
               "with 95% bootstrap intervals; a from-scratch task's baseline is its PyTorch reference.</p>")
    fp = " · ".join(f"fast<sub>{p:g}</sub> {100 * v:.0f}%" for p, v in figures["fast_p"].items())
    out.append("<table><tr><th>suite figure</th><th>value</th></tr>"
               f"<tr><td>tasks optimized / total</td><td>{figures['optimized']} / {figures['tasks']}</td></tr>"
               f"<tr><td>geomean speedup</td><td>{_fmt(figures['geomean_speedup'], '.3f', 'x')}</td></tr>"
               f"<tr><td>geomean vs torch.compile</td><td>{_fmt(figures['geomean_vs_torch_compile'], '.3f', 'x')}</td></tr>"
               f"<tr><td>fast_p</td><td>{fp}</td></tr>"
               f"<tr><td>tokens / cost</td><td>{figures['total_tokens']:,} / ${figures['total_cost_usd']:.4f}</td></tr>"
               f"<tr><td>$ per +1% geomean</td><td>{_fmt(figures['usd_per_pct_geomean'], '.4f')}</td></tr></table>")
    head = ["task", "outcome", f"baseline {unit}", "spread", f"best {unit}", "spread", "speedup", "95% CI",
            "% peak", "% achievable", "vs torch.compile", "iterations", "tokens", "$"]
    out.append("<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>")
    for r in rows:
        ci = f"{r.ci_low:.2f}–{r.ci_high:.2f}" if r.ci_low is not None else "–"
        outcome = r.outcome + (f" ({html.escape(r.note)})" if r.note and r.outcome != "optimized" else "")
        base_label = " (ref)" if r.baseline_kind == "reference" else ""
        cells = [html.escape(r.task), outcome, _fmt(r.baseline_us, ".1f") + base_label,
                 _fmt(r.baseline_spread_pct, ".1f", "%"), _fmt(r.best_us, ".1f"), _fmt(r.best_spread_pct, ".1f", "%"),
                 _fmt(r.speedup, ".3f", "x"), ci, _fmt(r.pct_peak, ".1f", "%"), _fmt(r.pct_achievable, ".1f", "%"),
                 _fmt(r.vs_torch_compile, ".2f", "x") if r.timer != "interpreter_wall" else "n/a (CPU)",
                 str(r.iterations), f"{r.tokens:,}", f"{r.cost_usd:.4f}"]
        out.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    out.append("</table>")
    captions = {"speedup_per_iteration": "Best speedup per iteration", "per_task": "Per task, against the baseline "
                "and torch.compile", "speedup_vs_cost": "Speedup against LLM cost", "fast_p": "fast_p curve"}
    for key, png in plots.items():
        out.append(f"<h3>{captions[key]}</h3><img alt='{key}' src='data:image/png;base64,"
                   f"{base64.b64encode(png).decode()}'>")
    out.append("<h2>Best kernels against their baselines</h2>")
    for r in rows:
        if r.best_source and r.baseline_source:
            out.append(f"<details><summary><b>{html.escape(r.task)}</b>: {r.best_id}, {_fmt(r.speedup, '.3f', 'x')}"
                       f"</summary><pre class='diff'>{_diff(r.baseline_source, r.best_source)}</pre></details>")
    out.append("</body></html>")
    return "\n".join(out)


def build_report(path: str | Path, out_dir: str | Path | None = None) -> Path:
    """Write report.html, report.json and plots/*.png for a run or eval directory; return the page."""
    path = Path(path)
    rows = load_rows(path)
    figures = suite_figures(rows)
    plots = make_plots(rows, "interpreter_wall" in figures["timers"])
    out = Path(out_dir) if out_dir else path
    (out / "plots").mkdir(parents=True, exist_ok=True)
    for key, png in plots.items():
        (out / "plots" / f"{key}.png").write_bytes(png)
    data = {"figures": {**figures, "fast_p": {str(k): v for k, v in figures["fast_p"].items()}},
            "tasks": [r.model_dump(exclude={"baseline_source", "best_source"}) for r in rows]}
    (out / "report.json").write_text(json.dumps(data, indent=2))
    page = out / "report.html"
    page.write_text(render_html(f"accelopt report: {path.resolve().name}", rows, figures, plots))
    return page
