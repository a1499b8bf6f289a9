"""The best kernel of a run on an imported task, written into a FlashInfer-Bench dataset:

    definitions/<op_type>/<definition>.json
    workloads/<op_type>/<definition>.jsonl        the Definition's workloads (blobs at their paths)
    solutions/<author>/<op_type>/<definition>/<solution>.json
    traces/<author>/<op_type>/<definition>.jsonl  one Trace per real workload measured

the layout flashinfer-bench's TraceSet, `validate`, `report best` and apply() read. A Trace's
reference_latency_ms is the Definition's reference, timed interleaved with the kernel: the run's
own timing where the run started from the reference, torch_compile.json's eager timing where a
suite wrote one, else measured now on the run's device.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from accelopt.evals.interop import read_summary
from accelopt.evals.interop.flashinfer_data import BlobStore, confined
from accelopt.evals.interop.flashinfer_schema import (
    APPLY_MAX_ERRORS,
    NULLABLE_LISTS,
    REPORT_BEST_MAX_ERRORS,
    BuildSpec,
    Definition,
    Solution,
    SourceFile,
    read_definition,
    slug,
    workload_entry,
)
from accelopt.tools.run_record import RunSummary
from accelopt.tools.task import Task, TaskError, load_task

# reference_kernel.py's loader: a "kernel" that is the task's PyTorch reference.
REFERENCE_MARK = "accelopt_task_reference"


@dataclass
class Export:
    dataset: Path
    solution: Path
    traces: Path | None
    workloads_traced: int
    notes: list[str] = field(default_factory=list)


@dataclass
class Timing:
    """Per task-workload name: (kernel ms, reference ms); the errors; what the numbers are."""
    latencies: dict[str, tuple[float, float]]
    max_abs: float
    max_rel: float
    how: str


def export_run(run_dir: str | Path, out_dir: str | Path, *, author: str = "accelopt") -> Export:
    """Write the run's best kernel as a Solution, with Traces, into the dataset at out_dir."""
    run_dir, dataset = Path(run_dir), Path(out_dir)
    summary = read_summary(run_dir)
    best = json.loads((run_dir / "candidates" / summary.best_id / "result.json").read_text())
    source = (run_dir / "best_kernel.py").read_text()
    if best.get("kind") == "reference" or REFERENCE_MARK in source:
        raise TaskError(f"{run_dir}: the best is still the task's PyTorch reference (no Triton kernel beat it); "
                        "there is no kernel to export as a Solution")
    if best.get("status") != "verified":
        raise TaskError(f"{run_dir}: the best candidate {best['id']} is {best.get('status')}, not verified")
    task_dir = Path(summary.task_dir)
    definition = _task_definition(task_dir)
    task = load_task(task_dir)
    rows = [json.loads(line) for line in (task_dir / "workloads.jsonl").read_text().splitlines() if line.strip()]
    timing = _timing(run_dir, summary, best, task, source)
    author = slug(author)
    name = f"{author}_{slug(definition.name)}_{slug(best['id'])}_{hashlib.sha1(source.encode()).hexdigest()[:8]}"
    hardware = best.get("device_name") or best.get("device") or "cuda"
    interpreter = best.get("timer") == "interpreter_wall"

    _write_definition(dataset, definition, task_dir / "definition.json")
    _write_workloads(dataset, definition, rows, task_dir / "data")
    solution_path = dataset / "solutions" / author / definition.op_type / definition.name / f"{name}.json"
    solution_path.parent.mkdir(parents=True, exist_ok=True)
    speedup = best.get("speedup") or 1.0
    note = (f"accelopt best kernel {best['id']}: {speedup:.3f}x over the task's starting point"
            + (" (CPU interpreter time, not GPU performance)" if interpreter else f" on {hardware}"))
    solution_path.write_text(json.dumps(solution_dict(definition, source, name=name, author=author, hardware=hardware,
                                                      description=note, entry_point=task.spec.entry_point),
                                        indent=2) + "\n")

    by_name = {w.name: w.params for w in task.spec.workloads_for(best.get("device") or "cuda")}
    traces, notes = [], []
    for workload_name, (latency, reference) in timing.latencies.items():
        row = _real_row(by_name.get(workload_name), workload_name, rows)
        if row is None:
            continue
        traces.append(_trace(definition, row, name, hardware, timing, latency, reference, interpreter))
    if not traces:
        notes.append("no Trace written: the run measured only workloads derived for the CPU interpreter, none of the "
                     "Definition's; run on a GPU to trace the Definition's workloads")
    notes += _filter_notes(timing)
    if best.get("flags"):
        notes.append(f"accelopt flagged this kernel ({', '.join(best['flags'])}): see its result.json before relying "
                     "on the Traces")
    traces_path = None
    if traces:
        traces_path = dataset / "traces" / author / definition.op_type / f"{definition.name}.jsonl"
        _replace_traces(traces_path, name, traces)
    return Export(dataset=dataset, solution=solution_path, traces=traces_path, workloads_traced=len(traces),
                  notes=notes)


def solution_dict(definition: Definition, source: str, *, name: str, author: str, hardware: str, description: str,
                  entry_point: str = "run") -> dict:
    # value-returning: the kernel returns its outputs (a tuple in the Definition's order)
    spec = BuildSpec(language="triton", target_hardware=[hardware], entry_point=f"main.py::{entry_point}",
                     dependencies=[], destination_passing_style=False)
    return Solution(name=name, definition=definition.name, author=author, description=description, spec=spec,
                    sources=[SourceFile(path="main.py", content=source)]).model_dump()


def _task_definition(task_dir: Path) -> Definition:
    path = task_dir / "definition.json"
    if not path.is_file():
        raise TaskError(f"{task_dir} was not imported from FlashInfer-Bench (no definition.json): "
                        "there is no Definition to attach a Solution to")
    return read_definition(path)


def _real_row(params: dict | None, workload_name: str, rows: list[dict]) -> dict | None:
    """The Definition workload a task workload stands for; None for one derived for the CPU."""
    if params is not None and "fib_row" in params:
        index = int(params["fib_row"])
        return rows[index] if index < len(rows) else None
    # tasks imported before fib_row: the workload names encode the axes and the uuid
    return next((r for i, r in enumerate(rows) if workload_entry(r, i)["name"] == workload_name), None)


# ---------------------------------------------------------------- timings

def _timing(run_dir: Path, summary: RunSummary, best: dict, task: Task, source: str) -> Timing:
    names = list(best["workloads"])
    errors = (best.get("max_abs_err") or 0.0, best.get("max_rel_err") or 0.0)
    if summary.baseline_kind == "reference":
        baseline = json.loads((run_dir / "candidates" / "baseline" / "result.json").read_text())
        interleaved = (best.get("compared_us") or {}).get("baseline") or {}
        latencies = {}
        for n in names:
            ref_us = interleaved.get(n) or (baseline["workloads"].get(n) or {}).get("median_us")
            if ref_us:
                latencies[n] = (best["workloads"][n]["median_us"] / 1e3, ref_us / 1e3)
        return Timing(latencies, *errors, how="the Definition's reference was the run's starting point, timed "
                                               "interleaved with the kernel")
    compiled = run_dir / "torch_compile.json"
    record = json.loads(compiled.read_text()) if compiled.is_file() else {}
    if record.get("status") == "verified" and "eager" in record.get("median_us", {}):
        medians = record["median_us"]
        return Timing({n: (medians["best"][n] / 1e3, medians["eager"][n] / 1e3) for n in medians["best"]},
                      *errors, how="the Definition's reference (eager PyTorch) timed interleaved with the kernel "
                                   "(torch_compile.json)")
    return _measure(task, source, best.get("device") or "cuda")


def _measure(task: Task, source: str, device: str) -> Timing:
    """The kernel timed interleaved with the Definition's reference, now, on the run's device."""
    from accelopt.tools.harness.reference_kernel import reference_source
    from accelopt.tools.harness.runner import evaluate, gpu_count

    if device == "cuda" and gpu_count() == 0:
        raise TaskError("the run started from a baseline kernel, so it never timed the Definition's reference; "
                        "export on a machine with a GPU (the run's device) to time it against the kernel")
    result = evaluate(task, source, device=device, compare={"reference": reference_source(task)})
    if not result.ok:
        raise TaskError(f"timing the best kernel against the Definition's reference failed: {result.status}: "
                        f"{(result.error or '').splitlines()[0] if result.error else ''}")
    reference = result.compare["reference"]
    return Timing({n: (t.median_us / 1e3, reference[n].median_us / 1e3) for n, t in result.workloads.items()},
                  result.max_abs_err or 0.0, result.max_rel_err or 0.0,
                  how="the Definition's reference timed interleaved with the kernel at export")


def _filter_notes(timing: Timing) -> list[str]:
    notes = []
    for what, (atol, rtol) in (("`flashinfer-bench report best`", REPORT_BEST_MAX_ERRORS),
                               ("apply() with its default ApplyConfig", APPLY_MAX_ERRORS)):
        if timing.max_abs > atol or timing.max_rel > rtol:
            notes.append(f"{what} skips these Traces: max errors abs {timing.max_abs:.3g}, rel {timing.max_rel:.3g} "
                         f"exceed its filter (abs {atol:g}, rel {rtol:g}), though every element passed the "
                         "both-bounds check")
    return notes


def _trace(definition: Definition, row: dict, solution: str, hardware: str, timing: Timing, latency: float,
           reference: float, interpreter: bool) -> dict:
    import torch
    import triton

    libs = {"torch": torch.__version__, "triton": triton.__version__}
    log = f"accelopt: reference_latency_ms is {timing.how}"
    if interpreter:
        log += "; timings are Triton-interpreter wall times on the CPU, not GPU performance"
    return {"definition": definition.name, "workload": row, "solution": solution,
            "evaluation": {
                "status": "PASSED", "log": log, "timestamp": datetime.now(UTC).isoformat(),
                "environment": {"hardware": hardware, "libs": libs},
                "correctness": {"max_absolute_error": timing.max_abs, "max_relative_error": timing.max_rel},
                "performance": {"latency_ms": latency, "reference_latency_ms": reference,
                                "speedup_factor": reference / latency if latency > 0 else 0.0}}}


# ---------------------------------------------------------------- the dataset

def _write_definition(dataset: Path, definition: Definition, source: Path) -> None:
    for existing in sorted((dataset / "definitions").glob(f"**/{definition.name}.json")):
        if read_definition(existing) != definition:
            raise TaskError(f"{existing} is a different Definition named {definition.name}: refusing to mix them")
        return
    path = dataset / "definitions" / definition.op_type / f"{definition.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_definition_text(source))


def _definition_text(source: Path) -> str:
    """The Definition as imported, verbatim, unless it gives an optional list as null (the published
    datasets do), which flashinfer-bench's own model refuses: then those lists are written empty."""
    text = source.read_text()
    data = json.loads(text)
    nulls: dict[str, list] = {k: [] for k in NULLABLE_LISTS if k in data and data[k] is None}
    return json.dumps({**data, **nulls}, indent=2) + "\n" if nulls else text


def _write_workloads(dataset: Path, definition: Definition, rows: list[dict], data: Path) -> None:
    """The Definition's workloads as workload Traces, merged by uuid; their blobs placed once."""
    path = dataset / "workloads" / definition.op_type / f"{definition.name}.jsonl"
    existing = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
    known = {t["workload"]["uuid"]: t["workload"] for t in existing}
    store = BlobStore(dataset)
    added = []
    for row in rows:
        if row["uuid"] in known:
            if known[row["uuid"]] != row:
                raise TaskError(f"{path}: workload {row['uuid']} differs from the task's: refusing to mix them")
            continue
        for name, spec in row["inputs"].items():
            if spec.get("type") == "safetensors":
                source, relative = confined(data, spec["path"], f"workload {row['uuid']} input {name}")
                confined(dataset, relative, f"workload {row['uuid']} input {name}")
                store.place(source, relative)
        added.append({"definition": definition.name, "solution": None, "workload": row, "evaluation": None})
    if added:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.writelines(json.dumps(t) + "\n" for t in added)


def _replace_traces(path: Path, solution: str, traces: list[dict]) -> None:
    """This solution's Traces replace any it had; other solutions' stay."""
    kept = []
    if path.is_file():
        kept = [line for line in path.read_text().splitlines() if line.strip()
                and json.loads(line).get("solution") != solution]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in kept) + "".join(json.dumps(t) + "\n" for t in traces))
