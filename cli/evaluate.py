"""`accelopt eval | report | import | export`: suites, reports, and the peer formats."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Annotated as Opt  # an import alias: mypy takes `Opt = Annotated` for a variable

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from accelopt.cli import options as o
from accelopt.cli.interrupt import continue_hint_on_interrupt, rerun_command
from accelopt.cli.memory import fail

if TYPE_CHECKING:
    from accelopt.nodes.context import RunContext

console = Console()
import_app = typer.Typer(no_args_is_help=True, help="Import a task from a peer benchmark's format.")
export_app = typer.Typer(no_args_is_help=True, help="Export a run's best kernel to a peer benchmark's format.")


def eval_suite(
    suite: Opt[str, typer.Argument(help="A directory of task directories, or: triton, nkibench")],
    tasks: Opt[str | None, typer.Option(help="Comma-separated task names (default: all)")] = None,
    out: Opt[Path | None, typer.Option(help="Eval directory (default: runs/eval-SUITE-TIME); rerun with the same "
                                               "one to resume, or with a larger -T to extend finished tasks")] = None,
    beams: o.Beams = None,
    plans: o.Plans = None,
    samples: o.Samples = None,
    fixes: o.Fixes = None,
    iterations: o.Iterations = None,
    autotune: o.Autotune = None,
    model: o.Model = None,
    base_url: o.BaseUrl = None,
    planner_model: o.PlannerModel = None,
    executor_model: o.ExecutorModel = None,
    fixer_model: o.FixerModel = None,
    summarizer_model: o.SummarizerModel = None,
    planner_base_url: o.PlannerBaseUrl = None,
    executor_base_url: o.ExecutorBaseUrl = None,
    fixer_base_url: o.FixerBaseUrl = None,
    summarizer_base_url: o.SummarizerBaseUrl = None,
    no_preflight: o.NoPreflight = False,
    config: o.Config = None,
    device: o.Device = None,
    memory: o.Memory = None,
    memory_url: o.MemoryUrl = None,
    embedder: o.Embedder = None,
    no_memory: o.NoMemory = False,
    learn_from_interpreter: o.LearnFromInterpreter = False,
    max_tokens: o.MaxTokens = None,
    max_cost: o.MaxCost = None,
    max_wall: o.MaxWall = None,
    eval_timeout: o.EvalTimeout = None,
    cluster: o.Cluster = None,
    ray_address: o.RayAddress = None,
    seed: o.Seed = None,
    seed_mode: o.SeedMode = None,
    compile_mode: o.CompileMode = None,
    schedule: o.Schedule = None,
    quorum: o.Quorum = None,
    torch_compile: Opt[bool, typer.Option(help="On a GPU, time the best kernels against torch.compile")] = True,
) -> None:
    """Optimize every task of SUITE, each in its own run directory, then write the report.

    Exit 0 when every task ran (a task skipped with its reason included), 1 when any failed or
    stopped at setup (e.g. a baseline that fails its own check), after the table; 2 for bad usage."""
    from accelopt.evals.suite import resolve_suite, suite_tasks
    from accelopt.graph.config import load_context
    from accelopt.tools.llm_spec import ConfigError
    from accelopt.tools.task import TaskError

    try:
        suite_dir = resolve_suite(suite)
        chosen = suite_tasks(suite_dir, [t.strip() for t in tasks.split(",") if t.strip()] if tasks else None)
        ctx, configured = load_context(config, **o.context_flags(
            beams=beams, plans=plans, samples=samples, fixes=fixes, iterations=iterations, autotune=autotune,
            schedule=schedule, quorum=quorum,
            model=model, base_url=base_url, planner_model=planner_model, executor_model=executor_model,
            fixer_model=fixer_model, summarizer_model=summarizer_model, planner_base_url=planner_base_url,
            executor_base_url=executor_base_url, fixer_base_url=fixer_base_url,
            summarizer_base_url=summarizer_base_url, no_preflight=no_preflight, device=device, memory=memory,
            memory_url=memory_url, embedder=embedder, no_memory=no_memory,
            learn_from_interpreter=learn_from_interpreter, max_tokens=max_tokens, max_cost=max_cost,
            max_wall=max_wall, eval_timeout=eval_timeout, cluster=cluster, ray_address=ray_address, seed=seed,
            seed_mode=seed_mode, torch_compile_mode=compile_mode, versus_torch_compile=None if torch_compile else False))
    except (TaskError, ConfigError) as e:
        fail(str(e))
    _check_suite_context(ctx, configured)
    out = out or Path("runs") / f"eval-{suite_dir.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    _run_and_report(suite_dir, out, ctx, chosen)


def _check_suite_context(ctx: RunContext, configured: bool) -> None:
    """Before the first task: a device or cluster not there, and a dead endpoint, stop the suite
    (not one failed task at a time); no endpoint runs the local tuner policy, said."""
    from accelopt.nodes.preflight import preflight_context
    from accelopt.tools.llm_spec import ConfigError, FatalLLMError

    refusal = o.cluster_refusal(ctx.ray_address) if ctx.ray_address else o.device_refusal(ctx.device)
    if refusal:
        fail(refusal)
    if not configured:
        console.print("No LLM endpoint configured: using the local tuner policy (no LLM).")
    try:  # a dead endpoint stops the suite before its first task, not one failed task at a time
        preflight_context(ctx)
    except (FatalLLMError, ConfigError) as e:
        fail(str(e))


def _run_and_report(suite_dir: Path, out: Path, ctx: RunContext, chosen: list[Path]) -> None:
    """Run the chosen tasks into `out` (Ctrl-C says how to resume), write the report, print the
    headline of the tasks run; exit 1 naming each task that did not run (RAN)."""
    from accelopt.evals.reporting.report import build_report, load_rows
    from accelopt.evals.suite import run_suite

    with continue_hint_on_interrupt(rerun_command(out), console):
        run_suite(suite_dir, out, ctx, chosen, console)
    page = build_report(out)
    ran = {(out / t.name).resolve() for t in chosen}
    rows = [r for r in load_rows(out) if Path(r.run_dir).resolve() in ran]
    print_headline(rows, f"suite: {suite_dir.name}")
    console.print(f"report: {page}")
    failed = [r for r in rows if r.outcome not in RAN]
    if failed:
        causes = "; ".join(f"{r.task} ({NOT_RAN.get(r.outcome, r.outcome + ': ')}{r.note})" for r in failed)
        fail(f"{len(failed)} of {len(chosen)} tasks failed: {causes[:1000]}", code=1)


# A suite succeeds when every task ran: optimized, or skipped with its reason (it cannot run on this
# machine). A task stopped at setup (no correct baseline to start from), failed, or left unfinished did not.
RAN = ("optimized", "skipped")
NOT_RAN = {"failed": "", "stopped": "stopped at setup: ", "running": "did not finish: "}


def print_headline(rows: list, title: str) -> None:
    """The headline numbers of runs, as `eval` ends and as `report` prints them: per task its outcome,
    speedup with its interval (named for what it is), against torch.compile and timer, then the
    geomean per timer (GPU and interpreter figures never pooled)."""
    from accelopt.evals.reporting.report import headline, headline_columns, suite_figures

    cells, geomeans = headline(rows, suite_figures(rows))
    table = Table(title=title)
    for name in headline_columns(rows):
        table.add_column(name, overflow="fold")
    for row in cells:
        table.add_row(*(Text(cell) for cell in row))  # plain text: "[...]" is no markup
    console.print(table, highlight=False)
    for line in geomeans:  # prose: wrapped at words to the terminal's width
        console.print(line, markup=False, highlight=False)


def report(path: Opt[Path, typer.Argument(help="A run directory or an eval directory")],
           out: Opt[Path | None, typer.Option(help="Where to write (default: PATH)")] = None) -> None:
    """Rebuild report.html, report.json and plots/ from what is on disk, and print the headline
    numbers: per task its outcome, speedup with its interval, against torch.compile, and timer."""
    from accelopt.evals.reporting.report import build_report, load_rows

    if not path.is_dir():
        fail(f"{path} is not a directory")
    try:
        page = build_report(path, out)
    except FileNotFoundError as e:
        fail(str(e))
    print_headline(load_rows(path), f"accelopt report: {path.resolve().name}")
    console.print(f"report: {page}")


Force = Opt[bool, typer.Option("--force", help="Replace --out if it already holds a task (never a run directory)")]


def _fresh_out(out: Path, force: bool) -> Path:
    """Where an import writes: --out itself when it is new or empty, else (with --force) a folder
    beside it that replaces it once the import succeeded, so a failed import leaves the old task
    and a re-import leaves no stale file of it (a hand-edited baseline.py). Without --force a
    folder with files is refused, and a run directory always is."""
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return out
    if not out.is_dir():
        fail(f"--out {out} is a file, not a folder")
    if any((out / marker).exists() for marker in ("run.json", "checkpoints.sqlite", "summary.json")):
        fail(f"--out {out} is a run directory: a task imported there would mix with the run's files; "
             "choose a new folder")
    if not force:
        fail(f"--out {out} already holds files ({', '.join(sorted(p.name for p in out.iterdir())[:4])}...): "
             "choose a new folder, or --force to replace it")
    staging = out.with_name(f".{out.name}.importing")
    if staging.exists():
        shutil.rmtree(staging)
    return staging


def _replace_out(written: Path, out: Path) -> Path:
    """The import written to a staging folder (_fresh_out) takes --out's place."""
    if written == out:
        return out
    shutil.rmtree(out)
    written.rename(out)
    return out


def _discard(staging: Path, out: Path) -> None:
    if staging != out:
        shutil.rmtree(staging, ignore_errors=True)


def _unchanged_note(run_dir: Path) -> str | None:
    """Said on export when the run's best kernel is the baseline it started from."""
    from accelopt.tools.run_record import load_summary

    summary = load_summary(run_dir)
    if summary is not None and summary.best_id == "baseline" and summary.baseline_kind == "kernel":
        return (f"{run_dir.name}: the run found no kernel faster than its baseline: the exported solution is the "
                "task's baseline.py, unchanged")
    return None


def _copy_baseline(baseline: Path | None, task_dir: Path) -> None:
    if baseline is not None:
        if not baseline.is_file():
            fail(f"baseline kernel not found: {baseline}")
        (task_dir / "baseline.py").write_text(baseline.read_text())


@import_app.command("flashinfer")
def import_flashinfer(
    definition: Opt[Path, typer.Argument(help="A FlashInfer-Bench Definition (JSON)")],
    out: Opt[Path, typer.Option(help="Task directory to write")],
    workloads: Opt[Path | None, typer.Option(
        help="Workloads or workload Traces (JSONL); default: the dataset's workloads/<op_type>/<name>.jsonl")] = None,
    dataset: Opt[Path | None, typer.Option(
        help="Dataset root the safetensors paths are relative to (default: found from the workloads file)")] = None,
    atol: Opt[float | None, typer.Option(help="As `flashinfer-bench run --atol` (default 1e-2)")] = None,
    rtol: Opt[float | None, typer.Option(help="As `flashinfer-bench run --rtol` (default 1e-2)")] = None,
    baseline: Opt[Path | None, typer.Option(
        help="A Triton kernel to start from: a Python module, or a FlashInfer-Bench Solution JSON for this "
             "Definition (else: from scratch)")] = None,
    force: Force = False,
) -> None:
    """A FlashInfer-Bench Definition and its Workloads as an accelopt task."""
    import json

    from accelopt.evals.interop.flashinfer import adapt_baseline, import_definition
    from accelopt.tools.task import TaskError

    target = _fresh_out(out, force)
    try:
        task_dir = import_definition(definition, workloads, target, dataset=dataset, atol=atol, rtol=rtol,
                                     baseline=baseline)
        shimmed = adapt_baseline(task_dir)
    except TaskError as e:
        _discard(target, out)
        fail(str(e))
    task_dir = _replace_out(task_dir, out)
    if shimmed:
        console.print("baseline.py returns a dict: a shim returns its outputs in the Definition's order")
    console.print(f"task written: {task_dir}")
    gpu_only = json.loads((task_dir / "flashinfer.json").read_text()).get("gpu_only")
    if gpu_only:
        console.print(f"[yellow]GPU only: {gpu_only}[/yellow]", highlight=False)


@import_app.command("kernelbench")
def import_kernelbench(
    out: Opt[Path, typer.Option(help="Task directory to write; with --level and no --problem, the suite folder")],
    problem: Opt[Path | None, typer.Argument(
        help="A KernelBench problem file (Model, get_inputs, get_init_inputs); or use --level/--problem/--repo")] = None,
    level: Opt[int | None, typer.Option(help="KernelBench level (with --repo); alone: every problem of it")] = None,
    problem_id: Opt[int | None, typer.Option("--problem", help="Problem id within --level (19: 19_ReLU.py)")]
    = None,
    repo: Opt[Path | None, typer.Option(help="A KernelBench checkout (or its KernelBench/ folder)")] = None,
    dtype: Opt[str, typer.Option(help="float32, float16 or bfloat16")] = "float32",
    interpreter_param: Opt[list[str] | None, typer.Option(
        help="NAME=VALUE overriding a size for the CPU interpreter's shapes, e.g. batch_size=4 or "
             "kernel_size[1]=3 (repeatable; default: small sizes found automatically)")] = None,
    baseline: Opt[Path | None, typer.Option(help="A Triton kernel to start from (else: from scratch)")] = None,
    force: Force = False,
) -> None:
    """A KernelBench problem as an accelopt task (run(*inputs, *state)), or a whole level as a suite."""
    params = _interpreter_params(interpreter_param)
    _check_kernelbench_args(problem, level, problem_id, repo, dtype)
    if problem is None and problem_id is None:  # a whole level: one suite folder
        assert level is not None and repo is not None, "no problem file: --level and --repo (checked above)"
        if params or baseline is not None:
            fail("--interpreter-param and --baseline apply to one problem: add --problem")
        _import_kernelbench_level(repo, level, out, force, dtype)
        return
    _import_kernelbench_problem(problem, level, problem_id, repo, out, force, dtype, params, baseline)


def _interpreter_params(items: list[str] | None) -> dict[str, int | float]:
    """--interpreter-param NAME=NUMBER, repeatable: an int where the value is one, else a float."""
    params: dict[str, int | float] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        try:
            params[key] = int(value) if value.lstrip("-").isdigit() else float(value)
        except ValueError:
            sep = ""
        if not sep:
            fail(f"--interpreter-param {item!r}: expected NAME=NUMBER")
    return params


def _check_kernelbench_args(problem: Path | None, level: int | None, problem_id: int | None, repo: Path | None,
                            dtype: str) -> None:
    """The dtype, and one way to name what to import: a problem file, or --level (--problem) with --repo."""
    if dtype not in ("float32", "float16", "bfloat16"):
        fail(f"--dtype {dtype}: use float32, float16 or bfloat16")
    if problem is not None and (level is not None or problem_id is not None or repo is not None):
        fail("give a problem file, or --level/--problem with --repo, not both")
    if problem is None and (level is None or repo is None):
        fail("give a problem file, or --level (and --problem) with --repo")
    if problem_id is not None and level is None:
        fail("--problem needs --level")


def _import_kernelbench_level(repo: Path, level: int, out: Path, force: bool, dtype: str) -> None:
    """Every problem of a level into one suite folder; those that cannot be imported are said, and
    a level none of whose problems could be imported fails, leaving --out as it was."""
    from accelopt.evals.interop.kernelbench_repo import import_level, level_problems
    from accelopt.tools.task import TaskError

    try:
        level_problems(repo, level)  # a wrong repo or level is said before anything about --out
    except TaskError as e:
        fail(str(e))
    target = _fresh_out(out, force)
    try:
        result = import_level(repo, level, target, dtype=dtype)
    except TaskError as e:
        _discard(target, out)
        fail(str(e))
    if not result.imported:
        _discard(target, out)
    else:
        _replace_out(target, out)
    for failed, reason in result.failures.items():
        console.print(f"[yellow]not imported: {failed}: {reason}[/yellow]", highlight=False)
    if not result.imported:
        fail(f"no problem of level {level} could be imported")
    console.print(f"suite written: {out} ({len(result.imported)} tasks, {len(result.failures)} not imported)")


def _import_kernelbench_problem(problem: Path | None, level: int | None, problem_id: int | None,
                                repo: Path | None, out: Path, force: bool, dtype: str,
                                params: dict[str, int | float], baseline: Path | None) -> None:
    """One problem, from its file or by --level/--problem in --repo (then named for its level), as
    a task in --out, with --baseline as its baseline.py where given."""
    from accelopt.evals.interop.kernelbench import import_problem
    from accelopt.evals.interop.kernelbench_repo import problem_file, task_name
    from accelopt.tools.task import TaskError

    if problem is None:  # a wrong repo, level or problem id is said before anything about --out
        assert level is not None and repo is not None and problem_id is not None, "checked above"
        try:
            problem = problem_file(repo, level, problem_id)
        except TaskError as e:
            fail(str(e))
        name = task_name(problem, level)
    else:
        name = None
    target = _fresh_out(out, force)
    try:
        if name is not None:
            task_dir = import_problem(problem, target, dtype=dtype, interpreter_params=params, name=name)
        else:
            task_dir = import_problem(problem, target, dtype=dtype, interpreter_params=params)
    except TaskError as e:
        _discard(target, out)
        fail(str(e))
    if baseline is not None and not baseline.is_file():
        _discard(target, out)
    _copy_baseline(baseline, task_dir)
    task_dir = _replace_out(task_dir, out)
    console.print(f"task written: {task_dir}")


@export_app.command("flashinfer")
def export_flashinfer(run_dir: Opt[Path, typer.Argument(help="A run directory of an imported task")],
                      out: Opt[Path, typer.Option(help="FlashInfer-Bench dataset root to write into (created if new)")],
                      author: Opt[str, typer.Option(help="Solution author: solutions/<author>/, traces/<author>/")]
                      = "accelopt") -> None:
    """The best kernel as a FlashInfer-Bench Solution, with a Trace per Definition workload measured,
    written into a dataset (definitions/, workloads/, solutions/, traces/)."""
    from accelopt.evals.interop.flashinfer import export_run
    from accelopt.tools.task import TaskError

    try:
        export = export_run(run_dir, out, author=author)
    except TaskError as e:
        fail(str(e))
    console.print(f"solution: {export.solution}", highlight=False)
    if export.traces is not None:
        console.print(f"traces: {export.traces} ({export.workloads_traced} workloads)", highlight=False)
    for note in [*export.notes, *filter(None, [_unchanged_note(run_dir)])]:
        console.print(f"[yellow]{note}[/yellow]", highlight=False)


@export_app.command("kernelbench")
def export_kernelbench(run_dir: Opt[Path, typer.Argument(help="A run directory of an imported task, or an eval "
                                                               "directory (each task's run)")],
                       out: Opt[Path, typer.Option(help="Solution file (.py), or a KernelBench runs/<run_name> folder: "
                                                        "level_<L>_problem_<P>_sample_<S>_kernel.py each")],
                       sample_id: Opt[int, typer.Option(min=0, help="The sample number in KernelBench's file name")]
                       = 0) -> None:
    """The best kernel as a KernelBench solution file defining ModelNew, named as KernelBench names them."""
    from accelopt.evals.interop.kernelbench_export import export_run, static_notes
    from accelopt.tools.task import TaskError

    try:
        export = export_run(run_dir, out, sample_id=sample_id)
    except TaskError as e:
        fail(str(e))
    for path in export.written:
        console.print(f"solution: {path}", highlight=False)
        for note in static_notes(path.read_text()):
            console.print(f"[yellow]{path.name}: {note}[/yellow]", highlight=False)
    for run, reason in export.skipped.items():
        console.print(f"[yellow]skipped {run}: {reason}[/yellow]", highlight=False)
    runs = [run_dir] if (run_dir / "run.json").is_file() else sorted(p.parent for p in run_dir.glob("*/run.json"))
    for note in filter(None, map(_unchanged_note, runs)):
        console.print(f"[yellow]{note}[/yellow]", highlight=False)
    if not export.written:
        fail(f"nothing exported from {run_dir}")
