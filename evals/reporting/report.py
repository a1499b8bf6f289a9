"""Reports: one row per task, suite-level figures (geomean speedup, fast_p, cost per speedup),
matplotlib plots (`report_plots.py`) and a single self-contained HTML page (`report_html.py`); the
rows' records are `rows.py`'s. Everything is rebuilt from run directories on disk: run.json
(context, provenance), summary.json (read through tools/run_record.py), candidates/*/result.json,
torch_compile.json.

Interpreter timings (timer interpreter_wall) are CPU Triton-interpreter wall times: the page says
so in its header and beside every such number, and never mixes them with GPU figures. They make no
speed claim anywhere: the verdict is "interpreter" (no faster kernel, none slower), fast_p gives
fast_0 only (rows.fast_p), and the terminal's headline, the page and its figures name their ratio as
wall time (rows.WALL_RATIO), never a speedup. The kernel a run keeps there is the beam head, the one the
selector's rule ranked first (nodes/records.leads_parent: a child ranks above its parent only where
every round has it more than 1.25x ahead), never called best: the CLI's words (graph.progress.head_word,
interpreter_rule), through rows.kept and rows.ratio.

Every figure comes from one evaluation, the candidate and its comparators timed interleaved in
the same rounds: a kernel's times at another moment (the baseline's at setup) can differ by more
than the effect measured (on the interpreter by half and more). So the best kernel's times per workload are its own
evaluation's, the baseline's beside them the same rounds' (`compared_us`), torch.compile's the
standing evaluation's with the best's time from that one; candidates and the lineage are shown as
their speedups over the baseline, each measured with it.

The speedup interval a run records (`versus.baseline.ci_low/ci_high`) is the harness's bootstrap
interval of the median over timing rounds; over 5 rounds or fewer (2 on the interpreter, 3 to 5
on a GPU, which runs more until the comparison is decided) it is exactly the range, min to max, of the per-round speedups, and is labelled so
(`interval_label`), never as a 95% interval.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from accelopt.evals.reporting.report_html import render_html
from accelopt.evals.reporting.report_plots import make_plots
from accelopt.evals.reporting.rows import (
    INTERPRETER,
    TIMERS,
    TIMERS_SHORT,
    CandidatePoint,
    LineageStep,
    Speedup,
    TaskRow,
    Timing,
    fast_p,
    geomean,
    interval_text,
    kept,
    ratio_of,
    timer_groups,
)
from accelopt.tools.candidate_record import evaluation_of, lineage_of
from accelopt.tools.harness import stats
from accelopt.tools.harness.result import AutotuneRecord
from accelopt.tools.run_record import IterationEvent, IterationRecord, load_summary


def latency(workloads: dict) -> tuple[float | None, float | None]:
    """A kernel's latency over its workloads: geomean of the medians (us), and the worst IQR/median %."""
    if not workloads:
        return None, None
    medians = [t["median_us"] for t in workloads.values()]
    spread = max((t["iqr_us"] / t["median_us"] * 100 for t in workloads.values() if t["median_us"]), default=None)
    return geomean(medians), spread


def versus(candidate: dict, against: str) -> Speedup:
    """The candidate against "baseline" or "parent", from its own evaluation's rounds (a child of
    the baseline was compared with it once: that comparison is both)."""
    compared = candidate.get("versus") or {}
    vs = compared.get(against) or (compared.get("baseline") if against == "parent" and candidate.get("parent_id")
                                   == "baseline" else None) or {}
    if against == "baseline" and candidate.get("id") == "baseline":
        return Speedup(speedup=1.0)
    speedup = vs.get("speedup")
    if speedup is None:
        speedup = candidate.get("speedup") if against == "baseline" else candidate.get("speedup_vs_parent")
    return Speedup(speedup=speedup, ci_low=vs.get("ci_low"), ci_high=vs.get("ci_high"), rounds=vs.get("rounds"),
                   faster=vs.get("faster"))


def chain(best_id: str | None, read: Callable[[str], dict | None]) -> list[dict]:
    """The best kernel's records back to the baseline by parent_id (their lineage), baseline first;
    a missing record or a cycle ends the walk."""
    out: list[dict] = []
    seen: set[str] = set()
    here = read(best_id) if best_id else None
    while here is not None and here.get("id") not in seen:
        out.append(here)
        seen.add(here["id"])
        parent = lineage_of(here).get("parent_id")
        here = read(parent) if parent else None
    return out[::-1]


def lineage_steps(records: list[dict]) -> list[LineageStep]:
    """Each record's step: where it comes from (its lineage), its status, and its speedups from its
    own evaluation."""
    steps = []
    for c in records:
        born = lineage_of(c)
        steps.append(LineageStep(id=born["id"], iteration=born.get("iteration") or 0, kind=born.get("kind"),
                                 parent_id=born.get("parent_id"), plan_title=born.get("plan_title"),
                                 fix_of=born.get("fix_of"), status=evaluation_of(c).get("status"),
                                 vs_baseline=versus(c, "baseline"),
                                 vs_parent=versus(c, "parent") if born.get("parent_id") else Speedup()))
    return steps


def per_workload(kernel: dict[str, Timing], other: dict[str, Timing]) -> dict[str, Speedup]:
    """Per workload, other's time over the kernel's, both from one evaluation: where both kept
    their round medians, the harness's statistic on that workload alone (median over rounds, its
    interval); else the ratio of the medians, with no interval."""
    out = {}
    for name, t in kernel.items():
        o = other.get(name)
        if o is None or not t.median_us:
            continue
        ratios = stats.round_ratios({name: t.round_medians_us}, {name: o.round_medians_us})
        if ratios:
            iv = stats.interval(ratios)
            out[name] = Speedup(speedup=iv.speedup, ci_low=iv.low, ci_high=iv.high, rounds=iv.rounds)
        else:
            out[name] = Speedup(speedup=o.median_us / t.median_us)
    return out


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None


def _text(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None


def _verdict(best_id: str, speedup: float | None, vs: dict, timer: str | None = None) -> str:
    """What the best kernel is worth against the baseline: the baseline itself (or an exact tie) is
    no faster kernel; a speedup whose interval reaches 1 is within noise. On the interpreter nothing
    is (records written before the harness said so may still hold `faster`)."""
    if timer == INTERPRETER:
        return "interpreter"
    if best_id == "baseline" or speedup is None or speedup == 1.0:
        return "no faster kernel"
    if speedup < 1.0:
        return "slower"
    faster = vs.get("faster")
    if faster is None and vs.get("ci_low") is not None:
        faster = vs["ci_low"] > 1.0
    return "faster" if faster or faster is None else "within noise"


def _timings(workloads: dict | None) -> dict[str, Timing]:
    return {name: Timing(median_us=t["median_us"], iqr_us=t.get("iqr_us"), round_medians_us=t.get("round_medians_us")
                         or [], flops=t.get("flops"), bytes=t.get("bytes"))
            for name, t in (workloads or {}).items() if t.get("median_us")}


def autotune_lines(result: dict) -> list[str]:
    """The best's autotuned kernels as its evaluation ran them (the candidate's, then the notes)."""
    chosen = (result.get("autotune_choice") or {}).get("candidate")
    if not chosen:
        return []
    record = AutotuneRecord(**chosen)
    return record.summary() + record.notes


def _same_rounds(best: dict, baseline: dict) -> dict[str, dict[str, Timing]]:
    """The best kernel's evaluation: its own times and the baseline's medians from the same rounds
    (with the best's FLOP and byte counts: the reference's, the same for both). The best being
    the baseline, its own evaluation; a record without compared_us (older runs) shows the best
    alone rather than the baseline's times from another moment."""
    if best.get("id") == "baseline":
        own = _timings(baseline.get("workloads"))
        return {"baseline": own, "best": own} if own else {}
    mine = _timings(best.get("workloads"))
    theirs = (best.get("compared_us") or {}).get("baseline") or {}
    base = {w: Timing(median_us=us, flops=mine[w].flops if w in mine else None,
                      bytes=mine[w].bytes if w in mine else None) for w, us in theirs.items() if us}
    return {k: v for k, v in (("baseline", base), ("best", mine)) if v}


def _candidates(run_dir: Path) -> list[CandidatePoint]:
    points = []
    for path in sorted((run_dir / "candidates").glob("*/result.json")):
        c = _read(path)
        if not c:
            continue
        c.setdefault("id", path.parent.name)
        born, said = lineage_of(c), evaluation_of(c)
        vs = versus(c, "baseline") if said.get("status") == "verified" else None
        points.append(CandidatePoint(id=born["id"], iteration=born.get("iteration") or 0,
                                     status=said.get("status") or "unknown", kind=born.get("kind"),
                                     speedup=vs.speedup if vs else None, vs_baseline=vs))
    return sorted(points, key=lambda p: (p.iteration, p.id))


def _flops_kind(task_dir: str | None) -> str | None:
    spec = _read(Path(task_dir) / "task.json") if task_dir else None
    return (spec or {}).get("flops_kind", "vector") if spec is not None else None


def provenance(run: dict, run_dir: Path, device_name: str | None, timer: str | None) -> dict[str, str | None]:
    """What a reader needs to trust or reproduce the numbers: when, with what software, on what,
    how hard it searched and who wrote the kernels. None where the run did not record it (runs
    from before run.json held `created` and `environment`)."""
    ctx = run.get("context") or {}
    env = run.get("environment") or {}
    date = run.get("created")
    if not date:  # older runs: the first evaluation's time, else run.json's own
        first = (run_dir / "evaluations.jsonl").read_text().split("\n", 1)[0] \
            if (run_dir / "evaluations.jsonl").is_file() else ""
        stamp = json.loads(first).get("time") if first.strip() else None
        if stamp is None and (run_dir / "run.json").is_file():
            stamp = (run_dir / "run.json").stat().st_mtime
        date = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(stamp)) if stamp else None
    commit = env.get("git_commit")
    if commit and env.get("git_dirty"):
        commit += " (with uncommitted changes)"
    search = None
    if ctx:
        search = " ".join(f"{k}={ctx.get(v, '?')}" for k, v in (("B", "beams"), ("N", "plans"), ("K", "samples"),
                                                                 ("F", "fixes"), ("T", "iterations")))
        if ctx.get("autotune"):
            search += f" autotune={ctx['autotune']}"
    models = None
    if ctx:
        roles = ctx.get("role_models") or {}
        models = str(ctx.get("model") or "default") + "".join(
            f"; {role}: {spec.get('model') if isinstance(spec, dict) else spec}" for role, spec in sorted(roles.items()))
    return {
        "date": date, "accelopt": env.get("accelopt"), "git commit": commit, "torch": env.get("torch"),
        "Triton": env.get("triton"), "Python": env.get("python"), "device": device_name,
        "timer": TIMERS.get(timer or "", timer) if timer else None, "search (B N K F T)": search, "model(s)": models,
        "memory": None if not ctx else ("off" if not ctx.get("use_memory", True) else "on"),
    }


def load_row(run_dir: Path) -> TaskRow:
    run = _read(run_dir / "run.json") or {}
    name = Path(run.get("task_dir", run_dir.name)).name
    for marker, outcome in (("skipped.json", "skipped"), ("stopped.json", "stopped")):
        if (run_dir / marker).is_file():
            return TaskRow(task=name, run_dir=str(run_dir), outcome=outcome,
                           note=(_read(run_dir / marker) or {}).get("reason"),
                           provenance=provenance(run, run_dir, None, None) if run else {})
    if (run_dir / "error.txt").is_file():
        last = (run_dir / "error.txt").read_text().strip().splitlines()[-1:]
        return TaskRow(task=name, run_dir=str(run_dir), outcome="failed", note=" ".join(last),
                       provenance=provenance(run, run_dir, None, None) if run else {})
    summary = load_summary(run_dir)
    if summary is None:
        return TaskRow(task=name, run_dir=str(run_dir), outcome="running", note="no finished iteration yet")
    name = Path(summary.task_dir).name
    best = _read(run_dir / "candidates" / summary.best_id / "result.json") or {}
    baseline = _read(run_dir / "candidates" / "baseline" / "result.json") or {}
    best_us, best_spread = latency(best.get("workloads") or {})
    same = _same_rounds(best, baseline)
    base_us = geomean([t.median_us for t in (same.get("baseline") or {}).values()])
    # the baseline's spread in the best's rounds is not recorded (compared_us: medians only)
    base_spread = best_spread if summary.best_id == "baseline" else None
    vs = (best.get("versus") or {}).get("baseline") or {}
    figure = summary.best_figure  # every evaluation of the best's program pooled, its confirmations too
    if figure is not None:
        vs = {**vs, "ci_low": figure.ci_low, "ci_high": figure.ci_high, "rounds": figure.rounds,
              "faster": figure.word == "faster"}
    speedup = summary.best_speedup or 1.0
    timer = summary.timer
    row = TaskRow(
        task=name, run_dir=str(run_dir),
        outcome="failed" if summary.failure else "optimized" if summary.stop_reason else "running",
        verdict=_verdict(summary.best_id, speedup, vs, timer),
        note=summary.failure or summary.stop_reason, timer=timer, device_name=summary.device_name,
        baseline_kind=summary.baseline_kind, baseline_us=base_us, baseline_spread_pct=base_spread,
        best_us=best_us, best_spread_pct=best_spread, best_id=summary.best_id, best_kind=best.get("kind"),
        speedup=speedup, ci_low=vs.get("ci_low"), ci_high=vs.get("ci_high"), interval_rounds=vs.get("rounds"),
        measurements=figure.measurements if figure is not None else None,
        confirmed=figure.confirmed if figure is not None else None,
        pct_peak=summary.best_pct_peak, pct_achievable=summary.best_pct_achievable,
        pct_of_copy=summary.best_pct_of_copy, iterations=summary.iteration,
        tokens=summary.usage.input_tokens + summary.usage.output_tokens, cost_usd=summary.usage.cost_usd,
        history=[(0, 1.0)] + [(h.iteration, _best_speedup(h) or 1.0) for h in summary.iterations],
        best_by_iteration=[(0, "baseline")] + [(h.iteration, h.best_id) for h in summary.iterations
                                               if isinstance(h, IterationRecord) and h.best_id],
        candidates=_candidates(run_dir),
        lineage=lineage_steps(chain(summary.best_id, lambda cid: _read(run_dir / "candidates" / cid /
                                                                         "result.json"))),
        workloads=same,
        flops_kind=_flops_kind(summary.task_dir or run.get("task_dir")),
        provenance=provenance(run, run_dir, summary.device_name, timer),
        baseline_source=_text(run_dir / "candidates" / "baseline" / "kernel.py"),
        best_source=_text(run_dir / "best_kernel.py"), autotune=autotune_lines(best))
    _with_torch_compile(row, _read(run_dir / "torch_compile.json"))
    if summary.best_id != "baseline" and {"best", "baseline"} <= set(row.workloads):
        row.by_workload["baseline"] = per_workload(row.workloads["best"], row.workloads["baseline"])
    for name in ("torch_compile", "eager"):
        if "best" in row.standing and name in row.standing:
            row.by_workload[name] = per_workload(row.standing["best"], row.standing[name])
    return row


def _best_speedup(entry: IterationRecord | IterationEvent) -> float | None:
    """The best's speedup after an iteration (a planner event, in the history beside them, has none)."""
    return entry.best_speedup if isinstance(entry, IterationRecord) else None


def _with_torch_compile(row: TaskRow, record: dict | None) -> None:
    """torch_compile.json: the best kernel timed interleaved with torch.compile(reference) and eager."""
    if not record:
        return
    versus = (record.get("versus") or {}).get("torch_compile")
    if not versus:
        row.torch_compile_note = f"no torch.compile figure: the comparison ended {record.get('status')}" + \
            (f" ({str(record.get('error'))[:200]})" if record.get("error") else "")
        return
    row.vs_torch_compile = versus["speedup"]
    row.torch_compile_mode = record.get("torch_compile_mode") or "default"  # files before modes: default
    row.vs_torch_compile_low, row.vs_torch_compile_high = versus.get("ci_low"), versus.get("ci_high")
    row.vs_torch_compile_rounds = versus.get("rounds")
    eager = (record.get("versus") or {}).get("eager")
    if eager:
        row.vs_eager = Speedup(speedup=eager.get("speedup"), ci_low=eager.get("ci_low"), ci_high=eager.get("ci_high"),
                               rounds=eager.get("rounds"), faster=eager.get("faster"))
    if row.speedup:
        row.torch_compile_over_baseline = row.speedup / row.vs_torch_compile
    spread = record.get("workloads") or {}  # medians with IQR, in files written since the report shows them
    for name in ("best", "torch_compile", "eager"):
        if spread.get(name):
            row.standing[name] = _timings(spread[name])
        elif (record.get("median_us") or {}).get(name):
            row.standing[name] = {w: Timing(median_us=us) for w, us in record["median_us"][name].items()}


def load_rows(path: Path) -> list[TaskRow]:
    """A run directory, or an eval directory of run directories."""
    if (path / "run.json").is_file():
        return [load_row(path)]
    markers = ("run.json", "skipped.json", "stopped.json", "error.txt")
    rows = [load_row(p) for p in sorted(path.iterdir()) if p.is_dir() and any((p / m).is_file() for m in markers)]
    if not rows:
        raise FileNotFoundError(f"{path} holds no accelopt run (run.json) nor eval directory of runs")
    return rows


def _group_figures(rows: list[TaskRow]) -> dict:
    done = [r for r in rows if r.correct]
    versus = [r for r in done if r.vs_torch_compile]
    return {"tasks": len(done), "geomean_speedup": geomean([r.speedup for r in done]),
            "geomean_vs_torch_compile": geomean([r.vs_torch_compile for r in versus]),
            "tasks_vs_torch_compile": len(versus)}


def suite_figures(rows: list[TaskRow]) -> dict:
    done = [r for r in rows if r.correct]
    timed = {t: _group_figures(g) for t, g in timer_groups(done).items()}
    single = len(timed) <= 1  # one timer: the suite's geomeans; several: per timer only
    whole = _group_figures(done)
    geo = whole["geomean_speedup"] if single else None
    cost = sum(r.cost_usd for r in rows)
    # no money per speedup where the one timer is the CPU interpreter's: its ratio is not one
    speed = geo if geo and INTERPRETER not in timed else None
    return {
        "tasks": len(rows), "verified": len(done), "optimized": sum(r.verdict == "faster" for r in done),
        "no_faster_kernel": sum(r.verdict == "no faster kernel" for r in done),
        "geomean_speedup": geo, "fast_p": fast_p(rows),
        "total_cost_usd": cost, "total_tokens": sum(r.tokens for r in rows),
        # $ spent per +1% of geomean speedup (None when nothing got faster, and on the CPU interpreter)
        "usd_per_pct_geomean": cost / ((speed - 1) * 100) if speed and speed > 1 and cost else None,
        "geomean_vs_torch_compile": whole["geomean_vs_torch_compile"] if single else None,
        "tasks_vs_torch_compile": whole["tasks_vs_torch_compile"],
        "slower_than_torch_compile": [r.task for r in done if r.vs_torch_compile and r.vs_torch_compile < 1],
        "timers": sorted({r.timer for r in done if r.timer}),
        "by_timer": {str(t): f for t, f in timed.items()},
    }


def headline_columns(rows: list[TaskRow]) -> list[str]:
    """The headings of headline's table: its third column says what its figures are, a speedup, or on
    the CPU interpreter the ratio of wall times (rows.ratio_of), never a speedup there."""
    return ["task", "outcome", f"{ratio_of(r.timer for r in rows)} (interval)", "vs torch.compile", "timer"]


def headline(rows: list[TaskRow], figures: dict) -> tuple[list[list[str]], list[str]]:
    """The terminal's table, under headline_columns: per task (task, outcome, speedup with its
    interval, vs torch.compile, timer) and the suite geomean lines, one per timer. An interpreter
    figure is named as the ratio of wall times it is, never as a speedup."""
    table = []
    for r in rows:
        speedup = "-"
        if r.speedup is not None and r.correct:
            interval = f" ({interval_text(r.ci_low, r.ci_high, r.interval_rounds, r.measurements, r.confirmed)})" \
                if r.ci_low is not None else ""
            speedup = f"{r.speedup:.3f}x" + (" interpreter wall time" if r.interpreter else "") + interval
        versus = "-"
        if r.vs_torch_compile is not None:
            versus = f"{r.vs_torch_compile:.3f}x" + (" (slower)" if r.vs_torch_compile < 1 else "") + r.mode_note
        elif r.interpreter and r.correct:
            versus = "n/a (CPU)"
        label = r.label + (f": {r.note}" if r.note and not r.correct else "")
        table.append([r.task, label, speedup, versus, TIMERS_SHORT.get(r.timer or "", r.timer or "-")])
    lines = []
    for timer, group in figures["by_timer"].items():
        if group["geomean_speedup"] is None:
            continue
        what = TIMERS.get(timer, timer)
        tasks = f"{group['tasks']} task{'s' if group['tasks'] != 1 else ''}"
        if timer == INTERPRETER:
            lines.append(f"geomean over {tasks} of the baseline's {what} over the {kept(timer)}'s: "
                         f"{group['geomean_speedup']:.3f}x (not performance)")
            continue
        line = f"geomean best speedup over {tasks}: {group['geomean_speedup']:.3f}x ({what})"
        if group["geomean_vs_torch_compile"]:
            g = group["geomean_vs_torch_compile"]
            line += f"; vs torch.compile over {group['tasks_vs_torch_compile']}: {g:.3f}x" + \
                (" (slower than torch.compile)" if g < 1 else "")
        lines.append(line)
    return table, lines


def build_report(path: str | Path, out_dir: str | Path | None = None) -> Path:
    """Write report.html, report.json and plots/*.png for a run or eval directory; return the page."""
    path = Path(path)
    rows = load_rows(path)
    figures = suite_figures(rows)
    plots = make_plots(rows)
    out = Path(out_dir) if out_dir else path
    (out / "plots").mkdir(parents=True, exist_ok=True)
    for stale in (out / "plots").glob("*.png"):  # an earlier build's figure that this one no longer draws
        if stale.stem not in plots:
            stale.unlink()
    for key, plot in plots.items():
        (out / "plots" / f"{key}.png").write_bytes(plot.png)
    data = {"figures": {**figures, "fast_p": {str(k): v for k, v in figures["fast_p"].items()}},
            "tasks": [r.model_dump(exclude={"baseline_source", "best_source"}) for r in rows]}
    (out / "report.json").write_text(json.dumps(data, indent=2))
    page = out / "report.html"
    page.write_text(render_html(f"accelopt report: {path.resolve().name}", rows, figures, plots))
    return page
