import re

import pytest

from accelopt.nodes.records import Candidate, attempt, autotuned_variant, baseline_candidate, with_measurement
from tests.conftest import ROOT

DATA = ROOT.joinpath("ARCHITECTURE.md").read_text().split("## Data", 1)[1].split("\n## ", 1)[0]


def test_architecture_names_every_candidate_field():
    missing = [k for k in Candidate.__annotations__ if not re.search(rf"\b{k}\b", DATA)]
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
