"""What Studio's forms are built from: the graph's input, output and context JSON schemas; the
plans channel that an edit replaces instead of appending to; the plan-review answer check; the
default run directory of a run that names none."""

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.types import Overwrite

from accelopt.graph.builder import graph
from accelopt.nodes.context import RunContext
from accelopt.nodes.planner import PlanReviewError, reviewed_plans
from accelopt.nodes.state import RunState, merge_plans
from accelopt.tools import rundir

INTERNAL = {"plans", "recalled", "started_at"}


def test_the_input_form_asks_only_what_a_user_provides():
    schema = graph.get_input_jsonschema()
    assert schema["required"] == ["task_dir"]
    assert set(schema["properties"]) == {"task_dir", "run_dir"}


def test_the_output_shows_what_a_user_reads():
    props = graph.get_output_jsonschema()["properties"]
    assert {"run_dir", "best_id", "summary", "beam", "candidates", "stop_reason", "insights"} <= set(props)
    assert not INTERNAL & set(props)


def resolved(schema: dict, node: dict) -> dict:
    """A schema node with its $ref followed (pydantic puts each record once under $defs)."""
    while "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
    return node


def test_the_outputs_records_are_typed_to_their_fields():
    """Studio's output view shows each record's fields, not a bare object (nodes/records.py)."""
    schema = graph.get_output_jsonschema()
    props = schema["properties"]
    candidate = resolved(schema, props["candidates"]["additionalProperties"])
    assert {"id", "parent_id", "source", "status", "speedup", "workloads", "versus"} <= set(candidate["properties"])
    assert candidate["properties"]["kind"]["enum"] == ["kernel", "reference", "autotuned", "inductor_seed"]
    summary = resolved(schema, props["summary"])
    assert {"best_id", "best_speedup", "stop_reason", "usage", "iterations"} <= set(summary["properties"])
    assert {"task_dir", "best_id", "usage"} <= set(summary["required"]) and "baseline_kind" not in summary["required"]
    usage = resolved(schema, props["usage"]["items"])
    assert {"role", "model", "input_tokens", "output_tokens", "cost_usd"} <= set(usage["required"])
    record, event = (resolved(schema, s) for s in props["history"]["items"]["anyOf"])
    assert {"evaluated", "best_id"} <= set(record["required"]) and {"event", "error"} <= set(event["required"])
    insight = resolved(schema, props["insights"]["items"])
    assert {"title", "lesson", "evidence", "provenance", "stored_as"} <= set(insight["properties"])


def test_the_context_form_has_choices_descriptions_and_no_code_only_field():
    props = graph.get_context_jsonschema()["properties"]
    assert props["device"]["enum"] == ["auto", "cuda", "cpu"] and props["device"]["default"] == "auto"
    assert "chat_models" not in props
    assert [k for k, v in props.items() if not v.get("description")] == []
    assert props["review_plans"]["default"] is False
    # run.json gets the same fields as plain data
    assert set(RunContext().to_json()) == set(props)


def plan(pid, text="t", parent="baseline", **more):
    return {"id": pid, "parent_id": parent, "text": text, "moves": {}, "insight_ids": [], **more}


def test_an_edit_of_a_plan_replaces_it_and_overwrite_replaces_the_list():
    a, b = plan("i1.m0.p0", "a"), plan("i1.m0.p1", "b")
    assert merge_plans([a], [b]) == [a, b]  # planner branches add their own ids
    edited = plan("i1.m0.p0", "a, edited")
    assert merge_plans([a, b], [edited]) == [edited, b]  # same id: replaced in place, never twice
    with pytest.raises(ValueError, match="string `id`"):
        merge_plans([a], [{"text": "no id"}])
    with pytest.raises(ValueError, match="expected a list"):
        merge_plans([a], {"id": "x"})  # type: ignore[arg-type]

    # Through LangGraph's update_state, as Studio edits state: by id, and Overwrite (also as JSON)
    builder = StateGraph(RunState)
    builder.add_node("n", lambda state: {"plans": [a, b]})
    builder.add_edge(START, "n")
    g = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    g.invoke({"task_dir": "x"}, config)
    g.update_state(config, {"plans": [edited]})
    assert g.get_state(config).values["plans"] == [edited, b]
    g.update_state(config, {"plans": Overwrite([b])})
    assert g.get_state(config).values["plans"] == [b]
    g.update_state(config, {"plans": {"__overwrite__": []}})
    assert g.get_state(config).values["plans"] == []


PROPOSED = [plan("i2.m0.p0", "zero", moves={"BLOCK": [128, 256]}, insight_ids=["x"]), plan("i2.m0.p1", "one"),
            plan("i2.m1.p0", "member one", parent="i1.m0.p0.k0")]
BEAM = ["baseline", "i1.m0.p0.k0"]


def review(answer):
    return reviewed_plans(answer, PROPOSED, BEAM, 2)


def test_a_review_answer_keeps_edits_drops_and_fills_from_the_proposed_plan():
    plans, warnings = review([{"id": "i2.m0.p1", "text": "one, edited"}])
    assert plans == [plan("i2.m0.p1", "one, edited")] and warnings == []
    plans, _ = review([{"id": "i2.m0.p0"}])  # unchanged fields come from the proposed plan
    assert plans == [PROPOSED[0]]
    assert review([]) == ([], [])  # skip this iteration's kernels
    # a new plan: a string, or an object without id; it gets the member's next free number
    plans, warnings = review(["new idea", {"text": "for the second member", "parent_id": "i1.m0.p0.k0"}])
    assert [(p["id"], p["parent_id"]) for p in plans] == [("i2.m0.p2", "baseline"), ("i2.m1.p1", "i1.m0.p0.k0")]
    assert warnings == []


def test_a_reviewed_plan_keeps_the_tuners_fields():
    """configs and rewrite (the tuner's plans) come through a review like every other field."""
    tuned = plan("i2.m0.p0", "rewrite", rewrite="chunkwise_online_softmax", configs=[{"BLOCK": 64}])
    plans, _ = reviewed_plans([{"id": "i2.m0.p0", "text": "rewrite, reviewed"}], [tuned], BEAM, 2)
    assert plans == [{**tuned, "text": "rewrite, reviewed"}]
    plans, _ = reviewed_plans([{"id": "i2.m0.p0", "rewrite": ""}], [tuned], BEAM, 2)
    assert "rewrite" not in plans[0]  # taken off: a plain plan
    with pytest.raises(PlanReviewError, match="`rewrite` must be the name of a source rewrite"):
        reviewed_plans([{"id": "i2.m0.p0", "rewrite": 3}], [tuned], BEAM, 2)


def test_duplicate_or_misfit_plan_ids_are_renamed_with_a_warning():
    plans, warnings = review([{"id": "i2.m0.p0", "text": "a"}, {"id": "i2.m0.p0", "text": "b"}])
    assert [p["id"] for p in plans] == ["i2.m0.p0", "i2.m0.p2"]
    assert warnings == ["plan 2: id 'i2.m0.p0' repeats an earlier plan's; renamed i2.m0.p2"]
    plans, warnings = review([{"id": "mine", "text": "c"}, {"id": "i2.m0.p0", "parent_id": "i1.m0.p0.k0"}])
    assert [p["id"] for p in plans] == ["i2.m0.p2", "i2.m1.p1"]
    assert "does not fit a plan of baseline" in warnings[0] and "does not fit a plan of i1.m0.p0.k0" in warnings[1]


@pytest.mark.parametrize("answer, needle", [
    ({"plans": []}, "expected a list of plans"),
    ("keep them", "expected a list of plans"),
    ([3], "plan 1: expected an object"),
    ([{"id": "i2.m0.p0", "text": ""}], "plan 1: `text` must be a non-empty string"),
    ([{"text": "x", "title": "y"}], "unknown field(s) title"),
    ([{"text": "x", "parent_id": "nobody"}], "parent_id 'nobody' is not in this iteration's beam"),
    ([{"text": "x", "moves": {"BLOCK": 128}}], "`moves` must map a launch tunable"),
    ([{"text": "x", "insight_ids": "abc"}], "`insight_ids` must be a list of strings"),
    ([{"id": 7, "text": "x"}], "`id` must be a string"),
])
def test_a_malformed_review_answer_says_what_is_wrong(answer, needle):
    with pytest.raises(PlanReviewError) as err:
        review(answer)
    assert needle in str(err.value)


def test_the_default_run_dir_is_the_clis_and_never_shared(tmp_path, monkeypatch):
    monkeypatch.setenv(rundir.RUNS_DIR_ENV, str(tmp_path / "runs"))
    monkeypatch.setattr(rundir.time, "strftime", lambda fmt, *a: "20250101-000000")
    assert rundir.default_run_dir("softmax") == tmp_path / "runs" / "softmax-20250101-000000"
    first, second = rundir.new_default_run_dir("softmax"), rundir.new_default_run_dir("softmax")
    assert first.name == "softmax-20250101-000000" and second.name == "softmax-20250101-000000-2"
    assert first.is_dir() and second.is_dir()
    monkeypatch.delenv(rundir.RUNS_DIR_ENV)
    assert str(rundir.default_run_dir("softmax")) == "runs/softmax-20250101-000000"
