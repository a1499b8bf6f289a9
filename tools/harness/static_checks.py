"""Checks on a candidate's source that need no execution.

They run before any process is spawned, so an obviously unusable or cheating kernel costs
nothing. Structural problems are compile_error (the fixer can repair them); attempts to do the
work outside Triton, to hide work from the timer, or to tamper with the harness are
cheat_suspected.
"""

from __future__ import annotations

import ast

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
_FORBIDDEN_MODULES = {
    "threading": "extra threads", "concurrent": "extra threads or processes", "multiprocessing": "extra processes",
    "asyncio": "concurrent work", "subprocess": "subprocesses", "ctypes": "native calls", "gc": "the garbage collector",
    "inspect": "introspection of the harness", "importlib": "dynamic imports", "builtins": "the builtins",
    "signal": "signals", "socket": "the network", "numpy": "host-side compute", "cupy": "another GPU library",
    "torch.nn.functional": "torch compute", "torch.nn": "torch modules", "torch.cuda.graphs": "CUDA graphs",
}
_TAMPER_TARGETS = ("torch.cuda", "time", "triton.testing", "torch.Tensor", "torch", "triton", "sys", "os")


def check_triton_source(source: str, entry_point: str) -> tuple[str, str] | None:
    """Return (status, message) when the source cannot be a valid candidate, else None."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        line = (e.text or "").strip()
        return "compile_error", f"SyntaxError: {e.msg} (line {e.lineno}: {line})"

    functions = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    jitted = {name for name, fn in functions.items() if any(_is_triton_jit(d) for d in fn.decorator_list)}
    if not jitted:
        return "compile_error", "no @triton.jit kernel is defined; the work must be done in a Triton kernel"
    entry = functions.get(entry_point)
    if entry is None or entry not in tree.body:
        return "compile_error", f"no top-level entry point `def {entry_point}(...)` is defined"
    if not _launches(entry, functions, jitted):
        return ("compile_error",
                f"`{entry_point}` never launches a @triton.jit kernel (expected `kernel[grid](...)`)")
    cheat = _find_cheat(tree, functions, jitted)
    return ("cheat_suspected", cheat) if cheat else None


def _is_triton_jit(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return ast.unparse(target) in {"triton.jit", "jit", "triton.autotune", "autotune", "triton.heuristics",
                                   "heuristics"}


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


def _find_cheat(tree: ast.Module, functions: dict[str, ast.FunctionDef], jitted: set[str]) -> str | None:
    jit_nodes = {id(n) for name in jitted for n in ast.walk(functions[name])}
    aliases = _torch_aliases(tree)
    for node in ast.walk(tree):
        if id(node) in jit_nodes:
            continue  # inside Triton kernels anything Triton accepts is fine
        line = getattr(node, "lineno", "?")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if isinstance(node, ast.ImportFrom) and node.module in ("torch", "torch.nn"):
                names += [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                for forbidden, why in _FORBIDDEN_MODULES.items():
                    if name == forbidden or name.startswith(forbidden + "."):
                        return f"line {line}: imports {name} ({why} is not allowed in a candidate)"
        elif isinstance(node, ast.Call):
            called = _dotted(node.func, aliases)
            if called and called.startswith("torch."):
                parts = called.split(".")
                if parts[1] == "cuda" and len(parts) > 2 and parts[2] not in _TORCH_CUDA_ALLOWED:
                    return f"line {line}: calls {called} (streams, events and synchronization belong to the harness)"
                if parts[1] not in _TORCH_ALLOWED:
                    return f"line {line}: calls {called}: host code may allocate tensors but not compute with torch"
            if called in ("setattr", "delattr", "exec", "eval", "compile", "__import__", "globals", "open"):
                return f"line {line}: calls {called}() (not allowed in a candidate)"
            if isinstance(node.func, ast.Attribute) and node.func.attr in _COMPUTE_METHODS \
                    and not (called or "").startswith(("triton.", "tl.", "math.")):
                return f"line {line}: calls .{node.func.attr}(): torch compute or precision change outside Triton"
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            return f"line {line}: uses the @ operator: matrix products must run in a Triton kernel"
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                dotted = _dotted(target, aliases) if isinstance(target, ast.Attribute) else None
                if dotted and dotted.split(".")[0] in {t.split(".")[0] for t in _TAMPER_TARGETS}:
                    return f"line {line}: assigns to {dotted} (patching library or timer state is not allowed)"
        elif isinstance(node, ast.Global):
            return f"line {line}: uses `global` state (results may not be cached between calls)"
    return _find_state_between_calls(tree, functions, jitted)


def _find_state_between_calls(tree: ast.Module, functions: dict[str, ast.FunctionDef], jitted: set[str]) -> str | None:
    """Host functions that write module-level containers or memoize can replay old outputs."""
    module_names = {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    for name, fn in functions.items():
        if name in jitted:
            continue
        for deco in fn.decorator_list:
            text = ast.unparse(deco.func if isinstance(deco, ast.Call) else deco)
            if text.split(".")[-1] in ("lru_cache", "cache", "cached_property"):
                return f"line {fn.lineno}: `{name}` is memoized ({text}): results may not be cached between calls"
        local = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
        for node in ast.walk(fn):
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    if isinstance(target, ast.Name):
                        local.add(target.id)
                    elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) \
                            and target.value.id in module_names - local:
                        return (f"line {node.lineno}: `{name}` writes module-level `{target.value.id}`: "
                                "results may not be cached between calls")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in module_names - local \
                    and node.func.attr in ("append", "update", "setdefault", "__setitem__", "extend", "insert"):
                return (f"line {node.lineno}: `{name}` writes module-level `{node.func.value.id}`: "
                        "results may not be cached between calls")
    return None


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
