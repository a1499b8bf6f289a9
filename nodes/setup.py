"""setup: load and validate the task, then measure the baseline kernel. It becomes the first beam.

A task without baseline.py starts from scratch: its PyTorch reference is measured as the
baseline (kind "reference"), the first plans ask for a Triton kernel written from it, and
speedups are against the reference."""

from __future__ import annotations

import time

from langgraph.runtime import Runtime

from accelopt.nodes.context import RunContext
from accelopt.nodes.records import baseline_candidate, with_measurement
from accelopt.nodes.state import RunState
from accelopt.nodes.common import task_of
from accelopt.nodes.services import measure
from accelopt.tools.backends import run_refusal
from accelopt.tools.harness.reference_kernel import reference_source
from accelopt.tools.rundir import write_candidate


def setup(state: RunState, runtime: Runtime[RunContext]) -> dict:
    task = task_of(state["task_dir"])
    if state.get("baseline_id"):  # resumed after setup already ran
        return {}
    refusal = run_refusal(task, runtime.context.device)
    if refusal:  # before any model call: no tokens are spent on a task this machine cannot run
        return {"stop_reason": refusal}
    from_scratch = task.baseline_source is None
    if from_scratch and runtime.context.model_spec("executor").provider == "tuner":
        return {"stop_reason": f"task {task.name} has no baseline.py, so the first kernel must be written from the "
                               "reference, and the tuner policy only retunes existing kernels: configure an LLM "
                               "(--model) or add a baseline.py"}
    baseline = baseline_candidate(reference_source(task) if from_scratch else task.baseline_source, from_scratch)
    baseline = with_measurement(baseline, measure(task, baseline["source"], runtime.context, baseline=None,
                                                  parent=None, trusted=from_scratch, run_dir=state.get("run_dir")))
    write_candidate(state.get("run_dir"), baseline)
    update = {"iteration": 0, "started_at": time.time(), "baseline_id": "baseline",
              "candidates": {"baseline": baseline}, "plans": [], "history": []}
    if baseline["status"] != "verified":  # no beam: there is nothing correct to optimize from
        return {**update, "stop_reason": f"the baseline kernel fails its own check ({baseline['status']}): "
                                         f"{baseline['error']}"}
    return {**update, "beam": ["baseline"]}
