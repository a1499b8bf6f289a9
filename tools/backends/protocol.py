"""What every kernel backend is: is it usable here (and why not), and evaluate a source against a task.

`availability()` (usable here? can it time? why not), `refuse(task, device)` (why a run of this
task cannot happen here) and `evaluate(task, source, ...) -> EvalResult`. The backends are in
tools/backends/__init__.py (`TritonBackend` over tools/harness, `RayTritonBackend` on a Ray
cluster) and nki.py (`NKIBackend`); `backend_for` picks one, for nodes/services.measure. Setup
refuses a task whose backend cannot run or time here, before any model call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from accelopt.tools.harness.result import EvalResult
from accelopt.tools.task import Task


@dataclass(frozen=True)
class Availability:
    usable: bool
    detail: str            # what it will run on, or why it cannot run and how to fix that
    can_time: bool = True  # False: correctness can be checked here, but no kernel can be timed

    def refusal(self) -> str | None:
        """Why a run cannot optimize on this machine, or None."""
        if not self.usable:
            return self.detail
        if not self.can_time:
            return f"{self.detail}; an optimization run needs timings: run it on a machine that has the hardware"
        return None


class Backend(Protocol):
    name: str

    def availability(self) -> Availability: ...

    def refuse(self, task: Task, device: str) -> str | None: ...

    def evaluate(self, task: Task, source: str, *, device: str | None, timeout_s: float,
                 compare: dict[str, str], trusted: bool) -> EvalResult: ...
