"""The real `langgraph dev` server on 127.0.0.1, offline and with no LangSmith key, running a
short tuner optimization through langgraph_sdk, the way Studio does."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, TASKS
from tests.unit.test_schemas import resolved

pytestmark = pytest.mark.slow
LANGGRAPH = Path(sys.executable).with_name("langgraph")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def dev_server(tmp_path):
    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH", "LANGCHAIN"))},
           "LANGGRAPH_CLI_NO_ANALYTICS": "1",  # offline: no analytics ping
           "ACCELOPT_RUNS_DIR": str(tmp_path / "runs")}  # where a run given no run_dir goes (default ./runs)
    log = (tmp_path / "dev.log").open("w")
    proc = subprocess.Popen([str(LANGGRAPH), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1",
                             "--port", str(port)], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                if httpx.get(f"{url}/ok", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"langgraph dev exited: {(tmp_path / 'dev.log').read_text()[-2000:]}")
            time.sleep(0.5)
        else:
            raise RuntimeError("langgraph dev did not answer /ok within 60 s")
        yield url, tmp_path / "dev.log"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_langgraph_json_validates():
    out = subprocess.run([str(LANGGRAPH), "validate"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "is valid" in out.stdout


def test_a_run_through_the_sdk_streams_node_updates_in_order(dev_server):
    from langgraph_sdk import get_sync_client

    url, log = dev_server
    client = get_sync_client(url=url)
    assistants = client.assistants.search()
    assert [a["graph_id"] for a in assistants] == ["accelopt"]
    # The context schema is published, so Studio can show a form for B/N/K/F/T, models, budgets.
    schemas = client.assistants.get_schemas(assistants[0]["assistant_id"])
    schema = schemas["context_schema"]
    # and the input schema, so Studio shows an input form: the task folder and the run folder only
    assert schemas["input_schema"] is not None and schemas["input_schema"]["required"] == ["task_dir"]
    assert set(schemas["input_schema"]["properties"]) == {"task_dir", "run_dir"}
    # the output a user reads, without the planner's own keys
    output = schemas["output_schema"]
    assert output is not None and {"best_id", "summary", "stop_reason", "run_dir"} <= set(output["properties"])
    assert not {"plans", "recalled", "started_at"} & set(output["properties"])
    # its records typed to their fields (nodes/records.py), not bare objects
    candidate = resolved(output, output["properties"]["candidates"]["additionalProperties"])
    assert {"id", "parent_id", "source", "status", "speedup", "workloads", "versus"} <= set(candidate["properties"])
    summary = resolved(output, output["properties"]["summary"])
    assert {"best_id", "best_speedup", "stop_reason", "usage", "iterations"} <= set(summary["properties"])
    usage = resolved(output, output["properties"]["usage"]["items"])
    assert {"role", "input_tokens", "cost_usd"} <= set(usage["required"])
    assert "stored_as" in resolved(output, output["properties"]["insights"]["items"])["properties"]
    # and the state's, with the planner's own keys: a plan is an object with its fields too
    state_schema = schemas["state_schema"]
    assert {"text", "parent_id", "moves"} <= set(
        resolved(state_schema, state_schema["properties"]["plans"]["items"])["properties"])
    assert {"beams", "plans", "samples", "fixes", "iterations", "model", "max_cost_usd", "autotune",
            "review_plans"} <= set(schema["properties"])
    assert "beam width" in schema["properties"]["beams"]["description"]
    # choices, not free text; code-only fields hidden; every field explained
    assert schema["properties"]["device"]["enum"] == ["auto", "cuda", "cpu"]
    assert "chat_models" not in schema["properties"]
    assert [k for k, v in schema["properties"].items() if not v.get("description")] == []

    thread = client.threads.create()
    # With the memory on: Chroma and the embedding model load inside the server, as in Studio.
    context = {"beams": 1, "plans": 1, "samples": 1, "fixes": 1, "iterations": 1, "device": "cpu",
               "memory_dir": str(log.parent / "memory"), "model": "tuner"}
    nodes = []
    for chunk in client.runs.stream(thread["thread_id"], "accelopt", input={"task_dir": str(TASKS / "rmsnorm")},
                                    context=context, stream_mode="updates", stream_subgraphs=True):
        if chunk.event.startswith("updates"):
            nodes += list(chunk.data)
        assert chunk.event != "error", chunk.data
    assert nodes == ["setup", "recall", "planner", "dispatch", "executor", "profiler", "candidate", "selector",
                     "summarizer", "record", "standing"]
    state = client.threads.get_state(thread["thread_id"])["values"]
    assert state["stop_reason"] == "reached T=1 iterations"
    assert "not timed on a GPU" in state["summary"]["versus_torch_compile"]["not_measured"]
    assert state["candidates"]["i1.m0.p0.k0"]["status"] == "verified"
    # the state the server sends back is what the output schema says it is
    from pydantic import TypeAdapter

    from accelopt.nodes.records import Candidate, HistoryEntry, Summary
    from accelopt.nodes.state import OutputState

    TypeAdapter(OutputState).validate_python({k: v for k, v in state.items() if k in OutputState.__annotations__})
    assert all(set(c) <= set(Candidate.__annotations__) for c in state["candidates"].values())
    assert set(state["summary"]) <= set(Summary.__annotations__) and state["history"]
    assert all(set(h) <= {k for t in HistoryEntry.__args__ for k in t.__annotations__} for h in state["history"])
    # No run_dir was given: the run has one of its own, with what the CLI's runs have.
    run_dir = Path(state["run_dir"])
    assert run_dir.parent == (log.parent / "runs").resolve() and run_dir.name.startswith("rmsnorm-")
    assert all((run_dir / name).is_file() for name in ("run.json", "summary.json", "best_kernel.py"))
    assert (log.parent / "memory" / "chroma.sqlite3").is_file()  # the store was opened by the run
    # Compiles, model loading and the harness never tripped the dev server's blocking-call guard.
    assert "BlockingError" not in log.read_text()
    assert "Failed to get" not in log.read_text()  # every schema (input, output, state, context) was built
