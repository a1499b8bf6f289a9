"""Turn a candidate's measurements into short text a model can read."""

from __future__ import annotations

import math


def describe(candidate: dict) -> str:
    workloads = candidate.get("workloads") or {}
    if not workloads:
        return "not measured"
    lines = []
    if candidate.get("timer") == "interpreter_wall":
        lines.append("(CPU Triton-interpreter wall times: they check the pipeline, not GPU performance)")
    for name, t in workloads.items():
        kind = " kernel-only (CUPTI)" if t.get("metric") == "cupti_kernel" else ""
        line = f"- {name}: median{kind} {t['median_us']:.1f} us (IQR {t['iqr_us']:.1f} us, n={t['samples']})"
        if t.get("pct_peak") is not None:
            line += f", {t['pct_peak']:.0f}% of datasheet peak"
            if t.get("pct_achievable") is not None:
                line += f", {t['pct_achievable']:.0f}% of achievable"
            line += f", {t.get('bound')}-bound"
        lines.append(line)
    if candidate.get("profile"):
        lines.append(candidate["profile"])
    vs = (candidate.get("versus") or {}).get("baseline")
    if vs:
        lines.append(f"Speedup over the original baseline: {vs['speedup']:.2f}x "
                     f"(95% interval {vs['ci_low']:.2f}-{vs['ci_high']:.2f}, {vs['rounds']} interleaved rounds)")
    return "\n".join(lines)


def mean_pct(workloads: dict, key: str) -> float | None:
    values = [t[key] for t in workloads.values() if t.get(key) is not None]
    return math.fsum(values) / len(values) if values else None
