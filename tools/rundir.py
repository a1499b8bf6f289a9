"""The run directory: every candidate as it is evaluated, the best kernel, and summary.json.

Files are written as soon as there is something to write, so a run killed at any moment
leaves every evaluated candidate on disk.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_candidate(run_dir: str | None, candidate: dict) -> None:
    if not run_dir:
        return
    folder = Path(run_dir) / "candidates" / candidate["id"]
    if candidate.get("source"):
        _atomic_write(folder / "kernel.py", candidate["source"])
    record = {k: v for k, v in candidate.items() if k != "source"}
    _atomic_write(folder / "result.json", json.dumps(record, indent=2))


def write_summary(run_dir: str | None, summary: dict, best_source: str | None) -> None:
    if not run_dir:
        return
    _atomic_write(Path(run_dir) / "summary.json", json.dumps(summary, indent=2))
    if best_source:
        _atomic_write(Path(run_dir) / "best_kernel.py", best_source)
