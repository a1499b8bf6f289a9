"""One kernel judged as a user would judge it, through the same harness as a run: what
`accelopt check TASK KERNEL` (cli/check.py) and the served `check` graph (graph/check_graph.py)
both call, so that the two give one record.

`judge` evaluates the kernel against `--against`, else the task's baseline, and against the
PyTorch reference where there is neither or `versus_torch` asks. `verdict_record` is the record
`accelopt check --json` prints and the graph returns: the evaluation's fields, the torch.compile
mode where torch.compile was timed, and `before_judge_s`, where the seconds went before the
judge's first step (`Startup`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accelopt.tools.harness.reference_kernel import CompileMode
from accelopt.tools.harness.result import EvalResult, short_reason
from accelopt.tools.task import Task, TaskError

if TYPE_CHECKING:
    from accelopt.tools.backends.protocol import Backend

# What each figure of `before_judge_s` is, in words (the CLI's line, README).
STARTUP_STEPS = {
    "process": "process start and imports",
    "prepare": "task and kernel",
    "judge_pool": "judge pool",
    "judge_start": "judge start and sandbox template",
}


def process_age_s() -> float | None:
    """Seconds since this process started (the kernel's start time of /proc/self against the
    uptime, to the clock tick), or None where /proc cannot say."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return round(max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK")), 3)
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class Startup:
    """Where the seconds before the judge's first step went. `process`: from the process's start to
    the command (the interpreter, its imports; None where it is not this process's own start, as in
    a long-lived server); `prepare`: the task loaded and the sources read; `judge_pool`: the judge
    pool made (confinement checked, stale homes swept; 0 when it was there); `judge_start`: the
    runner's judge_wait, from the request sent to the judge's first step (a judge that was not
    running starts, imports torch and Triton beside its sandbox template, loads the reference and
    forks its first sandboxes; a warm judge answers at once). `to_verdict`: from the process's start
    (else from `began`) to the verdict, set by `done`."""

    process: float | None = None
    prepare: float = 0.0
    judge_pool: float = 0.0
    judge_start: float | None = None
    to_verdict: float | None = None
    began: float = field(default_factory=time.monotonic, repr=False)

    def done(self) -> None:
        self.to_verdict = round((self.process or 0.0) + time.monotonic() - self.began, 3)

    def record(self) -> dict[str, float | None]:
        return {"process": self.process, "prepare": round(self.prepare, 3), "judge_pool": round(self.judge_pool, 3),
                "judge_start": self.judge_start, "to_verdict": self.to_verdict}


def judge(task: Task, kernel: Path, against: Path | None, versus_torch: bool, device: str,
          timeout: float, compile_mode: CompileMode = "default", startup: Startup | None = None,
          seed: int | None = None) -> EvalResult:
    """The kernel's evaluation, timed against --against, else the task's baseline, and against the
    PyTorch reference where there is neither or --versus-torch asks (eager; torch.compile too on a
    GPU: on the CPU interpreter it would time Inductor's C++ against an interpreted kernel).
    `startup` gets the seconds before the judge's first step; `seed` replays an earlier verdict's
    inputs (the Triton backend's). TaskError: the task cannot run here,
    or a source is not a kernel of this task."""
    from accelopt.tools.backends import TritonBackend, backend_for, run_refusal
    from accelopt.tools.harness.reference_kernel import reference_source, torch_comparators
    from accelopt.tools.harness.result import user_paths
    from accelopt.tools.harness.runner import detect_device, gpu_count
    from accelopt.tools.kernelbench_solution import adapt  # a KernelBench solution (ModelNew) gets its entry point

    startup = startup or Startup()
    refusal = run_refusal(task, device)
    if refusal:
        raise TaskError(refusal)
    compare = {}
    text = kernel.read_text()
    source = adapt(task.root, text, task.spec.entry_point)
    if against is not None:
        compare["against"] = adapt(task.root, against.read_text(), task.spec.entry_point)
    if against is None and task.baseline_source:
        compare["baseline"] = task.baseline_source
    where = device if device != "auto" else detect_device()
    if versus_torch or not compare:
        compare.update(torch_comparators(task, compile_mode) if where == "cuda" else {"eager": reference_source(task)})
    backend = backend_for(task)
    startup.prepare = time.monotonic() - startup.began
    if type(backend) is TritonBackend:  # the local judges: made here, so that their making is timed apart
        from accelopt.tools.harness.pool import get_pool

        began = time.monotonic()
        get_pool(where, gpu_count())
        startup.judge_pool = time.monotonic() - began
    if seed is not None and not isinstance(backend, TritonBackend):
        raise TaskError(f"--replay draws the Triton judge's inputs; the {task.spec.backend} backend draws its own")
    replay = {"seed": seed} if seed is not None else {}
    result = backend.evaluate(task, source, device=None if device == "auto" else device,
                              timeout_s=timeout, compare=compare, trusted=False, **replay)
    startup.judge_start = result.phases_s.get("judge_wait")
    if "against" in compare and where == "cuda":
        hold_against_to_its_own_time(backend, task, compare["against"], result, timeout)
    startup.done()
    result.error = user_paths(result.error, str(kernel))  # the user's file, not the sandbox's copy
    if source != text:  # static advice on the entry point accelopt appended is not about the user's file
        lines = len(text.splitlines())
        result.findings = [f for f in result.findings if f.line is None or f.line <= lines]
    return result


def hold_against_to_its_own_time(backend: Backend, task: Task, source: str, result: EvalResult, timeout: float) -> None:
    """An --against kernel is someone's kernel too: one that pads its calls only when it is timed as
    a comparator makes any candidate look faster (2.62x against its own twin on an H100).
    So on a GPU it is also evaluated alone, as a candidate is, and a comparison it ran far slower in
    than alone, or that it failed alone, is void (verdict.void_comparisons); the seconds are
    `phases_s["against_alone"]`. On the interpreter a wall clock says nothing of speed: not run."""
    from accelopt.tools.harness.verdict import void_comparisons

    if not result.ok or "against" not in result.verdicts or "against" in result.void:
        return
    began = time.monotonic()
    own = backend.evaluate(task, source, device="cuda", timeout_s=timeout, compare={}, trusted=False)
    result.phases_s["against_alone"] = round(time.monotonic() - began, 3)
    if not own.ok:
        why = short_reason(own.error, 200) or "no error given"
        void_comparisons(result, reasons={"against": f"the --against kernel failed its own evaluation ({own.status}: {why})"})
        return
    void_comparisons(result, recorded={"against": {w: t.model_dump() for w, t in own.workloads.items()}})
    if "against" not in result.void:
        result.evidence.append(f"vs against: evaluated alone too (seed {own.seed}), it ran as fast alone as when compared, within noise")


def verdict_record(result: EvalResult, compile_mode: str = "default",
                   startup: Startup | None = None) -> dict[str, Any]:
    """The record `accelopt check --json` prints and the `check` graph returns: the evaluation as
    JSON, `torch_compile_mode` where torch.compile was timed, `before_judge_s` (Startup.record)."""
    record = result.model_dump(mode="json")
    if "torch_compile" in result.versus:
        record["torch_compile_mode"] = compile_mode
    if startup is not None:
        record["before_judge_s"] = startup.record()
    return record


def startup_line(startup: Startup) -> str:
    """`before_judge_s` in one line, each figure named."""
    figures = startup.record()
    parts = [f"{STARTUP_STEPS[name]} {figures[name]:.1f}" for name in STARTUP_STEPS if figures[name] is not None]
    line = f"before the judge (s): {', '.join(parts)}"
    if startup.to_verdict is not None:
        line += f"; {startup.to_verdict:.1f} from the {'process' if startup.process is not None else 'request'}'s start to the verdict"
    return line
