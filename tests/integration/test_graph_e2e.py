"""The whole graph on the CPU interpreter with scripted replies: a good plan, a plan whose
kernel fails to compile and is repaired by the fixer, and a plan whose kernel is wrong."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from accelopt.evals.reporting.timeline import read_timeline
from accelopt.graph.builder import build_graph
from accelopt.nodes.context import RunContext
from accelopt.nodes.records import Candidate
from accelopt.tools import timeline
from tests.conftest import ROOT
from tests.scripted import GOOD, ScriptedChatModel, reply_for

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def runs_dir(tmp_path, monkeypatch):
    """A run given no run_dir gets a default one (runs/TASK-TIME): here under tmp_path."""
    monkeypatch.setenv("ACCELOPT_RUNS_DIR", str(tmp_path / "runs"))
    return tmp_path / "runs"


def test_graph_end_to_end(tmp_path, softmax_task):
    run_dir = tmp_path / "run"
    ctx = RunContext(beams=2, plans=4, samples=1, fixes=1, iterations=1, device="cpu",
                     memory_dir=str(tmp_path / "memory"), model="openai:scripted", learn_from_interpreter=True,
                     chat_models={"default": ScriptedChatModel(script=reply_for)})
    graph = build_graph().compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "e2e"}}
    out = graph.invoke({"task_dir": str(softmax_task), "run_dir": str(run_dir)}, config, context=ctx)
    cands = out["candidates"]
    undeclared = {k for c in cands.values() for k in c} - set(Candidate.__annotations__)
    assert not undeclared, f"candidate fields missing from nodes/records.py: {undeclared}"

    status = {cid: c["status"] for cid, c in cands.items()}
    # plan 0's kernel and the repair of plan 1's are one program: whichever branch claimed it first
    # (the branches run in parallel) is evaluated, the other is its duplicate
    first, second = sorted(("i1.m0.p0.k0", "i1.m0.p1.k0.f1"), key=lambda c: status.pop(c) != "verified")
    assert cands[first]["status"] == "verified" and cands[second]["status"] == "duplicate"
    assert cands[second]["duplicate_of"] == first
    assert status == {
        "baseline": "verified",
        "i1.m0.p1.k0": "compile_error",
        "i1.m0.p2.k0": "wrong_output",
        "i1.m0.p2.k0.f1": "duplicate",
        "i1.m0.p3.k0": "verified",
    }
    # No program is evaluated twice in a run: the repair of the broken kernel is plan 0's kernel, and
    # the fixer that cannot find the bug hands back the wrong kernel as it was.
    assert cands["i1.m0.p2.k0.f1"]["duplicate_of"] == "i1.m0.p2.k0"
    assert "workloads" not in cands[second]
    # The fix loop ran exactly once per failed kernel, and the repair is linked to its failure.
    assert cands["i1.m0.p1.k0.f1"]["fix_of"] == "i1.m0.p1.k0"
    assert cands["i1.m0.p1.k0.f1"]["fix_attempt"] == 1
    assert "SyntaxError" in cands["i1.m0.p1.k0"]["error"]
    assert "max abs err" in cands["i1.m0.p2.k0"]["error"]
    assert cands["i1.m0.p0.k0"]["source"] == GOOD

    # Elitist beam of width B over verified kernels only, best first.
    assert len(out["beam"]) == 2
    assert all(cands[b]["status"] == "verified" for b in out["beam"])
    # Interpreter timings are not performance: no child beats its parent there, and one leads the
    # beam only with a difference in work (every round 25% ahead); otherwise the baseline keeps
    # first place, whatever the child's median says.
    best = cands[out["beam"][0]]
    assert not any(c.get("beats_parent") or c.get("loses_to_parent") for c in cands.values())
    assert out["beam"][0] == "baseline" or best["versus"]["baseline"]["ci_low"] > 1.25
    assert cands[first]["speedup"] is not None and cands[first]["speedup_vs_parent"] is not None
    assert out["stop_reason"] == "reached T=1 iterations"

    # Token usage per role and per candidate.
    roles = [u["role"] for u in out["usage"]]
    assert roles.count("planner") == 1 and roles.count("executor") == 4 and roles.count("fixer") == 2
    assert {u["candidate_id"] for u in out["usage"] if u["role"] == "fixer"} == {"i1.m0.p1.k0.f1", "i1.m0.p2.k0.f1"}
    assert all(u["input_tokens"] > 0 for u in out["usage"])

    # The run directory holds every candidate, the best kernel and a summary.
    for cid, cand in cands.items():
        result = json.loads((run_dir / "candidates" / cid / "result.json").read_text())
        assert result["status"] == cand["status"]
        assert (run_dir / "candidates" / cid / "kernel.py").read_text() == cand["source"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["best_id"] == out["beam"][0]
    assert summary["candidates_evaluated"] == 4 and summary["statuses"]["duplicate"] == 2
    assert summary["timer"] == "interpreter_wall" and "not GPU performance" in summary["note"]
    # where the best stands against torch.compile: measured on a GPU only, and said so here
    assert "not timed on a GPU" in summary["versus_torch_compile"]["not_measured"]
    assert out["summary"]["versus_torch_compile"] == summary["versus_torch_compile"]
    assert not (run_dir / "torch_compile.json").exists()
    assert (run_dir / "best_kernel.py").read_text() == cands[out["beam"][0]]["source"]

    # where the seconds went: a span per real evaluation, per node call and per model call
    spans = timeline.read(run_dir)
    evaluated = sorted(cid for cid, c in cands.items() if c.get("source") and c["status"] != "duplicate")
    assert sorted(s["candidate"] for s in spans if s["kind"] == "eval") == evaluated
    assert {s["node"] for s in spans if s["kind"] == "node"} >= {"setup", "recall", "planner", "dispatch", "selector",
                                                                 "summarizer", "record", "standing"}
    assert {s["role"] for s in spans if s["kind"] == "llm"} >= {"planner", "executor"}
    found = read_timeline(run_dir)
    assert [p.label for p in found.iterations] == ["iteration 1"] and found.total.evaluations == len(evaluated)
    assert found.iterations[0].model_calls == len([s for s in spans if s["kind"] == "llm" and s["iteration"] == 1])

    # The 16x-redundant kernel is a measured regression (every round far behind: a difference in
    # work, learned from with --learn-from-interpreter): the summarizer stores it as a lesson to avoid.
    slow = cands["i1.m0.p3.k0"]
    assert slow["speedup_vs_parent"] < 1 / 1.15 and slow["versus"]["baseline"]["ci_high"] < 1 / 1.25
    negative = [i for i in out["insights"] if i["provenance"]["child_id"] == "i1.m0.p3.k0"]
    assert len(negative) == 1 and negative[0]["kind"] == "negative"
    assert negative[0]["title"] == "exp2 and 8 warps for row softmax"  # parsed from the summarizer reply
    assert negative[0]["evidence"]["timer"] == "interpreter_wall"
    assert roles.count("summarizer") == len(out["insights"]) == summary["insights"]
    from accelopt.memory.store import InsightStore

    stored = {i.id: i for i, _ in InsightStore(tmp_path / "memory").all()}
    assert negative[0]["id"] in stored and stored[negative[0]["id"]].kind == "negative"

    # A later run on a similar kernel (rmsnorm, another row reduction) recalls that lesson, and
    # its plans record which insights they were shown.
    later = RunContext(beams=1, plans=1, samples=1, fixes=0, iterations=1, device="cpu", model="tuner",
                       memory_dir=str(tmp_path / "memory"), learn_from_interpreter=True)
    graph = build_graph().compile(checkpointer=InMemorySaver())  # the state's plans and recalled, not the output's
    graph.invoke({"task_dir": str(ROOT / "evals" / "tasks" / "rmsnorm")}, {"configurable": {"thread_id": "later"}},
                 context=later)
    second = graph.get_state({"configurable": {"thread_id": "later"}}).values
    recalled = [i["id"] for i in second["recalled"]["baseline"]]
    # (Interpreter noise may add a positive pair whose scripted lesson reads the same; recall then
    # returns one of the two paraphrases, so any lesson of the first run counts.)
    assert set(recalled) & {i["id"] for i in out["insights"]}
    assert second["plans"][0]["insight_ids"] == recalled


def writing_takes_a_while(messages):
    """The scripted replies, a kernel's after 0.3 s: long enough that a planner sent beside the
    kernels is seen to start before they are written."""
    if "accelopt executor" in str(messages[0].content):
        time.sleep(0.3)
    return reply_for(messages)


def test_the_overlap_schedule_fixes_beside_the_next_iteration_and_loses_nothing(tmp_path, softmax_task):
    """--schedule overlap against the published one, same scripted replies, T=2: iteration 1's
    broken and wrong kernels are fixed beside iteration 2's first attempts (their fixes carry
    iteration 2 and compete in its selection), iteration 1's lessons are distilled beside
    iteration 2's planners, and the run ends with the same candidates, statuses and lessons.
    --schedule pipeline (T=3) plans iteration 3 beside iteration 2's kernels and evaluates each once."""
    runs = {}
    for schedule in ("beam", "overlap", "pipeline"):
        ctx = RunContext(beams=2, plans=4, samples=1, fixes=1, iterations=3 if schedule == "pipeline" else 2,
                         device="cpu", use_memory=False,
                         schedule=schedule, learn_from_interpreter=True, model="openai:scripted",
                         chat_models={"default": ScriptedChatModel(script=reply_for if schedule != "pipeline"
                                                                   else writing_takes_a_while)})
        run_dir = tmp_path / schedule
        out = build_graph().compile(checkpointer=InMemorySaver()).invoke(
            {"task_dir": str(softmax_task), "run_dir": str(run_dir)}, {"configurable": {"thread_id": schedule}},
            context=ctx)
        runs[schedule] = (out, run_dir)
    (beam, _), (overlap, run_dir) = runs["beam"], runs["overlap"]
    def statuses(out: dict) -> dict:
        """By candidate; plan 0's kernel and the repair of plan 1's are one program, and under the
        published schedule whichever branch claimed it first was evaluated (the other is its duplicate)"""
        found = {cid: c["status"] for cid, c in out["candidates"].items()}
        found["same program"] = sorted(found.pop(c) for c in ("i1.m0.p0.k0", "i1.m0.p1.k0.f1"))
        return found

    assert statuses(overlap) == statuses(beam)
    assert overlap["candidates"]["i1.m0.p1.k0.f1"]["duplicate_of"] == "i1.m0.p0.k0"  # the fix came an iteration later
    assert overlap["summary"]["statuses"] == beam["summary"]["statuses"] and overlap["stop_reason"] == beam["stop_reason"]
    assert overlap["insights"] and beam["insights"]  # lessons under both (which pair: the race above)
    for fix, failed in (("i1.m0.p1.k0.f1", "i1.m0.p1.k0"), ("i1.m0.p2.k0.f1", "i1.m0.p2.k0")):
        assert overlap["candidates"][fix]["fix_of"] == failed and beam["candidates"][fix]["fix_of"] == failed
        assert overlap["candidates"][fix]["iteration"] == 2 and beam["candidates"][fix]["iteration"] == 1
    assert json.loads((run_dir / "run.json").read_text())["context"]["schedule"] == "overlap"
    # iteration 1's lessons ran beside iteration 2's planners: after its recall, before its dispatch
    spans = [s for s in timeline.read(run_dir) if s["kind"] == "node"]
    lessons = next(s for s in spans if s["node"] == "summarizer" and s["iteration"] == 1)
    recall2 = next(s for s in spans if s["node"] == "recall" and s["iteration"] == 2)
    dispatch2 = next(s for s in spans if s["node"] == "dispatch" and s["iteration"] == 2)
    assert recall2["end"] <= lessons["start"] and lessons["end"] <= dispatch2["start"] + 1e-3
    # and the timeline's iterations stay apart (the lessons bound neither)
    found = read_timeline(run_dir)
    assert [p.label for p in found.iterations] == ["iteration 1", "iteration 2"]
    assert found.iterations[0].path_s["lessons"] == 0

    # pipeline: iterations 1 and 2 as under overlap; iteration 3 is planned while iteration 2's
    # kernels run, from the beam iteration 2 began with; iteration 2's lessons run beside iteration 3
    pipeline, run_dir = runs["pipeline"]
    cands = pipeline["candidates"]
    assert pipeline["stop_reason"] == "reached T=3 iterations" and pipeline["insights"]
    for fix, failed in (("i1.m0.p1.k0.f1", "i1.m0.p1.k0"), ("i1.m0.p2.k0.f1", "i1.m0.p2.k0")):
        assert cands[fix]["fix_of"] == failed and cands[fix]["iteration"] == 2
    spans = timeline.read(run_dir)
    nodes = [s for s in spans if s["kind"] == "node"]
    recall = {s["iteration"]: s for s in nodes if s["node"] == "recall"}
    planned = {i: [s for s in nodes if s["node"] == "planner" and s["iteration"] == i] for i in (2, 3)}
    assert min(s["start"] for s in planned[2]) >= recall[2]["end"]  # the second plans when it begins
    of2 = {cid for cid, c in cands.items() if c.get("iteration") == 2}  # its kernels and the fixes beside them
    work2 = [s for s in spans if (s["kind"] == "eval" and s["candidate"] in of2)
             or (s["kind"] == "llm" and s.get("iteration") == 2 and s.get("role") in ("executor", "fixer"))]
    assert planned[3] and max(s["end"] for s in planned[3]) <= recall[3]["start"]  # made before iteration 3 began
    assert min(s["start"] for s in planned[3]) < max(s["end"] for s in work2)  # beside iteration 2's kernels
    assert not [s for s in nodes if s["node"] == "dispatch" and s["iteration"] == 3]  # no planner on its path
    beam2 = pipeline["history"][0]["beam"]  # iteration 1's record: the beam iteration 2 began with
    assert {c["parent_id"] for cid, c in cands.items() if cid.startswith("i3.") and not c.get("fix_of")} <= set(beam2)
    lessons = next(s for s in nodes if s["node"] == "summarizer" and s["iteration"] == 2)
    assert recall[3]["end"] <= lessons["start"]
    evaluated = sorted(cid for cid, c in cands.items() if c.get("source") and c["status"] != "duplicate")
    assert sorted(s["candidate"] for s in spans if s["kind"] == "eval") == evaluated  # each once
    found = read_timeline(run_dir)
    assert [p.label for p in found.iterations] == ["iteration 1", "iteration 2", "iteration 3"]
    assert found.iterations[2].path_s["plans"] == 0  # its planners ran in iteration 2's window
    kept = [json.loads(line)["id"] for line in (run_dir / "plans.jsonl").read_text().splitlines()]
    assert len(kept) == len(set(kept)) and {i[:3] for i in kept} == {"i1.", "i2.", "i3."}  # each plan once


def test_no_code_reply_is_a_failed_candidate_the_fixer_can_repair(tmp_path, softmax_task):
    def script(messages):
        role = "executor" if "accelopt executor" in str(messages[0].content) else None
        if role == "executor":
            return "I would rather describe the kernel than write it."
        return reply_for(messages) if "accelopt fixer" not in str(messages[0].content) else f"```python\n{GOOD}```"

    ctx = RunContext(beams=1, plans=1, samples=1, fixes=1, iterations=1, device="cpu", use_memory=False,
                     model="openai:scripted", chat_models={"default": ScriptedChatModel(script=script)})
    out = build_graph().compile().invoke({"task_dir": str(softmax_task)}, context=ctx)
    first, fixed = out["candidates"]["i1.m0.p0.k0"], out["candidates"]["i1.m0.p0.k0.f1"]
    assert first["status"] == "no_code" and "no complete kernel" in first["error"]
    assert fixed["status"] == "verified"


def test_a_task_without_baseline_starts_from_its_reference(tmp_path, softmax_task):
    (softmax_task / "baseline.py").unlink()
    prompts = []

    def script(messages):
        prompts.append(str(messages[-1].content))
        return reply_for(messages)

    ctx = RunContext(beams=1, plans=1, samples=1, fixes=0, iterations=1, device="cpu", use_memory=False,
                     model="openai:scripted", chat_models={"default": ScriptedChatModel(script=script)})
    graph = build_graph().compile(checkpointer=InMemorySaver())
    out = graph.invoke({"task_dir": str(softmax_task), "run_dir": str(tmp_path / "run")},
                       {"configurable": {"thread_id": "scratch"}}, context=ctx)
    baseline, first = out["candidates"]["baseline"], out["candidates"]["i1.m0.p0.k0"]
    # The reference itself is measured as the starting point, and the first kernel against it.
    assert baseline["kind"] == "reference" and baseline["status"] == "verified"
    assert "_reference.reference(*inputs)" in baseline["source"]
    assert first["status"] == "verified" and first["source"] == GOOD and first["speedup"] > 0
    assert "starts from scratch" in prompts[0] and "_reference" not in prompts[0]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["baseline_kind"] == "reference"


def test_from_scratch_with_the_tuner_stops_with_a_reason(softmax_task):
    (softmax_task / "baseline.py").unlink()
    ctx = RunContext(iterations=1, device="cpu", use_memory=False)
    out = build_graph().compile().invoke({"task_dir": str(softmax_task)}, context=ctx)
    assert "only retunes existing kernels" in out["stop_reason"] and "--device cpu was given" in out["stop_reason"]
    assert not out.get("beam")


def test_a_run_without_run_dir_leaves_a_run_directory_the_cli_resumes(runs_dir):
    """Studio and a programmatic invoke name no run_dir: setup picks the CLI's default
    (runs/TASK-TIME), writes run.json there and keeps the path in the state, so the best kernel,
    summary and caches are on disk and `accelopt resume DIR --restart` replays the run."""
    task = ROOT / "evals" / "tasks" / "rmsnorm"
    ctx = RunContext(beams=1, plans=1, samples=1, fixes=0, iterations=1, device="cpu", use_memory=False)
    out = build_graph().compile().invoke({"task_dir": str(task)}, context=ctx)
    run_dir = Path(out["run_dir"])
    assert run_dir.parent == runs_dir.resolve() and run_dir.name.startswith("rmsnorm-")
    # The output schema: what a user reads, no planner-internal keys.
    assert out["best_id"] == out["beam"][0] == out["summary"]["best_id"] and out["stop_reason"]
    assert not {"plans", "recalled", "started_at"} & set(out)
    assert json.loads((run_dir / "summary.json").read_text())["best_id"] == out["best_id"]
    assert (run_dir / "best_kernel.py").read_text() == out["candidates"][out["best_id"]]["source"]
    assert (run_dir / "candidates" / "i1.m0.p0.k0" / "result.json").is_file()
    assert any((run_dir / "cache").rglob("*.json"))
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["task_dir"] == str(task.resolve()) and meta["context"]["iterations"] == 1
    assert "chat_models" not in meta["context"]

    # The CLI resumes it: from scratch in the same directory (Studio's checkpoints live in the
    # server), every evaluation replayed from the run's cache, none measured again.
    real = (run_dir / "evaluations.jsonl").read_text().count("\n")
    proc = subprocess.run([sys.executable, "-m", "accelopt", "resume", str(run_dir), "--restart"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (run_dir / "evaluations.jsonl").read_text().count("\n") == real
    assert json.loads((run_dir / "summary.json").read_text())["best_id"] == out["best_id"]
