"""`accelopt show RUN_DIR [--json]` (one run at a glance) and `accelopt runs [DIR] [--json]` (runs
side by side). Rendering only: what a run directory holds is read by `evals/reporting/runs.py`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from accelopt.cli.memory import fail

if TYPE_CHECKING:
    from accelopt.evals.reporting.runs import RunListing, RunView

SHOW_JSON_HELP = (
    "Print one JSON object and nothing else: run_dir, task, task_dir, state (finished | running | "
    "interrupted | stopped | skipped | failed), state_text, outcome, verdict, outcome_text, stop_reason, held_by, "
    "started, model, device_name, timer (cuda_event | interpreter_wall | ...), timer_label, iterations_done, "
    "iterations_planned, candidates_evaluated, tokens, cost_usd, best_id, best {speedup, ci_low, ci_high, rounds, "
    "faster}, beam [{id, iteration, status, kind, vs_baseline}], lineage [{id, iteration, kind, parent_id, plan_id, "
    "plan_title, plan, fix_of, status, vs_baseline, vs_parent}] (baseline first, beam head last), diff (unified, "
    "baseline -> best; '' when the best is the baseline), notes")
RUNS_JSON_HELP = (
    "Print one JSON list and nothing else, one object per run: run_dir, task, started, state, outcome, verdict, "
    "outcome_text, note, iterations_done, iterations_planned, best_id, best_speedup, timer, timer_label, model, "
    "cost_usd")


def _cell(value: object) -> Text:
    return Text("-" if value is None or value == "" else str(value))  # no markup: plans and paths hold [brackets]


def _timer(timer: str | None, label: str | None) -> str:
    if timer == "interpreter_wall":
        return f"{label}: not GPU performance"
    return label or "-"


def show(run_dir: Annotated[Path, typer.Argument(help="A run directory (runs/TASK-TIME, --run-dir, or a task's folder "
                                                "in an `accelopt eval` directory)")],
         as_json: Annotated[bool, typer.Option("--json", help=SHOW_JSON_HELP)] = False) -> None:
    """One run at a glance: task, device and timer, outcome, the beam, how the best kernel came
    from the baseline (each step's plan and speedup), and its diff against the baseline.
    Exit 2 when RUN_DIR is not a run directory."""
    from accelopt.evals.reporting.runs import NotARunDir, load_run

    try:
        view = load_run(run_dir)
    except NotARunDir as e:
        fail(str(e))
    if as_json:
        typer.echo(view.model_dump_json())
        return
    _render_run(view, Console())


def _render_run(view: RunView, console: Console) -> None:
    from rich.syntax import Syntax

    from accelopt.cli.interrupt import resume_command

    head = Table(title=Text(f"accelopt run: {view.run_dir}"), show_header=False)
    head.add_row("task", _cell(view.task + (f"  ({view.task_dir})" if view.task_dir else "")))
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
    head.add_row("candidates", _cell(f"{view.candidates_evaluated} evaluated (baseline not counted)"))
    head.add_row("tokens / cost", _cell(f"{view.tokens:,} / ${view.cost_usd:.4f}"))
    if view.best is not None:
        label = f" ({view.timer_label})" if view.timer_label else ""
        head.add_row("best kernel", _cell(f"{view.best_id}: {view.best.text} vs baseline{label}"))
    for note in view.notes:
        head.add_row("note", _cell(note))
    console.print(head)
    if view.beam:
        beam = Table(title="beam (best first)")
        for column in ("id", "iteration", "kind", "status", "speedup vs baseline [interval]"):
            beam.add_column(column)
        for m in view.beam:
            beam.add_row(_cell(m.id), _cell(m.iteration), _cell(m.kind or "kernel"), _cell(m.status),
                         _cell(m.vs_baseline.text))
        console.print(beam)
    if len(view.lineage) > 1:
        lineage = Table(title=f"how {view.best_id} came from the baseline")
        for column in ("step", "id", "iteration", "plan", "vs baseline [interval]", "vs its parent [interval]"):
            lineage.add_column(column)
        for n, step in enumerate(view.lineage):
            plan = step.plan or ""
            if step.fix_of:
                plan += f"\n(repair of {step.fix_of})"
            lineage.add_row(_cell(n), _cell(step.id), _cell(step.iteration), _cell(plan or "(start)"),
                            _cell(step.vs_baseline.text), _cell(step.vs_parent.text if step.parent_id else None))
        console.print(lineage)
    if view.diff:
        console.print(Text(f"{view.best_id} against the baseline:", style="bold"))
        console.print(Syntax(view.diff, "diff", theme="ansi_dark", background_color="default", word_wrap=True))
    elif view.best_id == "baseline":
        console.print("The best kernel is still the baseline: no diff.")


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
    table = Table(title=Text(f"accelopt runs: {root}"))
    for column in ("run dir", "task", "started", "iterations", "best speedup", "outcome", "model", "cost"):
        table.add_column(column, overflow="fold")
    for r in listed:
        speedup = None
        if r.best_speedup is not None:  # never a bare number: what timed it goes with it
            what = "CPU interpreter" if r.timer == "interpreter_wall" else r.timer_label or "timer unknown"
            speedup = f"{r.best_speedup:.3f}x ({what})"
        outcome = r.outcome_text + (f": {r.note}" if r.note and r.state in ("stopped", "skipped", "failed") else "")
        path = Path(r.run_dir)
        shown = path.relative_to(root) if path != root and path.is_relative_to(root) else path
        started = r.started.replace("T", " ")[:16] if r.started else None
        table.add_row(_cell(shown), _cell(r.task), _cell(started), _cell(f"{r.iterations_done} / "
                      f"{r.iterations_planned or '?'}"), _cell(speedup), _cell(outcome), _cell(r.model),
                      _cell(f"${r.cost_usd:.4f}"))
    console.print(table)
    if any(r.timer == "interpreter_wall" for r in listed):
        console.print("CPU interpreter: CPU Triton-interpreter wall times, not GPU performance.")
