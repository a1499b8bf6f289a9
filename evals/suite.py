"""`accelopt eval`: run the graph over the tasks of a suite, each in its own run directory
under one eval directory. Rerunning skips finished tasks and resumes an interrupted one from its
checkpoint. On a GPU, each run ends by timing its best kernel against torch.compile of the
reference and eager PyTorch, interleaved in the same rounds (the graph's standing node)."""

from __future__ import annotations

import json
import traceback
from pathlib import Path

from rich.console import Console

from accelopt.graph.driver import drive
from accelopt.nodes.context import RunContext
from accelopt.tools.backends import run_refusal
from accelopt.tools.harness.runner import detect_device
from accelopt.tools.run_record import load_summary
from accelopt.tools.rundir import read_run_meta, save_run_meta, write_run_meta
from accelopt.tools.task import Task, TaskError, load_task

EVALS = Path(__file__).resolve().parent
SUITES = {"triton": EVALS / "tasks", "nkibench": EVALS / "nkibench"}
# Files that mark a task as finished, one way or another.
DONE_MARKERS = ("stopped.json", "skipped.json")


def resolve_suite(name_or_path: str) -> Path:
    path = SUITES.get(name_or_path) or Path(name_or_path)
    if not path.is_dir():
        raise TaskError(f"unknown suite {name_or_path!r}: give a directory of task directories or one of "
                        f"{', '.join(SUITES)}")
    return path


def suite_tasks(suite: Path, only: list[str] | None = None) -> list[Path]:
    tasks = sorted(p for p in suite.iterdir() if (p / "task.json").is_file())
    if not tasks:
        raise TaskError(f"{suite} holds no task directories (subdirectories with a task.json)")
    if only:
        by_name = {_task_name(p): p for p in tasks} | {p.name: p for p in tasks}
        missing = [n for n in only if n not in by_name]
        if missing:
            raise TaskError(f"no task named {', '.join(missing)} in {suite}; it has: "
                            f"{', '.join(sorted(p.name for p in tasks))}")
        tasks = list(dict.fromkeys(by_name[n] for n in only))
    return tasks


def _task_name(task_dir: Path) -> str:
    """The name in task.json, or the folder's where the task cannot be loaded (it fails when run)."""
    try:
        return load_task(task_dir).name
    except TaskError:
        return task_dir.name


def is_finished(run_dir: Path) -> bool:
    if any((run_dir / m).is_file() for m in DONE_MARKERS):
        return True
    summary = load_summary(run_dir)
    return summary is not None and summary.stop_reason is not None


def extends(run_dir: Path, ctx: RunContext) -> bool:
    """A task that finished by reaching its T, rerun with a larger T: it goes on from its last beam
    (graph/driver reopens it) instead of being skipped as finished."""
    summary = load_summary(run_dir)
    if any((run_dir / m).is_file() for m in DONE_MARKERS) or summary is None \
            or not (run_dir / "checkpoints.sqlite").is_file():
        return False
    return (summary.stop_reason or "").startswith("reached T=") and summary.iteration < ctx.iterations


def run_suite(suite: Path, out: Path, ctx: RunContext, tasks: list[Path], console: Console) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "suite.json").write_text(json.dumps(
        {"suite": str(suite.resolve()), "tasks": [p.name for p in tasks], "context": ctx.to_json()}, indent=2))
    for number, task_dir in enumerate(tasks, 1):
        run_dir = out / task_dir.name
        try:
            task, problem = load_task(task_dir), None
        except TaskError as e:  # a malformed task fails alone, with its one line; the suite goes on
            task, problem = None, str(e)
        head = f"[{number}/{len(tasks)}] {task.name if task else task_dir.name}"
        extend = extends(run_dir, ctx)
        if is_finished(run_dir) and not extend:
            console.print(f"{head}: finished earlier, skipped")
            continue
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "error.txt").unlink(missing_ok=True)  # a task that failed before is tried again
        if task is None:
            _failed(run_dir, head, problem or "", console)
            continue
        refusal = run_refusal(task, ctx.device) or _gpu_only_here(task, ctx.device)
        if refusal:
            _mark(run_dir, "skipped.json", refusal)
            console.print(f"{head}: skipped ({refusal})")
            continue
        resuming = (run_dir / "checkpoints.sqlite").is_file() and (run_dir / "run.json").is_file()
        doing = f"extending to T={ctx.iterations}" if extend else "resuming" if resuming else "optimizing"
        console.print(f"{head}: {doing}")
        if not resuming:
            write_run_meta(run_dir, task.root, ctx.to_json(), ctx.sources())
        elif extend:  # run.json's T, as `accelopt resume -T` keeps it
            meta = read_run_meta(run_dir)
            save_run_meta(run_dir, {**meta, "context": {**meta["context"], "iterations": ctx.iterations}})
        try:
            state = drive(ctx, run_dir, None if resuming else {"task_dir": task.root,
                                                               "run_dir": str(run_dir.resolve())}, console)
        except Exception as exc:  # noqa: BLE001 - one broken task must not stop the suite
            (run_dir / "error.txt").write_text(traceback.format_exc())
            console.print(f"{head}: failed ({type(exc).__name__}: {exc}); see {run_dir / 'error.txt'}")
            continue
        baseline = (state.get("candidates") or {}).get("baseline") or {}
        if baseline.get("status") == "reference_error":  # the task is broken, not the search
            _failed(run_dir, head, baseline.get("error") or "the task's reference failed", console)
            continue
        if not state.get("beam"):  # setup stopped it (a broken baseline): the suite's exit says so
            reason = state.get("stop_reason") or "no verified kernel"
            _mark(run_dir, "stopped.json", reason)
            console.print(f"{head}: stopped at setup ({' '.join(reason.split())})", markup=False, highlight=False,
                          soft_wrap=True)
            continue


def _gpu_only_here(task: Task, device: str) -> str | None:
    """Why a GPU-only task cannot run on this device (the interpreter), or None."""
    try:
        task.spec.workloads_for(detect_device() if device == "auto" else device)
    except TaskError as e:
        return str(e)
    return None


def _failed(run_dir: Path, head: str, reason: str, console: Console) -> None:
    """error.txt's last line is the report's note: one line, the reason."""
    line = " ".join(reason.split())
    (run_dir / "error.txt").write_text(line + "\n")
    console.print(f"{head}: failed ({line})", markup=False, highlight=False, soft_wrap=True)


def _mark(run_dir: Path, name: str, reason: str) -> None:
    (run_dir / name).write_text(json.dumps({"reason": reason}, indent=2))
