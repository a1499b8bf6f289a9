"""A short optimization through the real ChatOpenAI client against a scripted
OpenAI-compatible server: usage and cost come from the server's `usage`, and a 429 is retried."""

import json
import os
import subprocess
import sys

import pytest

from accelopt.tools.pricing import HOSTED_PRICES
from tests.openai_server import ScriptedOpenAIServer
from tests.scripted import reply_for

pytestmark = pytest.mark.slow


def test_cli_run_through_openai_compatible_server(tmp_path, softmax_task):
    with ScriptedOpenAIServer(reply_for, fail_first=1) as server:
        env = {**os.environ, "OPENAI_API_KEY": "sk-test-key"}
        proc = subprocess.run(
            [sys.executable, "-m", "accelopt", "optimize", str(softmax_task), "--model", "openai:gpt-4o-mini",
             "--base-url", server.url, "-B", "1", "-N", "1", "-K", "1", "-F", "1", "-T", "1",
             "--device", "cpu", "--memory", str(tmp_path / "mem"), "--create-memory",
             "--run-dir", str(tmp_path / "run")],
            capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tuner" not in proc.stdout

    # The first request got 429 and was retried; then planner and executor. The summarizer makes
    # no call: interpreter timings are not distilled into lessons.
    assert len(server.requests) == 3
    assert server.requests[0]["body"]["messages"] == server.requests[1]["body"]["messages"]
    assert all(r["path"] == "/v1/chat/completions" and r["auth"] == "Bearer sk-test-key" for r in server.requests)
    assert all(r["body"]["model"] == "gpt-4o-mini" for r in server.requests)

    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    usage = summary["usage"]
    assert usage["by_role"].keys() == {"planner", "executor"}
    assert usage["input_tokens"] == 102 + 103
    price_in, price_out = HOSTED_PRICES["gpt-4o-mini"]
    expected = (usage["input_tokens"] * price_in + usage["output_tokens"] * price_out) / 1e6
    assert usage["cost_usd"] == pytest.approx(expected) and usage["cost_usd"] > 0
    best = json.loads((tmp_path / "run" / "candidates" / "i1.m0.p0.k0" / "result.json").read_text())
    assert best["status"] == "verified" and best["tokens"] > 0
