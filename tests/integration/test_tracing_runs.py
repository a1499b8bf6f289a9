"""What a LangSmith user sees of a run, against a stand-in endpoint on 127.0.0.1: every run ends
(Ctrl-C included), an unreachable endpoint costs seconds and one line, a failed kernel is a run's
error, every run carries the task and the candidate it works on, payloads stay compact with a
LangSmith client made before the graph's, and model calls go whole.

Each case runs in a process of its own: LangSmith's client and settings are the process's."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time

from accelopt.tools.tracing import FLUSH_S, MAX_STRING
from tests.conftest import ROOT, TASKS
from tests.langsmith_endpoint import LangSmithEndpoint, closed_port, tracing_env

# A graph whose second node waits in a traced call: Ctrl-C finds the root, the node and the call open.
WAITING_GRAPH = """
import sys, time
from typing_extensions import TypedDict
from rich.console import Console
from accelopt.tools.tracing import configure_tracing
configure_tracing()
from langgraph.graph import END, START, StateGraph
from langsmith import traceable
from accelopt.cli.interrupt import continue_hint_on_interrupt

class State(TypedDict, total=False):
    task_dir: str
    step: int

@traceable(name="waiting-call")
def wait():
    print("waiting", flush=True)
    time.sleep(120)

builder = StateGraph(State)
builder.add_node("first", lambda state: {"step": 1})
builder.add_node("waits", lambda state: wait() or {"step": 2})
builder.add_edge(START, "first")
builder.add_edge("first", "waits")
builder.add_edge("waits", END)
with continue_hint_on_interrupt("accelopt resume RUN", Console()):
    builder.compile(name="waiting-graph").invoke({"task_dir": sys.argv[1]})
"""

# A few traced calls, then the end of a CLI run (graph/driver.py: flush_traces) and the exit.
TRACED_CALLS = """
import time
from accelopt.tools.tracing import configure_tracing, flush_traces
configure_tracing()
from langsmith import traceable

@traceable(name="outer")
def outer():
    return [inner(i) for i in range(3)]

@traceable(name="inner")
def inner(i):
    return i

outer()
print("flushing", time.monotonic(), flush=True)
flush_traces()
"""

# graph.invoke on the real graph (scripted model replies, the harness's fields without a judge),
# after a user's own @traceable call made the process's LangSmith client.
GRAPH_INVOKE = """
import json, re, sys
from pathlib import Path
from langsmith import traceable

@traceable(name="user-call")
def user_call():
    return "before the graph"

user_call()

from langgraph.checkpoint.memory import InMemorySaver
import accelopt.nodes.services as services
from accelopt.graph.builder import build_graph
from accelopt.nodes.context import RunContext
from accelopt.tools.tracing import flush_traces
from tests.scripted import PLANS, ScriptedChatModel, fenced

task_dir, run_dir = sys.argv[1], sys.argv[2]
BASELINE = (Path(task_dir) / "baseline.py").read_text()
BAD = BASELINE.replace("acc += x * x", "acc += x * xx")
FIXED = BASELINE.replace("num_warps=4", "num_warps=8")
TRACEBACK = ("Traceback (most recent call last):\\n"
             + "".join(f'  File "/sandbox/kernel.py", line {i}, in frame_{i}\\n    call_{i}()\\n' for i in range(60))
             + "triton.runtime.errors.InterpreterError: NameError(\\"name 'xx' is not defined\\")")


def fake_measure(task, source, ctx, device, compare, baseline, parent, trusted, on_node=None):
    failed = "xx" in source
    return {"status": "runtime_error" if failed else "verified", "error": TRACEBACK if failed else None,
            "device": "cpu", "device_name": None, "timer": None if failed else "interpreter_wall", "flags": [],
            "workloads": {} if failed else {"w": {"median_us": 1.0, "iqr_us": 0.0, "samples": 1}},
            "eval_s": 0.01, "versus": {}, "speedup": None if failed else 1.0, "findings": [],
            "evidence": [] if failed else ["correct on 1 fresh input set"],
            "kernels_seen": [], "audit": None, "speedup_vs_parent": None, "beats_parent": False,
            "loses_to_parent": False, "pct_peak": None, "pct_achievable": None, "pct_of_copy": None}


def reply(messages):
    role = re.search(r"You are the accelopt (\\w+)", str(messages[0].content)).group(1)
    return {"planner": PLANS, "executor": fenced(BAD), "fixer": fenced(FIXED)}.get(role, "```json\\n{}\\n```")


services._measure = fake_measure  # the judge takes seconds per kernel; the spans around it are real
shape = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}  # e.g. another schedule
ctx = RunContext(**{"beams": 1, "plans": 1, "samples": 1, "fixes": 1, "iterations": 1, **shape}, device="cpu",
                 use_memory=False, versus_torch_compile=False, profile=False, model="openai:scripted",
                 chat_models={"default": ScriptedChatModel(script=reply)})
out = build_graph().compile(checkpointer=InMemorySaver()).invoke(
    {"task_dir": task_dir, "run_dir": run_dir}, {"configurable": {"thread_id": "t"}}, context=ctx)
print(json.dumps({k: c["status"] for k, c in out["candidates"].items()}), flush=True)
flush_traces()
"""


def _script(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _env(url: str) -> dict[str, str]:
    return tracing_env(url, PYTHONPATH=str(ROOT))


def _interrupt(script: str, url: str) -> tuple[int, str, float]:
    """Start the waiting graph and Ctrl-C it once its call waits: the exit code, stderr, and the
    seconds from the signal to the exit."""
    proc = subprocess.Popen([sys.executable, script, str(TASKS / "rmsnorm")], env=_env(url), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "waiting", proc.communicate()
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    return proc.returncode, err, time.monotonic() - sent


def test_ctrl_c_ends_every_open_run_as_interrupted_then_exits_130(tmp_path):
    script = _script(tmp_path, "waiting_graph.py", WAITING_GRAPH)
    with LangSmithEndpoint() as endpoint:
        code, err, _ = _interrupt(script, endpoint.url)
        runs = endpoint.runs()
    assert code == 130, err
    assert "interrupted: continue with `accelopt resume RUN`" in err and "not sent" not in err, err
    by_name = {r["name"]: r for r in runs.values()}
    assert set(by_name) == {"waiting-graph", "first", "waits", "waiting-call"}, by_name.keys()
    assert all(r.get("end_time") for r in runs.values()), "a run left open shows as running forever"
    assert {n for n, r in by_name.items() if r.get("error") == "interrupted"} == {"waiting-graph", "waits",
                                                                                  "waiting-call"}
    assert by_name["first"].get("error") is None  # it had ended before the Ctrl-C


def test_an_unreachable_endpoint_costs_seconds_and_one_line(tmp_path):
    """An endpoint that accepts and never answers, and a port nobody listens on: at the end of a
    run and on Ctrl-C, the process waits FLUSH_S at most and says so in one line."""
    calls = _script(tmp_path, "traced_calls.py", TRACED_CALLS)
    waiting = _script(tmp_path, "waiting_graph.py", WAITING_GRAPH)
    with LangSmithEndpoint(answering=False) as silent:
        refused = f"http://127.0.0.1:{closed_port()}"
        ends = {url: subprocess.Popen([sys.executable, calls], env=_env(url), cwd=ROOT, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for url in (silent.url, refused)}
        interrupted = _interrupt(waiting, silent.url)
        for url, proc in ends.items():
            flushing = float(proc.stdout.readline().split()[1])
            _, err = proc.communicate(timeout=60)
            waited = time.monotonic() - flushing  # the flush and the exit: the run itself is not counted
            assert proc.returncode == 0, err
            assert waited < FLUSH_S + 3, f"{url}: {waited:.1f} s from the flush to the exit"
            lines = [line for line in err.splitlines() if line.strip()]
            assert len(lines) == 1 and lines[0].startswith("LangSmith: 4 runs not sent: "), err
            assert url in lines[0] and len(lines[0]) < 200, err
    code, err, waited = interrupted
    assert code == 130 and waited < FLUSH_S + 3, (waited, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[0].startswith("interrupted: continue with") and len(lines) == 2, err
    assert lines[1] == f"LangSmith: 4 runs not sent: endpoint {silent.url} did not answer within {FLUSH_S:g} s", err


def test_graph_invoke_traces_are_complete_findable_and_compact(tmp_path):
    """graph.invoke (no CLI metadata), with a LangSmith client made before the graph was imported."""
    task = tmp_path / "rmsnorm"
    shutil.copytree(TASKS / "rmsnorm", task)
    baseline = (task / "baseline.py").read_text()
    assert len(baseline) > MAX_STRING  # else "no whole copy" says nothing
    script = _script(tmp_path, "graph_invoke.py", GRAPH_INVOKE)
    with LangSmithEndpoint() as endpoint:
        proc = subprocess.run([sys.executable, script, str(task), str(tmp_path / "run")], env=_env(endpoint.url),
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        runs = endpoint.runs()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == {"baseline": "verified", "i1.m0.p0.k0": "runtime_error",
                                                       "i1.m0.p0.k0.f1": "verified"}
    graph_runs = [r for r in runs.values() if r["name"] != "user-call"]
    assert len(graph_runs) > 20 and all(r.get("end_time") for r in runs.values())
    meta = {r["id"]: r["extra"]["metadata"] for r in graph_runs}
    # 5. every run of the graph run carries the task; the runs about one candidate carry its id
    assert all(m.get("task") == "rmsnorm" for m in meta.values()), [r["name"] for r in graph_runs
                                                                     if meta[r["id"]].get("task") != "rmsnorm"]
    named = {}
    for r in graph_runs:
        named.setdefault(r["name"], []).append(meta[r["id"]].get("candidate_id"))
    assert named["executor"] == named["executor-policy"] == named["executor-llm"] == ["i1.m0.p0.k0"]
    assert named["fixer"] == named["fixer-policy"] == named["fixer-llm"] == ["i1.m0.p0.k0.f1"]
    assert sorted(named["profiler"]) == ["i1.m0.p0.k0", "i1.m0.p0.k0.f1"]
    assert sorted(named["harness"]) == ["baseline", "i1.m0.p0.k0", "i1.m0.p0.k0.f1"]
    assert named["candidate"] == ["i1.m0.p0.k0"] * 2  # the graph's node and the subgraph's own run
    assert named["planner-llm"] == named["planner-policy"] == ["baseline"]  # the beam member planned for
    # 3. the failed kernel is the error of its profiler and harness runs, ending with the exception
    failed = {r["name"] for r in graph_runs if r.get("error")}
    assert failed == {"profiler", "harness"}, failed
    for r in graph_runs:
        if r.get("error"):
            assert meta[r["id"]]["candidate_id"] == "i1.m0.p0.k0"
            assert r["error"].startswith("runtime_error: ") and r["error"].endswith(
                "NameError(\"name 'xx' is not defined\")"), r["error"][-200:]
    # 3. model calls go whole: each prompt carries its kernel (the fixer's, the failed one)
    kernels = {"baseline": baseline, "bad": baseline.replace("acc += x * x", "acc += x * xx"),
               "fixed": baseline.replace("num_warps=4", "num_warps=8")}

    def holds(run: dict, kernel: str) -> bool:
        return json.dumps(kernels[kernel])[1:-1] in json.dumps([run.get("inputs"), run.get("outputs")])

    llm = {r["name"]: r for r in graph_runs if r["run_type"] == "llm"}
    assert set(llm) == {"planner-llm", "executor-llm", "fixer-llm"}
    assert holds(llm["planner-llm"], "baseline") and holds(llm["executor-llm"], "baseline")
    assert holds(llm["fixer-llm"], "bad") and holds(llm["fixer-llm"], "fixed")  # the prompt and the reply
    # 4. state carries no whole kernel: trimming holds with a client made before the graph's
    whole = [(r["name"], k) for r in graph_runs if r["run_type"] != "llm" for k in kernels if holds(r, k)]
    assert not whole, f"runs carrying a whole kernel: {whole}"
    assert "chars, sha256" in json.dumps([r.get("inputs") for r in graph_runs])


def test_a_model_call_made_under_a_quorum_stays_in_its_branchs_trace(tmp_path):
    """--quorum runs a kernel's model call in a thread of its own (tools/inflight.py): its run is
    still the child of the policy run that asked it, in the one trace of the graph run."""
    task = tmp_path / "rmsnorm"
    shutil.copytree(TASKS / "rmsnorm", task)
    script = _script(tmp_path, "graph_invoke.py", GRAPH_INVOKE)
    shape = json.dumps({"iterations": 2, "schedule": "overlap", "quorum": 1.0})
    with LangSmithEndpoint() as endpoint:
        proc = subprocess.run([sys.executable, script, str(task), str(tmp_path / "run"), shape], env=_env(endpoint.url),
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        runs = endpoint.runs()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    graph_runs = [r for r in runs.values() if r["name"] != "user-call"]
    assert len({r["trace_id"] for r in graph_runs}) == 1 and all(r.get("end_time") for r in graph_runs)
    for r in graph_runs:
        assert r.get("parent_run_id") is None or str(r["parent_run_id"]) in runs, r["name"]
    (asked,) = [r for r in graph_runs if r["name"] == "executor-llm" and r["extra"]["metadata"].get("iteration") == 1]
    assert runs[str(asked["parent_run_id"])]["name"] == "executor-policy"
