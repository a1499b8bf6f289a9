"""Measured-kernel records and figures from candidates' measurements (their text for a model:
policies/measurement_text.py)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from accelopt.nodes.records import Candidate, leads_parent, trails_parent
from accelopt.policies.interface import MeasuredKernel
from accelopt.tools.tunables import config_of

TRIED_LIMIT = 40  # newest first past this: a prompt must stay short


def mean_pct(workloads: dict, key: str) -> float | None:
    values = [t[key] for t in workloads.values() if t.get(key) is not None]
    return math.fsum(values) / len(values) if values else None


def measured_kernels(candidates: Mapping[str, Candidate]) -> list[MeasuredKernel]:
    """Every kernel measured in this run (the newest TRIED_LIMIT, oldest first): what it tried,
    how it fared, and its launch configuration, so that no planner proposes it again."""
    def order(c: Candidate) -> tuple:
        return (c.get("iteration") or 0, c["id"])

    return [measured_kernel(c) for c in sorted((c for c in candidates.values() if c.get("source")), key=order)
            [-TRIED_LIMIT:]]


def measured_kernel(c: Candidate) -> MeasuredKernel:
    kernel = MeasuredKernel(
        id=c["id"], title=c.get("plan_title") or ("the starting kernel" if c["id"] == "baseline" else ""),
        status=c.get("status") or "pending", parent_id=c.get("parent_id"),
        speedup_vs_parent=c.get("speedup_vs_parent"), speedup=c.get("speedup"),
        config=config_of(c["source"] or ""),  # every measured kernel has a source (measured_kernels' filter)
        workload_speedups=workload_speedups(c))
    if c.get("status") == "verified" and c.get("parent_id") and c.get("speedup_vs_parent") is not None:
        # against its parent beyond noise, or not (records.leads_parent)
        kernel["versus_parent"] = "faster" if leads_parent(c) else "slower" if trails_parent(c) else "within noise"
    return kernel


def workload_speedups(candidate: Candidate) -> dict[str, float]:
    """Per workload, the candidate's speedup over the baseline timed in the same rounds (the
    baseline's own: 1.0); empty where it was not verified or not timed against the baseline."""
    if candidate.get("status") != "verified":
        return {}
    mine = {w: t.get("median_us") for w, t in (candidate.get("workloads") or {}).items()}
    if candidate["id"] == "baseline":
        return {w: 1.0 for w, us in mine.items() if us}
    base = (candidate.get("compared_us") or {}).get("baseline") or {}
    return {w: base[w] / us for w, us in mine.items() if us and base.get(w)}

