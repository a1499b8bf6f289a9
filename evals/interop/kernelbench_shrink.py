"""Small interpreter workloads for KernelBench problems, found automatically.

KernelBench's sizes are GPU sizes (a 4096^3 GEMM takes over an hour per call on the Triton CPU
interpreter). The free size knobs are halved, the largest first, until what the kernel reads
(inputs and the Model's state) and the matmul/conv FLOPs fit a small budget. Each step is
checked on the meta device; a step that breaks the Model (a conv input smaller than its kernel,
channels no longer divisible by groups) freezes that knob instead. The result is checked by
building the Model and running forward once on CPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

TARGET_ELEMENTS = 100_000  # inputs + Model state the kernel reads
TARGET_FLOPS = 50_000_000  # matmul/conv FLOPs of one call
MIN_SCALABLE = 4  # knobs at or below this are axes, counts, or already small: kept (a batch goes down to 1)
MAX_STEPS = 200
# Knobs that define the operation rather than its size: kept as the problem has them.
STRUCTURAL = re.compile(r"kernel|stride|pad|dilation|groups|pool|^axis|patch|window", re.IGNORECASE)


@dataclass
class Shrunk:
    params: dict[str, int | float]        # the free knobs, shrunk (and the user's overrides)
    elements: int                         # inputs + state of the result
    flops: int | None                     # None: the Model cannot run on the meta device
    fits: bool                            # within TARGET_ELEMENTS and TARGET_FLOPS
    history: list[dict] = field(default_factory=list)  # accepted steps, largest first


def scalable(name: str, value: int | float) -> bool:
    base = name.split("[")[0]
    floor = 1 if "batch" in base.lower() else MIN_SCALABLE
    return isinstance(value, int) and not isinstance(value, bool) and value > floor and not STRUCTURAL.search(base)


def _over(cost: tuple[int, int | None]) -> bool:
    elements, flops = cost
    return elements > TARGET_ELEMENTS or (flops or 0) > TARGET_FLOPS


def shrink(cost, free: dict[str, int | float], pinned: dict[str, int | float]) -> Shrunk:
    """Halve the largest scalable free knob while over budget. `cost(params)` returns
    (elements, flops or None) or raises when the Model breaks at those sizes; `pinned` (the
    user's overrides) are never changed."""
    current = {**free, **pinned}
    now = cost(current)
    history = [dict(current)]
    frozen = set(pinned)
    for _ in range(MAX_STEPS):
        if not _over(now):
            break
        candidates = [k for k, v in current.items() if k not in frozen and scalable(k, v)]
        if not candidates:
            break
        knob = max(candidates, key=lambda k: current[k])
        # Sizes a Model needs equal (HingeLoss broadcasts batch_size against input_shape[0]) go down together.
        tied = [k for k in candidates if current[k] == current[knob]]
        after = None
        for group in ([knob], tied) if len(tied) > 1 else ([knob],):
            trial = {**current, **{k: current[k] // 2 for k in group}}
            try:
                after = cost(trial)
                break
            except Exception:  # noqa: BLE001 - these sizes break the Model
                after = None
        if after is None:
            frozen.add(knob)  # keep this knob where it is
            continue
        if after[0] >= now[0] and (after[1] or 0) >= (now[1] or 0):
            frozen.add(knob)  # shapes nothing the kernel sees (an unused size): leave it
            continue
        current, now = trial, after
        history.append(dict(current))
    return Shrunk(params=current, elements=now[0], flops=now[1], fits=not _over(now), history=history[::-1])
