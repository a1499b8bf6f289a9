"""Measurements as text a model reads: a candidate's timings, its static findings, the kernels
measured so far in the run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accelopt.policies.interface import MeasuredKernel
from accelopt.tools.harness.result import interval_label
from accelopt.tools.tunables import format_config


def describe(candidate: Mapping[str, Any]) -> str:
    workloads = candidate.get("workloads") or {}
    if not workloads:
        return "not measured"
    lines = []
    if candidate.get("timer") == "interpreter_wall":
        lines.append("(CPU Triton-interpreter wall times: they check the pipeline, not GPU performance)")
    for name, t in workloads.items():
        kind = " GPU span per call" if t.get("metric") == "gpu_span" else ""
        line = f"- {name}: median{kind} {t['median_us']:.1f} us (IQR {t['iqr_us']:.1f} us, n={t['samples']})"
        if t.get("kernel_us") is not None and t["kernel_us"] < 0.8 * t["median_us"]:
            line += f"; kernels busy only {t['kernel_us']:.1f} us of it (gaps: host work or syncs inside the call)"
        if t.get("pct_peak") is not None:
            line += f", {t['pct_peak']:.0f}% of datasheet peak"
            if t.get("pct_achievable") is not None:
                line += f", {t['pct_achievable']:.0f}% of achievable"
            if t.get("pct_of_copy") is not None:  # launch and ramp-up included: the target at this size
                line += f", {t['pct_of_copy']:.0f}% of a same-size copy's speed"
            line += f", {t.get('bound')}-bound"
        lines.append(line)
    if candidate.get("profile"):
        lines.append(candidate["profile"])
    lines += describe_autotune(candidate)
    advice = describe_findings(candidate.get("findings") or [], at_least="warning")
    if advice:
        lines.append(advice)
    vs = (candidate.get("versus") or {}).get("baseline")
    if vs:
        lines.append(f"Speedup over the original baseline: {vs['speedup']:.2f}x "
                     f"({interval_label(vs['rounds'])}: {vs['ci_low']:.2f}-{vs['ci_high']:.2f}, interleaved)")
    return "\n".join(lines)


def describe_autotune(candidate: Mapping[str, Any]) -> list[str]:
    """Which configuration of its @triton.autotune list each workload ran (the harness's choice: it
    times them itself) and what a tuning key that several workloads share costs: advice on `key`."""
    chosen = (candidate.get("autotune_choice") or {}).get("candidate") or {}
    lines = []
    for k in chosen.get("kernels") or []:
        configs, ran = k.get("configs") or [], k.get("ran") or {}
        if not k.get("controlled", True):
            lines.append(f"Autotuning: {k['kernel']} chose for itself ({k.get('why')}); the harness could not pin it")
        elif ran:
            runs = "; ".join(f"{w}: {configs[i] if i < len(configs) else i}" for w, i in ran.items())
            lines.append(f"Autotuning: the harness timed {k['kernel']}'s {len(configs)} configurations and ran, per "
                         f"workload, {runs}")
    lines += [f"Autotuning advice: {note}" for note in chosen.get("notes") or []]
    return lines


def describe_findings(findings: list[dict], at_least: str = "info") -> str:
    """Static findings as advice lines (they never reject: the harness decides on evidence)."""
    rank = {"info": 0, "warning": 1, "serious": 2}
    kept = [f for f in findings if rank[f["severity"]] >= rank[at_least]]
    if not kept:
        return ""
    return "Static findings (advice; runtime evidence decides):\n" + "\n".join(
        f"- {f['severity']}{' line ' + str(f['line']) if f.get('line') else ''}: {f['message']}" for f in kept[:8])



def tried_text(kernels: list[MeasuredKernel]) -> str:
    """One line per measured kernel, for a prompt."""
    lines = []
    for k in kernels:
        outcome = k["status"]
        if k["speedup_vs_parent"] is not None and k["parent_id"]:
            outcome += f", {k['speedup_vs_parent']:.2f}x vs {k['parent_id']}"
        if k["speedup"] is not None:
            outcome += f", {k['speedup']:.2f}x vs baseline"
        what = f" ({k['title']})" if k["title"] else ""
        lines.append(f"- {k['id']}{what}: {outcome}"
                     + (f" [config: {format_config(k['config'])}]" if k["config"] else ""))
    return "\n".join(lines) or "(none yet)"
