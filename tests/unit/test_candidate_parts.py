"""The candidate record typed in parts (tools/candidate_record.py): the solution, the lineage and the
evaluation side by side in one flat record; the status is the harness's, and its rules
(`evaluation_refusal`) hold for every record the real builders write, and refuse one that breaks them."""

from typing import get_args

import pytest

from accelopt.nodes.records import (
    Candidate,
    CandidateEvaluation,
    CandidateLineage,
    CandidateSolution,
    attempt,
    autotuned_variant,
    baseline_candidate,
    seed_candidate,
    with_measurement,
    with_outcome,
)
from accelopt.tools import candidate_record as cr
from accelopt.tools.harness.result import FIXABLE, NOT_EVALUATED, NOT_JUDGED, EvalResult, Status, WorkloadTiming

TIMED = {"w": {"median_us": 10.0, "iqr_us": 0.1, "samples": 20}}


def _attempt() -> Candidate:
    return attempt("i1.m0.p0.k0", 1, "baseline", "i1.m0.p0", "raise BLOCK")


# ---------------------------------------------------------------- the parts and the status

def test_the_record_is_its_three_parts_side_by_side_and_nothing_else():
    parts = [set(CandidateSolution.__annotations__), set(CandidateLineage.__annotations__),
             set(CandidateEvaluation.__annotations__)]
    assert set(Candidate.__annotations__) == parts[0] | parts[1] | parts[2]
    assert sum(map(len, parts)) == len(Candidate.__annotations__)  # no field in two parts
    assert {"source", "tokens", "cost_usd"} == parts[0]
    assert {"id", "parent_id", "fix_of", "autotune_of"} <= parts[1] and {"status", "speedup", "autotune"} <= parts[2]


def test_the_status_is_the_harness_status_and_each_has_exactly_one_rule_set():
    statuses = set(get_args(Status))
    assert set(get_args(cr.EvaluationStatus)) == statuses == cr.STATUSES
    groups = [cr.VERIFIED, cr.DUPLICATE, cr.UNJUDGED, cr.FAILED]
    assert set().union(*groups) == statuses and sum(map(len, groups)) == len(statuses)
    assert cr.UNJUDGED | cr.DUPLICATE == NOT_JUDGED and NOT_EVALUATED <= NOT_JUDGED
    assert FIXABLE - {"no_code", "truncated"} <= cr.FAILED  # what the fixer repairs was judged and failed


def test_the_accessors_read_one_part_each():
    variant = with_measurement(autotuned_variant(_attempt(), 1, 1, "i1.m0.p0.k0", "def k(): pass\n", "`BLOCK` 1 -> 2",
                                                 "BLOCK=2"),
                               {"status": "verified", "timer": "cuda_event", "workloads": TIMED, "evidence": ["x"],
                                "speedup": 1.1})
    assert cr.lineage_of(variant) == {k: variant[k] for k in variant if k in CandidateLineage.__annotations__}
    assert set(cr.evaluation_of(variant)) == {"status", "timer", "workloads", "evidence", "speedup"}
    assert cr.solution_of(variant) == {"source": "def k(): pass\n", "tokens": 0, "cost_usd": 0.0}
    program = cr.program_of(variant)
    assert program is not None and program.tree is not None and program is cr.program_of(dict(variant))  # one parse
    assert cr.program_of(_attempt()) is None
    broken = cr.program_of({"source": "def ("})
    assert broken is not None and broken.error is not None


# ---------------------------------------------------------------- each rule refuses and accepts

VERIFIED = {"id": "k", "status": "verified", "error": None, "timer": "cuda_event", "workloads": TIMED,
            "evidence": ["correct on 3 fresh input sets"], "speedup": 1.2}
FAILED = {"id": "k", "status": "wrong_output", "error": "max abs error 3.1", "speedup": None, "beats_parent": False}
UNJUDGED = {"id": "k", "status": "no_code", "error": "no code block", "source": None}


@pytest.mark.parametrize("record, rule", [
    ({**VERIFIED, "status": "fast"}, "none of the harness's"),
    ({**VERIFIED, "error": "Traceback ..."}, "verified with an error"),
    ({**VERIFIED, "duplicate_of": "j"}, "a duplicate is not evaluated"),
    ({**VERIFIED, "workloads": {}}, "a timed verdict has both"),
    ({**VERIFIED, "timer": None}, "a timed verdict has both"),
    ({**VERIFIED, "evidence": []}, "without evidence"),
    ({**FAILED, "error": None}, "a failure says why"),
    ({**FAILED, "speedup": 1.3}, "only a verified kernel has one"),
    ({**FAILED, "beats_parent": True}, "only a verified kernel has one"),
    ({**FAILED, "duplicate_of": "j"}, "only a duplicate names"),
    ({"id": "k", "status": "duplicate", "error": "the same program"}, "without duplicate_of"),
    ({"id": "k", "status": "duplicate", "duplicate_of": "j", "speedup": 1.0}, "nothing of it was measured"),
    ({**UNJUDGED, "workloads": TIMED}, "nothing of it was measured"),
    ({**UNJUDGED, "status": "cancelled", "timer": "cuda_event"}, "nothing of it was measured"),
    ({**UNJUDGED, "status": "not_sent", "speedup": 1.0}, "nothing of it was measured"),
    ({"id": "k", "status": None, "speedup": 1.0}, "not evaluated yet"),
])
def test_a_record_that_breaks_a_rule_is_refused_with_the_rule(record, rule):
    refusal = cr.evaluation_refusal(record)
    assert refusal is not None and rule in refusal, refusal
    with pytest.raises(ValueError, match=f"candidate {record['id']}: .*{rule}"):
        cr.checked_evaluation(record)


@pytest.mark.parametrize("record", [
    VERIFIED, {**VERIFIED, "timer": "nki_benchmark", "evidence": []},  # NKI states no checks
    {"id": "k", "status": "verified", "timer": None, "workloads": {}, "evidence": []},  # NKI's simulator: untimed
    FAILED, {**FAILED, "status": "cheat_suspected", "workloads": TIMED, "timer": "cuda_event"},  # below the copy floor
    {**FAILED, "status": "infra_error", "error": ""},  # str() of an exception that said nothing
    {"id": "k", "status": "duplicate", "duplicate_of": "j", "error": "the same program"},
    UNJUDGED, {**UNJUDGED, "status": "in_flight", "asked_in": 1}, {"id": "k", "status": None},
])
def test_the_honest_record_of_each_rule_passes(record):
    assert cr.evaluation_refusal(record) is None


# ---------------------------------------------------------------- the real builders, every status

class _Task:
    reference_source = "ref"

    class spec:
        @staticmethod
        def model_dump():
            return {}


def _fields(result: EvalResult, monkeypatch, baseline: dict | None = None) -> dict:
    """The candidate fields nodes/services.measure makes of the harness's result."""
    from accelopt.nodes import services
    from accelopt.nodes.context import RunContext

    class Backend:
        def evaluate(self, *args, **kwargs):
            return result.model_copy(deep=True)

    monkeypatch.setattr(services, "backend_for", lambda *a, **k: Backend())
    return services.measure(_Task, "c", RunContext(device="cuda"), baseline=baseline, parent=baseline)


def _verified() -> EvalResult:
    from accelopt.tools.harness.result import compare_rounds
    from accelopt.tools.harness.verdict import with_verdicts

    def timing(rounds: list[float]) -> WorkloadTiming:
        return WorkloadTiming(median_us=sorted(rounds)[1], iqr_us=1.0, samples=30, round_medians_us=rounds,
                              round_kernel_us=rounds, kernel_us=sorted(rounds)[1])

    r = EvalResult(status="verified", device="cuda", timer="cuda_event", device_name="H100",
                   workloads={"b1": timing([100.0, 101.0, 100.5])}, compare={"baseline": {"b1": timing([150.0] * 3)}},
                   evidence=["correct on 3 fresh input sets, outputs poisoned, inputs unchanged"])
    r.versus = {"baseline": compare_rounds(r.workloads, r.compare["baseline"], timer="cuda_event")}
    return with_verdicts(r)


@pytest.mark.parametrize("status", sorted(cr.FAILED))
def test_every_judged_failure_the_harness_returns_is_an_honest_record(status, monkeypatch):
    result = EvalResult(status=status, error=f"the judge: {status}", device="cuda")
    failed = with_measurement(_attempt(), _fields(result, monkeypatch, {"id": "baseline", "source": "b"}))
    assert failed["status"] == status and failed["speedup"] is None


def test_the_real_builders_write_honest_records_of_every_other_status(monkeypatch, tmp_path):
    from accelopt.nodes import services
    from accelopt.nodes.context import RunContext
    from accelopt.nodes.selector import settle_in_flight
    from accelopt.policies.interface import Kernel, PolicyError
    from accelopt.tools import inflight
    from accelopt.tools.best_figure import program_key
    from accelopt.tools.llm_spec import BudgetExceeded
    from accelopt.tools.runcache import RunCache

    baseline = with_measurement(baseline_candidate("b", from_scratch=False), _fields(_verified(), monkeypatch))
    seed = with_measurement(seed_candidate("s", "max-autotune"), _fields(_verified(), monkeypatch, baseline))
    assert baseline["speedup"] == 1.0 and seed["status"] == "verified" and seed["speedup"] > 1.0
    # a program evaluated before (by "a"): services.measure names the first, and evaluates nothing
    run = str(tmp_path)
    RunCache(run).claim("programs", program_key("def k(): pass\n"), "a")
    again = services.measure(_Task, "def k():\n    pass\n", RunContext(device="cpu"), baseline=None, parent=None,
                             run_dir=run, candidate_id="b")
    assert with_measurement(_attempt(), again)["duplicate_of"] == "a"

    # the policy's outcomes, as fill_attempt writes them
    def asked(outcome):
        def ask():
            if isinstance(outcome, Exception):
                raise outcome
            return outcome
        return services.fill_attempt(_attempt(), ask)["current"]

    unpaid = PolicyError("over budget")
    unpaid.__cause__ = BudgetExceeded("the run's $ budget")
    written = {
        "no_code": asked(Kernel(None, note="no code block")),
        "truncated": asked(Kernel(None, note="cut off", status="truncated")),
        "llm_error": asked(PolicyError("HTTP 500 after 3 retries")),
        "not_sent": asked(unpaid),
        "in_flight": asked(inflight.Detached("the quorum was met")),
    }
    assert {s: c["status"] for s, c in written.items()} == {s: s for s in written}
    _, ended = settle_in_flight({"candidates": {"k": written["in_flight"]}, "run_dir": None}, "iterations done")
    assert ended["k"]["status"] == "cancelled" and "before its reply was collected" in ended["k"]["error"]
    for record in [baseline, seed, *written.values(), ended["k"]]:
        assert cr.evaluation_refusal(record) is None, record["id"]
    assert cr.UNJUDGED == {*written, "cancelled"}


def test_a_verdict_written_wrong_fails_where_it_is_written():
    with pytest.raises(ValueError, match=r"candidate i1.m0.p0.k0: status verified with an error"):
        with_measurement(_attempt(), {"status": "verified", "error": "boom"})
    with pytest.raises(ValueError, match="not declared on CandidateEvaluation"):
        with_measurement(_attempt(), {"status": "verified", "source": "x"})  # the solution is not the judge's
    with pytest.raises(ValueError, match="the judge's to give"):
        with_outcome(_attempt(), "verified", None)
    with pytest.raises(ValueError, match="not fields of a candidate's solution"):
        with_outcome(_attempt(), "cancelled", "stopped", speedup=1.0)
    landed = with_outcome(_attempt(), "cancelled", "stopped", tokens=12, cost_usd=0.01)
    assert (landed["tokens"], landed["status"]) == (12, "cancelled")


def test_an_untimed_verified_kernel_against_a_baseline_is_recorded_without_a_figure(monkeypatch):
    """NKI's simulator checks correctness and times nothing: a verified kernel with a baseline to
    compare against has no speedup (it once raised KeyError where the comparison was read)."""
    untimed = EvalResult(status="verified", device="nki", timer=None)
    done = with_measurement(_attempt(), _fields(untimed, monkeypatch, {"id": "baseline", "source": "b"}))
    assert done["status"] == "verified" and done["speedup"] is None and cr.evaluation_refusal(done) is None
