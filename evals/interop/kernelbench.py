"""KernelBench interop: a problem file (`Model`, `get_inputs`, `get_init_inputs`) becomes an
accelopt task; the best kernel goes back out as a KernelBench solution (`ModelNew`).

The kernel's entry point receives the forward inputs followed by the Model's parameters and
buffers in registration order, so weights stay data and a kernel cannot bake them in. The
exported ModelNew subclasses the problem's Model, so KernelBench's seeded construction gives it
the very same weights, and forwards them to the kernel.
"""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

from accelopt.evals.interop import read_summary
from accelopt.tools.task import TaskError, load_task

TEMPLATE = Path(__file__).with_name("kernelbench_reference.py")
REQUIRED = ("Model", "get_inputs", "get_init_inputs")


def _constants(source: str, path: Path) -> dict[str, int | float]:
    """Module-level numeric constants (batch_size, dim, ...): the knobs a workload may override."""
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as e:
        raise TaskError(f"{path}: syntax error at line {e.lineno}: {e.msg}") from None
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    missing = [n for n in REQUIRED if n not in defined]
    if missing:
        raise TaskError(f"{path} is not a KernelBench problem: missing {', '.join(missing)}")
    out: dict[str, int | float] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            if isinstance(value, ast.Constant) and type(value.value) in (int, float):
                out[node.targets[0].id] = value.value
    return out


def _describe(problem: Path, constants: dict, dtype: str) -> tuple[str, str]:
    """Run the problem once on the meta device: the call signature for the task description,
    and whether matmul-like FLOPs dominate (tensor-core roof)."""
    from accelopt.evals.interop.kernelbench_reference import load_problem, signature

    module = load_problem(problem)
    for key, value in constants.items():
        setattr(module, key, value)
    doc = (module.Model.__doc__ or "").strip()
    sig, has_matmul = signature(module, dtype)
    return f"{doc}\n{sig}".strip(), "tensor" if has_matmul else "vector"


def import_problem(problem_path: str | Path, out_dir: str | Path, *, dtype: str = "float32",
                   interpreter_params: dict[str, int | float] | None = None, seeds: int = 3) -> Path:
    problem = Path(problem_path)
    if not problem.is_file():
        raise TaskError(f"problem file not found: {problem}")
    source = problem.read_text()
    constants = _constants(source, problem)
    unknown = sorted(set(interpreter_params or {}) - set(constants))
    if unknown:
        raise TaskError(f"{problem}: no module-level constant named {', '.join(unknown)} to override "
                        f"(have: {', '.join(constants) or 'none'})")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(problem, out / "problem.py")
    shutil.copyfile(TEMPLATE, out / "reference.py")
    try:
        description, flops_kind = _describe(out / "problem.py", constants, dtype)
    except Exception as e:  # noqa: BLE001 - the user's problem file failed; say so in one line
        raise TaskError(f"{problem}: running Model on the meta device failed: {type(e).__name__}: {e}") from None
    name = problem.stem
    spec = {
        "name": name,
        "description": f"KernelBench problem {name}. {description}",
        "backend": "triton", "dtype": dtype, "flops_kind": flops_kind, "entry_point": "run",
        "workloads": [{"name": "default", "params": constants}],
        "interpreter_workloads": [{"name": "interpreter" if interpreter_params else "default",
                                   "params": {**constants, **(interpreter_params or {})}}],
        "seeds": seeds,
        "atol": 1e-4 if dtype == "float32" else 1e-2, "rtol": 1e-4 if dtype == "float32" else 1e-2,
        "origin": {"format": "kernelbench", "problem": problem.name},
    }
    (out / "task.json").write_text(json.dumps(spec, indent=2) + "\n")
    load_task(out)
    return out


def solution_source(task_dir: str | Path, kernel_source: str) -> str:
    """A KernelBench solution file: the problem (for Model), the kernel, and ModelNew."""
    task_dir = Path(task_dir)
    problem = task_dir / "problem.py"
    if not problem.is_file():
        raise TaskError(f"{task_dir} was not imported from KernelBench (no problem.py)")
    entry = load_task(task_dir).spec.entry_point
    return (
        "# KernelBench solution written by accelopt: the problem's Model (for its parameters),\n"
        "# the optimized kernel, and ModelNew, which hands the parameters to the kernel.\n"
        f"{problem.read_text().rstrip()}\n\n\n"
        "# ---- accelopt kernel ----\n"
        f"{kernel_source.rstrip()}\n\n\n"
        f"_accelopt_entry = {entry}\n\n\n"
        "class ModelNew(Model):\n"
        "    def forward(self, *inputs):\n"
        "        return _accelopt_entry(*inputs, *self.parameters(), *self.buffers())\n"
    )


def export_run(run_dir: str | Path, out_file: str | Path) -> Path:
    run_dir = Path(run_dir)
    task_dir = read_summary(run_dir)["task_dir"]
    out = Path(out_file)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(solution_source(task_dir, (run_dir / "best_kernel.py").read_text()))
    return out
