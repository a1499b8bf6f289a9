"""Reference for a task imported from FlashInfer-Bench (copied verbatim into the task directory).

Inputs are made as FlashInfer-Bench's gen_inputs makes them: random floats from randn, random
integers in [-1024, 1024) (int8: the full range), scalars from the workload, safetensors from
data/. The Definition's own reference `run` computes the expected outputs.
"""

import json
import math
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
DEFINITION = json.loads((HERE / "definition.json").read_text())
WORKLOADS = [json.loads(line) for line in (HERE / "workloads.jsonl").read_text().splitlines() if line.strip()]
INT_RANGES = {"int8": (-128, 128), "int16": (-1024, 1024), "int32": (-1024, 1024), "int64": (-1024, 1024)}
FLOATS = ("float32", "float16", "bfloat16")
TASK_DTYPE = json.loads((HERE / "task.json").read_text())["dtype"]

_namespace: dict = {}
exec(compile(DEFINITION["reference"], str(HERE / "definition.json:reference"), "exec"), _namespace)  # noqa: S102


def _axes(workload):
    axes = {k: int(a["value"]) for k, a in DEFINITION["axes"].items() if a["type"] == "const"}
    axes.update({k: int(v) for k, v in workload.items() if k in DEFINITION["axes"]})
    return axes


def _workload_inputs(workload):
    """The workload's input specs (random/scalar/safetensors) whose axes match these params."""
    axes = {k: int(v) for k, v in workload.items() if k in DEFINITION["axes"]}
    for w in WORKLOADS:
        if w["axes"] == axes:
            return w["inputs"]
    return {}  # a shrunk interpreter workload: every input random


def make_inputs(workload, seed, device, dtype):
    gen = torch.Generator(device=device).manual_seed(seed)
    axes, specs = _axes(workload), _workload_inputs(workload)
    safetensors = {}
    inputs = []
    for name, tensor in DEFINITION["inputs"].items():
        spec = specs.get(name, {"type": "random"})
        want = dtype if tensor["dtype"] == TASK_DTYPE else tensor["dtype"]  # the interpreter may swap bf16
        if spec["type"] == "scalar":
            inputs.append(workload.get(name, spec["value"]))
            continue
        if spec["type"] == "safetensors":
            from safetensors.torch import load_file

            path = HERE / "data" / Path(spec["path"]).name
            safetensors.setdefault(path, load_file(str(path)))
            inputs.append(safetensors[path][spec["tensor_key"]].to(device))
            continue
        shape = [axes[a] for a in tensor["shape"]] if tensor["shape"] is not None else []
        if want in FLOATS:
            value = torch.randn(shape, generator=gen, device=device).to(getattr(torch, want))
        elif want == "bool":
            value = torch.randint(0, 2, shape, generator=gen, device=device).bool()
        else:
            low, high = INT_RANGES[want]
            value = torch.randint(low, high, shape, generator=gen, device=device, dtype=getattr(torch, want))
        inputs.append(value.item() if tensor["shape"] is None else value)
    return tuple(inputs)


def reference(*inputs):
    out = _namespace["run"](*inputs)
    return tuple(out) if isinstance(out, (list, tuple)) else out


def _numel(tensor, axes):
    return math.prod(axes[a] for a in tensor["shape"]) if tensor["shape"] else 1


def flops(workload, dtype):
    """Exact for GEMMs (2*M*N*K from the output and the axis it contracts); the other op types
    are judged on the memory roof only."""
    if DEFINITION["op_type"] != "gemm":
        return 0.0
    axes = _axes(workload)
    (a, b), (out,) = list(DEFINITION["inputs"].values())[:2], list(DEFINITION["outputs"].values())
    contracted = [d for d in a["shape"] if d in b["shape"] and d not in out["shape"]]
    return 2.0 * _numel(out, axes) * math.prod(axes[d] for d in contracted)


def bytes_moved(workload, dtype):
    """Every input read once and every output written once."""
    axes = _axes(workload)
    total = 0.0
    for tensor in [*DEFINITION["inputs"].values(), *DEFINITION["outputs"].values()]:
        name = dtype if tensor["dtype"] == TASK_DTYPE else tensor["dtype"]
        size = torch.empty((), dtype=getattr(torch, name)).element_size() if name != "bool" else 1
        total += _numel(tensor, axes) * size
    return total
