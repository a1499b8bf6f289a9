"""A role whose endpoint keeps failing ends the run, non-zero, within seconds of its calls
failing (not after every iteration), with one line naming the role, its endpoint and the last
error; `resume` once the endpoint answers runs the failed iteration again. Against scripted
OpenAI-compatible servers on 127.0.0.1, one per endpoint, as a user's config would point roles at
them (a planner that answers, an executor/fixer server answering 503 to everything)."""

import json
import os
import subprocess
import sys
import time

import pytest

from accelopt.tools.budget import DEAD_AFTER, RunLedger
from accelopt.tools.run_record import run_failure
from tests.conftest import ROOT, TASKS
from tests.openai_server import OK, Answer, ScriptedOpenAIServer
from tests.scripted import reply_for

UNAVAILABLE = Answer(503, "Service Unavailable: the engine is overloaded")


def _accelopt(*args: str, config, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "OPENAI_API_KEY": "sk-test"}
    extra = ["--config", str(config)] if config else []
    return subprocess.run([sys.executable, "-m", "accelopt", *args, *extra], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=env)


def _config(tmp_path, planner_url: str, writer_url: str):
    path = tmp_path / "accelopt.toml"
    path.write_text(f'[run]\nllm_retry_wait_s = 0.01\n'
                    f'[models.default]\nmodel = "vllm:coder"\nbase_url = "{planner_url}"\nmax_attempts = 2\n'
                    f'[models.executor]\nbase_url = "{writer_url}"\n[models.fixer]\nbase_url = "{writer_url}"\n')
    return path


@pytest.mark.slow
def test_an_executor_that_never_answers_ends_the_run_non_zero_and_resume_runs_that_iteration_again(tmp_path):
    run_dir = tmp_path / "run"
    with ScriptedOpenAIServer(reply_for, models=["coder"]) as planner, \
            ScriptedOpenAIServer(reply_for, then=UNAVAILABLE, models=["coder"]) as writer:
        config = _config(tmp_path, planner.url, writer.url)
        began = time.monotonic()
        done = _accelopt("optimize", str(TASKS / "softmax"), "--device", "cpu", "--no-memory", "-T", "2",
                         "--schedule", "beam", "--run-dir", str(run_dir), config=config)  # pipeline: test_resume's xfail
        took = time.monotonic() - began
        out = done.stdout + done.stderr
        assert done.returncode != 0 and "Traceback" not in out, out[-3000:]
        summary = json.loads((run_dir / "summary.json").read_text())
        failure = summary["failure"]
        assert failure.startswith(f"executor model vllm:coder at {writer.url}: no usable reply"), failure
        assert "503 Service Unavailable" in failure
        assert summary["iteration"] == 1  # not every iteration: the run ended with the first one
        assert "executor model vllm:coder" in out
        assert took < 120, took
        # each executor call was tried max_attempts times, once: no second round of retries in text
        assert len(writer.requests) <= 2 * len(summary["iterations"][0].get("beam", [1])) * 4

        # the endpoint answers again: the failed iteration runs again, then the second
        writer.answers, writer.then = [], OK
        done = _accelopt("resume", str(run_dir), config=None)
        out = done.stdout + done.stderr
        assert done.returncode == 0, out[-3000:]
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["failure"] is None and summary["iteration"] == 2
        iterations = [h["iteration"] for h in summary["iterations"] if "evaluated" in h]
        assert iterations == [1, 1, 2], iterations  # iteration 1 failed, ran again, then 2
        assert summary["statuses"].get("verified", 0) >= 1  # a kernel of the run (the baseline is not counted)


def test_a_role_failing_calls_in_a_row_ends_the_run_at_once():
    run = RunLedger()
    for i in range(DEAD_AFTER - 1):
        run.call_failed("executor", "executor model m at u", f"failed: 503 ({i})")
    run.call_answered("planner")  # another role's reply changes nothing
    assert run.fatal is None
    run.call_answered("executor")  # a reply resets the count
    for i in range(DEAD_AFTER):
        run.call_failed("executor", "executor model m at u", f"failed: 503 ({i})")
    assert run.fatal == f"executor model m at u: no usable reply to {DEAD_AFTER} calls in a row; the last: failed: 503 (2)"
    run.reopen()
    assert run.fatal is None and run.failing == {}


def test_a_run_whose_every_executor_call_failed_in_an_iteration_has_failed():
    from accelopt.nodes.context import RunContext
    from accelopt.nodes.selector import unanswered

    ctx = RunContext(model="vllm:coder", base_url="http://127.0.0.1:9/v1")
    base = {"iteration": 1, "beam": ["baseline"], "history": [],
            "candidates": {"baseline": {"iteration": 0, "status": "verified"}}}
    failed = {"i1.a": {"iteration": 1, "fix_of": None, "status": "llm_error", "error": "503 (a)"},
              "i1.b": {"iteration": 1, "fix_of": None, "status": "llm_error", "error": "503 (b)"}}
    line = unanswered({**base, "candidates": {**base["candidates"], **failed}}, ctx)
    assert line == ("executor model vllm:coder at http://127.0.0.1:9/v1: no usable reply to any of its 2 call(s) "
                    "in iteration 1; the last: 503 (b)")
    # one answered call, or calls the budget never sent, are not a dead role
    answered = {**failed, "i1.b": {**failed["i1.b"], "status": "wrong_output"}}
    assert unanswered({**base, "candidates": {**base["candidates"], **answered}}, ctx) is None
    unsent = {"i1.a": {**failed["i1.a"], "status": "not_sent"}}
    assert unanswered({**base, "candidates": {**base["candidates"], **unsent}}, ctx) is None
    # a planner reply with no plan in it is no usable reply either
    empty = {**base, "history": [{"iteration": 1, "event": "planner_empty", "error": "the reply held no plan"}]}
    assert unanswered(empty, ctx).startswith("planner model vllm:coder at http://127.0.0.1:9/v1: no usable reply")
    assert run_failure({**empty, "fatal": "x"}) == "x"
    assert unanswered(empty, RunContext(model="tuner")) is None  # the tuner is no endpoint
