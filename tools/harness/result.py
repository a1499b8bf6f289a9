"""What an evaluation returns. JSON-friendly: it goes straight into graph state and the run dir."""

from __future__ import annotations

import math
import random
import statistics
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
    "cheat_suspected",  # torch fallback, side streams/threads, timer patching, cached results, above roofline
]
FIXABLE = {"no_code", "compile_error", "runtime_error", "crashed", "timeout", "wrong_output", "nan",
           "shape_mismatch", "dtype_mismatch", "input_mutated", "cheat_suspected"}

# Timings on the interpreter are labelled so and must never be compared with GPU timings.
Timer = Literal["cuda_event", "interpreter_wall", "nki_benchmark"]


class WorkloadTiming(BaseModel):
    median_us: float
    iqr_us: float
    samples: int
    metric: str = "cuda_event"  # cuda_event, cupti_kernel (kernel-only), or interpreter_wall
    round_medians_us: list[float] = []
    flops: float | None = None
    bytes: float | None = None
    pct_peak: float | None = None
    pct_achievable: float | None = None
    bound: str | None = None


class Comparison(BaseModel):
    """Candidate against one comparator timed interleaved in the same worker."""

    speedup: float     # comparator time / candidate time: geomean over workloads, median over rounds
    ci_low: float      # 95% bootstrap interval over rounds
    ci_high: float
    rounds: int
    faster: bool       # ci_low > 1: faster beyond noise
    slower: bool       # ci_high < 1: slower beyond noise


class EvalResult(BaseModel):
    status: Status
    error: str | None = None
    device: str
    device_name: str | None = None
    timer: Timer | None = None
    workloads: dict[str, WorkloadTiming] = {}
    compare: dict[str, dict[str, WorkloadTiming]] = {}
    versus: dict[str, Comparison] = {}
    flags: list[str] = []
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    eval_s: float | None = None
    profile: str | None = None  # a backend's own profile summary for the planner (NKI: neuron-profile)

    @property
    def ok(self) -> bool:
        return self.status == "verified"


def compare_rounds(candidate: dict[str, WorkloadTiming], other: dict[str, WorkloadTiming],
                   resamples: int = 2000) -> Comparison:
    """Per round, the geomean over workloads of other/candidate; then the median over rounds
    and a bootstrap interval of that median. Rounds, not pooled samples, are the unit: samples
    inside one do_bench run share clocks and thermal state."""
    names = [n for n in candidate if n in other]
    count = min(min(len(candidate[n].round_medians_us), len(other[n].round_medians_us)) for n in names)
    per_round = []
    for r in range(count):
        logs = [math.log(other[n].round_medians_us[r] / candidate[n].round_medians_us[r]) for n in names]
        per_round.append(math.exp(sum(logs) / len(logs)))
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(per_round, k=count)) for _ in range(resamples))
    low, high = medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]
    return Comparison(speedup=statistics.median(per_round), ci_low=low, ci_high=high, rounds=count,
                      faster=low > 1.0, slower=high < 1.0)
