"""KernelBench interop: a problem file (`Model`, `get_inputs`, `get_init_inputs`) becomes an
accelopt task; the best kernel goes back out as a KernelBench solution (`ModelNew`).

The kernel's entry point receives the forward inputs followed by the Model's state (parameters,
buffers, tensor attributes), so weights stay data and a kernel cannot bake them in. The exported
ModelNew subclasses the problem's Model, so KernelBench's seeded construction gives it the very
same weights, and forwards them to the kernel. A KernelBench solution (ModelNew, no `run`) given to
`accelopt check` or as the baseline gets a `run` (tools/kernelbench_solution.py) that builds ModelNew
as KernelBench does, with the Model's weights (kernelbench_reference.ModelNewEntry).

Every number the problem's module-level size assignments bind is a knob (kernelbench_sizes.py).
The GPU workload is the problem as written; the CPU interpreter's workload is shrunk automatically
(kernelbench_shrink.py) and checked by running the Model once on CPU.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import shutil
from pathlib import Path

from accelopt.evals.interop import kernelbench_reference as kbref
from accelopt.evals.interop import kernelbench_sizes as kbsizes
from accelopt.evals.interop.kernelbench_export import export_run, solution_source  # noqa: F401 - re-exported
from accelopt.evals.interop.kernelbench_shrink import TARGET_ELEMENTS, shrink
from accelopt.tools import pyparse
from accelopt.tools.task import TaskError, TaskSpec, load_task, read_utf8, task_spec, write_spec

HERE = Path(__file__).resolve().parent
TASK_FILES = {"reference.py": HERE / "kernelbench_reference.py", "kernelbench_sizes.py": HERE / "kernelbench_sizes.py"}
REQUIRED = ("Model", "get_inputs", "get_init_inputs")
# atol = rtol, as KernelBench's get_tolerance_for_precision (src/kernelbench/eval.py).
KERNELBENCH_TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2}
# What `pip install` calls a module the problems import, where the names differ.
PIP_NAMES = {"sklearn": "scikit-learn", "PIL": "pillow", "cv2": "opencv-python", "yaml": "pyyaml"}


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}"


def parse_problem(path: Path) -> ast.Module:
    """The problem's syntax tree, after checking that it is a KernelBench problem whose imports
    are installed here."""
    try:
        tree = pyparse.parse(read_utf8(path), filename=str(path))
    except SyntaxError as e:
        raise TaskError(f"{path}: syntax error at line {e.lineno}: {e.msg}") from None
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    missing = [n for n in REQUIRED if n not in defined]
    if missing:
        raise TaskError(f"{path} is not a KernelBench problem: missing {', '.join(missing)}")
    absent = missing_packages(tree)
    if absent:
        pip = " ".join(PIP_NAMES.get(p, p) for p in absent)
        raise TaskError(f"{path.name} needs the Python package{'s' if len(absent) > 1 else ''} "
                        f"{', '.join(absent)}, not installed here (pip install {pip})")
    return tree


def missing_packages(tree: ast.Module) -> list[str]:
    """Top-level modules the problem imports (anywhere in the file) that cannot be found."""
    wanted: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            wanted += [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            wanted.append(node.module.split(".")[0])
    return [m for m in dict.fromkeys(wanted) if importlib.util.find_spec(m) is None]


def kernelbench_origin(problem: Path) -> dict[str, str]:
    """Level and problem id where the file sits in a KernelBench checkout (level1/19_ReLU.py)."""
    origin = {"format": "kernelbench", "problem": problem.name}
    level = re.fullmatch(r"level(\d+)", problem.parent.name)
    number = re.match(r"(\d+)_", problem.name)
    if level and number:
        origin.update(level=level.group(1), problem_id=number.group(1))
    return origin


REAL_TRIES = 4  # sizes tried for real at the end, from the smallest up
REAL_CHECK_ELEMENTS = 4 * TARGET_ELEMENTS  # below this, each shrinking step also runs the Model for real


def _workload_cost(problem: kbref.Problem):
    """(elements, FLOPs) at some sizes; raises where they break the Model. Checked on the meta
    device, and for real once small (the meta device misses some errors: a conv kernel larger
    than its input). A Model that cannot run on the meta device at all (`.item()`) is judged by
    its inputs' size until small enough for a real run."""
    runs_on_meta: list[bool] = []

    def cost(params: dict) -> tuple[int, int | None]:
        m = kbref.measure(problem, params, "float32", quick=True)
        if not runs_on_meta:
            runs_on_meta.append(m["error"] is None)
        if m["outputs"] is None and runs_on_meta[0]:
            raise RuntimeError(m["error"])
        if m["elements"] <= REAL_CHECK_ELEMENTS:
            kbref.run_once(problem, params)
        return m["elements"], m["flops"]
    return cost


def updated_state(task_dir: Path, params: dict, dtype: str) -> list[str]:
    """Build the Model and run forward once on CPU at these sizes, as the judge will; the names
    of the state it updates."""
    problem = kbref.Problem(task_dir / "problem.py")
    runner = kbref.Runner(problem, [params])
    args = problem.make_inputs(params, 0, "cpu", dtype)
    _, updated = runner.run(args, params)
    slots = runner.model(params)[1]
    first = len(args) - len(slots)
    return [slots[i - first][3] for i in updated]


def _describe_override(overrides: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in overrides.items())


def interpreter_workload(task_dir: Path, problem: kbref.Problem, overrides: dict, dtype: str) -> tuple[dict, str]:
    """The CPU interpreter's params (free knobs shrunk, the user's overrides kept) and a note on
    the Model's state it updates; raises TaskError where the overrides break the Model."""
    tree = problem.tree
    cost = _workload_cost(problem)
    free = kbsizes.free_knobs(tree)
    try:
        cost({**free, **overrides})
    except Exception as e:  # noqa: BLE001 - the sizes given break the Model
        if overrides:
            raise TaskError(f"{task_dir.name}: --interpreter-param {_describe_override(overrides)} breaks the "
                            f"Model: {_one_line(e)}") from None
        raise TaskError(f"{task_dir.name}: the Model fails at its own sizes: {_one_line(e)}") from None
    result = shrink(cost, free, overrides)
    error: Exception | None = None
    for params in result.history[:REAL_TRIES]:  # the smallest first; a larger one where a real run disagrees
        try:
            names = updated_state(task_dir, params, dtype)
        except Exception as e:  # noqa: BLE001 - tried on the next larger sizes
            error = e
            continue
        note = (f" Forward updates the Model's state {', '.join(names)} (the reference works on copies; the kernel "
                "receives it read-only and need not update it: outputs are what is compared, as in KernelBench)."
                if names else "")
        if not result.fits and params == result.history[0]:
            note += (f" The interpreter workload stays above {TARGET_ELEMENTS} elements ({result.elements}): "
                     "the Model's own sizes are fixed in its code.")
        return params, note
    assert error is not None  # every size tried failed (the history holds at least the sizes first tried)
    if overrides:
        raise TaskError(f"{task_dir.name}: --interpreter-param {_describe_override(overrides)} breaks the Model: "
                        f"{_one_line(error)}")
    raise TaskError(f"{task_dir.name}: the Model fails on CPU at the interpreter sizes: {_one_line(error)}")


def _signature_text(m: dict) -> tuple[str, bool]:
    import torch

    def fmt(t):
        return f"{list(t.shape)} {str(t.dtype).replace('torch.', '')}" if isinstance(t, torch.Tensor) else repr(t)
    state = [f"{name} {fmt(t)}" for (_, _, _, name), t in zip(kbref.state_slots(m["model"]), m["state"])]
    outputs = ", ".join(fmt(o) for o in m["outputs"]) if m["outputs"] is not None else "unknown (not run)"
    text = (f"run(*inputs, *state) must return what Model.forward returns. inputs: "
            f"{', '.join(fmt(x) for x in m['inputs']) or 'none'}; state (the Model's parameters, buffers and tensor "
            f"attributes, in registration order): {', '.join(state) or 'none'}; output: {outputs}.")
    return text, bool(m["flops"])


def _sizes_text(tree: ast.Module, params: dict) -> str:
    values = kbsizes.flatten(kbsizes.evaluate(tree, params))
    return ", ".join(f"{k}={v}" for k, v in values.items())


def import_problem(problem_path: str | Path, out_dir: str | Path, *, dtype: str = "float32",
                   interpreter_params: dict[str, int | float] | None = None, seeds: int = 3,
                   name: str | None = None) -> Path:
    problem = Path(problem_path)
    if not problem.is_file():
        raise TaskError(f"problem file not found: {problem}")
    tree = parse_problem(problem)
    knobs = kbsizes.flatten(kbsizes.evaluate(tree))
    overrides = dict(interpreter_params or {})
    unknown = sorted(set(overrides) - set(knobs))
    if unknown:
        raise TaskError(f"{problem}: no module-level constant named {', '.join(unknown)} to override "
                        f"(have: {', '.join(knobs) or 'none'})")
    out = Path(out_dir)
    origin = kernelbench_origin(problem)
    name = name or problem.stem
    free = kbsizes.free_knobs(tree)
    # the spec as far as it is known before the Model runs (its own sizes stand in for the interpreter's):
    # a malformed import (its name, dtype, seeds, sizes) is refused before anything is written
    _task_spec(out, name, "", dtype, False, free, free, seeds, origin)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(problem, out / "problem.py")
    for target, source in TASK_FILES.items():
        shutil.copyfile(source, out / target)
    try:
        loaded = kbref.Problem(out / "problem.py")
        default = kbref.measure(loaded, {}, dtype, quick=True)  # shapes; flops() counts on meta later
    except Exception as e:  # noqa: BLE001 - the user's problem file failed; say so in one line
        raise TaskError(f"{problem}: building the Model at its own sizes failed: {_one_line(e)}") from None
    cpu_dtype = "float32" if dtype == "bfloat16" else dtype  # as TaskSpec.dtype_for("cpu")
    params, state_note = interpreter_workload(out, loaded, overrides, cpu_dtype)
    signature, has_matmul = _signature_text(default)
    if default["flops"] is None:  # counted where it could run: the interpreter's sizes
        has_matmul = bool(kbref.measure(loaded, params, "float32", quick=True)["flops"])
        signature += " FLOPs at the GPU sizes: unknown (the Model cannot run on the meta device)."
    doc = " ".join((loaded.module.Model.__doc__ or "").split())
    where = f"level {origin['level']} problem {origin['problem_id']} " if "level" in origin else "problem "
    description = (f"KernelBench {where}{problem.stem}. "
                   f"{doc}\n{signature}\nSizes (GPU workload): {_sizes_text(tree, {})}. Interpreter workload: "
                   f"{_sizes_text(tree, params)}. Read sizes from the tensors' shapes.{state_note}")
    write_spec(out, _task_spec(out, name, description.strip(), dtype, has_matmul, free, params, seeds, origin))
    load_task(out)
    return out


def _task_spec(out: Path, name: str, description: str, dtype: str, has_matmul: bool, free: dict, params: dict,
               seeds: int, origin: dict[str, str]) -> TaskSpec:
    """The task's spec, checked as every task.json is (TaskError naming the file it would be)."""
    atol = rtol = KERNELBENCH_TOLERANCE.get(dtype)  # an unknown dtype is the spec's error to report
    return task_spec({
        "name": name, "description": description,
        "backend": "triton", "dtype": dtype, "flops_kind": "tensor" if has_matmul else "vector", "entry_point": "run",
        "workloads": [{"name": "default", "params": free}],
        "interpreter_workloads": [{"name": "interpreter" if params != free else "default", "params": params}],
        "seeds": seeds, "atol": atol, "rtol": rtol, "origin": origin,
    }, out / "task.json")
