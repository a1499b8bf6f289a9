import re

import pytest

from tests.conftest import ROOT
from accelopt.nodes.records import Candidate, attempt, autotuned_variant, baseline_candidate, with_measurement

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
