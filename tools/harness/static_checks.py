"""Findings about a candidate's source that need no execution: advice, never a verdict.

Only a syntax error rejects (KernelSource.syntax_error: the source cannot run at all). Everything else becomes a
Finding with a severity that travels with the result into prompts and reports: what a fixer or
a user should know. Whether the kernel really does its work in Triton, leaves its inputs alone
or keeps results between calls is decided by runtime evidence in the judge (judge.py), because
rules on text reject honest code (`.to(device)` no-ops, CPU fallbacks that never run,
`__main__` self-tests) and miss cheats written another way (`getattr(torch, "soft" + "max")`).

severity: "serious" for what honest kernels never do (tampering with libraries or timers,
threads, subprocesses, the network, exec/eval); "warning" for what often hides work outside
Triton (torch compute in host code, state kept between calls, introspection); "info" for
what is usually harmless (casts, synchronization).
"""

from __future__ import annotations

import ast

from accelopt.tools.harness.kernel_source import KernelSource
from accelopt.tools.harness.result import Finding, Severity

# Host code may allocate, inspect and reshape tensors, never compute with torch.
_TORCH_ALLOWED = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "full", "full_like", "ones", "ones_like",
    "arange", "float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool",
    "dtype", "device", "Size", "Tensor", "is_tensor", "finfo", "iinfo", "cuda", "float8_e4m3fn", "float8_e5m2",
}
_TORCH_CUDA_ALLOWED = {"current_device", "get_device_properties", "get_device_capability", "device_count",
                       "is_available", "device"}
# Tensor methods that compute (or change precision) rather than describe or view.
_COMPUTE_METHODS = {
    "sum", "mean", "exp", "exp2", "log", "softmax", "log_softmax", "matmul", "mm", "bmm", "addmm", "baddbmm",
    "max", "min", "amax", "amin", "argmax", "argmin", "norm", "pow", "sqrt", "rsqrt", "mul", "mul_", "add",
    "add_", "sub", "sub_", "div", "div_", "relu", "sigmoid", "tanh", "silu", "gelu", "topk", "sort", "cumsum",
    "einsum", "var", "std", "square", "abs", "neg", "reciprocal", "clamp", "where", "masked_fill", "copy_",
    "clone", "to", "float", "half", "bfloat16", "double", "type", "type_as", "index_select", "gather", "scatter",
    "scatter_add", "lerp", "addcmul", "addcdiv", "outer", "dot", "cross", "prod", "logsumexp", "multinomial",
}
_FORBIDDEN_MODULES: dict[str, tuple[str, Severity]] = {
    "threading": ("extra threads", "serious"), "concurrent": ("extra threads or processes", "serious"),
    "multiprocessing": ("extra processes", "serious"), "asyncio": ("concurrent work", "serious"),
    "subprocess": ("subprocesses", "serious"), "ctypes": ("native calls", "serious"),
    "signal": ("signals", "serious"), "socket": ("the network", "serious"),
    "gc": ("the garbage collector", "warning"), "inspect": ("introspection", "info"),
    "importlib": ("dynamic imports", "warning"), "builtins": ("the builtins", "warning"),
    "numpy": ("host-side compute", "warning"), "cupy": ("another GPU library", "warning"),
    "torch.nn.functional": ("torch compute", "warning"), "torch.nn": ("torch modules", "info"),
    "torch.cuda.graphs": ("CUDA graphs", "warning"),
}
# Precision changes and copies in host code: usually harmless (a no-op on the GPU path).
_CAST_METHODS = {"to", "float", "half", "bfloat16", "double", "type", "type_as", "copy_", "clone"}
_TAMPER_TARGETS = ("torch.cuda", "time", "triton.testing", "torch.Tensor", "torch", "triton", "sys", "os")


def findings(source: str | KernelSource, entry_point: str) -> list[Finding]:
    """Static advice on a source, worst first; empty when it does not parse (KernelSource.syntax_error)."""
    kernel = KernelSource.of(source)
    tree = kernel.tree
    if tree is None:
        return []
    out: list[Finding] = []
    functions, jitted = kernel.functions, kernel.triton_kernels
    entry = functions.get(entry_point)
    if not jitted:
        out.append(Finding(rule="no_triton_kernel", severity="serious",
                           message="no @triton.jit kernel is defined; the work must be done in a Triton kernel"))
    if entry is None or entry not in tree.body:
        out.append(Finding(rule="no_entry_point", severity="serious",
                           message=f"no top-level entry point `def {entry_point}(...)` is defined"))
    elif jitted and not _launches(entry, functions, jitted):
        out.append(Finding(rule="no_launch", severity="info", line=entry.lineno,
                           message=f"`{entry_point}` launches no @triton.jit kernel by name "
                                   "(fine if it launches through an alias or a wrapper)"))
    out += _find_cheats(tree, functions, jitted)
    order = {"serious": 0, "warning": 1, "info": 2}
    return sorted(out, key=lambda f: (order[f.severity], f.line or 0))


def _launches(entry: ast.FunctionDef, functions: dict[str, ast.FunctionDef], jitted: set[str]) -> bool:
    """The entry launches a kernel itself, or through host-side helpers it calls."""
    seen, todo = set(), [entry]
    while todo:
        fn = todo.pop()
        if fn.name in seen:
            continue
        seen.add(fn.name)
        for node in ast.walk(fn):
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in jitted:
                return True
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in functions \
                    and node.func.id not in jitted:
                todo.append(functions[node.func.id])
    return False


def _main_guard(node: ast.stmt) -> bool:
    """`if __name__ == "__main__":` holds self-tests that never run when the harness imports."""
    return isinstance(node, ast.If) and "__name__" in ast.unparse(node.test) and "__main__" in ast.unparse(node.test)


def _find_cheats(tree: ast.Module, functions: dict[str, ast.FunctionDef], jitted: set[str]) -> list[Finding]:
    skip = {id(n) for name in jitted for n in ast.walk(functions[name])}  # Triton code: anything Triton takes
    skip |= {id(n) for stmt in tree.body if _main_guard(stmt) for n in ast.walk(stmt)}
    aliases = _torch_aliases(tree)
    out: list[Finding] = []

    def add(rule: str, severity: Severity, node: ast.AST, message: str) -> None:
        out.append(Finding(rule=rule, severity=severity, line=getattr(node, "lineno", None), message=message))

    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if isinstance(node, ast.ImportFrom) and node.module in ("torch", "torch.nn"):
                names += [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                for module, (why, severity) in _FORBIDDEN_MODULES.items():
                    if name == module or name.startswith(module + "."):
                        add("import", severity, node, f"imports {name} ({why})")
        elif isinstance(node, ast.Call):
            called = _dotted(node.func, aliases)
            if called and called.startswith("torch."):
                parts = called.split(".")
                if parts[1] == "cuda" and len(parts) > 2 and parts[2] not in _TORCH_CUDA_ALLOWED:
                    severity = "info" if parts[2] in ("synchronize", "current_stream", "set_device") else "warning"
                    add("torch_cuda", severity, node, f"calls {called} (streams and events belong to the harness)")
                elif parts[1] not in _TORCH_ALLOWED:
                    add("torch_compute", "warning", node,
                        f"calls {called} in host code: work outside Triton is rejected at run time if it computes")
            if called in ("setattr", "delattr", "exec", "eval", "compile", "__import__"):
                add("dynamic", "serious", node, f"calls {called}()")
            elif called in ("globals", "open", "getattr"):
                add("dynamic", "info", node, f"calls {called}()")
            if isinstance(node.func, ast.Attribute) and not (called or "").startswith(("triton.", "tl.", "math.")):
                if node.func.attr in _CAST_METHODS:
                    add("cast", "info", node, f"calls .{node.func.attr}() in host code (a copy or precision change)")
                elif node.func.attr in _COMPUTE_METHODS:
                    add("torch_compute", "warning", node,
                        f"calls .{node.func.attr}() in host code: torch compute outside Triton is rejected at run time")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            add("torch_compute", "warning", node, "uses the @ operator in host code")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                dotted = _dotted(target, aliases) if isinstance(target, ast.Attribute) else None
                if dotted and dotted.split(".")[0] in {t.split(".")[0] for t in _TAMPER_TARGETS}:
                    add("tamper", "serious", node, f"assigns to {dotted} (patching library or timer state)")
        elif isinstance(node, ast.Global):
            add("state", "warning", node, "uses `global` state (results must not be kept between calls)")
    return out + _find_state_between_calls(tree, functions, jitted)


def _find_state_between_calls(tree: ast.Module, functions: dict[str, ast.FunctionDef],
                              jitted: set[str]) -> list[Finding]:
    """Host functions that write module-level containers or memoize can replay old outputs;
    a cache of launch metadata is honest, so this is a warning the runtime checks settle."""
    out: list[Finding] = []
    module_names = {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    for name, fn in functions.items():
        if name in jitted:
            continue
        for deco in fn.decorator_list:
            text = ast.unparse(deco.func if isinstance(deco, ast.Call) else deco)
            if text.split(".")[-1] in ("lru_cache", "cache", "cached_property"):
                out.append(Finding(rule="state", severity="warning", line=fn.lineno,
                                   message=f"`{name}` is memoized ({text}): results must not be kept between calls"))
        local = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
        for node in ast.walk(fn):
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    if isinstance(target, ast.Name):
                        local.add(target.id)
                    elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) \
                            and target.value.id in module_names - local:
                        out.append(Finding(rule="state", severity="warning", line=node.lineno,
                                           message=f"`{name}` writes module-level `{target.value.id}`"))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in module_names - local \
                    and node.func.attr in ("append", "update", "setdefault", "__setitem__", "extend", "insert"):
                out.append(Finding(rule="state", severity="warning", line=node.lineno,
                                   message=f"`{name}` writes module-level `{node.func.value.id}`"))
    return out


def _torch_aliases(tree: ast.Module) -> dict[str, str]:
    """`import torch as th` / `from torch import cuda` -> names that stand for torch modules."""
    aliases = {"torch": "torch", "triton": "triton", "tl": "triton.language", "time": "time"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return aliases


def _dotted(node: ast.expr, aliases: dict[str, str]) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    head = aliases.get(node.id, node.id)
    return ".".join([head, *reversed(parts)])
