"""The report as one self-contained HTML page: plain HTML and CSS, figures inlined as PNG data
URIs, no script and nothing fetched. Provenance first, then the verdicts (interpreter timings,
torch.compile), the suite's figures, one row per task, the overview figures, and a section per
task with its candidates, the best kernel's lineage, its workloads, its roofline and its diff.

Every table fits a 1280 px window: few columns (a wide one is split in two), long values
wrapped in their cells at spaces (names and paths also after `_` and `/`), never inside a word,
never one long line. Every figure scales down to its column (none scrolls); the lineage figure
takes the page's whole width, so its labels keep their size (report_plots.LINEAGE_FONT).

On the CPU interpreter nothing on the page is best, faster or beaten, and no figure a speedup: the
kept kernel is the beam head, its figure the baseline's wall time over its own, and the rule that
ranked it is stated (rows.kept, rows.ratio, graph.progress.interpreter_rule: the CLI's words)."""

from __future__ import annotations

import base64
import difflib
import html
import time

from accelopt.evals.reporting.report_plots import Plot, plot_key, roofline_refusal
from accelopt.evals.reporting.rows import (
    INTERPRETER,
    TIMERS,
    TIMERS_SHORT,
    Speedup,
    TaskRow,
    Timing,
    head_of,
    head_word,
    interpreter_rule,
    interval_coverage,
    interval_label,
    interval_text,
    is_interpreter,
    kept,
    kinds,
    ratio,
    ratio_of,
)
from accelopt.nodes.records import INTERPRETER_LEAD

# Tables wrap inside the page at spaces and <wbr> (after `_` and `/` in names and paths), never inside
# a word: `overflow-wrap:anywhere` let the table layout squeeze a column below its longest word
# (`rmsnor|m`, `iteration|s`). Figures scale to their column, border included, and never scroll.
CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1250px;color:#222}
table{border-collapse:collapse;font-size:13px;margin:1em 0;max-width:100%}
td,th{border:1px solid #ccc;padding:3px 7px;text-align:right;overflow-wrap:normal;word-break:normal;vertical-align:top}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}table.prov td{text-align:left}
.warn{background:#fff3cd;padding:.6em;border:1px solid #e0c060}.bad{background:#fde2e2;padding:.6em;border:1px solid #d08080}
.note{color:#555;font-size:13px}tr.interp td{background:#f7f7fb}.tag{font-size:11px;color:#775;white-space:nowrap}
.o-faster{color:#176b2c;font-weight:600}.o-slower,.o-failed{color:#a02020}.o-no-faster-kernel{color:#7a5a00}
div.diff{font:12px/1.35 ui-monospace,monospace;white-space:pre;background:#fafafa;border:1px solid #ddd;
padding:.5em;overflow-x:auto}div.diff div{min-height:1.35em}
.add{background:#e6ffed;color:#0b5a1c}.del{background:#ffeef0;color:#8a1020}.hunk{color:#6060a0;background:#f0f0ff}
.file{color:#888}img{display:block;max-width:100%;height:auto;box-sizing:border-box;border:1px solid #eee;margin:.5em 0}
figure{margin:0}.grid>*{min-width:0}.grid>.wide{grid-column:1/-1}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:.5em 1.5em;align-items:start}h2{margin-top:1.6em;border-bottom:1px solid #ddd}"""


def _wrappable(text: str) -> str:
    """Text escaped for HTML, with a line-break opportunity after each `_` and `/`: a long name or
    path wraps there when its column is too narrow, and nowhere inside a word."""
    return html.escape(text).replace("_", "_<wbr>").replace("/", "/<wbr>")


def _fmt(value, spec: str = ".2f", suffix: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{suffix}"


def diff_html(before: str, after: str, to: str = "best") -> str:
    """A unified diff, one block element per line and no text between them: no blank lines in
    between, whatever the browser; added and removed lines coloured. `to` names the kernel after."""
    lines = []
    for line in difflib.unified_diff(before.splitlines(), after.splitlines(), "baseline", to, lineterm="", n=3):
        cls = ("file" if line.startswith(("+++", "---")) else "add" if line.startswith("+") else
               "del" if line.startswith("-") else "hunk" if line.startswith("@@") else "ctx")
        lines.append(f'<div class="{cls}">{html.escape(line)}</div>')
    return "<div class='diff'>" + ("".join(lines) or "<div>(identical)</div>") + "</div>"


def _img(key: str, plot: Plot) -> str:
    return (f"<figure><img alt='{html.escape(key)}' src='data:image/png;base64,{base64.b64encode(plot.png).decode()}'>"
            f"<figcaption class='note'>{html.escape(plot.caption)}</figcaption></figure>")


def _provenance(rows: list[TaskRow]) -> str:
    """One row per field: its value when every task shares it, else each value with its tasks."""
    fields: dict[str, dict[str, list[str]]] = {}
    for r in rows:
        for field, value in r.provenance.items():
            fields.setdefault(field, {}).setdefault(value or "not recorded", []).append(r.task)
    out = ["<h2>Provenance</h2><table class='prov'><tr><th>field</th><th>value</th></tr>",
           f"<tr><td>report built</td><td>{time.strftime('%Y-%m-%d %H:%M:%S %z')}</td></tr>"]
    for field, values in fields.items():
        if len(values) == 1:
            cell = _wrappable(next(iter(values)))
        else:
            cell = "<br>".join(f"{_wrappable(v)} <span class='tag'>({html.escape(', '.join(tasks))})</span>"
                               for v, tasks in values.items())
        out.append(f"<tr><td>{html.escape(field)}</td><td>{cell}</td></tr>")
    out.append("</table>")
    if not fields:
        out.insert(1, "<p class='note'>The runs recorded no provenance (no run.json).</p>")
    return "".join(out)


def _verdicts(rows: list[TaskRow], figures: dict) -> list[str]:
    out = []
    if any(r.interpreter for r in rows):
        out.append("<p class='warn'><b>CPU Triton-interpreter timings.</b> These runs checked correctness on the "
                   "CPU; their times are interpreter wall times and say nothing about GPU performance. Every such "
                   "figure below is marked <i>CPU interpreter</i>, and none is pooled with GPU figures.</p>")
    for timer, group in figures["by_timer"].items():
        g = group["geomean_vs_torch_compile"]
        if g is not None and g < 1:
            slower = [r.task for r in rows if r.timer == timer and r.vs_torch_compile and r.vs_torch_compile < 1]
            out.append(f"<p class='bad'><b>The best kernels are slower than torch.compile</b>: geomean "
                       f"{g:.3f}x of torch.compile(reference) over {group['tasks_vs_torch_compile']} tasks "
                       f"({html.escape(TIMERS.get(timer, timer))}); slower on {len(slower)}: "
                       f"{html.escape(', '.join(slower))}.</p>")
        elif g is not None:
            out.append(f"<p>Against torch.compile(reference): geomean {g:.3f}x over "
                       f"{group['tasks_vs_torch_compile']} tasks ({html.escape(TIMERS.get(timer, timer))}).</p>")
    return out


def _interval_note(rows: list[TaskRow]) -> str:
    real, interp = kinds(r.timer for r in rows)
    rounds = sorted({n for r in rows for n in (r.interval_rounds, r.vs_torch_compile_rounds) if n})
    parts = []
    per = "speedups" if real else "ratios"
    for n in rounds:
        coverage = interval_coverage(n)
        if coverage is not None:
            parts.append(f"<b>{interval_label(n)}</b>: the smallest and the largest of the {n} per-round {per} "
                         f"(each round: the geomean over workloads of baseline time / kernel time, interleaved); as an "
                         f"interval for the median of the rounds' distribution it covers it with probability "
                         f"1 − 2·0.5<sup>{n}</sup> = {100 * coverage:.1f}%")
        else:
            parts.append(f"<b>{interval_label(n)}</b>: a bootstrap interval of the median over the rounds")
    text = "; ".join(parts) or "no interval was recorded"
    if not real:  # the CPU interpreter alone: ratios of emulation wall clocks, the kept kernel the beam head
        return (f"<p class='note'>Ratios ({ratio(INTERPRETER)}) are the median over interleaved timing rounds of "
                f"the beam head against its baseline (a from-scratch task's baseline is its PyTorch reference), on "
                f"the CPU interpreter's wall clock: not performance. Intervals: {text}.</p>")
    mixed = (f" On the CPU interpreter the same figures are ratios of wall times ({ratio(INTERPRETER)}, the beam "
             "head's), not speedups." if interp else "")
    return (f"<p class='note'>Speedups are the median over interleaved timing rounds of the best kernel against its "
            f"baseline (a from-scratch task's baseline is its PyTorch reference). Intervals: {text}.{mixed}</p>")


def _suite_table(figures: dict, tasks: list[TaskRow] | None = None) -> str:
    """The suite's figures. Runs on the CPU interpreter count as verified, never as optimized or as
    having found no faster kernel, and their geomean is named as the ratio of wall times it is."""
    real, interp = kinds(r.timer for r in tasks or []) if tasks is not None else kinds(figures["timers"])
    fp = " · ".join(f"fast<sub>{p:g}</sub> {100 * v:.0f}%" for p, v in figures["fast_p"].items())
    rows = []
    if real:
        rows += [("tasks optimized (beyond noise) / verified / total",
                  f"{figures['optimized']} / {figures['verified']} / {figures['tasks']}"),
                 ("tasks where no faster kernel was found", str(figures["no_faster_kernel"]))]
    if interp:
        verified = sum(r.correct and r.interpreter for r in tasks or [])
        rows.append(("tasks verified on the CPU interpreter (no speed verdict there)" if real else
                     "tasks verified on the CPU interpreter (no speed verdict) / total",
                     str(verified) if real else f"{figures['verified']} / {figures['tasks']}"))
    for timer, group in figures["by_timer"].items():
        what = html.escape(TIMERS.get(timer, timer))
        if is_interpreter(timer):
            rows.append((f"geomean of the baseline's {what} over the beam head's (not performance)",
                         _fmt(group["geomean_speedup"], ".3f", "x")))
        else:
            rows.append((f"geomean speedup ({what})", _fmt(group["geomean_speedup"], ".3f", "x")))
        if group["geomean_vs_torch_compile"] is not None:
            rows.append((f"geomean vs torch.compile ({what})", _fmt(group["geomean_vs_torch_compile"], ".3f", "x")))
    fast = "fast_p" if real else "fast_p (fast_0 only: the share verified; the CPU interpreter sets no threshold above 0)"
    rows += [(fast, fp), ("tokens / cost", f"{figures['total_tokens']:,} / ${figures['total_cost_usd']:.4f}")]
    if figures["usd_per_pct_geomean"] is not None:
        rows.append(("$ per +1% geomean", _fmt(figures["usd_per_pct_geomean"], ".4f")))
    return ("<table><tr><th>suite figure</th><th>value</th></tr>"
            + "".join(f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in rows) + "</table>")


def _label_class(r: TaskRow) -> str:
    return "o-" + (r.verdict if r.correct and r.verdict else r.outcome).replace(" ", "-")


def _table(head: list[str], rows: list[list[str]], row_cls: list[str] | None = None) -> str:
    """One table: head and cells are HTML already escaped."""
    out = ["<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for i, cells in enumerate(rows):
        tr = f"<tr class='{row_cls[i]}'>" if row_cls and row_cls[i] else "<tr>"
        out.append(tr + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return "".join(out) + "</table>"


INTERP_TAG = " <span class='tag'>CPU interpreter</span>"


def _speedup_cell(s: Speedup | None, tag: str = "") -> str:
    """A speedup, and under it, smaller, its interval and what kind it is."""
    if s is None or s.speedup is None:
        return "–"
    cell = f"{s.speedup:.3f}x{tag}"
    if s.ci_low is not None:
        cell += f"<br><span class='note'>{html.escape(interval_text(s.ci_low, s.ci_high, s.rounds))}</span>"
    return cell


def _task_table(rows: list[TaskRow]) -> str:
    """Two tables: what each task's run came to, then its times and % of peak. Their headings name
    the kept kernel and its figure as the runs' timers allow (rows.head_of, rows.ratio_of)."""
    timers = [r.timer for r in rows]
    head, real = head_of(timers), kinds(timers)[0]
    outcomes, times, classes = [], [], []
    for r in rows:
        interp = INTERP_TAG if r.interpreter else ""
        link = f"<a href='#{plot_key('task', r.task)}'>{_wrappable(r.task)}</a>"
        outcome = f"<span class='{_label_class(r)}'>{html.escape(r.label)}</span>"
        if r.note and not r.correct:
            outcome += f" ({html.escape(r.note)})"
        versus = "–"
        if r.vs_torch_compile is not None:
            versus = _speedup_cell(Speedup(speedup=r.vs_torch_compile, ci_low=r.vs_torch_compile_low,
                                           ci_high=r.vs_torch_compile_high, rounds=r.vs_torch_compile_rounds))
            versus += " <b>slower</b>" if r.vs_torch_compile < 1 else ""
            versus += html.escape(r.mode_note)
        elif r.interpreter:
            versus = "n/a (CPU)"
        speedup = _speedup_cell(Speedup(speedup=r.speedup, ci_low=r.ci_low, ci_high=r.ci_high,
                                        rounds=r.interval_rounds), interp) if r.correct else "–"
        outcomes.append([link, outcome, speedup, versus, html.escape(TIMERS_SHORT.get(r.timer or "", r.timer or "–")),
                         str(r.iterations), f"{r.tokens:,}", f"{r.cost_usd:.4f}"])
        base_label = " (ref)" if r.baseline_kind == "reference" else ""
        times.append([link, _fmt(r.baseline_us, ".1f") + base_label + interp if r.baseline_us else "–",
                      _fmt(r.best_us, ".1f") + interp if r.best_us else "–", _fmt(r.best_spread_pct, ".1f", "%"),
                      _fmt(r.pct_peak, ".1f", "%"), _fmt(r.pct_achievable, ".1f", "%"),
                      _fmt(r.pct_of_copy, ".1f", "%")])
        classes.append("interp" if r.interpreter else "")
    figure = ratio_of(timers)
    figure = f"{figure} over the baseline" if real else f"{figure} (CPU interpreter)"
    kernel = "best kernel" if head == "best" else head
    return (_table(["task", "outcome", html.escape(figure), "vs torch.compile", "timer", "iterations",
                    "tokens", "$"], outcomes, row_cls=classes)
            + _table(["task", f"baseline µs (in the {head}'s rounds)", f"{head} µs", f"{head}'s spread (IQR/median)",
                      "% peak", "% achievable", "% of same-size copy"], times, row_cls=classes)
            + f"<p class='note'>Times: geomean over workloads of the median, both from the {kernel}'s own "
              "evaluation, in which it was timed interleaved with the baseline (the baseline's spread there is not "
              "recorded).</p>")


def _time_cell(t: Timing | None) -> str:
    return "–" if t is None else f"{t.median_us:.1f}" + (f" ± {t.iqr_us:.1f}" if t.iqr_us else "")


def _workload_tables(r: TaskRow) -> str:
    """Per workload, one table per evaluation: the best against the baseline in the best's own
    evaluation, and against torch.compile and eager PyTorch in the standing one (GPU)."""
    unit = "µs, CPU interpreter" if r.interpreter else "µs"
    head, kernel = head_word(r.timer), kept(r.timer)  # best / best kernel, or beam head on the CPU interpreter
    out = []
    own = r.workloads.get("best") or {}
    base = r.workloads.get("baseline") or {}
    if own:
        same = r.best_id == "baseline"
        rows = []
        for name, t in own.items():
            cells = [html.escape(name), _fmt(t.flops, ".3g"), _fmt(t.bytes, ".3g"),
                     _fmt(t.flops / t.bytes if t.flops and t.bytes else None, ".3g")]
            if not same:
                cells.append(_time_cell(base.get(name)))
            cells.append(_time_cell(t))
            if not same:
                cells.append(_speedup_cell((r.by_workload.get("baseline") or {}).get(name)))
            rows.append(cells)
        columns = ["workload", "FLOPs", "bytes", "FLOP/byte"] + (
            [f"median of the baseline itself ± IQR ({unit})"] if same else
            [f"baseline median ({unit})", f"{head} median ± IQR ({unit})",
             ratio(r.timer) if r.interpreter else "best / baseline"])
        what = (f"the baseline's own evaluation (it is the {kernel})" if same else
                f"the {kernel}'s evaluation ({html.escape(r.best_id or '')}), timed interleaved with the baseline "
                "in the same rounds; the baseline's IQR there is not recorded. A ratio of medians over all calls "
                f"need not equal the {ratio(r.timer)}, the median over rounds of each round's ratio: the interval "
                "says how much rounds differed")
        out.append(f"<p class='note'>Per workload, in {what}.</p>" + _table(columns, rows))
    if r.standing.get("best"):
        keys = [k for k in ("torch_compile", "eager") if r.standing.get(k)]
        rows = []
        for name, t in r.standing["best"].items():
            rows.append([html.escape(name), _time_cell(t)] + [_time_cell(r.standing[k].get(name)) for k in keys]
                        + [_speedup_cell((r.by_workload.get(k) or {}).get(name)) for k in keys])
        label = {"torch_compile": "torch.compile", "eager": "eager"}
        heads = (["workload", f"{head} median ± IQR ({unit})"] + [f"{label[k]} median ± IQR ({unit})" for k in keys]
                 + [f"{head} / {label[k]}" for k in keys])
        out.append(f"<p class='note'>Per workload, in the standing evaluation: the {kernel} timed interleaved with "
                   "torch.compile(reference) and eager PyTorch in the same rounds (its times here are not those of "
                   "the table above: another evaluation).</p>" + _table(heads, rows))
    return "".join(out)


def _lineage_table(r: TaskRow) -> str:
    rows = []
    for n, s in enumerate(r.lineage):
        plan = html.escape(s.plan_title or ("(start)" if s.id == "baseline" else "–"))
        if s.fix_of:
            plan += f" <span class='note'>(repair of {html.escape(s.fix_of)})</span>"
        parent = _speedup_cell(s.vs_parent) if s.parent_id and s.parent_id != "baseline" else "–"
        rows.append([str(n), html.escape(s.id), str(s.iteration), plan, _speedup_cell(s.vs_baseline), parent])
    return _table(["step", "kernel", "iteration", "plan", "vs baseline", "vs its parent"], rows)


def _figure(plots: dict[str, Plot], kind: str, task: str, title: str, note: str = "", wide: bool = False) -> str:
    """One figure of a task's grid: in a column of its own, or across the grid's whole width (wide)."""
    key = plot_key(kind, task)
    if key not in plots:
        return ""
    div = "<div class='wide'>" if wide else "<div>"
    return (f"{div}<h3>{title}</h3>" + _img(key, plots[key])
            + (f"<p class='note'>{note}</p>" if note else "") + "</div>")


def _task_section(r: TaskRow, plots: dict[str, Plot]) -> str:
    out = [f"<h2 id='{plot_key('task', r.task)}'>Task: {html.escape(r.task)}</h2>"]
    line = f"<b class='{_label_class(r)}'>{html.escape(r.label)}</b>"
    if r.correct:
        interval = (f" [{interval_text(r.ci_low, r.ci_high, r.interval_rounds, r.measurements, r.confirmed)}]"
                    if r.ci_low is not None else "")
        if r.interpreter:  # as `accelopt show` says it: what was measured, never a speed
            line += (f": beam head {html.escape(r.best_id or '')}, {r.speedup:.3f}x the baseline's CPU interpreter "
                     f"wall time over its own{interval}: not performance")
        else:
            line += f": best {html.escape(r.best_id or '')} at {r.speedup:.3f}x of the baseline{interval}"
    if r.note:
        line += f". Stopped: {html.escape(r.note)}"
    out.append(f"<p>{line}.</p>")
    tc = r.torch_compile_line
    if tc:
        out.append(f"<p class='{'bad' if r.vs_torch_compile and r.vs_torch_compile < 1 else 'note'}'>"
                   f"torch.compile: {html.escape(tc)}.</p>")
    if not r.correct:
        return "".join(out)
    if r.interpreter:
        out.append("<p class='note'>CPU Triton-interpreter wall times: they check the pipeline, not performance; "
                   "every figure below is a ratio of CPU emulation times. The beam head is the kernel the selector's "
                   f"rule ranked first: {html.escape(interpreter_rule().removeprefix('CPU interpreter: '))}</p>")
    refusal = roofline_refusal(r)
    key = plot_key("roofline", r.task)
    roof = ("<div><h3>Roofline</h3>" + (_img(key, plots[key]) if key in plots else
                                        f"<p class='note'>{html.escape(refusal or '')}</p>") + "</div>")
    standing = "; over torch.compile and eager PyTorch, the standing evaluation" if r.standing else ""
    # on the interpreter nothing is faster: the kept kernel is the beam's head (nodes/records.leads_parent)
    head, kernel = head_word(r.timer), kept(r.timer)
    if r.interpreter:
        lead = (f"the selector's rule there: every round has it more than {INTERPRETER_LEAD:g}x ahead of its parent, "
                "a difference in work")
    else:
        lead = "a lead over its parent beyond noise, its interval above the noise floor"
    out.append("<div class='grid'>"
               + _figure(plots, "lineage", r.task, f"Lineage of the {kernel}"
                         + (" (CPU wall times, not performance)" if r.interpreter else ""), wide=True)
               + _figure(plots, "candidates", r.task, "Every candidate against the baseline",
                         "Each point is one candidate's ratio to the baseline, measured in its own evaluation "
                         f"(timed interleaved with the baseline), whiskers its interval; the line is the run's {head} "
                         f"after each iteration, ending at the headline's figure. A kernel becomes the run's {head} "
                         f"only by {lead}, so a point may lie above the line.")
               + _figure(plots, "workloads", r.task,
                         "Wall-time ratio per workload (CPU interpreter)" if r.interpreter else "Speedup per workload",
                         f"Each ratio is from one evaluation: over the baseline, the {kernel}'s own{standing}.")
               + roof + "</div>")
    if len(r.lineage) > 1:
        out.append(f"<h3>How {html.escape(r.best_id or '')} came from the baseline</h3>" + _lineage_table(r))
    out.append("<h3>Per workload</h3>" + _workload_tables(r))
    if r.autotune:  # the judge's choice among the best's @triton.autotune configurations
        out.append("<h3>Autotuned configurations (chosen by the judge)</h3><ul>"
                   + "".join(f"<li>{html.escape(line)}</li>" for line in r.autotune) + "</ul>")
    heading = f"<h3>{kernel[0].upper() + kernel[1:]} against the baseline</h3>"
    if r.best_id == "baseline" and r.interpreter:
        out.append(heading + "<p class='note'>The beam head is still the baseline: no candidate ranked above it "
                   "under the selector's rule; no diff.</p>")
    elif r.best_id == "baseline":
        out.append(heading + "<p class='note'>The best kernel is the baseline itself: no candidate beat it.</p>")
    elif r.best_source and r.baseline_source:
        figure = f" ({ratio(r.timer)}, CPU interpreter)" if r.interpreter else ""
        out.append(f"{heading}<details open><summary>{html.escape(r.best_id or '')}"
                   f" vs baseline, {_fmt(r.speedup, '.3f', 'x')}{figure}</summary>"
                   f"{diff_html(r.baseline_source, r.best_source, head)}</details>")
    return "".join(out)


def render_html(title: str, rows: list[TaskRow], figures: dict, plots: dict[str, Plot]) -> str:
    out = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
           f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>"]
    out += _verdicts(rows, figures)
    out.append(_provenance(rows))
    out.append("<h2>Summary</h2>" + _suite_table(figures, rows) + _task_table(rows) + _interval_note(rows))
    overview = [(k, p) for k, p in plots.items() if p.task is None]
    if overview:
        out.append("<h2>Suite figures</h2><div class='grid'>" + "".join(_img(k, p) for k, p in overview) + "</div>")
        if not any(k.startswith("speedup_vs_cost") for k, _ in overview):
            out.append("<p class='note'>No cost figure: no model call of these runs cost anything (the tuner policy "
                       "makes none).</p>")
    for r in rows:
        out.append(_task_section(r, plots))
    out.append("</body></html>")
    return "\n".join(out)
