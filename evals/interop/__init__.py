"""Importers and exporters for the formats users already have: FlashInfer-Bench and KernelBench."""

from pathlib import Path

from accelopt.tools.run_record import RunSummary, load_summary
from accelopt.tools.task import TaskError


def read_summary(run_dir: Path) -> RunSummary:
    """summary.json of a run that has finished at least one iteration (what both exporters need)."""
    summary = load_summary(run_dir)
    if summary is None:
        raise TaskError(f"{run_dir} has no summary.json: the run has not finished an iteration")
    return summary
