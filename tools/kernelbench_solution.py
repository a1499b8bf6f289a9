"""KernelBench solutions as kernels of a task imported from KernelBench.

A KernelBench solution is a module defining `class ModelNew(nn.Module)`, built with the problem's
get_init_inputs() and called as forward(*get_inputs()), usually with its Triton kernels in the
same file. A task imported from KernelBench (a folder with problem.py) calls its entry point as
`run(*inputs, *state)`. Where a source enters (`accelopt check`, a task's baseline.py), a module
that defines ModelNew and no entry point gets one appended: a `run` that hands the call to the
task's reference.py (`model_new_entry`), which builds ModelNew as KernelBench does, with the
Model's weights, and calls its forward. The judge, the sandbox and the audit then see an ordinary
kernel module; a ModelNew that computes with torch instead of Triton is judged as any kernel is.
"""

from __future__ import annotations

import ast
from pathlib import Path

from accelopt.tools import pyparse
from accelopt.tools.task_error import TaskError

MARK = "# ---- accelopt: KernelBench ModelNew as the task's entry point ----"
_ENTRY = '''


{mark}
# The task calls {entry}(*inputs, *state); KernelBench builds ModelNew(*get_init_inputs()) and calls its
# forward. The task's reference.py (model_new_entry) builds ModelNew as KernelBench does, with the
# Model's weights, and calls its forward on the inputs.
import importlib.util as _accelopt_importlib_util

_accelopt_spec = _accelopt_importlib_util.spec_from_file_location("accelopt_kernelbench_task", {path!r})
_accelopt_task = _accelopt_importlib_util.module_from_spec(_accelopt_spec)
_accelopt_spec.loader.exec_module(_accelopt_task)
_accelopt_model_new = _accelopt_task.model_new_entry(ModelNew)


def {entry}(*inputs_and_state):
    return _accelopt_model_new(*inputs_and_state)
'''


def _bound(body: list[ast.stmt]) -> set[str]:
    """Names a module binds at its top level (in if/try/with blocks too, not in functions or classes)."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            inner = [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", []),
                     *(s for h in getattr(node, "handlers", []) for s in h.body)]
            names |= _bound(inner)
    return names


def is_solution(source: str, entry_point: str) -> bool:
    """A KernelBench solution: ModelNew defined, the task's entry point not."""
    try:
        names = _bound(pyparse.parsed(source).body)
    except (SyntaxError, ValueError):  # the harness reports it
        return False
    return "ModelNew" in names and entry_point not in names


def adapt(task_root: str | Path, source: str, entry_point: str) -> str:
    """`source` as a kernel module of the task: a KernelBench solution of a task imported from
    KernelBench gets its entry point; anything else is returned as it is."""
    root = Path(task_root).resolve()
    if not (root / "problem.py").is_file() or not is_solution(source, entry_point):
        return source
    reference = root / "reference.py"
    if "def model_new_entry(" not in reference.read_text(errors="replace"):
        raise TaskError(f"{root.name}: a KernelBench solution (ModelNew) needs a task imported by this version of "
                        "accelopt: import the problem again (accelopt import kernelbench PROBLEM --out DIR)")
    return source.rstrip() + _ENTRY.format(mark=MARK, entry=entry_point, path=str(reference))


def original(source: str) -> str:
    """A source as it was before `adapt`: the KernelBench solution itself."""
    return source.split(MARK)[0].rstrip() + "\n" if MARK in source else source
