"""The task format: a directory holding task.json, reference.py and an optional baseline.py.

task.json      metadata (name, description, backend, dtype, workloads, tolerances)
reference.py   make_inputs(workload, seed, device, dtype) -> tuple of tensors (NumPy arrays for NKI)
               reference(*inputs) -> tensor, or a tuple of them
               flops(workload, dtype) -> float, bytes_moved(workload, dtype) -> float
               NKI tasks also: matmul_flops(workload, dtype) -> the TensorEngine share of flops
baseline.py    the starting kernel: a module whose `run(*inputs)` returns the output. Without
               one, the run starts "from scratch": the executor writes a first kernel from the
               reference, and speedups are measured against the reference itself.

Loading validates everything up front so that a malformed task fails with one clear line
before any tokens are spent.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

REFERENCE_FUNCTIONS = ("make_inputs", "reference", "flops", "bytes_moved")
# Trainium's roofline splits compute between the TensorEngine and the Vector/Scalar engines.
NKI_REFERENCE_FUNCTIONS = (*REFERENCE_FUNCTIONS, "matmul_flops")

# Default tolerances by dtype (atol, rtol); an element fails only when both bounds fail.
DTYPE_TOLERANCES: dict[str, tuple[float, float]] = {
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
}


class TaskError(ValueError):
    """A task directory that cannot be used; the message says what to fix."""


class Workload(BaseModel):
    name: str
    params: dict[str, int | float]


class TaskSpec(BaseModel):
    name: str
    description: str
    backend: Literal["triton", "nki"] = "triton"
    dtype: Literal["float32", "float16", "bfloat16"]
    # bf16 arithmetic is broken in the Triton interpreter, so CPU checks may use another dtype.
    interpreter_dtype: Literal["float32", "float16"] | None = None
    entry_point: str = "run"
    # Which compute roof applies: tensor cores (GEMM-like) or fp32 vector units (everything else).
    flops_kind: Literal["tensor", "vector"] = "vector"
    workloads: list[Workload] = Field(min_length=1)
    interpreter_workloads: list[Workload] = Field(min_length=1)
    seeds: int = Field(default=3, ge=1, le=20)
    atol: float | None = None
    rtol: float | None = None
    # allclose: an element fails only when both atol and rtol fail (KernelBench, FlashInfer-Bench).
    # relative_l2: ||out - ref|| / ||ref|| must stay below rtol (AccelOpt on NKI: 2e-5).
    correctness: Literal["allclose", "relative_l2"] = "allclose"
    # "exact": flops() and bytes_moved() count what the kernel must do, so a time above the
    # roofline is impossible and rejects. "estimate" (the default; imported tasks, paged or
    # indexed inputs counted whole): above the roofline only flags the kernel for an audit.
    costs: Literal["exact", "estimate"] = "estimate"
    # Where an imported task came from, e.g. {"format": "flashinfer-bench", "definition": "rmsnorm_h128"}.
    origin: dict[str, str] | None = None

    def tolerances(self, dtype: str) -> tuple[float, float]:
        atol, rtol = DTYPE_TOLERANCES[dtype]
        return (self.atol if self.atol is not None else atol, self.rtol if self.rtol is not None else rtol)

    def dtype_for(self, device: str) -> str:
        if device == "cpu":
            return self.interpreter_dtype or ("float32" if self.dtype == "bfloat16" else self.dtype)
        return self.dtype

    def workloads_for(self, device: str) -> list[Workload]:
        return self.interpreter_workloads if device == "cpu" else self.workloads


class Task(BaseModel):
    """A loaded task: its spec plus the sources the harness and the prompts need."""

    root: str
    spec: TaskSpec
    reference_source: str
    baseline_source: str | None

    @property
    def name(self) -> str:
        return self.spec.name

    def summary(self) -> dict[str, Any]:
        return {"name": self.spec.name, "backend": self.spec.backend, "dtype": self.spec.dtype}


def load_task(task_dir: str | Path) -> Task:
    root = Path(task_dir)
    if not root.is_dir():
        raise TaskError(f"task directory not found: {root}")
    spec_path = root / "task.json"
    if not spec_path.is_file():
        raise TaskError(f"{root} is not a task: it has no task.json")
    try:
        spec = TaskSpec.model_validate(json.loads(spec_path.read_text()))
    except json.JSONDecodeError as e:
        raise TaskError(f"{spec_path}: invalid JSON at line {e.lineno}: {e.msg}") from None
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise TaskError(f"{spec_path}: {where}: {first['msg']}") from None

    ref_path = root / "reference.py"
    if not ref_path.is_file():
        raise TaskError(f"{root}: missing reference.py")
    reference_source = ref_path.read_text()
    _require_functions(ref_path, reference_source,
                       NKI_REFERENCE_FUNCTIONS if spec.backend == "nki" else REFERENCE_FUNCTIONS)

    baseline_path = root / "baseline.py"
    baseline_source = baseline_path.read_text() if baseline_path.is_file() else None
    if baseline_source is not None:
        _require_functions(baseline_path, baseline_source, (spec.entry_point,))
    return Task(root=str(root.resolve()), spec=spec, reference_source=reference_source,
                baseline_source=baseline_source)


def _require_functions(path: Path, source: str, names: tuple[str, ...]) -> None:
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as e:
        raise TaskError(f"{path}: syntax error at line {e.lineno}: {e.msg}") from None
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    missing = [n for n in names if n not in defined]
    if missing:
        raise TaskError(f"{path}: missing function(s) {', '.join(missing)}")
