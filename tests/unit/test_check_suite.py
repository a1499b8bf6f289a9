"""fast_p over a folder of solutions, as KernelBench computes it: over all tasks, GPU times only."""

import io

import pytest
from rich.console import Console

from accelopt.cli.check import show_suite
from accelopt.evals.reporting.check_suite import SolutionVerdict, suite_verdict


def _gpu(task, status, eager=None, compiled=None):
    speedup = {k: v for k, v in (("eager", eager), ("torch_compile", compiled)) if v is not None}
    return SolutionVerdict(task=task, solution=f"{task}.py", status=status, timer="cuda_event", speedup=speedup,
                           interval={k: (v * 0.9, v * 1.1) for k, v in speedup.items()})


def test_fast_p_counts_every_task_and_only_correct_solutions():
    results = [_gpu("a", "verified", 2.5, 1.2), _gpu("b", "verified", 1.05, 0.7),
               _gpu("c", "wrong_output", 9.0, 9.0),  # fast but wrong: never counted
               SolutionVerdict(task="d", solution=None, status="missing")]
    suite = suite_verdict(results)
    assert suite.tasks == 4 and suite.correct == 2 and suite.timer == "cuda_event" and suite.note is None
    assert suite.fast_p["eager"]["0.0"] == 0.5 and suite.fast_p["eager"]["1.0"] == 0.5
    assert suite.fast_p["eager"]["2.0"] == 0.25 and suite.fast_p["torch_compile"]["1.0"] == 0.25
    assert suite.fast_p["torch_compile"]["1.5"] == 0.0
    out = io.StringIO()
    show_suite(suite, Console(file=out, width=120))
    text = out.getvalue()
    assert "2 of 4 correct" in text and "2.50x (2.25-2.75)" in text and "missing" in text
    assert "vs eager PyTorch: fast_0 50%, fast_0.5 50%, fast_0.8 50%, fast_1 50%, fast_1.5 25%, fast_2 25%" in text
    assert "vs torch.compile: fast_0 50%" in text


def test_interpreter_times_give_fast_0_only():
    results = [SolutionVerdict(task="a", solution="a.py", status="verified", timer="interpreter_wall",
                               speedup={"eager": 3.0}, interval={"eager": (2.0, 4.0)})]
    suite = suite_verdict(results)
    assert suite.fast_p["eager"]["0.0"] == 1.0 and suite.fast_p["eager"]["1.0"] is None
    assert "not GPU times" in suite.note
    with pytest.raises(KeyError):
        suite.fast_p["torch_compile"]  # never timed against it: no figure, not a zero
