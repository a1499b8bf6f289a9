"""An evaluation actor's task folder outlives an actor that was killed (a lost node, `ray.kill`):
the next actor on the node removes those whose process is gone (tools/harness/ray_pool.py)."""

import os
import subprocess

from accelopt.tools.harness.ray_pool import TASK_DIR_PREFIX, sweep_task_dirs


def test_the_folders_of_actors_that_are_gone_are_removed_and_no_other(tmp_path):
    done = subprocess.Popen(["true"])
    done.wait()  # its pid names a process that is gone
    gone = tmp_path / f"{TASK_DIR_PREFIX}{done.pid}-a1b2"
    alive = tmp_path / f"{TASK_DIR_PREFIX}{os.getpid()}-c3d4"
    unnamed = tmp_path / f"{TASK_DIR_PREFIX}x9y8z7"  # no pid in its name: not ours to judge
    other = tmp_path / "unrelated-123"
    for folder in (gone, alive, unnamed, other):
        (folder / "task").mkdir(parents=True)
    assert sweep_task_dirs(tmp_path) == [gone]
    assert not gone.exists() and alive.is_dir() and unnamed.is_dir() and other.is_dir()
