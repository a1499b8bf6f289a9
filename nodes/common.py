"""Helpers the nodes share: the run's task, loaded once per content."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from accelopt.tools.task import Task, load_task


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

