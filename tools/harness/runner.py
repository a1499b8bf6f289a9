"""The profiler node's instrument: evaluate one kernel source against a task.

Each evaluation runs worker.py in a fresh, spawned process with a scrubbed environment,
a temporary working directory and its own Triton cache, under a timeout. Concurrency is
bounded per device: one evaluation per GPU at a time (timings must not overlap), and one
per core for the CPU interpreter.
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from functools import lru_cache
from pathlib import Path

from tools.harness.result import EvalResult, WorkloadTiming
from tools.harness.static_checks import check_triton_source
from tools.harness.worker import RESULT_MARK
from tools.roofline import lookup_peak, percent_of_peak
from tools.task import Task, load_task

WORKER = Path(__file__).with_name("worker.py")
# Variables a kernel may see; everything else (API keys above all) is dropped.
_PASSED_ENV = ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "TMPDIR")


def detect_device() -> str:
    """'cuda' when a GPU is visible, else 'cpu' (Triton interpreter). ACCELOPT_DEVICE overrides."""
    forced = os.environ.get("ACCELOPT_DEVICE")
    if forced:
        return forced
    return "cuda" if _gpu_count() > 0 else "cpu"


@lru_cache(maxsize=1)
def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - no usable torch CUDA means no GPU
        return 0


@lru_cache(maxsize=2)
def _slots(device: str) -> queue.Queue:
    """A pool of device slots: GPU indices for cuda, plain tokens for the interpreter."""
    pool: queue.Queue = queue.Queue()
    count = max(1, _gpu_count()) if device == "cuda" else max(1, os.cpu_count() or 1)
    for index in range(count):
        pool.put(index)
    return pool


def evaluate(task: Task | str, source: str, *, device: str | None = None, timeout_s: float = 300.0,
             seeds: int | None = None, warmup_ms: float = 25.0, rep_ms: float = 100.0,
             interpreter_reps: int = 3) -> EvalResult:
    task = load_task(task) if isinstance(task, str) else task
    device = device or detect_device()
    started = time.monotonic()
    static = check_triton_source(source, task.spec.entry_point)
    if static:
        status, message = static
        return EvalResult(status=status, error=message, device=device)

    dtype = task.spec.dtype_for(device)
    atol, rtol = task.spec.tolerances(dtype)
    workloads = task.spec.workloads_for(device)
    slot = _slots(device).get()
    try:
        with tempfile.TemporaryDirectory(prefix="accelopt-eval-") as tmp:
            source_path = Path(tmp) / "candidate.py"
            source_path.write_text(source)
            nonce = secrets.token_hex(8)
            request = {
                "device": device, "dtype": dtype, "atol": atol, "rtol": rtol,
                "reference_path": str(Path(task.root) / "reference.py"),
                "source_path": str(source_path), "entry_point": task.spec.entry_point,
                "workloads": [w.model_dump() for w in workloads],
                "seeds": seeds or task.spec.seeds, "warmup_ms": warmup_ms, "rep_ms": rep_ms,
                "interpreter_reps": interpreter_reps, "nonce": nonce,
            }
            raw = _run_worker(request, _worker_env(tmp, device, slot), tmp, timeout_s, nonce)
    finally:
        _slots(device).put(slot)

    result = EvalResult(status=raw["status"], error=raw.get("error"), device=device,
                        device_name=raw.get("device_name"), max_abs_err=raw.get("max_abs_err"),
                        max_rel_err=raw.get("max_rel_err"), eval_s=time.monotonic() - started)
    if result.status == "verified":
        result.timer = "cuda_event" if device == "cuda" else "interpreter_wall"
        result.workloads = _with_roofline(task, raw["timings"], raw.get("device_name") or "", device, dtype)
    return result


def _worker_env(tmp: str, device: str, slot: int) -> dict[str, str]:
    env = {k: os.environ[k] for k in _PASSED_ENV if k in os.environ}
    env.update({"HOME": tmp, "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
                "TRITON_CACHE_DIR": str(Path(tmp) / "triton-cache")})
    if device == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[slot] \
            if os.environ.get("CUDA_VISIBLE_DEVICES") else str(slot)
    else:
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _run_worker(request: dict, env: dict, cwd: str, timeout_s: float, nonce: str) -> dict:
    proc = subprocess.Popen([sys.executable, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=cwd, env=env, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(json.dumps(request), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"status": "timeout", "error": f"the kernel did not finish within {timeout_s:.0f} s and was killed"}
    mark = RESULT_MARK + nonce
    for line in reversed(stdout.splitlines()):
        if line.startswith(mark):
            return json.loads(line[len(mark):])
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        return {"status": "crashed", "error": f"the worker died with {name}:\n{_tail(stderr)}"}
    return {"status": "runtime_error", "error": f"the worker exited with code {proc.returncode}:\n{_tail(stderr)}"}


def _tail(text: str, limit: int = 1500) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def _with_roofline(task: Task, timings: dict, device_name: str, device: str, dtype: str) -> dict[str, WorkloadTiming]:
    reference = _reference_module(task.root)
    peak = lookup_peak(device_name) if device == "cuda" else None
    out = {}
    for workload in task.spec.workloads_for(device):
        timing = WorkloadTiming(**timings[workload.name])
        timing.flops = float(reference.flops(workload.params, dtype))
        timing.bytes = float(reference.bytes_moved(workload.params, dtype))
        if peak is not None:
            roof = percent_of_peak(timing.flops, timing.bytes, timing.median_us * 1e-6, peak, task.spec.flops_kind)
            timing.pct_peak, timing.pct_achievable, timing.bound = roof["pct_peak"], roof["pct_achievable"], roof["bound"]
        out[workload.name] = timing
    return out


@lru_cache(maxsize=32)
def _reference_module(root: str):
    """FLOPs and bytes are plain arithmetic: the parent may import the reference for them."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"accelopt_ref_{abs(hash(root))}", Path(root) / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
