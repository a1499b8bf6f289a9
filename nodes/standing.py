"""standing: at the run's end, the best confirmed (evaluated once more against the baseline on
fresh inputs, pooled with every earlier evaluation of its program: tools/best_figure.py), and
where it stands against torch.compile and eager PyTorch, timed interleaved in the same rounds on
the run's GPU. summary.json gains the pooled figure, and `versus_torch_compile` (the speedup, its
interval and verdict, or why it was not measured) beside the roofline figures the record node
already writes; torch_compile.json keeps the full record for the report. Its own node, so that
every way of running the graph (CLI, `graph.invoke`, Studio) ends with the same summary.

`confirm_run` confirms an ended run's best again on demand: what `accelopt show RUN_DIR --confirm`
and the confirm graph (graph/confirm_graph.py: `graph.invoke`, Studio, MCP) both call."""

from __future__ import annotations

import json
from pathlib import Path

from langgraph.runtime import Runtime

from accelopt.nodes.common import task_of
from accelopt.nodes.context import RunContext, refuse
from accelopt.nodes.records import Candidate, NotMeasured, TorchCompileStanding, source_of, summary_record
from accelopt.nodes.services import confirm, measure_against_torch
from accelopt.nodes.state import RunState
from accelopt.tools import inflight
from accelopt.tools.best_figure import Confirmation, pinned_source
from accelopt.tools.harness.confine import ConfinementError
from accelopt.tools.harness.result import short_reason
from accelopt.tools.run_record import RunSummary, load_summary, write_summary
from accelopt.tools.rundir import (
    RunDirError,
    changed_task_files,
    is_run_dir,
    read_candidates,
    read_run_meta,
    run_dir_held,
)
from accelopt.tools.task import Task, TaskError, load_task


def standing(state: RunState, runtime: Runtime[RunContext]) -> RunState:
    inflight.forget(state.get("run_dir"))  # the run ends: no later iteration collects a call in flight
    best = state["candidates"][state["beam"][0]]
    summary = confirmed(state, best, runtime.context, RunSummary.model_validate(state["summary"]))
    summary = summary.with_standing(versus_torch_compile(state, best, runtime.context))
    write_summary(state.get("run_dir"), summary, None)
    return {"summary": summary_record(summary)}


def confirmed(state: RunState, best: Candidate, ctx: RunContext, summary: RunSummary) -> RunSummary:
    """The summary with the best confirmed: evaluated once more against the baseline on fresh
    inputs (services.confirm), pooled with every earlier evaluation of its program. Where it is
    not, the summary says why."""
    candidates, baseline_id = state["candidates"], state["baseline_id"]
    if best["id"] == baseline_id:
        return summary.model_copy(update={"not_confirmed": "the best is the baseline itself"})
    if best.get("timer") == "interpreter_wall":
        return summary.model_copy(update={"not_confirmed": (
            "timed on the CPU interpreter, whose wall clock is not performance: `accelopt show RUN_DIR --confirm` "
            "confirms the best where a GPU is")})
    if best.get("timer") != "cuda_event":
        return summary.model_copy(update={"not_confirmed": f"timed by {best.get('timer')}: the run's end confirms "
                                                           "GPU timings only"})
    if not ctx.confirm_best:
        return summary.model_copy(update={"not_confirmed": (
            "turned off (confirm_best = false): `accelopt show RUN_DIR --confirm` confirms it later")})
    source, baseline = pinned_source(best), candidates[baseline_id].get("source")
    if source is None or baseline is None:
        return summary.model_copy(update={"not_confirmed": "the best or the baseline has no source to evaluate"})
    try:
        got = confirm(task_of(state["task_dir"]), source, baseline, ctx, state.get("run_dir"),
                      nth=len(summary.confirmations))
    except Exception as exc:  # noqa: BLE001 - the search's results are recorded; this figure must not undo them
        return summary.model_copy(update={"not_confirmed": f"the confirmation could not run: {type(exc).__name__}: "
                                                           f"{short_reason(str(exc), width=300)}"})
    return summary.with_confirmations(candidates, [*summary.confirmations, got])


def versus_torch_compile(state: RunState, best: Candidate, ctx: RunContext) -> TorchCompileStanding | NotMeasured:
    """{"speedup", "ci_low", "ci_high", "rounds", "verdict", "eager"} (speedups > 1: the best is
    faster), or {"not_measured": why}."""
    if best.get("timer") != "cuda_event":
        return {"not_measured": "the best kernel was not timed on a GPU (Triton interpreter or another backend): "
                                "there is no GPU time to compare with torch.compile"}
    if not ctx.versus_torch_compile:
        return {"not_measured": "turned off (versus_torch_compile = false)"}
    run_dir = state.get("run_dir")
    try:
        record = measure_against_torch(task_of(state["task_dir"]), source_of(best), ctx, run_dir)
    except Exception as exc:  # noqa: BLE001 - the search's results are recorded; this figure must not undo them
        return {"not_measured": f"the timing with torch.compile could not run: {type(exc).__name__}: {exc}"}
    if run_dir:
        (Path(run_dir) / "torch_compile.json").write_text(json.dumps(record, indent=2))
    versus = (record.get("versus") or {}).get("torch_compile")
    if not versus:
        why = short_reason(record.get("error"), width=300) or "no result"  # the exception, not the traceback's top
        return {"not_measured": f"the timing with torch.compile failed ({record.get('status')}): {why}"}
    verdict = "faster" if versus["faster"] else "slower" if versus["slower"] else "within noise"
    eager = (record.get("versus") or {}).get("eager") or {}
    return {"speedup": versus["speedup"], "ci_low": versus["ci_low"], "ci_high": versus["ci_high"],
            "rounds": versus["rounds"], "verdict": verdict, "eager": eager.get("speedup"),
            "device_name": record.get("device_name"), "mode": ctx.torch_compile_mode}


def confirm_run(run_dir: Path, ctx: RunContext) -> tuple[RunSummary, Confirmation]:
    """An ended run's best confirmed once more against its baseline on ctx's device (services.
    confirm: a fresh seed, `check`'s rules), summary.json's figure pooled anew with it: the
    summary written and the new confirmation. Refused in one line (ConfigError) where there is no
    run, no best but the baseline, a task that no longer loads or has changed since the run, or a
    process that holds the run (its run, or another confirmation)."""
    if not is_run_dir(run_dir):
        refuse(f"{run_dir}: not an accelopt run directory (no run.json)")
    try:
        with run_dir_held(run_dir, "confirm its best"):
            summary, candidates = load_summary(run_dir), read_candidates(run_dir)
            if summary is None or summary.best_id not in candidates or "baseline" not in candidates:
                refuse(f"{run_dir}: no summary.json or candidates to confirm the best from")
            assert summary is not None  # refuse raised otherwise
            if summary.best_id == "baseline":
                refuse(f"{run_dir}: its best is the baseline itself: nothing to confirm against it")
            task = _unchanged_task(run_dir, summary.task_dir)
            try:
                got = confirm(task, pinned_source(candidates[summary.best_id]) or "",
                              candidates["baseline"]["source"], ctx, str(run_dir), nth=len(summary.confirmations))
            except ConfinementError as e:  # no judge can start here (no bubblewrap): said as the CLI says it
                refuse(" ".join(str(e).split()))
                raise  # unreachable: refuse raised
            summary = summary.with_confirmations(candidates, [*summary.confirmations, got])
            write_summary(str(run_dir), summary, None)
            return summary, got
    except RunDirError as e:
        refuse(str(e))
        raise  # unreachable: refuse raised


def _unchanged_task(run_dir: Path, task_dir: str) -> Task:
    """The run's task, loaded, or a refusal: it no longer loads, or its files differ from those the
    run measured against (run.json's fingerprint), so a new figure would not pool with the old."""
    try:
        task = load_task(Path(task_dir))
    except TaskError as e:
        refuse(f"{run_dir}: its task cannot be loaded to confirm the best: {' '.join(str(e).split())}")
        raise  # unreachable: refuse raised
    recorded = (read_run_meta(run_dir).get("task") or {}) if (Path(run_dir) / "run.json").is_file() else {}
    changed = changed_task_files(recorded, task_dir) if recorded else []
    if changed:
        refuse(f"{run_dir}: its task's {', '.join(changed)} changed since the run measured its candidates; a "
               "confirmation against them would not pool with the run's figures")
    return task
