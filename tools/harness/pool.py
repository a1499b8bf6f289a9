"""Persistent evaluation workers: one per visible GPU (or per core on the interpreter).

Each worker is a spawned process (never forked from this one) running worker.py, with a
scrubbed environment, its own working directory and Triton cache, and no network where the OS
allows it (`unshare -n` as root). A request that outlives its timeout gets the worker killed
(process group) and a fresh one started for the next request; a worker that dies (segfault,
abort) or reports a poisoned CUDA context is replaced the same way. So a hang or a fault costs
exactly one candidate.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from functools import lru_cache
from pathlib import Path

from tools.harness.worker import RESULT_MARK

WORKER = Path(__file__).with_name("worker.py")
# Variables a kernel may see; everything else (API keys above all) is dropped.
_PASSED_ENV = ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "TRITON_PTXAS_PATH",
               "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST")


@lru_cache(maxsize=1)
def network_isolation_prefix() -> tuple[str, ...]:
    """`unshare -n` gives the worker an empty network namespace where the OS permits it."""
    if shutil.which("unshare") is None:
        return ()
    try:
        ok = subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return ("unshare", "-n") if ok else ()


def scrubbed_env(home: Path, device: str, gpu: str | None, cache: Path | None = None) -> dict[str, str]:
    """The environment generated code runs in: no secrets, a private HOME and Triton cache."""
    env = {k: os.environ[k] for k in _PASSED_ENV if k in os.environ}
    env.update({"HOME": str(home), "TMPDIR": str(home), "PYTHONUNBUFFERED": "1",
                "PYTHONDONTWRITEBYTECODE": "1", "TRITON_CACHE_DIR": str(cache or home / "triton-cache"),
                # torch.compile comparators compile in-process: no pool threads to trip the thread check
                "TORCHINDUCTOR_COMPILE_THREADS": "1"})
    if device == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = gpu or "0"
    else:
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


class Worker:
    def __init__(self, device: str, slot: int, gpu: str | None, cache: Path | None = None):
        self.device, self.slot, self.gpu = device, slot, gpu
        self.home = Path(tempfile.mkdtemp(prefix=f"accelopt-worker-{device}{slot}-"))
        self.cache = cache  # shared only with this GPU's compile-ahead worker
        self.proc: subprocess.Popen | None = None
        self.stderr_path = self.home / "stderr.log"
        self.stderr_offset = 0
        self.started = 0

    def _env(self) -> dict[str, str]:
        return scrubbed_env(self.home, self.device, self.gpu, self.cache)

    def _start(self) -> None:
        self.stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen([*network_isolation_prefix(), sys.executable, str(WORKER)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     cwd=self.home, env=self._env(), text=True, start_new_session=True)
        self.started += 1

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        self.proc = None

    def stderr_tail(self, limit: int = 1500) -> str:
        """What the worker wrote to stderr during the current request only."""
        try:
            with open(self.stderr_path, errors="replace") as f:
                f.seek(self.stderr_offset)
                text = f.read().strip()
        except OSError:
            return ""
        return text if len(text) <= limit else "..." + text[-limit:]

    def request(self, req: dict, timeout_s: float) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        nonce = secrets.token_hex(8)
        req = {**req, "nonce": nonce}
        self.stderr_offset = self.stderr_path.stat().st_size if self.stderr_path.exists() else 0
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return self._died()
        mark = RESULT_MARK + nonce
        while True:
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
            if not ready:
                self.kill()
                return {"status": "timeout",
                        "error": f"the kernel did not finish within {timeout_s:.0f} s; its worker was killed"}
            line = self.proc.stdout.readline()
            if not line:
                return self._died()
            if line.startswith(mark):
                result = json.loads(line[len(mark):])
                if result.pop("restart", False):
                    self.kill()
                return result

    def _died(self) -> dict:
        code = self.proc.wait() if self.proc else None
        self.proc = None
        if code is not None and code < 0:
            return {"status": "crashed",
                    "error": f"the worker died with {signal.Signals(-code).name}:\n{self.stderr_tail()}"}
        return {"status": "runtime_error", "error": f"the worker exited with code {code}:\n{self.stderr_tail()}"}


class WorkerPool:
    """Hands out workers; a worker serves one request at a time.

    On GPUs each timing worker has a compile-ahead twin sharing its Triton cache: while one
    candidate is timed, the next one waiting for the GPU is compiled (precompile), so its
    evaluation starts with a cache hit."""

    def __init__(self, device: str, count: int, gpus: list[str] | None = None, fresh_process: bool = False,
                 compile_ahead: bool = True):
        self.fresh_process = fresh_process  # benchmark baseline: a new process for every request
        gpus = gpus or [None] * count
        self.workers, self.compilers = [], []
        for i in range(count):
            cache = Path(tempfile.mkdtemp(prefix=f"accelopt-triton-{device}{i}-")) if device == "cuda" else None
            self.workers.append(Worker(device, i, gpus[i], cache))
            if device == "cuda" and compile_ahead and not fresh_process:
                self.compilers.append(Worker(device, i, gpus[i], cache))
        self.free: queue.Queue[Worker] = queue.Queue()
        for w in self.workers:
            self.free.put(w)
        self.free_compilers: queue.Queue[Worker] = queue.Queue()
        for w in self.compilers:
            self.free_compilers.put(w)

    def precompile(self, req: dict, timeout_s: float) -> None:
        """Best effort, and only when every timing worker is busy: a failure here is reported
        by the real evaluation that follows."""
        if not self.compilers or not self.free.empty():
            return
        try:
            compiler = self.free_compilers.get_nowait()
        except queue.Empty:
            return
        try:
            compiler.request({**req, "compile_only": True, "compare": {}}, timeout_s)
        finally:
            self.free_compilers.put(compiler)

    def run(self, req: dict, timeout_s: float) -> dict:
        worker = self.free.get()
        try:
            return worker.request(req, timeout_s)
        finally:
            if self.fresh_process:
                worker.kill()
            self.free.put(worker)

    def close(self) -> None:
        for w in self.workers + self.compilers:
            w.kill()
            shutil.rmtree(w.home, ignore_errors=True)
            if w.cache is not None:
                shutil.rmtree(w.cache, ignore_errors=True)


_pools: dict[str, WorkerPool] = {}
_pools_lock = threading.Lock()


def make_pool(device: str, gpu_count: int, fresh_process: bool = False, compile_ahead: bool = True) -> WorkerPool:
    if device == "cuda":
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        gpus = visible.split(",") if visible else [str(i) for i in range(max(1, gpu_count))]
        return WorkerPool(device, len(gpus), gpus, fresh_process, compile_ahead)
    return WorkerPool(device, max(1, os.cpu_count() or 1), fresh_process=fresh_process)


def get_pool(device: str, gpu_count: int) -> WorkerPool:
    """The process-wide pool for a device, started on first use."""
    with _pools_lock:
        if device not in _pools:
            _pools[device] = make_pool(device, gpu_count)
        return _pools[device]


@atexit.register
def _close_pools() -> None:
    for pool in _pools.values():
        pool.close()
