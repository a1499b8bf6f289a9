"""The run directory: every candidate as it is evaluated, the best kernel, and summary.json.

Files are written as soon as there is something to write, so a run killed at any moment
leaves every evaluated candidate on disk.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from accelopt.tools.llm import totals

RUN_FORMAT = 1  # run.json "format": bump when a run directory can no longer be resumed by older code


class RunDirError(ValueError):
    """A run directory that cannot be resumed as it is; the message says what to do."""


def write_run_meta(run_dir: Path, task_dir: str, context: dict) -> None:
    _atomic_write(Path(run_dir) / "run.json", json.dumps(
        {"format": RUN_FORMAT, "task_dir": str(task_dir), "context": context}, indent=2))


def read_run_meta(run_dir: Path) -> dict:
    path = Path(run_dir) / "run.json"
    if not path.is_file():
        raise RunDirError(f"{run_dir} is not an accelopt run directory (no run.json)")
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RunDirError(f"{path} is unreadable ({e}); the evaluated kernels are still in {run_dir}/candidates; "
                          "start a new run with `accelopt optimize TASK`") from None
    if meta.get("format", 1) != RUN_FORMAT:
        raise RunDirError(f"{run_dir} was written by an incompatible accelopt (run format {meta.get('format')}, this "
                          f"version reads {RUN_FORMAT}): its candidates/ and best_kernel.py can still be read; start a "
                          "new run with `accelopt optimize TASK`")
    return meta


def check_checkpoint(run_dir: Path) -> None:
    """Fail with advice if checkpoints.sqlite is missing or not a readable LangGraph checkpoint."""
    import sqlite3
    from contextlib import closing

    path = Path(run_dir) / "checkpoints.sqlite"
    advice = (f"resume from scratch with `accelopt resume {run_dir} --restart`: the search starts over, and every "
              "kernel and model reply recorded in the run's cache is replayed, not measured or paid for again")
    if not path.is_file():
        raise RunDirError(f"{run_dir} has no checkpoints.sqlite; {advice}")
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            if conn.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                raise sqlite3.DatabaseError("integrity check failed")
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "checkpoints" not in tables or conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0] == 0:
                raise sqlite3.DatabaseError("it holds no checkpoint")
    except sqlite3.DatabaseError as e:
        raise RunDirError(f"{path} is corrupt or empty ({e}); {advice}") from None


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
    """summary.json: written by the record node at the end of every iteration."""
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
        "best_autotune_gain": ((best.get("speedup") or 0) / origin["speedup"]
                               if origin and origin.get("speedup") else 1.0),
    }
