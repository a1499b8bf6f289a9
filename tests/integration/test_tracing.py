"""LangSmith tracing of a CLI run against a local HTTP endpoint started by the test: runs for the
graph, its nodes and harness evaluations arrive, every one ended and with task metadata, and
kernel sources stay compact. (tests/integration/test_tracing_runs.py: Ctrl-C, an unreachable
endpoint, graph.invoke; tests/unit/test_tracing_payloads.py: payloads and errors.)"""

import json
import subprocess
import sys

import pytest

from accelopt.tools.tracing import MAX_STRING
from tests.conftest import ROOT, TASKS
from tests.langsmith_endpoint import LangSmithEndpoint, tracing_env

pytestmark = pytest.mark.slow


def test_a_traced_run_sends_graph_node_and_harness_runs(tmp_path):
    with LangSmithEndpoint() as endpoint:
        proc = subprocess.run([sys.executable, "-m", "accelopt", "optimize", str(TASKS / "rmsnorm"), "-B", "1", "-N",
                               "1", "-K", "1", "-F", "0", "-T", "1", "--device", "cpu", "--no-memory", "--run-dir",
                               str(tmp_path / "run")], cwd=ROOT, env=tracing_env(endpoint.url), capture_output=True,
                              text=True, timeout=600)
        runs = endpoint.runs()
        text = endpoint.text()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = {r["name"] for r in runs.values()}
    assert {"accelopt", "setup", "recall", "planner", "executor", "profiler", "selector", "summarizer",
            "harness", "candidate"} <= names
    # Every run ended and carries the task; the runs about a candidate carry its id.
    assert all(r.get("end_time") and r["extra"]["metadata"].get("task") == "rmsnorm" for r in runs.values())
    about = {r["name"] for r in runs.values() if r["extra"]["metadata"].get("candidate_id") == "i1.m0.p0.k0"}
    assert {"candidate", "executor", "executor-policy", "profiler", "harness"} <= about, about
    # The baseline kernel travels as a head plus its length and hash, never whole.
    baseline = (TASKS / "rmsnorm" / "baseline.py").read_text()
    assert len(baseline) > MAX_STRING  # else this check says nothing
    assert json.dumps(baseline)[1:-1] not in text and "chars, sha256" in text
