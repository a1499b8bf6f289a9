"""One `accelopt check --json` in a process of its own, cold, as a user runs it: what the GPU
benchmarks of verdicts (bench_fib_verdicts, bench_autotune_verdicts, bench_served_winners) run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def check_process(task: Path, kernel: Path, against: Path | None, timeout_s: float) -> tuple[dict | None, dict]:
    """(the verdict record, or None where the command printed none; its wall seconds, exit code and,
    without a record, the end of its stderr)."""
    cmd = [sys.executable, "-m", "accelopt", "check", str(task), str(kernel), "--json",
           "--timeout", str(timeout_s)] + (["--against", str(against)] if against else [])
    began = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s * 3 + 120)
    ran = {"wall_s": round(time.monotonic() - began, 1), "exit": done.returncode}
    try:
        return json.loads(done.stdout.strip().splitlines()[-1]), ran
    except (ValueError, IndexError):
        return None, {**ran, "error": done.stderr[-2000:]}


def checkout_env(checkout: Path) -> dict[str, str]:
    """This process's environment with another checkout's folder first on PYTHONPATH, so that a
    process started there imports that checkout's `accelopt`, not this one's: figures side by side."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(checkout), os.environ.get("PYTHONPATH", "")])}
