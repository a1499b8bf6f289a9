"""Seeds: candidates that start the beam beside the baseline, made without a model.

`inductor`: torch.compile's own Triton kernels for the task's reference (tools/inductor_seed.py),
captured on the GPU (or read from `seed_capture`, a capture made earlier), judged like any
candidate, and kept in the beam when they verify, labelled with their origin. Where Inductor
leaves a matmul to cuBLAS, the seed is captured again with its Triton templates. A seed that cannot
be made or fails its check is reported and the run goes on from the baseline.
By default (`seed = "auto"`) every Triton task under the tuner is seeded wherever the seed can be
made (a GPU, or a capture): a task with no baseline.py (an imported FlashInfer-Bench or KernelBench
problem) has nothing else to start from, and for one with a baseline, torch.compile's kernel is
the bar the run must clear, so the search starts from it as well as from the baseline (on the
H100, 2026-11-27: the bundled softmax baseline stood at 0.957x of max-autotune's kernel; seeded,
the tuner's best reached 1.029x). An LLM run is seeded only when asked for.
"""

from __future__ import annotations

import json
from pathlib import Path

from accelopt.nodes.context import RunContext
from accelopt.nodes.records import Candidate, seed_candidate, with_measurement
from accelopt.nodes.services import measure
from accelopt.tools.harness.runner import detect_device
from accelopt.tools.inductor_capture import CaptureError, capture_in_subprocess
from accelopt.tools.inductor_seed import TEMPLATES_MODE, SeedRefused, seed_source
from accelopt.tools.rundir import write_candidate
from accelopt.tools.task import Task

CAPTURE_FILE = "inductor_capture.json"  # in the run dir, per mode: a resumed run does not compile again


def _tuner_on_triton(task: Task, ctx: RunContext) -> bool:
    return task.spec.backend == "triton" and ctx.model_spec("executor").provider == "tuner"


def _tuner_without_baseline(task: Task, ctx: RunContext) -> bool:
    return task.baseline_source is None and _tuner_on_triton(task, ctx)


def seeds_from_inductor(task: Task, ctx: RunContext) -> bool:
    """Whether setup seeds from torch.compile's kernels: asked for (`inductor`), or by default
    (`auto`) under the tuner wherever a GPU (or a capture) can give them."""
    if ctx.seed != "auto":
        return ctx.seed == "inductor"
    return _tuner_on_triton(task, ctx) and (
        ctx.seed_capture is not None or (ctx.device != "cpu" and detect_device() == "cuda"))


def nothing_to_start_from(task: Task, ctx: RunContext) -> str | None:
    """One line on why a run of this task has no kernel to start from (no baseline.py, the tuner
    writes no kernel from scratch, and no seed can be made), or None. Said before any setup."""
    if not _tuner_without_baseline(task, ctx) or seeds_from_inductor(task, ctx):
        return None
    why = ("--seed none was given" if ctx.seed == "none" else "--device cpu was given" if ctx.device == "cpu"
           else "no CUDA GPU is visible here")
    return (f"task {task.name} has no baseline.py and the tuner (no LLM) only retunes existing kernels; on a GPU "
            f"it starts from torch.compile's kernels, but {why}: run it on a GPU, give a capture made on one "
            "(--seed-capture), use an LLM (--model PROVIDER:NAME), or add a baseline.py to the task")


def inductor_seed(task: Task, ctx: RunContext, baseline: Candidate, run_dir: str) -> tuple[Candidate | None, str]:
    """The measured seed candidate (None when it could not be made) and one line saying what happened."""
    try:
        capture = _capture(task, ctx, Path(run_dir), ctx.seed_capture_mode())
        try:
            seed = seed_source(capture, task.spec.entry_point)
        except SeedRefused as exc:
            # a matmul Inductor leaves to cuBLAS: its Triton templates are the seed instead
            if not (exc.library and ctx.seed_capture_mode() != TEMPLATES_MODE and not ctx.seed_capture):
                raise
            seed = seed_source(_capture(task, ctx, Path(run_dir), TEMPLATES_MODE), task.spec.entry_point)
    except (CaptureError, SeedRefused, OSError, ValueError) as exc:
        return None, f"no Inductor seed: {exc}"
    candidate = seed_candidate(seed.source, seed.origin)
    candidate = with_measurement(candidate, measure(task, seed.source, ctx, baseline=baseline, parent=baseline,
                                                    run_dir=run_dir, candidate_id=candidate["id"]))
    write_candidate(run_dir, candidate)
    if candidate["status"] != "verified":
        return candidate, f"the Inductor seed did not verify ({candidate['status']}): {candidate.get('error')}"
    speedup = candidate.get("speedup")
    return candidate, (f"Inductor seed verified ({seed.origin})"
                       + (f", {speedup:.3f}x the baseline" if speedup else ""))


def _capture(task: Task, ctx: RunContext, run_dir: Path, mode: str) -> dict:
    kept = run_dir / CAPTURE_FILE.replace(".json", f".{mode}.json")
    if ctx.seed_capture:
        return json.loads(Path(ctx.seed_capture).read_text())
    if kept.is_file():
        return json.loads(kept.read_text())
    capture = capture_in_subprocess(task.root, mode)
    run_dir.mkdir(parents=True, exist_ok=True)
    kept.write_text(json.dumps(capture))
    return capture
