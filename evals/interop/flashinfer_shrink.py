"""Workloads for the CPU interpreter: a real workload when one is small enough, else one cut
down from the smallest, else none (the task is then GPU-only, and says why).

Cutting keeps index tensors consistent rather than shrinking axes blindly: the first requests of
the *_indptr tensors, the *_indices segments they point at, per-request tensors, and the paged
pool compacted to the pages those requests read. The cut workload must satisfy the Definition's
constraints; the importer then runs the Definition's reference on it before keeping it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelopt.evals.interop.flashinfer_schema import Definition, Paging, slug, workload_numel

# Elements (inputs and outputs) one interpreter workload may touch: the Triton interpreter runs
# each program in NumPy, a few seconds per million elements for simple kernels.
BUDGET = 1 << 20
MAX_REQUESTS = 2
MAX_REAL = 2  # real workloads the interpreter checks, smallest first
INTERP_PREFIX = "accelopt-interp-"
Loader = Callable[[dict], Any]  # a safetensors input spec -> its tensor
SAFE_BUILTINS = {"len": len, "int": int, "min": min, "max": max, "abs": abs, "all": all, "any": any, "sum": sum}


class ShrinkError(Exception):
    """Why no small workload could be derived; becomes the task's GPU-only reason."""


@dataclass
class Plan:
    real: list[int] = field(default_factory=list)  # rows of workloads.jsonl, used as they are
    derived: dict | None = None                  # a new row (interpreter.jsonl)
    tensors: dict = field(default_factory=dict)  # its safetensors blob, keyed by input name
    gpu_only: str | None = None


def plan_interpreter(definition: Definition, rows: list[dict], load: Loader, paging: Paging | None) -> Plan:
    """`load(spec)` returns the tensor a safetensors input spec names."""
    order = sorted(range(len(rows)), key=lambda i: workload_numel(definition, rows[i]["axes"]))
    small = [i for i in order[:MAX_REAL] if workload_numel(definition, rows[i]["axes"]) <= BUDGET]
    if small:
        return Plan(real=small)
    smallest = order[0]
    row = rows[smallest]
    size = workload_numel(definition, row["axes"])
    has_blobs = any(s.get("type") == "safetensors" for s in row["inputs"].values())
    try:
        axes, tensors = cut(definition, row, load, paging) if has_blobs else (_clamped(definition, row), {})
    except ShrinkError as e:
        return Plan(real=[smallest], gpu_only=f"its smallest workload touches {size:,} elements, over the CPU "
                                             f"interpreter's budget of {BUDGET:,}, and cannot be cut down: {e}")
    derived = {"uuid": INTERP_PREFIX + row["uuid"], "axes": axes,
               "inputs": {n: ({"type": "safetensors", "path": f"{INTERP_PREFIX}{slug(row['uuid'])}.safetensors",
                               "tensor_key": n} if n in tensors else s) for n, s in row["inputs"].items()}}
    return Plan(derived=derived, tensors=tensors)


def _clamped(definition: Definition, row: dict) -> dict:
    """Every input random: variable axes clamped to 4, if that fits the budget."""
    axes = {k: min(int(v), 4) for k, v in row["axes"].items()}
    size = workload_numel(definition, axes)
    if size > BUDGET:
        raise ShrinkError(f"with its variable axes at 4 it still touches {size:,} (its constant axes are that large)")
    return axes


def cut(definition: Definition, row: dict, load: Loader, paging: Paging | None) -> tuple[dict, dict]:
    """(axes, safetensors inputs) of the first requests of `row`, index tensors kept consistent."""
    for requests in range(MAX_REQUESTS, 0, -1):
        axes, tensors = _cut(definition, row, load, paging, requests)
        size = workload_numel(definition, axes)
        if size <= BUDGET:
            _check_constraints(definition, axes, tensors)
            return axes, tensors
    raise ShrinkError(f"even its first request touches {size:,} elements")


def _cut(definition: Definition, row: dict, load: Loader, paging: Paging | None, requests: int) -> tuple[dict, dict]:
    import torch

    blobs = {n: load(s) for n, s in row["inputs"].items() if s.get("type") == "safetensors"}
    shape_of = {n: definition.inputs[n].shape or [] for n in blobs}
    indptrs = [n for n in blobs if n.endswith("indptr") and blobs[n].dim() == 1]
    if not indptrs:
        raise ShrinkError(f"its safetensors inputs ({', '.join(blobs)}) have no *_indptr to cut requests at")
    batch = {len(blobs[n]) - 1 for n in indptrs}
    if len(batch) != 1:
        raise ShrinkError(f"its indptr tensors ({', '.join(indptrs)}) disagree on the number of requests")
    b = min(requests, batch.pop())
    old = definition.axis_values(row["axes"])
    new: dict[str, int] = {}
    out: dict[str, torch.Tensor] = {}
    spans: dict[str, tuple[int, int]] = {}  # an indptr's prefix ("kv_") -> the segment its first b requests use
    for n in indptrs:
        ptr = blobs[n].to(torch.int64)
        spans[n[: -len("indptr")]] = (int(ptr[0]), int(ptr[b]))
        out[n] = (ptr[: b + 1] - ptr[0]).to(blobs[n].dtype)
        new[shape_of[n][0]] = b + 1
        totals = {int(ptr[-1] - ptr[0]): int(ptr[b] - ptr[0])}
        for axis, value in old.items():  # axes tied to this indptr's total (num_kv_indices == kv_indptr[-1])
            if definition.axes[axis].type == "var" and value in totals and axis not in new:
                new[axis] = totals[value]
    requests_axis = [a for a, v in old.items() if definition.axes[a].type == "var" and v == len(blobs[indptrs[0]]) - 1]
    for axis in requests_axis:
        new.setdefault(axis, b)
    for n, t in blobs.items():
        if n in out:
            continue
        lead = shape_of[n][0] if shape_of[n] else None
        prefix = next((p for p in spans if n.startswith(p) and "indices" in n), None)
        if prefix is not None:
            start, end = spans[prefix]
            out[n] = t[start:end]
        elif lead in requests_axis:
            out[n] = t[:b]
        else:
            raise ShrinkError(f"cannot tell how to cut {n} (leading axis {lead}) to the first {b} request(s)")
        if lead is not None:
            new[lead] = out[n].shape[0]
    if paging is not None:
        _compact_pool(out, new, paging, old)
    for axis in definition.var_axes:
        new.setdefault(axis, old[axis])
    for n, t in out.items():
        want = [definition.axis_values(new)[a] for a in shape_of[n]]
        if list(t.shape) != want:
            raise ShrinkError(f"{n} would be {list(t.shape)} after the cut, the axes say {want}")
    return {a: new[a] for a in definition.var_axes}, {n: t.contiguous() for n, t in out.items()}


def _compact_pool(out: dict, new: dict, paging: Paging, old: dict) -> None:
    """Renumber the pool rows the cut requests read to 0..u-1; the pool shrinks to u rows."""
    import torch

    present = [out[n] for n in paging.indices if n in out]
    if not present:
        return
    values = torch.cat([t.flatten().to(torch.int64) for t in present])
    used = torch.unique(values[(values >= 0) & (values < old[paging.pool_axis])])
    for n in paging.indices:
        if n in out:
            t = out[n].to(torch.int64)
            mapped = torch.searchsorted(used, t.clamp_min(0))
            out[n] = torch.where(t >= 0, mapped, t).to(out[n].dtype)  # padding (-1) stays padding
    new[paging.pool_axis] = max(int(used.numel()), 1)


def _check_constraints(definition: Definition, axes: dict, tensors: dict) -> None:
    import torch

    scope = {**definition.axis_values(axes), **tensors}
    for constraint in definition.constraints:
        try:
            ok = eval(constraint, {"torch": torch, "__builtins__": SAFE_BUILTINS}, dict(scope))  # noqa: S307
        except NameError:
            continue  # it names a random input: nothing to hold it to
        except Exception as e:  # noqa: BLE001 - any failure means the cut is not a valid workload
            raise ShrinkError(f"constraint {constraint!r} cannot be evaluated on the cut workload: {e}") from None
        if not bool(ok):
            raise ShrinkError(f"constraint {constraint!r} fails on the cut workload")


def save_blob(tensors: dict, path: Path) -> None:
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path))
