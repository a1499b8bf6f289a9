"""The accelopt command line: `accelopt optimize TASK_DIR`, `accelopt resume RUN_DIR`."""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.table import Table

from accelopt.graph.config import context_to_json, load_context, preflight_context
from accelopt.graph.outcome import run_failure
from accelopt.graph.driver import drive
from accelopt.nodes.context import RunContext
from accelopt.cli.check import check
from accelopt.cli.evaluate import eval_suite, export_app, import_app, report
from accelopt.cli.memory import app as memory_app
from accelopt.cli.memory import fail
from accelopt.memory.embedder import MemoryStoreError
from accelopt.memory.store import require_store_dir
from accelopt.tools.backends import BACKENDS, backend_for, run_refusal
from accelopt.tools.llm import ConfigError, FatalLLMError, totals
from accelopt.tools.rundir import (
    RunDirError,
    check_checkpoint,
    claim_new_run_dir,
    lock_run_dir,
    read_run_meta,
    resume_task_dir,
    run_summary,
    save_run_meta,
    write_run_meta,
)
from accelopt.tools.task import TaskError, load_task

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="accelopt: a self-improving, LLM-driven kernel optimizer.")
app.add_typer(memory_app, name="memory")
app.add_typer(import_app, name="import")
app.add_typer(export_app, name="export")
app.command("eval")(eval_suite)
app.command("report")(report)
app.command("check")(check)
console = Console()

Opt = Annotated


@app.command()
def optimize(
    task_dir: Opt[Path, typer.Argument(help="Task directory (task.json, reference.py, baseline.py)")],
    beams: Opt[Optional[int], typer.Option("--beams", "-B", min=1, help="Beam width")] = None,
    plans: Opt[Optional[int], typer.Option("--plans", "-N", min=1, help="Plans per beam member")] = None,
    samples: Opt[Optional[int], typer.Option("--samples", "-K", min=1, help="Kernels per plan")] = None,
    fixes: Opt[Optional[int], typer.Option("--fixes", "-F", min=0, help="Fix attempts per kernel")] = None,
    iterations: Opt[Optional[int], typer.Option("--iterations", "-T", min=1, help="Iterations")] = None,
    autotune: Opt[Optional[int], typer.Option(min=0, help="Search up to N launch configurations of each verified kernel")] = None,
    model: Opt[Optional[str], typer.Option(help="PROVIDER:NAME for every role (openai, vllm, sglang, ollama, tuner)")] = None,
    base_url: Opt[Optional[str], typer.Option(help="OpenAI-compatible endpoint, e.g. http://host:8000/v1")] = None,
    planner_model: Opt[Optional[str], typer.Option(help="Model for the planner only")] = None,
    executor_model: Opt[Optional[str], typer.Option(help="Model for the executor only")] = None,
    fixer_model: Opt[Optional[str], typer.Option(help="Model for the fixer only")] = None,
    summarizer_model: Opt[Optional[str], typer.Option(help="Model for the summarizer only")] = None,
    planner_base_url: Opt[Optional[str], typer.Option(help="Endpoint for the planner only")] = None,
    executor_base_url: Opt[Optional[str], typer.Option(help="Endpoint for the executor only")] = None,
    fixer_base_url: Opt[Optional[str], typer.Option(help="Endpoint for the fixer only")] = None,
    summarizer_base_url: Opt[Optional[str], typer.Option(help="Endpoint for the summarizer only")] = None,
    no_preflight: Opt[bool, typer.Option("--no-preflight", help="Skip checking that each endpoint serves its "
                                         "model before any work")] = False,
    config: Opt[Optional[Path], typer.Option(help="TOML config file (default: ./accelopt.toml)")] = None,
    run_dir: Opt[Optional[Path], typer.Option(help="Where to write the run (default: runs/TASK-TIME)")] = None,
    device: Opt[Optional[str], typer.Option(help="auto, cuda, or cpu (Triton interpreter)")] = None,
    memory: Opt[Optional[Path], typer.Option(help="Insight store directory")] = None,
    memory_url: Opt[Optional[str], typer.Option(help="Chroma server shared by runs, e.g. http://host:8000")] = None,
    embedder: Opt[Optional[str], typer.Option(help="Sentence-transformers model for insights (offline)")] = None,
    no_memory: Opt[bool, typer.Option("--no-memory", help="Neither recall nor store insights")] = False,
    create_memory: Opt[bool, typer.Option("--create-memory", help="Start a new insight store at --memory if there "
                                          "is none (else a missing directory is an error: a typo)")] = False,
    max_tokens: Opt[Optional[int], typer.Option(help="Token budget")] = None,
    max_cost: Opt[Optional[float], typer.Option(help="$ budget")] = None,
    max_wall: Opt[Optional[float], typer.Option(help="Wall-clock budget in seconds")] = None,
    eval_timeout: Opt[Optional[float], typer.Option(help="Per-candidate evaluation limit in seconds")] = None,
) -> None:
    """Optimize the kernel of TASK_DIR and write a run directory."""
    try:
        task = load_task(task_dir)
        ctx, configured = load_context(
            config, beams=beams, plans=plans, samples=samples, fixes=fixes, iterations=iterations, autotune=autotune, model=model,
            base_url=base_url, planner_model=planner_model, executor_model=executor_model,
            fixer_model=fixer_model, summarizer_model=summarizer_model, device=device,
            planner_base_url=planner_base_url, executor_base_url=executor_base_url, fixer_base_url=fixer_base_url,
            summarizer_base_url=summarizer_base_url, preflight=False if no_preflight else None,
            memory_dir=str(memory) if memory else None, use_memory=False if no_memory else None,
            memory_url=memory_url, embedder=embedder,
            max_tokens=max_tokens, max_cost_usd=max_cost, max_wall_s=max_wall, eval_timeout_s=eval_timeout)
    except (TaskError, ConfigError) as e:
        fail(str(e))
    refusal = run_refusal(task, ctx.device)
    if refusal:
        fail(f"task {task.name} needs the {task.spec.backend} backend. {refusal}")
    if not configured:
        console.print("No LLM endpoint configured: using the local tuner policy (no LLM). "
                      "Set --model or ACCELOPT_MODEL to use one.")
    if not ctx.use_memory:
        console.print("Memory disabled (--no-memory): no insights are recalled or stored.")
    else:
        _check_memory(ctx, create_memory, "pass an existing store, add --create-memory to start one there, or run "
                                          "with --no-memory")
    _preflight(ctx)
    run_dir = run_dir or Path("runs") / f"{task.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        claim_new_run_dir(run_dir, task.root)
    except RunDirError as e:
        fail(str(e))
    write_run_meta(run_dir, task.root, context_to_json(ctx))
    _report(drive(ctx, run_dir, {"task_dir": task.root, "run_dir": str(run_dir.resolve())}, console), run_dir)


def _preflight(ctx: RunContext) -> None:
    """A dead endpoint, a wrong key or an unknown model: one line before any work is done."""
    try:
        preflight_context(ctx)
    except (FatalLLMError, ConfigError) as e:
        fail(str(e))


def _check_memory(ctx: RunContext, create: bool, missing_advice: str) -> None:
    """Fail before any tokens are spent, with the fix in the message: a --memory directory that
    does not exist (unless `create`), or a store that cannot be opened or lost its database."""
    try:
        if ctx.memory_dir and not ctx.memory_url and not create:
            require_store_dir(ctx.memory_dir, missing_advice)
        from accelopt.nodes.services import open_store

        open_store(ctx)
    except MemoryStoreError as e:
        fail(str(e))


@app.command()
def resume(run_dir: Opt[Path, typer.Argument(help="A run directory written by `accelopt optimize`")],
           iterations: Opt[Optional[int], typer.Option("--iterations", "-T", min=1, help=(
               "Run until iteration T: more than the run had continues a finished search from its last beam"))] = None,
           task: Opt[Optional[Path], typer.Option("--task", help="Where the run's task directory is now, if it "
                                                  "moved (it must hold the same task files)")] = None,
           create_memory: Opt[bool, typer.Option("--create-memory", help="Continue with a new, empty insight "
                                                 "store if the run's memory directory is gone")] = False,
           restart: Opt[bool, typer.Option(help="Start the search over in this directory (after a corrupt "
                                                "checkpoint); cached evaluations and replies are replayed")] = False,
           ) -> None:
    """Continue a run from its last checkpoint; evaluated candidates are kept."""
    try:
        meta = read_run_meta(run_dir)
        lock_run_dir(run_dir)
        ctx = RunContext(**meta["context"])
        if iterations is not None:
            ctx = dataclasses.replace(ctx, iterations=iterations)
        task_dir = resume_task_dir(run_dir, meta, task)
        if not restart:
            check_checkpoint(run_dir)
    except RunDirError as e:
        fail(str(e))
    except (TypeError, ValueError, KeyError) as e:
        fail(f"{run_dir / 'run.json'} does not fit this version of accelopt ({str(e)[:200]}); start a new run")
    if ctx.use_memory:
        _check_memory(ctx, create_memory, "the memory directory recorded in run.json is gone; restore it, or "
                                          "resume with --create-memory to go on with an empty store there")
    _preflight(ctx)
    if restart:  # every check passed: only now is the old checkpoint set aside
        checkpoint = run_dir / "checkpoints.sqlite"
        if checkpoint.exists():
            checkpoint.rename(checkpoint.with_name(f"checkpoints.sqlite.old-{time.strftime('%Y%m%d-%H%M%S')}"))
    # the drive reads the task and T from here; a later plain `resume` keeps them
    save_run_meta(run_dir, {**meta, "task_dir": task_dir, "context": {**meta["context"], "iterations": ctx.iterations}})
    inputs = {"task_dir": task_dir, "run_dir": str(run_dir.resolve())} if restart else None
    _report(drive(ctx, run_dir, inputs, console), run_dir)


@app.command()
def doctor() -> None:
    """Which kernel backends, profilers, memory and model settings are usable here, and why not."""
    import shutil

    table = Table(title="accelopt doctor")
    for column in ("component", "usable", "detail"):
        table.add_column(column)
    for name in BACKENDS:
        found = backend_for(name).availability()
        table.add_row(f"backend {name}", "yes" if found.usable else "no",
                      found.detail if found.can_time else f"{found.detail} (cannot time kernels here)")
    for tool, use in (("ncu", "GPU kernel profiles for the planner"), ("neuron-profile", "Trainium profiles")):
        path = shutil.which(tool)
        table.add_row(tool, "yes" if path else "no", f"{path}: {use}" if path else f"not on PATH ({use})")
    try:
        from accelopt.memory.embedder import _model_path

        table.add_row("memory embedder", "yes", _model_path("all-MiniLM-L6-v2"))
    except MemoryStoreError as e:
        table.add_row("memory embedder", "no", str(e))
    try:
        ctx, configured = load_context(None)
        table.add_row("models", "yes", ctx.model_spec("planner").label() if configured
                      else "no LLM endpoint configured: the tuner policy (no LLM)")
    except ConfigError as e:
        table.add_row("models", "no", str(e))
    console.print(table)


def _report(state: dict, run_dir: Path) -> None:
    candidates = state.get("candidates") or {}
    if not state.get("beam"):  # setup stopped the run: no task baseline, or a broken one
        fail(state.get("stop_reason") or "the run produced no candidates", code=1)
    best = candidates[state["beam"][0]]
    spent = totals(state.get("usage", []))
    table = Table(title=f"accelopt run: {run_dir}", show_header=False)
    table.add_row("stopped", str(state.get("stop_reason")))
    table.add_row("best kernel", f"{best['id']}  ({run_dir / 'best_kernel.py'})")
    label = " (CPU interpreter time: not GPU performance)" if best.get("timer") == "interpreter_wall" else ""
    versus = ("PyTorch reference (from scratch)" if candidates[state["baseline_id"]].get("kind") == "reference"
              else "baseline")
    table.add_row(f"speedup vs {versus}", f"{best.get('speedup') or 1.0:.3f}x{label}")
    if best.get("pct_peak") is not None:
        table.add_row("% of peak", f"{best['pct_peak']:.1f}% datasheet, {best.get('pct_achievable') or 0:.1f}% achievable")
    summary = run_summary(state)
    table.add_row("candidates", ", ".join(f"{k} {v}" for k, v in sorted(summary["statuses"].items())))
    if summary["autotune"]:
        tuned = summary["autotune"]
        table.add_row("autotune", f"{tuned['variants']} configurations over {tuned['rewrites_tuned']} kernels; best = "
                      f"{tuned['best_rewrite_speedup'] or 1.0:.3f}x rewrite x {tuned['best_autotune_gain']:.3f}x autotune")
    table.add_row("tokens / cost", f"{spent['input_tokens']:,} in, {spent['output_tokens']:,} out, ${spent['cost_usd']:.4f}")
    table.add_row("insights stored", str(len(state.get("insights", []))))
    console.print(table)
    failure = run_failure(state)  # summary.json is written: the run's record stays, the exit says it failed
    if failure:
        fail(failure, code=1)


def main() -> None:
    # accelopt's own log lines (retries, a placeholder key, unpriced or usage-less models) beside the progress bar
    log = logging.getLogger("accelopt")
    log.setLevel(logging.INFO)
    log.addHandler(RichHandler(console=console, show_time=False, show_path=False))
    log.propagate = False
    app()
