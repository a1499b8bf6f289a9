"""The sandbox template: one process with Python, torch and Triton already imported (CUDA not
initialized) that forks a fresh sandbox per request.

Started by the judge (judge_sandboxes.py `Template`) as `python zygote.py FD`, under bubblewrap
(confine.py) unless the user chose to run unconfined. Each request on the control socket FD is
one JSON object with three file descriptors attached (the sandbox's end of its socket to the
judge, its stderr log, the write end of its exit-status pipe). The template forks; the child
closes everything else, takes the environment and folder it was given, confines itself with
Landlock while it is still the only thread, and serves the judge as sandbox.py. The template
reaps its children as they end (SIGCHLD wakes it) and writes each one's wait status to its pipe,
which is how the judge learns how a sandbox ended. Once idle, it does what every later sandbox
would do on its own (`_ahead_of_later_sandboxes`).

The template and every sandbox are child subreapers (PR_SET_CHILD_SUBREAPER): a process a
candidate starts stays a descendant of its sandbox however it detaches (double fork, setsid), so
the judge counts its CPU use and kills it with the sandbox (judge_sandboxes.kill_tree); one left
by a sandbox that ended on its own is handed to the template, which kills every child that is
not a sandbox (`_kill_orphans`).

A fork costs milliseconds where a fresh interpreter costs seconds (importing torch); no
candidate ever runs in the template, and no sandbox ever serves a second candidate.
It imports nothing from accelopt: sibling files are loaded by path.
"""

from __future__ import annotations

import importlib.util
import json
import os
import select
import signal
import socket
import struct
import sys
import traceback

if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_MESSAGE = 1 << 20


def _load(name: str, filename: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, filename))
    assert spec is not None and spec.loader is not None  # a .py path has both
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _subreaper() -> None:
    """Orphaned descendants are reparented to this process, not to init: PR_SET_CHILD_SUBREAPER."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(36, 1)


def _kill_orphans(children: dict[int, int]) -> None:
    """Every child that is not a sandbox came from a sandbox that ended: killed (then reaped)."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            continue
        for kid in kids:
            if kid not in children:
                try:
                    os.kill(kid, signal.SIGKILL)
                except OSError:
                    pass


def _child(request: dict, conn_fd: int, err_fd: int, sandbox, confine) -> None:
    """The forked sandbox; never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)  # the template's: its descriptor number is about to be closed, then reused
        os.dup2(err_fd, 2)
        os.dup2(err_fd, 1)
        os.closerange(3, conn_fd)  # the template's control socket, the log's own descriptor, ...
        os.closerange(conn_fd + 1, 1 << 20)
        for sig in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        sandbox._die_with_parent()
        _subreaper()  # what the candidate starts stays in this sandbox's tree
        sys.argv = ["sandbox"]  # not the template's: nothing of it is the sandbox's business
        os.chdir(request["home"])
        os.environ.clear()
        os.environ.update(request["env"])
        import random
        import tempfile

        tempfile.tempdir = None  # TMPDIR is the sandbox's own folder now
        random.seed()
        if request.get("confine"):
            confine.restrict([request["home"]], request["readable"])
        sandbox.serve_fd(conn_fd)
        code = 0
    except BaseException:  # noqa: BLE001 - the judge reads it in the sandbox's stderr
        traceback.print_exc()
    finally:
        os._exit(code)


def _ahead_of_later_sandboxes() -> None:
    """What every sandbox on a GPU would do on its own, done once here while the template is idle,
    so that the sandboxes forked after it start with it. Not before the template is ready: a cold
    check's first sandboxes would wait for it, then do it no sooner. No CUDA is touched (the
    template must not), and each is only a saving: where it fails, each sandbox does it, as before.
    - torch.profiler.profile's start asks `hasattr(torch, "_inductor")`, which imports Inductor
      and with it dynamo and sympy: 800 modules, 2.5-3 s of a sandbox's first GPU trace (its
      timing marker's) on an H100 host whose packages have no byte code. (The interpreter's host
      traces open Kineto directly and never import it: sandbox.host_profile.)
    - Triton's cache key hashes its own files (libtriton alone: 0.3-0.5 s), once a process
      (lru_cache), at its first compile."""
    try:
        import torch._inductor  # noqa: F401
    except Exception:  # noqa: BLE001
        pass
    try:
        from triton.runtime.cache import triton_key

        triton_key()
    except Exception:  # noqa: BLE001
        pass


def _woken_by_children() -> int:
    """A descriptor that turns readable when a child ends (SIGCHLD through Python's wakeup fd), so
    a sandbox killed by the judge is reaped, and its end reported, at once rather than at the next
    0.2 s tick."""
    readable, writable = os.pipe()
    for fd in (readable, writable):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(writable)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the signal reaches the wakeup fd
    return readable


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _reap(children: dict[int, int]) -> None:
    while True:  # sandboxes, and orphans killed by _kill_orphans
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        fd = children.pop(pid, None)
        if fd is not None:
            try:
                os.write(fd, struct.pack("i", status))
            except OSError:
                pass
            os.close(fd)


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    import torch  # the point of the template: every sandbox starts with these loaded
    import torch.multiprocessing  # noqa: F401
    import torch.profiler  # noqa: F401
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    if os.environ.get("TRITON_INTERPRET") == "1":
        # nested @jit calls (Inductor's reduction helpers) re-patch the language on every call.
        # (No profiler warm-up: a sandbox's host trace (sandbox.host_profile) starts in 10 ms.)
        _load("accelopt_interpreter_calls", "interpreter_calls.py").install()
    sandbox = _load("accelopt_sandbox", "sandbox.py")
    confine = _load("accelopt_confine", "confine.py")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run decides on Ctrl-C; the judge ends us
    _subreaper()
    children: dict[int, int] = {}
    woken = _woken_by_children()
    control.sendall(b'{"ready": true}\n')
    warmed = os.environ.get("TRITON_INTERPRET") == "1"  # on the interpreter: done above
    while True:
        ready, _, _ = select.select([control.fileno(), woken], [], [], 0.2)
        if woken in ready:
            _drain(woken)
        _reap(children)
        _kill_orphans(children)
        if control.fileno() not in ready:
            if not ready and not warmed:  # 0.2 s with nothing asked, once the first sandboxes are forked
                _ahead_of_later_sandboxes()
                warmed = True
            continue
        try:
            message, fds, _, _ = socket.recv_fds(control, MAX_MESSAGE, 3)
        except OSError:
            return
        if not message:
            return  # the judge is gone
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            control.sendall(json.dumps({"error": f"expected 3 descriptors, got {len(fds)}"}).encode() + b"\n")
            continue
        request = json.loads(message)
        conn_fd, err_fd, status_fd = fds
        pid = os.fork()
        if pid == 0:
            control.close()
            os.close(status_fd)
            _child(request, conn_fd, err_fd, sandbox, confine)
        os.close(conn_fd)
        os.close(err_fd)
        children[pid] = status_fd
        control.sendall(json.dumps({"pid": pid}).encode() + b"\n")


if __name__ == "__main__":
    main()
