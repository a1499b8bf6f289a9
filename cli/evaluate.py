"""`accelopt eval | report | import | export`: suites, reports, and the peer formats."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from accelopt.graph.config import load_context
from accelopt.cli.memory import fail
from accelopt.tools.llm import ConfigError
from accelopt.tools.task import TaskError

console = Console()
Opt = Annotated
import_app = typer.Typer(no_args_is_help=True, help="Import a task from a peer benchmark's format.")
export_app = typer.Typer(no_args_is_help=True, help="Export a run's best kernel to a peer benchmark's format.")


def eval_suite(
    suite: Opt[str, typer.Argument(help="A directory of task directories, or: triton, nkibench")],
    tasks: Opt[Optional[str], typer.Option(help="Comma-separated task names (default: all)")] = None,
    out: Opt[Optional[Path], typer.Option(help="Eval directory; rerun with the same one to resume")] = None,
    beams: Opt[Optional[int], typer.Option("--beams", "-B", min=1)] = None,
    plans: Opt[Optional[int], typer.Option("--plans", "-N", min=1)] = None,
    samples: Opt[Optional[int], typer.Option("--samples", "-K", min=1)] = None,
    fixes: Opt[Optional[int], typer.Option("--fixes", "-F", min=0)] = None,
    iterations: Opt[Optional[int], typer.Option("--iterations", "-T", min=1)] = None,
    autotune: Opt[Optional[int], typer.Option(min=0, help="Launch configurations searched per verified kernel")] = None,
    model: Opt[Optional[str], typer.Option(help="PROVIDER:NAME for every role")] = None,
    base_url: Opt[Optional[str], typer.Option(help="OpenAI-compatible endpoint")] = None,
    config: Opt[Optional[Path], typer.Option(help="TOML config file")] = None,
    device: Opt[Optional[str], typer.Option(help="auto, cuda, or cpu (Triton interpreter)")] = None,
    memory: Opt[Optional[Path], typer.Option(help="Insight store directory")] = None,
    no_memory: Opt[bool, typer.Option("--no-memory")] = False,
    max_cost: Opt[Optional[float], typer.Option(help="$ budget per task")] = None,
    torch_compile: Opt[bool, typer.Option(help="On a GPU, time the best kernels against torch.compile")] = True,
) -> None:
    """Optimize every task of SUITE, each in its own run directory, then write the report."""
    from accelopt.evals.report import build_report
    from accelopt.evals.suite import resolve_suite, run_suite, suite_tasks

    try:
        suite_dir = resolve_suite(suite)
        chosen = suite_tasks(suite_dir, [t.strip() for t in tasks.split(",") if t.strip()] if tasks else None)
        ctx, configured = load_context(
            config, beams=beams, plans=plans, samples=samples, fixes=fixes, iterations=iterations, autotune=autotune, model=model,
            base_url=base_url, device=device, memory_dir=str(memory) if memory else None,
            use_memory=False if no_memory else None, max_cost_usd=max_cost)
    except (TaskError, ConfigError) as e:
        fail(str(e))
    if not configured:
        console.print("No LLM endpoint configured: using the local tuner policy (no LLM).")
    out = out or Path("runs") / f"eval-{suite_dir.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_suite(suite_dir, out, ctx, chosen, console, torch_compile=torch_compile)
    page = build_report(out)
    console.print(f"report: {page}")


def report(path: Opt[Path, typer.Argument(help="A run directory or an eval directory")],
           out: Opt[Optional[Path], typer.Option(help="Where to write (default: PATH)")] = None) -> None:
    """Rebuild report.html, report.json and plots/ from what is on disk."""
    from accelopt.evals.report import build_report

    if not path.is_dir():
        fail(f"{path} is not a directory")
    try:
        page = build_report(path, out)
    except FileNotFoundError as e:
        fail(str(e))
    console.print(f"report: {page}")


def _copy_baseline(baseline: Path | None, task_dir: Path) -> None:
    if baseline is not None:
        if not baseline.is_file():
            fail(f"baseline kernel not found: {baseline}")
        (task_dir / "baseline.py").write_text(baseline.read_text())


@import_app.command("flashinfer")
def import_flashinfer(
    definition: Opt[Path, typer.Argument(help="A FlashInfer-Bench Definition (JSON)")],
    out: Opt[Path, typer.Option(help="Task directory to write")],
    workloads: Opt[Optional[Path], typer.Option(help="Workloads or workload Traces (JSONL)")] = None,
    baseline: Opt[Optional[Path], typer.Option(help="A Triton kernel to start from (else: from scratch)")] = None,
) -> None:
    """A FlashInfer-Bench Definition and its Workloads as an accelopt task."""
    from accelopt.evals.interop.flashinfer import import_definition

    try:
        task_dir = import_definition(definition, workloads, out)
    except TaskError as e:
        fail(str(e))
    _copy_baseline(baseline, task_dir)
    console.print(f"task written: {task_dir}")


@import_app.command("kernelbench")
def import_kernelbench(
    problem: Opt[Path, typer.Argument(help="A KernelBench problem file (Model, get_inputs, get_init_inputs)")],
    out: Opt[Path, typer.Option(help="Task directory to write")],
    dtype: Opt[str, typer.Option(help="float32, float16 or bfloat16")] = "float32",
    interpreter_param: Opt[Optional[list[str]], typer.Option(
        help="NAME=VALUE overriding a module constant for the CPU interpreter's shapes (repeatable)")] = None,
    baseline: Opt[Optional[Path], typer.Option(help="A Triton kernel to start from (else: from scratch)")] = None,
) -> None:
    """A KernelBench problem as an accelopt task (run(*inputs, *parameters))."""
    from accelopt.evals.interop.kernelbench import import_problem

    params: dict[str, int | float] = {}
    for item in interpreter_param or []:
        key, sep, value = item.partition("=")
        try:
            params[key] = int(value) if value.lstrip("-").isdigit() else float(value)
        except ValueError:
            sep = ""
        if not sep:
            fail(f"--interpreter-param {item!r}: expected NAME=NUMBER")
    if dtype not in ("float32", "float16", "bfloat16"):
        fail(f"--dtype {dtype}: use float32, float16 or bfloat16")
    try:
        task_dir = import_problem(problem, out, dtype=dtype, interpreter_params=params)
    except TaskError as e:
        fail(str(e))
    _copy_baseline(baseline, task_dir)
    console.print(f"task written: {task_dir}")


@export_app.command("flashinfer")
def export_flashinfer(run_dir: Opt[Path, typer.Argument(help="A run directory of an imported task")],
                      out: Opt[Path, typer.Option(help="Directory for solution.json and traces.jsonl")]) -> None:
    """The best kernel as a FlashInfer-Bench Solution, its measurements as Traces."""
    from accelopt.evals.interop.flashinfer import export_run

    try:
        solution, traces = export_run(run_dir, out)
    except TaskError as e:
        fail(str(e))
    console.print(f"solution: {solution}\ntraces: {traces}")


@export_app.command("kernelbench")
def export_kernelbench(run_dir: Opt[Path, typer.Argument(help="A run directory of an imported task")],
                       out: Opt[Path, typer.Option(help="Solution file to write (ModelNew)")]) -> None:
    """The best kernel as a KernelBench solution file defining ModelNew."""
    from accelopt.evals.interop.kernelbench import export_run

    try:
        path = export_run(run_dir, out)
    except TaskError as e:
        fail(str(e))
    console.print(f"solution: {path}")
