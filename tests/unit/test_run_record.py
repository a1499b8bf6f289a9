"""summary.json as a typed record (tools/run_record.py): the keys it has always had, in their
order; files from older versions load with the fields added since at their defaults; keys this
version does not know are kept; and what every reader gets is attributes, not dict lookups."""

import json

from accelopt.evals.reporting.report import load_row
from accelopt.tools.run_record import (
    AutotuneSummary,
    IterationEvent,
    IterationRecord,
    NotMeasured,
    RunSummary,
    TorchCompileStanding,
    load_summary,
    run_summary,
    write_summary,
)

# summary.json's keys, in the order the record node writes them (the standing node adds the last)
KEYS = ["task_dir", "iteration", "stop_reason", "best_id", "best_speedup", "baseline_kind", "best_speedup_vs_parent",
        "best_parent_id", "timer", "device_name", "best_pct_peak", "best_pct_achievable", "best_pct_of_copy", "beam",
        "failure", "candidates_evaluated", "statuses", "usage", "iterations", "insights", "autotune", "note",
        "best_figure", "confirmations", "not_confirmed"]

# as the first versions wrote it: no baseline_kind, best_speedup_vs_parent, best_parent_id,
# best_pct_of_copy, failure, autotune, versus_torch_compile; usage without the per-iteration and
# per-candidate buckets nor the estimated/unpriced counts
OLD = {"task_dir": "/tasks/softmax", "iteration": 2, "stop_reason": "reached T=2 iterations", "best_id": "i2.m0.p1.k0",
       "best_speedup": 1.31, "timer": "cuda_event", "device_name": "NVIDIA H100 80GB HBM3", "best_pct_peak": 40.5,
       "best_pct_achievable": 52.0, "beam": ["i2.m0.p1.k0", "i1.m0.p0.k0"], "candidates_evaluated": 4,
       "statuses": {"verified": 4, "compile_error": 1},
       "usage": {"input_tokens": 1200, "output_tokens": 300, "cost_usd": 0.01, "calls": 3,
                 "by_role": {"planner": {"input_tokens": 1200, "output_tokens": 300, "cost_usd": 0.01, "calls": 3}}},
       "iterations": [{"iteration": 1, "evaluated": 2, "verified": 2, "best_id": "i1.m0.p0.k0", "best_speedup": 1.1,
                       "beam": ["i1.m0.p0.k0"], "tokens": 700, "cost_usd": 0.004},
                      {"iteration": 2, "evaluated": 2, "verified": 2, "best_id": "i2.m0.p1.k0", "best_speedup": 1.31,
                       "beam": ["i2.m0.p1.k0", "i1.m0.p0.k0"], "tokens": 1500, "cost_usd": 0.01}],
       "insights": 1, "note": None}


def _state(**extra) -> dict:
    baseline = {"id": "baseline", "status": "verified", "kind": "kernel", "speedup": 1.0, "timer": "interpreter_wall"}
    best = {"id": "i1.m0.p0.k0", "status": "verified", "kind": "autotuned", "iteration": 1, "speedup": 1.2,
            "speedup_vs_parent": 1.2, "parent_id": "baseline", "timer": "interpreter_wall", "device_name": "cpu",
            "autotune_of": "i1.m0.p0.k1"}
    rewrite = {"id": "i1.m0.p0.k1", "status": "verified", "iteration": 1, "speedup": 1.1,
               "autotune": {"gain": 1.2 / 1.1, "tried": 3}, "timer": "interpreter_wall"}
    failed = {"iteration": 1, "event": "planner_failed", "member": "baseline", "error": "HTTP 500"}
    record = {"iteration": 1, "evaluated": 2, "verified": 2, "best_id": best["id"], "best_speedup": 1.2,
              "beam": [best["id"]], "tokens": 10, "cost_usd": 0.0}
    return {"task_dir": "/tasks/rmsnorm", "iteration": 1, "stop_reason": "reached T=1 iterations",
            "baseline_id": "baseline", "beam": [best["id"], "baseline"],
            "candidates": {c["id"]: c for c in (baseline, best, rewrite)}, "history": [failed, record],
            "usage": [{"role": "planner", "iteration": 1, "input_tokens": 7, "output_tokens": 3, "cost_usd": 0.0}],
            "insights": [], **extra}


def test_the_record_keeps_the_published_keys_in_order_and_types_its_parts(tmp_path):
    summary = run_summary(_state())
    assert list(summary.dump()) == KEYS  # no versus_torch_compile before the standing node gives one
    assert isinstance(summary.iterations[0], IterationEvent) and isinstance(summary.iterations[1], IterationRecord)
    assert summary.autotune == AutotuneSummary(rewrites_tuned=1, variants=3, gain_geomean=1.2 / 1.1,
                                               best_is_autotuned=True, best_rewrite_speedup=1.1,
                                               best_autotune_gain=1.2 / 1.1)
    assert summary.usage.by_role["planner"].input_tokens == 7 and summary.usage.unpriced_calls == 0
    # the baseline is not counted, by number or by status (what the live bar, the CLI and MCP say)
    assert summary.candidates_evaluated == 2 and summary.statuses == {"verified": 2}
    # the history's entries are written back as the state held them
    assert summary.dump()["iterations"] == _state()["history"]
    write_summary(str(tmp_path), summary, "def run(x):\n    return x\n")
    assert load_summary(tmp_path) == summary and (tmp_path / "best_kernel.py").is_file()
    assert json.loads((tmp_path / "summary.json").read_text()) == summary.dump()


def test_the_standing_is_one_of_two_shapes():
    base = run_summary(_state()).dump()
    measured = {"speedup": 0.9, "ci_low": 0.88, "ci_high": 0.93, "rounds": 5, "verdict": "slower", "eager": 2.1,
                "device_name": "NVIDIA H100 80GB HBM3", "mode": "max-autotune-no-cudagraphs"}
    got = RunSummary.model_validate({**base, "versus_torch_compile": measured})
    assert isinstance(got.versus_torch_compile, TorchCompileStanding) and got.versus_torch_compile.eager == 2.1
    assert got.dump()["versus_torch_compile"] == measured and list(got.dump())[-1] == "versus_torch_compile"
    why = {"not_measured": "turned off (versus_torch_compile = false)"}
    got = RunSummary.model_validate({**base, "versus_torch_compile": why})
    assert got.versus_torch_compile == NotMeasured(**why) and got.dump()["versus_torch_compile"] == why


def test_an_older_summary_without_the_newer_fields_still_loads(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps(OLD))
    old = load_summary(tmp_path)
    assert old is not None
    assert (old.baseline_kind, old.failure, old.autotune, old.best_pct_of_copy, old.best_parent_id,
            old.versus_torch_compile) == ("kernel", None, None, None, None, None)
    assert old.usage.by_iteration == {} and old.usage.unpriced_calls == 0 and old.usage.by_role["planner"].calls == 3
    assert [h.best_id for h in old.iterations if isinstance(h, IterationRecord)] == ["i1.m0.p0.k0", "i2.m0.p1.k0"]
    # every field it had reads back as written
    assert {k: v for k, v in old.dump().items() if k in OLD and k != "usage"} == {k: v for k, v in OLD.items()
                                                                                  if k != "usage"}
    # the least an exporter was ever given, too
    (tmp_path / "summary.json").write_text(json.dumps({"task_dir": "/t", "best_id": "r1"}))
    assert load_summary(tmp_path) == RunSummary(task_dir="/t", best_id="r1")


def test_the_report_reads_an_older_run(tmp_path):
    run = tmp_path / "softmax"
    (run / "candidates" / "i2.m0.p1.k0").mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps(OLD))
    row = load_row(run)
    assert (row.task, row.outcome, row.speedup, row.iterations, row.tokens, row.baseline_kind) == (
        "softmax", "optimized", 1.31, 2, 1500, "kernel")
    assert row.history == [(0, 1.0), (1, 1.1), (2, 1.31)]
    assert row.best_by_iteration == [(0, "baseline"), (1, "i1.m0.p0.k0"), (2, "i2.m0.p1.k0")]


def test_keys_this_version_does_not_know_are_kept_and_a_broken_file_is_none(tmp_path):
    newer = {**OLD, "energy_j": 1.5, "usage": {**OLD["usage"], "cached_calls": 2}}
    (tmp_path / "summary.json").write_text(json.dumps(newer))
    got = load_summary(tmp_path)
    assert got is not None and got.model_extra == {"energy_j": 1.5} and got.dump()["usage"]["cached_calls"] == 2
    assert load_summary(tmp_path / "nowhere") is None
    (tmp_path / "summary.json").write_text('{"task_dir": ')
    assert load_summary(tmp_path) is None
    (tmp_path / "summary.json").write_text('{"iteration": 1}')  # no task_dir nor best_id: not a run record
    assert load_summary(tmp_path) is None


def test_numbers_are_written_as_json_dumps_wrote_them(tmp_path):
    """An infinite speedup stays Infinity (as json.dumps of the old dict wrote it), not null."""
    write_summary(str(tmp_path), RunSummary(task_dir="/t", best_id="k", best_speedup=float("inf")), None)
    assert '"best_speedup": Infinity' in (tmp_path / "summary.json").read_text()
    assert load_summary(tmp_path).best_speedup == float("inf")


def test_an_iteration_whose_planners_never_answered_is_not_done():
    """`runs` and `show` said `iterations 1 / 1` for a run whose planner never answered."""
    from accelopt.tools.run_record import iterations_done

    failed = {"iteration": 1, "event": "planner_failed", "member": "baseline", "error": "planner model x: 500"}
    nothing = {"iteration": 1, "evaluated": 0, "verified": 0, "best_id": "baseline", "beam": ["baseline"]}
    assert iterations_done([failed, nothing]) == 0
    assert iterations_done([]) == 0
    searched = {"iteration": 1, "evaluated": 2, "verified": 1, "best_id": "i1.m0.p0.k0", "beam": ["i1.m0.p0.k0"]}
    assert iterations_done([searched]) == 1
    # one planner of two failed, the other's kernels were evaluated: the iteration searched
    assert iterations_done([failed, {**searched}]) == 1
    # the second iteration's planners never answered: one done of two
    assert iterations_done([searched, {**failed, "iteration": 2}, {**nothing, "iteration": 2}]) == 1
    # an iteration whose kernels were all copies of earlier ones still searched, its planners answered
    assert iterations_done([searched, {**nothing, "iteration": 2}]) == 2


def test_counts_add_up_and_a_duplicate_is_never_called_evaluated():
    """Issue 67: a summary said "5 evaluated: duplicate 1, verified 5". The evaluated statuses add
    up to the count, in the CLI's summary and `show` (counts_text) and in MCP's answer."""
    from accelopt.graph.served_app import run_digest
    from accelopt.tools.run_record import candidate_counts, counts_text

    candidates = {"baseline": {"status": "verified"}, **{f"k{i}": {"status": "verified"} for i in range(5)},
                  "d": {"status": "duplicate"}}
    evaluated, statuses = candidate_counts(candidates)
    assert counts_text(evaluated, statuses) == "5 evaluated: verified 5; 1 not evaluated: duplicate 1"
    assert counts_text(0, {}) == "0 evaluated"
    digest = run_digest({"summary": {"candidates_evaluated": evaluated, "statuses": statuses}})
    assert sum(digest["statuses"].values()) == digest["candidates_evaluated"] == 5
    assert digest["not_evaluated"] == {"duplicate": 1}
