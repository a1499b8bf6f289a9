"""The judge: the trusted side of the trust boundary.

A persistent process (one per GPU, or per core on the interpreter) started by pool.py as
`python judge.py`, one JSON request per line on stdin, one verdict line per request on a private
copy of stdout. It owns the seeds, the inputs, the reference, the expected outputs, the
comparison and every decision, and it never imports candidate code: each candidate runs in a
sandbox process of its own (sandbox.py) that is killed after that one candidate. Comparators
(baseline, parent) run in sandboxes of their own, kept for the same source only.

The evidence, in order (the first failure decides):
1. correctness on every workload x seed, fresh inputs per call, against outputs the judge
   computed itself; shape, dtype, NaN/Inf (unwritten outputs read as poison), the task's
   correctness rule (correctness.py: allclose, relative L2; packed fp4 bit for bit),
   inputs mutated (the judge sees the shared input memory), threads left running, the same
   call twice must agree;
2. ghost replay: with every Triton launch stubbed out the outputs must no longer be correct;
3. the trace of one call: no compute outside the candidate's Triton launches (GPU kernels or,
   on the interpreter, host ops that are not data movement);
4. timing in interleaved rounds with the comparators, on a GPU until every comparison is
   decided (stats.py); the last timed output of each round is checked, and the judge's own
   clock bounds what the sandbox reports;
5. correctness again after timing, on inputs never seen before.
"""

from __future__ import annotations

import collections
import hashlib
import importlib.util
import io
import itertools
import json
import math
import os
import pickle
import re
import secrets
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)

RESULT_MARK = "@@ACCELOPT_RESULT@@"
ERROR_CHARS = 1500
SPARES = 2              # warm sandboxes waiting for the next candidate (GPU)
# On the interpreter the spares start on the same cores that run (and time) the candidate, and
# a judge per core already runs: one spare hides the next start, a second only competes for CPU
# (two short runs' tests: 128 s -> 111 s wall on 2 cores).
CPU_SPARES = 1
COMPARATOR_CACHE = 4    # comparator sandboxes kept, keyed by source
READY_TIMEOUT_S = 120.0
# Calls per timed round at most: each takes 1 ms of cover plus an L2 flush whatever the kernel, and
# the rounds (at least 3), not the calls within one, are what the interval is made of.
MAX_REPS = 40
TIMING_SEED = 100       # timing inputs: never among the checked seeds
AFTER_SEED = 500        # the check after timing: inputs never seen before
SIGNED_SEED = 700       # the widened draw (Judge.wider): the task's inputs, non-negative ones given signs
# On the widened draw, atol may grow to this multiple of the reference's own rounding against
# float64: another order of the same arithmetic errs by about as much as the reference's order
# does; an answer computed otherwise (abs where the reference is ReLU) by the size of the values.
ROUNDING_SLACK = 4.0
# Timing rounds: at least MIN, then until every comparison is decided (stats.decided), at most MAX.
# The interpreter runs its minimum only: its times are a CPU emulation's wall clock, and more
# rounds of it buy nothing.
MIN_ROUNDS = {"cuda": 3, "cpu": 2}
MAX_ROUNDS_GPU = 15
# Inputs and reference outputs kept between requests, bounded by bytes: a slow reference
# (FlashInfer-Bench's attention references are Python loops taking seconds) runs once per
# workload x seed, while KernelBench-sized inputs (GBs) are never kept.
WARM_BYTES = 2 << 30    # a new comparator's first calls are sent with the checks up to this much input
REFERENCE_CACHE_BYTES = {"cuda": 1 << 30, "cpu": 256 << 20}
# The yardstick of memory-bound kernels: a device copy of a workload's bytes, timed beside them.
COPY = "copy_yardstick"  # its timings' key: no comparator of a request is named so
COPY_SOURCE = '''"""The judge's copy yardstick: half a workload's bytes read, half written."""


def copy_bytes(source, destination):
    destination.copy_(source)  # nothing handed back: a CUDA tensor received over IPC cannot be sent again
'''
# Host ops (interpreter) and GPU kernels that move data rather than compute.
_DATA_OPS = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "fill_", "zero_", "copy_", "clone", "to", "_to_copy", "contiguous", "view", "reshape", "_reshape_alias",
    "as_strided", "expand", "expand_as", "permute", "transpose", "t", "squeeze", "unsqueeze", "flatten",
    "unflatten", "narrow", "slice", "select", "split", "split_with_sizes", "chunk", "unbind", "stack", "cat",
    "detach", "alias", "lift_fresh", "resize_", "set_", "item", "_local_scalar_dense", "view_as", "movedim",
    "new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full", "arange", "type_as", "is_nonzero",
    "resolve_conj", "resolve_neg", "_unsafe_view", "index_select", "result_type", "numpy_T", "is_same_size",
    "record_stream", "pin_memory", "_pin_memory", "is_pinned", "empty_permuted", "repeat", "view_as_real",
}
# Index setup an honest kernel does with torch before its launches (prefix sums of lengths,
# searching segment starts, expanding indices): integer bookkeeping, not the task's compute.
# The ghost replay still catches a task whose whole answer is one of these.
_INDEX_OPS = {"cumsum", "cumsum_", "searchsorted", "repeat_interleave", "bucketize", "nonzero", "diff", "bincount"}
_INDEX_KERNELS = re.compile(r"cub::|DeviceScan|DeviceSelect|scan_kernel|searchsorted|repeat_interleave|bucketize|"
                            r"nonzero|compute_cuda_kernel", re.IGNORECASE)
_FLOAT_TYPES = re.compile(r"\b(float|double|Half|BFloat16|Float8\w*|complex)\b")
_INT_TYPES = re.compile(r"\b(int|long|short|unsigned|bool|signed char|int(8|16|32|64)_t)\b")


def _integer_bookkeeping(kernel: str) -> bool:
    """An ATen GPU kernel whose template types are all integers (`CUDAFunctor_add<int>`,
    `sub ... <long>`): index arithmetic such as indptr differences, not the task's float math."""
    return ("at::" in kernel or "at_cuda_detail" in kernel) and bool(_INT_TYPES.search(kernel)) \
        and not _FLOAT_TYPES.search(kernel)


_DATA_KERNELS = re.compile(r"Memcpy|Memset|copy|Copy|fill|Fill|zero|Zero|arange|CatArray|cat_|unrolled_elementwise"
                           r"_kernel<.*(copy|cast)", re.IGNORECASE)


def foreign_work(device: str, seen: list[str], own: list[str] | set[str]) -> list[str]:
    """What a call ran that is neither the candidate's own Triton kernels (`own`) nor data
    movement or index bookkeeping: GPU kernel names on a GPU, host aten ops on the interpreter.
    The one rule for the judge's traces and the ncu audit."""
    if device == "cuda":
        foreign = [n for n in seen if not any(n == k or n.startswith(k) for k in own)
                   and not _DATA_KERNELS.search(n) and not _INDEX_KERNELS.search(n) and not _integer_bookkeeping(n)]
    else:
        foreign = [n for n in seen if n.removeprefix("aten::") not in _DATA_OPS | _INDEX_OPS]
    return list(dict.fromkeys(foreign))


def _tail(text: str, limit: int = ERROR_CHARS) -> str:
    """Both ends of a long error: where it started and where it ended up."""
    text = text.strip()
    if len(text) <= limit:
        return text
    head = limit // 3
    return text[:head] + "\n...\n" + text[-(limit - head):]


# ---------------------------------------------------------------- what crosses the boundary

class _Unpickler(pickle.Unpickler):
    """Replies come from untrusted code: only tensors and plain data may be rebuilt."""

    ALLOWED = {("torch.multiprocessing.reductions", n) for n in (
        "rebuild_tensor", "rebuild_typed_storage", "rebuild_storage_filename", "rebuild_cuda_tensor",
        "rebuild_storage_empty", "rebuild_typed_storage_child")} | {
        ("torch", "Tensor"), ("torch", "Size"), ("torch", "device"), ("torch.storage", "UntypedStorage"),
        ("torch.storage", "TypedStorage"), ("torch", "UntypedStorage"), ("builtins", "complex")}

    def find_class(self, module, name):
        import torch

        if (module, name) in self.ALLOWED or (module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name}")


class SandboxFailure(Exception):
    def __init__(self, status: str, error: str, dead: bool = False):
        super().__init__(error)
        self.status, self.error, self.dead = status, error, dead


def _load_sibling(name: str, filename: str):
    """A file beside this one: run as the judge (a script), loaded by path, since the judge imports
    nothing of the accelopt package; imported as part of it (the pool reads RESULT_MARK), the
    package's own module, not a second copy."""
    if __package__:
        return importlib.import_module(f"{__package__}.{filename.removesuffix('.py')}")
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                     filename))
    assert spec is not None and spec.loader is not None  # a .py path has both
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


correctness = _load_sibling("accelopt_correctness", "correctness.py")  # the correctness rules (evaluators)
confine = _load_sibling("accelopt_confine", "confine.py")
stats = _load_sibling("accelopt_stats", "stats.py")  # the statistic the timing rounds stop on
triton_cache = _load_sibling("accelopt_triton_cache", "triton_cache.py")
ZYGOTE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zygote.py")
# Every verdict the judge returns, raised by the correctness rules too: one class, correctness.py's.
if TYPE_CHECKING:  # how mypy names it (the judge, a script, loads the file by path)
    from accelopt.tools.harness.correctness import Reject
else:
    Reject = correctness.Reject


def _host_pid(root: int, ns_pid: int) -> int:
    """The judge's name for a process the template (in a PID namespace of its own) calls
    `ns_pid`: the descendant of `root` whose innermost NSpid is it."""
    todo = [root]
    while todo:
        pid = todo.pop()
        kids = _children(pid)
        for kid in kids:
            try:
                with open(f"/proc/{kid}/status") as f:
                    nspids = next(line.split()[1:] for line in f if line.startswith("NSpid:"))
            except (OSError, StopIteration):
                continue
            if int(nspids[-1]) == ns_pid and len(nspids) > 1:
                return kid
        todo += kids
    raise SandboxFailure("runtime_error", f"the sandbox template's child {ns_pid} is not among its processes",
                         dead=True)


class Template:
    """The sandbox template (zygote.py): torch and Triton imported once, a fork per sandbox.
    Under bubblewrap unless the user chose to run candidates unconfined."""

    def __init__(self, root: str, confined: bool):
        self.confined = confined
        self.log_path = os.path.join(root, "template.log")
        mine, theirs = socket.socketpair()
        prefix = confine.bwrap_prefix(root) if confined else []
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen([*prefix, sys.executable, ZYGOTE, str(theirs.fileno())],
                                         pass_fds=[theirs.fileno()], cwd=root, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log, preexec_fn=confine.die_with_parent)
        theirs.close()
        self.control = mine
        self.buffer = b""
        self.ready = False

    def _line(self, deadline: float) -> dict:
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.control], [], [], left)[0]:
                raise SandboxFailure("timeout", "the sandbox template did not answer in time", dead=True)
            chunk = self.control.recv(65536)
            if not chunk:
                raise SandboxFailure("runtime_error", "the sandbox template died:\n" + self._log_tail(), dead=True)
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def _log_tail(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return _tail(f.read(), 1200)
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def spawn(self, home: str, env: dict, readable: list[str], fds: list[int], deadline: float) -> int:
        """Fork one sandbox; its pid as the judge sees it."""
        if not self.ready:
            self._line(deadline)  # {"ready": true}: torch and Triton are imported
            self.ready = True
        request = {"home": home, "env": env, "readable": readable, "confine": self.confined}
        try:
            socket.send_fds(self.control, [json.dumps(request).encode()], fds)
        except OSError:
            raise SandboxFailure("runtime_error", "the sandbox template died:\n" + self._log_tail(), dead=True) from None
        reply = self._line(deadline)
        if "pid" not in reply:
            raise SandboxFailure("runtime_error", f"the sandbox template refused: {reply.get('error')}", dead=True)
        return _host_pid(self.proc.pid, reply["pid"]) if self.confined else reply["pid"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.control.close()


class Forked:
    """A forked sandbox process, as subprocess.Popen would show it: the template reaps it and
    writes its wait status to a pipe this side reads."""

    def __init__(self, pid: int, status_fd: int):
        self.pid, self.status_fd = pid, status_fd
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self.status_fd], [], [], 0)[0]:
            self._read()
        return self.returncode

    def _read(self) -> None:
        data = os.read(self.status_fd, 4)
        os.close(self.status_fd)
        if len(data) < 4:  # the template died before reaping it: the sandbox died with it
            self.returncode = -9
            return
        status = int.from_bytes(data, sys.byteorder, signed=True)
        self.returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)

    def wait(self, timeout: float = 10.0) -> int | None:
        if self.returncode is None and select.select([self.status_fd], [], [], timeout)[0]:
            self._read()
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, 9)
            except ProcessLookupError:
                pass


# Where the judge's environment names its own folders: a sandbox gets folders of its own instead.
# Inductor writes TORCHINDUCTOR_CACHE_DIR into the environment of the first process that compiles
# (its cache_dir()), so once the judge had compiled, every later torch.compile comparator inherited
# the judge's cache, which a confined sandbox may read but not write (KernelBench's RMSNorm and
# HuberLoss on an H200: "Permission denied: .../judge/torchinductor_root/i7").
_OWN_FOLDERS = {"HOME": "", "TMPDIR": "", "TRITON_CACHE_DIR": "triton-cache",
                "TORCHINDUCTOR_CACHE_DIR": "inductor-cache"}


def sandbox_env(judge_env: dict[str, str], home: str) -> dict[str, str]:
    """A sandbox's environment: the judge's (already scrubbed of secrets by the pool), with every
    folder it may write inside its own home."""
    env = {k: v for k, v in judge_env.items() if k not in _OWN_FOLDERS}
    env.update({k: os.path.join(home, sub) if sub else home for k, sub in _OWN_FOLDERS.items()})
    return env


class Sandbox:
    """A handle on one sandbox process, forked from the template."""

    def __init__(self, template: Template, root: str, readable: list[str], deadline: float):
        from multiprocessing.connection import Connection

        self.home = tempfile.mkdtemp(prefix="sandbox-", dir=root)
        self.readable = readable
        env = sandbox_env(dict(os.environ), self.home)
        self.stderr_path = os.path.join(self.home, "stderr.log")
        mine, theirs = socket.socketpair()
        status_r, status_w = os.pipe()
        try:
            with open(self.stderr_path, "w") as err:
                pid = template.spawn(self.home, env, readable, [theirs.fileno(), err.fileno(), status_w], deadline)
        except BaseException:
            os.close(status_r)
            mine.close()
            raise
        finally:
            theirs.close()
            os.close(status_w)
        self.proc = Forked(pid, status_r)
        self.conn = Connection(mine.detach())
        self.ready = False
        self.pending = 0  # requests sent whose answers are not read yet
        self.started = time.monotonic()

    def stderr_tail(self, limit: int = 1200) -> str:
        try:
            with open(self.stderr_path, errors="replace") as f:
                return _tail(f.read(), limit)
        except OSError:
            return ""

    def _recv(self, deadline: float):
        while not self.conn.poll(max(0.0, min(1.0, deadline - time.monotonic()))):
            if self.proc.poll() is not None and not self.conn.poll(0):
                raise self._died()
            if time.monotonic() >= deadline:
                self.kill()
                raise SandboxFailure("timeout", "did not finish within its time limit; its process was killed",
                                     dead=True)
        try:
            data = self.conn.recv_bytes()
        except (EOFError, OSError):
            raise self._died() from None
        try:
            return _Unpickler(io.BytesIO(data)).load()
        except Exception as exc:  # noqa: BLE001 - a reply that is not plain data is the kernel's
            raise SandboxFailure("cheat_suspected", f"handed back something that is not a plain torch.Tensor "
                                 f"or plain data ({type(exc).__name__}: {exc})") from None

    def _died(self) -> SandboxFailure:
        code = self.proc.wait()
        if code is not None and code < 0:
            import signal

            return SandboxFailure("crashed", f"its process died with {signal.Signals(-code).name}:\n"
                                  f"{self.stderr_tail()}", dead=True)
        return SandboxFailure("runtime_error", f"its process exited with code {code}:\n{self.stderr_tail()}",
                              dead=True)

    def wait_ready(self, deadline: float) -> None:
        if not self.ready:
            kind, info = self._recv(deadline)
            if kind != "ready":
                raise SandboxFailure(info.get("status", "runtime_error"),
                                     "the sandbox could not start:\n" + info.get("error", ""), dead=True)
            self.ready = True

    def load(self, source_path: str, entry_point: str, deadline: float) -> dict:
        """The kernel's source, copied into the sandbox's own folder (the only one it can read
        that is not the system's, Python's or the task's), imported there."""
        path = os.path.join(self.home, "kernel.py")
        shutil.copyfile(source_path, path)
        return self.request("load", deadline, path=path, entry_point=entry_point)

    def load_later(self, source_path: str, entry_point: str, deadline: float) -> None:
        """`load`, its answer awaited later (`answer`)."""
        path = os.path.join(self.home, "kernel.py")
        shutil.copyfile(source_path, path)
        self.send("load", deadline, path=path, entry_point=entry_point)

    def seed_cache(self, compiled: str) -> None:
        """Start its Triton cache from `compiled`: what the same candidate's earlier sandbox
        compiled (its re-check on fresh inputs then compiles nothing again)."""
        triton_cache.copy(compiled, os.path.join(self.home, "triton-cache"))

    def request(self, op: str, deadline: float, **args) -> dict:
        self.send(op, deadline, **args)
        return self.answer(deadline)

    def send(self, op: str, deadline: float, **args) -> None:
        """A request whose answer is read later: the sandbox answers its requests in order, and
        reads them once it is ready (a sandbox still starting CUPTI is not waited for here)."""
        try:
            self.conn.send((op, args))
        except (BrokenPipeError, OSError):
            raise self._died() from None
        self.pending += 1

    def answer(self, deadline: float) -> dict:
        """The answer to the oldest request not yet answered."""
        self.wait_ready(deadline)
        kind, info = self._recv(deadline)
        self.pending -= 1
        if kind == "fail":
            if info.get("cuda_fault"):
                self.kill()
            raise SandboxFailure(info["status"], info["error"], dead=info.get("cuda_fault", False))
        return info

    def threads(self) -> int:
        """The OS's count of the process's threads: seen from outside, whatever the kernel patched."""
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
        except (OSError, StopIteration):
            return -1

    def others(self) -> tuple[float, int]:
        """(CPU seconds of children the sandbox has waited for, children alive now): work done
        in another process shows here, whatever the kernel patched inside its own."""
        pid = self.proc.pid
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            waited = (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")  # cutime + cstime
        except (OSError, IndexError, ValueError):
            waited = 0.0
        return waited, len(_children(pid))

    def kill(self, keep_cache: str | None = None) -> None:
        """End the process and remove its folder; `keep_cache`: first move its Triton cache there
        (the kernels it compiled, for the same candidate's audit: compiled once)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        try:
            self.conn.close()
        except OSError:
            pass
        cache = os.path.join(self.home, "triton-cache")
        if keep_cache and os.path.isdir(cache) and not os.path.exists(keep_cache):
            try:
                shutil.move(cache, keep_cache)
            except OSError:
                pass
        shutil.rmtree(self.home, ignore_errors=True)


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


class Sandboxes:
    """Warm spares: the next candidate's sandbox is forked from the template and warmed (a CUDA
    context, the timing marker) while the current one is judged. Comparator sandboxes are kept
    per source. Every sandbox may read the task's folder (the task's own reference, timed as a
    comparator, is loaded from there); a spare forked for another task's folder is replaced."""

    def __init__(self, device: str, confined: bool):
        self.device = device
        self.root = tempfile.mkdtemp(prefix="accelopt-judge-")
        # The judge's own temporary files, torch's shared-memory manager socket among them, go
        # beneath the folder the template can see: a sandbox connects to that socket to map the
        # judge's tensors (Landlock lets it connect, not read or write there).
        own = os.path.join(self.root, "judge")
        os.makedirs(own)
        os.environ["TMPDIR"] = own
        tempfile.tempdir = None
        self.confined = confined
        self.template = Template(self.root, confined)
        self.spares: collections.deque[Sandbox] = collections.deque()
        self.comparators: collections.OrderedDict[str, Sandbox] = collections.OrderedDict()

    def _new(self, readable: list[str]) -> Sandbox:
        if not self.template.alive():  # a template that died (killed, out of memory) is started again
            self.template.close()
            self.template = Template(self.root, self.confined)
        return Sandbox(self.template, self.root, readable, time.monotonic() + READY_TIMEOUT_S)

    def top_up(self, readable: list[str], count: int | None = None) -> None:
        """Spares for a task's folder, `count` of them (else SPARES on a GPU, CPU_SPARES)."""
        for box in [b for b in self.spares if b.readable != readable]:
            self.spares.remove(box)
            box.kill()
        while len(self.spares) < (count or (SPARES if self.device == "cuda" else CPU_SPARES)):
            self.spares.append(self._new(readable))

    def take(self, readable: list[str]) -> Sandbox:
        box = next((b for b in self.spares if b.readable == readable), None)
        if box is None:
            box = self._new(readable)
        else:
            self.spares.remove(box)
        self.top_up(readable)
        return box

    def comparator(self, source_path: str, entry_point: str, readable: list[str],
                   deadline: float) -> tuple[Sandbox, bool]:
        """(the comparator's sandbox, new): kept from an earlier request (answers it still owes
        are read before it is timed), or new, its load sent and not yet answered."""
        with open(source_path, "rb") as f:
            key = hashlib.sha256(f.read()).hexdigest() + entry_point + repr(readable)
        box = self.comparators.pop(key, None)
        if box is not None and box.proc.poll() is None:
            self.comparators[key] = box
            return box, False
        box = self.take(readable)
        box.load_later(source_path, entry_point, deadline)
        self.comparators[key] = box
        while len(self.comparators) > COMPARATOR_CACHE:
            self.comparators.popitem(last=False)[1].kill()
        return box, True

    def drop_comparators(self) -> None:
        for box in self.comparators.values():
            box.kill()
        self.comparators.clear()

    def close(self) -> None:
        for box in list(self.spares) + list(self.comparators.values()):
            box.kill()
        self.template.close()
        shutil.rmtree(self.root, ignore_errors=True)


# ---------------------------------------------------------------- correctness (correctness.py)

def _call_mode(req: dict) -> str:
    """How a sandbox runs a checked or timed call: profiled, except for the task's own reference
    (`trusted`), torch code by design, whose trace nothing checks (a profile nothing reads)."""
    return "normal" if req.get("trusted") else "trace"


def _judged(torch, outs, expected, req: dict, where: str) -> dict:
    """The task's correctness rule, as the request carries it (correctness.for_request)."""
    return correctness.for_request(req)(torch, outs, expected, where)




def _reference_failed(what: str, exc: BaseException, path: str) -> Reject:
    """One line that blames the task's reference (not the kernel): what raised, and where in
    reference.py, without the judge's traceback."""
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == path]
    at = f" at reference.py line {lines[-1]}" if lines else ""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return Reject("reference_error", f"the task's reference failed: {what} raised {type(exc).__name__}{at}"
                                     + (f": {message[:300]}" if message else ""))


def _copy(value):
    return value.clone() if hasattr(value, "clone") else value


# An input at least this large is kept as a keyed fingerprint of its bytes, not a copy:
# KernelBench's level-1 inputs reach 6.4 GB, and the judge, the candidate's sandbox and the
# comparators share one GPU; a host copy, the earlier answer, costs host memory of that size a call.
FINGERPRINT_BYTES = 256 << 20


def _kept(torch, value, limit: int = FINGERPRINT_BYTES):
    """What is kept of an input to find out later whether the kernel changed it
    (correctness.identical): a copy, or the fingerprint of a large tensor, keyed afresh."""
    if hasattr(value, "element_size") and value.numel() * value.element_size() >= limit:
        return correctness.fingerprint(torch, value, secrets.randbits(62))
    return _copy(value)


def _owned(torch, outs: list) -> list:
    """Copies of what the sandbox handed back, so its memory can go."""
    return [o.clone() if isinstance(o, torch.Tensor) else o for o in outs]


def _nbytes(values) -> int:
    items = values if isinstance(values, (tuple, list)) else [values]
    return sum(v.numel() * v.element_size() for v in items if hasattr(v, "element_size"))


@dataclass
class _Prepared:
    """One workload x seed: the inputs as make_inputs made them (never handed to a sandbox) and
    the reference's outputs on copies of them (None until a call needed them)."""
    inputs: tuple
    expected: object = None

    @property
    def nbytes(self) -> int:
        return _nbytes(self.inputs) + (0 if self.expected is None else _nbytes(self.expected))


class _ReferenceCache:
    """Prepared inputs and expected outputs by key, least recently used evicted first, at most
    `limit` bytes in all; an entry larger than the limit is not kept."""

    def __init__(self) -> None:
        self.entries: collections.OrderedDict[tuple, _Prepared] = collections.OrderedDict()
        self.sizes: dict[tuple, int] = {}  # as counted when kept: an entry grows once its outputs come
        self.bytes = 0

    def get(self, key: tuple) -> _Prepared | None:
        entry = self.entries.get(key)
        if entry is not None:
            self.entries.move_to_end(key)
        return entry

    def _drop(self, key: tuple) -> None:
        if self.entries.pop(key, None) is not None:
            self.bytes -= self.sizes.pop(key)

    def put(self, key: tuple, entry: _Prepared, limit: int) -> bool:
        """Keep (or re-count, once its expected outputs came) `entry`; False: too large to keep."""
        self._drop(key)
        size = entry.nbytes
        if size > limit:
            return False
        while self.entries and self.bytes + size > limit:
            self._drop(next(iter(self.entries)))
        self.entries[key], self.sizes[key] = entry, size
        self.bytes += size
        return True


@dataclass
class _WorkloadRounds:
    """One workload's share of the timing rounds: who is timed on it, how many calls per round,
    and what the rounds gathered."""
    workload: dict
    names: list[str]
    reps: int
    pooled: dict = field(default_factory=dict)     # name -> primary/kernel/event samples, metric
    rounds: dict = field(default_factory=dict)     # name -> median of each round's primary samples
    fresh_vs_seen: list = field(default_factory=list)
    child_cpu_s: float = 0.0   # the candidate's children's CPU time that grew over its calls
    children: int = 0          # its children alive after its last call

    def __post_init__(self):
        self.pooled = {n: collections.defaultdict(list) for n in self.names}
        self.rounds = {n: [] for n in self.names}


def _round_limits(req: dict) -> tuple[int, int]:
    """(minimum, cap) of the timing rounds; on the interpreter the cap is the minimum."""
    low = max(1, int(req.get("min_rounds") or MIN_ROUNDS.get(req["device"], 2)))
    if req["device"] != "cuda":
        return low, low
    return low, max(low, int(req.get("max_rounds") or MAX_ROUNDS_GPU))


class Judge:
    def __init__(self) -> None:
        import torch
        import torch.multiprocessing as tmp

        tmp.set_sharing_strategy("file_system")
        self.torch = torch
        self.references: dict = {}
        self.costs_checked: dict[str, dict[str, dict[str, float]]] = {}
        self.prepared = _ReferenceCache()
        self.boxes: Sandboxes | None = None
        self.readable: list[str] = []
        self.seen: set[str] = set()
        self.phases: dict[str, float] = {}
        self.step, self.step_began = "load", 0.0

    def reference(self, path: str):
        if path not in self.references:
            spec = importlib.util.spec_from_file_location(f"accelopt_reference_{len(self.references)}", path)
            assert spec is not None and spec.loader is not None  # a .py path has both
            module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
            except BaseException as exc:  # noqa: BLE001 - the task's file, not the judge, is broken
                raise _reference_failed("importing reference.py", exc, path) from None
            self.references[path] = module
        return self.references[path]

    def inputs(self, ref, req: dict, workload: dict, seed: int):
        try:
            return ref.make_inputs(workload["params"], seed, req["device"], req["dtype"])
        except Exception as exc:  # noqa: BLE001 - the reference's fault, never the kernel's
            raise _reference_failed(f"make_inputs (workload {workload['name']}, seed {seed})", exc,
                                    req["reference_path"]) from None

    def expected(self, ref, req: dict, inputs, where: str):
        """The reference's outputs, computed on copies before the kernel sees the inputs."""
        try:
            out = ref.reference(*[_copy(t) for t in inputs])
        except Exception as exc:  # noqa: BLE001 - the reference's fault, never the kernel's
            raise _reference_failed(f"reference ({where})", exc, req["reference_path"]) from None
        odd = [type(o).__name__ for o in (out if isinstance(out, (tuple, list)) else [out])
               if not isinstance(o, self.torch.Tensor)]
        if odd:
            raise Reject("reference_error", f"the task's reference failed: reference ({where}) returned "
                                            f"{', '.join(odd)}; it must return a tensor or a tuple of tensors")
        return out

    def prepare(self, ref, req: dict, workload: dict, seed: int, where: str | None = None, expect: bool = True):
        """(inputs, expected) for one workload x seed: fresh inputs and, with `expect`, the reference's
        outputs on copies of them. Both are kept between requests (_ReferenceCache), keyed by the
        reference file and its mtime, device, dtype, workload params and seed; the caller always
        gets clones of kept inputs, since a kernel may write into what it is handed."""
        path = req["reference_path"]
        key = (path, os.stat(path).st_mtime_ns, req["device"], req["dtype"],
               json.dumps(workload["params"], sort_keys=True), seed)
        entry = self.prepared.get(key) or _Prepared(tuple(self.inputs(ref, req, workload, seed)))
        if expect and entry.expected is None:
            entry.expected = self.expected(ref, req, entry.inputs, where or f"workload {workload['name']} seed {seed}")
        kept = self.prepared.put(key, entry, REFERENCE_CACHE_BYTES.get(req["device"], REFERENCE_CACHE_BYTES["cpu"]))
        inputs = tuple(_copy(t) for t in entry.inputs) if kept else entry.inputs
        return inputs, (entry.expected if expect else None)

    def check_costs(self, ref, req: dict) -> dict[str, dict[str, float]]:
        """flops() and bytes_moved() feed the roofline that can reject a kernel as too fast: each
        must return a finite count >= 0 for every workload. Checked once per reference and workloads;
        returned per workload, so the run's process need not import the reference (and torch)."""
        key = json.dumps([req["reference_path"], req["dtype"], req["workloads"]], sort_keys=True)
        if key in self.costs_checked:
            return self.costs_checked[key]
        costs: dict[str, dict[str, float]] = {}
        for workload in req["workloads"]:
            for name in ("flops", "bytes_moved"):
                what = f"{name}(workload {workload['name']})"
                try:
                    value = float(getattr(ref, name)(workload["params"], req["dtype"]))
                except Exception as exc:  # noqa: BLE001 - the reference's fault, never the kernel's
                    raise _reference_failed(what, exc, req["reference_path"]) from None
                if not 0.0 <= value < float("inf"):  # NaN fails both
                    raise Reject("reference_error", f"the task's reference failed: {what} returned {value}; it must "
                                                    "return a finite count >= 0")
                costs.setdefault(workload["name"], {})[name] = value
        self.costs_checked[key] = costs
        return costs

    def _box_failure(self, f: SandboxFailure, where: str, whose: str = "") -> Reject:
        return Reject(f.status, f"{where}{whose}: {f.error}")

    # -------------------------------------------------------------- evidence

    @staticmethod
    def _foreign(req: dict, seen: list[str], launched: list[str], where: str) -> None:
        """Compute outside the candidate's own Triton launches rejects; data movement is allowed.
        The task's own reference, timed as a kernel (`trusted`), is torch code by design."""
        if req.get("trusted"):
            return
        foreign = foreign_work(req["device"], seen, launched)
        if foreign:
            raise Reject("cheat_suspected", f"{where}: compute outside the Triton launches: "
                         + ", ".join(foreign[:8]) + (" ..." if len(foreign) > 8 else "")
                         + " (only the kernel's Triton kernels and data movement may run)")

    def _check_call(self, box: Sandbox, req, ref, inputs, expected, where: str, deadline: float,
                    threads0: int, errors: dict | None) -> list:
        torch = self.torch
        originals = [_kept(torch, t) for t in inputs]
        try:
            reply = box.request("call", deadline, inputs=list(inputs), where=where, mode=_call_mode(req))
        except SandboxFailure as f:  # the sandbox's own message names the call already (sandbox._invoke)
            raise Reject(f.status, f.error if f.error.startswith(where) else f"{where}: {f.error}") from None
        outs = _owned(torch, reply["outputs"])
        del reply["outputs"]
        self._foreign(req, reply["trace"] or [], reply["known"], where)
        self.seen.update(reply["trace"] or [])
        if reply["threads"] > 0 or (threads0 > 0 and box.threads() > threads0):
            raise Reject("cheat_suspected", f"{where}: the kernel left {max(reply['threads'], 1)} thread(s) "
                                            "running after the call; work must not escape the call")
        worst = _judged(torch, outs, expected, req, where)
        if errors is not None:
            for key, value in worst.items():
                errors[key] = max(errors.get(key, 0.0), value)
        for i, (now, before) in enumerate(zip(inputs, originals)):
            if isinstance(now, torch.Tensor) and not correctness.identical(torch, now, before):
                raise Reject("input_mutated", f"{where}: input {i} was modified by the kernel")
        return outs

    def check(self, box, req, ref, seeds, deadline, errors=None, twice: bool = False) -> int:
        checked = 0
        threads0 = -1
        for workload in req["workloads"]:
            for seed in seeds:
                where = f"workload {workload['name']} seed {seed}"
                inputs, expected = self.prepare(ref, req, workload, seed, where)  # the reference first, on copies
                outs = self._check_call(box, req, ref, inputs, expected, where, deadline, threads0, errors)
                if threads0 < 0:
                    threads0 = box.threads()
                if twice and checked == 0:  # the same call again must agree with the first
                    before = box.others()
                    again = self._check_call(box, req, ref, inputs, expected, where + " (again)", deadline,
                                             threads0, None)
                    if not req.get("trusted"):
                        _same_processes(before, box.others(), where + " (again)")
                    try:  # allclose whatever the task's rule: two calls must agree element by element
                        correctness.AllClose(req["atol"], req["rtol"], req.get("required_matched_ratio"))(
                            self.torch, again, outs, where)
                    except Reject as r:
                        raise Reject("cheat_suspected", f"{where}: outputs differ between identical calls: "
                                                        f"{r.error}") from None
                    del again
                checked += 1
                del inputs, expected, outs
                self._give_back_gpu_memory(req)
        return checked

    def wider(self, box, req, ref, deadline: float) -> str | None:
        """A task may draw only values >= 0 for an input its reference is defined on everywhere
        (KernelBench's torch.rand): a kernel computing abs where the reference is ReLU passes every
        such draw. So per workload, one more draw of the task's own inputs, each floating input
        that came out all >= 0 given random signs; where the reference's outputs on it are finite
        (it is defined there), the kernel must match them. Returns the evidence, or None when no
        input was widened (the task's draws already have both signs)."""
        torch = self.torch
        widened = []
        for workload in req["workloads"]:
            seed = req["seed_offset"] + SIGNED_SEED
            inputs, _ = self.prepare(ref, req, workload, seed, expect=False)
            flipped = [_signed(torch, t, seed * 1000 + i) if _non_negative(torch, t) else None
                       for i, t in enumerate(inputs)]
            if not any(t is not None for t in flipped):
                continue
            inputs = tuple(t if f is None else f for t, f in zip(inputs, flipped))
            where = (f"workload {workload['name']} seed {seed} with the signs of its non-negative inputs "
                     "drawn at random")
            try:
                expected = self.expected(ref, req, inputs, where)
            except Reject:
                continue  # the reference is not defined there: nothing to hold the kernel to
            if not _finite(torch, expected):
                continue
            try:
                try:
                    self._check_call(box, req, ref, inputs, expected, where, deadline, -1, None)
                except Reject as r:
                    # Signs bring cancellation: sums near zero, where any other order of float
                    # arithmetic misses the task's tolerance (set for its own draws). What the
                    # reference's own order costs here, measured against float64, widens atol.
                    slack = self.own_rounding(ref, req, inputs, expected) if r.status == "wrong_output" else None
                    if not slack or slack * ROUNDING_SLACK <= (req.get("atol") or 0.0):
                        raise
                    atol = slack * ROUNDING_SLACK
                    self._check_call(box, {**req, "atol": atol}, ref, inputs, expected,
                                     f"{where}, atol widened to {atol:.3g} ({ROUNDING_SLACK:g}x the reference's own "
                                     f"rounding, {slack:.3g} against float64)", deadline, -1, None)
            except Reject as r:
                if r.status in ("wrong_output", "nan", "shape_mismatch", "dtype_mismatch"):
                    raise Reject(r.status, f"correct on the task's own draws (every value >= 0 in some inputs), "
                                           f"wrong where the reference is defined too: {r.error}") from None
                raise
            widened.append(workload["name"])
            del inputs, expected
            self._give_back_gpu_memory(req)
        return (f"correct with signed values in the inputs the task draws only >= 0 ({', '.join(widened)})"
                if widened else None)

    def own_rounding(self, ref, req: dict, inputs, expected) -> float | None:
        """The largest difference between the reference's outputs and the same reference run on
        float64 copies of its floating inputs: the rounding its own order of arithmetic makes on
        these inputs. None where it cannot be told (the reference fails or runs out of memory in
        float64, or its outputs differ in number or shape)."""
        torch = self.torch
        narrow = (torch.float16, torch.bfloat16, torch.float32)
        try:
            wide = [t.double() if isinstance(t, torch.Tensor) and t.dtype in narrow else t for t in inputs]
            exact = ref.reference(*wide)
            del wide
            outs = list(expected) if isinstance(expected, (tuple, list)) else [expected]
            exacts = list(exact) if isinstance(exact, (tuple, list)) else [exact]
            if len(outs) != len(exacts):
                return None
            worst = 0.0
            for o, e in zip(outs, exacts):
                if not (isinstance(o, torch.Tensor) and o.is_floating_point()):
                    continue
                if not isinstance(e, torch.Tensor) or e.shape != o.shape:
                    return None
                for a, b in zip(o.reshape(-1).split(1 << 24), e.reshape(-1).split(1 << 24)):  # 128 MB at a time
                    d = (a.double() - b.double()).abs()
                    d = d[torch.isfinite(d)]
                    worst = max(worst, float(d.max()) if d.numel() else 0.0)
            return worst
        except Exception:  # noqa: BLE001 - out of memory, or a reference that needs its own dtype
            return None
        finally:
            self._give_back_gpu_memory(req)

    def _give_back_gpu_memory(self, req: dict) -> None:
        """What this process's caching allocator freed goes back to the GPU: the sandboxes, in other
        processes, allocate from the same device. Inputs handed to a sandbox stay allocated here
        until it lets go of them and this process collects them (torch's CUDA IPC)."""
        if req["device"] == "cuda":
            self.torch.cuda.ipc_collect()
            self.torch.cuda.empty_cache()

    def ghost(self, box, req, ref, deadline) -> str:
        """With every Triton launch stubbed out, a kernel whose outputs are still correct did its
        work somewhere else. Skipped where a stub could pass honestly (outputs all zero)."""
        torch = self.torch
        workload = req["workloads"][0]
        inputs, expected = self.prepare(ref, req, workload, AFTER_SEED + 1, "ghost replay")
        refs = list(expected) if isinstance(expected, (tuple, list)) else [expected]
        if any(bool((correctness.bits(torch, r) == 0).all()) for r in refs if isinstance(r, torch.Tensor)):
            return "ghost replay skipped: a reference output is all zeros"
        try:
            reply = box.request("call", deadline, inputs=list(inputs), mode="ghost", where="ghost replay")
        except SandboxFailure:
            return "ghost replay: the kernel fails with its launches stubbed out"
        if not reply["launched"]:
            raise Reject("cheat_suspected", "no Triton kernel was launched by the call (launches stubbed: "
                                            "nothing to stub); the work must run in a Triton kernel")
        try:
            _judged(torch, _owned(torch, reply["outputs"]), expected, req, "ghost replay")
        except Reject:
            return f"ghost replay: outputs wrong with the launches of {', '.join(reply['launched'])} stubbed out"
        raise Reject("cheat_suspected", f"outputs still correct with the Triton launches stubbed out "
                                        f"({', '.join(reply['launched'])}): the work is done outside Triton")

    # -------------------------------------------------------------- timing

    def _time_round(self, box, req, ref, workload, r: int, reps: int, deadline: float, check: bool,
                    copy: bool = False) -> dict:
        """One function's share of round r. Every timed call of the candidate gets inputs it has
        not seen before, and its outputs are checked (`check`): on the interpreter every call's,
        on a GPU the last call's, whose values were copied into the buffers the earlier calls used.
        The copy yardstick (`copy`) runs on buffers of the workload's bytes, not on its inputs."""
        torch = self.torch
        where = f"workload {workload['name']} timed call (round {r})"
        if req["device"] != "cuda":  # interpreter: the judge's own clock around each call
            samples = []
            for i in range(req["interpreter_reps"]):
                inputs, expected = self._fresh(ref, req, workload, TIMING_SEED + r * req["interpreter_reps"] + i)
                start = time.perf_counter()
                # traced like the checked calls (every function alike): interpreter times are labelled
                # wall clock anyway, and an untraced call is the one a kernel would cheat in
                reply = box.request("call", deadline, inputs=list(inputs), where="timed call", poison=check,
                                    mode=_call_mode(req))
                samples.append((time.perf_counter() - start) * 1e6)
                if check:
                    _check_timed(torch, req, _owned(torch, reply["outputs"]), expected, where)
                    self._foreign(req, reply["trace"] or [], reply["known"], where)
            return {"primary": samples, "metric": "interpreter_wall"}
        if copy:
            (inputs, _), (fresh, expected) = self._copy_inputs(req, ref, workload), (None, None)
        else:
            inputs, _ = self._fresh(ref, req, workload, TIMING_SEED + 2 * r, expect=False)
            fresh, expected = self._fresh(ref, req, workload, TIMING_SEED + 2 * r + 1, expect=check)
        reply = box.request("time_calls", deadline, inputs=list(inputs), reps=reps,
                            fresh=None if fresh is None else list(fresh))
        spans = reply["span_us"]
        primary = spans if len(spans) >= max(2, reps // 2) else reply["event_us"]
        if check:
            _check_timed(torch, req, _owned(torch, reply["outputs"]), expected, where)
            self._foreign(req, reply["kernels"], reply["known"], where)
            self.seen.update(reply["kernels"])
        fresh_vs_seen = None
        if check and reply.get("complete") and len(spans) >= 3:
            fresh_vs_seen = (spans[-1], statistics.median(spans[:-1]))
        return {"primary": primary, "kernel": reply["kernel_us"], "event": reply["event_us"],
                "metric": "gpu_span" if primary is spans else "cuda_event", "fresh_vs_seen": fresh_vs_seen}

    def _fresh(self, ref, req, workload, seed: int, expect: bool = True):
        return self.prepare(ref, req, workload, seed, expect=expect)

    def _outside(self, box, inputs, est_us: float, deadline: float) -> float:
        n = int(min(200, max(3, 20_000 / max(est_us, 1.0))))
        start = time.perf_counter()
        box.request("batch", deadline, inputs=list(inputs), n=0)
        overhead = time.perf_counter() - start
        start = time.perf_counter()
        box.request("batch", deadline, inputs=list(inputs), n=n)
        return max(0.0, time.perf_counter() - start - overhead) * 1e6 / n

    @staticmethod
    def _copy_half(req, ref, workload) -> int:
        """Bytes the copy yardstick reads, and writes: half the workload's bytes_moved each."""
        return int(float(ref.bytes_moved(workload["params"], req["dtype"])) // 2)

    def _copy_inputs(self, req, ref, workload) -> tuple[list, None]:
        """The copy yardstick's (source, destination)."""
        half = self._copy_half(req, ref, workload)
        return [self.torch.empty(half, dtype=self.torch.uint8, device="cuda") for _ in range(2)], None

    def timing(self, boxes: dict, req, ref, deadline: float) -> tuple[dict, dict]:
        """Rounds are the outer loop: in round r every workload, each function in rotating order.
        From the minimum on (_round_limits), the rounds stop once the candidate's comparison with
        every comparator (not the copy yardstick) is decided (stats.decided, req["noise_floor"]),
        else at the cap, or where another round would not fit in the time left. Returns the
        timings, per function and workload, and what ran: {"ran", "stopped", ...}."""
        low, high = _round_limits(req)
        floor = float(req.get("noise_floor", stats.NOISE_FLOOR))
        plans = [self._plan_rounds(boxes, req, ref, workload, deadline) for workload in req["workloads"]]
        comparators = [n for n in boxes if n not in ("candidate", COPY)]
        last = boxes["candidate"].others()
        ran, stopped = 0, "cap"
        widths: dict[int, float] = {}  # after each round: the widest interval's share of its speedup
        for r in range(high):
            began = time.monotonic()
            for plan in plans:
                last = self._one_round(boxes, req, ref, plan, r, deadline, last)
            ran = r + 1
            if ran < low:
                continue
            if req["device"] != "cuda":
                stopped = "interpreter"
            elif not comparators:
                stopped = "no_comparators"
            elif self._decided(plans, comparators, floor, widths, ran):
                stopped = "decided"
            elif stats.stalled(widths):
                stopped = "stalled"
            elif ran < high and time.monotonic() + 2 * (time.monotonic() - began) > deadline:
                stopped = "time_limit"  # fewer rounds, rather than a verified candidate timed out
            else:
                continue
            break
        out: dict = {name: {} for name in boxes}
        for plan in plans:
            for name, summary in self._after_rounds(boxes, req, ref, plan, deadline).items():
                out[name][plan.workload["name"]] = summary
        return out, {"ran": ran, "stopped": stopped, "min_rounds": low, "max_rounds": high, "noise_floor": floor}

    def _plan_rounds(self, boxes: dict, req, ref, workload, deadline: float) -> _WorkloadRounds:
        """Who is timed on the workload, and how many calls per round: on a GPU enough for about
        rep_ms of timed work, estimated from a few calls of the candidate."""
        # the copy times on buffers of its own; a workload that moves no bytes has none
        names = [n for n in boxes if n != COPY or self._copy_half(req, ref, workload) >= 1]
        reps = 10
        if req["device"] == "cuda":
            est = self._time_round(boxes["candidate"], req, ref, workload, -1, 3, deadline, check=False)
            self._give_back_gpu_memory(req)
            reps = int(min(MAX_REPS, max(10, req["rep_ms"] * 1e3 / max(statistics.median(est["primary"]), 1.0))))
        return _WorkloadRounds(workload=workload, names=names, reps=reps)

    def _one_round(self, boxes: dict, req, ref, plan: _WorkloadRounds, r: int, deadline: float,
                   last: tuple[float, int]) -> tuple[float, int]:
        """Round r of one workload, every function in its turn. `last`: the candidate's children
        as last read (Sandbox.others); what they grew by since is charged to this workload, so
        no work in another process falls between two readings. Returns the new reading."""
        names = plan.names
        for name in names[r % len(names):] + names[: r % len(names)]:
            try:
                got = self._time_round(boxes[name], req, ref, plan.workload, r, plan.reps, deadline,
                                       check=name == "candidate", copy=name == COPY)
            except SandboxFailure as f:
                whose = "" if name == "candidate" else f" (comparator {name!r}, not the kernel under test)"
                raise Reject(f.status, f"while timing{whose}: {f.error}") from None
            self._give_back_gpu_memory(req)  # the round's inputs and outputs
            if name == "candidate":
                now = boxes["candidate"].others()
                plan.child_cpu_s += now[0] - last[0]
                plan.children, last = now[1], now
            for key in ("primary", "kernel", "event"):
                plan.pooled[name][key] += got.get(key) or []
            plan.pooled[name]["metric"] = got["metric"]
            plan.rounds[name].append(statistics.median(got["primary"]))
            if got.get("fresh_vs_seen"):
                plan.fresh_vs_seen.append(got["fresh_vs_seen"])
        return last

    @staticmethod
    def _decided(plans: list[_WorkloadRounds], comparators: list[str], floor: float,
                 widths: dict[int, float], ran: int) -> bool:
        """Every comparison of the candidate decided, on the rounds so far (stats.py); records
        the widest interval's share of its speedup in `widths[ran]`."""
        mine = {p.workload["name"]: p.rounds["candidate"] for p in plans}
        decided, widths[ran] = True, 0.0
        for name in comparators:
            theirs = {p.workload["name"]: p.rounds[name] for p in plans if name in p.rounds}
            ratios = stats.round_ratios(mine, theirs)
            if not ratios:
                widths[ran] = math.inf
                return False
            iv = stats.interval(ratios)
            widths[ran] = max(widths[ran], stats.width(iv))
            decided = decided and stats.decided(iv, floor)
        return decided

    def _after_rounds(self, boxes: dict, req, ref, plan: _WorkloadRounds, deadline: float) -> dict:
        """The workload's checks over all its rounds, then each function's summary."""
        where = f"workload {plan.workload['name']} timed calls"
        if not req.get("trusted"):
            _same_processes((0.0, 0), (plan.child_cpu_s, plan.children), where)
        _fresh_not_slower(plan.fresh_vs_seen, where)
        inputs = self._fresh(ref, req, plan.workload, TIMING_SEED, expect=False)[0]
        shape = _largest_shape(inputs)
        out = {}
        for name in plan.names:
            p = plan.pooled[name]
            summary = _summary(p["primary"])
            summary.update(round_medians_us=plan.rounds[name], metric=p["metric"], input_shape=shape)
            if req["device"] == "cuda":
                summary["kernel_us"] = statistics.median(p["kernel"]) if p["kernel"] else None
                summary["event_us"] = statistics.median(p["event"]) if p["event"] else None
                if name == "candidate":  # the bound on what a candidate claims; comparators are trusted
                    summary["outside_us"] = self._outside(boxes[name], inputs, summary["median_us"], deadline)
                summary["disagreement"] = _disagreement(summary)
            out[name] = summary
        return out

    # -------------------------------------------------------------- one request

    def evaluate(self, req: dict) -> dict:
        ref = self.reference(req["reference_path"])  # a broken task fails before any sandbox starts
        costs = self.check_costs(ref, req)
        try:  # the task's rule exists (tools/task.py validates it; a hand-written request may not)
            correctness.for_request(req)
        except correctness.UnknownCorrectness as exc:
            raise Reject("reference_error", f"the task's correctness rule: {exc}") from None
        if self.boxes is None:
            self.boxes = Sandboxes(req["device"], confined=not confine.unconfined())
        self.readable = readable = readable_for(req)
        deadline = time.monotonic() + req["timeout_s"]
        self.seen = set()
        box = self.boxes.take(readable)
        if req.get("triton_cache"):
            box.seed_cache(req["triton_cache"])
        self.phases = {}  # seconds per finished step: where an evaluation's time goes
        self.step, self.step_began = "load", time.monotonic()
        try:
            return {**self._evaluate(box, req, ref, deadline), "costs": costs}
        except (Reject, SandboxFailure) as failure:
            if failure.status == "timeout":  # which step ran out of time, and what the others took
                failure.error += f" ({self._progress(req['timeout_s'])})"
            raise
        finally:
            box.kill(keep_cache=req.get("keep_cache"))

    def _next_step(self, name: str) -> None:
        now = time.monotonic()
        self.phases[self.step] = round(now - self.step_began, 3)
        self.step, self.step_began = name, now

    def _progress(self, limit_s: float) -> str:
        done = ", ".join(f"{name} {s:.1f} s" for name, s in self.phases.items()) or "none"
        return (f"limit {limit_s:.0f} s; ran out in step {self.step!r} after "
                f"{time.monotonic() - self.step_began:.1f} s; finished steps: {done}")

    def _checks(self, box: Sandbox, req: dict, ref, deadline: float) -> tuple[list[str], int, dict]:
        """Correctness on fresh inputs, twice, outputs poisoned; then the ghost replay and the trace
        checks (not for the trusted reference). Returns (evidence, input sets checked, errors)."""
        evidence = []
        seeds = [req["seed_offset"] + s for s in range(req["seeds"])]
        errors: dict = {}
        checked = self.check(box, req, ref, seeds, deadline, errors, twice=True)
        evidence.append(f"correct on {checked} fresh input sets, outputs poisoned, inputs unchanged, "
                        "identical calls agree")
        if not req.get("trusted"):
            widened = self.wider(box, req, ref, deadline)
            if widened:
                evidence.append(widened)
        if not req.get("trusted"):
            self._next_step("ghost")
            evidence.append(self.ghost(box, req, ref, deadline))
            evidence.append("every checked call traced: no compute outside the kernel's Triton launches "
                            "and data movement; no work in other processes")
        return evidence, checked, errors

    def _start_comparators(self, req: dict, ref, deadline: float) -> dict[str, Sandbox]:
        """Every comparator's sandbox (and the copy yardstick's) with its load sent; a new one also
        gets one call per workload (small enough inputs) sent, so its kernels compile now."""
        sandboxes = self.boxes
        assert sandboxes is not None  # evaluate starts them first
        sources = {name: (path, req["entry_point"]) for name, path in (req.get("compare") or {}).items()}
        if req.get("copy_yardstick") and req["device"] == "cuda":
            path = os.path.join(sandboxes.root, "copy_yardstick.py")
            with open(path, "w") as f:
                f.write(COPY_SOURCE)
            sources[COPY] = (path, "copy_bytes")
        boxes: dict[str, Sandbox] = {}
        self.warming: list = []
        for name, (path, entry) in sources.items():
            try:
                other, new = sandboxes.comparator(path, entry, self.readable, deadline)
                boxes[name] = other
                if new:  # loading; its first calls follow the load
                    for workload in req["workloads"] if req["device"] == "cuda" else []:
                        inputs = self._warm_inputs(req, ref, workload, copy=name == COPY)
                        if inputs is not None:  # kept until answered: the sandbox maps them
                            self.warming.append(inputs)
                            other.send("batch", deadline, inputs=list(inputs), n=1)
            except SandboxFailure as f:
                raise _comparator_failed(name, f) from None
        return boxes

    def _warm_inputs(self, req: dict, ref, workload: dict, copy: bool):
        """A comparator's first call's inputs: the first timing round's, which the judge keeps
        (prepare); None where they are too large to hold beside the checks."""
        if copy:
            half = self._copy_half(req, ref, workload)
            return self._copy_inputs(req, ref, workload)[0] if 1 <= half <= WARM_BYTES // 2 else None
        inputs, _ = self._fresh(ref, req, workload, TIMING_SEED, expect=False)
        return inputs if _nbytes(inputs) <= WARM_BYTES else None

    def _await_comparators(self, boxes: dict[str, Sandbox], deadline: float) -> None:
        """Every answer the comparators owe (their loads and first calls), before any timing."""
        for name, other in boxes.items():
            try:
                while name != "candidate" and other.pending:
                    other.answer(deadline)
            except SandboxFailure as f:
                raise _comparator_failed(name, f) from None
        self.warming.clear()

    def _evaluate(self, box: Sandbox, req: dict, ref, deadline: float) -> dict:
        try:
            box.load(req["source_path"], req["entry_point"], deadline)
        except SandboxFailure as f:
            raise Reject(f.status, f.error) from None
        self._next_step("checks")
        # The comparators load and make their first calls (compiling their kernels) while the
        # candidate is checked: nothing is timed until every one of them has answered.
        boxes = {"candidate": box, **({} if req.get("check_only") else self._start_comparators(req, ref, deadline))}
        # A candidate that fails leaves them owing answers: the next request reads those first.
        evidence, checked, errors = self._checks(box, req, ref, deadline)
        if req.get("check_only"):
            self._next_step("done")
            return {"status": "verified", "error": None, "checks": checked, "evidence": evidence,
                    "phases_s": self.phases}
        self._next_step("comparators")
        self._await_comparators(boxes, deadline)
        self._next_step("timing")
        timings, rounds = self.timing(boxes, req, ref, deadline)
        self._next_step("after_check")
        evidence.append("timed calls checked against the judge's own expected outputs")
        try:  # the same process, after all the timed calls, on inputs it has never seen
            self.check(box, req, ref, [req["seed_offset"] + AFTER_SEED], deadline)
        except Reject as r:
            if r.status == "reference_error":
                raise
            raise Reject("cheat_suspected", f"correct before timing but not after it ({r.status}): {r.error}") from None
        self._next_step("done")
        torch = self.torch
        device_name = torch.cuda.get_device_name() if req["device"] == "cuda" else "cpu (Triton interpreter)"
        return {"status": "verified", "error": None, "checks": checked, "timings": timings["candidate"], **errors,
                "compare": {k: v for k, v in timings.items() if k not in ("candidate", COPY)},
                "copy": timings.get(COPY, {}), "device_name": device_name, "rounds": rounds,
                "evidence": evidence, "kernels_seen": sorted(self.seen), "phases_s": self.phases}


def _largest_shape(inputs) -> list[int] | None:
    """The shape of the workload's largest input tensor, from the judge's own inputs: what a
    lesson's scale is read from (memory.features.row_length)."""
    tensors = [t for t in inputs if hasattr(t, "numel") and hasattr(t, "shape")]
    return list(max(tensors, key=lambda t: t.numel()).shape) if tensors else None


def _non_negative(torch, t) -> bool:
    """A float input of the usual widths (not fp8/fp4: their comparisons and products are not
    defined everywhere) whose every value is >= 0, some > 0."""
    if not (isinstance(t, torch.Tensor) and t.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64)
            and t.numel() > 1):
        return False
    return bool((t >= 0).all()) and bool((t > 0).any())


def _signed(torch, t, seed: int):
    """`t` with each value's sign drawn at random, the same draw for the same seed. Made on the
    tensor's own device in its own dtype, one extra tensor of its size at most (a KernelBench
    input is 6 GB: an int64 mask on the host would be 48)."""
    generator = torch.Generator(device=t.device).manual_seed(seed)
    out = torch.empty_like(t).bernoulli_(0.5, generator=generator)
    return out.mul_(2).sub_(1).mul_(t)


def _finite(torch, value) -> bool:
    values = value if isinstance(value, (tuple, list)) else [value]
    return all(not (isinstance(v, torch.Tensor) and v.is_floating_point()) or bool(torch.isfinite(v).all())
               for v in values)


def _comparator_failed(name: str, f: SandboxFailure) -> Reject:
    what = "the copy yardstick" if name == COPY else f"comparator {name!r}"
    return Reject(f.status, f"{what} could not be loaded (not the kernel under test): {f.error}")


def _check_timed(torch, req, outs, expected, where: str) -> None:
    try:
        _judged(torch, outs, expected, req, where)
    except Reject as rj:
        raise Reject("cheat_suspected", f"correct when checked, not when timed: {rj.error}") from None


def _fresh_not_slower(rounds: list[tuple[float, float]], where: str) -> None:
    """A kernel that keeps results between calls (keyed by pointer, id or a sample of the values)
    is slow on every call on fresh values. Judged over the rounds, not one call: a single span
    with a host stall in it can be several times the median (seen on a real paged-decode kernel)."""
    slow = [(f, s) for f, s in rounds if f > 1.5 * s + 10.0]
    if rounds and 2 * len(slow) > len(rounds):
        figures = ", ".join(f"{f:.1f} vs {s:.1f} µs" for f, s in slow)
        raise Reject("cheat_suspected", f"{where}: the call on fresh values was slower than the calls on values "
                     f"seen before in {len(slow)} of {len(rounds)} rounds ({figures}): results kept between calls")


def _same_processes(before: tuple[float, int], after: tuple[float, int], where: str) -> None:
    """Once compiled, a call runs no other process: children's CPU time must not grow and no
    child may be left running."""
    if after[1] > 0 or after[0] - before[0] > 0.05:
        raise Reject("cheat_suspected", f"{where}: the call did work in another process "
                     f"({after[0] - before[0]:.2f} s of child CPU time, {after[1]} child process(es) left); "
                     "work must run in the kernel's own Triton launches")


def _summary(samples: list[float]) -> dict:
    q = statistics.quantiles(samples, n=4) if len(samples) >= 2 else [samples[0]] * 3
    return {"median_us": statistics.median(samples), "iqr_us": q[2] - q[0], "samples": len(samples)}


def _disagreement(t: dict) -> str | None:
    """Say so when the secondary figures differ from the span by more than the noise."""
    span, noise = t["median_us"], max(0.1, t["iqr_us"] / max(t["median_us"], 1e-9))
    notes = []
    for key, label in (("kernel_us", "kernel-only"), ("event_us", "CUDA events"), ("outside_us", "judge's clock")):
        other = t.get(key)
        if other and abs(other - span) / span > noise and abs(other - span) > 2.0:
            notes.append(f"{label} {other:.1f} µs")
    return f"span {span:.1f} µs; " + ", ".join(notes) if notes else None


def readable_for(req: dict) -> list[str]:
    """Every sandbox may read the task's folder: the task's reference, timed as a comparator,
    loads from it."""
    return [os.path.dirname(os.path.abspath(req["reference_path"]))]


def _spares_for_first_request(boxes: Sandboxes) -> tuple[threading.Thread, list[str]]:
    """Reads the first request (the run writes it as it starts the judge) and forks the sandboxes
    it needs as soon as the template is ready, while the judge imports torch: a sandbox's first
    CUPTI trace alone took 6 s on an H100. Returns the thread and where the line will be."""
    first: list[str] = []

    def read() -> None:
        first.append(sys.stdin.readline())
        try:  # the candidate's, each comparator's and the copy yardstick's, all starting CUPTI at once
            req = json.loads(first[0])
            needed = 1 + len(req.get("compare") or {}) + bool(req.get("copy_yardstick"))
            boxes.top_up(readable_for(req), min(needed, 4))
        except Exception:  # noqa: BLE001 - the request is judged, and its sandboxes made, as without this
            pass

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, first


def serve() -> None:
    results = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    parent = os.getppid()

    def watch_parent():  # the run's death, kill -9 included, ends the judge and its sandboxes
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch_parent, daemon=True).start()
    # A Ctrl-C reaches the whole process group: the run decides (the CLI kills its judges and
    # exits), so an evaluation it cuts off is never reported as the kernel's failure. Ignored
    # here, it stays ignored in the sandboxes too (they inherit it), which die with the judge.
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The template imports torch and Triton while the judge does (two cores, half the wait).
    device = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
    boxes = Sandboxes(device, confined=not confine.unconfined())
    early, first = _spares_for_first_request(boxes)
    judge = Judge()
    judge.boxes = boxes
    early.join()
    for line in itertools.chain(first, sys.stdin):
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            result = judge.evaluate(req)
        except Reject as r:
            result = {"status": r.status, "error": _tail(r.error), **r.extra}
        except SandboxFailure as f:
            result = {"status": f.status, "error": _tail(f.error)}
        except BaseException:  # noqa: BLE001 - report, never hang the parent
            result = {"status": "runtime_error", "error": _tail("the judge failed:\n" + traceback.format_exc()),
                      "restart": True}
        results.write(RESULT_MARK + req["nonce"] + json.dumps(result) + "\n")
        results.flush()
        if result.get("restart"):
            break
    if judge.boxes is not None:
        judge.boxes.close()


if __name__ == "__main__":
    serve()
