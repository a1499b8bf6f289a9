"""KernelBench solutions: the best kernel as a file defining ModelNew, named and laid out as
KernelBench's own scripts write and read them: `runs/<run_name>/level_<L>_problem_<P>_sample_<S>_kernel.py`
(scripts/generate_samples.py, scripts/eval_from_generations.py).

KernelBench's static checker rejects a solution containing `pass` or try/except anywhere, so the
problem's code goes in without its docstrings and comments ("forward pass" would trip it).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from accelopt.evals.interop import read_summary
from accelopt.tools import pyparse
from accelopt.tools.kernelbench_solution import MARK as MODEL_NEW_MARK
from accelopt.tools.kernelbench_solution import original
from accelopt.tools.task import TaskError, load_task

REFERENCE_MARK = "accelopt_task_reference"  # reference_kernel.py's module: the PyTorch reference, not a kernel
# KernelBench's strict static checks (src/kernelbench/kernel_static_checker.py: code_bypass).
_BYPASS = [(r"\btry\s*:|\bexcept\s*:|\bexcept\s+\w+", "try/except"), (r"\bpass\b", "`pass`")]

_MODEL_NEW = '''

def _accelopt_state(model, like):
    """The Model's state as the task hands it to the kernel: parameters, buffers, then plain
    tensor attributes (on the inputs' device)."""
    attributes = [v for _, m in model.named_modules() for v in vars(m).values() if isinstance(v, torch.Tensor)]
    if like is not None:
        attributes = [a.to(like.device, like.dtype if a.is_floating_point() and like.is_floating_point() else a.dtype)
                      for a in attributes]
    return [*model.parameters(), *model.buffers(), *attributes]


class ModelNew(Model):
    def forward(self, *inputs):
        like = next((x for x in inputs if isinstance(x, torch.Tensor)), None)
        return _accelopt_entry(*inputs, *_accelopt_state(self, like))
'''


def _without_docstrings(source: str) -> str:
    tree = pyparse.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Expr(ast.Constant(None))]
    return ast.unparse(tree)


def solution_source(task_dir: str | Path, kernel_source: str) -> str:
    """A KernelBench solution file: the problem (for Model and its sizes), the kernel, and ModelNew;
    a kernel that is itself a KernelBench solution (a ModelNew given as the baseline) as it was given."""
    if MODEL_NEW_MARK in kernel_source:
        return original(kernel_source)
    task_dir = Path(task_dir)
    problem = task_dir / "problem.py"
    if not problem.is_file():
        raise TaskError(f"{task_dir} was not imported from KernelBench (no problem.py)")
    entry = load_task(task_dir).spec.entry_point
    return (
        "# KernelBench solution written by accelopt: the problem's Model (for its parameters),\n"
        "# the optimized kernel, and ModelNew, which hands the Model's state to the kernel.\n"
        "import torch\n"
        f"{_without_docstrings(problem.read_text()).rstrip()}\n\n\n"
        "# ---- accelopt kernel ----\n"
        f"{kernel_source.rstrip()}\n\n\n"
        f"_accelopt_entry = {entry}\n"
        f"{_MODEL_NEW}"
    )


def static_notes(source: str) -> list[str]:
    """What KernelBench's strict static check would reject in a solution (comments stripped as it does)."""
    code = "\n".join(line.split("#")[0] for line in source.splitlines())
    return [f"KernelBench's strict static check (code_bypass) would reject this solution: it contains {what}"
            for pattern, what in _BYPASS if re.search(pattern, code)]


# KernelBench's file name for a problem's solution: what `solution_name` writes and
# `accelopt check TASKS/ SOLUTIONS/` reads back (evals/reporting/check_suite.py).
SOLUTION_FILE = re.compile(r"level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py")


def solution_name(origin: dict | None, sample_id: int) -> str:
    if not origin or "level" not in origin or "problem_id" not in origin:
        raise TaskError("the task does not record its KernelBench level and problem id (imported from a file "
                        "outside a KernelBench checkout): give --out a .py file name instead of a folder")
    return f"level_{origin['level']}_problem_{origin['problem_id']}_sample_{sample_id}_kernel.py"


def _run_dirs(path: Path) -> list[Path]:
    """A run directory, or every task run of an eval directory (`accelopt eval`'s output)."""
    if (path / "summary.json").is_file():
        return [path]
    runs = sorted(p for p in path.iterdir() if (p / "summary.json").is_file()) if path.is_dir() else []
    if not runs:
        read_summary(path)  # raises the usual one-line error
    return runs


@dataclass
class Export:
    written: list[Path] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # run -> why (an eval directory's runs only)


def _kernel_of(run: Path) -> str:
    """The run's best kernel; refused where it is still the task's PyTorch reference."""
    summary = read_summary(run)
    kernel = run / "best_kernel.py"
    if not kernel.is_file():
        raise TaskError(f"{run} has no best_kernel.py")
    source = kernel.read_text()
    best = run / "candidates" / summary.best_id / "result.json"
    kind = json.loads(best.read_text()).get("kind") if best.is_file() else None
    if kind == "reference" or REFERENCE_MARK in source:
        raise TaskError(f"{run}: the best is still the task's PyTorch reference (no Triton kernel beat it); "
                        "there is no kernel to export")
    return source


def export_run(run_dir: str | Path, out: str | Path, sample_id: int = 0) -> Export:
    """Write the solution of a run (or of each run of an eval directory). `out` ending in .py is
    the file; otherwise it is a KernelBench runs/<run_name> folder, files named as KernelBench names them."""
    out = Path(out)
    runs = _run_dirs(Path(run_dir))
    if out.suffix == ".py" and len(runs) > 1:
        raise TaskError(f"{run_dir} holds {len(runs)} runs: give --out a folder (KernelBench's runs/<run_name>)")
    export = Export()
    for run in runs:
        try:
            kernel = _kernel_of(run)
            task_dir = Path(read_summary(run).task_dir)
            target = out if out.suffix == ".py" else out / solution_name(_origin(task_dir), sample_id)
            text = solution_source(task_dir, kernel)
        except TaskError as e:
            if len(runs) == 1 and run == Path(run_dir):
                raise
            export.skipped[run.name] = str(e)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        export.written.append(target)
    return export


def _origin(task_dir: Path) -> dict | None:
    return json.loads((task_dir / "task.json").read_text()).get("origin")
