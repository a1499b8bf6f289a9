"""Helpers the nodes share: the task and prompt rendering."""

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
    """The backend's rules and API pitfalls for the roles that write kernels (executor, fixer)
    and its notes on fast kernels for all three: nodes/prompts/rules_<backend>.txt,
    pitfalls_<backend>.txt and notes_<backend>.txt (the optional ones may be missing)."""
    backend = task.spec.backend
    return {"rules": _template(f"rules_{backend}").substitute(entry_point=task.spec.entry_point),
            "backend_notes": _optional(f"notes_{backend}"), "pitfalls": _optional(f"pitfalls_{backend}")}


def _optional(name: str) -> str:
    path = PROMPTS / f"{name}.txt"
    return path.read_text() if path.is_file() else ""


def workloads_text(task: Task) -> str:
    """The sizes and dtype a kernel is timed on: a kernel is tuned for shapes it can see."""
    sizes = "; ".join(f"{w.name} ({', '.join(f'{k}={v}' for k, v in w.params.items())})"
                      for w in task.spec.workloads)
    return (f"\nTimed on these workloads, with {task.spec.dtype} data (the reference's `make_inputs` builds "
            f"the inputs from the sizes): {sizes}.")
