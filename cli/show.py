"""`accelopt show RUN_DIR [--json] [--confirm]` (one run at a glance) and `accelopt runs [DIR]
[--json]` (runs side by side). Rendering, and `--confirm`'s composition: what a run directory holds
is read by `evals/reporting/runs.py`, the best's figure pooled by `tools/best_figure.py`. Both, and
`optimize`'s end table, read whole at 80 columns, paths on lines of their own
(tests/integration/test_narrow_terminal.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from accelopt.cli.memory import fail
from accelopt.cli.options import DeviceName, device_refusal

if TYPE_CHECKING:
    from accelopt.evals.reporting.runs import RunListing, RunView

SHOW_JSON_HELP = (
    "Print one JSON object and nothing else: run_dir, task, task_dir, state (finished | running | "
    "interrupted | stopped | skipped | failed), state_text, outcome (optimized: a best faster than the baseline "
    "beyond noise | finished | stopped | skipped | failed | running), verdict (faster | within noise | no faster "
    "kernel | slower | interpreter), outcome_text, stop_reason, held_by, "
    "started, model, device_name, timer (cuda_event | interpreter_wall | ...), timer_label, iterations_done, "
    "iterations_planned, candidates_evaluated, tokens, cost_usd, best_id, best {speedup, ci_low, ci_high, rounds, "
    "faster} (its own evaluation), best_figure {speedup, ci_low, ci_high, measurements, confirmed, rounds, spread, "
    "word, basis, pooled, failed_confirmation} (what the run reports: every evaluation of its program pooled; "
    "null on the interpreter until --confirm), not_confirmed, beam [{id, iteration, status, kind, vs_baseline}], lineage [{id, iteration, kind, parent_id, plan_id, "
    "plan_title, plan, fix_of, status, vs_baseline, vs_parent}] (baseline first, beam head last), diff (unified, "
    "baseline -> best; '' when the best is the baseline), notes")
RUNS_JSON_HELP = (
    "Print one JSON list and nothing else, one object per run: run_dir, task, started, state, outcome and verdict "
    "(as show --json), "
    "outcome_text, note, iterations_done, iterations_planned, best_id, best_speedup, best_interval, "
    "best_measurements, timer, timer_label, model, cost_usd")


INTERPRETER = "interpreter_wall"


def _cell(value: object) -> Text:
    return Text("-" if value is None or value == "" else str(value))  # no markup: plans and paths hold [brackets]


def _timer(timer: str | None, label: str | None) -> str:
    if timer == INTERPRETER:
        return f"{label}: not GPU performance"
    return label or "-"


def _table(*columns: str, title: str | None = None, header: bool = True) -> Table:
    """A table that reads whole at 80 columns: every cell wraps, a word wider than its column
    (an id, a path) folds instead of ending in an ellipsis."""
    table = Table(title=title, show_header=header)
    for name in columns:
        table.add_column(name, overflow="fold")
    return table


def _say(console: Console, text: str, indent: int = 0, style: str = "") -> None:
    """Plain text (no markup: plans and paths hold [brackets]) wrapped at the console's width, a
    word wider than a line folded, each line indented as the first, no trailing blanks."""
    for line in Text(text, style=style).wrap(console, max(console.width - indent, 20), overflow="fold"):
        line.rstrip()
        console.print(Text(" " * indent) + line, soft_wrap=True)


def show(run_dir: Annotated[Path, typer.Argument(help="A run directory (runs/TASK-TIME, --run-dir, or a task's folder "
                                                "in an `accelopt eval` directory)")],
         as_json: Annotated[bool, typer.Option("--json", help=SHOW_JSON_HELP)] = False,
         confirm: Annotated[bool, typer.Option("--confirm", help=(
             "First evaluate the best kernel once more against the baseline, by the rules of `check` (fresh "
             "inputs, rounds until decided), and pool it with every earlier evaluation of its program: "
             "summary.json's best figure says how many it pools"))] = False,
         device: Annotated[DeviceName, typer.Option(help=(
             "Where --confirm evaluates: auto, cuda (refused where no GPU is visible) or cpu (the Triton "
             "interpreter: its figure carries no verdict)"))] = "auto") -> None:
    """One run at a glance: task, device and timer, outcome, the beam, how the best kernel came
    from the baseline (each step's plan and speedup), and its diff against the baseline.
    Exit 2 when RUN_DIR is not a run directory (or, with --confirm, a run still going)."""
    from accelopt.evals.reporting.runs import NotARunDir, load_run

    try:
        view = load_run(run_dir)
    except NotARunDir as e:
        fail(str(e))
    if confirm:
        if (refusal := device_refusal(device)) is not None:
            fail(refusal)
        if view.state == "running":
            fail(f"{run_dir} is running ({view.held_by}): confirm its best once it has ended")
        _confirm(run_dir, device)
        view = load_run(run_dir)
    if as_json:
        typer.echo(view.model_dump_json())
        return
    _render_run(view, Console())


def _confirm(run_dir: Path, device: DeviceName) -> None:
    """The best confirmed once more, summary.json's figure pooled anew (nodes/standing.confirm_run,
    as the confirm graph does it at every other door)."""
    from accelopt.graph.config import resolve_context
    from accelopt.nodes.standing import confirm_run
    from accelopt.tools.settings import ConfigError

    ctx = resolve_context({"device": device}, door="flag")  # accelopt.toml and the environment, as a run's
    try:
        confirm_run(run_dir, ctx)
    except ConfigError as e:
        fail(str(e))


def _render_run(view: RunView, console: Console) -> None:
    """The run at a glance, whole at 80 columns: paths on lines of their own, tables whose cells
    wrap, the diff's lines printed as they are (never wrapped into lines that are no diff). On the
    CPU interpreter the kept kernel is the beam's head and its figure a ratio of wall times."""
    from accelopt.cli.interrupt import resume_command
    from accelopt.tools.run_record import counts_text

    interpreter = view.timer == INTERPRETER
    _say(console, f"accelopt run: {view.run_dir}")
    head = _table("", "", header=False)
    head.add_row("task", _cell(view.task))
    if view.task_dir:
        head.add_row("task dir", _cell(view.task_dir))
    state = view.state_text
    if view.state == "running" and view.held_by:
        state += f" ({view.held_by})"
    elif view.state == "interrupted":
        state += f": continue it with `{resume_command(Path(view.run_dir))}`"
    elif view.stop_reason:
        state += f": {view.stop_reason}"
    head.add_row("state", _cell(state))
    if view.state == "finished":
        head.add_row("outcome", _cell(view.outcome_text))
    head.add_row("started", _cell(view.started))
    head.add_row("model", _cell(view.model))
    head.add_row("device", _cell(view.device_name))
    head.add_row("timer", _cell(_timer(view.timer, view.timer_label)))
    head.add_row("iterations", _cell(f"{view.iterations_done} / {view.iterations_planned or '?'}"))
    head.add_row("candidates", _cell(counts_text(view.candidates_evaluated, view.statuses) + " (baseline not counted)"))
    head.add_row("tokens / cost", _cell(f"{view.tokens:,} / ${view.cost_usd:.4f}"))
    if view.best is not None and interpreter:  # what was measured; the rule ranked it, not its speed
        head.add_row("beam head", _cell(f"{view.best_id}: {view.best.text}, the baseline's interpreter wall time "
                                        "over its own (not performance)"))
    elif view.best is not None and view.best_figure is None:
        label = f" ({view.timer_label})" if view.timer_label else ""
        head.add_row("best kernel", _cell(f"{view.best_id}: {view.best.text} vs baseline{label}"))
    if view.best_figure is not None:
        head.add_row("best kernel" if not interpreter else "confirmed", _cell(_figure(view)))
    if view.not_confirmed and not interpreter:
        head.add_row("not confirmed", _cell(view.not_confirmed))
    for note in view.notes:
        head.add_row("note", _cell(note))
    console.print(head)
    ratio = "baseline/kernel wall time" if interpreter else "speedup vs baseline"
    if view.beam:
        beam = _table("id", "iter", "kind", "status", f"{ratio} [interval]", title="beam (best first)"
                      if not interpreter else "beam (as the selector ranked it)")
        for m in view.beam:
            beam.add_row(_cell(m.id), _cell(m.iteration), _cell(m.kind or "kernel"), _cell(m.status),
                         _cell(m.vs_baseline.text))
        console.print(beam)
    if len(view.lineage) > 1:
        lineage = _table("id (iter)", "plan", "vs baseline", "vs its parent",
                         title=f"how {view.best_id} came from the baseline")
        for step in view.lineage:
            plan = step.plan or ""
            if step.fix_of:
                plan += f"\n(repair of {step.fix_of})"
            lineage.add_row(_cell(f"{step.id} ({step.iteration})"), _cell(plan or "(start)"),
                            _cell(step.vs_baseline.text), _cell(step.vs_parent.text if step.parent_id else None))
        console.print(lineage)
        if interpreter:
            from accelopt.nodes.records import INTERPRETER_LEAD

            _say(console, f"Ratios of CPU interpreter wall times (not performance), [with the range over the "
                          f"rounds]: a step ranks above its parent only where every round has it more than "
                          f"{INTERPRETER_LEAD:g}x ahead, whatever its median.")
    if view.diff:
        _say(console, f"{view.best_id} against the baseline:", style="bold")
        for line in view.diff.splitlines():  # whole lines, as a diff is read and applied
            style = ("bold" if line.startswith(("+++", "---")) else "cyan" if line.startswith("@@")
                     else "green" if line.startswith("+") else "red" if line.startswith("-") else "")
            console.print(Text(line, style=style), soft_wrap=True)
    elif view.best_id == "baseline":
        _say(console, "The beam's head is still the baseline: no diff." if interpreter else
             "The best kernel is still the baseline: no diff.")


def _figure(view: RunView) -> str:
    """The best's figure as the run reports it: pooled, with its interval across evaluations."""
    from accelopt.evals.reporting.rows import interval_text

    f = view.best_figure
    assert f is not None
    label = f" ({view.timer_label})" if view.timer_label else ""
    text = (f"{view.best_id}: {f.speedup:.3f}x vs baseline{label} "
            f"[{interval_text(f.ci_low, f.ci_high, f.rounds, f.measurements, f.confirmed)}]: {f.word}")
    if f.failed_confirmation:
        text += f"; a confirmation failed: {f.failed_confirmation}"
    return text


def runs(directory: Annotated[Path | None, typer.Argument(
            help="A folder of run directories, an `accelopt eval` directory, or one run directory "
                 "(default: $ACCELOPT_RUNS_DIR, else runs/)", show_default=False)] = None,
         as_json: Annotated[bool, typer.Option("--json", help=RUNS_JSON_HELP)] = False) -> None:
    """Runs side by side: run directory, task, when it started, iterations done of T, best speedup
    (and what timed it), outcome, model and cost. Exit 2 when DIR does not exist."""
    from accelopt.evals.reporting.runs import list_runs
    from accelopt.tools import settings

    root = directory if directory is not None else settings.runs_dir()
    if not root.is_dir():
        fail(f"{root}: no such directory" if not root.exists() else f"{root} is a file, not a folder of runs")
    listed = list_runs(root)
    if as_json:
        typer.echo("[" + ", ".join(r.model_dump_json() for r in listed) + "]")
        return
    console = Console()
    if not listed:
        console.print(Text(f"no accelopt runs under {root}"))
        return
    _render_runs(listed, root, console)


def _render_runs(listed: list[RunListing], root: Path, console: Console) -> None:
    """One block a run, whole at 80 columns: its directory (relative to root) on a line of its own,
    then task, start, iterations and cost, the kept kernel's figure with what timed it, the outcome
    and the model, each line wrapped and indented."""
    _say(console, f"accelopt runs: {root}")
    for r in listed:
        path = Path(r.run_dir)
        shown = path.relative_to(root) if path != root and path.is_relative_to(root) else path
        started = r.started.replace("T", " ")[:16] if r.started else "start unknown"
        console.print()
        _say(console, str(shown), style="bold")
        _say(console, f"{r.task} · {started} · iterations {r.iterations_done} / {r.iterations_planned or '?'}"
                      f" · ${r.cost_usd:.4f}", 2)
        if r.best_speedup is not None:  # never a bare number: what timed it goes with it
            if r.timer == INTERPRETER:
                best = (f"beam head {r.best_id}: {r.best_speedup:.3f}x the baseline's CPU interpreter wall time "
                        "over its own")
            else:
                best = f"best {r.best_id}: {r.best_speedup:.3f}x vs baseline ({r.timer_label or 'timer unknown'})"
                if r.best_interval and r.best_measurements:
                    low, high = r.best_interval
                    best += f" [{low:.3f}, {high:.3f} across {r.best_measurements} evaluation" + \
                        ("s]" if r.best_measurements > 1 else "]")
            _say(console, best, 2)
        outcome = r.outcome_text + (f": {r.note}" if r.note and r.state in ("stopped", "skipped", "failed") else "")
        _say(console, outcome, 2)
        if r.model:
            _say(console, f"model: {r.model}", 2)
    if any(r.timer == INTERPRETER for r in listed):
        console.print()
        _say(console, "CPU interpreter: CPU Triton-interpreter wall times, not GPU performance; nothing there "
                      "is called faster or slower.")
