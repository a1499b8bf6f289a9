"""Per-run caches that make a killed run resume without losing or repeating work.

LangGraph's checkpoint keeps what finished before a crash, but a branch cut off mid-way runs
again from its start on resume. Two caches in the run directory make that re-run free and
exact:
- `cache/evals/<hash>.json`: a harness result, keyed by a hash of the source, the task (spec,
  reference, shapes), the kernels it was timed against and the device. An evaluated candidate
  is never measured twice, and a resumed branch gets the very measurement it had.
- `cache/llm/<hash>.json`: a model reply and its usage record, keyed by the model, the messages
  and the candidate id (so K samples of one plan stay K distinct calls). A resumed branch gets
  the same reply, so it rebuilds the same kernel, and its tokens are counted once.
- `cache/programs/<hash>`: which candidate first evaluated a program (its source up to comments
  and layout), so that no program is evaluated twice in a run, across parallel branches and resumes.
- `cache/quorum/i<iteration>/<attempt id>`: the kernel replies of an iteration that landed
  (--quorum), so that a resumed iteration counts those of the branches that finished before the kill.
Every real harness evaluation is also appended to `evaluations.jsonl`, an audit log that says
what was measured and when.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import threading
import time
from pathlib import Path
from typing import Any

from accelopt.tools import settings

HARNESS_VERSION = "2"  # bump when measurements change meaning: old cache entries stop matching
# (2: GPU calls bracketed by marker kernels, not split at the longest fills)


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:32]


def device_fingerprint(requested: str) -> dict:
    """What decides which device a run measures on, known without touching CUDA here."""
    return {"requested": requested, "host": platform.node(),
            "visible": settings.cuda_visible_devices(), "harness": HARNESS_VERSION,
            # the NKI backend's chip (its % of peak) and cores come from the environment
            "trainium": settings.as_given(settings.TRAINIUM), "neuron_cores": settings.as_given(settings.NEURON_CORES)}


class RunCache:
    def __init__(self, run_dir: str | Path | None):
        self.root = Path(run_dir) / "cache" if run_dir else None

    def get(self, kind: str, key: str) -> dict | None:
        if self.root is None:
            return None
        path = self.root / kind / f"{key}.json"
        try:
            return json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):  # absent, or torn by a kill: measure again
            return None

    def put(self, kind: str, key: str, value: dict) -> None:
        if self.root is None:
            return
        path = self.root / kind / f"{key}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        # one temporary file per writer: the graph's threads may put the same key at once (two
        # samples that wrote the same kernel), and a shared name loses one rename
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(value))
        os.replace(tmp, path)  # atomic: a kill leaves the old file or the new one, never half

    def claim(self, kind: str, key: str, owner: str) -> str:
        """The first owner ever recorded for `key`: `owner` when this call is the first (or when the
        run has no directory), else whoever claimed it before, in this process or an earlier one.
        Exclusive creation, so two threads or processes claiming at once get one answer."""
        if self.root is None:
            return owner
        path = self.root / kind / key
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            for _ in range(100):  # the claimant may be between creating the file and writing its name
                first = path.read_text().strip()
                if first:
                    return first
                time.sleep(0.01)
            return path.read_text().strip() or owner  # torn by a kill between create and write
        with os.fdopen(fd, "w") as f:
            f.write(owner)
        return owner

    def keys(self, kind: str) -> list[str]:
        """The keys `claim` recorded under `kind` (none without a run directory)."""
        if self.root is None or not (self.root / kind).is_dir():
            return []
        return sorted(p.name for p in (self.root / kind).iterdir() if p.is_file())

    def log_evaluation(self, key: str, record: dict) -> None:
        if self.root is None:
            return
        with (self.root.parent / "evaluations.jsonl").open("a") as f:
            f.write(json.dumps({"key": key, "time": time.time(), **record}) + "\n")
