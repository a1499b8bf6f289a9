"""kill -9 in the middle of an iteration, then `accelopt resume`: every candidate evaluated before
the kill is in the final state, unchanged, and no kernel was evaluated twice."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import closing
from pathlib import Path

import pytest

from tests.conftest import ROOT, descendants, still_alive
from tests.integration.test_tuner_graph import long_rows

pytestmark = pytest.mark.slow


def final_state(run_dir) -> dict:
    from langgraph.checkpoint.sqlite import SqliteSaver

    from accelopt.graph.builder import build_graph

    with closing(sqlite3.connect(run_dir / "checkpoints.sqlite", check_same_thread=False)) as conn:
        graph = build_graph().compile(checkpointer=SqliteSaver(conn))
        return graph.get_state({"configurable": {"thread_id": run_dir.name}}).values


def evaluated(run_dir) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in (run_dir / "candidates").glob("*/result.json")}


def resumed_losing_nothing(run_dir, before: dict[str, dict], iterations: int = 2) -> dict:
    """The resumed run's final state, once it is checked: it reached T; every candidate evaluated
    before the kill is in it, with the same measurement; no kernel went through the harness twice
    (one audit line per distinct evaluation)."""
    state = final_state(run_dir)
    assert state["stop_reason"] == f"reached T={iterations} iterations"
    cands = state["candidates"]
    assert set(before) <= set(cands)
    for cid, record in before.items():
        assert cands[cid]["status"] == record["status"] and cands[cid].get("workloads") == record.get("workloads")
    keys = [json.loads(line)["key"] for line in (run_dir / "evaluations.jsonl").read_text().splitlines()]
    assert len(keys) == len(set(keys)) == sum(c["status"] != "duplicate" for c in cands.values())
    return state


def test_a_run_killed_mid_iteration_resumes_without_losing_or_repeating_an_evaluation(tmp_path):
    task = long_rows(tmp_path, "rmsnorm")
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "accelopt", "optimize", str(task), "-B", "1", "-N", "2", "-K", "1", "-F", "0",
               "-T", "2", "--autotune", "2", "--device", "cpu", "--no-memory", "--run-dir", str(run_dir)]
    # Its own session, so that the kill takes the evaluation workers with it, as a crash would.
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.time() + 300
    # Kill once iteration 2 has an autotune variant on disk: its node is mid-way through its
    # search, so its branch has evaluated kernels that no checkpoint holds yet.
    while not any(run_dir.glob("candidates/i2.*.a1/result.json")):
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.time() < deadline, "iteration 2 never started"
        time.sleep(0.02)
    workers = descendants(proc.pid)
    assert workers, "the run had started no judge"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    # Whatever was under the run (judges, sandboxes) is gone within a few seconds.
    assert not still_alive(workers, within_s=10)
    before = evaluated(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["iteration"] == 1 and summary["stop_reason"] is None  # killed inside iteration 2

    # (another test's pool, started meanwhile in a parallel worker, may sweep them first: the state
    # that matters is after the resume, when none may be left)
    killed_homes = list(Path(tempfile.gettempdir()).glob(f"accelopt-judge-*-p{proc.pid}-*"))
    subprocess.run([sys.executable, "-m", "accelopt", "resume", str(run_dir)], cwd=ROOT, check=True,
                   capture_output=True, timeout=600)
    # The resumed run's pool swept the killed run's judge homes (its close never ran).
    assert not any(home.exists() for home in killed_homes)
    state = resumed_losing_nothing(run_dir, before)
    cands = state["candidates"]
    # The checkpoint keeps what a resume reads (the latest few of the run, no ended subgraph's), each
    # iteration's plans are in plans.jsonl (which `accelopt show` reads), and they were run.
    from accelopt.graph.driver import KEEP_CHECKPOINTS
    from accelopt.tools.rundir import read_plans

    with closing(sqlite3.connect(run_dir / "checkpoints.sqlite")) as conn:
        spaces = dict(conn.execute("SELECT checkpoint_ns, COUNT(*) FROM checkpoints GROUP BY checkpoint_ns"))
    assert set(spaces) == {""} and spaces[""] <= KEEP_CHECKPOINTS, spaces
    planned = {c["plan_id"] for c in cands.values() if c.get("plan_id")}
    assert planned and planned <= set(read_plans(run_dir)) and {p[:2] for p in planned} == {"i1", "i2"}


# Under pipeline the rerun's dispatch once found the failed attempt's candidates of the same iteration
# and took itself for the dispatch after the planners ahead: the resumed run ended at once (issue 67).
@pytest.mark.parametrize("schedule", ["beam", "pipeline"])
def test_resume_runs_a_failed_iteration_again_from_its_cached_replies_counting_each_call_once(tmp_path, schedule):
    """A fixer endpoint that fails ends iteration 1; `accelopt resume` runs it again. Its planner
    reply replays from the run cache (the same question: not one that includes the kernels the
    failed iteration measured), and a replayed reply whose record the state holds already is
    not counted again: the ledger's calls are the server's answered requests."""
    from tests.conftest import TASKS
    from tests.openai_server import OK, Answer, ScriptedOpenAIServer
    from tests.scripted import reply_for

    def accelopt(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "accelopt", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=300, env={**os.environ, "OPENAI_API_KEY": "sk-test"})

    run_dir = tmp_path / "run"
    with ScriptedOpenAIServer(reply_for, models=["coder"]) as main, \
            ScriptedOpenAIServer(reply_for, then=Answer(503, "overloaded"), models=["coder"]) as fixer:
        config = tmp_path / "accelopt.toml"
        config.write_text(f'[run]\nllm_retry_wait_s = 0.01\n[models.default]\nmodel = "vllm:coder"\n'
                          f'base_url = "{main.url}"\nmax_attempts = 2\n[models.fixer]\nbase_url = "{fixer.url}"\n')
        done = accelopt("optimize", str(TASKS / "softmax"), "--device", "cpu", "--no-memory", "-T", "1", "-B", "1",
                        "-N", "2", "-K", "1", "-F", "1", "--run-dir", str(run_dir), "--config", str(config),
                        "--schedule", schedule)
        assert done.returncode != 0 and "fixer model vllm:coder" in done.stdout + done.stderr, done.stderr[-2000:]
        refused = len(fixer.requests)  # each a 503: no reply, no ledger record
        fixer.then = OK
        done = accelopt("resume", str(run_dir))
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["failure"] is None and [h["iteration"] for h in summary["iterations"]] == [1, 1]
    planner = [r for r in main.requests if "accelopt planner" in r["body"]["messages"][0]["content"]]
    assert len(planner) == 1  # iteration 1's planner was asked once, its reply replayed on resume
    usage = summary["usage"]
    assert usage["by_role"]["planner"]["calls"] == 1
    assert usage["calls"] == len(main.requests) + len(fixer.requests) - refused  # each answered call once


def optimize_killed_once(tmp_path, url: str, shape: list[str], ready, what: str):
    """`accelopt optimize` of softmax on the interpreter against the scripted endpoint at `url`,
    with `shape` (its search flags), in a session of its own, SIGKILLed (workers and all, as a
    crash would) as soon as `ready(run_dir)`; its run directory."""
    from tests.conftest import TASKS

    run_dir = tmp_path / "run"
    config = tmp_path / "accelopt.toml"
    config.write_text(f'[run]\nllm_retry_wait_s = 0.01\n[models.default]\nmodel = "vllm:coder"\nbase_url = "{url}"\n')
    command = [sys.executable, "-m", "accelopt", "optimize", str(TASKS / "softmax"), *shape, "--device", "cpu",
               "--no-memory", "--run-dir", str(run_dir), "--config", str(config)]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.time() + 300
    while not ready(run_dir):
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.time() < deadline, what
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return run_dir


@pytest.mark.parametrize("schedule", ["overlap", "pipeline"])
def test_an_overlapping_run_killed_while_a_deferred_fix_runs_resumes_without_repeating_an_evaluation(tmp_path, schedule):
    """--schedule overlap (and pipeline, at T=3: iteration 3's planners run beside that fix):
    kill -9 once a fix of iteration 1's broken kernel has landed in iteration 2 (beside its first
    attempts), then `accelopt resume`: nothing evaluated is lost or evaluated again, and the run
    ends as it would have."""
    from tests.openai_server import ScriptedOpenAIServer
    from tests.scripted import reply_for

    iterations = 3 if schedule == "pipeline" else 2
    with ScriptedOpenAIServer(reply_for, models=["coder"]) as server:
        run_dir = optimize_killed_once(
            tmp_path, server.url, ["-B", "2", "-N", "4", "-K", "1", "-F", "1", "-T", str(iterations),
                                   "--schedule", schedule],
            lambda run_dir: (run_dir / "candidates" / "i1.m0.p1.k0.f1" / "result.json").is_file(),
            "the deferred fix never ran")
        before = evaluated(run_dir)
        subprocess.run([sys.executable, "-m", "accelopt", "resume", str(run_dir)], cwd=ROOT, check=True,
                       capture_output=True, timeout=600)
    state = resumed_losing_nothing(run_dir, before, iterations)
    cands = state["candidates"]
    # the fixes of iteration 1's failures ran in iteration 2, and none was left unrun
    assert cands["i1.m0.p1.k0.f1"]["iteration"] == cands["i1.m0.p2.k0.f1"]["iteration"] == 2
    assert not state.get("pending_fixes")


def test_a_run_killed_with_a_reply_in_flight_past_its_quorum_sends_only_that_call_again(tmp_path):
    """--quorum: iteration 1 moves on without its slowest reply; kill -9 while iteration 2 runs and
    that call is still in flight, then `accelopt resume`: nothing evaluated is lost or evaluated
    again, the call in flight at the kill is the only one sent twice, and it joins iteration 2."""
    from langchain_core.messages import BaseMessage

    from tests.openai_server import ScriptedOpenAIServer
    from tests.scripted import PLANS, SLOW, fenced, reply_for

    killed = threading.Event()

    def reply(messages: list[BaseMessage]) -> str:
        system, prompt = str(messages[0].content), str(messages[-1].content)
        if "accelopt planner" in system and "(iteration 2)" in prompt:  # iteration 2's prompts differ from 1's
            return PLANS.replace(".\n", " (second pass).\n")
        if "accelopt executor" in system and "Launch 16 programs" in prompt and "second pass" not in prompt:
            if not killed.is_set():  # iteration 1's slowest reply: still being written at the kill
                killed.wait(120)
            return fenced(SLOW.replace("(n_rows, 16)", "(n_rows, 4)"))
        return reply_for(messages)

    with ScriptedOpenAIServer(reply, models=["coder"]) as server:
        # killed once iteration 2's own kernels are all judged: what is left is the call iteration 1 moved on without
        run_dir = optimize_killed_once(
            tmp_path, server.url, ["-B", "1", "-N", "4", "-K", "1", "-F", "0", "-T", "2", "--schedule", "overlap",
                                   "--quorum", "0.75"],
            lambda run_dir: len(list((run_dir / "candidates").glob("i2.*/result.json"))) == 4,
            "iteration 2 never judged its kernels")
        killed.set()
        before = evaluated(run_dir)
        assert before.pop("i1.m0.p3.k0")["status"] == "in_flight"  # in flight at the kill, never evaluated
        subprocess.run([sys.executable, "-m", "accelopt", "resume", str(run_dir)], cwd=ROOT, check=True,
                       capture_output=True, timeout=600)
    state = resumed_losing_nothing(run_dir, before, 2)
    late = state["candidates"]["i1.m0.p3.k0"]
    assert late["status"] == "verified" and late["iteration"] == 2
    asked = Counter(json.dumps(r["body"]["messages"]) for r in server.requests if r["path"] == "/v1/chat/completions")
    again = [m for m, n in asked.items() if n > 1]
    assert len(again) == 1 and "Launch 16 programs per row that all write the row: a regression the summarizer must " \
        "record.\\n" in again[0] and asked[again[0]] == 2  # that call, once more
