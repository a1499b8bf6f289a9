"""The served `check` graph (graph/check_graph.py) through `graph.invoke`: the record `accelopt
check --json` prints, bad input as one ConfigError line, and the process's judge kept warm from one
check to the next, let go when idle, started again (tools/harness/pool.py)."""

import json
import os
from typing import get_type_hints

import pytest
from typer.testing import CliRunner

from accelopt.graph.check_graph import CheckInput, CheckOutput, CheckState, graph
from accelopt.tools.harness import pool as pools
from accelopt.tools.harness.result import EvalResult
from accelopt.tools.settings import ConfigError
from tests.conftest import descendants, still_alive
from tests.scripted import BASELINE, WRONG

pytestmark = pytest.mark.slow


def test_the_record_declares_every_field_of_the_evaluation():
    """A key the output schema lacks would be dropped from the graph's output without a word."""
    record = set(EvalResult.model_fields) | {"torch_compile_mode", "before_judge_s"}
    assert set(CheckOutput.__annotations__) == record
    assert set(CheckState.__annotations__) == record | set(CheckInput.__annotations__)
    assert get_type_hints(CheckInput)["device"].__args__ == ("auto", "cuda", "cpu")


def test_a_check_through_the_graph_is_the_clis_record(softmax_task, tmp_path):
    from accelopt.cli.app import app

    kernel = tmp_path / "k.py"
    kernel.write_text(BASELINE)
    out = graph.invoke({"task_dir": str(softmax_task), "kernel": str(kernel), "device": "cpu"})
    cli = json.loads(CliRunner().invoke(app, ["check", str(softmax_task), str(kernel), "--device", "cpu",
                                              "--json", "--replay", str(out["seed"])]).output)  # the same inputs
    assert set(out) == set(cli) and out["status"] == cli["status"] == "verified"
    assert out["evidence"] == cli["evidence"] and set(out["versus"]) == {"baseline"}
    assert out["before_judge_s"]["process"] is None  # not this process's start: it was running already
    assert cli["before_judge_s"]["process"] is not None
    # a kernel that fails is a verdict, not an error; against another kernel, naming the user's file
    kernel.write_text(WRONG)
    other = tmp_path / "other.py"
    other.write_text(BASELINE)
    out = graph.invoke({"task_dir": str(softmax_task), "kernel": str(kernel), "against": str(other),
                        "device": "cpu", "timeout_s": 120})
    assert out["status"] == "wrong_output" and set(out["versus"]) == set() and "max abs err" in out["error"]


def test_bad_input_is_one_line_before_any_judging(softmax_task, tmp_path):
    kernel = tmp_path / "k.py"
    kernel.write_text(BASELINE)
    binary = tmp_path / "k.so"
    binary.write_bytes(bytes(range(256)))
    task, k = str(softmax_task), str(kernel)
    for given, expected in [({"task_dir": task}, "no kernel in the check's input"),
                            ({"kernel": k}, "no task_dir in the check's input"),
                            ({"task_dir": str(tmp_path / "none"), "kernel": k}, "task directory not found"),
                            ({"task_dir": task, "kernel": str(tmp_path / "none.py")}, f"{tmp_path}/none.py: no such file"),
                            ({"task_dir": task, "kernel": str(tmp_path)}, f"{tmp_path}: a folder, not a kernel file"),
                            ({"task_dir": task, "kernel": str(binary)}, f"{binary}: not text"),
                            ({"task_dir": task, "kernel": k, "against": str(tmp_path / "x.py")}, f"{tmp_path}/x.py: no such file"),
                            ({"task_dir": task, "kernel": k, "device": "tpu"}, "device 'tpu': use auto, cuda or cpu"),
                            ({"task_dir": task, "kernel": k, "timeout_s": 0}, "timeout_s 0: must be greater than 0"),
                            ({"task_dir": task, "kernel": k, "compile_mode": "fast"}, "compile_mode 'fast': use")]:
        with pytest.raises(ConfigError) as refused:
            graph.invoke(given)
        assert str(refused.value).startswith(expected), (given, str(refused.value))
        assert "\n" not in str(refused.value)


def test_the_judge_stays_warm_across_checks_and_goes_when_idle(softmax_task, tmp_path, monkeypatch):
    """Two checks in one process: the second is answered by the judge the first started (same pid,
    nothing to start). Idle past ACCELOPT_JUDGE_IDLE_S, the judge, its template and sandboxes are
    killed and its home removed; a third check starts a new judge."""
    monkeypatch.setenv("ACCELOPT_JUDGE_IDLE_S", "2")  # far above the 0.2 s between two checks
    pools.close_pools()  # no judge an earlier test of this worker started (the interpreter has one per core)
    kernel = tmp_path / "k.py"
    kernel.write_text(BASELINE)
    given = {"task_dir": str(softmax_task), "kernel": str(kernel), "device": "cpu"}
    first = graph.invoke(given)
    pool = pools.get_pool("cpu", 0)
    judges = pool.judge_pids()
    second = graph.invoke(given)
    assert first["status"] == second["status"] == "verified"
    assert pool.judge_pids() == judges and len(judges) == 1, (judges, pool.judge_pids())
    assert second["before_judge_s"]["judge_pool"] < 0.5 and second["before_judge_s"]["judge_start"] < 1.0
    homes = [w.home for w in pool.workers if w.proc is not None]
    processes = {judges[0]} | descendants(judges[0])  # the judge, its sandbox template, its spare sandboxes
    assert len(processes) > 1
    released = pool.releases
    assert still_alive(processes, 15.0) == [], "the idle judge (or a sandbox of it) was not stopped"
    assert pool.releases == released + 1 and pool.judge_pids() == []
    assert not any(h.exists() for h in homes)
    third = graph.invoke(given)
    assert third["status"] == "verified" and pools.get_pool("cpu", 0) is pool
    assert pool.judge_pids() and pool.judge_pids()[0] not in processes
    assert third["before_judge_s"]["judge_start"] > second["before_judge_s"]["judge_start"]  # it started again
    assert os.getpid() not in processes
