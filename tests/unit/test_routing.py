"""The graph's edges: fan-outs and the conditional edges of the fix loop and the outer loop."""

from types import SimpleNamespace

import pytest
from langgraph.graph import END

from accelopt.graph.routing import after_profiler, after_record, after_setup, to_planners, to_samples
from accelopt.nodes.context import RunContext


def runtime(**kw):
    """A node's runtime; beam unless a test names its schedule (pipeline is the default)."""
    return SimpleNamespace(context=RunContext(**{"schedule": "beam", **kw}))


def cand(cid, status="verified", parent=None):
    return {"id": cid, "status": status, "source": f"# {cid}", "parent_id": parent, "speedup": 1.0}


def test_setup_and_summarizer_stop_only_on_a_reason():
    assert after_setup({"stop_reason": "baseline broken"}) == END
    assert after_setup({"stop_reason": None}) == "recall"
    assert after_record({"stop_reason": "reached T"}) == "standing"
    assert after_record({}) == "recall"


def test_one_planner_branch_per_beam_member_with_its_own_recall():
    state = {"task_dir": "t", "run_dir": None, "iteration": 2, "beam": ["a", "b"],
             "candidates": {"a": cand("a"), "b": cand("b"), "baseline": cand("baseline")},
             "recalled": {"b": [{"title": "lesson"}]}}
    sends = to_planners(state, runtime())
    assert [s.node for s in sends] == ["planner", "planner"]
    assert [s.arg["member"]["id"] for s in sends] == ["a", "b"]
    assert [s.arg["member_index"] for s in sends] == [0, 1]
    assert sends[0].arg["recalled"] == [] and sends[1].arg["recalled"] == [{"title": "lesson"}]


def test_k_samples_per_plan_and_the_selector_when_no_plan_came():
    state = {"task_dir": "t", "run_dir": None, "iteration": 1, "baseline_id": "baseline",
             "candidates": {"baseline": cand("baseline"), "a": cand("a")},
             "plans": [{"id": "i1.m0.p0", "parent_id": "a", "text": "x"},
                       {"id": "i1.m0.p1", "parent_id": "baseline", "text": "y"}]}
    sends = to_samples(state, runtime(samples=3, model="vllm:coder"))
    assert len(sends) == 6 and {s.node for s in sends} == {"candidate"}
    assert [s.arg["sample"] for s in sends[:3]] == [0, 1, 2]
    assert sends[0].arg["parent"]["id"] == "a" and sends[3].arg["parent"]["id"] == "baseline"
    assert all(s.arg["baseline"]["id"] == "baseline" for s in sends)
    assert to_samples({**state, "plans": []}, runtime(samples=3, model="vllm:coder")) == "selector"
    # the tuner writes the same kernel for every sample: one per plan, however the context was made
    # (Studio's form defaults K to 2; the CLI already chose 1)
    tuned = to_samples(state, runtime(samples=3))
    assert [s.arg["sample"] for s in tuned] == [0, 0] and len({s.arg["plan"]["id"] for s in tuned}) == 2


@pytest.mark.parametrize("status, fixes, F, autotune, expected", [
    ("verified", 0, 2, 0, END),
    ("verified", 0, 2, 3, "autotune"),
    ("compile_error", 0, 2, 0, "fixer"),
    ("compile_error", 2, 2, 0, END),        # F fixes spent
    ("wrong_output", 1, 2, 0, "fixer"),
    ("no_code", 0, 1, 0, "fixer"),
    ("cheat_suspected", 0, 2, 0, "fixer"),  # the fixer is told what the evidence showed
    ("llm_error", 0, 2, 0, END),            # the endpoint failed: nothing to repair
])
def test_the_fix_loop(status, fixes, F, autotune, expected):
    state = {"current": {"status": status}, "fixes": fixes}
    assert after_profiler(state, runtime(fixes=F, autotune=autotune, model="vllm:coder")) == expected


def test_the_tuner_does_not_fix_a_reply_with_no_code():
    """The tuner fixes by undoing a plan's launch moves: an attempt without a kernel leaves it
    nothing to undo, so the fixer would only write another no_code attempt."""
    state = {"current": {"status": "no_code"}, "fixes": 0}
    assert after_profiler(state, runtime(fixes=2)) == END
    assert after_profiler(state, runtime(fixes=2, role_models={"fixer": {"model": "vllm:coder"}})) == "fixer"
    failed = {"current": {"status": "compile_error"}, "fixes": 0}
    assert after_profiler(failed, runtime(fixes=2)) == "fixer"  # a failed launch config: the tuner backs off


def test_the_samples_sent_are_those_the_budget_pays_for():
    from accelopt.tools.budget import ledger

    usage = [{"role": "planner", "input_tokens": 300, "output_tokens": 100, "cost_usd": 0.0, "iteration": 1},
             {"role": "executor", "input_tokens": 400, "output_tokens": 100, "cost_usd": 0.0, "iteration": 1}]
    state = {"task_dir": "t", "run_dir": "budget-run", "iteration": 2, "baseline_id": "baseline",
             "candidates": {"baseline": cand("baseline")}, "usage": usage,
             "plans": [{"id": f"i2.m0.p{j}", "parent_id": "baseline", "text": "x"} for j in range(3)]}
    # 900 spent of 2400: three executor calls of 500 fit, of the six asked for; one sample of every plan first
    llm = {"model": "vllm:coder"}
    sends = to_samples(state, runtime(samples=2, max_tokens=2400, **llm))
    paid = [(s.arg["plan"]["id"], s.arg["sample"]) for s in sends if not s.arg.get("unpaid")]
    assert paid == [("i2.m0.p0", 0), ("i2.m0.p1", 0), ("i2.m0.p2", 0)]
    # the rest are sent to be recorded not_sent, with why, and make no call: no plan's kernel is dropped unsaid
    unpaid = [s.arg for s in sends if s.arg.get("unpaid")]
    assert [(u["plan"]["id"], u["sample"]) for u in unpaid] == [("i2.m0.p0", 1), ("i2.m0.p1", 1), ("i2.m0.p2", 1)]
    assert unpaid[0]["unpaid"].startswith("not sent: the budget left (1,500 tokens) does not pay for another")
    assert ledger("budget-run").promised == 3  # the paid kernels come before any plan ahead
    assert len(to_samples(state, runtime(samples=2, **llm))) == 6
    assert all(s.arg.get("unpaid") for s in to_samples(state, runtime(samples=2, max_tokens=1300, **llm)))
    ledger("budget-run").fail("executor model x at y: 401 Unauthorized — check the API key")
    assert to_samples(state, runtime(samples=2, **llm)) == "selector"  # a fatal error: straight to the selector


def test_each_iteration_syncs_the_run_ledger_from_the_state():
    from accelopt.tools.budget import ledger

    run = ledger("sync-run")
    run.fail("a fatal error of an earlier run in this process")
    state = {"task_dir": "t", "run_dir": "sync-run", "iteration": 1, "beam": ["baseline"],
             "candidates": {"baseline": cand("baseline")}, "recalled": {},
             "usage": [{"role": "planner", "input_tokens": 30, "output_tokens": 12, "cost_usd": 0.5}]}
    to_planners(state, runtime(max_tokens=100, max_cost_usd=2.0))
    assert run.fatal is None and (run.spent.tokens, run.spent.cost_usd) == (42, 0.5)
    assert (run.limits.max_tokens, run.limits.max_cost_usd) == (100, 2.0)


# ---------------------------------------------------------------- the overlap schedule

def overlap_state(iteration=2, pending=()):
    plans = [{"id": f"i{iteration}.m0.p0", "parent_id": "a", "text": "x"}]
    return {"task_dir": "t", "run_dir": None, "iteration": iteration, "baseline_id": "baseline",
            "candidates": {"baseline": cand("baseline"), "a": cand("a"), "i1.m0.p1.k0": cand("i1.m0.p1.k0", "compile_error")},
            "plans": plans, "pending_fixes": list(pending)}


def test_overlap_defers_a_failed_first_attempts_fix_to_the_next_iteration_but_the_last():
    from accelopt.graph.routing import entry

    failed = {**cand("i1.m0.p1.k0", "compile_error", parent="a"), "fix_attempt": 0, "plan_id": "i1.m0.p1"}
    pending = [{"failed": failed, "plan": {"id": "i1.m0.p1", "parent_id": "a", "text": "y"}}]
    llm = {"model": "vllm:coder", "samples": 1, "iterations": 3}
    sends = to_samples(overlap_state(2, pending), runtime(schedule="overlap", **llm))
    fix, first = sends  # the older fix first, then the iteration's kernel
    assert entry(fix.arg) == "fixer" and fix.arg["current"]["id"] == "i1.m0.p1.k0" and fix.arg["fixes"] == 0
    assert fix.arg["iteration"] == 2 and fix.arg["plan"]["id"] == "i1.m0.p1" and fix.arg["parent"]["id"] == "a"
    assert entry(first.arg) == "executor" and first.arg["plan"]["id"] == "i2.m0.p0"
    assert fix.arg["defer_fixes"] and first.arg["defer_fixes"]
    # the last iteration fixes in place: no fix is left unrun at T
    assert not any(s.arg["defer_fixes"] for s in to_samples(overlap_state(3, pending), runtime(schedule="overlap", **llm)))
    # the published schedule: every fix in its own branch, nothing pending is sent
    beam = to_samples(overlap_state(2, pending), runtime(**llm))
    assert len(beam) == 1 and not beam[0].arg["defer_fixes"] and "current" not in beam[0].arg


def test_a_deferred_branch_ends_at_its_failure_and_a_verified_one_goes_on():
    failed = {"current": {"status": "compile_error"}, "fixes": 0, "defer_fixes": True}
    assert after_profiler(failed, runtime(fixes=2, model="vllm:coder")) == END
    assert after_profiler({**failed, "defer_fixes": False}, runtime(fixes=2, model="vllm:coder")) == "fixer"
    verified = {"current": {"status": "verified"}, "fixes": 0, "defer_fixes": True}
    assert after_profiler(verified, runtime(autotune=2, model="vllm:coder")) == "autotune"


def test_overlap_distills_the_last_iterations_lessons_beside_the_next_planners():
    from accelopt.graph.routing import after_lessons, after_selector

    state = {"task_dir": "t", "run_dir": None, "iteration": 3, "beam": ["b"], "baseline_id": "baseline",
             "candidates": {"baseline": cand("baseline"), "a": {**cand("a", parent="baseline"), "iteration": 1},
                            "b": {**cand("b", parent="a"), "iteration": 2}, "c": {**cand("c", parent="a"), "iteration": 2},
                            "old": {**cand("old", parent="a"), "iteration": 1}},
             "recalled": {}, "lessons_due": {"iteration": 2, "plans": [{"id": "i2.m0.p0"}], "beam": ["b"]}}
    sends = to_planners(state, runtime(schedule="overlap"))
    assert [s.node for s in sends] == ["planner", "summarizer"]
    lessons = sends[1].arg
    assert lessons["iteration"] == 2 and lessons["plans"] == [{"id": "i2.m0.p0"}] and lessons["beam"] == ["b"]
    assert set(lessons["candidates"]) == {"b", "c", "a", "baseline"}  # iteration 2's, their parents, the baseline
    assert [s.node for s in to_planners(state, runtime())] == ["planner"]  # beam: the summarizer ran already
    assert after_selector({}, runtime(schedule="overlap")) == "record"
    assert after_selector({"stop_reason": "reached T=3 iterations"}, runtime(schedule="overlap")) == "summarizer"
    assert after_selector({}, runtime()) == "summarizer"
    assert after_lessons({}, runtime(schedule="overlap")) == "dispatch"
    assert after_lessons({"stop_reason": "reached T=3 iterations"}, runtime(schedule="overlap")) == "record"
    assert after_lessons({}, runtime()) == "record"


# ---------------------------------------------------------------- the pipeline schedule

def test_pipeline_plans_the_next_iteration_beside_this_ones_kernels():
    from accelopt.graph.routing import after_lessons

    llm = {"model": "vllm:coder", "samples": 1, "iterations": 3, "schedule": "pipeline"}
    failed = {**cand("i1.m0.p1.k0", "compile_error", parent="a"), "fix_attempt": 0, "plan_id": "i1.m0.p1"}
    pending = [{"failed": failed, "plan": {"id": "i1.m0.p1", "parent_id": "a", "text": "y"}}]
    state = {**overlap_state(2, pending), "beam": ["a"], "recalled": {"a": [{"title": "lesson"}]},
             "lessons_due": {"iteration": 1, "plans": [{"id": "i1.m0.p1"}], "beam": ["a"]}}
    state["candidates"]["i1.m0.p1.k0"]["iteration"] = 1
    state["candidates"]["i2.m0.p9.k0"] = {**cand("i2.m0.p9.k0", parent="a"), "iteration": 2}  # landed on a resume
    sends = to_planners(state, runtime(**llm))  # from recall: the iteration's plans were made already
    assert [s.node for s in sends] == ["candidate", "candidate", "summarizer", "planner"]
    fix, first, lessons, planner = sends
    assert fix.arg["current"]["id"] == "i1.m0.p1.k0" and first.arg["plan"]["id"] == "i2.m0.p0"
    assert fix.arg["defer_fixes"] and first.arg["defer_fixes"] and lessons.arg["iteration"] == 1
    # the next iteration's planner, from the beam as it stands, told of the kernels before this iteration
    assert planner.arg["iteration"] == 3 and planner.arg["member"]["id"] == "a"
    assert planner.arg["recalled"] == [{"title": "lesson"}]
    tried = {k["id"] for k in planner.arg["tried"]}
    assert "i1.m0.p1.k0" in tried and "i2.m0.p9.k0" not in tried
    # the last iteration plans nothing more, and fixes in place
    last = to_planners({**state, "iteration": 3, "plans": [{"id": "i3.m0.p0", "parent_id": "a", "text": "x"}]},
                       runtime(**llm))
    assert "planner" not in [s.node for s in last] and not any(s.arg.get("defer_fixes") for s in last)
    # planners ahead that all failed still planned: the selector, not a second call, takes it from there
    # (nothing to evaluate: the lessons still run, and the selector ends the iteration)
    failed_ahead = {**state, "plans": [], "pending_fixes": [],
                    "history": [{"iteration": 2, "event": "planner_failed", "error": "x"}]}
    assert [getattr(s, "node", s) for s in to_planners(failed_ahead, runtime(**llm))] == ["summarizer", "selector"]
    # planners ahead the budget deferred (the kernels in flight held its room): the iteration plans now
    deferred = {**failed_ahead, "history": [{"iteration": 2, "event": "planner_deferred", "error": "x"}]}
    now = to_planners(deferred, runtime(**llm))
    assert [s.node for s in now] == ["planner"] and now[0].arg["iteration"] == 2 and not now[0].arg["ahead"]
    assert planner.arg["ahead"]
    # a finished run extended by more iterations: nothing was planned ahead, so it plans now
    extended = to_planners({**state, "iteration": 4, "plans": [], "pending_fixes": []},
                           runtime(**{**llm, "iterations": 6}))
    assert [s.node for s in extended] == ["planner"] and extended[0].arg["iteration"] == 4
    # the first two iterations plan first (planned beside the first, the second would start from the
    # baseline alone); the second's dispatch sends its kernels and the third's planners
    assert [s.node for s in to_planners({**state, "iteration": 1, "lessons_due": None}, runtime(**llm))] == ["planner"]
    assert [s.node for s in to_planners({**state, "plans": []}, runtime(**llm))] == ["planner"]
    assert [s.node for s in to_samples({**overlap_state(1), "beam": ["a"], "recalled": {}}, runtime(**llm))] \
        == ["candidate"]
    two = {**overlap_state(2), "beam": ["a"], "recalled": {}}
    assert [s.node for s in to_samples(two, runtime(**llm))] == ["candidate", "planner"]
    # the dispatch after the planners ahead sends nothing: the selector waits for the kernels
    with_ahead = {**two, "plans": two["plans"] + [{"id": "i3.m0.p0", "parent_id": "a", "text": "z"}]}
    assert to_samples(with_ahead, runtime(**llm)) == END
    ran = {**two, "candidates": {**two["candidates"], "i2.m0.p0.k0": {**cand("i2.m0.p0.k0"), "iteration": 2}},
           "history": [{"iteration": 3, "event": "planner_failed", "error": "x"}]}
    assert to_samples(ran, runtime(**llm)) == END  # every planner ahead failed: still nothing to send again
    # an iteration a model failure cut short, run again on resume beside its first attempt's records:
    # no planner of a later iteration ran, so this is its own dispatch, and it sends its kernels again
    rerun = {**ran, "history": []}
    assert [s.node for s in to_samples(rerun, runtime(**llm))] == ["candidate", "planner"]
    assert after_lessons({}, runtime(**llm)) == END


def test_pipeline_refuses_plan_review():
    from accelopt.nodes.context import settings_refusal

    assert "no pause" in settings_refusal(RunContext(schedule="pipeline", review_plans=True))
    assert settings_refusal(RunContext(schedule="overlap", review_plans=True)) is None


def test_a_quorum_counts_kernel_replies_and_the_next_iteration_collects_each_call_as_it_was_asked():
    from accelopt.graph.routing import entry

    plans = [{"id": "i3.m0.p0", "parent_id": "baseline", "text": "x"}, {"id": "i3.m0.p1", "parent_id": "a", "text": "y"}]
    old_plan = {"id": "i2.m0.p1", "parent_id": "a", "text": "z"}
    waiting_kernel = {**cand("i2.m0.p1.k0", "in_flight", "a"), "asked_in": 2, "plan_id": "i2.m0.p1", "fix_attempt": 0}
    failed = {**cand("i1.m0.p0.k0", "compile_error", "baseline"), "plan_id": "i1.m0.p0"}
    waiting_fix = {**cand("i1.m0.p0.k0.f1", "in_flight", "baseline"), "asked_in": 2, "fix_of": "i1.m0.p0.k0",
                   "fix_attempt": 1, "plan_id": "i1.m0.p0"}
    state = {"task_dir": "t", "run_dir": None, "iteration": 3, "baseline_id": "baseline", "plans": plans,
             "candidates": {"baseline": cand("baseline"), "a": cand("a")},
             "pending_writes": [{"attempt": waiting_kernel, "plan": old_plan},
                                {"attempt": waiting_fix, "plan": {**old_plan, "id": "i1.m0.p0", "parent_id": "baseline"},
                                 "failed": failed}]}
    sends = to_samples(state, runtime(samples=2, model="vllm:coder", schedule="overlap", quorum=0.5, iterations=4))
    assert len(sends) == 6 and {s.arg["quorum"] for s in sends} == {3}  # half of 4 new kernels and 1 collected
    kernel, fix = sends[0].arg, sends[1].arg
    assert (kernel["current"]["id"], kernel["asked_in"], entry(kernel)) == ("i2.m0.p1.k0", 2, "executor")
    assert (fix["current"]["id"], fix["fixes"], fix["asked_in"], entry(fix)) == ("i1.m0.p0.k0", 0, 2, "fixer")
    assert all("asked_in" not in s.arg and "current" not in s.arg for s in sends[2:])  # the iteration's own
    last = to_samples(state, runtime(samples=2, model="vllm:coder", schedule="overlap", quorum=0.5, iterations=3))
    assert {s.arg["quorum"] for s in last} == {None}  # the last iteration waits for every reply
    beam = to_samples(state, runtime(samples=2, model="vllm:coder", iterations=4))
    assert len(beam) == 4  # AccelOpt's schedule collects nothing: it never moves on without a reply


def test_every_schedule_states_every_behaviour_and_nothing_branches_on_its_name():
    """A schedule is one type (nodes/schedule.py): each member states each trait (a Traits has no
    defaults), and no module compares a schedule's name, so a new schedule cannot take another's
    behaviour through a `!= "beam"` test."""
    import dataclasses
    import re

    from accelopt.nodes import schedule
    from tests.conftest import ROOT

    assert set(schedule._TRAITS) == set(schedule.Schedule)
    assert all(f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
               for f in dataclasses.fields(schedule.Traits))
    for member in schedule.Schedule:  # every behaviour answers for every member
        for trait in dataclasses.fields(schedule.Traits):
            assert getattr(member, trait.name) == getattr(schedule._TRAITS[member], trait.name)
    compared = re.compile(r"schedule\s*[!=]=\s*[\"'](beam|overlap|pipeline)[\"']")
    for folder in ("graph", "nodes", "cli", "tools", "policies"):
        for path in (ROOT / folder).rglob("*.py"):
            assert not compared.search(path.read_text()), path
    assert RunContext().schedule is schedule.Schedule.PIPELINE  # the default
    assert RunContext(schedule="beam").schedule is schedule.Schedule.BEAM  # a name, as JSON gives it
