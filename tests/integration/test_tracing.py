"""LangSmith tracing against a local HTTP endpoint started by the test: runs for the graph, its
nodes and harness evaluations arrive, with task metadata, and kernel sources stay compact."""

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.conftest import ROOT, TASKS
from accelopt.tools.tracing import MAX_STRING, compact

pytestmark = pytest.mark.slow


class Collector(BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def do_GET(self):  # /info: an empty server description (no compression, default batching)
        self._reply(b"{}")

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        Collector.bodies.append(self.rfile.read(length))
        self._reply(b"{}")

    do_PATCH = do_POST

    def _reply(self, body: bytes):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_compact_cuts_long_strings_and_lists():
    source = "x" * (MAX_STRING + 1)
    out = compact({"candidates": {"a": {"source": source, "speedup": 1.2}}, "ids": list(range(100))})
    assert out["candidates"]["a"]["speedup"] == 1.2
    assert out["candidates"]["a"]["source"].endswith(f"[{len(source)} chars, sha256 "
                                                     f"{hashlib.sha256(source.encode()).hexdigest()[:12]}]")
    assert len(out["ids"]) == 41 and out["ids"][-1] == "… 60 more"


def test_a_traced_run_sends_graph_node_and_harness_runs(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Collector.bodies = []
    env = {**os.environ, "LANGSMITH_TRACING": "true", "LANGSMITH_API_KEY": "test-key",
           "LANGSMITH_ENDPOINT": f"http://127.0.0.1:{server.server_port}", "LANGSMITH_PROJECT": "accelopt-test"}
    try:
        subprocess.run([sys.executable, "-m", "accelopt", "optimize", str(TASKS / "rmsnorm"), "-B", "1", "-N", "1", "-K",
                        "1", "-F", "0", "-T", "1", "--device", "cpu", "--no-memory", "--run-dir",
                        str(tmp_path / "run")], cwd=ROOT, env=env, check=True, capture_output=True, timeout=600)
    finally:
        server.shutdown()
    text = b"\n".join(Collector.bodies).decode("utf-8", "replace")
    names = set(re.findall(r'"name":\s*"([\w\-.]+)"', text))
    assert {"accelopt", "setup", "recall", "planner", "executor", "profiler", "selector", "summarizer",
            "harness", "candidate"} <= names
    # Every run carries the task, and the model calls their role and candidate.
    assert '"task":"rmsnorm"' in text.replace(" ", "") and '"candidate_id":"i1.m0.p0.k0"' in text.replace(" ", "")
    # The baseline kernel travels as a head plus its length and hash, never whole.
    baseline = (TASKS / "rmsnorm" / "baseline.py").read_text()
    assert len(baseline) > MAX_STRING  # else this check says nothing
    assert json.dumps(baseline)[1:-1] not in text and "chars, sha256" in text
