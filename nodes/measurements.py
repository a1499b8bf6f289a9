"""Turn a candidate's measurements into short text a model can read, and score candidates."""

from __future__ import annotations

import math

from tools.harness.result import speedup


def describe(candidate: dict) -> str:
    workloads = candidate.get("workloads") or {}
    if not workloads:
        return "not measured"
    lines = []
    if candidate.get("timer") == "interpreter_wall":
        lines.append("(CPU Triton-interpreter wall times: they check the pipeline, not GPU performance)")
    for name, t in workloads.items():
        line = f"- {name}: median {t['median_us']:.1f} us (IQR {t['iqr_us']:.1f} us, n={t['samples']})"
        if t.get("pct_peak") is not None:
            line += f", {t['pct_peak']:.0f}% of datasheet peak"
            if t.get("pct_achievable") is not None:
                line += f", {t['pct_achievable']:.0f}% of achievable"
            line += f", {t.get('bound')}-bound"
        lines.append(line)
    if candidate.get("speedup"):
        lines.append(f"Speedup over the original baseline: {candidate['speedup']:.2f}x")
    return "\n".join(lines)


def mean_pct(workloads: dict, key: str) -> float | None:
    values = [t[key] for t in workloads.values() if t.get(key) is not None]
    return math.fsum(values) / len(values) if values else None


def score(candidate: dict, baseline: dict) -> float | None:
    """Speedup over the baseline (geometric mean over workloads) for a verified candidate."""
    if candidate.get("status") != "verified":
        return None
    return speedup(baseline.get("workloads") or {}, candidate.get("workloads") or {})
