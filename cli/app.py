"""The accelopt command line: `accelopt optimize TASK_DIR`, `accelopt resume RUN_DIR`.

This module and the command modules it registers import typer, rich and light constants only:
`accelopt --help` must answer at once. LangGraph, LangChain, openai, torch and Chroma are
imported inside the commands, after their arguments are checked (tests/unit/test_cli_startup.py).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Annotated as Opt  # an import alias: mypy takes `Opt = Annotated` for a variable

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.table import Table

from accelopt.cli import options as o
from accelopt.cli.check import check
from accelopt.cli.evaluate import eval_suite, export_app, import_app, report
from accelopt.cli.help_layout import fit_help_to_terminal
from accelopt.cli.interrupt import continue_hint_on_interrupt, resume_command
from accelopt.cli.memory import app as memory_app
from accelopt.cli.memory import fail
from accelopt.cli.seed import seed
from accelopt.cli.show import runs, show
from accelopt.memory.embedder import MemoryStoreError

if TYPE_CHECKING:
    from accelopt.nodes.context import RunContext
    from accelopt.tools.run_record import NotMeasured, TorchCompileStanding
    from accelopt.tools.task import Task

fit_help_to_terminal()  # --help at the terminal's width: names whole, text wrapped at words (cli/help_layout.py)
app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False,
                  help="accelopt: a self-improving, LLM-driven kernel optimizer.")
app.add_typer(memory_app, name="memory")
app.add_typer(import_app, name="import")
app.add_typer(export_app, name="export")
app.command("eval")(eval_suite)
app.command("report")(report)
app.command("check")(check)
app.command("seed")(seed)
app.command("show")(show)
app.command("runs")(runs)
console = Console()


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"accelopt {version('accelopt')}")
        except PackageNotFoundError:
            typer.echo("accelopt (not installed: a plain checkout)")
        raise typer.Exit()


@app.callback()
def _main(version: Opt[bool, typer.Option("--version", is_eager=True, callback=_version,
                                          help="Print accelopt's version and exit")] = False) -> None:
    """accelopt: a self-improving, LLM-driven kernel optimizer."""


@app.command()
def optimize(
    task_dir: Opt[Path, typer.Argument(help="Task directory (task.json, reference.py, baseline.py)")],
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
    run_dir: Opt[Path | None, typer.Option(help="Where to write the run (default: runs/TASK-TIME)")] = None,
    device: o.Device = None,
    memory: o.Memory = None,
    memory_url: o.MemoryUrl = None,
    embedder: o.Embedder = None,
    no_memory: o.NoMemory = False,
    learn_from_interpreter: o.LearnFromInterpreter = False,
    create_memory: o.CreateMemory = False,
    max_tokens: o.MaxTokens = None,
    max_cost: o.MaxCost = None,
    max_wall: o.MaxWall = None,
    eval_timeout: o.EvalTimeout = None,
    cluster: o.Cluster = None,
    ray_address: o.RayAddress = None,
    seed: o.Seed = None,
    seed_mode: o.SeedMode = None,
    compile_mode: o.CompileMode = None,
    seed_capture: o.SeedCapture = None,
    schedule: o.Schedule = None,
    quorum: o.Quorum = None,
    review_plans: Opt[bool, typer.Option("--review-plans", help="Pause after each iteration's planners and "
                                                               "choose which plans run")] = False,
) -> None:
    """Optimize the kernel of TASK_DIR and write a run directory."""
    from accelopt.graph.config import load_context
    from accelopt.tools.llm_spec import ConfigError
    from accelopt.tools.task import TaskError, load_task

    try:
        task = load_task(task_dir)
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
            seed_mode=seed_mode, torch_compile_mode=compile_mode,
            seed_capture=str(seed_capture.resolve()) if seed_capture else None,
            review_plans=True if review_plans else None))
    except (TaskError, ConfigError) as e:
        fail(str(e))
    _refuse_what_cannot_run(task, ctx, seed_capture)
    _ready_models_and_memory(ctx, configured, create_memory)
    run_dir = _claimed_run_dir(task, ctx, run_dir)
    _drive(ctx, run_dir, {"task_dir": task.root, "run_dir": str(run_dir.resolve())})


def _refuse_what_cannot_run(task: Task, ctx: RunContext, seed_capture: Path | None) -> None:
    """Before any setup, one line for a run that could not start: a missing --seed-capture file,
    nothing to start from, a device or cluster not there, a backend this machine lacks."""
    from accelopt.nodes.seeding import nothing_to_start_from
    from accelopt.tools.backends import run_refusal

    if seed_capture is not None and not seed_capture.is_file():
        fail(f"--seed-capture {seed_capture}: no such file")
    refusal = nothing_to_start_from(task, ctx)  # before any setup (setup says the same to graph.invoke)
    if refusal:
        fail(refusal)
    refusal = o.cluster_refusal(ctx.ray_address) if ctx.ray_address else o.device_refusal(ctx.device)
    if refusal:
        fail(refusal)
    refusal = run_refusal(task, ctx.device)
    if refusal:
        fail(f"task {task.name} needs the {task.spec.backend} backend. {refusal}")


def _ready_models_and_memory(ctx: RunContext, configured: bool, create_memory: bool) -> None:
    """Which policy runs (no endpoint: the local tuner), the endpoints checked, then the memory
    store: after the preflight, since loading its embedding model takes seconds and a refusal none."""
    if not configured:
        console.print("No LLM endpoint configured: using the local tuner policy (no LLM). "
                      "Set --model or ACCELOPT_MODEL to use one.")
    _preflight(ctx)  # before the memory: loading its embedding model takes seconds, a refusal none
    if not ctx.use_memory:
        console.print("Memory disabled (--no-memory): no insights are recalled or stored.")
    else:
        _check_memory(ctx, create_memory, "pass an existing store, add --create-memory to start one there, or run "
                                          "with --no-memory")


def _claimed_run_dir(task: Task, ctx: RunContext, run_dir: Path | None) -> Path:
    """The run's directory (default: runs/TASK-TIME), claimed for this run alone, with its run.json."""
    from accelopt.tools.rundir import RunDirError, claim_new_run_dir, default_run_dir, write_run_meta

    run_dir = run_dir or default_run_dir(task.name)
    try:
        claim_new_run_dir(run_dir, task.root)
    except RunDirError as e:
        fail(str(e))
    write_run_meta(run_dir, task.root, ctx.to_json(), ctx.sources())
    return run_dir


def _drive(ctx: RunContext, run_dir: Path, inputs: dict | None) -> None:
    """Run or resume the graph, then show what it did; Ctrl-C says how to continue."""
    from accelopt.graph.driver import drive

    with continue_hint_on_interrupt(resume_command(run_dir), console):
        state = drive(ctx, run_dir, inputs, console, on_plans=_ask_plans if ctx.review_plans else None)
    _report(state, run_dir, ctx.use_memory, tuner=_tuner_only(ctx))


def _tuner_only(ctx: RunContext) -> bool:
    """Whether no role used a model: the run was the no-LLM tuner's."""
    from accelopt.tools.llm_spec import ROLES

    return all(ctx.model_spec(role).provider == "tuner" for role in ROLES)


def _ask_plans(plans: list[dict]) -> list[dict]:
    """--review-plans: show the iteration's plans; Enter runs them all, ids drop some, 'skip' none."""
    table = Table(title="plans proposed for this iteration")
    for column in ("id", "from", "plan"):
        table.add_column(column)
    for plan in plans:
        table.add_row(plan["id"], plan.get("parent_id", ""), plan.get("title") or plan.get("text", "")[:100])
    console.print(table)
    answer = typer.prompt("Enter to run all, plan ids to drop (comma-separated), or 'skip'", default="",
                          show_default=False).strip()
    if answer.lower() == "skip":
        return []
    drop = {a.strip() for a in answer.split(",") if a.strip()}
    unknown = drop - {p["id"] for p in plans}
    if unknown:
        console.print(f"no plan named {', '.join(sorted(unknown))}; running them all")
        return plans
    return [p for p in plans if p["id"] not in drop]


def _preflight(ctx: RunContext) -> None:
    """A dead endpoint, a wrong key or an unknown model: one line before any work is done."""
    from accelopt.graph.config import budget_warnings
    from accelopt.nodes.preflight import preflight_context
    from accelopt.tools.llm_spec import ConfigError, FatalLLMError

    unpriced = budget_warnings(ctx)  # a $ budget that cannot see a role's spend is no budget
    if unpriced:
        fail(f"{unpriced[0]}, or run without --max-cost")
    try:
        preflight_context(ctx)
    except (FatalLLMError, ConfigError) as e:
        fail(str(e))


def _check_memory(ctx: RunContext, create: bool, missing_advice: str) -> None:
    """Fail before any tokens are spent, with the fix in the message: a --memory directory that
    does not exist (unless `create`), or a store that cannot be opened or lost its database."""
    try:
        if ctx.memory_dir and not ctx.memory_url and not create:
            from accelopt.memory.store import require_store_dir

            require_store_dir(ctx.memory_dir, missing_advice)
        from accelopt.nodes.services import open_store

        open_store(ctx)
    except MemoryStoreError as e:
        fail(str(e))


@app.command()
def resume(run_dir: Opt[Path, typer.Argument(help="A run directory written by `accelopt optimize`")],
           iterations: Opt[int | None, typer.Option("--iterations", "-T", callback=o.checked, help=(
               "Run until iteration T, 1 or more: more than the run had continues a finished search from its "
               "last beam"))] = None,
           task: Opt[Path | None, typer.Option("--task", help="Where the run's task directory is now, if it "
                                                  "moved (it must hold the same task files)")] = None,
           create_memory: Opt[bool, typer.Option("--create-memory", help="Continue with a new, empty insight "
                                                 "store if the run's memory directory is gone")] = False,
           restart: Opt[bool, typer.Option(help="Start the search over in this directory (after a corrupt "
                                                "checkpoint); cached evaluations and replies are replayed")] = False,
           ) -> None:
    """Continue a run from its last checkpoint; evaluated candidates are kept."""
    from accelopt.nodes.context import RunContext
    from accelopt.tools.rundir import (
        RunDirError,
        check_checkpoint,
        lock_run_dir,
        read_run_meta,
        resume_task_dir,
        save_run_meta,
    )

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
    from accelopt.nodes.context import settings_refusal

    refusal = settings_refusal(ctx)  # what setup would refuse, before any work (a hand-edited run.json)
    if refusal:
        fail(f"cannot resume {run_dir}: {refusal}")
    refusal = o.cluster_refusal(ctx.ray_address) if ctx.ray_address else o.device_refusal(ctx.device)
    if refusal:
        fail(f"cannot resume {run_dir} here: {refusal}")
    _preflight(ctx)  # before the memory, as for optimize
    if ctx.use_memory:
        _check_memory(ctx, create_memory, "the memory directory recorded in run.json is gone; restore it, or "
                                          "resume with --create-memory to go on with an empty store there")
    if restart:  # every check passed: only now is the old checkpoint set aside
        checkpoint = run_dir / "checkpoints.sqlite"
        if checkpoint.exists():
            checkpoint.rename(checkpoint.with_name(f"checkpoints.sqlite.old-{time.strftime('%Y%m%d-%H%M%S')}"))
    # the drive reads the task and T from here; a later plain `resume` keeps them
    save_run_meta(run_dir, {**meta, "task_dir": task_dir, "context": {**meta["context"], "iterations": ctx.iterations}})
    inputs = {"task_dir": task_dir, "run_dir": str(run_dir.resolve())} if restart else None
    _drive(ctx, run_dir, inputs)


@app.command()
def doctor() -> None:
    """Which kernel backends, profilers, memory and model settings are usable here, and why not.

    Exit 1 when something a run needs is missing or broken: no kernel backend usable, the
    memory's embedder, or the model settings (the profilers and NKI alone are optional)."""
    import shutil

    from accelopt.cli.layout import fold_at_slashes
    from accelopt.graph.config import load_context
    from accelopt.tools.backends import BACKENDS, backend_for
    from accelopt.tools.llm_spec import ConfigError

    table = Table(title="accelopt doctor")
    for column in ("component", "usable", "detail"):
        table.add_column(column, overflow="fold")  # a path folds at 80 columns, never cut with an ellipsis
    # the detail's width: the rest of the screen beside the longest component, "usable", the borders
    width = max(20, console.width - len("candidate confinement") - len("usable") - 10)

    def add(component: str, usable: str, detail: str) -> None:  # a path folds between its folders
        table.add_row(component, usable, fold_at_slashes(detail, width))

    broken: list[str] = []
    backends = {name: backend_for(name).availability() for name in BACKENDS}
    for name, found in backends.items():
        add(f"backend {name}", "yes" if found.usable else "no",
                      found.detail if found.can_time else f"{found.detail} (cannot time kernels here)")
    if not any(found.usable for found in backends.values()):
        broken.append("no kernel backend is usable")
    from accelopt.tools.harness import confine

    reason = confine.refusal()
    if reason:
        add("candidate confinement", "no", confine.refusal_message(reason))
        broken.append("the candidates' confinement")
    elif confine.unconfined():
        add("candidate confinement", "OFF", f"{confine.UNCONFINED_ENV}=1: candidate kernels run unconfined")
    else:
        add("candidate confinement", "yes", f"bubblewrap namespaces + Landlock ABI {confine.landlock_abi()}: "
                      "each candidate writes only beneath its own folder")
    for tool, use in (("ncu", "GPU kernel profiles for the planner"), ("neuron-profile", "Trainium profiles")):
        path = shutil.which(tool)
        add(tool, "yes" if path else "no", f"{path}: {use}" if path else f"not on PATH ({use})")
    try:
        from accelopt.memory.embedder import model_path

        add("memory embedder", "yes", model_path("all-MiniLM-L6-v2"))
    except MemoryStoreError as e:
        add("memory embedder", "no", str(e))
        broken.append("the memory embedder (or run with --no-memory)")
    try:
        ctx, configured = load_context(None)
        add("models", "yes", ctx.model_spec("planner").label() if configured
                      else "no LLM endpoint configured: the tuner policy (no LLM)")
    except ConfigError as e:
        add("models", "no", str(e))
        broken.append("the model settings")
    else:
        if ctx.ray_address:  # [cluster] / ACCELOPT_RAY_ADDRESS: nodes, GPUs by kind, evaluation actors alive
            refusal = o.cluster_refusal(ctx.ray_address)
            if refusal:
                add("ray cluster", "no", refusal)
                broken.append("the Ray cluster")
            else:
                from accelopt.tools.harness.ray_pool import cluster_summary

                c = cluster_summary(ctx.ray_address)
                gpus = ", ".join(f"{n}x {k}" for k, n in c["gpus"].items()) or "no GPU (interpreter checks only)"
                add("ray cluster", "yes", f"{ctx.ray_address}: {len(c['nodes'])} node(s) "
                              f"({', '.join(c['nodes'])}), {c['cpus']} CPUs, {gpus}; evaluation actors alive: "
                              f"{c['actors_alive'] if c['actors_alive'] >= 0 else 'unknown (no dashboard)'}")
    console.print(table)
    if broken:
        fail(f"not ready: {'; '.join(broken)} (see the table)", code=1)


def _report(state: dict, run_dir: Path, use_memory: bool = True, tuner: bool = True) -> None:
    """The run's outcome: a two-column table that reads whole at 80 columns (keys short, values
    wrapped, a long word folded, never cut), with the paths (run dir, best kernel, report) and the
    next steps' commands on lines of their own. On the CPU interpreter nothing is called a speedup
    or the best: the ratio is named as interpreter wall time, and the kernel kept is the beam's head
    under the selector's rule there (records.leads_parent, graph/progress.interpreter_rule)."""
    from rich.table import Column
    from rich.text import Text

    from accelopt.graph.progress import interpreter_rule
    from accelopt.tools.llm_spec import totals
    from accelopt.tools.run_record import RunSummary, counts_text, run_failure, run_summary

    candidates = state.get("candidates") or {}
    if not state.get("beam"):  # setup stopped the run: no task baseline, or a broken one
        fail(state.get("stop_reason") or "the run produced no candidates", code=1)
    best = candidates[state["beam"][0]]
    spent = totals(state.get("usage", []))
    interpreter = best.get("timer") == "interpreter_wall"
    table = Table(Column(no_wrap=True), Column(overflow="fold"), show_header=False)
    table.add_row("stopped", str(state.get("stop_reason")))
    versus = ("PyTorch reference" if candidates[state["baseline_id"]].get("kind") == "reference" else "baseline")
    if interpreter:  # the interpreter decides nothing: what was measured, and the rule that ranked it
        table.add_row("beam head", f"{best['id']} (ranked by the rule below, not by speed)")
        table.add_row(f"vs {versus}", f"{best.get('speedup') or 1.0:.3f}x the {versus}'s CPU interpreter wall time "
                                      f"over this kernel's{_interval(best)}: not performance")
        table.add_row("rule", interpreter_rule().removeprefix("CPU interpreter: "))
    else:
        table.add_row("best kernel", best["id"])
        table.add_row(f"speedup vs {versus}", f"{best.get('speedup') or 1.0:.3f}x{_interval(best)}")
    if best.get("pct_peak") is not None:
        copy = (f", {best['pct_of_copy']:.1f}% of a same-size copy's speed"
                if best.get("pct_of_copy") is not None else "")
        table.add_row("% of peak", f"{best['pct_peak']:.1f}% datasheet, {best.get('pct_achievable') or 0:.1f}% "
                                   f"achievable{copy}")
    if best.get("timer") == "cuda_event":
        standing = RunSummary.model_validate(state["summary"]).versus_torch_compile if state.get("summary") else None
        table.add_row("vs torch.compile", _versus_torch_compile(standing))
    for note in state.get("notes") or []:
        table.add_row("note", note)
    if best.get("evidence"):
        table.add_row("checked", "; ".join(best["evidence"][:3]))
    summary = run_summary(state)  # counted as the live bar and MCP count (run_record.candidate_counts)
    statuses = summary.statuses
    table.add_row("candidates", counts_text(summary.candidates_evaluated, statuses) + " (baseline not counted)")
    if summary.autotune:
        tuned = summary.autotune
        table.add_row("autotune", f"{tuned.variants} configurations over {tuned.rewrites_tuned} kernels; best = "
                      f"{tuned.best_rewrite_speedup or 1.0:.3f}x rewrite x {tuned.best_autotune_gain:.3f}x autotune")
    unpriced = f" ({spent['unpriced_calls']} unpriced calls counted as $0)" if spent.get("unpriced_calls") else ""
    table.add_row("tokens / cost",
                  f"{spent['input_tokens']:,} in, {spent['output_tokens']:,} out, ${spent['cost_usd']:.4f}{unpriced}")
    lessons = len(state.get("insights", []))
    if use_memory and not lessons and interpreter:
        table.add_row("insights stored", "0: interpreter timings are noise, not lessons (--learn-from-interpreter "
                                         "stores them anyway, to check the pipeline)")
    elif use_memory:
        table.add_row("insights stored", _stored_text(state.get("insights") or []))
    else:  # distilled all the same (the run dir keeps them), but no store was written
        table.add_row("insights", f"{lessons} distilled into insights.jsonl; none stored (--no-memory)")
    console.print(Text(f"accelopt run: {run_dir}"))
    console.print(table)
    console.print(Text(f"{'beam head' if interpreter else 'best kernel'}: {run_dir / 'best_kernel.py'}"))
    if interpreter:  # an offline first run: the next steps, each command wrapped with line continuations
        # to the width (a terminal's split mid-option broke a paste), so that pasted it runs as one
        from accelopt.cli.layout import shell_command

        steps = _next_steps(state.get("task_dir", "TASK_DIR"), run_dir, tuner)
        lines = [line for label, words in steps for line in (f"  {label}:", *shell_command(words, console.width))]
        console.print(Text("\n".join(["next:", *lines])), soft_wrap=True)
    _html_report(run_dir)
    failure = run_failure(state)  # summary.json is written: the run's record stays, the exit says it failed
    if failure:
        fail(failure, code=1)


def _next_steps(task_dir: str, run_dir: Path, tuner: bool) -> list[tuple[str, list[str]]]:
    """After an offline run: the GPU, and an LLM only if the run had none (a run that used one was
    told its --model; the hint would tell it to start over with a placeholder), then the run itself;
    each a label and the command's words. Each command works pasted into the shell the run came
    from: the CLI named as it was invoked when that was by its path and PATH finds another or none
    (`make demo` runs `.venv/bin/accelopt`, the venv not activated), else `accelopt`."""
    import shutil
    import sys

    invoked = sys.argv[0] if sys.argv else ""  # as typed: `.venv/bin/accelopt`, `./accelopt`, an absolute path
    command = "accelopt"
    if "/" in invoked and Path(invoked).name == "accelopt" and Path(invoked).is_file():
        found = shutil.which("accelopt")
        if not (found and Path(found).resolve() == Path(invoked).resolve()):
            command = invoked
    task, run = str(task_dir), str(run_dir)
    if tuner:
        return [("on a GPU", [command, "optimize", task, "--device", "cuda"]),
                ("with an LLM", [command, "optimize", task, "--model", "vllm:MODEL", "--base-url", "URL"]),
                ("what it tried", [command, "show", run])]
    return [("on a GPU, with the same model settings", [command, "optimize", task, "--device", "cuda"]),
            ("what the model tried", [command, "show", run])]


def _html_report(run_dir: Path) -> None:
    """The run's report.html (plots, the best kernel's diff, provenance); a report that cannot be
    built is a warning, never a failed run."""
    from accelopt.evals.reporting.report import build_report

    try:
        page = build_report(run_dir)
    except Exception as exc:  # noqa: BLE001 - the run and its summary are already on disk
        console.print(f"report: not written ({type(exc).__name__}: {exc}); try `accelopt report {run_dir}`",
                      markup=False, highlight=False)
        return
    # one line however long: a terminal folds it, a copied path stays whole (rich would break it mid-name)
    console.print(f"report: {page}", markup=False, highlight=False, soft_wrap=True)


def _interval(best: dict) -> str:
    """The best's interval against the baseline, named for what it is; its figure comes from its own
    interleaved rounds with the baseline, so it can differ from a line printed while it was measured
    against its parent."""
    from accelopt.evals.reporting.rows import interval_text

    vs = (best.get("versus") or {}).get("baseline") or {}
    if vs.get("ci_low") is None:
        return ""
    return f" ({interval_text(vs['ci_low'], vs.get('ci_high'), vs.get('rounds'))}, interleaved with the baseline)"


def _stored_text(insights: list[dict]) -> str:
    """What the store holds after the run: a lesson close to one already stored merges into it
    (one entry, more support), so "3 distilled" can be "2 new, 1 merged"."""
    merged = sum(1 for i in insights if i.get("stored_as") not in (None, i.get("id")))
    if not merged:
        return str(len(insights))
    return f"{len(insights) - merged} new, {merged} merged into lessons already stored (more support)"


def _versus_torch_compile(cmp: TorchCompileStanding | NotMeasured | None) -> str:
    """The best kernel timed interleaved with torch.compile(reference) at the run's end (the
    standing node: summary.json versus_torch_compile, torch_compile.json)."""
    from accelopt.tools.run_record import TorchCompileStanding

    if not isinstance(cmp, TorchCompileStanding):  # none yet, or why there is none
        return f"not measured: {cmp.not_measured if cmp else 'the run ended before its standing was measured'}"
    eager = f"; {cmp.eager:.3f}x vs eager PyTorch" if cmp.eager else ""
    return (f"{cmp.speedup:.3f}x [{cmp.ci_low:.3f}, {cmp.ci_high:.3f}] over {cmp.rounds} rounds "
            f"(mode {cmp.mode}): {cmp.verdict}{eager}")


def usage_error(error: typer.TyperException) -> str:
    """A usage error of any command (an unknown option, a value that is not a number or not one of
    the choices, a missing argument) as one line: click's own words, and where to read the usage."""
    message = " ".join(error.format_message().replace("Value error, ", "").split())  # typer's pydantic prefix
    message = message[:1].lower() + message[1:]
    ctx = getattr(error, "ctx", None)
    return f"{message} (see: {ctx.command_path} --help)" if ctx is not None else message


def main() -> None:
    """The `accelopt` command. Every usage error is one `error:` line on stderr and exit 2, as the
    commands' own refusals are (cli/memory.fail), not click's usage box."""
    import sys

    # accelopt's own log lines (retries, a placeholder key, unpriced or usage-less models) beside the progress bar
    log = logging.getLogger("accelopt")
    log.setLevel(logging.INFO)
    log.addHandler(RichHandler(console=console, show_time=False, show_path=False))
    log.propagate = False
    try:
        code = app(standalone_mode=False)  # click's errors (typer's copy of click) come here, not to its box
    except typer.TyperException as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # `accelopt` or a group alone: its help, as typer printed it
            code = 2
        else:
            try:
                fail(usage_error(e), code=e.exit_code)
            except typer.Exit as exit_:
                code = exit_.exit_code
    except typer.Abort:  # Ctrl-D at a prompt
        typer.echo("Aborted!", err=True)
        code = 1
    sys.exit(code if isinstance(code, int) else 0)
