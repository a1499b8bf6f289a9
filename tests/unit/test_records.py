import re

import pytest

from accelopt.nodes.records import Candidate, attempt, autotuned_variant, baseline_candidate, with_measurement
from tests.conftest import ROOT

DATA = ROOT.joinpath("ARCHITECTURE.md").read_text().split("## Data", 1)[1].split("\n## ", 1)[0]


def test_architecture_names_every_candidate_and_plan_field():
    from accelopt.nodes.records import Plan

    missing = [k for k in [*Candidate.__annotations__, *Plan.__annotations__] if not re.search(rf"\b{k}\b", DATA)]
    assert not missing, f"ARCHITECTURE.md's Data section misses {missing}"


def test_each_constructor_builds_only_declared_fields():
    rewrite = attempt("i1.m0.p0.k0", 1, "baseline", "i1.m0.p0", "raise BLOCK")
    for record in (baseline_candidate("src", from_scratch=False), rewrite,
                   autotuned_variant(rewrite, 1, 1, rewrite["id"], "src", "`num_warps` 4 -> 8", "num_warps=8")):
        assert set(record) <= set(Candidate.__annotations__)
    assert baseline_candidate("ref", from_scratch=True)["kind"] == "reference"


def test_a_measurement_attaches_in_one_way_and_only_declared_fields():
    rewrite = attempt("i1.m0.p0.k0", 1, "baseline", "i1.m0.p0", "raise BLOCK")
    measured = with_measurement(rewrite, {"status": "verified", "speedup": 1.3})
    assert measured["status"] == "verified" and rewrite["status"] is None  # a new record
    with pytest.raises(ValueError, match="not declared"):
        with_measurement(rewrite, {"status": "verified", "secret_field": 1})


def test_measured_kernels_carry_per_workload_speedups_and_plans_their_config_lists():
    from accelopt.nodes.measurements import measured_kernels
    from accelopt.nodes.records import plan_draft, plan_record
    from accelopt.policies.interface import PlanDraft

    timed = {"w1": {"median_us": 10.0}, "w2": {"median_us": 4.0}}
    candidates = {
        "baseline": {"id": "baseline", "source": "a", "status": "verified", "workloads": timed},
        "k": {"id": "k", "iteration": 1, "source": "b", "status": "verified",
              "workloads": {"w1": {"median_us": 5.0}, "w2": {"median_us": 8.0}},
              "compared_us": {"baseline": {"w1": 10.5, "w2": 4.2}, "parent": {"w1": 1.0, "w2": 1.0}}},
        "bad": {"id": "bad", "iteration": 1, "source": "c", "status": "wrong_output", "workloads": timed,
                "compared_us": {"baseline": {"w1": 10.0, "w2": 4.0}}},
    }
    by_id = {k["id"]: k for k in measured_kernels(candidates)}
    assert by_id["baseline"]["workload_speedups"] == {"w1": 1.0, "w2": 1.0}
    assert by_id["k"]["workload_speedups"] == pytest.approx({"w1": 2.1, "w2": 0.525})
    assert by_id["bad"]["workload_speedups"] == {}
    draft = PlanDraft("### Plan 1: shorter list", {}, ({"BLOCK": 64, "num_warps": 4}, {"BLOCK": 128, "num_warps": 8}))
    assert plan_draft(plan_record("i1.m0.p0", "baseline", draft, [])) == draft
    plain = PlanDraft("### Plan 1: raise BLOCK", {"BLOCK": (64, 128)})
    assert "configs" not in plan_record("i1.m0.p1", "baseline", plain, []) and \
        plan_draft(plan_record("i1.m0.p1", "baseline", plain, [])) == plain


# ---------------------------------------------------------------- the state's other records

def _mirrors():
    from accelopt.memory import schema
    from accelopt.nodes import records
    from accelopt.tools import run_record

    return [(records.Summary, run_record.RunSummary), (records.UsageTotals, run_record.UsageTotals),
            (records.UsageBucket, run_record.UsageBucket), (records.IterationRecord, run_record.IterationRecord),
            (records.PlannerEvent, run_record.IterationEvent), (records.AutotuneSplit, run_record.AutotuneSummary),
            (records.TorchCompileStanding, run_record.TorchCompileStanding),
            (records.NotMeasured, run_record.NotMeasured), (records.InsightRecord, schema.Insight),
            (records.EvidenceRecord, schema.Evidence), (records.ProvenanceRecord, schema.Provenance),
            (records.RecipeRecord, schema.Recipe)]


@pytest.mark.parametrize("typed, model", _mirrors(), ids=lambda t: t.__name__)
def test_each_state_record_has_exactly_its_models_fields(typed, model):
    """The state keeps a model's dump; its TypedDict (Studio's schema, mypy's view) names the same fields."""
    assert set(typed.__annotations__) == set(model.model_fields)


def _valid(typed, value) -> None:
    from pydantic import TypeAdapter

    TypeAdapter(typed).validate_python(value)  # raises on a missing required key or a wrong type


def test_the_run_record_and_insights_enter_the_state_as_their_typed_dumps():
    from accelopt.memory.schema import Evidence, Insight, Provenance, Recipe
    from accelopt.nodes.records import LearnedInsight, Summary, insight_record, learned_insight, summary_record
    from accelopt.tools.run_record import run_summary
    from tests.unit.test_run_record import _state

    summary = summary_record(run_summary(_state()).with_standing({"not_measured": "no GPU"}))
    _valid(Summary, summary)
    assert set(summary) <= set(Summary.__annotations__) and summary["versus_torch_compile"] == {
        "not_measured": "no GPU"}
    evidence = Evidence(speedup=1.2, hardware="cpu", timer="interpreter_wall", task="x", backend="triton")
    insight = Insight(kind="positive", title="t", lesson="l", evidence=evidence,
                      provenance=Provenance(run_id="r", parent_id="baseline", child_id="k", iteration=1),
                      recipe=Recipe(kernel_class="row", start={"BLOCK": 64}, result={"BLOCK": 128}))
    learned = learned_insight(insight, None)
    _valid(LearnedInsight, learned)
    assert set(learned) == set(LearnedInsight.__annotations__) and learned["stored_as"] is None
    assert Insight.model_validate(insight_record(insight)) == insight  # the planner reads it back


def test_usage_records_as_the_ledger_writes_them_have_declared_keys():
    from langchain_core.messages import AIMessage

    from accelopt.nodes.records import Usage, usage_entries
    from accelopt.policies.llm import _merged
    from accelopt.tools.llm import ModelSpec, usage_record

    spec = ModelSpec.parse("vllm:some-model")
    counted = usage_record(AIMessage("hi", usage_metadata={"input_tokens": 9, "output_tokens": 2, "total_tokens": 11}),
                           spec, "planner", None, 1)
    estimated = usage_record(AIMessage("hello"), spec, "executor", "i1.m0.p0.k0", 1)
    merged = _merged([{**estimated, "prompt_chars": 10}, {**counted, "prompt_chars": 12}])
    for record in (counted, estimated, merged):
        [entry] = usage_entries(record)
        _valid(Usage, entry)
        assert set(entry) <= set(Usage.__annotations__), set(entry) - set(Usage.__annotations__)
    assert usage_entries(None) == [] and merged["requests"] == 2
