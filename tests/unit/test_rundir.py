"""tools/rundir.py's run-directory rules and the driver's path rewriting, without running a search."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from langgraph.types import Overwrite, Send

from accelopt.graph.driver import _moved, thread_id
from accelopt.tools.rundir import (
    RunDirError,
    claim_new_run_dir,
    lock_run_dir,
    read_run_meta,
    resume_task_dir,
    write_run_meta,
)
from tests.conftest import TASKS

HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, b"accelopt pid %d (started now)" % os.getpid())
print("held", flush=True)
time.sleep(60)
"""


@pytest.fixture
def task(tmp_path):
    dst = tmp_path / "rmsnorm"
    shutil.copytree(TASKS / "rmsnorm", dst)
    return dst


def test_run_json_names_its_thread_and_fingerprints_its_task(tmp_path, task):
    run_dir = tmp_path / "run"
    write_run_meta(run_dir, str(task), {"iterations": 1})
    meta = read_run_meta(run_dir)
    assert meta["thread_id"] == "run"
    assert meta["task"]["name"] == "rmsnorm" and len(meta["task"]["files"]["reference.py"]) == 64
    assert resume_task_dir(run_dir, meta) == str(task)


def test_a_lock_held_by_a_live_process_names_it(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / ".lock")], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunDirError, match=f"is in use by accelopt pid {holder.pid} .*wait for it or stop it"):
            lock_run_dir(tmp_path)
    finally:
        holder.kill()
        holder.wait()
    lock_run_dir(tmp_path)  # the holder died: its lock went with it
    lock_run_dir(tmp_path)  # and this process may ask again
    assert f"accelopt pid {os.getpid()} " in (tmp_path / ".lock").read_text()


def test_optimize_claims_only_a_new_or_empty_directory(tmp_path, task):
    claim_new_run_dir(tmp_path / "new", task)
    assert (tmp_path / "new" / ".lock").is_file()
    claim_new_run_dir(tmp_path / "new", task)  # still empty but for its lock
    write_run_meta(tmp_path / "new", str(task), {})
    with pytest.raises(RunDirError, match="already holds a run of rmsnorm: continue it with `accelopt resume"):
        claim_new_run_dir(tmp_path / "new", task)
    with pytest.raises(RunDirError, match="holds a run of another task \\(rmsnorm"):
        claim_new_run_dir(tmp_path / "new", TASKS / "softmax")
    (task / "baseline.py").write_text("# another baseline\n")
    with pytest.raises(RunDirError, match="made with other task files \\(baseline.py differ"):
        claim_new_run_dir(tmp_path / "new", task)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(RunDirError, match="is not empty and holds no accelopt run"):
        claim_new_run_dir(tmp_path / "full", task)


def test_resume_checks_the_task_where_it_is_or_where_it_moved(tmp_path, task):
    run_dir = tmp_path / "run"
    write_run_meta(run_dir, str(task), {})
    meta = read_run_meta(run_dir)
    moved = tmp_path / "moved"
    task.rename(moved)
    with pytest.raises(RunDirError, match=f"the task directory {task} recorded in .* is gone; pass --task NEW_DIR"):
        resume_task_dir(run_dir, meta)
    assert resume_task_dir(run_dir, meta, moved) == str(moved.resolve())
    with pytest.raises(RunDirError, match="is not the task this run optimized \\(rmsnorm\\)"):
        resume_task_dir(run_dir, meta, TASKS / "softmax")
    spec = json.loads((moved / "task.json").read_text())
    (moved / "task.json").write_text(json.dumps({**spec, "description": "edited"}))
    with pytest.raises(RunDirError, match="changed since this run started \\(task.json differ"):
        resume_task_dir(run_dir, {**meta, "task_dir": str(moved)})
    # A run.json from before fingerprints: the folder must exist, the content cannot be checked.
    assert resume_task_dir(run_dir, {"task_dir": str(moved)}) == str(moved)


def test_thread_falls_back_to_the_checkpoints_only_thread_then_the_folder(tmp_path):
    import sqlite3

    conn = sqlite3.connect(":memory:")
    assert thread_id(tmp_path, {"thread_id": "t1"}, conn) == "t1"
    assert thread_id(tmp_path, {}, conn) == tmp_path.name  # no checkpoint table yet
    conn.execute("CREATE TABLE checkpoints (thread_id TEXT)")
    conn.execute("INSERT INTO checkpoints VALUES ('original-name')")
    assert thread_id(tmp_path, {}, conn) == "original-name"


def test_moved_rewrites_whole_paths_under_the_old_folders_only():
    moves = {"/a/run": "/b/run2", "/t/task": "/u/task"}
    state = {"run_dir": "/a/run", "task_dir": "/t/task", "note": "failed in /a/run/x", "other": "/a/run10",
             "sends": [Send("candidate", {"run_dir": "/a/run", "file": "/a/run/cache/k.json"})],
             "plans": Overwrite([]), "pair": ("/t/task/reference.py", 3)}
    moved = _moved(state, moves)
    assert moved["run_dir"] == "/b/run2" and moved["task_dir"] == "/u/task"
    assert moved["note"] == "failed in /a/run/x" and moved["other"] == "/a/run10"
    assert moved["sends"][0].node == "candidate"
    assert moved["sends"][0].arg == {"run_dir": "/b/run2", "file": "/b/run2/cache/k.json"}
    assert isinstance(moved["plans"], Overwrite) and moved["pair"] == ("/u/task/reference.py", 3)
