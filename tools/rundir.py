"""The run directory: run.json, its lock, and every candidate as it is evaluated (summary.json and
the best kernel: tools/run_record.py).

Files are written as soon as there is something to write, so a run killed at any moment
leaves every evaluated candidate on disk.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from accelopt.tools import settings

RUN_FORMAT = 1  # run.json "format": bump when a run directory can no longer be resumed by older code
TASK_FILES = ("task.json", "reference.py", "baseline.py")  # what a run's measurements depend on
LOCK_FILE = ".lock"
RUN_MARKERS = ("run.json", "skipped.json", "stopped.json", "error.txt")  # a run dir holds one of these

_held: dict[str, int] = {}  # resolved run dir -> descriptor of its lock, held until this process exits


class RunDirError(ValueError):
    """A run directory that cannot be resumed as it is; the message says what to do."""


def write_run_meta(run_dir: Path, task_dir: str, context: dict, sources: dict[str, str] | None = None) -> None:
    """run.json of a new run: its task (folder and content fingerprint), its context and where each
    setting came from (`sources`: default, a config file, $ACCELOPT_..., flag or context), the
    checkpoint thread, named once here so that a copied or moved run directory still finds it, and
    its provenance (when it started, and the software it ran with: what the report shows)."""
    save_run_meta(run_dir, {"format": RUN_FORMAT, "task_dir": str(task_dir), "task": task_fingerprint(task_dir),
                            "thread_id": Path(run_dir).resolve().name, "context": context,
                            **({"sources": sources} if sources else {}),
                            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "environment": environment()})


def environment() -> dict:
    """accelopt, torch and Triton versions (package metadata: nothing is imported), Python, and the
    git commit of the source checkout when accelopt runs from one (None where unknown)."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    return {"accelopt": installed("accelopt"), "torch": installed("torch"), "triton": installed("triton"),
            "python": platform.python_version(), **_git_commit(Path(__file__).resolve().parents[1])}


def _git_commit(root: Path) -> dict:
    """The checkout's HEAD and whether tracked files differ from it; {} outside a git checkout."""
    import subprocess

    if not (root / ".git").exists():
        return {}
    try:
        def git(*args: str) -> str:
            return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=5,
                                  check=True).stdout.strip()

        return {"git_commit": git("rev-parse", "HEAD"),
                "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.SubprocessError):
        return {}


def save_run_meta(run_dir: Path, meta: dict) -> None:
    atomic_write(Path(run_dir) / "run.json", json.dumps(meta, indent=2))


def read_run_meta(run_dir: Path) -> dict:
    path = Path(run_dir) / "run.json"
    if not path.is_file():
        raise RunDirError(f"{run_dir} is not an accelopt run directory (no run.json)")
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RunDirError(f"{path} is unreadable ({e}); the evaluated kernels are still in {run_dir}/candidates; "
                          "start a new run with `accelopt optimize TASK`") from None
    if meta.get("format", 1) != RUN_FORMAT:
        raise RunDirError(f"{run_dir} was written by an incompatible accelopt (run format {meta.get('format')}, this "
                          f"version reads {RUN_FORMAT}): its candidates/ and best_kernel.py can still be read; start a "
                          "new run with `accelopt optimize TASK`")
    return meta


def task_fingerprint(task_dir: str | Path) -> dict:
    """The task's name and the sha256 of each task file (None: absent)."""
    root = Path(task_dir)
    files = {n: hashlib.sha256((root / n).read_bytes()).hexdigest() if (root / n).is_file() else None
             for n in TASK_FILES}
    return {"name": _task_name(root), "files": files}


def _task_name(root: Path) -> str:
    try:
        return str(json.loads((root / "task.json").read_text()).get("name") or root.name)
    except (OSError, ValueError, AttributeError):
        return root.name


def changed_task_files(recorded: dict, task_dir: str | Path) -> list[str]:
    """The task files whose content differs from the fingerprint recorded in run.json."""
    now = task_fingerprint(task_dir)["files"]
    return [n for n in TASK_FILES if recorded.get("files", {}).get(n) != now[n]]


RUNS_DIR_ENV = settings.RUNS_DIR  # where runs given no run directory go (default: ./runs)


def default_run_dir(task_name: str) -> Path:
    """runs/TASK-YYYYmmdd-HHMMSS: the run directory of a run that names none (`accelopt optimize`
    without --run-dir; a graph run from Studio or `graph.invoke` without run_dir), under
    $ACCELOPT_RUNS_DIR if set, else ./runs."""
    return settings.runs_dir() / f"{task_name}-{time.strftime('%Y%m%d-%H%M%S')}"


def new_default_run_dir(task_name: str) -> Path:
    """A default run directory created for this run alone (absolute): a second run of the task
    within the same second gets TASK-TIME-2, and so on."""
    base = default_run_dir(task_name).resolve()
    base.parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        path = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise RunDirError(f"cannot create a run directory beside {base}: 999 of its name exist")


def claim_new_run_dir(run_dir: Path, task_dir: str | Path) -> None:
    """Create and lock the directory of a new run. `optimize` starts only in a new or empty one:
    reusing a run's would mix two searches in one checkpoint thread and overwrite the first's files."""
    run_dir = Path(run_dir)
    if not (run_dir / "run.json").is_file() and run_dir.is_dir() and any(
            p.name != LOCK_FILE for p in run_dir.iterdir()):
        raise RunDirError(f"{run_dir} is not empty and holds no accelopt run: pick a new or empty --run-dir")
    run_dir.mkdir(parents=True, exist_ok=True)
    lock_run_dir(run_dir)  # a live run in it says so before anything else
    if not (run_dir / "run.json").is_file():
        return
    try:
        meta = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        meta = {}
    recorded = meta.get("task") or {}
    theirs = recorded.get("name") or Path(meta.get("task_dir") or "?").name
    if recorded and recorded.get("name") != task_fingerprint(task_dir)["name"]:
        raise RunDirError(f"{run_dir} holds a run of another task ({theirs}, from {meta.get('task_dir')}): "
                          "pick another --run-dir")
    changed = changed_task_files(recorded, task_dir) if recorded else []
    if changed:
        raise RunDirError(f"{run_dir} holds a run of {theirs} made with other task files ({', '.join(changed)} "
                          "differ): pick another --run-dir")
    raise RunDirError(f"{run_dir} already holds a run of {theirs}: continue it with `accelopt resume {run_dir}` "
                      "(-T N for more iterations), or pick another --run-dir")


def resume_task_dir(run_dir: Path, meta: dict, moved_to: Path | None = None) -> str:
    """The task folder a resumed run reads: run.json's, or `--task`'s where it moved. Either must
    hold the files the run started with: a changed task would make its measurements incomparable."""
    task_dir = str(moved_to.resolve()) if moved_to else str(meta.get("task_dir"))
    if not Path(task_dir).is_dir():
        if moved_to:
            raise RunDirError(f"--task {moved_to} is not a directory")
        raise RunDirError(f"the task directory {task_dir} recorded in {Path(run_dir) / 'run.json'} is gone; "
                          "pass --task NEW_DIR (where the task is now)")
    changed = changed_task_files(meta["task"], task_dir) if meta.get("task") else []
    if changed and moved_to:
        raise RunDirError(f"{moved_to} is not the task this run optimized ({meta['task'].get('name')}): its "
                          f"{', '.join(changed)} differ from the run's")
    if changed:
        raise RunDirError(f"the task at {task_dir} changed since this run started ({', '.join(changed)} differ): the "
                          "run's measurements would not compare with new ones; restore the files, or start a new run "
                          f"with `accelopt optimize {task_dir}`")
    return task_dir


def lock_run_dir(run_dir: Path) -> None:
    """One live process per run directory: an exclusive flock on D/.lock, held until this process
    exits. The OS drops it however the process ends, so a killed run leaves no stale lock; the file
    names the holder for the message."""
    key = str(Path(run_dir).resolve())
    if key in _held:
        return
    _held[key] = _locked(run_dir, "started", "; wait for it or stop it")


def _locked(run_dir: Path, doing: str, advice: str) -> int:
    """The descriptor of D/.lock, flocked exclusively and naming this process and what it is
    `doing`; RunDirError naming the holder, then `advice` (its punctuation too), where another process holds it. The
    descriptor is not inherited by the processes this one starts (judges)."""
    fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another accelopt process"
        os.close(fd)
        raise RunDirError(f"{run_dir} is in use by {holder}{advice}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"accelopt pid {os.getpid()} ({doing} {time.strftime('%Y-%m-%d %H:%M:%S')})\n".encode(), 0)
    return fd


def lock_holder(run_dir: Path) -> str | None:
    """Who holds the run directory's lock: the holder's line from .lock, or None when no live
    process does (the OS drops the lock however its process ended)."""
    path = run_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return os.pread(fd, 200, 0).decode(errors="replace").strip() or "another accelopt process"
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


@contextmanager
def run_dir_held(run_dir: Path, doing: str) -> Iterator[None]:
    """The run directory's lock for the length of one change to a run that has ended (`doing`, in
    words for the refusal): refused with RunDirError while a run or another change holds it. A
    process that holds it for its own run (lock_run_dir) goes on under that lock."""
    if str(Path(run_dir).resolve()) in _held:
        yield
        return
    fd = _locked(run_dir, f"{doing}, started", f": {doing} once it has ended")
    try:
        yield
    finally:
        os.close(fd)  # drops the lock


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and any((path / m).is_file() for m in RUN_MARKERS)


def read_candidates(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Every candidate written to a run directory (write_candidate): candidates/ID/result.json,
    with its kernel.py as `source` (None where it has none). A file that does not read as a record
    is left out."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted((Path(run_dir) / "candidates").glob("*/result.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict):
            kernel = path.parent / "kernel.py"
            record.setdefault("source", kernel.read_text() if kernel.is_file() else None)
            out[path.parent.name] = record
    return out


def check_checkpoint(run_dir: Path) -> None:
    """Fail with advice if checkpoints.sqlite is missing or not a readable LangGraph checkpoint."""
    import sqlite3
    from contextlib import closing

    path = Path(run_dir) / "checkpoints.sqlite"
    advice = (f"resume from scratch with `accelopt resume {run_dir} --restart`: the search starts over, and every "
              "kernel and model reply recorded in the run's cache is replayed, not measured or paid for again")
    if not path.is_file():
        raise RunDirError(f"{run_dir} has no checkpoints.sqlite; {advice}")
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            if conn.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                raise sqlite3.DatabaseError("integrity check failed")
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "checkpoints" not in tables or conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0] == 0:
                raise sqlite3.DatabaseError("it holds no checkpoint")
    except sqlite3.DatabaseError as e:
        raise RunDirError(f"{path} is corrupt or empty ({e}); {advice}") from None


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_candidate(run_dir: str | None, candidate: Mapping[str, Any]) -> None:
    if not run_dir:
        return
    folder = Path(run_dir) / "candidates" / candidate["id"]
    if candidate.get("source"):
        atomic_write(folder / "kernel.py", candidate["source"])
    record = {k: v for k, v in candidate.items() if k != "source"}
    atomic_write(folder / "result.json", json.dumps(record, indent=2))


PLANS_FILE = "plans.jsonl"


def append_plans(run_dir: str | None, plans: list) -> None:
    """plans.jsonl: every iteration's plans as they ran (a reviewed plan's edited text), one per
    line; a plan recorded again (a resumed iteration) is read as its last line."""
    if not run_dir or not plans:
        return
    with (Path(run_dir) / PLANS_FILE).open("a") as f:
        for plan in plans:
            f.write(json.dumps(plan) + "\n")


def read_plans(run_dir: str | Path) -> dict[str, dict]:
    """plans.jsonl by plan id (the last line of an id wins); {} where the run has none (older runs:
    their plans are in their checkpoints). A line torn by a kill is skipped."""
    path = Path(run_dir) / PLANS_FILE
    found: dict[str, dict] = {}
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            plan = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(plan, dict) and isinstance(plan.get("id"), str):
            found[plan["id"]] = plan
    return found


def append_insights(run_dir: str | None, insights: list) -> None:
    """insights.jsonl: every lesson this run wrote, in `accelopt memory import` format, so that a
    run made with --no-memory can still teach a memory later."""
    if not run_dir or not insights:
        return
    path = Path(run_dir) / "insights.jsonl"
    with path.open("a") as f:
        for insight in insights:
            f.write(insight.model_dump_json() + "\n")
