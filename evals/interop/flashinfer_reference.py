"""Reference for a task imported from FlashInfer-Bench (copied verbatim into the task directory).

Inputs are made as FlashInfer-Bench's gen_inputs makes them (bench/utils.py _rand_tensor):
floats from randn; float8 from randn clamped to [-2, 2]; float4_e2m1 the same, rounded to the
e2m1 grid and packed two to a byte; integers in [-1024, 1024) (int8: its full range); scalars
and safetensors from the workload. The Definition's own reference `run` computes the expected
outputs, returned in the Definition's output order whether it returns a tuple or a dict.

Workload params carry `fib_row`: the row of workloads.jsonl (the Definition's workloads), then of
interpreter.jsonl (small CPU workloads derived from them), that the workload stands for. On the
CPU interpreter bfloat16 tensors run as the interpreter dtype (bf16 arithmetic is broken there).
"""

import json
import math
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
DEFINITION = json.loads((HERE / "definition.json").read_text())
META = json.loads((HERE / "flashinfer.json").read_text())
INT_RANGES = {"int8": (-128, 128), "int16": (-1024, 1024), "int32": (-1024, 1024), "int64": (-1024, 1024)}
FLOATS = ("float32", "float16", "bfloat16")
FP8 = ("float8_e4m3fn", "float8_e5m2")
TORCH_NAMES = {"float4_e2m1": "float4_e2m1fn_x2"}
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # the float4_e2m1 magnitudes, by code
OUTPUTS = list(DEFINITION["outputs"])


def _rows(name):
    path = HERE / name
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


ROWS = _rows("workloads.jsonl") + _rows("interpreter.jsonl")
_run = {"cpu_dtype": "float32"}  # what make_inputs last turned bfloat16 into on the CPU
_blobs: dict = {}
_namespace: dict = {}
exec(compile(DEFINITION["reference"], str(HERE / "definition.json:reference"), "exec"), _namespace)  # noqa: S102


def _torch_dtype(name):
    return getattr(torch, TORCH_NAMES.get(name, name))


def _row(workload):
    if "fib_row" in workload:
        return ROWS[int(workload["fib_row"])]
    axes = {k: int(v) for k, v in workload.items() if k in DEFINITION["axes"]}  # tasks imported before fib_row
    return next((w for w in ROWS if w["axes"] == axes), {"axes": axes, "inputs": {}})


def _axes(row):
    axes = {k: int(a["value"]) for k, a in DEFINITION["axes"].items() if a["type"] == "const"}
    axes.update({k: int(v) for k, v in row["axes"].items()})
    return axes


def _blob(path, key):
    if path not in _blobs:
        from safetensors.torch import load_file

        _blobs[path] = load_file(str(HERE / "data" / path))
    return _blobs[path][key]


def _random(shape, name, gen, device):
    if name in FLOATS:
        return torch.randn(shape, generator=gen, device=device).to(_torch_dtype(name))
    if name in FP8:
        return torch.randn(shape, generator=gen, device=device).clamp_(-2.0, 2.0).to(_torch_dtype(name))
    if name == "float4_e2m1":  # each element packs two e2m1 values (torch.float4_e2m1fn_x2)
        values = torch.randn([*shape, 2], generator=gen, device=device).clamp_(-2.0, 2.0)
        grid = torch.tensor(E2M1, device=device)
        codes = (values.abs()[..., None] - grid).abs().argmin(-1) + 8 * (values < 0)
        return (codes[..., 0] | (codes[..., 1] << 4)).to(torch.uint8).view(torch.float4_e2m1fn_x2)
    if name == "bool":
        return torch.randint(0, 2, shape, generator=gen, device=device).bool()
    low, high = INT_RANGES[name]
    return torch.randint(low, high, shape, generator=gen, device=device, dtype=_torch_dtype(name))


def make_inputs(workload, seed, device, dtype):
    if device == "cpu" and META.get("gpu_only"):
        raise RuntimeError(f"{DEFINITION['name']} runs on a GPU only: {META['gpu_only']}")
    _run["cpu_dtype"] = dtype if dtype in ("float32", "float16") else "float32"
    gen = torch.Generator(device=device).manual_seed(seed)
    row = _row(workload)
    axes = _axes(row)
    inputs = []
    for name, tensor in DEFINITION["inputs"].items():
        spec = row["inputs"].get(name, {"type": "random"})
        if spec["type"] == "scalar":
            inputs.append(workload.get(name, spec["value"]))
            continue
        if spec["type"] == "safetensors":
            value = _blob(spec["path"], spec["tensor_key"]).to(device)
        else:
            shape = [axes[a] for a in tensor["shape"]] if tensor["shape"] is not None else []
            value = _random(shape, tensor["dtype"], gen, device)
        if device == "cpu" and value.dtype == torch.bfloat16:
            value = value.to(getattr(torch, _run["cpu_dtype"]))
        inputs.append(value.item() if tensor["shape"] is None else value)
    return tuple(inputs)


def reference(*inputs):
    """The Definition's outputs in its order: a single tensor, or a tuple of them."""
    out = _namespace["run"](*inputs)
    if isinstance(out, dict):
        missing = [n for n in OUTPUTS if n not in out]
        if missing:
            raise KeyError(f"the reference returned no {', '.join(missing)} (outputs: {', '.join(out)})")
        out = [out[n] for n in OUTPUTS]
    elif not isinstance(out, (tuple, list)):
        out = [out]
    if len(out) != len(OUTPUTS):
        raise ValueError(f"the reference returned {len(out)} outputs, the Definition names {len(OUTPUTS)}")
    device = next((t.device for t in inputs if isinstance(t, torch.Tensor)), torch.device("cpu"))
    tensors = []
    for name, value in zip(OUTPUTS, out):
        if not isinstance(value, torch.Tensor):  # a scalar output, as FlashInfer-Bench normalizes it
            value = torch.tensor(value, dtype=_torch_dtype(DEFINITION["outputs"][name]["dtype"]), device=device)
        if device.type == "cpu" and value.dtype == torch.bfloat16:
            value = value.to(getattr(torch, _run["cpu_dtype"]))
        tensors.append(value)
    return tensors[0] if len(tensors) == 1 else tuple(tensors)


def _numel(tensor, axes):
    return math.prod(axes[a] for a in tensor["shape"]) if tensor["shape"] else 1


def flops(workload, dtype):
    """Exact for GEMMs (2*M*N*K from the output and the axis it contracts); the other op types
    are judged on the memory roof only."""
    if DEFINITION["op_type"] != "gemm":
        return 0.0
    axes = _axes(_row(workload))
    (a, b), (out,) = list(DEFINITION["inputs"].values())[:2], list(DEFINITION["outputs"].values())
    contracted = [d for d in a["shape"] if d in b["shape"] and d not in out["shape"]]
    return 2.0 * _numel(out, axes) * math.prod(axes[d] for d in contracted)


def _pool_rows_read(row, axes):
    """Rows of the paged pools a call reads: the distinct in-range indices where the workload
    holds them (safetensors), else at most one row per index (an estimate)."""
    paging = META["paging"]
    pool = axes[paging["pool_axis"]]
    seen = set()
    for name in paging["indices"]:
        spec = row["inputs"].get(name, {"type": "random"})
        if spec["type"] != "safetensors":
            return min(pool, sum(_numel(DEFINITION["inputs"][n], axes) for n in paging["indices"]))
        index = _blob(spec["path"], spec["tensor_key"]).flatten().tolist()
        seen.update(i for i in index if 0 <= i < pool)
    return len(seen)


def bytes_moved(workload, dtype):
    """Every input read once and every output written once; a paged pool (META["paging"]) only
    at the rows its index tensors name."""
    row = _row(workload)
    axes = _axes(row)
    paging = META.get("paging")
    read = _pool_rows_read(row, axes) if paging else None
    total = 0.0
    for name, tensor in [*DEFINITION["inputs"].items(), *DEFINITION["outputs"].items()]:
        size = torch.empty((), dtype=_torch_dtype(tensor["dtype"])).element_size()
        numel = _numel(tensor, axes)
        if paging and name in paging["pools"] and axes[paging["pool_axis"]]:
            numel = numel // axes[paging["pool_axis"]] * read
        total += numel * size
    return total
