"""What a kernel is, in a few words: the text recall queries with, beside the task description.

A launch lesson carries only to kernels whose rows are alike (`near_rows`: within `ROW_SPAN`, 8x):
warps and rows a program mean opposite things at 128 elements a row and at 32000."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

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


_FAMILIES = (("gemm", ("gemm", "matmul", "matrix mult", "tl.dot", "bmm")),
             ("attention", ("attention", "decode", "prefill", "flash")),
             ("reduction", ("reduction", "norm", "softmax", "cross-entropy", "cross_entropy", "top-k", "sampling")),
             ("elementwise", ("elementwise", "activation", "silu", "gelu", "rope", "add")))


def class_family(kernel_class: str) -> str:
    """A coarse family for free-text kernel classes (the summarizer's words or ours)."""
    text = kernel_class.lower()
    for family, words in _FAMILIES:
        if any(w in text for w in words):
            return family
    return "unknown"


# How far apart two row lengths may be for a launch lesson to speak from one to the other: a row
# of 128 elements wants fewer warps and several rows a program, a row of 32000 the opposite (on
# the H100, rmsnorm_h128's "8 warps hurt" ranked 8 warps, softmax's only win, last).
ROW_SPAN = 8.0


def row_length(workloads: Mapping[str, Mapping] | None) -> float | None:
    """A kernel's scale: the last dimension of each workload's largest input (the judge records
    its shape), geometric mean over the workloads; None where no shape was recorded."""
    rows = [shape[-1] for t in (workloads or {}).values() if (shape := t.get("input_shape")) and shape[-1] > 0]
    return math.exp(sum(map(math.log, rows)) / len(rows)) if rows else None


def near_rows(a: float | None, b: float | None) -> bool:
    """Whether rows of these lengths are alike enough (within ROW_SPAN); unknown is alike."""
    return a is None or b is None or max(a, b) <= ROW_SPAN * min(a, b)
