"""The task's PyTorch reference, wrapped as a kernel module the harness can time.

Two uses: the starting point of a from-scratch run (a task with no baseline.py), where speedups
are then against the reference itself, as KernelBench reports them; and the torch.compile
comparator of reports. Both are the task's own code, so they skip the static checks that a
generated kernel must pass (they are torch code by design).

The comparator compiles in one of COMPILE_MODES. max-autotune-no-cudagraphs is torch.compile's
strongest kernel search (autotuned matmul templates, coordinate-descent launch tuning), its
kernels launched as a kernel under test is. "max-autotune" (the same under CUDA graphs) is not
offered: a graph's outputs live in the graph's own pool, overwritten by its next replay, and the
judge's sandbox could not hand them back (on an H100, 2026-11-27: "the kernel's outputs could not
be handed back"); cloning them would time a copy torch.compile does not make.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from accelopt.tools.task import Task

CompileMode = Literal["default", "max-autotune-no-cudagraphs"]
COMPILE_MODES: tuple[CompileMode, ...] = ("default", "max-autotune-no-cudagraphs")

_LOAD = '''import importlib.util

import torch

_spec = importlib.util.spec_from_file_location("accelopt_task_reference", {path!r})
_reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_reference)
'''


def reference_source(task: Task) -> str:
    """A module whose entry point is the task's reference, eager PyTorch."""
    path = str(Path(task.root) / "reference.py")
    return (f'"""The PyTorch reference of task {task.name}: the starting point, no Triton kernel yet."""\n'
            + _LOAD.format(path=path)
            + f"\n\ndef {task.spec.entry_point}(*inputs):\n    return _reference.reference(*inputs)\n")


_COMPILED = '''
# A reference that builds what it runs (a KernelBench Model) offers `traceable_for(*inputs)`: the
# computation for those inputs as one traceable function, found outside the compiled region.
_traceable_for = getattr(_reference, "traceable_for", lambda *inputs: None)
_compiled = {{}}


def {entry}(*inputs):
    function = _traceable_for(*inputs) or _reference.reference
    if function not in _compiled:
        _compiled[function] = torch.compile(function, dynamic=False, mode={mode!r})
    return _compiled[function](*inputs)
'''


def compiled_reference_source(task: Task, mode: CompileMode = "default") -> str:
    """The task's reference under torch.compile (Inductor) in `mode`, compiled on first call."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"torch.compile mode {mode!r}: expected one of {', '.join(COMPILE_MODES)}")
    path = str(Path(task.root) / "reference.py")
    return (f'"""torch.compile (mode {mode}) of the PyTorch reference of task {task.name}."""\n'
            + _LOAD.format(path=path)
            + _COMPILED.format(entry=task.spec.entry_point, mode=None if mode == "default" else mode))


def mode_note(mode: str) -> str:
    """What a figure against torch.compile adds to say its mode: nothing for the default mode."""
    return "" if mode == "default" else f" (mode {mode})"


# Comparators whose source is the task's own reference (eager, or torch.compile of it): not someone's
# kernel, so their timed outputs go unchecked (timing_rounds: every other comparator's are checked).
OWN_COMPARATORS = ("torch_compile", "eager", "reference")


def torch_comparators(task: Task, mode: CompileMode = "default") -> dict[str, str]:
    """What reports compare kernels with: torch.compile of the reference in `mode`, and eager PyTorch."""
    return {"torch_compile": compiled_reference_source(task, mode), "eager": reference_source(task)}
