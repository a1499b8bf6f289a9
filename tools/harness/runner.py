"""The profiler node's instrument: evaluate one kernel source against a task.

A syntax error is the only static verdict; the other static findings travel with the result as
advice. A judge of the pool (pool.py, judge.py) decides on runtime evidence: the candidate runs
in a sandbox process of its own, timed interleaved with its comparators (parent, baseline) in
theirs. Results that look too good are re-verified on fresh inputs: above an exact roofline is
impossible and marks the candidate cheat_suspected; more than 10x over the baseline is
re-checked and flagged, and a flagged kernel needs an audit (audit.py) before it may lead.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from accelopt.tools import settings
from accelopt.tools.harness import audit as audit_mod
from accelopt.tools.harness import seeds as seeds_mod
from accelopt.tools.harness import verdict as verdicts
from accelopt.tools.harness.autotune_choices import (
    autotune_evidence,
    chosen_before,
    compiled_before,
    keep_compiled,
    pinning,
    pinning_evidence,
    remember_choices,
)
from accelopt.tools.harness.device_lease import DeviceLeaseError
from accelopt.tools.harness.kernel_profile import ProfileRun, Profiling, profile_workloads, summarize
from accelopt.tools.harness.kernel_source import KernelSource
from accelopt.tools.harness.pool import SOURCE_PREFIX, get_pool
from accelopt.tools.harness.reference_kernel import OWN_COMPARATORS
from accelopt.tools.harness.result import AutotuneRecord, EvalResult, RoundsRun, WorkloadTiming, compare_rounds
from accelopt.tools.harness.static_checks import findings
from accelopt.tools.harness.stats import NOISE_FLOOR
from accelopt.tools.roofline import lookup_peak, percent_of_peak
from accelopt.tools.task import Task, TaskError, load_task

if TYPE_CHECKING:
    from accelopt.tools.harness.compile_ahead import AheadPass, AheadResult

SUSPICIOUS_SPEEDUP = 10.0
# The judge's clock around back-to-back calls (no L2 flush, so warm) bounds the reported span:
# a span this far below it is host work the cover hid (sandbox.COVER_CYCLES), or a false report.
OUTSIDE_RATIO, OUTSIDE_SLACK_US = 3.0, 30.0
HOST_COST_RATIO = 2.0  # host time a call beyond a comparator's that is still launch cost, not hidden work
# A time below this share of the copy floor (the workload's outputs written at the bandwidth the
# copy yardstick measured) is past physics. A kernel that only writes, with no reads to wait on,
# came to 0.82-0.91x of that floor in one probe on an H100 (a fill against a same-bytes copy, 8 KB
# to 1 GB, CUDA events after a cover, L2 flushed; a development probe, not yet a benchmark of
# BENCHMARKS.md): half leaves that, another GPU's mix and the timers' steps room. A kernel that
# skipped its writes, or times that were forged, land far below.
FLOOR_SHARE = 0.5


def detect_device() -> str:
    """'cuda' when a GPU is visible, else 'cpu' (Triton interpreter). ACCELOPT_DEVICE overrides."""
    forced = settings.device()
    if forced:
        return forced
    return "cuda" if gpu_count() > 0 else "cpu"


def start_first_judge(device: str | None = None) -> None:
    """Start the judge a process's first evaluation on `device` (None: detect_device's) will lease,
    now: its start (on the interpreter 2-3 s of a core: Python, torch, Triton, the sandbox template)
    then overlaps what comes before that evaluation (the graph's imports, the task, endpoint checks,
    the memory's embedder). Nothing is raised here: a pool that cannot be made says why at that
    evaluation."""
    try:
        get_pool(device or detect_device(), gpu_count()).warm(judges=1)
    except Exception:  # noqa: BLE001 - the evaluation makes the pool again and reports what is wrong
        pass


@lru_cache(maxsize=1)
def gpu_count() -> int:
    """NVIDIA GPUs this process may use: the driver's list, narrowed by CUDA_VISIBLE_DEVICES, and
    none where the installed torch has no CUDA. Read without importing torch (3.7 s on an H100
    host), which only the judges and sandboxes need."""
    import glob
    import importlib.util

    gpus = len(glob.glob("/proc/driver/nvidia/gpus/*")) or len(glob.glob("/dev/nvidia[0-9]*"))
    visible = settings.cuda_visible_devices()
    if visible is not None:
        gpus = min(gpus, len([d for d in visible.split(",") if d.strip() and not d.strip().startswith("-")]))
    spec = importlib.util.find_spec("torch") if gpus else None
    if spec is None or not spec.submodule_search_locations:
        return 0
    torch_lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    return gpus if any(torch_lib.glob("libtorch_cuda*.so")) else 0


AHEAD_TIMEOUT_S = 120.0  # a compile-ahead pass at most: past it the sandbox compiles what is left


def evaluate(task: Task | str, source: str, *, device: str | None = None, timeout_s: float = 300.0,
             compare: dict[str, str] | None = None, seeds: int | None = None, rounds: int | None = None,
             rep_ms: float = 20.0, interpreter_reps: int = 3, pool=None, trusted: bool = False,
             audit_winners: bool = True, profile: bool = False, seed: int | None = None) -> EvalResult:
    """Check and time `source`; `compare` maps names (parent, baseline) to verified sources that
    are timed interleaved with it, so speedups against them are decided on the same machine state.

    On a GPU the primary time is the call's real span from the CUPTI trace (from the moment the
    GPU could start the call to its last GPU activity); kernel-only time, CUDA events and the
    judge's outside clock are reported beside it. `rounds` fixes the number of timing rounds;
    by default a GPU runs 3, then more until every comparison is decided (at most 15), and the
    interpreter 2 (result.rounds says how many ran and why they stopped). `trusted` skips the
    static findings, ghost replay and trace checks, and profiles none of its calls: only for the
    task's own reference (reference_kernel.py), which is torch code by design. `profile`: a winner's
    profile for the planner (result.profile): the counters its audit read, taken on the judge's GPU
    while the judge is held (without ncu, torch.profiler's kernel list). A kernel that beats
    nothing gets none: profiling every verified kernel held the GPU 5-10 s more per evaluation
    (H100, FlashInfer-Bench rmsnorm and GEMM), and the planner plans from beam members, which are
    winners but for the rare member that fills the beam without beating its parent. `seed`: the
    evaluation's seed (seeds.py), drawn fresh here unless given (a replay: `check --replay SEED`)."""
    task = load_task(task) if isinstance(task, str) else task
    device = device or detect_device()
    started = time.monotonic()
    prepared = _prepared(task, source, device, trusted)
    if isinstance(prepared, EvalResult):
        return prepared
    kernel, advice = prepared
    dtype = task.spec.dtype_for(device)
    pool = pool or get_pool(device, gpu_count())
    auditing = device == "cuda" and audit_winners and not trusted
    profiling = device == "cuda" and profile and not trusted
    waited = time.monotonic()
    held = contextlib.ExitStack()
    compiling = held.enter_context(_compiling_ahead(task, source, device, trusted, pool, timeout_s))
    if compiling is not None:  # queue for the judge once compiled, or at once when a judge is free
        compiling.wait(until=pool.has_free_judge)
    try:
        judge = held.enter_context(pool.lease())
    except DeviceLeaseError as exc:  # another process held the GPU past its wait: not the kernel's doing
        held.close()
        return EvalResult(status="infra_error", error=str(exc), device=device, eval_s=time.monotonic() - started)
    with held, tempfile.TemporaryDirectory(prefix=f"{SOURCE_PREFIX}p{os.getpid()}-") as tmp:
        lease_wait = round(time.monotonic() - waited, 3)  # another evaluation held the judge (and its GPU)
        sources = {"candidate": source, **(compare or {})}
        paths = {name: _written(tmp, name, text) for name, text in sources.items()}
        request = build_request(task, device, paths.pop("candidate"), paths, seeds=seeds, rounds=rounds,
                                rep_ms=rep_ms, interpreter_reps=interpreter_reps,
                                trusted=trusted, seed=seed)
        compiled = _seeded(request, task, device, kernel, sources, tmp, compiling)
        # the audit's process starts now, beside the judge, on the judge's GPU; it waits, running
        # nothing of the candidate, until a winner needs it (audit.start)
        ahead = audit_mod.start(task, source, judge.gpu) if auditing else None
        try:
            result = _judged(task, judge, request, device, dtype, timeout_s, advice, lease_wait, compiled)
            pinned = _pinned_and_rechecked(task, device, kernel, sources, result, judge, request, tmp, timeout_s)
            seen: ProfileRun | None = None
            if result.ok and auditing:
                seen = _audited(task, pinned, result, request, ahead)
                ahead = None if seen is not None else ahead  # the audit used it
            elif result.ok and result.flags:
                result.flags.append("unaudited")  # not audited: the interpreter, or auditing turned off
            if result.ok and profiling and _wins(result):
                _profiled(task, pinned, result, request, judge, seen)
        finally:
            if ahead is not None:
                ahead.cancel()
        if device == "cuda" and result.status not in ("infra_error", "timeout"):
            keep_compiled(task, kernel.text, request.get("keep_cache"))
    _notes(task, kernel, result)
    result.eval_s = time.monotonic() - started
    return result


def _prepared(task: Task, source: str, device: str, trusted: bool) -> tuple[KernelSource, list] | EvalResult:
    """Before any judge: a task with no workloads for this device, or a source that does not parse,
    is a verdict already; else the source parsed once (the static checks, the audit and the autotune
    choice read it) and its static advice (none for the task's own, trusted, reference)."""
    try:
        task.spec.workloads_for(device)
    except TaskError as e:  # a GPU-only task on the interpreter: nothing a kernel could change
        return EvalResult(status="reference_error", error=str(e), device=device)
    kernel = KernelSource.parse(source)
    if kernel.syntax_error:
        return EvalResult(status="compile_error", error=kernel.syntax_error, device=device)
    return kernel, [] if trusted else findings(kernel, task.spec.entry_point)


def _seeded(request: dict, task: Task, device: str, kernel: KernelSource, sources: dict[str, str], tmp: str,
            compiling: AheadPass | None) -> AheadResult | None:
    """What the request's sandboxes start from: the autotune choices made for these sources before,
    and on a GPU a Triton cache: the candidate's kernels compiled while it waited (returned), or
    those this process compiled for the same source before; and where its own compile is kept, for
    its re-check and audit (compiled once)."""
    request["autotune_pins"] = chosen_before(task, device, sources)
    if device == "cuda":  # what its sandbox compiles, for its own re-check and audit: compiled once
        request["keep_cache"] = str(Path(tmp) / "triton-cache")
    compiled = compiling.take() if compiling is not None else None
    if compiled is not None:  # its kernels compiled while it waited: its sandbox starts from them
        request["triton_cache"] = compiled.cache_dir
    elif device == "cuda" and (kept := compiled_before(task, kernel.text)) is not None:
        request["triton_cache"] = kept  # this process judged the same source before (a served check again)
    return compiled


def _judged(task: Task, judge, request: dict, device: str, dtype: str, timeout_s: float, advice: list,
            lease_wait: float, compiled: AheadResult | None) -> EvalResult:
    """The judge's verdict on the request, with the static advice, the judge's GPU, and where the
    seconds went beyond the judge's own steps: waiting for the lease (another evaluation on its
    GPU), for the judge (its start), and the compile-ahead (off the GPU, inside lease_wait)."""
    asked = time.monotonic()
    raw = judge.request(request, timeout_s)
    result = _result(task, raw, device, dtype)
    result.findings = advice
    result.gpu = judge.gpu if device == "cuda" else None
    result.phases_s["judge_wait"] = round(max(0.0, time.monotonic() - asked - sum(result.phases_s.values())), 3)
    result.phases_s["lease_wait"] = lease_wait
    if compiled is not None:
        result.phases_s["compile_ahead"] = compiled.seconds
    return result


def _pinned_and_rechecked(task: Task, device: str, kernel: KernelSource, sources: dict[str, str],
                          result: EvalResult, judge, request: dict, tmp: str, timeout_s: float) -> KernelSource:
    """The judge's autotune choice written in: what a fresh process that is not a sandbox runs, and
    what the re-check runs, so that the program written is the program re-checked. A verified
    result's choices are remembered, and it is re-checked on fresh inputs where too good
    (_reverify_if_too_good), or where it wins with a pinned source (_check_pinned). Returns the
    pinned source (the audit and the profile run it)."""
    pinning_ = pinning(kernel, result.autotune.get("candidate"))
    pinned = pinning_.kernel
    if result.ok:
        remember_choices(task, device, sources, result)
        began = time.monotonic()
        pinned_path = _written(tmp, "pinned", pinned.text) if pinning_.pinned else request["source_path"]
        rechecked = _reverify_if_too_good(task, result, judge, {**request, "source_path": pinned_path},
                                          timeout_s)
        if result.ok and pinning_.pinned and not rechecked and _wins(result):
            _check_pinned(result, judge, {**request, "source_path": pinned_path}, timeout_s)
        result.phases_s["reverify"] = round(time.monotonic() - began, 3)
    return pinned


def _audited(task: Task, pinned: KernelSource, result: EvalResult, request: dict,
             ahead: Profiling | None) -> ProfileRun | None:
    """A verified result's audit (_audit_winner) in the process started ahead, timed as its phase;
    what ncu saw, or None where no audit ran (the process started ahead is then still to cancel)."""
    began = time.monotonic()
    seen = _audit_winner(task, pinned, result, request.get("keep_cache"), ahead)
    result.phases_s["audit"] = round(time.monotonic() - began, 3)
    return seen


def _profiled(task: Task, pinned: KernelSource, result: EvalResult, request: dict, judge,
              seen: ProfileRun | None) -> None:
    """A winner's profile for the planner: what its audit saw, else a profiling run of its own on the
    judge's GPU, timed as its phase."""
    began = time.monotonic()
    seen = seen or profile_workloads(task, pinned.text, None, timeout_s=audit_mod.TIMEOUT_S,
                                     triton_cache=request.get("keep_cache"), gpu=judge.gpu)
    result.profile = planner_profile(seen)
    result.phases_s["profile"] = round(time.monotonic() - began, 3)


def _notes(task: Task, kernel: KernelSource, result: EvalResult) -> None:
    """What the result says beside its verdict: the interpreter's dtype and autotune notes on a
    failure; on success, which configuration each autotuned kernel ran, and what a shared tuning
    key costs."""
    interpreter_dtype_note(task, result)
    interpreter_autotune_note(result)
    if result.ok:
        result.evidence += autotune_evidence(result)
        result.evidence += pinning_evidence(kernel, result.autotune.get("candidate"))


@contextlib.contextmanager
def _compiling_ahead(task: Task, source: str, device: str, trusted: bool, pool, timeout_s: float):
    """A compile-ahead of the candidate's kernels (compile_ahead.AheadPass) while it waits for its
    judge: on a GPU, where every judge of the pool is busy (a free one would take it at once, and
    the pass would only cost CPU), unless turned off (ACCELOPT_COMPILE_AHEAD=0). Yields the pass
    or None; its folder is removed on exit."""
    from accelopt.tools.harness import compile_ahead

    target = None
    free = getattr(pool, "has_free_judge", None)  # a pool that cannot tell (a stand-in) gets no pass
    if device == "cuda" and not trusted and free is not None and settings.compile_ahead() and not free():
        target = compile_ahead.gpu_target()
    if target is None:
        yield None
        return
    ahead = compile_ahead.AheadPass(task, source, target, min(timeout_s, AHEAD_TIMEOUT_S))
    try:
        yield ahead
    finally:
        ahead.close()


def interpreter_dtype_note(task: Task, result: EvalResult) -> None:
    """A 16-bit task on the interpreter runs on float32 inputs (the interpreter has no bf16
    arithmetic): a failure there says so, since a kernel that insists on its task's dtype fails
    here and may pass on a GPU."""
    if result.ok or result.device != "cpu" or result.error is None:
        return
    given = task.spec.dtype_for("cpu")
    if given != task.spec.dtype:
        result.error += (f"\nnote: on the CPU interpreter this {task.spec.dtype} task's inputs are {given} (the "
                         f"interpreter has no {task.spec.dtype} arithmetic); a kernel that requires {task.spec.dtype} "
                         "inputs fails here and may pass on a GPU")


def interpreter_autotune_note(result: EvalResult) -> None:
    """Triton's autotuner times configurations through a GPU driver: on the CPU interpreter one the
    judge leaves to choose for itself fails with Triton's "0 active drivers". Said in words."""
    if result.ok or result.device != "cpu" or "active drivers" not in (result.error or ""):
        return
    result.error = (result.error or "") + (
        "\nnote: an @triton.autotune kernel chose its own configuration here, which Triton's autotuner does by "
        "timing them on a GPU: the judge chooses instead, except for an autotuner with prune_configs_by, a pre_hook "
        "or post_hook, or a tuning key whose values are not plain numbers or strings; pin one configuration, or drop "
        "that, to check it on the CPU interpreter")


def build_request(task: Task, device: str, source_path: str, compare_paths: dict[str, str], *,
                  seeds: int | None = None, rounds: int | None = None, rep_ms: float = 20.0,
                  interpreter_reps: int = 3, trusted: bool = False, seed: int | None = None) -> dict:
    """One judge request: what to check, on which workloads and seeds, and how to time it. Every
    input the judge draws derives from `seed`, drawn fresh for each request unless given."""
    dtype = task.spec.dtype_for(device)
    atol, rtol = task.spec.tolerances(dtype)
    return {
        "device": device, "dtype": dtype, "atol": atol, "rtol": rtol, "correctness": task.spec.correctness,
        "reference_path": str(Path(task.root) / "reference.py"), "entry_point": task.spec.entry_point,
        "source_path": source_path, "compare": compare_paths,
        "workloads": [w.model_dump() for w in task.spec.workloads_for(device)],
        "seeds": seeds or task.spec.seeds, "seed": seeds_mod.draw() if seed is None else seed,
        # `rounds` fixes the count; else from the minimum until every comparison is decided, at most
        # the cap (judge._round_limits: on the interpreter the minimum only)
        "min_rounds": rounds or (3 if device == "cuda" else 2), "max_rounds": rounds or (15 if device == "cuda" else 2),
        "noise_floor": NOISE_FLOOR, "rep_ms": rep_ms,
        "interpreter_reps": interpreter_reps, "trusted": trusted,
        "copy_yardstick": device == "cuda",  # the judge times a copy of each workload's bytes beside it
        "own_comparators": [n for n in compare_paths if n in OWN_COMPARATORS],  # the task's reference: unchecked
        "required_matched_ratio": task.spec.required_matched_ratio,
    }


def _result(task: Task, raw: dict, device: str, dtype: str) -> EvalResult:
    result = EvalResult(status=raw["status"], error=raw.get("error"), device=device, seed=raw.get("seed"),
                        device_name=raw.get("device_name"), max_abs_err=raw.get("max_abs_err"),
                        max_rel_err=raw.get("max_rel_err"), evidence=raw.get("evidence", []),
                        kernels_seen=raw.get("kernels_seen", []), phases_s=raw.get("phases_s", {}),
                        autotune={k: AutotuneRecord(**v) for k, v in (raw.get("autotune") or {}).items()})
    if result.ok:
        result.timer = "cuda_event" if device == "cuda" else "interpreter_wall"
        name = raw.get("device_name") or ""
        costs = raw.get("costs")
        result.workloads = _with_roofline(task, raw["timings"], name, device, dtype, costs)
        _with_copy_yardstick(result.workloads, raw.get("copy") or {}, raw.get("output_bytes") or {})
        result.compare = {k: _with_roofline(task, v, name, device, dtype, costs) for k, v in raw["compare"].items()}
        result.void = dict(raw.get("void") or {})  # comparators the judge stopped timing: their comparison is void
        ran = raw.get("rounds")
        result.rounds = RoundsRun(**ran) if ran else None
        floor = ran["noise_floor"] if ran and ran.get("noise_floor") is not None else NOISE_FLOOR
        result.versus = {k: compare_rounds(result.workloads, v, timer=result.timer, noise_floor=floor)
                         for k, v in result.compare.items()}
        verdicts.with_verdicts(result)
        verdicts.void_comparisons(result)  # the judge's: a comparator's outputs wrong when timed
        for name, v in result.verdicts.items():
            if v.basis == "kernel_only":
                result.evidence.append(f"vs {name}: {v.word} on kernel-only time: {v.reason}")
        undecided = any(v.word == "undecided" for v in result.verdicts.values())
        if result.rounds is not None and result.rounds.stopped in ("cap", "stalled") and undecided:
            result.evidence.append(verdicts.why_undecided(result))
        past = below_copy_floor(result.workloads, raw.get("copy") or {})
        if past:
            result.status = "cheat_suspected"
            result.error = ("faster than writing its outputs at the device's copy bandwidth allows (below "
                            f"{FLOOR_SHARE:g}x the copy floor): " + "; ".join(past))
    return result


def _written(folder: str, name: str, text: str) -> str:
    path = Path(folder) / f"{name}.py"
    path.write_text(text)
    return str(path)


def _fresh_check(result: EvalResult, judge, request: dict, timeout_s: float) -> dict:
    """The request's source (the candidate, or its pinned source) checked again in a fresh sandbox
    on fresh inputs, starting from the kernels the first one compiled (its own), nothing timed."""
    return judge.request({**request, "check_only": True, "seed": seeds_mod.draw(), "compare": {},
                          "keep_cache": None, "triton_cache": request.get("keep_cache"),
                          "autotune_pins": {"candidate": t.given()} if (t := result.autotune.get("candidate")) else {}},
                         timeout_s)


def _check_pinned(result: EvalResult, judge, request: dict, timeout_s: float) -> None:
    """A winner's pinned source (its autotune list narrowed to the judge's choice), which the audit,
    the profile and best_kernel.py run, checked as the candidate was: a source whose program changes
    with its own list (its import code reads it) is not the program judged."""
    recheck = _fresh_check(result, judge, request, timeout_s)
    if recheck["status"] == "reference_error":
        result.status, result.error = "reference_error", recheck.get("error")
    elif recheck["status"] != "verified":
        result.status = "cheat_suspected"
        result.error = ("the source with the judge's autotune choice written in (what the audit and best_kernel.py "
                        f"run) fails on fresh inputs ({recheck['status']}): {recheck.get('error')}")
    else:
        result.evidence.append("the source with the judge's autotune choice written in, which the audit and "
                               "best_kernel.py run, checked correct on fresh inputs")


def _reverify_if_too_good(task: Task, result: EvalResult, judge, request: dict, timeout_s: float) -> bool:
    """Above the roofline, over 10x the baseline, or a span the judge's own clock contradicts:
    re-checked on fresh inputs (the request's source: the pinned source where one is written), then
    rejected (an exact roofline) or flagged for the audit. Returns whether it re-checked."""
    above = [n for n, t in result.workloads.items() if (t.pct_peak or 0) > 100.0]
    fast = result.versus.get("baseline")
    too_fast = fast is not None and fast.speedup > SUSPICIOUS_SPEEDUP
    contradicted = contradicted_workloads(result)
    if not (above or too_fast or contradicted):
        return False
    recheck = _fresh_check(result, judge, request, timeout_s)
    if recheck["status"] == "reference_error":  # the reference broke on the fresh inputs: not the kernel's doing
        result.status, result.error = "reference_error", recheck.get("error")
        return True
    if recheck["status"] != "verified":
        result.status = "cheat_suspected"
        result.error = (f"passed the first check but failed on fresh inputs ({recheck['status']}): "
                        f"{recheck.get('error')}")
        return True
    if above and task.spec.costs == "exact":
        worst = max(result.workloads[n].pct_peak or 0 for n in above)
        result.status = "cheat_suspected"
        result.error = (f"measured at {worst:.0f}% of the datasheet roofline on {', '.join(above)}: faster than "
                        "the hardware allows for the task's exact FLOPs and bytes, so the timing missed work")
        return True
    if above:
        result.flags.append("above_estimated_roofline")
    if too_fast:
        result.flags.append(f"over_{SUSPICIOUS_SPEEDUP:.0f}x_reverified")
    if contradicted:
        result.flags.append("timing_contradicted")
        result.evidence.append("the judge's clock around back-to-back calls saw far more time per call than the "
                               f"reported span on {', '.join(contradicted)} (host work the timing's cover hid, "
                               "or a false report): the audit decides")
    return True


def contradicted_workloads(result: EvalResult) -> list[str]:
    """Workloads whose span the judge's clock around back-to-back calls contradicts: far more time
    per call than the span (OUTSIDE_RATIO, OUTSIDE_SLACK_US), beyond the host time per call that a
    comparator's honest calls pay on the same workload (HOST_COST_RATIO: an autotuned launch's
    Python costs more than a plain one's). On a microsecond workload the launch is the call: AccelOpt's
    rmsnorm_h128 best, a 2 µs kernel, was flagged on batch 1088 in 9 of 9 checks before this."""
    out = []
    for name, t in result.workloads.items():
        if t.outside_us is None or t.median_us * OUTSIDE_RATIO + OUTSIDE_SLACK_US >= t.outside_us:
            continue
        honest = [outside - c[name].median_us for c in result.compare.values()
                  if name in c and (outside := c[name].outside_us) is not None]
        if honest and t.outside_us - t.median_us <= HOST_COST_RATIO * max(honest) + OUTSIDE_SLACK_US:
            result.evidence.append(
                f"{name}: the judge's clock saw {t.outside_us:.1f} µs a call back to back against a {t.median_us:.1f} µs "
                f"span: host time a call, as the comparators' calls pay ({max(honest):.1f} µs beyond their spans), "
                "not a contradiction")
            continue
        out.append(name)
    return out


def _audit_winner(task: Task, source: KernelSource, result: EvalResult, triton_cache: str | None = None,
                  started: Profiling | None = None) -> ProfileRun | None:
    """A kernel that would enter the beam or lead (faster than a comparator beyond noise, or
    flagged) is re-measured under ncu in a fresh process; disagreement rejects it. A flagged
    kernel that could not be audited keeps the flag `unaudited`, which keeps it out of the beam.
    Returns what ncu saw (the planner's profile reads it too), or None where no audit ran."""
    if not _wins(result):
        return None
    seen = audit_mod.profiled(task, source, result, triton_cache=triton_cache, started=started)
    result.audit = audit_mod.judged(source, result, seen)
    if result.audit.agreed and "timing_contradicted" in result.flags:
        # ncu saw the kernels the harness timed, for as long: what the judge's clock saw beyond the
        # span is the call's host time (its Python, a launch path), which a pipelined caller hides
        result.flags.remove("timing_contradicted")
        result.evidence.append("the audit under ncu agrees with the harness's kernel times: the judge's clock's "
                               "excess over the span is host time a call, not hidden work (see outside_us)")
    if result.audit.agreed is False:
        result.status = "cheat_suspected"
        result.error = "the audit under an external profiler disagrees with the harness: " + result.audit.note
    elif result.audit.agreed is None and result.flags:
        result.flags.append("unaudited")
    return seen


def _wins(result: EvalResult) -> bool:
    """Would enter the beam or lead: faster than a comparator beyond noise, or flagged as too good."""
    return bool(result.flags) or any(v.faster for v in result.versus.values())


def planner_profile(seen: ProfileRun | None) -> str | None:
    """The planner's few lines: the first profiled workload's kernels, or None where the profile failed."""
    if seen is None or not seen.kernels:
        return None
    workload, kernels = next(iter(seen.kernels.items()))
    return summarize(kernels, workload)


def _with_roofline(task: Task, timings: dict, device_name: str, device: str, dtype: str,
                   costs: dict[str, dict[str, float]] | None = None) -> dict[str, WorkloadTiming]:
    """Per workload its timing with FLOPs, bytes and % of peak; `costs` as the judge computed them
    (else the reference is imported here: it imports torch)."""
    peak = lookup_peak(device_name) if device == "cuda" else None
    out = {}
    for workload in task.spec.workloads_for(device):
        timing = WorkloadTiming(**timings[workload.name])
        known = (costs or {}).get(workload.name)
        if known is None:
            reference = _reference_module(task.root)
            known = {"flops": float(reference.flops(workload.params, dtype)),
                     "bytes_moved": float(reference.bytes_moved(workload.params, dtype))}
        timing.flops, timing.bytes = known["flops"], known["bytes_moved"]
        if peak is not None:
            roof = percent_of_peak(timing.flops, timing.bytes, timing.median_us * 1e-6, peak, task.spec.flops_kind)
            timing.pct_peak, timing.pct_achievable, timing.bound = roof["pct_peak"], roof["pct_achievable"], roof["bound"]
        out[workload.name] = timing
    return out


def _with_copy_yardstick(workloads: dict[str, WorkloadTiming], copies: dict[str, dict],
                         output_bytes: dict[str, int] | None = None) -> None:
    """Beside the size-blind roofline: a same-bytes device copy's time from the same rounds, and for
    a memory-bound workload the share of that copy's speed the kernel reaches; with the outputs'
    bytes (the judge's), the copy floor: the time to write them at the copy's bandwidth."""
    for name, timing in workloads.items():
        copy = copies.get(name)
        if copy is None:
            continue
        timing.copy_us = copy["median_us"]
        if timing.bound == "memory" and timing.median_us > 0:
            timing.pct_of_copy = 100.0 * copy["median_us"] / timing.median_us
        written = (output_bytes or {}).get(name)
        if written is not None and timing.bytes:
            timing.output_bytes = float(written)
            timing.floor_us = copy_floor_us(written, copied_bytes(timing.bytes), copy["median_us"])


def copied_bytes(bytes_moved: float) -> int:
    """What the copy yardstick moves: half a workload's bytes read, half written
    (timing_rounds._copy_half), both counted."""
    return 2 * (int(bytes_moved) // 2)


def copy_floor_us(output_bytes: float, copied: float, copy_us: float) -> float:
    """The time to write `output_bytes` at the bandwidth of a copy that moved `copied` bytes (read
    and written) in `copy_us`. Outputs larger than the copy are held to the copy's own time: its
    bandwidth, launch and ramp-up in it, is the bandwidth at its size, below a larger size's."""
    if copied <= 0 or copy_us <= 0:
        return 0.0
    return copy_us * min(output_bytes, copied) / copied


def below_copy_floor(workloads: dict[str, WorkloadTiming], copies: dict[str, dict]) -> list[str]:
    """Workloads timed below FLOOR_SHARE of their copy floor, with the figures: on the span (or
    CUDA events, the primary timer) against the copy's, and on kernel-only time against the copy's
    kernel-only time (the timer a host-dominated verdict rests on). None on the interpreter: it
    has no copy yardstick."""
    out = []
    for name, t in workloads.items():
        copy = copies.get(name)
        if copy is None or t.output_bytes is None or not t.bytes:
            continue
        copied = copied_bytes(t.bytes)
        for timer, mine, theirs in (("span", t.median_us, copy.get("median_us")),
                                    ("kernel-only", t.kernel_us, copy.get("kernel_us"))):
            if mine is None or not theirs:
                continue
            floor = copy_floor_us(t.output_bytes, copied, theirs)
            if mine < FLOOR_SHARE * floor:
                out.append(f"{name}: {timer} {mine:.2f} µs against a floor of {floor:.2f} µs ({t.output_bytes:.4g} "
                           f"bytes of outputs at {copied / theirs / 1e3:.0f} GB/s, the copy yardstick's "
                           f"{copied:.4g} bytes in {theirs:.2f} µs)")
    return out


@lru_cache(maxsize=32)
def _reference_module(root: str):
    """FLOPs and bytes are plain arithmetic: the parent may import the reference for them."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"accelopt_ref_{abs(hash(root))}", Path(root) / "reference.py")
    assert spec is not None and spec.loader is not None  # a .py path has both
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
