"""The run directory: every candidate as it is evaluated, the best kernel, and summary.json.

Files are written as soon as there is something to write, so a run killed at any moment
leaves every evaluated candidate on disk.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from tools.llm import totals


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_candidate(run_dir: str | None, candidate: dict) -> None:
    if not run_dir:
        return
    folder = Path(run_dir) / "candidates" / candidate["id"]
    if candidate.get("source"):
        _atomic_write(folder / "kernel.py", candidate["source"])
    record = {k: v for k, v in candidate.items() if k != "source"}
    _atomic_write(folder / "result.json", json.dumps(record, indent=2))


def write_summary(run_dir: str | None, summary: dict, best_source: str | None) -> None:
    if not run_dir:
        return
    _atomic_write(Path(run_dir) / "summary.json", json.dumps(summary, indent=2))
    if best_source:
        _atomic_write(Path(run_dir) / "best_kernel.py", best_source)


def append_insights(run_dir: str | None, insights: list) -> None:
    """insights.jsonl: every lesson this run wrote, in `accelopt memory import` format, so that a
    run made with --no-memory can still teach a memory later."""
    if not run_dir or not insights:
        return
    path = Path(run_dir) / "insights.jsonl"
    with path.open("a") as f:
        for insight in insights:
            f.write(insight.model_dump_json() + "\n")


def run_summary(state: dict) -> dict:
    """summary.json: written by the summarizer at the end of every iteration."""
    candidates, beam = state["candidates"], state["beam"]
    best = candidates[beam[0]]
    spent = totals(state.get("usage", []))
    statuses: dict[str, int] = {}
    for c in candidates.values():
        statuses[c["status"]] = statuses.get(c["status"], 0) + 1
    return {
        "task_dir": state["task_dir"], "iteration": state["iteration"], "stop_reason": state.get("stop_reason"),
        "best_id": best["id"], "best_speedup": best.get("speedup"),
        # "kernel": speedups are against the task's baseline.py; "reference": a from-scratch run,
        # against the eager PyTorch reference
        "baseline_kind": candidates[state["baseline_id"]].get("kind", "kernel"),
        "best_speedup_vs_parent": best.get("speedup_vs_parent"), "best_parent_id": best.get("parent_id"),
        "timer": best.get("timer"),
        "device_name": best.get("device_name"), "best_pct_peak": best.get("pct_peak"),
        "best_pct_achievable": best.get("pct_achievable"), "beam": beam,
        "candidates_evaluated": len(candidates) - 1, "statuses": statuses, "usage": spent,
        "iterations": state.get("history", []), "insights": len(state.get("insights", [])),
        "autotune": autotune_summary(candidates, best),
        "note": ("timer interpreter_wall: CPU Triton-interpreter times, not GPU performance"
                 if best.get("timer") == "interpreter_wall" else None),
    }


def autotune_summary(candidates: dict[str, dict], best: dict) -> dict | None:
    """What --autotune added, apart from the rewrites: per tuned rewrite, the best variant's
    speedup over the rewrite (both against the baseline); and the best kernel's split."""
    tuned = [c for c in candidates.values() if c.get("autotune")]
    if not tuned:
        return None
    gains = [c["autotune"]["gain"] for c in tuned if c["autotune"].get("gain")]
    origin = candidates.get(best.get("autotune_of") or "")
    return {
        "rewrites_tuned": len(tuned), "variants": sum(c["autotune"]["tried"] for c in tuned),
        "gain_geomean": math.exp(sum(math.log(g) for g in gains) / len(gains)) if gains else None,
        "best_is_autotuned": origin is not None,
        # best speedup = rewrite speedup x autotune gain
        "best_rewrite_speedup": origin.get("speedup") if origin else best.get("speedup"),
        "best_autotune_gain": (best.get("speedup") or 0) / origin["speedup"] if origin and origin.get("speedup") else 1.0,
    }
