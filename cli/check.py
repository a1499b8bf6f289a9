"""`accelopt check TASK_DIR KERNEL.py [--against OTHER.py] [--json]`: judge one kernel as a
user would, through the same harness as a run. Exit 0 verified, 1 rejected, 2 bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from accelopt.cli.memory import fail
from accelopt.cli.options import DeviceName, device_refusal

if TYPE_CHECKING:
    from accelopt.tools.harness.result import EvalResult

Opt = Annotated
# Why the judge's timing rounds stopped (result.RoundsRun.stopped), in words.
ROUNDS_STOPPED = {"decided": "every comparison decided", "cap": "the cap, some comparison undecided",
                  "stalled": "more rounds no longer narrowed an undecided comparison",
                  "interpreter": "the interpreter's fixed count", "no_comparators": "nothing to compare",
                  "time_limit": "the evaluation's time limit"}


def check(
    task_dir: Opt[Path, typer.Argument(help="Task directory (task.json, reference.py, baseline.py)")],
    kernel: Opt[Path, typer.Argument(help="The kernel module to judge (its entry point is the task's; for a "
                                          "task imported from KernelBench, a solution defining ModelNew)")],
    against: Opt[Optional[Path], typer.Option(help="Time against this kernel instead of the task's baseline")] = None,
    device: Opt[DeviceName, typer.Option(help="auto, cuda (refused where no GPU is visible), or cpu (Triton "
                                               "interpreter: correctness, no GPU times)")] = "auto",
    timeout: Opt[float, typer.Option(help="Evaluation limit in seconds")] = 300.0,
    as_json: Opt[bool, typer.Option("--json", help="Print the whole result as one JSON object")] = False,
) -> None:
    """Judge one kernel: verdict and reasons, static findings, per-workload times with spread,
    speedup against the baseline (or --against), % of peak."""
    from accelopt.tools.backends import backend_for, run_refusal
    from accelopt.tools.task import TaskError, load_task

    try:
        task = load_task(task_dir)
    except TaskError as e:
        fail(str(e))
    for path in (kernel, against):
        if path is not None and not path.is_file():
            fail(f"{path}: no such file")
    refusal = device_refusal(device) or run_refusal(task, device)
    if refusal:
        fail(refusal)
    from accelopt.tools.kernelbench_solution import adapt  # a KernelBench solution (ModelNew) gets its entry point

    compare = {}
    text = kernel.read_text()
    try:
        source = adapt(task.root, text, task.spec.entry_point)
        if against is not None:
            compare["against"] = adapt(task.root, against.read_text(), task.spec.entry_point)
    except TaskError as e:
        fail(str(e))
    if against is None and task.baseline_source:
        compare["baseline"] = task.baseline_source
    result = backend_for(task).evaluate(task, source, device=None if device == "auto" else device,
                                        timeout_s=timeout, compare=compare, trusted=False)
    if source != text:  # static advice on the entry point accelopt appended is not about the user's file
        lines = len(text.splitlines())
        result.findings = [f for f in result.findings if f.line is None or f.line <= lines]
    if as_json:
        typer.echo(json.dumps(result.model_dump(mode="json")))
    else:
        show(result, kernel)
    raise typer.Exit(0 if result.ok else 1)


def show(result: EvalResult, kernel: Path) -> None:
    console = Console()
    style = "bold green" if result.ok else "bold red"
    console.print(f"[{style}]{result.status}[/]  {kernel}  on {result.device_name or result.device}")
    if result.error:
        console.print(result.error, markup=False, highlight=False)
    for line in result.evidence:
        console.print(f"  evidence: {line}", markup=False, highlight=False)
    for f in result.findings:
        where = f" line {f.line}" if f.line else ""
        console.print(f"  finding ({f.severity}{where}): {f.message}", markup=False, highlight=False)
    if result.workloads:
        interp = result.timer == "interpreter_wall"
        table = Table(title="times" + (" (CPU interpreter wall clock: not GPU performance)" if interp else ""))
        for column in ("workload", "median µs", "IQR µs", "metric", "kernel-only µs", "events µs", "% peak"):
            table.add_column(column)
        for name, t in result.workloads.items():
            table.add_row(name, f"{t.median_us:.1f}", f"{t.iqr_us:.1f}", t.metric,
                          f"{t.kernel_us:.1f}" if t.kernel_us is not None else "-",
                          f"{t.event_us:.1f}" if t.event_us is not None else "-",
                          f"{t.pct_peak:.1f}" if t.pct_peak is not None else "-")
        console.print(table)
        for name, t in result.workloads.items():
            if t.disagreement:
                console.print(f"  {name}: the figures disagree: {t.disagreement}", markup=False)
    from accelopt.tools.harness.result import interval_label

    if result.rounds is not None:
        console.print(f"  timing rounds: {result.rounds.ran} ({ROUNDS_STOPPED[result.rounds.stopped]})",
                      markup=False, highlight=False)
    for name, vs in result.versus.items():
        if result.timer == "interpreter_wall":  # compare_rounds decides nothing there
            verdict = "no verdict: the CPU interpreter cannot tell faster from slower"
        else:
            verdict = "faster" if vs.faster else "slower" if vs.slower else "within noise"
            verdict += f" (noise floor {vs.noise_floor:.0%})" if vs.noise_floor else ""
        console.print(f"  vs {name}: {vs.speedup:.3f}x ({interval_label(vs.rounds)}: {vs.ci_low:.3f}-{vs.ci_high:.3f})"
                      f": {verdict}", markup=False, highlight=False)
    if result.audit is not None:
        console.print(f"  audit ({result.audit.tool}): {result.audit.note}", markup=False)
    if result.phases_s:
        steps = ", ".join(f"{name} {s:.1f}" for name, s in result.phases_s.items())
        console.print(f"  seconds: {steps} (of {result.eval_s:.1f} in all)", markup=False, highlight=False)
    if result.flags:
        console.print(f"  flags: {', '.join(result.flags)}")
