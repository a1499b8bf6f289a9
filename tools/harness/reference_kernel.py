"""The task's PyTorch reference, wrapped as a kernel module the harness can time.

Two uses: the starting point of a from-scratch run (a task with no baseline.py), where speedups
are then against the reference itself, as KernelBench reports them; and the torch.compile
comparator of reports. Both are the task's own code, so they skip the static checks that a
generated kernel must pass (they are torch code by design).
"""

from __future__ import annotations

from pathlib import Path

from accelopt.tools.task import Task

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
        _compiled[function] = torch.compile(function, dynamic=False)
    return _compiled[function](*inputs)
'''


def compiled_reference_source(task: Task) -> str:
    """The task's reference under torch.compile (default mode, Inductor), compiled on first call."""
    path = str(Path(task.root) / "reference.py")
    return (f'"""torch.compile of the PyTorch reference of task {task.name}."""\n'
            + _LOAD.format(path=path) + _COMPILED.format(entry=task.spec.entry_point))


def torch_comparators(task: Task) -> dict[str, str]:
    """What reports compare kernels with: torch.compile of the reference, and eager PyTorch."""
    return {"torch_compile": compiled_reference_source(task), "eager": reference_source(task)}
