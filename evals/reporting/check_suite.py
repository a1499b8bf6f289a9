"""`accelopt check TASKS/ SOLUTIONS/`: a folder of solutions judged against a folder of tasks, as
KernelBench judges a run: each solution against the task's PyTorch reference (eager, and
torch.compile on a GPU), then fast_p over the whole suite (the share of *all* tasks whose solution
is correct and more than p times faster: a task with no solution, or a rejected one, counts as
not correct).

Solutions are matched to tasks by KernelBench's own file names
(`level_<L>_problem_<P>_sample_<S>_kernel.py`, through the level and problem id a task imported
from a KernelBench checkout records), or by the task's name (`<task>.py`). Tasks come in natural
order (1, 2, ..., 10, 11, ..., 100: KernelBench's numbered names), and what a terminal shows of
them reads whole at 80 columns: the judged rows (`judged`), the tasks with no solution folded into
one line (`missing_line`), never a row each."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from accelopt.evals.interop.kernelbench_export import SOLUTION_FILE
from accelopt.tools.task import Task, TaskError, load_task

FAST_P = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)  # KernelBench reports fast_0, fast_1, fast_2 among others
TORCH_COMPARATORS = ("eager", "torch_compile")


@dataclass
class Pairing:
    task: Task
    solution: Path | None  # None: no file in the solutions folder for this task


class SolutionVerdict(BaseModel):
    """One task's line: its solution's status and speedups over the reference (speedup > 1: faster)."""

    task: str
    solution: str | None
    status: str                   # the harness's status, or "missing" (no solution for the task)
    error: str | None = None
    timer: str | None = None
    speedup: dict[str, float] = {}  # comparator (eager, torch_compile) -> geomean speedup over workloads
    interval: dict[str, tuple[float, float]] = {}

    @property
    def correct(self) -> bool:
        return self.status == "verified"


class SuiteVerdict(BaseModel):
    tasks: int
    correct: int
    timer: str | None             # the one timer every judged solution ran under, else None
    fast_p: dict[str, dict[str, float | None]]  # comparator -> p -> share of all tasks; None where not measurable
    note: str | None = None
    torch_compile_mode: str = "default"  # the torch.compile comparator's mode (reference_kernel.COMPILE_MODES)
    results: list[SolutionVerdict]


def natural_key(name: str) -> list[int | str]:
    """Sorts names as people count: 1_x, 2_x, ..., 10_x, 100_x (not 1, 10, 100, 11)."""
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", name)]


def pair_solutions(tasks_dir: Path, solutions_dir: Path, sample: int = 0) -> list[Pairing]:
    """Every task folder under tasks_dir with its solution file (None where there is none), in natural order."""
    folders = sorted((p for p in tasks_dir.iterdir() if (p / "task.json").is_file()), key=lambda p: natural_key(p.name))
    if not folders:
        raise TaskError(f"{tasks_dir}: no task folders in it (folders holding a task.json)")
    by_problem: dict[tuple[int, int], Path] = {}
    for path in solutions_dir.glob("*.py"):
        match = SOLUTION_FILE.fullmatch(path.name)
        if match and int(match.group(3)) == sample:
            by_problem[(int(match.group(1)), int(match.group(2)))] = path
    pairings = []
    for folder in folders:
        task = load_task(folder)
        origin = task.spec.origin or {}
        solution = solutions_dir / f"{task.name}.py"
        if not solution.is_file():
            key = (int(origin["level"]), int(origin["problem_id"])) if {"level", "problem_id"} <= set(origin) else None
            solution = by_problem.get(key) if key else None  # type: ignore[assignment]
        pairings.append(Pairing(task, solution))
    if not any(p.solution for p in pairings):
        raise TaskError(f"{solutions_dir}: no solution matches a task of {tasks_dir} (looked for <task name>.py and "
                        f"KernelBench's level_<L>_problem_<P>_sample_{sample}_kernel.py)")
    return pairings


def verdict_of(task: Task, solution: Path | None, result) -> SolutionVerdict:  # result: EvalResult | None
    if result is None:
        return SolutionVerdict(task=task.name, solution=None, status="missing",
                               error="no solution file for this task")
    speedup = {k: v.speedup for k, v in result.versus.items()} if result.ok else {}
    interval = {k: (v.ci_low, v.ci_high) for k, v in result.versus.items()} if result.ok else {}
    return SolutionVerdict(task=task.name, solution=str(solution), status=result.status, error=result.error,
                           timer=result.timer, speedup=speedup, interval=interval)


def suite_verdict(results: list[SolutionVerdict], ps: tuple[float, ...] = FAST_P) -> SuiteVerdict:
    """fast_p per comparator over all tasks, as KernelBench computes it. Interpreter times are not
    performance: there only fast_0 (correct, whatever the speed) is given."""
    timers = {r.timer for r in results if r.timer}
    timer = timers.pop() if len(timers) == 1 else None
    comparable = timer == "cuda_event"
    n = len(results)
    fast: dict[str, dict[str, float | None]] = {}
    for name in TORCH_COMPARATORS:
        if not any(name in r.speedup for r in results) and name != "eager":
            continue
        fast[name] = {str(p): (sum(r.correct and (p == 0 or r.speedup.get(name, 0.0) > p) for r in results) / n
                               if comparable or p == 0 else None) for p in ps}
    note = None
    if not comparable:
        note = ("times are not GPU times (" + (timer or "mixed timers") + "): only fast_0, the share correct, "
                "is given")
    return SuiteVerdict(tasks=n, correct=sum(r.correct for r in results), timer=timer, fast_p=fast, note=note,
                        results=results)


def judged(suite: SuiteVerdict) -> list[SolutionVerdict]:
    """The rows a terminal shows one by one: every task a solution was found for, in natural order."""
    return sorted((r for r in suite.results if r.status != "missing"), key=lambda r: natural_key(r.task))


def missing_line(suite: SuiteVerdict) -> str | None:
    """The tasks with no solution as one line, in natural order: KernelBench's numbered names
    (`<P>_<name>`) as ranges of their numbers, other names listed; None when every task has one."""
    names = sorted((r.task for r in suite.results if r.status == "missing"), key=natural_key)
    if not names:
        return None
    numbers = [re.match(r"(\d+)_", name) for name in names]
    if all(numbers):
        ids = sorted({int(m.group(1)) for m in numbers if m})
        runs: list[list[int]] = []
        for n in ids:
            if runs and n == runs[-1][-1] + 1:
                runs[-1].append(n)
            else:
                runs.append([n])
        listed = "problems " + ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)
    else:
        listed = ", ".join(names)
    return f"missing: no solution for {len(names)} of {suite.tasks} tasks ({listed})"
