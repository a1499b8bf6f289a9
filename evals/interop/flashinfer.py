"""FlashInfer-Bench interop: a Definition plus its Workloads become an accelopt task; the best
kernel of a run goes back out into a FlashInfer-Bench dataset (flashinfer_export.py).

The task directory keeps definition.json verbatim and the Definition's workloads in
workloads.jsonl, their safetensors blobs under data/ at their dataset-relative paths (confined to
the dataset root, each blob stored once). The generated reference.py (flashinfer_reference.py's
template) builds inputs the way FlashInfer-Bench's gen_inputs does and runs the Definition's own
reference `run`. Kernels are judged as FlashInfer-Bench judges them: every output elementwise,
failing only outside both atol and rtol (1e-2 each); Definitions that FlashInfer-Bench judges with
an evaluator accelopt has no equivalent for are refused (flashinfer_schema.fib_judging).
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import json
import re
import shutil
from pathlib import Path

from accelopt.evals.interop.flashinfer_data import BlobStore, confined, dataset_root, definition_dataset_root
from accelopt.evals.interop.flashinfer_export import export_run
from accelopt.evals.interop.flashinfer_schema import (
    FLOAT_DTYPES,
    Definition,
    Judging,
    Paging,
    Solution,
    fib_judging,
    find_paging,
    parse_solution,
    read_definition,
    read_workloads,
    slug,
    workload_entry,
)
from accelopt.evals.interop.flashinfer_shrink import Plan, plan_interpreter, save_blob
from accelopt.tools import pyparse
from accelopt.tools.task import TaskError, TaskSpec, load_task, read_utf8, task_spec, write_spec

__all__ = ["import_definition", "export_run", "adapt_baseline", "baseline_source", "workload_entry"]

TEMPLATE = Path(__file__).with_name("flashinfer_reference.py")
SHIM_MARK = "# accelopt shim"
ENTRY_MARK = "# accelopt entry point"
TASK_ENTRY_POINT = "run"
GEMM_OPS = ("gemm",)


def import_definition(definition_path: str | Path, workloads_path: str | Path | None, out_dir: str | Path,
                      *, seeds: int = 3, dataset: str | Path | None = None, atol: float | None = None,
                      rtol: float | None = None, baseline: str | Path | None = None) -> Path:
    """Write an accelopt task directory for a FlashInfer-Bench Definition and its Workloads.
    `dataset`: the dataset root the workloads' safetensors paths are relative to (default: found
    from the workloads file's place in a dataset layout). `atol`/`rtol`: as `flashinfer-bench run`.
    `baseline`: a Python kernel module or a Solution JSON for this Definition (baseline_source)."""
    definition_path = Path(definition_path)
    definition = read_definition(definition_path)
    judging = fib_judging(definition)
    kernel = baseline_source(baseline, definition) if baseline is not None else None  # refused before writing
    judging = judging.model_copy(update={k: v for k, v in (("atol", atol), ("rtol", rtol)) if v is not None})
    rows, root = _workloads(definition_path, definition, workloads_path, dataset)
    rows, blobs = _confine_blobs(definition, rows, root)  # refused before anything is written
    out = Path(out_dir)
    paging = find_paging(definition)
    workloads = [workload_entry(w, i) for i, w in enumerate(rows)]
    # the spec as far as it is known before the interpreter's workloads are chosen (the real ones stand in):
    # a malformed import (its name, seeds, tolerances, workloads) is refused before anything is written
    _task_spec(out, definition, judging, paging, workloads, workloads, Plan(), seeds)
    out.mkdir(parents=True, exist_ok=True)
    store = BlobStore(out / "data")  # each blob once, however many inputs name it
    for relative, source in blobs.items():
        store.place(source, relative)
    (out / "definition.json").write_text(read_utf8(definition_path))
    _write_jsonl(out / "workloads.jsonl", rows)
    (out / "interpreter.jsonl").unlink(missing_ok=True)
    plan = plan_interpreter(definition, rows, lambda spec: _load(out / "data", spec), paging)
    if plan.derived is not None:
        if plan.tensors:
            save_blob(plan.tensors, out / "data" / plan.derived["inputs"][next(iter(plan.tensors))]["path"])
        _write_jsonl(out / "interpreter.jsonl", [plan.derived])
    shutil.copyfile(TEMPLATE, out / "reference.py")
    interpreter = ([workload_entry(plan.derived, len(rows), prefix="interp_")] if plan.derived is not None
                   else [workload_entry(rows[i], i) for i in plan.real])
    _write_task(out, definition, judging, paging, plan,
                _task_spec(out, definition, judging, paging, workloads, interpreter, plan, seeds))
    if plan.gpu_only is None:
        failure = next(filter(None, (_runs_on_cpu(out, definition, entry) for entry in interpreter)), None)
        if failure:  # the reference itself cannot run this workload on the CPU
            plan.gpu_only = f"the Definition's reference fails on its CPU workload: {failure}"
            _write_task(out, definition, judging, paging, plan,
                        _task_spec(out, definition, judging, paging, workloads, interpreter, plan, seeds))
    if kernel is not None:
        (out / "baseline.py").write_text(kernel)
    load_task(out)  # the same validation every task gets
    return out


def baseline_source(path: str | Path, definition: Definition, entry_point: str = TASK_ENTRY_POINT) -> str:
    """baseline.py's text for a baseline file: a Python kernel module as it is, or a FlashInfer-Bench
    Solution (JSON) for this Definition: its one Python source, its entry point callable as
    `entry_point`. Anything else is refused in one line (TaskError), before the task is written."""
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"baseline kernel not found: {path}")
    text = read_utf8(path)
    if path.suffix.lower() == ".json" or text.lstrip().startswith(("{", "[")):
        return _solution_source(parse_solution(text, path), path, definition, entry_point)
    tree = _parse(text, f"{path}: neither a Python kernel module nor a FlashInfer-Bench Solution JSON")
    if entry_point not in _functions(tree):
        raise TaskError(f"{path}: a Python module with no top-level function {entry_point}(...), the task's entry "
                        "point")
    return text


def _solution_source(solution: Solution, path: Path, definition: Definition, entry_point: str) -> str:
    what = f"{path}: Solution {solution.name}"
    if solution.definition != definition.name:
        raise TaskError(f"{what} is for Definition {solution.definition}, not {definition.name} (the one imported)")
    if solution.spec.language.lower() != "triton":
        raise TaskError(f"{what} is written in {solution.spec.language}: a baseline is a Triton kernel in one Python "
                        "module (spec.language triton)")
    if solution.spec.destination_passing_style:
        raise TaskError(f"{what} is destination-passing (it writes into output tensors it is given): accelopt's "
                        f"{entry_point} returns its outputs, and no adapter is written for it")
    if len(solution.sources) > 1:
        raise TaskError(f"{what} has {len(solution.sources)} source files ({', '.join(s.path for s in solution.sources)})"
                        ": an accelopt baseline is one Python module")
    entry, symbol = solution.entry_file, solution.entry_symbol
    if not entry.endswith(".py"):
        raise TaskError(f"{what}: its entry file {entry} is not a Python module")
    source = solution.sources[0].content
    tree = _parse(source, f"{what}: {entry} is not Python")
    names = _top_level_names(tree)
    if symbol not in names:
        raise TaskError(f"{what}: its entry point {solution.spec.entry_point} names nothing {entry} defines")
    if symbol == entry_point and symbol in _functions(tree):
        return source
    if symbol != entry_point and entry_point in names:
        raise TaskError(f"{what}: {entry} defines its own {entry_point} besides the entry point {symbol}; the task "
                        f"calls {entry_point}")
    target = symbol if symbol != entry_point else f"_fib_{entry_point}"
    alias = f"{target} = {symbol}\n\n\n" if symbol == entry_point else ""  # an assigned or imported `run`
    return source.rstrip() + f"""


{ENTRY_MARK}: the Solution's {solution.spec.entry_point}, called as the task's {entry_point}
{alias}def {entry_point}(*inputs):
    return {target}(*inputs)
"""


def _parse(source: str, refusal: str):
    try:
        return pyparse.parse(source)
    except SyntaxError as e:
        raise TaskError(f"{refusal} (syntax error at line {e.lineno}: {e.msg})") from None
    except ValueError as e:  # a NUL byte
        raise TaskError(f"{refusal} ({e})") from None


def _functions(tree) -> set[str]:
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def _top_level_names(tree) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def adapt_baseline(task_dir: str | Path) -> bool:
    """FlashInfer-Bench kernels may return a dict of outputs; accelopt's judge takes them in the
    Definition's order. A baseline.py that returns a dict gets a shim that orders them (plain
    indexing, no compute). True when one was added."""
    path = Path(task_dir) / "baseline.py"
    source = path.read_text() if path.is_file() else ""
    if not re.search(r"return\s*(\{|dict\()", source) or SHIM_MARK in source:
        return False
    outputs = tuple(read_definition(Path(task_dir) / "definition.json").outputs)
    entry = load_task(task_dir).spec.entry_point
    path.write_text(source.rstrip() + f"""


{SHIM_MARK}: FlashInfer-Bench's dict of outputs, in the Definition's order
_fib_{entry} = {entry}


def {entry}(*inputs):
    out = _fib_{entry}(*inputs)
    return tuple(out[name] for name in {outputs!r}) if isinstance(out, dict) else out
""")
    return True


def _workloads(definition_path: Path, definition: Definition, workloads_path: str | Path | None,
               dataset: str | Path | None) -> tuple[list[dict], Path | None]:
    explicit = Path(dataset) if dataset is not None else None
    if workloads_path is None:  # a dataset's definitions/<op>/<name>.json has workloads/<op>/<name>.jsonl
        root = explicit or definition_dataset_root(definition_path)
        found = root / "workloads" / definition.op_type / f"{definition.name}.jsonl" if root else None
        workloads_path = found if found is not None and found.is_file() else None
    if workloads_path is not None:
        path = Path(workloads_path)
        if not path.is_file():
            raise TaskError(f"workloads not found: {path}")
        rows = read_workloads(path, definition)
        if not rows:
            raise TaskError(f"no workloads for {definition.name} in {path}")
        return rows, dataset_root(path, explicit)
    if definition.var_axes:
        raise TaskError(f"{definition.name} has variable axes: pass its workloads (JSONL)")
    return [{"uuid": "const", "axes": {}, "inputs": {}}], None


def _confine_blobs(definition: Definition, rows: list[dict], root: Path | None) -> tuple[list[dict], dict[str, Path]]:
    """The rows with each safetensors path normalized under the dataset root, and the blobs they
    name (normalized path -> file); a path that is absolute or leaves the root is refused."""
    placed, blobs = copy.deepcopy(rows), {}
    for row in placed:
        for name, spec in row["inputs"].items():
            if spec.get("type") != "safetensors":
                continue
            what = f"{definition.name} workload {row['uuid']} input {name}"
            if root is None:
                raise TaskError(f"{what}: a safetensors input needs the workloads file and its dataset root")
            source, relative = confined(root, spec["path"], what)
            if not source.is_file():
                raise TaskError(f"{what}: safetensors blob {spec['path']} not found at {source} (paths are relative "
                                f"to the dataset root {root}; pass --dataset if that is not the root)")
            blobs[relative] = source
            spec["path"] = relative
    return placed, blobs


def _load(data: Path, spec: dict):
    from safetensors import safe_open

    with safe_open(str(data / spec["path"]), framework="pt") as f:
        if spec["tensor_key"] not in f.keys():
            raise TaskError(f"{spec['path']} has no tensor {spec['tensor_key']}")
        return f.get_tensor(spec["tensor_key"])


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _task_dtype(definition: Definition) -> str:
    """The outputs' float dtype (what is judged), else the inputs'; nominal where there is none:
    the tolerances are FlashInfer-Bench's, set explicitly."""
    for tensor in [*definition.outputs.values(), *definition.inputs.values()]:
        if tensor.dtype in FLOAT_DTYPES:
            return tensor.dtype
    return "float32"


def _write_task(out: Path, definition: Definition, judging: Judging, paging: Paging | None, plan: Plan,
                spec: TaskSpec) -> None:
    """flashinfer.json (how the Definition is judged, how its interpreter workload was chosen) and task.json,
    written from the spec."""
    meta = {"definition": definition.name, "evaluator": judging.evaluator, "atol": judging.atol,
            "rtol": judging.rtol, "required_matched_ratio": judging.required_matched_ratio,
            "paging": paging.model_dump() if paging else None, "gpu_only": plan.gpu_only,
            "interpreter": "derived" if plan.derived is not None else "real"}
    (out / "flashinfer.json").write_text(json.dumps(meta, indent=2) + "\n")
    write_spec(out, spec)


def _task_spec(out: Path, definition: Definition, judging: Judging, paging: Paging | None, workloads: list[dict],
               interpreter: list[dict], plan: Plan, seeds: int) -> TaskSpec:
    """The task's spec, checked as every task.json is (TaskError naming the file it would be)."""
    origin = {"format": "flashinfer-bench", "definition": definition.name, "evaluator": judging.evaluator}
    if plan.gpu_only:
        origin["gpu_only"] = plan.gpu_only
    spec = {
        "name": slug(definition.name),
        "description": _description(definition, judging, paging, plan),
        "backend": "triton",
        "dtype": _task_dtype(definition),
        "flops_kind": "tensor" if definition.op_type in GEMM_OPS else "vector",
        "entry_point": TASK_ENTRY_POINT,
        "workloads": workloads,
        "interpreter_workloads": interpreter,
        "seeds": seeds,
        "atol": judging.atol,
        "rtol": judging.rtol,
        "costs": "estimate",  # a Definition's cost is not derived exactly: the roofline flags, it does not reject
        "origin": origin,
    }
    if judging.required_matched_ratio is not None:
        spec["required_matched_ratio"] = judging.required_matched_ratio
    if plan.gpu_only:  # the task format's own field: the harness refuses the interpreter for it
        spec["gpu_only"] = plan.gpu_only
    return task_spec(spec, out / "task.json")


def _description(definition: Definition, judging: Judging, paging: Paging | None, plan: Plan) -> str:
    names = ", ".join(definition.inputs)
    outputs = list(definition.outputs)
    returns = outputs[0] if len(outputs) == 1 else "the tuple (" + ", ".join(outputs) + "), in this order"
    text = (f"{definition.description or definition.op_type} (FlashInfer-Bench definition {definition.name}, "
            f"op_type {definition.op_type}). run({names}) returns {returns} as new tensors, exactly as the "
            "reference below (a reference returning a dict is read in the Definition's output order); the axes are: "
            + ", ".join(f"{k}={'var' if a.type == 'var' else a.value}" for k, a in definition.axes.items())
            + f". Judged as FlashInfer-Bench's {judging.evaluator} judges it: each output elementwise, an element "
              f"failing only when outside both atol={judging.atol:g} and rtol={judging.rtol:g}.")
    if judging.note:
        text += f" {judging.note}."
    if definition.constraints:
        text += " Constraints: " + "; ".join(definition.constraints) + "."
    if paging:
        text += (f" {', '.join(paging.pools)} are pools read only at the rows {', '.join(paging.indices)} name; "
                 "bytes moved count those rows (an estimate where the indices are random).")
    if any(t.dtype == "bfloat16" for t in [*definition.inputs.values(), *definition.outputs.values()]):
        text += (" On the CPU interpreter, bfloat16 inputs and expected outputs are float32 (bf16 arithmetic is "
                 "broken there).")
    if plan.gpu_only:
        text += f" GPU only: {plan.gpu_only}."
    return text + f"\n\nReference:\n{definition.reference}"


def _runs_on_cpu(task_dir: Path, definition: Definition, entry: dict) -> str | None:
    """None when the task's reference builds inputs and runs the Definition's reference on the
    CPU workload with the Definition's output shapes; else why not, in one line."""
    spec = importlib.util.spec_from_file_location(f"accelopt_fib_check_{abs(hash(str(task_dir)))}",
                                                  task_dir / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        row = module._row(entry["params"])
        inputs = module.make_inputs(entry["params"], 0, "cpu", "float32")
        outs = module.reference(*inputs)
    except Exception as e:  # noqa: BLE001 - any failure of the reference on the CPU is the reason
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".strip()
    outs = outs if isinstance(outs, tuple) else (outs,)
    axes = definition.axis_values(row["axes"])
    for (name, tensor), out in zip(definition.outputs.items(), outs):
        want = [axes[a] for a in tensor.shape or []]
        if list(out.shape) != want:
            return f"output {name} has shape {list(out.shape)}, the Definition says {want}"
    return None
