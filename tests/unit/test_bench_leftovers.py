"""The full-run bench counts the processes a run left behind (evals/bench_full_run.py `leftovers`):
its own judges and sandboxes, and those whose owner is gone, never another run's on the machine."""

import os
import subprocess
import sys

from accelopt.evals.bench_full_run import leftovers


def _pretend_judge(owner: int, tmp_path) -> subprocess.Popen:
    """A process whose arguments name a judge home owned by `owner`, as a sandbox's bwrap line does."""
    home = tmp_path / f"accelopt-judge-cuda0-p{owner}-abc123"
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(home)])


def test_a_runs_leftovers_are_its_own_and_orphans_not_another_runs(tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()
    run = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # the run's process, alive
    judges = [_pretend_judge(p, tmp_path) for p in (run.pid, gone.pid, os.getpid())]
    try:
        found = " ".join(leftovers(tmp_path / "run", [run.pid], grace_s=0.0))
        assert f"p{run.pid}-" in found and f"p{gone.pid}-" in found  # the run's own; an owner that is gone
        assert f"p{os.getpid()}-" not in found  # a live process's judges: another run's, not this one's
    finally:
        for proc in (*judges, run):
            proc.kill()
            proc.wait()
    assert leftovers(tmp_path / "run", [run.pid], grace_s=0.0) == []
