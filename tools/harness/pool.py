"""Judges: one persistent judge process per visible GPU (or up to one per core on the interpreter).

Each judge (judge.py) is a spawned process (never forked from this one) with a scrubbed
environment and its own working directory; it runs every candidate in a fresh sandbox process
of its own (sandbox.py), so a hang, a crash or a poisoned CUDA context costs one candidate and
leaves the judge as it was. The judge enforces the request's time limit on its sandboxes; the
pool kills a judge that overruns it by a margin (a judge bug) and starts a fresh one.

Judges stay in the run's process group and watch their parent, so whatever ends the run
(Ctrl-C, kill -9 of the group or of the parent alone) ends them and their sandboxes.

The process-wide pools (`get_pool`: one per device, shared by every run and thread of a process,
`langgraph dev`'s included) let their judges go when idle: `ACCELOPT_JUDGE_IDLE_S` (600 s) after
the last lease ended with none taken since, the judges are killed (their sandboxes with them) and
their homes removed; the next lease starts them again.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from accelopt.tools import settings
from accelopt.tools.harness import confine, device_lease
from accelopt.tools.harness.judge import RESULT_MARK

JUDGE = Path(__file__).with_name("judge.py")
HOME_PREFIX = "accelopt-judge-"  # + device, slot, p<pid of the process that owns the pool>, random
# A candidate's source files while it is judged (runner.evaluate): + p<pid of the evaluating process>-, random
SOURCE_PREFIX = "accelopt-src-"
# What a judge may take beyond a candidate's own limit: its start and the reference's import.
JUDGE_MARGIN_S = 120.0
# On the interpreter: how long an evaluation waits for a busy started judge before it starts
# another (WorkerPool._take): about a bundled task's evaluation there. In the CPU suite, 12
# processes started a second judge without the wait, 4 with 3 s (3-9 s after their first).
START_WAIT_S = 6.0
# Variables a kernel may see; everything else (API keys above all) is dropped.
_PASSED_ENV = ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "TRITON_PTXAS_PATH",
               "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", confine.UNCONFINED_ENV)


def scrubbed_env(home: Path, device: str, gpu: str | None) -> dict[str, str]:
    """The environment generated code runs in: no secrets, a private HOME and Triton cache."""
    env = {k: os.environ[k] for k in _PASSED_ENV if k in os.environ}
    bwrap = confine.bwrap_binary()  # found here (the judge's environment may not see the package)
    if bwrap:
        env[confine.BWRAP_ENV] = bwrap
    env.update({"HOME": str(home), "TMPDIR": str(home), "PYTHONUNBUFFERED": "1",
                "PYTHONDONTWRITEBYTECODE": "1", "TRITON_CACHE_DIR": str(home / "triton-cache"),
                # torch.compile comparators compile in-process: no pool threads to trip the thread check
                "TORCHINDUCTOR_COMPILE_THREADS": "1"})
    if device == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = gpu or "0"
    else:
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


class Worker:
    """One judge process and its pipes."""

    def __init__(self, device: str, slot: int, gpu: str | None):
        self.device, self.slot, self.gpu = device, slot, gpu
        self.home = Path(tempfile.mkdtemp(prefix=f"{HOME_PREFIX}{device}{slot}-p{os.getpid()}-"))
        self.proc: subprocess.Popen | None = None
        self.stderr_path = self.home / "stderr.log"
        self.stderr_offset = 0
        self.started = 0

    def _env(self) -> dict[str, str]:
        return scrubbed_env(self.home, self.device, self.gpu)

    def _start(self) -> None:
        if not self.home.is_dir():  # released when idle (WorkerPool._release): a home of its own again
            self.home = Path(tempfile.mkdtemp(prefix=f"{HOME_PREFIX}{self.device}{self.slot}-p{os.getpid()}-"))
            self.stderr_path = self.home / "stderr.log"
        self.stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen([sys.executable, str(JUDGE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, cwd=self.home, env=self._env(), text=True)
        self.started += 1

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # its sandboxes die with it (PR_SET_PDEATHSIG)
            self.proc.wait()
        self.proc = None

    def retire(self) -> None:
        """The judge killed (its sandboxes with it) and its home removed; a request starts both again."""
        self.kill()
        stderr = getattr(self, "stderr", None)
        if stderr is not None:
            stderr.close()
        shutil.rmtree(self.home, ignore_errors=True)

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
        req = {**req, "nonce": nonce, "timeout_s": timeout_s}
        self.stderr_offset = self.stderr_path.stat().st_size if self.stderr_path.exists() else 0
        proc = self.proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None  # _start: piped
        try:
            proc.stdin.write(json.dumps(req) + "\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return self._died()
        mark = RESULT_MARK + nonce
        while True:
            ready, _, _ = select.select([proc.stdout], [], [], timeout_s + JUDGE_MARGIN_S)
            if not ready:
                self.kill()
                return {"status": "timeout",
                        "error": f"the evaluation did not finish within {timeout_s:.0f} s; its judge was killed"}
            line = proc.stdout.readline()
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
            return {"status": "runtime_error",
                    "error": f"the judge died with {signal.Signals(-code).name} (a harness fault, not the kernel's):"
                             f"\n{self.stderr_tail()}"}
        return {"status": "runtime_error",
                "error": f"the judge exited with code {code} (a harness fault, not the kernel's):\n{self.stderr_tail()}"}


class WorkerPool:
    """Hands out judges; a judge serves one request at a time. On the interpreter there is up to
    one judge per core, each started once evaluations overlap for START_WAIT_S (`_take`); on GPUs
    one per GPU (each judge's sandboxes see only that GPU)."""

    def __init__(self, device: str, count: int, gpus: list[str] | None = None, fresh_process: bool = False,
                 on_wait: device_lease.OnWait | None = None, idle_s: float | None = None):
        self.device = device
        self.fresh_process = fresh_process  # benchmark baseline: a new judge (no warm spares) per request
        self.on_wait = on_wait  # where "waiting for GPU 0, held by pid N (...)" goes (None: stderr)
        slots: list[str | None] = list(gpus) if gpus else [None] * count
        self.workers = [Worker(device, i, slots[i]) for i in range(count)]
        # The judges no lease holds, the one that served last at the end (`_take`); guarded by
        # `_changed`, which a lease's end notifies.
        self.free: list[Worker] = list(reversed(self.workers))
        # Idle release (`idle_s`: None keeps the judges until close): leases held now, since when
        # none is, and a reaper thread, started with the first lease, that waits on the condition.
        self.idle_s = idle_s
        self.releases = 0  # how many times idle judges were let go
        self._held = 0
        self._idle_since = time.monotonic()
        self._closed = False
        self._changed = threading.Condition()
        self._reaper: threading.Thread | None = None

    def warm(self, judges: int | None = None) -> None:
        """Start the first `judges` judges (None: every one) now, each with its spare sandboxes,
        not with the first request: the first ones are those the first leases get (LIFO)."""
        with self._changed:
            for w in self.workers[:judges]:
                if w.proc is None or w.proc.poll() is not None:
                    w._start()
            self._idle_since = time.monotonic()
            self._watch_idle()

    @contextlib.contextmanager
    def lease(self) -> Iterator[Worker]:
        """One judge, and its GPU, for as long as the block runs: an evaluation's requests and its
        audit, so no other evaluation times kernels on that GPU meanwhile, of this process (one
        judge per GPU) or of any other (the GPU's device lease; DeviceLeaseError past its wait)."""
        with self._changed:  # counted before it waits for a judge: no release while anyone wants one
            self._held += 1
        try:
            worker = self._take()
            try:
                with self.holding_gpu(worker):
                    yield worker
            finally:
                if self.fresh_process:
                    worker.kill()
                with self._changed:
                    self.free.append(worker)
                    self._changed.notify_all()
        finally:
            with self._changed:
                self._held -= 1
                self._idle_since = time.monotonic()
                self._watch_idle()
                self._changed.notify_all()

    def _take(self) -> Worker:
        """A free judge: a started one first, the one that served last (its spares ready). On the
        interpreter, a judge not yet started only once the started ones stayed busy for
        START_WAIT_S: a start costs as much CPU as an evaluation there (about 4 s of a core,
        mostly the judge's torch and its template's torch and Triton), so a second
        judge is worth its start only where evaluations overlap for longer than that. On GPUs a
        free judge at once: each holds a GPU of its own."""
        wait_until = time.monotonic() + (START_WAIT_S if self.device != "cuda" else 0.0)
        with self._changed:
            while True:
                started = [w for w in self.free if w.running()]
                ready = started or (self.free if time.monotonic() >= wait_until or
                                    not any(w.running() for w in self.workers) else [])
                if ready:
                    worker = ready[-1]
                    self.free.remove(worker)
                    return worker
                self._changed.wait(max(0.0, wait_until - time.monotonic()) if self.free else None)

    def _watch_idle(self) -> None:
        """Start the reaper (once, and only with an idle limit); the caller holds the condition."""
        if self.idle_s is not None and self._reaper is None and not self._closed:
            self._reaper = threading.Thread(target=self._reap, name=f"accelopt-judges-{self.device}-idle",
                                            daemon=True)
            self._reaper.start()

    def _reap(self) -> None:
        """Releases the judges once no lease was held for idle_s; sleeps while there is nothing to
        release or a lease is held, and wakes when a lease ends (or the limit changes)."""
        with self._changed:
            while not self._closed:
                if self._held or self.idle_s is None or not self._running():
                    self._changed.wait()
                    continue
                left = self._idle_since + self.idle_s - time.monotonic()
                if left > 0:
                    self._changed.wait(left)
                    continue
                self._release()

    def _running(self) -> bool:
        return any(w.proc is not None or w.home.is_dir() for w in self.workers)

    def _release(self) -> None:
        """Every judge killed and its home removed (the caller holds the condition, and no lease)."""
        for w in self.workers:
            w.retire()
        self.releases += 1

    def set_idle(self, idle_s: float | None) -> None:
        """Change the idle limit (None: never); the reaper recomputes its deadline at once."""
        with self._changed:
            self.idle_s = idle_s
            self._watch_idle()
            self._changed.notify_all()

    def has_free_judge(self) -> bool:
        """A judge no lease holds now: the next lease takes it without waiting on this pool
        (another process may still hold its GPU)."""
        return bool(self.free)

    def judge_pids(self) -> list[int]:
        """The pids of the judges running now (tests, and what a server shows)."""
        return [w.proc.pid for w in self.workers if w.proc is not None and w.proc.poll() is None]

    def holding_gpu(self, worker: Worker) -> contextlib.AbstractContextManager:
        """The judge's GPU held across processes (device_lease.py); nothing on the interpreter, whose
        times are not performance."""
        if self.device != "cuda":
            return contextlib.nullcontext()
        return device_lease.hold(worker.gpu, "evaluation", on_wait=self.on_wait)

    def run(self, req: dict, timeout_s: float) -> dict:
        with self.lease() as worker:
            return worker.request(req, timeout_s)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            for w in self.workers:
                w.retire()
            self._changed.notify_all()


_pools: dict[str, WorkerPool] = {}
_pools_lock = threading.Lock()


HOME_OWNER = re.compile(rf"{HOME_PREFIX}[a-z]+\d+-p(\d+)-")


def home_owner(text: str) -> int | None:
    """The pid of the process that owns the judge home `text` names (a folder name, a path or a
    command line), or None where it names none."""
    found = HOME_OWNER.search(text)
    return int(found.group(1)) if found else None


SOURCE_OWNER = re.compile(rf"{SOURCE_PREFIX}p(\d+)-")


def source_dir_owner(name: str) -> int | None:
    found = SOURCE_OWNER.match(name)
    return int(found.group(1)) if found else None


def remove_orphaned(where: Path, prefix: str, owner: Callable[[str], int | None]) -> list[Path]:
    """Remove the folders under `where` named `prefix`... whose owning process (`owner` of the
    name) is gone: a process killed with SIGKILL never cleans up. A folder whose owner is alive
    (another user's too), or that names none, stays. Returns what went."""
    removed = []
    for folder in where.glob(f"{prefix}*"):
        pid = owner(folder.name)
        if pid is None or not folder.is_dir() or device_lease.pid_alive(pid):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def sweep_orphaned_folders(tmp: str | None = None) -> list[Path]:
    """Remove the judge homes of pools, and the source folders of evaluations, whose process is
    gone: a driver killed with SIGKILL never cleans up (a day of resume tests left 160 source
    folders in /tmp). Returns what went."""
    where = Path(tmp or tempfile.gettempdir())
    return remove_orphaned(where, HOME_PREFIX, home_owner) + remove_orphaned(where, SOURCE_PREFIX, source_dir_owner)


def make_pool(device: str, gpu_count: int, fresh_process: bool = False, gpus: list[str] | None = None) -> WorkerPool:
    """Judges for the device; refused (ConfinementError) where candidates cannot be confined and
    the user did not choose to run them unconfined."""
    reason = confine.refusal()
    if reason:
        raise confine.ConfinementError(confine.refusal_message(reason))
    if confine.unconfined():
        print(f"accelopt: candidate kernels run UNCONFINED ({confine.UNCONFINED_ENV}=1): generated code can write "
              "wherever this user can", file=sys.stderr)
    sweep_orphaned_folders()
    if device == "cuda":
        visible = settings.cuda_visible_devices()
        gpus = gpus or (visible.split(",") if visible else [str(i) for i in range(max(1, gpu_count))])
        return WorkerPool(device, len(gpus), gpus, fresh_process)
    return WorkerPool(device, max(1, os.cpu_count() or 1), fresh_process=fresh_process)


def get_pool(device: str, gpu_count: int) -> WorkerPool:
    """The process-wide pool for a device, made on first use and kept for every run and thread of
    the process; its judges are let go after `ACCELOPT_JUDGE_IDLE_S` without a lease (read here, at
    every call: a value it cannot use is a ConfigError) and started again by the next lease."""
    idle_s = settings.judge_idle_s()
    with _pools_lock:
        if device not in _pools:
            _pools[device] = make_pool(device, gpu_count)
        pool = _pools[device]
    if pool.idle_s != idle_s:
        pool.set_idle(idle_s)
    return pool


def close_pools() -> None:
    """Close the process's pools (judges killed, homes removed); the next get_pool makes a new one.
    At exit, and where a server stops: `langgraph dev` ends on SIGTERM by raising it again once
    its app has shut down (uvicorn), so no atexit handler runs there (graph/served_app.py's
    lifespan calls this)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()


atexit.register(close_pools)


def kill_judges_now() -> None:
    """SIGKILL every judge of the process's pools (their sandboxes die with them), neither waiting
    nor cleaning up, and without releasing the GIL: for an exit that follows at once (the CLI's
    Ctrl-C), before any thread could record an evaluation cut off by the kill as the kernel's."""
    for pool in list(_pools.values()):
        for worker in pool.workers:
            if worker.proc is not None:
                try:
                    os.kill(worker.proc.pid, signal.SIGKILL)
                except OSError:  # gone already
                    pass
