"""The real `langgraph dev` server on 127.0.0.1, offline and with no LangSmith key, running a
short tuner optimization through langgraph_sdk, the way Studio does; checks through its `check`
graph, the second answered by the judge the first started; and both graphs as MCP tools at /mcp,
driven by the `mcp` package's client as a coding agent would (graph/served_app.py)."""

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, TASKS, descendants
from tests.scripted import BASELINE
from tests.unit.test_schemas import resolved

pytestmark = pytest.mark.slow
LANGGRAPH = Path(sys.executable).with_name("langgraph")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def readme_flags() -> list[str]:
    """The flags of the README's `langgraph dev` command: the server under test is started as users
    start it (a flag the README drops, the test drops too)."""
    line = next(line for line in (ROOT / "README.md").read_text().splitlines()
                if "langgraph dev" in line and line.startswith("LANGGRAPH_CLI_NO_ANALYTICS=1"))
    return line.split("#")[0].split("langgraph dev", 1)[1].split()


def resolved_setting(name: str) -> bool:
    """A variable the run settings resolve from (graph/config.py): only the test's own reach the server."""
    return name == "ACCELOPT_CONFIG" or (name.startswith("ACCELOPT_") and name.endswith(("_MODEL", "_BASE_URL")))


@contextlib.contextmanager
def serving(tmp_path: Path, **env_vars: str):
    """`langgraph dev` started as the README says, on a free port, with `env_vars` in its environment."""
    from tests.conftest import descendants, still_alive

    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH", "LANGCHAIN")) and not resolved_setting(k)},
           "LANGGRAPH_CLI_NO_ANALYTICS": "1",  # offline: no analytics ping
           "CUDA_VISIBLE_DEVICES": "",  # no GPU for the server's runs, also on a machine that has one
           "PYTHONUNBUFFERED": "1",  # its log lines in the file as they are written
           "ACCELOPT_RUNS_DIR": str(tmp_path / "runs"), **env_vars}  # where a run given no run_dir goes
    log = (tmp_path / "dev.log").open("w")
    proc = subprocess.Popen([str(LANGGRAPH), "dev", *readme_flags(), "--host", "127.0.0.1", "--port", str(port)],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
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
        yield url, tmp_path / "dev.log", proc.pid
    finally:
        left = descendants(proc.pid)  # its judges, their templates and sandboxes
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    # stopped (SIGTERM: uvicorn raises it again once the app shut down, so no atexit runs), it
    # leaves no process and no judge home behind (graph/served_app.py's lifespan closes the pools)
    assert still_alive(left, 10.0) == []
    assert not list(Path(tempfile.gettempdir()).glob(f"accelopt-judge-*-p{proc.pid}-*"))


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory):
    """One server for the file's tests (it starts in seconds; each test's runs use threads of their own)."""
    with serving(tmp_path_factory.mktemp("dev")) as server:
        yield server


def optimizer(client) -> str:
    """The optimizer's assistant (langgraph.json serves `check` beside it)."""
    return next(a["assistant_id"] for a in client.assistants.search() if a["graph_id"] == "accelopt")


def test_a_check_sent_during_an_optimization_is_not_queued_behind_it(dev_server):
    """`langgraph dev` runs one job at a time by default: a check sent 4 s into an optimization
    waited for all of it (8.3 s for a 0.5 s check). Started as the README says, it answers while
    the optimization still runs (sent once the optimization has judged its baseline)."""
    from langgraph_sdk import get_sync_client

    assert "--no-reload" in readme_flags() and "--n-jobs-per-worker" in readme_flags()
    url, log, _ = dev_server
    client = get_sync_client(url=url)
    long = client.threads.create()
    context = {"beams": 2, "plans": 2, "samples": 2, "fixes": 1, "iterations": 6, "device": "cpu",
               "model": "tuner", "use_memory": False}
    run = client.runs.create(long["thread_id"], "accelopt", input={"task_dir": str(TASKS / "softmax")}, context=context)
    deadline = time.time() + 120  # under way: its baseline judged (setup's checkpoint), its iterations ahead
    while not (client.threads.get_state(long["thread_id"])["values"] or {}).get("candidates"):
        assert client.runs.get(long["thread_id"], run["run_id"])["status"] in ("pending", "running")
        assert time.time() < deadline, "the optimization never judged its baseline"
        time.sleep(0.1)
    check = client.threads.create()
    out = client.runs.wait(check["thread_id"], "check", input={"task_dir": str(TASKS / "softmax"),
                                                               "kernel": str(TASKS / "softmax" / "baseline.py")})
    assert out["status"] == "verified"
    assert client.runs.get(long["thread_id"], run["run_id"])["status"] == "running"  # not waited for
    client.runs.cancel(long["thread_id"], run["run_id"], wait=True)


def test_langgraph_json_validates():
    out = subprocess.run([str(LANGGRAPH), "validate"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "is valid" in out.stdout


def test_a_run_through_the_sdk_streams_node_updates_in_order(dev_server):
    from langgraph_sdk import get_sync_client

    url, log, _ = dev_server
    client = get_sync_client(url=url)
    assistants = client.assistants.search()
    assert sorted(a["graph_id"] for a in assistants) == ["accelopt", "check", "confirm"]
    # The context schema is published, so Studio can show a form for B/N/K/F/T, models, budgets.
    schemas = client.assistants.get_schemas(optimizer(client))
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


NO_GPU = ("device 'cuda': no CUDA GPU is visible here (no NVIDIA GPU in the driver's list and CUDA_VISIBLE_DEVICES, "
          "or a torch without CUDA); use device 'auto' or 'cpu' (Triton interpreter: correctness only, times "
          "are not GPU performance)")
UNKNOWN = "unknown run context key 'beems' (did you mean 'beams'?): the known keys are autotune, base_url, beams, "
NO_TASK = ('no task_dir in the run\'s input: give {"task_dir": "PATH"}, a task directory (task.json, reference.py, '
           'baseline.py), and optionally "run_dir"')


def test_what_the_cli_refuses_the_server_refuses_before_any_work_in_the_callers_words(dev_server):
    """Not a `success` whose stop_reason is a worker's traceback, nor a setting dropped or taken as
    given: the run's status is `error`, and its error is the CLI's line (test_cli_errors) with the
    setting named by the key the caller sent (`beams`, not the CLI's `--beams`)."""
    from langgraph_sdk import get_sync_client

    url, log, _ = dev_server
    client = get_sync_client(url=url)
    schema = client.assistants.get_schemas(optimizer(client))["context_schema"]["properties"]
    # Studio's form knows the minimums
    assert (schema["beams"]["minimum"], schema["fixes"]["minimum"], schema["iterations"]["minimum"]) == (1, 0, 1)
    assert {"exclusiveMinimum": 0, "type": "number"} in schema["max_cost_usd"]["anyOf"]

    runs = log.parent / "runs"  # where a run given no run_dir writes: the file's other runs' too
    before = sorted(runs.iterdir()) if runs.exists() else []
    task = {"task_dir": str(TASKS / "rmsnorm")}
    for given, expected in [(dict(context={"device": "cuda"}), NO_GPU),
                            (dict(context={"beams": -1, "device": "cpu"}), "beams -1: must be at least 1"),
                            (dict(context={"max_cost_usd": -5}), "max_cost_usd -5: a budget must be greater than 0 "
                                                                 "(leave it out for no budget)"),
                            (dict(context={"beems": 2}), UNKNOWN),
                            (dict(config={"configurable": {"beems": 2}}), UNKNOWN),  # the older way to pass it
                            (dict(input={}, context={"device": "cpu"}), NO_TASK)]:
        thread = client.threads.create()["thread_id"]
        run = client.runs.create(thread, "accelopt", **{"input": task, **given})
        answer = client.runs.join(thread, run["run_id"])
        assert client.runs.get(thread, run["run_id"])["status"] == "error", (given, answer)
        error = answer["__error__"]
        assert error["error"] == "ConfigError" and error["message"].startswith(expected), (given, error)
        assert "\n" not in error["message"] and "Traceback" not in error["message"]
    assert (sorted(runs.iterdir()) if runs.exists() else []) == before  # no run directory: nothing was done


def test_graph_invoke_refuses_what_the_server_refuses_in_the_same_words(tmp_path):
    """`graph.invoke` (the graph langgraph.json serves) before any work: a ConfigError, one line."""
    from accelopt.graph.builder import graph
    from accelopt.tools.settings import ConfigError

    task = {"task_dir": str(TASKS / "rmsnorm"), "run_dir": str(tmp_path / "run")}
    for context, expected in [({"beems": 2}, UNKNOWN), ({"samples": 0}, "samples 0: must be at least 1"),
                              ({"device": "tpu"}, "device 'tpu': input should be 'auto', 'cuda' or 'cpu'"),
                              ({"beams": "2"}, "beams '2': input should be a valid integer"),
                              ({"model": "acme:big"}, "planner model: unknown model provider 'acme'")]:
        with pytest.raises(ConfigError) as refused:
            graph.invoke(task, context=context)
        assert str(refused.value).startswith(expected), str(refused.value)
    with pytest.raises(ConfigError, match="^no task_dir in the run's input"):
        graph.invoke({}, context={"device": "cpu"})
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- the check graph, and both graphs over MCP

def judges_of(server: int) -> set[int]:
    """The server's judge processes (`python .../judge.py`)."""
    found = set()
    for pid in descendants(server):
        try:
            command = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(part.endswith(b"/judge.py") for part in command):
            found.add(pid)
    return found


def test_two_checks_through_the_server_the_second_answered_by_the_judge_the_first_started(dev_server, tmp_path):
    from langgraph_sdk import get_sync_client

    url, _, server = dev_server
    client = get_sync_client(url=url)
    check = next(a["assistant_id"] for a in client.assistants.search() if a["graph_id"] == "check")
    schemas = client.assistants.get_schemas(check)  # Studio's forms: the input, and the record as output
    assert schemas["input_schema"]["required"] == ["task_dir", "kernel"]
    assert schemas["input_schema"]["properties"]["device"]["enum"] == ["auto", "cuda", "cpu"]
    assert {"status", "error", "versus", "verdicts", "evidence", "before_judge_s"} <= set(
        schemas["output_schema"]["properties"])
    task = shutil.copytree(TASKS / "softmax", tmp_path / "softmax")
    kernel = tmp_path / "k.py"
    kernel.write_text(BASELINE)
    given = {"task_dir": str(task), "kernel": str(kernel), "device": "cpu"}
    first = client.runs.wait(None, "check", input=given)
    judges = judges_of(server)
    began = time.monotonic()
    second = client.runs.wait(None, "check", input=given)
    took = time.monotonic() - began
    assert first["status"] == second["status"] == "verified" and set(second["versus"]) == {"baseline"}
    assert judges and judges_of(server) == judges  # no judge started or restarted for the second
    assert second["before_judge_s"]["judge_start"] < 1.0 and second["before_judge_s"]["judge_pool"] < 0.5
    assert took < 8.0, took  # a warm check on the interpreter (its times are not GPU performance)
    # bad input: the run's error, in one line
    thread = client.threads.create()["thread_id"]
    run = client.runs.create(thread, "check", input={**given, "kernel": str(tmp_path / "none.py")})
    answer = client.runs.join(thread, run["run_id"])
    assert client.runs.get(thread, run["run_id"])["status"] == "error"
    assert answer["__error__"] == {"error": "ConfigError", "message": f"{tmp_path}/none.py: no such file"}


def test_every_graph_is_an_mcp_tool_answering_json_and_the_run_graphs_take_their_settings(dev_server, tmp_path):
    """tools/list: the three tools, the optimizer's and the confirmation's `settings` (its run context: B, N, K, T, the model);
    tools/call: JSON an agent parses (the same object as structuredContent), short, never Python's
    repr of the state; a run's error as JSON with its one line."""
    import asyncio

    from mcp import Client

    url, _, _ = dev_server
    task = shutil.copytree(TASKS / "softmax", tmp_path / "softmax")
    kernel = tmp_path / "k.py"
    kernel.write_text(BASELINE)
    settings = {"beams": 1, "plans": 1, "samples": 1, "iterations": 1, "model": "tuner", "device": "cpu",
                "use_memory": False}

    async def agent():
        async with Client(f"{url}/mcp", read_timeout_seconds=600) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            checked = await client.call_tool("check", {"task_dir": str(task), "kernel": str(kernel), "device": "cpu"})
            missing = await client.call_tool("check", {"task_dir": str(task), "kernel": str(tmp_path / "none.py")})
            optimized = await client.call_tool("accelopt", {"task_dir": str(TASKS / "rmsnorm"),
                                                            "run_dir": str(tmp_path / "run"), "settings": settings})
            misnamed = await client.call_tool("accelopt", {"task_dir": str(TASKS / "rmsnorm"),
                                                           "settings": {**settings, "beems": 2}})
            return tools, checked, missing, optimized, misnamed

    tools, checked, missing, optimized, misnamed = asyncio.run(agent())
    assert set(tools) == {"accelopt", "check", "confirm"}
    assert tools["confirm"].input_schema["required"] == ["run_dir"]
    assert "device" in tools["confirm"].input_schema["properties"]["settings"]["properties"]
    assert tools["check"].input_schema["required"] == ["task_dir", "kernel"]
    settable = tools["accelopt"].input_schema["properties"]["settings"]
    assert {"beams", "plans", "samples", "iterations", "model", "device"} <= set(settable["properties"])
    assert settable["properties"]["beams"]["minimum"] == 1 and "beam width" in settable["properties"]["beams"][
        "description"]
    assert tools["accelopt"].input_schema["required"] == ["task_dir"]  # settings optional
    # every argument an agent can give is described: the inputs, the settings and each setting
    for tool in tools.values():
        assert all(p.get("description") for p in tool.input_schema["properties"].values()), tool.name
    assert all(p.get("description") for p in settable["properties"].values())

    def read(result) -> dict:
        assert len(result.content) == 1 and result.content[0].type == "text"
        parsed = json.loads(result.content[0].text)  # JSON, not a repr
        assert parsed == result.structured_content
        return parsed

    verdict = read(checked)
    assert not checked.is_error and verdict["status"] == "verified" and verdict["verified"]
    assert verdict["versus"]["baseline"]["verdict"] == "no verdict"  # the interpreter decides nothing
    assert len(verdict["versus"]["baseline"]["interval"]) == 2 and verdict["evidence"]
    assert len(checked.content[0].text) < 3000
    assert missing.is_error and read(missing) == {"error": "ConfigError",
                                                  "message": f"{tmp_path}/none.py: no such file"}
    run = read(optimized)
    assert not optimized.is_error and run["stop_reason"] == "reached T=1 iterations", run
    assert run["run_dir"] == str(tmp_path / "run") and run["best_kernel"] == str(tmp_path / "run" / "best_kernel.py")
    assert Path(run["best_kernel"]).is_file() and isinstance(run["speedup_vs_baseline"], float)
    assert run["iterations"] == 1 and run["timer"] == "interpreter_wall"
    assert len(optimized.content[0].text) < 2000  # the whole state's repr was 43 KB
    assert misnamed.is_error and read(misnamed)["message"].startswith(UNKNOWN)
    assert json.loads((tmp_path / "run" / "run.json").read_text())["context"]["beams"] == 1

    # issue 65: the run's best confirmed through MCP as `show --confirm` confirms it. On the
    # interpreter the tuner's one candidate rarely heads the beam; where the baseline does, there
    # is nothing to confirm (the tool's error), and the candidate is made the run's best to confirm it.
    async def confirm():
        async with Client(f"{url}/mcp", read_timeout_seconds=600) as client:
            return await client.call_tool("confirm", {"run_dir": str(tmp_path / "run"), "settings": {"device": "cpu"}})

    summary_file = tmp_path / "run" / "summary.json"
    summary = json.loads(summary_file.read_text())
    if summary["best_id"] == "baseline":
        refused = asyncio.run(confirm())
        assert refused.is_error and read(refused)["message"].endswith("nothing to confirm against it")
        made = [p.parent.name for p in sorted((tmp_path / "run" / "candidates").glob("*/result.json"))
                if p.parent.name != "baseline" and json.loads(p.read_text())["status"] == "verified"]
        assert made, "the tuner's run verified no candidate"
        summary_file.write_text(json.dumps({**summary, "best_id": made[0]}))
    confirmed = asyncio.run(confirm())
    again = read(confirmed)
    assert not confirmed.is_error and again["confirmation"]["status"] == "verified", again
    assert again["best_id"] == json.loads(summary_file.read_text())["best_id"] and again["confirmations"] == 1
    assert again["versus_baseline"]["interval_is"].endswith("1 of them confirming it")
    assert json.loads(summary_file.read_text())["confirmations"][0]["seed"] == again["confirmation"]["seed"]


# ---------------------------------------------------------------- one product through every door

class Doors:
    """The four doors to both graphs, each answering ("ran", what) or ("refused", its one line):
    the CLI (exit 2 and an `error:` line), graph.invoke (a ConfigError), langgraph dev through the
    SDK (the run's error) and MCP (the tool's isError JSON). A door's input and settings are
    given as the caller of that door gives them: flags for the CLI, keys for the others."""

    def __init__(self, url: str):
        from langgraph_sdk import get_sync_client

        self.url, self.client = url, get_sync_client(url=url)

    @staticmethod
    def cli(*args: str) -> tuple[str, str]:
        from tests.integration.test_cli_errors import run_cli

        proc = run_cli(*args, timeout=300)
        assert "Traceback" not in proc.stdout + proc.stderr
        if proc.returncode == 2:
            lines = [line for line in proc.stderr.splitlines() if line.strip()]
            assert lines[0].startswith("error: ")
            return "refused", " ".join(lines)[len("error: "):]
        return "ran", proc.stdout

    @staticmethod
    def invoke(graph_id: str, given: dict, context: dict | None = None) -> tuple[str, object]:
        from accelopt.tools.settings import ConfigError

        if graph_id == "accelopt":
            from accelopt.graph.builder import graph
        else:
            from accelopt.graph.check_graph import graph
        try:
            return "ran", graph.invoke(given, context=context) if context is not None else graph.invoke(given)
        except ConfigError as e:
            assert "\n" not in str(e)
            return "refused", str(e)

    def dev(self, graph_id: str, given: dict, context: dict | None = None,
            error: str = "ConfigError") -> tuple[str, object]:
        thread = self.client.threads.create()["thread_id"]
        run = self.client.runs.create(thread, graph_id, input=given, context=context)
        answer = self.client.runs.join(thread, run["run_id"])
        if self.client.runs.get(thread, run["run_id"])["status"] == "error":
            assert answer["__error__"]["error"] == error, answer
            return "refused", answer["__error__"]["message"]
        return "ran", answer

    def mcp(self, graph_id: str, given: dict, context: dict | None = None) -> tuple[str, object]:
        import asyncio

        from mcp import Client

        async def call():
            async with Client(f"{self.url}/mcp", read_timeout_seconds=600) as client:
                arguments = {**given, **({"settings": context} if context is not None else {})}
                return await client.call_tool(graph_id, arguments)

        result = asyncio.run(call())
        answer = json.loads(result.content[0].text)
        if result.is_error:
            assert answer["error"] == "ConfigError", answer
            return "refused", answer["message"]
        return "ran", answer


def test_every_door_gives_one_outcome_in_the_callers_own_words(dev_server, tmp_path):
    """The same inputs through the CLI, graph.invoke, langgraph dev and MCP: valid, an unknown key,
    a wrong type, a value out of range, a key missing. Each door gives the same outcome; a refusal
    names the setting as that door's caller named it (`--beams` for the CLI, `beams` for the rest),
    and a run records the same settings and counts whichever door started it."""
    url, _, _ = dev_server
    doors = Doors(url)
    task = str(TASKS / "softmax")
    shape = {"beams": 1, "plans": 1, "iterations": 1, "model": "tuner", "device": "cpu", "use_memory": False}
    flags = ["-B", "1", "-N", "1", "-T", "1", "--device", "cpu", "--no-memory"]

    # the optimizer: every API door answers alike; the CLI in its own words
    api = {"unknown key": ({"task_dir": task}, {**shape, "beems": 2}, "unknown run context key 'beems' (did you mean "
                                                                         "'beams'?)"),
           "wrong type": ({"task_dir": task}, {**shape, "beams": "two"}, "beams 'two': input should be a valid integer"),
           "out of range": ({"task_dir": task}, {**shape, "beams": -1}, "beams -1: must be at least 1"),
           "missing": ({}, shape, "no task_dir in the run's input"),
           "setting as input": ({"task_dir": task, "beams": 1}, shape, "'beams' is a run setting, not an input key")}
    mcp_words = {"setting as input": "'beams' is a run setting, not an argument of the accelopt tool"}  # MCP's word
    cli = {"unknown key": (["optimize", task, *flags, "--beems", "2"], "no such option: --beems"),
           "wrong type": (["optimize", task, *flags[2:], "--beams", "two"], "invalid value for '--beams'"),
           "out of range": (["optimize", task, *flags[2:], "--beams", "-1"], "--beams -1: must be at least 1"),
           "missing": (["optimize", *flags], "missing argument 'task_dir'")}
    runs = {name: tmp_path / name for name in ("cli", "invoke", "dev", "mcp")}
    with ThreadPoolExecutor(8) as pool:  # the CLI's processes start while the other doors answer
        cli_answers = {case: pool.submit(doors.cli, *args) for case, (args, _) in cli.items()}
        cli_run = pool.submit(doors.cli, "optimize", task, *flags, "--run-dir", str(runs["cli"]))
        for case, (given, context, expected) in api.items():
            for door in (doors.invoke, doors.dev, doors.mcp):
                outcome, message = door("accelopt", given, context)
                said = mcp_words.get(case, expected) if door == doors.mcp else expected
                assert outcome == "refused" and str(message).startswith(said), (case, door.__name__, message)
                assert "--" not in str(message).split(":")[0], (case, door.__name__, message)  # not the CLI's name
        for case, (_, expected) in cli.items():
            outcome, message = cli_answers[case].result()
            assert outcome == "refused" and expected in message, (case, message)

        # valid: one run per door, the same settings recorded, the same end and the same counts
        started = {name: pool.submit(door, "accelopt", {"task_dir": task, "run_dir": str(runs[name])}, shape)
                   for name, door in (("invoke", doors.invoke), ("dev", doors.dev), ("mcp", doors.mcp))}
        for name, answered in started.items():
            outcome, answer = answered.result()
            assert outcome == "ran", (name, answer)
        assert cli_run.result()[0] == "ran"
    recorded = {name: json.loads((run / "run.json").read_text())["context"] for name, run in runs.items()}
    summaries = {name: json.loads((run / "summary.json").read_text()) for name, run in runs.items()}
    for name in runs:
        assert recorded[name] == recorded["cli"], name  # the defaults too: K 1 under the tuner, everywhere
        for key in ("stop_reason", "iteration", "candidates_evaluated", "statuses"):
            assert summaries[name][key] == summaries["cli"][key], (name, key)
    assert recorded["cli"]["samples"] == 1 and "baseline" not in json.dumps(summaries["cli"]["statuses"])

    # the check graph
    kernel = str(TASKS / "softmax" / "baseline.py")
    valid = {"task_dir": task, "kernel": kernel, "device": "cpu"}
    api_checks = {"unknown key": ({**valid, "kernal": kernel}, "unknown input key 'kernal' of the check graph (did "
                                                                "you mean 'kernel'?)"),
                  "wrong type": ({**valid, "timeout_s": "fast"}, "timeout_s 'fast': input should be a valid number"),
                  "out of range": ({**valid, "timeout_s": -1}, "timeout_s -1: must be greater than 0"),
                  "missing": ({"task_dir": task, "device": "cpu"}, "no kernel in the check's input")}
    cli_checks = {"unknown key": (["check", task, kernel, "--device", "cpu", "--kernal", kernel], "no such option: --kernal"),
                  "wrong type": (["check", task, kernel, "--device", "cpu", "--timeout", "fast"],
                                 "invalid value for '--timeout'"),
                  "out of range": (["check", task, kernel, "--device", "cpu", "--timeout", "-1"],
                                   "--timeout -1: must be greater than 0"),
                  "missing": (["check", task, "--device", "cpu"], "missing argument 'kernel'")}
    with ThreadPoolExecutor(8) as pool:
        cli_answers = {case: pool.submit(doors.cli, *args) for case, (args, _) in cli_checks.items()}
        cli_check = pool.submit(doors.cli, "check", task, kernel, "--device", "cpu")
        for case, (given, expected) in api_checks.items():
            for door in (doors.invoke, doors.dev, doors.mcp):
                outcome, message = door("check", given)
                said = ("unknown argument 'kernal' of the check tool (did you mean 'kernel'?)"  # MCP's word
                        if door == doors.mcp and case == "unknown key" else expected)
                assert outcome == "refused" and str(message).startswith(said), (case, door.__name__, message)
        for case, (_, expected) in cli_checks.items():
            outcome, message = cli_answers[case].result()
            assert outcome == "refused" and expected in message, (case, message)
        verdicts = [doors.invoke("check", valid), doors.dev("check", valid), doors.mcp("check", valid)]
        assert all(outcome == "ran" for outcome, _ in verdicts) and cli_check.result()[0] == "ran"
    assert verdicts[0][1]["status"] == verdicts[1][1]["status"] == verdicts[2][1]["status"] == "verified"


def test_a_check_on_a_thread_never_judges_the_last_checks_kernel(dev_server, tmp_path):
    """On one SDK thread, a second check with `kernal` misspelt judged the previous run's kernel
    (the state kept it, the unknown key was dropped): now it is refused, and so is a check that
    leaves the kernel out."""
    from langgraph_sdk import get_sync_client

    url, _, _ = dev_server
    client = get_sync_client(url=url)
    thread = client.threads.create()["thread_id"]
    task, kernel = str(TASKS / "softmax"), str(TASKS / "softmax" / "baseline.py")
    first = client.runs.wait(thread, "check", input={"task_dir": task, "kernel": kernel, "device": "cpu"})
    assert first["status"] == "verified"
    for given, expected in [({"task_dir": task, "kernal": str(tmp_path / "mine.py"), "device": "cpu"},
                             "unknown input key 'kernal' of the check graph (did you mean 'kernel'?)"),
                            ({"task_dir": task, "device": "cpu"}, "no kernel in the check's input")]:
        run = client.runs.create(thread, "check", input=given)
        answer = client.runs.join(thread, run["run_id"])
        assert client.runs.get(thread, run["run_id"])["status"] == "error", answer
        assert answer["__error__"]["message"].startswith(expected), answer


# ---------------------------------------------------------------- settings from the server's environment; failure is failure

SHAPE = {"beams": 1, "plans": 1, "iterations": 1, "device": "cpu", "use_memory": False, "llm_retry_wait_s": 0}


def test_the_servers_environment_names_the_model_and_a_failed_run_is_an_error_at_every_door(tmp_path, monkeypatch):
    """`ACCELOPT_MODEL` in the server's environment (as .env puts it there) is the model of a run
    that names none, at the SDK and MCP doors and in graph.invoke, and run.json says where it came
    from; a run whose model endpoint fails (it lists the model and answers 500) is an error at
    every door, not a finished run with the baseline as its result; a model the caller names
    wins over the environment's."""
    import asyncio

    from mcp import Client

    from accelopt.graph.builder import graph
    from accelopt.graph.doors import RunFailed
    from tests.openai_server import Answer, ScriptedOpenAIServer

    task = str(TASKS / "rmsnorm")
    with ScriptedOpenAIServer(lambda _: "no", then=Answer(500, "the model fell over"), models=["scripted"]) as llm:
        model = {"ACCELOPT_MODEL": "vllm:scripted", "ACCELOPT_BASE_URL": llm.url}
        with serving(tmp_path, **model) as (url, log, _):
            doors = Doors(url)
            outcome, answer = doors.dev("accelopt", {"task_dir": task, "run_dir": str(tmp_path / "dev")}, SHAPE,
                                        error="RunFailed")
            assert outcome == "refused" and "the model fell over" in answer and str(tmp_path / "dev") in answer

            async def agent():
                async with Client(f"{url}/mcp", read_timeout_seconds=600) as client:
                    return await client.call_tool("accelopt", {"task_dir": task, "run_dir": str(tmp_path / "mcp"),
                                                               "settings": SHAPE})

            failed = asyncio.run(agent())
            text = json.loads(failed.content[0].text)
            assert failed.is_error and text["error"] == "RunFailed" and "\n" not in text["message"], text
            assert "the model fell over" in text["message"]
            # the caller's model wins over the environment's
            ran = doors.dev("accelopt", {"task_dir": task, "run_dir": str(tmp_path / "tuner")}, {**SHAPE, "model": "tuner"})
            assert ran[0] == "ran" and ran[1]["stop_reason"] == "reached T=1 iterations"
            assert "Traceback" not in log.read_text()  # a failed run is one log line
        monkeypatch.setenv("ACCELOPT_MODEL", "vllm:scripted")  # graph.invoke, in this process's environment
        monkeypatch.setenv("ACCELOPT_BASE_URL", llm.url)
        with pytest.raises(RunFailed) as raised:
            graph.invoke({"task_dir": task, "run_dir": str(tmp_path / "invoke")}, context=SHAPE)
        assert raised.value.run_dir == str(tmp_path / "invoke")
        assert raised.value.stop_reason.startswith("model endpoint failed: ")
        assert sum(r["path"] == "/v1/chat/completions" for r in llm.requests) >= 3  # each door called it
    for door in ("dev", "mcp", "invoke"):
        meta = json.loads((tmp_path / door / "run.json").read_text())
        assert meta["context"]["model"] == "vllm:scripted" and meta["context"]["base_url"] == llm.url, door
        assert meta["sources"]["model"] == "$ACCELOPT_MODEL" and meta["sources"]["beams"] == "context", door
        assert meta["sources"]["fixes"] == "default"
    tuner = json.loads((tmp_path / "tuner" / "run.json").read_text())
    assert tuner["context"]["model"] == "tuner" and tuner["sources"]["model"] == "context"


def test_unknown_keys_are_refused_in_each_doors_word_and_logged_in_one_line(dev_server, tmp_path):
    """The HTTP door: a run request's misspelt field (`contxt` ran a default run, `inptu` got
    "Received no input for __start__") is refused, 422, naming it and the field meant. MCP: a
    misspelt argument names the argument meant. The check graph refuses a context at the Python
    and SDK doors. Each refusal is one log line, with no traceback."""
    import asyncio

    from mcp import Client

    url, log, _ = dev_server
    start = log.stat().st_size
    task = {"task_dir": str(TASKS / "softmax")}
    for body, word, meant in [({"assistant_id": "accelopt", "input": task, "contxt": {"beams": -1}}, "contxt", "context"),
                              ({"assistant_id": "accelopt", "inptu": task}, "inptu", "input")]:
        for path in ("/runs/wait", "/runs", f"/threads/{Doors(url).client.threads.create()['thread_id']}/runs/stream"):
            answer = httpx.post(f"{url}{path}", json=body, timeout=30)
            assert answer.status_code == 422, (path, answer.text)
            assert answer.json()["detail"].startswith(f"unknown field '{word}' of a run request (did you mean "
                                                      f"'{meant}'?)"), answer.text

    async def agent():
        async with Client(f"{url}/mcp", read_timeout_seconds=600) as client:
            return await client.call_tool("accelopt", {**task, "setings": {"beams": 1}})

    misspelt = asyncio.run(agent())
    message = json.loads(misspelt.content[0].text)["message"]
    assert misspelt.is_error and message.startswith("unknown argument 'setings' of the accelopt tool (did you mean "
                                                    "'settings'?): its arguments are task_dir, run_dir, settings")
    check = {**task, "kernel": str(TASKS / "softmax" / "baseline.py"), "device": "cpu"}
    expected = "unknown context key 'beams' of the check graph: it takes no context"
    for door in (Doors.invoke, Doors(url).dev):
        outcome, answer = door("check", check, {"beams": -1})
        assert outcome == "refused" and str(answer).startswith(expected), (door, answer)
    for _ in range(20):  # the server's last log lines
        written = log.read_bytes()[start:].decode(errors="replace")  # st_size counts bytes
        if written.count("run ended: ConfigError") >= 1:
            break
        time.sleep(0.5)
    assert "Traceback" not in written
    assert written.count("refused POST") == 6 and written.count("refused tools/call") == 1
    assert written.count("run ended: ConfigError") == 1
