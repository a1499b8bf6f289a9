"""fast_p over a folder of solutions, as KernelBench computes it: over all tasks, GPU times only."""

import io
import shutil

import pytest
from rich.console import Console

from accelopt.cli.check import show_suite
from accelopt.evals.reporting.check_suite import SolutionVerdict, suite_verdict
from tests.conftest import ROOT


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


def test_tasks_in_natural_order_and_missing_solutions_folded_into_one_line(tmp_path):
    """Issue 53: KernelBench level 1 printed 98 `missing` rows of 3-4 lines each, sorted 100, 10, 11."""
    from accelopt.evals.reporting.check_suite import judged, missing_line, natural_key, pair_solutions

    spec = (ROOT / "evals" / "tasks" / "softmax")
    for name in ("100_Hinge", "10_Conv", "11_Matmul", "1_Square", "2_Scale", "3_Relu", "99_Loss"):
        shutil.copytree(spec, tmp_path / "tasks" / name)
        (tmp_path / "tasks" / name / "task.json").write_text(
            (spec / "task.json").read_text().replace('"softmax"', f'"{name}"'))
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions" / "2_Scale.py").write_text("")
    pairings = pair_solutions(tmp_path / "tasks", tmp_path / "solutions")
    assert [p.task.name for p in pairings] == ["1_Square", "2_Scale", "3_Relu", "10_Conv", "11_Matmul", "99_Loss",
                                               "100_Hinge"]
    assert sorted(["b10", "b9", "a"], key=natural_key) == ["a", "b9", "b10"]

    results = [SolutionVerdict(task=p.task.name, solution=None, status="missing") for p in pairings
               if p.solution is None] + [_gpu("2_Scale", "verified", 1.5, 1.1)]
    suite = suite_verdict(results)
    assert [r.task for r in judged(suite)] == ["2_Scale"]
    assert missing_line(suite) == "missing: no solution for 6 of 7 tasks (problems 1, 3, 10-11, 99-100)"
    named = suite_verdict([SolutionVerdict(task=t, solution=None, status="missing") for t in ("softmax", "rmsnorm")])
    assert missing_line(named) == "missing: no solution for 2 of 2 tasks (rmsnorm, softmax)"
    assert missing_line(suite_verdict([_gpu("a", "verified", 1.0)])) is None


def test_a_report_gives_fast_0_only_for_interpreter_runs():
    """Issue 53: a suite of interpreter runs showed `fast_1 100%`, a speed claim the interpreter cannot make."""
    from accelopt.evals.reporting.rows import TaskRow, fast_p

    cpu = [TaskRow(task=t, run_dir="", outcome="optimized", verdict="interpreter", speedup=s,
                   timer="interpreter_wall") for t, s in (("a", 1.28), ("b", 1.03))]
    skipped = TaskRow(task="c", run_dir="", outcome="skipped")
    assert fast_p(cpu + [skipped], ps=(0.0, 1.0, 2.0)) == {0.0: pytest.approx(2 / 3)}
    gpu = TaskRow(task="d", run_dir="", outcome="optimized", verdict="faster", speedup=1.5, timer="cuda_event")
    # with a GPU task beside them: interpreter tasks count as correct (fast_0), never as faster than p
    assert fast_p(cpu + [gpu], ps=(0.0, 1.0, 2.0)) == {0.0: 1.0, 1.0: pytest.approx(1 / 3), 2.0: 0.0}
