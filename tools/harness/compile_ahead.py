"""Compile a candidate's Triton kernels before its turn on the GPU, in a process with no GPU.

On an H100 an evaluation spent seconds of its lease compiling (an autotuned attention kernel's
six configurations: 37 s of ptxas) while the GPU waited. `compile_ahead` runs the candidate once
per GPU workload in a fresh process (ahead_worker.py) that has no GPU at all, every Triton launch
turned into a compile for the GPU's target, and leaves a Triton cache that the candidate's
sandbox is seeded from (the judge request's `triton_cache`): its first call then finds every
kernel compiled. Triton's cache key does not depend on the physical GPU, only on the target
(arch, ptxas), the source, the specialization and the options, which the process reproduces.

The process is the candidate's: started per candidate and never reused, with the judge's
scrubbed environment, CUDA_VISIBLE_DEVICES="", under bubblewrap with no GPU device node in its
/dev, no network, and Landlock limiting its writes to its own folder (confine.py); where
candidates cannot be confined it is refused as the judges are (confine.refusal, unless
ACCELOPT_UNCONFINED=1). It is killed, with every process it started, at its timeout. What it
reports is a claim: the record's kernels are read from the cache it left, whose regular files
alone are copied out (a symbolic link there would make the harness copy what it points to).

At most `SLOTS` compile processes run at once (a quarter of the cores, each compiling on
`threads` threads at the lowest CPU priority): the host also launches the kernels being timed.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from accelopt.tools.harness import confine, triton_cache
from accelopt.tools.harness.pool import scrubbed_env
from accelopt.tools.task import Task

WORKER = Path(__file__).with_name("ahead_worker.py")
HOME_PREFIX = "accelopt-ahead-"
CACHE = "triton-cache"
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
SLOTS = threading.BoundedSemaphore(max(1, CORES // 4))
THREADS = 2  # an autotuner's configurations compiled at once in one process
MAX_INPUT_BYTES = 2 << 30  # a workload whose inputs are larger runs on the meta device (no values)
MAX_CACHE_BYTES = 512 << 20  # copied out of the process's folder at most
MAX_REPORT_BYTES = 1 << 20
START_GRACE_S = 15.0  # a cancelled process is killed once it reports its start, or after this


class GpuTarget(NamedTuple):
    capability: tuple[int, int]
    name: str = ""


@dataclass(frozen=True)
class AheadResult:
    """What one compile-ahead pass left in `cache_dir`, and whether it saw the candidate's launches
    as the GPU will (`predicted`)."""
    cache_dir: str
    seconds: float                  # the process's run, start to end (not the wait for a slot)
    kernels: tuple[str, ...] = ()   # Triton kernels with a cubin in the cache, read from the cache itself
    binaries: int = 0               # cubins in the cache: kernels x specializations x configurations
    configs: int = 0                # autotuning configurations compiled (every pruned one, per tuning key)
    failed_configs: int = 0         # of those, how many did not compile (the autotuner skips them on the GPU too)
    compiled: int = 0               # compilations the process ran (the worker's count)
    cache_hits: int = 0             # compilations it found in the cache it was seeded with (`seed_cache`)
    completed: bool = False         # the entry point ran to its end on every workload
    workloads_run: int = 0
    workloads: int = 0
    note: str | None = None         # why it did not predict: which exception, where; or why nothing ran
    timed_out: bool = False
    waited_s: float = 0.0           # for a compile slot (SLOTS)
    stand_ins: dict[str, int] = field(default_factory=dict)  # CUDA facilities the candidate used, stood in for
    utils: bool = False             # Triton's CUDA utility module built into the cache too (needs libcuda)

    @property
    def predicted(self) -> bool:
        return self.completed and not self.timed_out


# ---------------------------------------------------------------- the GPU's target

_targets: dict[str | None, GpuTarget] = {}


def gpu_target(gpu: str | None = None) -> GpuTarget | None:
    """The compute capability (and name) of GPU `gpu` (an index or UUID as nvidia-smi takes it;
    None: the first), read with nvidia-smi so the caller never initializes CUDA; None where there
    is no GPU or no nvidia-smi. nvidia-smi numbers GPUs in PCI order, CUDA fastest first unless
    CUDA_DEVICE_ORDER=PCI_BUS_ID: on a host of mixed GPUs name them by UUID."""
    if gpu in _targets:
        return _targets[gpu]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    cmd = [smi, "--query-gpu=compute_cap,name", "--format=csv,noheader"] + (["-i", gpu] if gpu else [])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.stdout.splitlines() if out.returncode == 0 else []:
        cap, _, name = line.partition(",")
        match = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", cap)
        if match:
            _targets[gpu] = GpuTarget((int(match.group(1)), int(match.group(2))), name.strip())
            return _targets[gpu]
    return None  # not kept: nvidia-smi may answer next time


# Streaming multiprocessors by name (torch's multi_processor_count, which some kernels size
# persistent grids or constexprs by); else by capability's usual part.
_SMS_BY_NAME = (("H100 PCIe", 114), ("H100", 132), ("H200", 132), ("H800", 132), ("GH200", 132), ("B200", 148),
                ("A100", 108), ("A800", 108), ("L40", 142), ("L4", 58), ("A10G", 80), ("A10", 72))
_SMS_BY_CAPABILITY = {(9, 0): 132, (8, 0): 108, (10, 0): 148}
_SHARED_BY_CAPABILITY = {(8, 0): 166912, (8, 7): 166912, (9, 0): 232448, (10, 0): 232448, (10, 3): 232448}
_MEMORY_BY_CAPABILITY = {(9, 0): 80 << 30, (8, 0): 80 << 30, (10, 0): 180 << 30}


def properties(target: GpuTarget) -> dict:
    """What the stand-in driver and torch.cuda answer about the GPU."""
    sms = next((n for key, n in _SMS_BY_NAME if key in target.name), _SMS_BY_CAPABILITY.get(target.capability))
    return {"capability": list(target.capability), "name": target.name or f"sm_{target.capability[0]}"
            f"{target.capability[1]} (compile-ahead stand-in)", "multiprocessor_count": sms,
            "max_shared_mem": _SHARED_BY_CAPABILITY.get(target.capability, 101376),
            "total_memory": _MEMORY_BY_CAPABILITY.get(target.capability, 24 << 30)}


# ---------------------------------------------------------------- the pass

def compile_ahead(task: Task, source_path: str | Path, entry_point: str | None, cache_dir: str | Path,
                  capability: GpuTarget | tuple[int, int] | None, timeout_s: float = 300.0, *,
                  workloads: list[str] | None = None, seed: int = 0, threads: int = THREADS,
                  max_input_bytes: int = MAX_INPUT_BYTES, utils: bool = True,
                  seed_cache: str | Path | None = None, cancel: threading.Event | None = None) -> AheadResult:
    """Run `source_path`'s `entry_point` (default: the task's) once per GPU workload of `task`
    (those named in `workloads`, else all) in a fresh process with no GPU, every Triton launch a
    compile for `capability`, and copy the Triton cache it leaves into `cache_dir` (created, or
    added to: files already there are kept). `seed_cache`: a cache the process starts from (its
    kernels are found, not compiled). Blocks while SLOTS are all taken, then at most
    `timeout_s` for the process. Raises ConfinementError where candidates cannot be confined and
    the user did not choose to run them unconfined; every other failure is in the record.
    `cancel` set: it stops waiting for a slot, or kills the process, and keeps what was compiled
    (the candidate's turn on the GPU came first)."""
    reason = confine.refusal()
    if reason:
        raise confine.ConfinementError(confine.refusal_message(reason))
    cache_dir = str(Path(cache_dir).resolve())
    target = capability if capability is None or isinstance(capability, GpuTarget) \
        else GpuTarget((int(capability[0]), int(capability[1])))
    chosen = [w for w in task.spec.workloads_for("cuda") if not workloads or w.name in workloads]
    if target is None:
        return AheadResult(cache_dir, 0.0, workloads=len(chosen), note="no GPU to compile for")
    queued = time.monotonic()
    while not SLOTS.acquire(timeout=0.2):
        if cancel is not None and cancel.is_set():
            return AheadResult(cache_dir, 0.0, workloads=len(chosen), waited_s=time.monotonic() - queued,
                               note="cancelled before it started: the candidate's turn on the GPU came first")
    try:
        waited = time.monotonic() - queued
        home = Path(tempfile.mkdtemp(prefix=HOME_PREFIX)).resolve()
        try:
            shutil.copyfile(source_path, home / "kernel.py")
            if seed_cache:
                harvest(Path(seed_cache), home / CACHE)
            request = {"home": str(home), "readable": [str(Path(task.root).resolve())],
                       "confine": not confine.unconfined(), "source_path": str(home / "kernel.py"),
                       "entry_point": entry_point or task.spec.entry_point,
                       "reference_path": str(Path(task.root).resolve() / "reference.py"),
                       "dtype": task.spec.dtype_for("cuda"), "seed": seed, "threads": max(1, threads),
                       "max_input_bytes": max_input_bytes, "utils": utils, "properties": properties(target),
                       "workloads": [{"name": w.name, "params": w.params} for w in chosen]}
            (home / "request.json").write_text(json.dumps(request))
            started = time.monotonic()
            events, timed_out, code, log = _run(home, task, timeout_s, cancel)
            seconds = time.monotonic() - started
            binaries, kernels = harvest(home / CACHE, Path(cache_dir))
        finally:
            shutil.rmtree(home, ignore_errors=True)
    finally:
        SLOTS.release()
    return _record(cache_dir, seconds, waited, events, timed_out, code, log, binaries, kernels, len(chosen),
                   timeout_s, cancelled=cancel is not None and cancel.is_set())


def ahead_env(home: Path) -> dict[str, str]:
    """The judge's scrubbed environment, no GPU visible, every folder it writes its own."""
    env = scrubbed_env(home, "cuda", None)
    env.update({"CUDA_VISIBLE_DEVICES": "", "HOME": str(home), "TMPDIR": str(home),
                "TRITON_CACHE_DIR": str(home / CACHE), "TORCHINDUCTOR_CACHE_DIR": str(home / "inductor-cache"),
                "OMP_NUM_THREADS": "1"})
    env.pop("TRITON_INTERPRET", None)
    return env


def _run(home: Path, task: Task, timeout_s: float,
         cancel: threading.Event | None = None) -> tuple[list[dict], bool, int | None, str]:
    """Start the worker, read its events until it ends or the timeout; kill it and all it started."""
    prefix = confine.process_prefix(str(home), (str(Path(task.root).resolve()),), gpu=False, shm=False)
    read_fd, write_fd = os.pipe()
    log_path = home / "worker.log"
    try:
        with open(log_path, "w") as log:
            proc = subprocess.Popen([*prefix, sys.executable, str(WORKER), str(home / "request.json"), str(write_fd)],
                                    cwd=str(home), env=ahead_env(home), stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=log, pass_fds=[write_fd], start_new_session=True,
                                    preexec_fn=_low_priority_child)
    except BaseException:
        os.close(read_fd)
        os.close(write_fd)
        raise
    os.close(write_fd)
    data, timed_out = b"", False
    launched = time.monotonic()
    deadline = launched + timeout_s
    try:
        while True:
            left = deadline - time.monotonic()
            # Cancelled: killed once it has started (its first report), not while bubblewrap is still
            # making its namespaces: a process killed then left the namespace's first process running
            # unsupervised, reparented to init, beyond the reach of kill_tree (seen in a test here).
            started = bool(data) or time.monotonic() - launched > START_GRACE_S
            if left <= 0 or (cancel is not None and cancel.is_set() and started):
                timed_out = True  # out of time, or cancelled: killed below either way
                break
            if not select.select([read_fd], [], [], min(left, 1.0))[0]:
                if proc.poll() is not None:
                    break  # it ended, and what it wrote has been read (a process it left may hold the pipe)
                continue
            chunk = os.read(read_fd, 65536)
            if not chunk:
                break  # every holder of the pipe's write end is gone
            if len(data) < MAX_REPORT_BYTES:
                data += chunk
    finally:
        if not timed_out:
            try:  # it has reported and is leaving: its own exit status, not our kill's
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        kill_tree(proc.pid)  # and whatever it left behind
        code: int | None
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            code = None
        os.close(read_fd)
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        text = ""
    return _events(data), timed_out, code, text


def _low_priority_child() -> None:
    confine.die_with_parent()
    os.nice(19)


def _tree(root: int) -> list[int]:
    """root's live descendants, parents before children."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(0), []):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL the process and everything under it, its own sessions included (bubblewrap's PID
    namespace dies with its first process; unconfined, a child that left the group is found by
    parentage): each found process is stopped first, so none forks away while the tree is read."""
    for _ in range(20):
        tree = _tree(pid)
        for p in [pid, *tree]:
            try:
                os.kill(p, signal.SIGSTOP)
            except OSError:
                pass
        if _tree(pid) == tree:
            break
    for p in [pid, *_tree(pid)]:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _events(data: bytes) -> list[dict]:
    out = []
    for line in data.decode(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and isinstance(event.get("event"), str):
            out.append(event)
    return out


def harvest(source: Path, destination: Path) -> tuple[int, tuple[str, ...]]:
    """Copy the Triton cache the process left at `source` into `destination` (triton_cache.copy_files:
    regular files with one name only, bounded in size, a file already there kept), each group file
    naming a file that is not there removed. Returns (cubins, kernel names) of what `destination`
    now holds from this source."""
    destination.mkdir(parents=True, exist_ok=True)
    held = triton_cache.copy_files(str(source), str(destination), MAX_CACHE_BYTES) or []
    for name in held:
        if os.path.basename(name).startswith("__grp__"):
            _repoint(destination / name)
    cubins = [name for name in held if name.endswith(".cubin")]
    return len(cubins), tuple(sorted({os.path.basename(name)[:-len(".cubin")] for name in cubins}))


def _repoint(group_file: Path) -> None:
    """A group names its files by absolute path: point each into the group's own folder; a group
    naming a file that is not there is removed (Triton would read it as a miss anyway)."""
    try:
        paths = json.loads(group_file.read_text()).get("child_paths")
        if isinstance(paths, list):
            return  # names only (Triton 3.7+ may write them so): nothing to point
        if not isinstance(paths, dict):
            raise ValueError("no child_paths")
        fixed = {str(name): str(group_file.parent / os.path.basename(str(path))) for name, path in paths.items()}
        if not all(os.path.isfile(p) for p in fixed.values()):
            raise ValueError("a file of the group is missing")
        group_file.write_text(json.dumps({"child_paths": fixed}))
    except (OSError, ValueError, AttributeError, TypeError):
        group_file.unlink(missing_ok=True)


def _count(value) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def _record(cache_dir: str, seconds: float, waited: float, events: list[dict], timed_out: bool, code: int | None,
            log: str, binaries: int, kernels: tuple[str, ...], count: int, timeout_s: float,
            cancelled: bool = False) -> AheadResult:
    by: dict[str, list[dict]] = {}
    for event in events:
        by.setdefault(event["event"], []).append(event)
    done = (by.get("done") or [{}])[-1]
    ran = [e for e in by.get("workload", []) if e.get("ran") is True]
    failed = [e for e in by.get("workload", []) if e.get("ran") is False]
    stand_ins = done.get("stand_ins") or (by.get("import_failed") or [{}])[-1].get("stand_ins") or {}
    utils = any(e.get("built") is True for e in by.get("utils", []))
    configs = sum(e["configs"] for e in by.get("autotuned", []) if isinstance(e.get("configs"), int))
    compiles = by.get("compiled", [])
    completed = bool(done) and done.get("completed") is True and not failed and len(ran) == count and not timed_out
    note = None
    if timed_out:
        stage = f"after {len(ran)} of {count} workloads" if "imported" in by else "while importing the kernel"
        note = (f"cancelled {stage}: the candidate's turn on the GPU came first" if cancelled
                else f"killed at its {timeout_s:.0f} s timeout {stage}")
    elif "import_failed" in by:
        note = f"importing the kernel failed: {by['import_failed'][-1].get('error')}"
    elif failed:
        first = failed[0]
        stage = "making its inputs" if first.get("stage") == "make_inputs" else "the call"
        on = " (inputs on the meta device: too large for the CPU)" if first.get("backing") == "meta" else ""
        note = f"workload {first.get('name')}: {stage} failed{on}: {first.get('error')}"
    elif not done:
        tail = " ".join(log.strip().splitlines()[-3:])[-400:] if log.strip() else "no output"
        note = f"the compile process ended (exit code {code}) before its report: {tail}"
    return AheadResult(cache_dir=cache_dir, seconds=round(seconds, 3), kernels=kernels, binaries=binaries,
                       configs=configs, failed_configs=_count(done.get("failed_configs")),
                       compiled=sum(1 for e in compiles if e.get("hit") is False),
                       cache_hits=sum(1 for e in compiles if e.get("hit") is True), completed=completed,
                       workloads_run=len(ran), workloads=count, note=note, timed_out=timed_out,
                       waited_s=round(waited, 3), utils=utils,
                       stand_ins={str(k): int(v) for k, v in stand_ins.items() if isinstance(v, int)})


# ---------------------------------------------------------------- beside a wait for the GPU

class AheadPass:
    """One candidate's compile-ahead, run on a thread while the candidate waits for its judge
    (another candidate holds the GPU). `take()` when the judge is its: the cache folder to seed
    the candidate's sandbox from if the pass finished with kernels compiled, else None, and the
    pass is cancelled (the sandbox compiles as it did before: nothing waits on the pass while
    the GPU is held). `close()` removes its folder once its thread is done."""

    def __init__(self, task: Task, source: str, target: GpuTarget, timeout_s: float):
        self.home = Path(tempfile.mkdtemp(prefix=HOME_PREFIX + "run-"))
        (self.home / "kernel.py").write_text(source)
        self.cancel = threading.Event()
        self.result: AheadResult | None = None
        self.thread = threading.Thread(target=self._run, args=(task, target, timeout_s), daemon=True,
                                       name="accelopt-compile-ahead")
        self.thread.start()

    def _run(self, task: Task, target: GpuTarget, timeout_s: float) -> None:
        try:
            self.result = compile_ahead(task, self.home / "kernel.py", None, self.home / CACHE, target, timeout_s,
                                        cancel=self.cancel)
        except Exception as exc:  # noqa: BLE001 - the sandbox compiles as before; say why in the record
            self.result = AheadResult(str(self.home / CACHE), 0.0, note=f"compile-ahead failed: {exc}"[:300])

    def wait(self, until: Callable[[], bool], poll_s: float = 0.1) -> bool:
        """Block until the pass ends or `until()` holds (a judge came free: the GPU must not wait on
        a pass); True where the pass ended. A candidate that queues for its judge only after its
        pass lets those whose kernels are compiled go first."""
        while self.thread.is_alive():
            if until():
                return False
            self.thread.join(poll_s)
        return True

    def take(self) -> AheadResult | None:
        """The finished pass's record where its cache holds kernels, else None; a pass still running
        is cancelled."""
        if self.thread.is_alive():
            self.cancel.set()
            return None
        done = self.result
        return done if done is not None and done.binaries else None  # a pass cut short keeps what it compiled

    def close(self) -> None:
        self.cancel.set()
        self.thread.join()
        shutil.rmtree(self.home, ignore_errors=True)
