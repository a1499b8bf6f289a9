"""Run directories as users treat them: one live process per directory, one run per directory,
resume with more iterations, a copied run directory, a task that moved or changed, and a memory
directory that is mistyped or lost its database. Two short CPU runs serve every check."""

import fcntl
import json
import shutil
import subprocess
import sys
import time

import pytest
from pydantic import BaseModel

from accelopt.tools.run_record import NotMeasured, RunSummary, load_summary
from tests.conftest import ROOT, TASKS
from tests.integration.test_cli_errors import assert_clean_error, run_cli

pytestmark = pytest.mark.slow

SHORT = ["--device", "cpu", "--no-memory", "-B", "1", "-N", "1", "-K", "1", "-F", "0"]


def cli(*args):
    return run_cli(*map(str, args), cwd=ROOT, env={"COLUMNS": "250"})  # rich wraps long paths at 80


def candidates(run_dir) -> set[str]:
    return {p.name for p in (run_dir / "candidates").iterdir()}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A private copy of rmsnorm and a finished -T 1 run of it. While the run is live, a second
    `resume` or `optimize` on its directory is refused, naming the run's pid."""
    place = tmp_path_factory.mktemp("runs")
    task, run_dir = place / "rmsnorm", place / "run"
    shutil.copytree(TASKS / "rmsnorm", task)
    proc = subprocess.Popen([sys.executable, "-m", "accelopt", "optimize", task, *SHORT, "-T", "1",
                             "--run-dir", run_dir], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while not ((run_dir / "run.json").is_file() and "pid" in _read(run_dir / ".lock")):
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.time() < deadline, "the run never took its lock"
        time.sleep(0.05)
    holder = f"is in use by accelopt pid {proc.pid} (started"
    assert_clean_error(cli("resume", run_dir), holder, "wait for it or stop it")
    assert_clean_error(cli("optimize", task, *SHORT, "--run-dir", run_dir), holder)
    assert proc.wait(timeout=300) == 0, proc.stderr.read().decode()[-2000:]
    return task, run_dir


def _read(path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _parts(record: BaseModel):
    """The record and every record nested in it."""
    yield record
    for value in record.__dict__.values():
        for item in value if isinstance(value, list) else value.values() if isinstance(value, dict) else [value]:
            if isinstance(item, BaseModel):
                yield from _parts(item)


def test_the_summary_a_real_run_writes_round_trips_through_its_model(finished):
    """summary.json as the record and standing nodes of a CPU-interpreter run wrote it: read into
    the model, every key is one the model names (none carried as an unknown extra), and written
    back it is the same JSON."""
    _, run_dir = finished
    data = json.loads((run_dir / "summary.json").read_text())
    record = load_summary(run_dir)
    assert isinstance(record, RunSummary) and record.dump() == data
    assert [type(p).__name__ for p in _parts(record) if p.model_extra] == []
    assert record.timer == "interpreter_wall" and record.stop_reason == "reached T=1 iterations"
    assert record.usage.calls == 0 and record.iteration == 1 and [h.iteration for h in record.iterations] == [1]
    # the standing node's answer on the interpreter: said, not measured
    assert isinstance(record.versus_torch_compile, NotMeasured)


def test_a_lock_held_by_another_process_is_refused_and_a_dead_holder_leaves_none(finished, tmp_path):
    task, run_dir = finished
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    with open(copy / ".lock", "w") as f:  # this test process holds it, as a live run would
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        f.write("accelopt pid 4242 (started 2025-01-01 00:00:00)\n")
        f.flush()
        assert_clean_error(cli("resume", copy), f"{copy} is in use by accelopt pid 4242 (started 2025-01-01")
    # Released (as by a holder that died): the same directory resumes; the finished run has nothing to do.
    before = json.loads((copy / "summary.json").read_text())
    resumed = cli("resume", copy)
    assert resumed.returncode == 0, resumed.stderr
    assert "reached T=1 iterations" in resumed.stdout
    # the finished run's summary is written again, the standing node's figure kept
    assert json.loads((copy / "summary.json").read_text())["versus_torch_compile"] == before["versus_torch_compile"]


def test_optimize_refuses_a_directory_that_holds_a_run_or_other_files(finished, tmp_path):
    task, run_dir = finished
    before = (run_dir / "run.json").read_text()
    assert_clean_error(cli("optimize", task, *SHORT, "--run-dir", run_dir), "already holds a run of rmsnorm",
                       f"accelopt resume {run_dir}")
    assert_clean_error(cli("optimize", TASKS / "softmax", *SHORT, "--run-dir", run_dir),
                       "holds a run of another task (rmsnorm", "pick another --run-dir")
    assert (run_dir / "run.json").read_text() == before  # nothing was overwritten
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("mine")
    assert_clean_error(cli("optimize", task, *SHORT, "--run-dir", other), "is not empty and holds no accelopt run")
    assert sorted(p.name for p in other.iterdir()) == ["todo.txt"]


def test_a_copied_run_dir_resumes_where_it_is_and_T_extends_it(finished, tmp_path):
    task, run_dir = finished
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    original = candidates(run_dir)
    proc = cli("resume", copy, "-T", "2")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    summary = json.loads((copy / "summary.json").read_text())
    assert summary["iteration"] == 2 and summary["stop_reason"] == "reached T=2 iterations"
    assert [r["iteration"] for r in summary["iterations"]] == [1, 2]
    assert any(c.startswith("i2.") for c in candidates(copy))
    assert candidates(run_dir) == original  # the copy wrote into itself, not into the run it came from
    assert json.loads((copy / "run.json").read_text())["context"]["iterations"] == 2  # a plain resume keeps T


def test_a_moved_task_is_named_and_re_pointed_and_a_changed_one_refused(finished, tmp_path):
    task, run_dir = finished
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    moved = tmp_path / "elsewhere"
    shutil.move(task, moved)
    try:
        assert_clean_error(cli("resume", copy), f"the task directory {task} recorded in", "is gone",
                           "pass --task NEW_DIR")
        assert_clean_error(cli("resume", copy, "--task", TASKS / "softmax"),
                           "is not the task this run optimized (rmsnorm)", "task.json, reference.py, baseline.py")
        repointed = cli("resume", copy, "--task", moved)
        assert repointed.returncode == 0 and "Traceback" not in repointed.stderr, repointed.stderr
        assert json.loads((copy / "run.json").read_text())["task_dir"] == str(moved.resolve())
        (moved / "reference.py").write_text((moved / "reference.py").read_text() + "\n# edited\n")
        assert_clean_error(cli("resume", copy), f"the task at {moved.resolve()} changed", "reference.py differ")
    finally:
        shutil.rmtree(task, ignore_errors=True)
        shutil.copytree(TASKS / "rmsnorm", task)


def test_a_mistyped_memory_directory_is_an_error(tmp_path):
    typo = tmp_path / "team-memroy"
    assert_clean_error(cli("optimize", TASKS / "rmsnorm", "--device", "cpu", "--memory", typo),
                       f"no memory store at {typo} (a typo?)", "--create-memory")
    assert_clean_error(cli("memory", "list", "--memory", typo), f"no memory store at {typo}")
    assert not typo.exists()


def test_a_store_that_lost_its_database_says_so(tmp_path):
    store, empty = tmp_path / "mem", tmp_path / "none.jsonl"
    empty.write_text("")
    made = cli("memory", "import", empty, "--memory", store)  # import is what creates a store
    assert made.returncode == 0 and f"created a new memory store at {store}" in made.stdout, made.stderr
    (store / "chroma.sqlite3").unlink()
    for proc in (cli("memory", "list", "--memory", store),
                 cli("optimize", TASKS / "rmsnorm", "--device", "cpu", "--memory", store)):
        assert_clean_error(proc, f"the memory store at {store} has lost its database", "chroma.sqlite3 is missing",
                           "accelopt memory import RUN_DIR/insights.jsonl")
    assert not (store / "chroma.sqlite3").exists()  # not silently recreated empty
