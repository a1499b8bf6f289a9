"""Helpers the nodes share: the task, and prompt rendering."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from string import Template

from accelopt.tools.task import Task, load_task

PROMPTS = Path(__file__).with_name("prompts")


def task_of(task_dir: str) -> Task:
    """The run's task, loaded and validated once per content: keyed by the folder and its task
    files' sizes and modification times, so an edited task is read again."""
    root = Path(task_dir).resolve()
    stamp = tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns)
                  for f in (root / n for n in ("task.json", "reference.py", "baseline.py")) if f.is_file())
    return _load(str(root), stamp)


@lru_cache(maxsize=16)
def _load(root: str, stamp: tuple) -> Task:
    return load_task(root)


@lru_cache(maxsize=None)
def _template(name: str) -> Template:
    return Template((PROMPTS / f"{name}.txt").read_text())


def render(name: str, **values) -> str:
    # $-templates, because kernel sources are full of braces.
    return _template(name).substitute(**values)


def backend_parts(task: Task) -> dict[str, str]:
    """The backend's rules for a kernel (executor, fixer) and its hardware notes (all three roles)."""
    backend = task.spec.backend
    notes = PROMPTS / f"notes_{backend}.txt"
    return {"rules": _template(f"rules_{backend}").substitute(entry_point=task.spec.entry_point),
            "backend_notes": notes.read_text() if notes.is_file() else ""}
