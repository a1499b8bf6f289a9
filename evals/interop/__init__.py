"""Importers and exporters for the formats users already have: FlashInfer-Bench and KernelBench."""

import json
from pathlib import Path

from accelopt.tools.task import TaskError


def read_summary(run_dir: Path) -> dict:
    """summary.json of a run that has finished at least one iteration (what both exporters need)."""
    path = Path(run_dir) / "summary.json"
    if not path.is_file():
        raise TaskError(f"{run_dir} has no summary.json: the run has not finished an iteration")
    return json.loads(path.read_text())
