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
before any tokens are spent: the JSON's shape and types, finite non-negative tolerances,
non-empty workload lists with unique names and positive sizes, a name that is safe in a path,
UTF-8 files, and the functions each file must define. What only running can show (a reference
that raises, flops() that returns NaN) the judge reports as `reference_error`.
"""

from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from accelopt.tools import pyparse
from accelopt.tools.kernelbench_solution import adapt  # a KernelBench solution (ModelNew) gets its entry point
from accelopt.tools.task_error import TaskError  # its home is a leaf: kernelbench_solution raises it too

REFERENCE_FUNCTIONS = ("make_inputs", "reference", "flops", "bytes_moved")
# Trainium's roofline splits compute between the TensorEngine and the Vector/Scalar engines.
NKI_REFERENCE_FUNCTIONS = (*REFERENCE_FUNCTIONS, "matmul_flops")

# Default tolerances by dtype (atol, rtol); an element fails only when both bounds fail.
DTYPE_TOLERANCES: dict[str, tuple[float, float]] = {
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
}

# The task name becomes a run directory (runs/<name>-<time>): one plain path component.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
NAME_MAX = 128
# Integer params that are positions, offsets or options rather than sizes (KernelBench's
# `padding = 0` and `dim = -1`, FlashInfer-Bench's `fib_row` and `local_expert_offset`):
# every other integer param is a size and must be positive.
NOT_A_SIZE = re.compile(r"(^|_)(pad|padding|offset|shift|start|begin|stop|end|seed|causal|row|index|idx|axis|dim|"
                        r"min|max|value|val|bias|flag|mode)\d*($|_|\[)", re.IGNORECASE)


class Workload(BaseModel):
    name: str = Field(min_length=1)
    params: dict[str, int | float]

    @field_validator("params", mode="before")
    @classmethod
    def _sizes_positive(cls, params: Any) -> Any:
        """On the values as written: a JSON false is a flag, not a zero size."""
        for key, value in (params.items() if isinstance(params, dict) else ()):
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"param {key} is {value}: params must be finite numbers")
            if type(value) is int and value <= 0 and not NOT_A_SIZE.search(str(key)):
                raise ValueError(f"size {key} is {value}: sizes must be positive integers")
        return params


class TaskSpec(BaseModel):
    # An unknown key is a typo ("atoll") that would silently leave the default in force.
    model_config = ConfigDict(extra="forbid")

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
    # allclose only: an output passes when at least this fraction of its elements pass
    # (FlashInfer-Bench's rule for MoE, whose routing ties flip a few elements honestly).
    required_matched_ratio: float | None = None
    # "exact": flops() and bytes_moved() count what the kernel must do, so a time above the
    # roofline is impossible and rejects. "estimate" (the default; imported tasks, paged or
    # indexed inputs counted whole): above the roofline only flags the kernel for an audit.
    costs: Literal["exact", "estimate"] = "estimate"
    # Why the task cannot run on the CPU interpreter (too big, or a GPU-only reference); None: it can.
    gpu_only: str | None = None
    # Where an imported task came from, e.g. {"format": "flashinfer-bench", "definition": "rmsnorm_h128"}.
    origin: dict[str, str] | None = None

    @field_validator("name")
    @classmethod
    def _safe_name(cls, name: str) -> str:
        if len(name) > NAME_MAX or not NAME_PATTERN.fullmatch(name):
            raise ValueError(f"{name[:60]!r} is not a safe task name: use letters, digits and _ . + - (not first), "
                             f"at most {NAME_MAX} characters")
        return name

    @field_validator("entry_point")
    @classmethod
    def _identifier(cls, entry: str) -> str:
        if not entry.isidentifier():
            raise ValueError(f"{entry[:60]!r} is not a Python function name")
        return entry

    @field_validator("atol", "rtol")
    @classmethod
    def _tolerance(cls, value: float | None) -> float | None:
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{value} is not a tolerance: use a finite number >= 0")
        return value

    @field_validator("required_matched_ratio")
    @classmethod
    def _ratio(cls, value: float | None) -> float | None:
        if value is not None and not (0.0 < value <= 1.0):
            raise ValueError(f"{value} is not a ratio: use a fraction of the elements, 0 < ratio <= 1")
        return value

    @field_validator("workloads", "interpreter_workloads")
    @classmethod
    def _unique_names(cls, workloads: list[Workload]) -> list[Workload]:
        names = [w.name for w in workloads]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"workload name(s) {', '.join(twice)} appear more than once; names must be unique")
        return workloads

    @model_validator(mode="after")
    def _consistent(self) -> TaskSpec:
        if self.required_matched_ratio is not None and self.correctness != "allclose":
            raise ValueError("required_matched_ratio applies to correctness allclose only")
        if self.gpu_only is None and self.origin and self.origin.get("gpu_only"):
            self.gpu_only = self.origin["gpu_only"]  # tasks imported before gpu_only was a field of its own
        return self

    def tolerances(self, dtype: str) -> tuple[float, float]:
        atol, rtol = DTYPE_TOLERANCES[dtype]
        return (self.atol if self.atol is not None else atol, self.rtol if self.rtol is not None else rtol)

    def dtype_for(self, device: str) -> str:
        if device == "cpu":
            return self.interpreter_dtype or ("float32" if self.dtype == "bfloat16" else self.dtype)
        return self.dtype

    def workloads_for(self, device: str) -> list[Workload]:
        if device == "cpu":
            if self.gpu_only:
                raise TaskError(f"{self.name} runs on a GPU only: {self.gpu_only}")
            return self.interpreter_workloads
        return self.workloads


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
    spec = _read_spec(spec_path)

    ref_path = root / "reference.py"
    if not ref_path.is_file():
        raise TaskError(f"{root}: missing reference.py")
    reference_source = read_utf8(ref_path)
    _require_functions(ref_path, reference_source,
                       NKI_REFERENCE_FUNCTIONS if spec.backend == "nki" else REFERENCE_FUNCTIONS)

    baseline_path = root / "baseline.py"
    baseline_source = read_utf8(baseline_path) if baseline_path.is_file() else None
    if baseline_source is not None:
        baseline_source = adapt(root, baseline_source, spec.entry_point)
        _require_functions(baseline_path, baseline_source, (spec.entry_point,))
    return Task(root=str(root.resolve()), spec=spec, reference_source=reference_source,
                baseline_source=baseline_source)


def _read_spec(path: Path) -> TaskSpec:
    try:
        data = json.loads(read_utf8(path))
    except json.JSONDecodeError as e:
        raise TaskError(f"{path}: invalid JSON at line {e.lineno}: {e.msg}") from None
    if not isinstance(data, dict):
        raise TaskError(f"{path}: the top level must be a JSON object {{...}}, not {type(data).__name__}")
    return task_spec(data, path)


def task_spec(data: dict[str, Any], path: str | Path) -> TaskSpec:
    """task.json's contents as the model, checked as every task's are; TaskError `path: field: what
    is wrong`. An importer builds its spec with it, so that a malformed one is refused before its
    file is written (`write_spec`)."""
    try:
        return TaskSpec.model_validate(data)
    except ValidationError as e:
        raise TaskError(f"{path}: {_first_error(e)}") from None


# task.json's keys in the order a written file has them (the importers' order); a field the
# spec's maker did not set stays out of the file, at its default
SPEC_ORDER = ("name", "description", "backend", "dtype", "interpreter_dtype", "flops_kind", "entry_point",
              "workloads", "interpreter_workloads", "seeds", "atol", "rtol", "correctness", "costs", "origin",
              "required_matched_ratio", "gpu_only")


def write_spec(task_dir: str | Path, spec: TaskSpec) -> Path:
    """The task's task.json, written from the model: the fields set when it was built, in SPEC_ORDER."""
    fields = spec.model_dump(mode="json", exclude_unset=True)
    ordered = {key: fields.pop(key) for key in SPEC_ORDER if key in fields}
    path = Path(task_dir) / "task.json"
    path.write_text(json.dumps({**ordered, **fields}, indent=2) + "\n")
    return path


def _first_error(error: ValidationError) -> str:
    """The first problem as `field.path: what is wrong`, on one line."""
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = f"unknown field (known: {', '.join(TaskSpec.model_fields)})"
    return f"{where}: {message}".replace("\n", " ")


def read_utf8(path: Path) -> str:
    """The file as UTF-8 text; anything else is one line naming the file and the byte."""
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise TaskError(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}): "
                        "save it as UTF-8") from None
    except OSError as e:
        raise TaskError(f"{path}: cannot be read ({e.strerror})") from None


def _require_functions(path: Path, source: str, names: tuple[str, ...]) -> None:
    try:
        tree = pyparse.parsed(source)  # shared: a baseline is the run's first candidate, read by every reader after
    except SyntaxError as e:
        raise TaskError(f"{path}: syntax error at line {e.lineno}: {e.msg}") from None
    except ValueError as e:  # a NUL byte in the source
        raise TaskError(f"{path}: not Python source ({e})") from None
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    missing = [n for n in names if n not in defined]
    if missing:
        raise TaskError(f"{path}: missing function(s) {', '.join(missing)}")
