"""The sandboxes as the judge drives them: the trusted side of each sandbox process.

The sandbox template (zygote.py, `Template`) imports torch and Triton once, under bubblewrap
unless the user chose to run candidates unconfined; each sandbox (`Sandbox`) is forked from it
with an environment and folders of its own (`sandbox_env`), and its replies are rebuilt as plain
tensors and data only (`_Unpickler`). `Sandboxes` keeps warm spares for the next candidate and
the comparators' sandboxes per source. A sandbox that fails, times out or dies raises
`SandboxFailure`; what the process itself runs is sandbox.py's.

Loaded by path beside judge.py (a script that imports nothing of the accelopt package), or
imported as part of the package.
"""

from __future__ import annotations

import collections
import hashlib
import importlib.util
import io
import json
import os
import pickle
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

ERROR_CHARS = 1500
SPARES = 2              # warm sandboxes waiting for the next candidate (GPU)
# On the interpreter the spares start on the same cores that run (and time) the candidate, and
# a judge per core already runs: one spare hides the next start, a second only competes for CPU
# (two short runs' tests: 128 s -> 111 s wall on 2 cores).
CPU_SPARES = 1
COMPARATOR_CACHE = 4    # comparator sandboxes kept, keyed by source
READY_TIMEOUT_S = 120.0


def _load_sibling(name: str, filename: str):
    """A file beside this one: imported as part of the package, the package's own module; in the
    judge (a script that imports nothing of the package), the one judge.py's `_load_sibling`
    loaded by path under `name` before this file."""
    if __package__:
        return importlib.import_module(f"{__package__}.{filename.removesuffix('.py')}")
    return sys.modules[name]


confine = _load_sibling("accelopt_confine", "confine.py")
triton_cache = _load_sibling("accelopt_triton_cache", "triton_cache.py")
ZYGOTE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zygote.py")


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


def _call_mode(req: dict) -> str:
    """How a sandbox runs a checked or timed call: profiled, except for the task's own reference
    (`trusted`), torch code by design, whose trace nothing checks (a profile nothing reads)."""
    return "normal" if req.get("trusted") else "trace"


def _owned(torch, outs: list) -> list:
    """Copies of what the sandbox handed back, so its memory can go."""
    return [o.clone() if isinstance(o, torch.Tensor) else o for o in outs]


# ---------------------------------------------------------------- the template and its sandboxes

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
            kill_tree(self.proc.pid)  # unconfined, no PID namespace ends the sandboxes' orphans with it
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
        self.autotune_record: dict | None = None  # the configurations the judge pinned in it (a comparator's, kept)
        self.started = time.monotonic()
        self.baseline: set[int] = set()  # its threads before any candidate code ran (host tids)

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
            # Sent before any candidate code ran, in its PID namespace's numbers; the candidate's
            # import may already be running, so the list is its, not a reading here.
            ns = {int(t) for t in info.get("tids", [])}
            self.baseline = {tid for tid, inner in _thread_ids(self.proc.pid).items() if inner in ns}

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

    def step(self, deadline: float) -> tuple[str, object]:
        """The next word of a stepwise request (sandbox.time_calls with `steps`): ("called", None)
        after each timed call, ("outputs", [...]) when asked for them; else the request's answer,
        returned as ("ok", reply) or raised as a failure."""
        self.wait_ready(deadline)
        kind, info = self._recv(deadline)
        if kind in ("called", "outputs"):
            return kind, info
        self.pending -= 1
        if kind == "fail":
            if info.get("cuda_fault"):
                self.kill()
            raise SandboxFailure(info["status"], info["error"], dead=info.get("cuda_fault", False))
        return kind, info

    def tell(self, word: str) -> None:
        """A word to a sandbox waiting between two timed calls (sandbox.Sandbox._step)."""
        try:
            self.conn.send(word)
        except (BrokenPipeError, OSError):
            raise self._died() from None

    def threads(self) -> int:
        """The OS's count of the process's threads: seen from outside, whatever the kernel patched."""
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
        except (OSError, StopIteration):
            return -1

    def others(self) -> tuple[float, int]:
        """(CPU seconds of every descendant: those waited for, and those alive or not yet reaped;
        how many of them there are now): work done in another process shows here, whatever the
        kernel patched inside its own. The sandbox is a child subreaper (zygote.py), so a
        double-forked, setsid grandchild is still its descendant."""
        pid = self.proc.pid
        waited = _cpu_s(pid, children=True)
        kids = _descendants(pid)
        return waited + sum(_cpu_s(k) for k in kids), len(kids)

    def new_threads(self) -> dict[int, float]:
        """Threads alive now that were not there before the candidate's import: tid -> CPU s."""
        if not self.baseline:
            return {}
        return {tid: _cpu_s(self.proc.pid, tid) for tid in _thread_ids(self.proc.pid) if tid not in self.baseline}

    def thread_cpu(self) -> float:
        """CPU seconds of the threads the candidate started, alive or ended: the process's total
        less what its threads from before the import used."""
        if not self.baseline:
            return 0.0
        return _cpu_s(self.proc.pid) - sum(_cpu_s(self.proc.pid, tid) for tid in self.baseline)

    def kill(self, keep_cache: str | None = None, wait: bool = True) -> None:
        """End the process and every process it started (`kill_tree`), and remove its folder;
        `keep_cache`: first move its Triton cache there (the kernels it compiled, for the same
        candidate's audit: compiled once). `wait=False`: every process is killed now, but waiting
        for the sandbox's end (its GPU memory freed as it exits: up to tenths of a second) and
        removing its folder are left to `finish`, so a verdict need not wait for them. The processes
        the candidate started have exited when it returns either way."""
        if self.proc.poll() is None:
            started = kill_tree(self.proc.pid) - {self.proc.pid}
            self.proc.kill()
            _await_ended(started)  # most have no GPU memory to free: milliseconds
        try:
            self.conn.close()
        except OSError:
            pass
        cache = os.path.join(self.home, "triton-cache")
        if keep_cache and os.path.isdir(cache) and not os.path.exists(keep_cache):
            try:  # nothing of the sandbox runs any more: killed, it only has to exit
                shutil.move(cache, keep_cache)
            except OSError:
                pass
        if wait:
            self.finish()

    def finish(self) -> None:
        """After `kill`: its end waited for, and its folder removed."""
        self.proc.wait()
        shutil.rmtree(self.home, ignore_errors=True)


def _cpu_s(pid: int, tid: int | None = None, children: bool = False) -> float:
    """utime + stime of a process (all its threads, ended ones included), of one of its threads,
    or (`children`) of the children it has waited for, from /proc."""
    path = f"/proc/{pid}/task/{tid}/stat" if tid is not None else f"/proc/{pid}/stat"
    try:
        with open(path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        first = 13 if children else 11  # cutime, cstime; else utime, stime
        return (int(fields[first]) + int(fields[first + 1])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _thread_ids(pid: int) -> dict[int, int]:
    """A process's threads: the judge's tid -> the tid in the process's own PID namespace."""
    out: dict[int, int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                out[int(tid)] = int(next(line.split()[-1] for line in f if line.startswith("NSpid:")))
        except (OSError, StopIteration, ValueError):
            continue
    return out


def _descendants(pid: int) -> list[int]:
    found, todo = [], _children(pid)
    while todo:
        kid = todo.pop()
        if kid not in found:
            found.append(kid)
            todo += _children(kid)
    return found


def kill_tree(pid: int) -> set[int]:
    """Stop `pid` and every descendant (stopped, none forks again; until none new appears), then
    SIGKILL them all: nothing a candidate started outlives its sandbox, a setsid grandchild
    included (the sandbox is a subreaper: its orphans stay in its tree while it lives). Returns
    every process signalled."""
    import signal

    stopped: set[int] = set()
    for _ in range(100):
        todo = [p for p in [pid, *_descendants(pid)] if p not in stopped]
        if not todo:
            break
        for p in todo:
            try:
                os.kill(p, signal.SIGSTOP)
            except OSError:
                pass
            stopped.add(p)
    for p in stopped:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return stopped


def _await_ended(pids: set[int], timeout: float = 2.0) -> None:
    """Until every process in `pids` has exited (a zombie, or reaped), at most `timeout` s."""
    left, ends = set(pids), time.monotonic() + timeout
    while left and time.monotonic() < ends:
        for p in list(left):
            try:
                with open(f"/proc/{p}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                        left.discard(p)
            except (OSError, IndexError):
                left.discard(p)
        if left:
            time.sleep(0.002)


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
        self.ending: list[threading.Thread] = []  # candidates' sandboxes killed, their exits awaited (`end`)
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

    def end(self, box: Sandbox, keep_cache: str | None = None) -> None:
        """A candidate's sandbox after its evaluation: killed now (what it started has exited when
        this returns), its own exit waited for and its folder removed on a thread of their own,
        so the verdict, and the next request, need not wait for them."""
        box.kill(keep_cache=keep_cache, wait=False)
        ending = threading.Thread(target=box.finish, name="accelopt-sandbox-end", daemon=True)
        ending.start()
        self.ending = [t for t in self.ending if t.is_alive()] + [ending]

    def close(self) -> None:
        for ending in self.ending:
            ending.join(timeout=10)
        for box in list(self.spares) + list(self.comparators.values()):
            box.kill()
        self.template.close()
        shutil.rmtree(self.root, ignore_errors=True)
