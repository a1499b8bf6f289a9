"""FlashInfer-Bench interop: a Definition plus its Workloads become an accelopt task; the best
kernel of a run goes back out as a Solution, and its measurements as Traces.

The task directory keeps definition.json and workloads.jsonl verbatim; the generated
reference.py (flashinfer_reference.py's template) reads them, builds inputs the way
FlashInfer-Bench's gen_inputs does, and runs the Definition's own reference `run`.
Only the fields we need are modelled here; the tests validate what we write with the
flashinfer-bench package's own pydantic models.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from accelopt.evals.interop import read_summary
from accelopt.tools.task import TaskError, load_task

TEMPLATE = Path(__file__).with_name("flashinfer_reference.py")
FLOAT_DTYPES = ("float32", "float16", "bfloat16")
GEMM_OPS = ("gemm",)
# Sampling ops are judged by a distribution test, not elementwise tolerances.
UNSUPPORTED_OPS = ("sampling",)


class Axis(BaseModel):
    type: Literal["const", "var"]
    value: int | None = None


class Tensor(BaseModel):
    shape: list[str] | None
    dtype: str


class Definition(BaseModel):
    name: str
    op_type: str
    axes: dict[str, Axis]
    inputs: dict[str, Tensor]
    outputs: dict[str, Tensor]
    reference: str
    description: str | None = None
    tags: list[str] = []


class Workload(BaseModel):
    uuid: str
    axes: dict[str, int]
    inputs: dict[str, dict[str, Any]]


def _read_definition(path: Path) -> Definition:
    try:
        return Definition.model_validate(json.loads(path.read_text()))
    except FileNotFoundError:
        raise TaskError(f"definition not found: {path}") from None
    except json.JSONDecodeError as e:
        raise TaskError(f"{path}: invalid JSON at line {e.lineno}: {e.msg}") from None
    except ValidationError as e:
        first = e.errors()[0]
        raise TaskError(f"{path}: not a FlashInfer-Bench Definition: {'.'.join(map(str, first['loc']))}: "
                        f"{first['msg']}") from None


def read_workloads(path: Path, definition: str) -> list[dict]:
    """Workload objects, from a JSONL of Workloads or of workload Traces (the dataset's layout)."""
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise TaskError(f"{path}:{number}: invalid JSON: {e.msg}") from None
        if "workload" in row:
            if row.get("definition") not in (None, definition):
                continue
            row = row["workload"]
        try:
            rows.append(Workload.model_validate(row).model_dump())
        except ValidationError as e:
            raise TaskError(f"{path}:{number}: not a Workload: {e.errors()[0]['msg']}") from None
    return rows


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "task"


def _workload_entry(workload: dict) -> dict:
    params: dict[str, int | float] = dict(workload["axes"])
    for name, spec in workload["inputs"].items():
        if spec.get("type") == "scalar":
            params[name] = float(spec["value"]) if isinstance(spec["value"], float) else int(spec["value"])
    label = "_".join(f"{k}{v}" for k, v in workload["axes"].items())
    tag = hashlib.sha1(workload["uuid"].encode()).hexdigest()[:6]  # uuids may share prefixes
    return {"name": f"{label}_{tag}" if label else tag, "params": params}


def _interpreter_entry(workloads: list[dict]) -> dict:
    """The smallest workload, its variable axes clamped to 4 when every input is random (a
    safetensors input fixes its shape), for the CPU interpreter."""
    def size(w):
        return math.prod(max(v, 1) for v in w["axes"].values())

    smallest = min(workloads, key=size)
    entry = _workload_entry(smallest)
    if all(spec.get("type") != "safetensors" for spec in smallest["inputs"].values()):
        for axis in smallest["axes"]:
            entry["params"][axis] = min(int(entry["params"][axis]), 4)
        entry["name"] = "interp_" + "_".join(f"{a}{entry['params'][a]}" for a in smallest["axes"])
    return entry


def import_definition(definition_path: str | Path, workloads_path: str | Path | None, out_dir: str | Path,
                      *, seeds: int = 3) -> Path:
    """Write an accelopt task directory for a FlashInfer-Bench Definition and its Workloads."""
    definition_path = Path(definition_path)
    definition = _read_definition(definition_path)
    if any(op in definition.op_type for op in UNSUPPORTED_OPS):
        raise TaskError(f"{definition.name}: op_type {definition.op_type!r} is checked by a distribution test in "
                        "FlashInfer-Bench; accelopt's elementwise check cannot judge it")
    if workloads_path is not None:
        workloads = read_workloads(Path(workloads_path), definition.name)
    elif all(a.type == "const" for a in definition.axes.values()):
        workloads = [{"uuid": "const", "axes": {}, "inputs": {}}]
    else:
        raise TaskError(f"{definition.name} has variable axes: pass its workloads (JSONL)")
    if not workloads:
        raise TaskError(f"no workloads for {definition.name} in {workloads_path}")
    floats = [t.dtype for t in [*definition.inputs.values(), *definition.outputs.values()] if t.dtype in FLOAT_DTYPES]
    if not floats:
        raise TaskError(f"{definition.name}: no float16/bfloat16/float32 tensor to set the task dtype from")

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "definition.json").write_text(definition_path.read_text())
    (out / "workloads.jsonl").write_text("".join(json.dumps(w) + "\n" for w in workloads))
    for w in workloads:  # safetensors inputs travel with the task
        for spec in w["inputs"].values():
            if spec.get("type") == "safetensors":
                src = (Path(workloads_path).parent / spec["path"]) if workloads_path else Path(spec["path"])
                if not src.is_file():
                    raise TaskError(f"{definition.name}: safetensors input {spec['path']} not found at {src}")
                dst = out / "data" / Path(spec["path"]).name
                dst.parent.mkdir(exist_ok=True)
                shutil.copyfile(src, dst)
    shutil.copyfile(TEMPLATE, out / "reference.py")
    names = ", ".join(definition.inputs)
    outputs = ", ".join(definition.outputs)
    spec = {
        "name": _slug(definition.name),
        "description": (f"{definition.description or definition.op_type} (FlashInfer-Bench definition "
                        f"{definition.name}, op_type {definition.op_type}). run({names}) returns ({outputs}) as "
                        f"new tensors, exactly as the reference below; the axes are: "
                        + ", ".join(f"{k}={'var' if a.type == 'var' else a.value}" for k, a in definition.axes.items())
                        + f".\n\nReference:\n{definition.reference}"),
        "backend": "triton",
        "dtype": floats[0],
        "flops_kind": "tensor" if definition.op_type in GEMM_OPS else "vector",
        "entry_point": "run",
        "workloads": [_workload_entry(w) for w in workloads],
        "interpreter_workloads": [_interpreter_entry(workloads)],
        "seeds": seeds,
        "origin": {"format": "flashinfer-bench", "definition": definition.name},
    }
    (out / "task.json").write_text(json.dumps(spec, indent=2) + "\n")
    load_task(out)  # the same validation every task gets
    return out


# ---------------------------------------------------------------- export

def _fib_task(task_dir: Path) -> tuple[Definition, dict[str, dict]]:
    path = task_dir / "definition.json"
    if not path.is_file():
        raise TaskError(f"{task_dir} was not imported from FlashInfer-Bench (no definition.json): "
                        "there is no Definition to attach a Solution to")
    definition = _read_definition(path)
    task = load_task(task_dir)
    workloads = read_workloads(task_dir / "workloads.jsonl", definition.name)
    by_name = {_workload_entry(w)["name"]: w for w in workloads}
    for entry in task.spec.interpreter_workloads:
        by_name.setdefault(entry.name, {"uuid": entry.name, "axes": {k: int(v) for k, v in entry.params.items()
                                                                       if k in definition.axes},
                                        "inputs": {}})
    return definition, by_name


def solution_dict(definition: Definition, source: str, *, name: str, hardware: str, description: str) -> dict:
    return {"name": name, "definition": definition.name, "author": "accelopt", "description": description,
            "spec": {"language": "triton", "target_hardware": [hardware], "entry_point": "main.py::run",
                     "dependencies": [], "destination_passing_style": False},
            "sources": [{"path": "main.py", "content": source}]}


def export_run(run_dir: str | Path, out_dir: str | Path) -> tuple[Path, Path]:
    """solution.json and traces.jsonl for the best kernel of a run on an imported task."""
    import torch
    import triton

    run_dir, out = Path(run_dir), Path(out_dir)
    summary = read_summary(run_dir)
    best = json.loads((run_dir / "candidates" / summary["best_id"] / "result.json").read_text())
    baseline = json.loads((run_dir / "candidates" / "baseline" / "result.json").read_text())
    source = (run_dir / "best_kernel.py").read_text()
    definition, by_name = _fib_task(Path(summary["task_dir"]))
    interpreter = best.get("timer") == "interpreter_wall"
    hardware = "cpu (Triton interpreter)" if interpreter else (best.get("device_name") or "cuda")
    name = f"accelopt_{_slug(definition.name)}_{_slug(best['id'])}"
    note = (f"accelopt best kernel {best['id']}: {best.get('speedup') or 1.0:.3f}x over the task baseline"
            + (" (CPU interpreter time, not GPU performance)" if interpreter else f" on {hardware}"))
    solution = solution_dict(definition, source, name=name, hardware=hardware, description=note)
    baseline_is_reference = baseline.get("kind") == "reference"
    log = ("reference_latency_ms is the task's PyTorch reference" if baseline_is_reference
           else "reference_latency_ms is the task's baseline kernel (the run's starting point)")
    if interpreter:
        log += "; timings are Triton-interpreter wall times on the CPU, not GPU performance"
    stamp = datetime.now(timezone.utc).isoformat()
    libs = {"torch": torch.__version__, "triton": triton.__version__}
    traces = []
    for workload_name, timing in best["workloads"].items():
        # the baseline as timed interleaved with the best kernel; its own setup timing otherwise
        base_us = ((best.get("compared_us") or {}).get("baseline") or {}).get(workload_name) \
            or (baseline["workloads"].get(workload_name) or {}).get("median_us")
        latency = timing["median_us"] / 1e3
        ref_latency = base_us / 1e3 if base_us else 0.0
        traces.append({
            "definition": definition.name, "workload": by_name[workload_name], "solution": name,
            "evaluation": {
                "status": "PASSED", "environment": {"hardware": hardware, "libs": libs}, "timestamp": stamp,
                "log": log,
                "correctness": {"max_absolute_error": best.get("max_abs_err") or 0.0,
                                "max_relative_error": best.get("max_rel_err") or 0.0},
                "performance": {"latency_ms": latency, "reference_latency_ms": ref_latency,
                                "speedup_factor": ref_latency / latency if latency and ref_latency else 0.0}}})
    out.mkdir(parents=True, exist_ok=True)
    (out / "solution.json").write_text(json.dumps(solution, indent=2) + "\n")
    (out / "traces.jsonl").write_text("".join(json.dumps(t) + "\n" for t in traces))
    return out / "solution.json", out / "traces.jsonl"
