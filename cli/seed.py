"""`accelopt seed TASK_DIR --out SEED.py`: write the Inductor seed of a task (torch.compile's own
Triton kernels as a standalone candidate module), to read, judge with `accelopt check` or start
a run from (`accelopt optimize --seed inductor`). Exit 0 written, 2 refused or bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated as Opt  # an import alias: mypy takes `Opt = Annotated` for a variable

import typer
from rich.console import Console

from accelopt.cli.memory import fail
from accelopt.cli.options import SeedModeName


def seed(
    task_dir: Opt[Path, typer.Argument(help="Task directory (task.json, reference.py)")],
    out: Opt[Path, typer.Option(help="Where to write the seed module")],
    mode: Opt[SeedModeName, typer.Option("--mode", "--seed-mode", help="torch.compile mode; max-autotune-triton keeps matmuls in Triton "
                                              "templates instead of cuBLAS")] = "default",
    capture: Opt[Path | None, typer.Option("--capture", "--seed-capture", help="Convert this capture (made earlier on a GPU) instead of "
                                                   "compiling here")] = None,
    capture_out: Opt[Path | None, typer.Option(help="Also keep the capture (JSON) here")] = None,
) -> None:
    """Write TASK_DIR's Inductor seed: the Triton kernels torch.compile generates for its reference
    (on this machine's GPU), with the launch configurations Inductor's autotuner chose."""
    from accelopt.tools.inductor_capture import CaptureError, capture_in_subprocess
    from accelopt.tools.inductor_seed import SeedRefused, seed_source
    from accelopt.tools.task import TaskError, load_task

    try:
        task = load_task(task_dir)
        captured = json.loads(capture.read_text()) if capture else capture_in_subprocess(task.root, mode)
    except (TaskError, CaptureError, OSError, ValueError) as e:
        fail(str(e))
    if capture_out is not None:
        capture_out.write_text(json.dumps(captured))
    try:
        made = seed_source(captured, task.spec.entry_point)
    except SeedRefused as e:
        fail(f"no Inductor seed for {task.name}: {e}")
    out.write_text(made.source)
    Console().print(f"wrote {out}: {made.workloads} workload specialization(s) from {made.origin}\n"
                    f"judge it: accelopt check {task_dir} {out}")
