"""What a kernel is, in a few words: the text recall queries with, beside the task description."""

from __future__ import annotations

import re

_OPS = {
    "tl.dot": "matrix multiply (tl.dot, tensor cores)", "tl.sum": "sum reduction", "tl.max": "max reduction",
    "tl.exp": "exponential", "tl.exp2": "exponential", "tl.sqrt": "square root", "tl.rsqrt": "reciprocal sqrt",
    "tl.atomic_add": "atomics", "tl.cumsum": "scan", "tl.where": "masking", "tl.make_block_ptr": "block pointers",
    "tl.sigmoid": "sigmoid", "tl.sort": "sort",
}


def kernel_class(source: str) -> str:
    if "tl.dot" in source:
        return "GEMM / tiled matrix multiply"
    reductions = sum(op in source for op in ("tl.sum", "tl.max", "tl.min"))
    if reductions:
        return "row reduction (normalization / softmax style)"
    return "elementwise"


def kernel_features(source: str) -> str:
    ops = sorted({label for op, label in _OPS.items() if re.search(re.escape(op) + r"\b", source)})
    launch = sorted(set(re.findall(r"\b(num_warps|num_stages|BLOCK\w*)\s*=\s*(\d+)", source)))
    loops = "loops over the row" if re.search(r"for \w+ in range\(", source) else "no loops"
    return (f"{kernel_class(source)}; ops: {', '.join(ops) or 'loads/stores only'}; {loops}; "
            f"launch: {', '.join(f'{k}={v}' for k, v in launch) or 'computed'}")
