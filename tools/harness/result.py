"""What an evaluation returns. JSON-friendly: it goes straight into graph state and the run dir."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel

Status = Literal[
    "verified",        # correct on every workload and seed, and timed
    "no_code",         # the model's reply held no usable kernel
    "llm_error",       # the model call failed after its retries
    "compile_error",   # syntax error, missing @triton.jit / entry point, Triton compilation failure
    "runtime_error",   # raised while running
    "crashed",         # the worker died from a signal (segfault, abort)
    "timeout",         # killed after the per-candidate time limit
    "wrong_output",    # values outside tolerance
    "nan",             # NaN/Inf where the reference is finite
    "shape_mismatch",
    "dtype_mismatch",
    "input_mutated",   # the kernel wrote to its inputs
]
FIXABLE = {"no_code", "compile_error", "runtime_error", "crashed", "timeout", "wrong_output", "nan",
           "shape_mismatch", "dtype_mismatch", "input_mutated"}

# Timings on the interpreter are labelled so and must never be compared with GPU timings.
Timer = Literal["cuda_event", "interpreter_wall"]


class WorkloadTiming(BaseModel):
    median_us: float
    iqr_us: float
    samples: int
    flops: float | None = None
    bytes: float | None = None
    pct_peak: float | None = None
    pct_achievable: float | None = None
    bound: str | None = None


class EvalResult(BaseModel):
    status: Status
    error: str | None = None
    device: str
    device_name: str | None = None
    timer: Timer | None = None
    workloads: dict[str, WorkloadTiming] = {}
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    eval_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "verified"


def speedup(base: dict[str, WorkloadTiming] | dict, new: dict[str, WorkloadTiming] | dict) -> float | None:
    """Geometric mean over shared workloads of base median / new median."""
    ratios = []
    for name, timing in new.items():
        if name in base:
            b = base[name]["median_us"] if isinstance(base[name], dict) else base[name].median_us
            n = timing["median_us"] if isinstance(timing, dict) else timing.median_us
            if n > 0:
                ratios.append(b / n)
    if not ratios:
        return None
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios))


def beats(parent: dict, child: dict) -> bool:
    """True when the child is faster than the parent beyond noise on the geometric mean:
    its median plus half its IQR must fall below the parent's median minus half its IQR
    on most workloads. A child within noise of its parent is not a win."""
    wins = 0
    shared = [n for n in child if n in parent]
    for name in shared:
        p, c = parent[name], child[name]
        if c["median_us"] + c["iqr_us"] / 2 < p["median_us"] - p["iqr_us"] / 2:
            wins += 1
    return bool(shared) and wins * 2 > len(shared)
