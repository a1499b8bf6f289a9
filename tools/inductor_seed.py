"""A standalone candidate module from torch.compile's own Triton kernels (an "Inductor seed").

Input: a capture (tools/inductor_capture.py) of what Inductor generated for each workload of a
task. Output: one module in accelopt's kernel format: plain `@triton.jit` kernels, the launch
code, and `run(*inputs)`; no compile cache, no Inductor autotuner, no CUDA-only host calls.

How the generated wrapper becomes ours, per workload (Inductor specializes on static shapes):
- each `async_compile.triton(name, '''src''')` kernel keeps its body (libdevice calls that
  tl.math also has become tl.math's); the `@triton_heuristics.*` decorator goes, and the launch
  passes the configuration Inductor's autotuner chose on the GPU (`XBLOCK=…, num_warps=…`), so
  the tuner can move it;
- a kernel that makes TMA descriptors on the device (the persistent matmul template) gets
  Triton's scratch allocator set before its launch, as Inductor's launcher does;
- the grid is written out from the kernel's grid type (Grid1D, Grid2D, Grid2DWithYZOverflow,
  FixedGrid for templates);
- host code keeps allocation, views and `del`; stream and device guards go; a call into a
  library (`extern_kernels.mm`, i.e. cuBLAS) or an ATen fallback refuses the seed, with the
  reason: it would not be a Triton kernel.
`run` dispatches on the inputs' shapes and dtypes to the workload's code and takes the inputs in
the order the compiled graph wants them (Dynamo names graph inputs after the arguments).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from accelopt.tools import pyparse

# libdevice calls tl.math also has: the same instruction on the GPU, and the interpreter runs them
# (it has no libdevice), so a seed can be checked on the CPU too.
_LIBDEVICE_IN_TL_MATH = re.compile(r"\blibdevice\.(rsqrt|sqrt|exp|exp2|log|log2|sin|cos|floor|ceil|abs|fma)\(")
TEMPLATES_MODE = "max-autotune-triton"  # the capture mode whose matmuls are Triton templates
SUPPORTED_GRIDS = ("Grid1D", "Grid2D", "Grid2DWithYZOverflow", "FixedGrid")
_DROPPED_CALLS = {"assert_size_stride", "assert_alignment", "get_raw_stream", "set_device", "clear"}
_HOST_CALLS = {"empty_strided_cuda", "reinterpret_tensor", "empty_strided"}

_HEADER = '''import torch
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math


def _reinterpret(t, size, stride, offset):
    """Inductor's reinterpret_tensor: a view of t's storage at t's offset + offset."""
    return t.as_strided(size, stride, t.storage_offset() + offset)


def _cdiv(a, b):
    return (a + b - 1) // b


def _scratch_on(device):
    """Triton's global scratch allocator, for kernels that build TMA descriptors on the device
    (Inductor's persistent matmul template): Triton asks the host for that memory at launch."""
    return lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=device)
'''


class SeedRefused(ValueError):
    """Inductor's output for this task cannot become a Triton candidate; the message says why.
    `library`: the reason is a call into a library (cuBLAS), which Triton templates can replace."""

    def __init__(self, message: str, library: bool = False):
        super().__init__(message)
        self.library = library


@dataclass(frozen=True)
class Seed:
    source: str
    origin: str      # one line: what produced it (Inductor mode, torch and Triton versions, GPU)
    workloads: int   # specializations in the module


def seed_source(capture: dict[str, Any], entry_point: str = "run") -> Seed:
    """The candidate module for a task's capture; SeedRefused with the first reason it cannot be."""
    records = capture.get("workloads") or []
    if not records:
        raise SeedRefused("the capture holds no workloads")
    parts, table = [], []
    for index, record in enumerate(records):
        name = record.get("workload", f"#{index}")
        if "error" in record:
            raise SeedRefused(f"torch.compile failed on workload {name}: {record['error'].splitlines()[0]}")
        if record.get("graphs") != 1:
            raise SeedRefused(f"torch.compile made {record.get('graphs', 0)} graphs of the reference on workload "
                              f"{name} (Dynamo fell back to Python or split it); a seed needs exactly one")
        if len(record.get("sources", [])) != 1:  # one graph, but not one module of output code to read
            raise SeedRefused(f"torch.compile made one graph of the reference on workload {name}, but Inductor "
                              f"wrote {len(record.get('sources', []))} modules of output code for it; a seed reads exactly one")
        try:
            code, call_name = _workload_code(record, index)
        except SeedRefused as exc:
            if exc.library and capture.get("mode") == TEMPLATES_MODE:  # the way out was taken already
                raise SeedRefused(f"{str(exc).split('; for a matmul')[0]}; Inductor has no Triton template for it "
                                  f"in mode {TEMPLATES_MODE} either") from None
            raise
        parts.append(f"# ---- workload {name} ({record.get('for', 'cuda')}): {', '.join(map(_describe, record['inputs']))}\n"
                     + code)
        order = _graph_order(record)
        table.append(f"    {_key_literal(record)}: ({call_name}, {tuple(order)!r}),")
    origin = (f"torch.compile (Inductor, mode {capture.get('mode', 'default')}), torch {capture.get('torch')}, "
              f"Triton {capture.get('triton')}, captured on {capture.get('device')}")
    doc = (f'"""Inductor seed for task {capture.get("task")}: the Triton kernels of {origin}, one '
           f'specialization per workload, launched with the configurations Inductor\'s autotuner chose."""\n\n')
    source = (doc + _HEADER + "\n\n" + "\n\n".join(parts) + "\n\n_BY_INPUTS = {\n" + "\n".join(table) + "\n}\n\n\n"
              + _RUN.format(entry=entry_point))
    pyparse.parse(source)  # a converter bug must not leave a module that cannot even be read
    return Seed(source=source, origin=origin, workloads=len(records))


_RUN = '''def _key(inputs):
    return tuple((tuple(x.shape), str(x.dtype).removeprefix("torch.")) if isinstance(x, torch.Tensor) else repr(x)
                 for x in inputs)


def {entry}(*inputs):
    key = _key(inputs)
    if key not in _BY_INPUTS:
        raise ValueError(f"this Inductor seed has no specialization for inputs {{key}}; it covers {{list(_BY_INPUTS)}}")
    call, order = _BY_INPUTS[key]
    device = next(x.device for x in inputs if isinstance(x, torch.Tensor))
    outputs = call([inputs[i] for i in order], device)
    return outputs[0] if len(outputs) == 1 else tuple(outputs)
'''


def _describe(spec: Any) -> str:
    return f"{spec[1]}{list(spec[0])}" if isinstance(spec, list) else str(spec)


def _key_literal(record: dict) -> str:
    return repr(tuple((tuple(spec[0]), spec[1]) if isinstance(spec, list) else spec for spec in record["inputs"]))


def _graph_order(record: dict) -> list[int]:
    order = graph_argument_positions(record["placeholders"], record["parameters"])
    for placeholder, position in zip(record["placeholders"], order):
        if position is None:
            raise SeedRefused(f"the compiled graph takes an input {placeholder!r} that is not an argument of the "
                              f"reference ({', '.join(record['parameters'])}): module state, a constant, or a "
                              f"local of a function Dynamo resumed after a graph break (a seed needs one graph "
                              f"over the reference's arguments)")
    return [p for p in order if p is not None]


def graph_argument_positions(placeholders: list[str], parameters: list[str]) -> list[int | None]:
    """For each input of a Dynamo graph, the position of the argument it came from, or None.
    Dynamo names a graph input after its source: `L_x_` for parameter `x`, `L_args_2_` for the
    third value of `*args` (parameters are the compiled function's, `*args` written with its star)."""
    position = {name: i for i, name in enumerate(parameters) if not name.startswith("*")}
    star = next(((name[1:], i) for i, name in enumerate(parameters) if name.startswith("*")), None)
    out: list[int | None] = []
    for placeholder in placeholders:
        argument = re.fullmatch(r"[lL]_(.+)_", placeholder)
        name = argument.group(1) if argument else ""
        packed = re.fullmatch(rf"{re.escape(star[0])}_(\d+)", name) if star else None
        out.append(star[1] + int(packed.group(1)) if packed and star else position.get(name))
    return out


# ---------------------------------------------------------------- one workload's wrapper

@dataclass
class _Kernel:
    name: str          # the name in the seed (suffixed per workload)
    params: list[str]  # the @triton.jit signature
    grid_type: str
    fixed_grid_args: int
    source: str        # the jitted function and its jitted helpers, decorators removed, renamed


def _workload_code(record: dict, index: int) -> tuple[str, str]:
    tree = pyparse.parse(record["sources"][0])
    kernels = _kernels(tree, index)
    call = _call_function(tree)
    configs = record.get("configs", {})
    body = _host_body(call.body, kernels, configs)
    if any("make_tensor_descriptor" in k.source for k in kernels.values()):
        body.insert(0, pyparse.parse("triton.set_allocator(_scratch_on(_device))").body[0])
    call_name = f"_call_{index}"
    function = ast.FunctionDef(name=call_name, args=ast.arguments(
        posonlyargs=[], args=[ast.arg("args"), ast.arg("_device")], kwonlyargs=[], kw_defaults=[], defaults=[]),
        # type_params: a field from Python 3.12 on, where unparse needs it; 3.11 (and its stubs) has none
        body=body or [ast.Pass()], decorator_list=[], returns=None, type_params=[])  # type: ignore[call-arg]
    host = ast.unparse(ast.fix_missing_locations(ast.Module(body=[function], type_ignores=[])))
    return "\n\n".join([k.source for k in kernels.values()] + [host]) + "\n", call_name


def _kernels(tree: ast.Module, index: int) -> dict[str, _Kernel]:
    found = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and ast.unparse(node.value.func) == "async_compile.triton"):
            continue
        name = node.value.args[0].value  # type: ignore[attr-defined]
        text = node.value.args[1].value  # type: ignore[attr-defined]
        found[node.targets[0].id] = _kernel(name, text, f"{name}_w{index}")  # type: ignore[attr-defined]
    for inner in ast.walk(tree):
        if isinstance(inner, ast.Call) and ast.unparse(inner.func) == "async_compile.cuda":
            raise SeedRefused("Inductor generated a CUDA C++ kernel here, not Triton")
    return found


def _kernel(name: str, text: str, new_name: str) -> _Kernel:
    module = pyparse.parse(text)
    function = next((n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if function is None:
        raise SeedRefused(f"Inductor kernel {name} has no @triton.jit function of that name")
    heuristics = next((d for d in function.decorator_list if "triton_heuristics" in ast.unparse(d)), None)
    meta = ast.get_source_segment(text, heuristics) if heuristics is not None else ""
    grid = re.search(r"'grid_type':\s*'(\w+)'", meta or "")
    grid_type = grid.group(1) if grid else "Grid1D"
    if grid_type not in SUPPORTED_GRIDS:
        raise SeedRefused(f"Inductor kernel {name} launches on a {grid_type} grid, which the seed cannot write out")
    extra = re.search(r"'extra_launcher_args':\s*\[([^\]]*)\]", meta or "")
    fixed = len(re.findall(r"'[^']*'", extra.group(1))) if extra else 0
    lines = text.splitlines()

    def jitted(node: ast.FunctionDef, renamed: str) -> str:
        body = "\n".join(lines[node.lineno - 1:node.end_lineno])  # from the `def` line: decorators go
        return "@triton.jit\n" + re.sub(rf"^def {re.escape(node.name)}\(", f"def {renamed}(", body, count=1)

    # The kernel's @triton.jit helpers (the combine function of a scan, `_triton_helper_fn_add0`),
    # renamed with the kernel: two kernels' helpers of one name may differ.
    helpers = [n for n in module.body if isinstance(n, ast.FunctionDef) and n is not function
               and any("jit" in ast.unparse(d) for d in n.decorator_list)]
    texts = [jitted(h, f"{new_name}__{h.name.lstrip('_')}") for h in helpers] + [jitted(function, new_name)]
    source = "\n\n".join(texts)
    for helper in helpers:
        source = re.sub(rf"\b{re.escape(helper.name)}\b", f"{new_name}__{helper.name.lstrip('_')}", source)
    source = _LIBDEVICE_IN_TL_MATH.sub(r"tl.math.\1(", source)
    params = [a.arg for a in function.args.args]
    return _Kernel(new_name, params, grid_type, fixed, source)


def _call_function(tree: ast.Module) -> ast.FunctionDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "call":
            return node
    raise SeedRefused("the Inductor wrapper has no call() function (an AOT or C++ wrapper is not supported)")


def _host_body(stmts: list[ast.stmt], kernels: dict[str, _Kernel], configs: dict) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for stmt in stmts:
        if isinstance(stmt, ast.With) and "DeviceGuard" in ast.unparse(stmt.items[0].context_expr):
            out.extend(_host_body(stmt.body, kernels, configs))
            continue
        call = stmt.value if isinstance(stmt, (ast.Expr, ast.Assign)) else None
        if isinstance(call, ast.Call):
            func = ast.unparse(call.func)
            if func.split(".")[-1] in _DROPPED_CALLS:
                continue
            if isinstance(stmt, ast.Expr) and func.endswith(".run") and func[:-4] in kernels:
                out.append(_launch(call, kernels[func[:-4]], configs.get(func[:-4])))
                continue
        _refuse_library_calls(stmt)
        out.append(_rewrite_host_calls(stmt))
    return out


def _refuse_library_calls(stmt: ast.stmt) -> None:
    for node in ast.walk(stmt):
        if not isinstance(node, ast.Call):
            continue
        func = ast.unparse(node.func)
        if func.startswith("extern_kernels."):
            raise SeedRefused(f"Inductor calls a library here ({func}, e.g. cuBLAS), not a Triton kernel; for a "
                              f"matmul, seed with --seed-mode {TEMPLATES_MODE} to get Inductor's Triton templates",
                              library=True)
        if func.split(".")[-1] not in _HOST_CALLS and func not in {"len", "int"}:
            raise SeedRefused(f"Inductor's host code calls {func} (an ATen fallback or a runtime call the seed "
                              f"cannot carry): {ast.unparse(stmt)[:120]}")


class _HostCalls(ast.NodeTransformer):
    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = ast.unparse(node.func)
        if func in {"empty_strided_cuda", "empty_strided"}:  # (size, stride, dtype) on the inputs' device
            size, stride, dtype = node.args[:3]
            return ast.Call(func=pyparse.parse("torch.empty_strided", mode="eval").body, args=[size, stride],
                            keywords=[ast.keyword("dtype", dtype), ast.keyword("device", ast.Name("_device"))])
        if func == "reinterpret_tensor":
            return ast.Call(func=ast.Name("_reinterpret"), args=node.args, keywords=[])
        return node


def _rewrite_host_calls(stmt: ast.stmt) -> ast.stmt:
    return ast.fix_missing_locations(_HostCalls().visit(stmt))


def _launch(call: ast.Call, kernel: _Kernel, config: dict | None) -> ast.stmt:
    if config is None:
        raise SeedRefused(f"no launch configuration was captured for kernel {kernel.name}")
    if any(k.arg == "grid" for k in call.keywords):
        raise SeedRefused(f"kernel {kernel.name} is launched with an explicit grid= (an older Inductor); "
                          "capture with a torch that computes grids in its launcher (2.6 or later)")
    args = list(call.args)
    meta = dict(config.get("kwargs", {}))
    if kernel.grid_type == "FixedGrid":
        grid = args[len(args) - kernel.fixed_grid_args:]
        args = args[:len(args) - kernel.fixed_grid_args]
        grid_text = "(" + ", ".join(ast.unparse(g) for g in grid) + ")"
    else:
        runtime = [p for p in kernel.params if p not in meta]
        numel = {p: ast.unparse(args[i]) for i, p in enumerate(runtime) if p.endswith("numel") and i < len(args)}
        grid_text = _grid(kernel, numel)
    keywords = ", ".join([f"{k}={v!r}" for k, v in meta.items()]
                         + [f"num_warps={config['num_warps']}", f"num_stages={config['num_stages']}"])
    text = f"{kernel.name}[{grid_text}]({', '.join(ast.unparse(a) for a in args)}, {keywords})"
    return pyparse.parse(text).body[0]


def _grid(kernel: _Kernel, numel: dict[str, str]) -> str:
    """The grid as a function of the launch's META, so a tuner that moves XBLOCK moves the grid."""
    def blocks(axis: str) -> str:
        if f"{axis}numel" not in numel:
            raise SeedRefused(f"kernel {kernel.name}: no {axis}numel among its launch arguments")
        return f"_cdiv({numel[axis + 'numel']}, META['{axis.upper()}BLOCK'])"

    if kernel.grid_type == "Grid1D":
        return f"lambda META: ({blocks('x')},)"
    if kernel.grid_type == "Grid2D":
        return f"lambda META: ({blocks('x')}, {blocks('y')})"
    # Grid2DWithYZOverflow: y blocks past CUDA's 65535 limit spill into z (the kernel reads both)
    y = blocks("y")
    return f"lambda META: ({blocks('x')}, _cdiv({y}, _cdiv({y}, 65535)), _cdiv({y}, 65535))"
