"""setup: load and validate the task, then measure the baseline kernel. It becomes the first beam.

A task without baseline.py starts from scratch: its PyTorch reference is measured as the
baseline (kind "reference"), the first plans ask for a Triton kernel written from it, and
speedups are against the reference.

A run started without run_dir (Studio, `graph.invoke`) gets the CLI's default, runs/TASK-TIME
(tools/rundir.default_run_dir), chosen here and kept in the state; setup writes run.json into a
run directory that has none, so `accelopt resume DIR` can pick the run up (Studio's checkpoints
live in the server: `--restart` replays every cached evaluation and reply).

Before any of it, the run's settings get the checks the CLI makes (nodes/context.context_refusal),
the input must name a task_dir, and every model endpoint must answer (nodes/preflight.py): a
refusal is raised as ConfigError, one line."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from accelopt.nodes.common import task_of
from accelopt.nodes.context import RunContext, context_refusal, refuse
from accelopt.nodes.preflight import preflight_context
from accelopt.nodes.records import baseline_candidate, with_measurement
from accelopt.nodes.seeding import inductor_seed, nothing_to_start_from, seeds_from_inductor
from accelopt.nodes.services import emit, measure, warm_memory
from accelopt.nodes.state import RunState
from accelopt.tools.backends import run_refusal
from accelopt.tools.harness.reference_kernel import reference_source
from accelopt.tools.llm_spec import FatalLLMError
from accelopt.tools.rundir import new_default_run_dir, write_candidate, write_run_meta

log = logging.getLogger("accelopt")


def input_refusal(given: Mapping[str, Any]) -> str | None:
    """What is wrong with a run's input, in one line, or None: it must name a task_dir (checked on
    the input as given too, graph/doors.py: on a thread, an earlier run's must not stand in)."""
    task_dir = given.get("task_dir")
    if not isinstance(task_dir, str) or not task_dir:
        shown = "" if task_dir is None else f" ({task_dir!r} is not a path)"
        return (f'no task_dir in the run\'s input{shown}: give {{"task_dir": "PATH"}}, a task directory (task.json, '
                'reference.py, baseline.py), and optionally "run_dir"')
    run_dir = given.get("run_dir")
    if run_dir is not None and not isinstance(run_dir, str):
        return f"run_dir {run_dir!r}: the path of a run directory, or leave it out"
    return None


def setup(state: RunState, runtime: Runtime[RunContext]) -> RunState:
    # The CLI's checks, for every entry point, before any work: raised, so that a server run ends
    # as an error with this one line, never as a finished run whose stop_reason is a traceback.
    refuse(context_refusal(runtime.context))
    refuse(input_refusal(state))
    emit({"event": "step", "text": "loading the task"})
    task = task_of(state["task_dir"])
    if state.get("baseline_id"):  # resumed after setup already ran
        return {}
    try:  # a dead endpoint refused as the CLI refuses it, before the baseline is measured
        preflight_context(runtime.context)
    except FatalLLMError as e:
        refuse(str(e))
    refusal = run_refusal(task, runtime.context.device)
    if refusal:  # before any model call: no tokens are spent on a task this machine cannot run
        return {"stop_reason": refusal}
    from_scratch = task.baseline_source is None
    seeding = seeds_from_inductor(task, runtime.context)
    refusal = nothing_to_start_from(task, runtime.context)
    if refusal:
        return {"stop_reason": refusal}
    run_dir = state.get("run_dir") or str(new_default_run_dir(task.name))
    if not (Path(run_dir) / "run.json").is_file():  # the CLI wrote its own; a graph run's is written here
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        write_run_meta(Path(run_dir), str(Path(state["task_dir"]).resolve()), runtime.context.to_json(),
                       runtime.context.sources())
    baseline = baseline_candidate(reference_source(task) if task.baseline_source is None else task.baseline_source,
                                  from_scratch)
    emit({"event": "step", "text": f"measuring the {'reference' if from_scratch else 'baseline'} of {task.name}"})
    baseline = with_measurement(baseline, measure(task, baseline["source"], runtime.context, baseline=None,
                                                  parent=None, trusted=from_scratch, run_dir=run_dir,
                                                  candidate_id=baseline["id"]))
    write_candidate(run_dir, baseline)
    if baseline["status"] == "verified":
        warm_memory(runtime.context, baseline.get("timer"))
    update: RunState = {"run_dir": run_dir, "iteration": 0, "started_at": time.time(), "baseline_id": "baseline",
                        "candidates": {"baseline": baseline}, "plans": [], "history": []}
    if baseline["status"] == "reference_error":  # the task is broken, not the baseline: say only that
        return {**update, "stop_reason": baseline["error"]}
    if baseline["status"] != "verified":  # no beam: there is nothing correct to optimize from
        return {**update, "stop_reason": f"the baseline kernel fails its own check ({baseline['status']}): "
                                         f"{baseline['error']}"}
    if not seeding:
        return {**update, "beam": ["baseline"]}
    emit({"event": "step", "text": "seeding from torch.compile's kernels"})
    seed, note = inductor_seed(task, runtime.context, baseline, run_dir)
    log.info(note)
    update["notes"] = [note]
    if seed is not None:
        update["candidates"]["inductor"] = seed
    beam = (["inductor"] if seed is not None and seed["status"] == "verified" else []) + ["baseline"]
    if beam == ["baseline"] and from_scratch and runtime.context.model_spec("executor").provider == "tuner":
        return {**update, "stop_reason": f"{note}; the tuner policy cannot start from the reference alone"}
    return {**update, "beam": beam}
