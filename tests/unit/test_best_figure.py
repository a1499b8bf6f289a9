"""The figure a run reports for its best (tools/best_figure.py, nodes/standing.confirmed): every
evaluation of the best's program pooled, a confirmation at the run's end on a GPU, and why not
elsewhere. The pooling's statistic has tests of its own (test_stats.py)."""

import pytest

from accelopt.nodes import standing as node
from accelopt.nodes.context import RunContext
from accelopt.tools.best_figure import Confirmation, best_figure, measurements
from accelopt.tools.run_record import RunSummary

KERNEL = "def run(x):\n    return x * 2\n"


def _vs(speedup: float, low: float, high: float, basis: str = "span") -> dict:
    return {"baseline": {"speedup": speedup, "ci_low": low, "ci_high": high, "rounds": 4, "faster": low > 1.02,
                         "slower": False, "noise_floor": 0.02, "basis": basis}}


def _candidates() -> dict:
    return {
        "baseline": {"id": "baseline", "status": "verified", "source": "def run(x):\n    return x + x\n",
                     "timer": "cuda_event"},
        "i1": {"id": "i1", "status": "verified", "source": KERNEL, "timer": "cuda_event",
               "versus": _vs(1.286, 1.286, 1.321)},
        # the same program, written otherwise (a comment, other layout): its evaluation is pooled
        "i2": {"id": "i2", "status": "verified", "source": "def run(x):  # twice\n    return (x * 2)\n",
               "timer": "cuda_event", "versus": _vs(1.368, 1.361, 1.369)},
        "i3": {"id": "i3", "status": "verified", "source": "def run(x):\n    return x * 3\n", "timer": "cuda_event",
               "versus": _vs(2.0, 1.9, 2.1)},  # another program
        "i4": {"id": "i4", "status": "verified", "source": KERNEL, "timer": "cuda_event",
               "versus": _vs(1.1, 1.0, 1.2, basis="kernel_only")},  # another timer: not pooled with the span
        "i5": {"id": "i5", "status": "wrong_output", "source": KERNEL, "timer": "cuda_event"},
    }


def test_the_runs_evaluations_of_one_program_on_one_timer_are_pooled():
    cands = _candidates()
    assert sorted(measurements(cands, cands["i1"])) == ["i1", "i2"]
    figure = best_figure(cands, cands["i1"])
    assert figure is not None and figure.measurements == 2 and figure.confirmed == 0
    assert figure.ci_low < 1.286 and figure.ci_high > 1.369 and figure.word == "faster"
    assert best_figure(cands, cands["baseline"]) is None  # the baseline is measured against nothing


def test_a_confirmation_joins_the_figure_and_one_that_fails_is_said():
    cands = _candidates()
    fresh = Confirmation(status="verified", speedup=1.37, ci_low=1.365, ci_high=1.372, rounds=4, basis="span")
    failed = Confirmation(status="wrong_output", error="output 0: 12/148 elements outside atol")
    figure = best_figure(cands, cands["i1"], [fresh, failed])
    assert figure.measurements == 3 and figure.confirmed == 1
    assert figure.failed_confirmation == "wrong_output: output 0: 12/148 elements outside atol"


def test_the_interpreter_pools_nothing_until_a_confirmation_is_asked_for():
    cands = {k: {**v, "timer": "interpreter_wall"} for k, v in _candidates().items()}
    assert best_figure(cands, cands["i1"]) is None
    fresh = Confirmation(status="verified", speedup=0.98, ci_low=0.95, ci_high=1.01, rounds=2, basis="span")
    assert best_figure(cands, cands["i1"], [fresh]).word == "no verdict"


def _state(best: str, timer: str = "cuda_event") -> dict:
    cands = {k: {**v, "timer": timer} for k, v in _candidates().items()}
    summary = RunSummary(task_dir="t", best_id=best, best_speedup=cands[best].get("speedup"), beam=[best])
    return {"task_dir": "t", "run_dir": None, "candidates": cands, "baseline_id": "baseline",
            "summary": summary.dump(), "beam": [best]}


def test_the_runs_end_confirms_a_gpu_best_against_the_baseline_and_reports_the_pooled_figure(monkeypatch):
    asked = {}

    def confirm(task, source, baseline, ctx, run_dir, nth=0, device=None):
        asked.update(source=source, baseline=baseline, nth=nth)
        return Confirmation(status="verified", speedup=1.372, ci_low=1.370, ci_high=1.375, rounds=5, basis="span",
                            seed=123)

    monkeypatch.setattr(node, "confirm", confirm)
    monkeypatch.setattr(node, "task_of", lambda task_dir: None)
    state = _state("i1")
    got = node.confirmed(state, state["candidates"]["i1"], RunContext(), RunSummary.model_validate(state["summary"]))
    assert asked == {"source": KERNEL, "baseline": state["candidates"]["baseline"]["source"], "nth": 0}
    assert got.best_figure.measurements == 3 and got.best_figure.confirmed == 1
    assert got.best_speedup == pytest.approx(got.best_figure.speedup) and got.confirmations[0].seed == 123


def test_the_runs_end_says_why_it_did_not_confirm(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no judge could start")

    monkeypatch.setattr(node, "confirm", broken)
    monkeypatch.setattr(node, "task_of", lambda task_dir: None)
    for best, timer, said in (("baseline", "cuda_event", "the best is the baseline itself"),
                              ("i1", "interpreter_wall", "`accelopt show RUN_DIR --confirm`"),
                              ("i1", "cuda_event", "could not run: RuntimeError: no judge could start")):
        state = _state(best, timer)
        got = node.confirmed(state, state["candidates"][best], RunContext(),
                             RunSummary.model_validate(state["summary"]))
        assert said in got.not_confirmed and got.confirmations == []
    state = _state("i1")  # turned off: the search's own evaluations stand, and the summary says how to confirm
    got = node.confirmed(state, state["candidates"]["i1"], RunContext(confirm_best=False),
                         RunSummary.model_validate(state["summary"]))
    assert got.not_confirmed.startswith("turned off (confirm_best = false)") and got.confirmations == []
    assert got.best_figure is None or got.best_figure.confirmed == 0
