"""Evaluation on a Ray cluster: one long-lived evaluation actor per GPU on every node (or per
CPU slot for interpreter checks), each doing what one slot of the local pool does.

Only imported when a cluster is configured (`--cluster ray`, `--ray-address`,
`ACCELOPT_RAY_ADDRESS`, `[cluster]` in accelopt.toml); nothing else imports Ray.

What runs where:
- the driver (the `accelopt` process): the graph, every model call, the run directory, the run
  cache and `evaluations.jsonl`. It sends each evaluation as data: the task directory's files
  (once per task, through the object store), the candidate's and comparators' sources;
- an `EvaluationActor` per GPU (`num_gpus=1`) or per CPU slot (`num_cpus=1`): the whole of
  `runner.evaluate` (static findings, the re-check of a result that looks too good, the ncu
  audit, the planner's profile) against a local pool of one judge. The judge is still a
  process of its own that never imports candidate code, and every candidate still runs in a
  fresh sandbox beside it (pool.py, judge.py, sandbox.py): the trust boundary holds on every node;
- one evaluation request (a candidate with its parent and baseline, timed interleaved) is one
  actor call, so comparators are always measured where the child is.

Scheduling: a request goes to the least recently used free actor of the run's hardware kind
(the GPU's name, or `cpu`), fixed by the first evaluation. Faults: an actor or node that dies
costs the requests in flight on it; each is re-queued once on another actor, and a second loss
makes it `infra_error`. Actors are not detached: they die with the driver, `kill -9` included
(Ray's owner semantics), and the judge and its sandboxes die with their actor.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from accelopt.tools import settings
from accelopt.tools.harness.pool import JUDGE_MARGIN_S, WorkerPool, remove_orphaned
from accelopt.tools.harness.result import EvalResult
from accelopt.tools.task import Task, load_task

log = logging.getLogger("accelopt")

TASK_BYTES_MAX = 256 << 20                 # a task directory larger than this is not a task
REFRESH_S = 5.0                            # how often nodes that joined or left are noticed
NO_ACTOR_GRACE_S = 60.0                    # how long a request waits for an actor of its kind to come back
_LOSSES = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError, ray.exceptions.NodeDiedError,
           ray.exceptions.ObjectLostError, ray.exceptions.OwnerDiedError, ray.exceptions.WorkerCrashedError,
           ray.exceptions.LocalRayletDiedError)


class ClusterError(RuntimeError):
    """The cluster cannot be used: the message is one line saying why."""


# ray.init's attempts at a GCS that answered the probe, about a second each: Ray's own 20 only
# repeat a refusal (a missing or wrong token), never turn it into a connection. A
# RAY_gcs_server_port_wait_time_s of the user's wins.
GCS_ATTEMPTS = 5
GCS_ATTEMPTS_ENV = "RAY_gcs_server_port_wait_time_s"
TOKEN_HOWTO = ("run `ray get-auth-token` on the head node and pass what it prints as RAY_AUTH_TOKEN "
               "(or in a file named by RAY_AUTH_TOKEN_PATH, or in ~/.ray/auth_token)")
# How a refused token reads: the GCS's gRPC status (in the exception's text and in the C++
# client's lines on stderr), Ray's own exception, and the Ray Client server's reply.
_REFUSED = ("InvalidAuthToken", "Unauthenticated", "AuthenticationError", "Invalid or missing authentication token")


def connect(address: str) -> None:
    """Join the cluster at `address` (`auto`, `ray://host:10001`, `host:6379`) as a driver."""
    if ray.is_initialized():
        return
    _probe(address)
    source = _token_source()
    if source and os.environ.get("RAY_AUTH_MODE") is None:
        _send_token()
        _sent_token[0] = source
    failure: Exception | None = None
    bounded = GCS_ATTEMPTS_ENV not in os.environ
    if bounded:
        os.environ[GCS_ATTEMPTS_ENV] = str(GCS_ATTEMPTS)
    try:
        with _overheard() as heard:
            try:
                ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR, configure_logging=False)
            except Exception as exc:  # noqa: BLE001 - read below: a refused token, or not reached
                failure = exc
    finally:
        if bounded:
            os.environ.pop(GCS_ATTEMPTS_ENV, None)
    refused = failure is not None and _refused(failure, heard.texts)
    if not refused:  # a token refusal's warnings ("is the Ray Client port reachable?") mislead
        for w in heard.warned:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)
    if failure is None:
        return
    if refused:
        raise ClusterError(_token_refusal(address, source)) from None
    first = (str(failure).strip().splitlines() or [type(failure).__name__])[0]
    raise ClusterError(f"cannot reach the Ray cluster at {address}: {first}") from None


_sent_token: list[str | None] = [None]  # where the token this driver sends came from (connect), if it sends one


def _token_source() -> str | None:
    """Where Ray would take this driver's token from (its own order), or None: there is none."""
    if os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return "RAY_AUTH_TOKEN"
    named = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if named is not None:  # Ray reads only this file then, and an unreadable one is an error
        return f"RAY_AUTH_TOKEN_PATH ({named})" if _readable(Path(named).expanduser()) else None
    return "~/.ray/auth_token" if _readable(Path.home() / ".ray" / "auth_token") else None


def _readable(path: Path) -> bool:
    try:
        return bool(path.read_text().strip())
    except OSError:
        return False


def _send_token() -> None:
    """Token mode for this driver: Ray (2.52 to 2.60 at least) sends a token to an explicit address
    only with RAY_AUTH_MODE=token, and a cluster without authentication ignores one it is sent."""
    os.environ["RAY_AUTH_MODE"] = "token"
    try:  # Ray caches its config at import: refresh it as Ray does when it turns the mode on itself
        from ray._private.authentication.authentication_token_setup import _enable_token_auth
    except ImportError:  # a Ray without token authentication
        return
    _enable_token_auth()


def _token_refusal(address: str, source: str | None) -> str:
    mode = os.environ.get("RAY_AUTH_MODE", "")
    if source and mode.lower() not in ("", "token"):
        return (f"the Ray cluster at {address} requires an authentication token, and RAY_AUTH_MODE={mode} here "
                f"keeps the one in {source} from being sent: unset RAY_AUTH_MODE, or {TOKEN_HOWTO}")
    if source:
        return (f"the Ray cluster at {address} refused the authentication token in {source} (not this "
                f"cluster's token): {TOKEN_HOWTO}")
    named = os.environ.get("RAY_AUTH_TOKEN_PATH")
    unreadable = f" (RAY_AUTH_TOKEN_PATH names {named}, which holds no token)" if named is not None else ""
    return (f"the Ray cluster at {address} requires an authentication token and this driver has none{unreadable}: "
            f"{TOKEN_HOWTO}")


def _refused(exc: BaseException, heard: list[str]) -> bool:
    """Whether the connection failed on the token: an explicit address retries a refused one,
    then raises a ConnectionError whose cause only quotes the refusal's traceback as text."""
    seen: set[int] = set()
    texts = list(heard)
    refused_type = getattr(ray.exceptions, "AuthenticationError", None)  # Ray >= 2.52
    stack: list[BaseException | None] = [exc]
    while stack:
        at = stack.pop()
        if at is None or id(at) in seen:
            continue
        seen.add(id(at))
        if refused_type is not None and isinstance(at, refused_type):
            return True
        texts.append(f"{type(at).__name__}: {at}")
        stack += [at.__cause__, at.__context__]
    return any(_refusal(text) for text in texts)


def _refusal(text: str) -> bool:
    return any(marker in text for marker in _REFUSED)


@dataclass
class _Heard:
    """What Ray said while it connected: lines it wrote to fd 2, the Ray Client's log messages, warnings."""
    texts: list[str] = field(default_factory=list)
    warned: list[warnings.WarningMessage] = field(default_factory=list)


class _Records(logging.Handler):
    """The Ray Client's records while it connects: kept, and those of warning level or above that are
    not a refused token passed on to Ray's handlers as usual."""

    def __init__(self, heard: _Heard):
        super().__init__(logging.DEBUG)
        self.heard = heard

    def emit(self, record: logging.LogRecord) -> None:
        self.heard.texts.append(record.getMessage())
        if record.levelno >= logging.WARNING and not _refusal(record.getMessage()):
            logging.getLogger("ray.util.client").handle(record)


@contextlib.contextmanager
def _overheard() -> Iterator[_Heard]:
    """Ray's words while it connects, for `_refused`. Its C++ client writes each refused attempt to
    fd 2 (a line a second, around accelopt's one-line error): fd 2 goes through a pipe that keeps
    those lines from the terminal and passes every other line on at once (a connection that hangs
    still says why as it goes). The Ray Client logs the server's refusal at debug level only, and
    warns that its port may be unreachable: the warnings are kept for the caller to show or drop."""
    heard = _Heard()
    client_log = logging.getLogger("ray.util.client.worker")
    level, propagate = client_log.level, client_log.propagate
    handler = _Records(heard)
    client_log.addHandler(handler)
    client_log.setLevel(logging.DEBUG)
    client_log.propagate = False  # its debug records stay here, off Ray's stderr handler
    sys.stderr.flush()
    relaying: threading.Thread | None = None
    try:
        terminal = os.dup(2)
    except OSError:  # fd 2 is closed: Ray's lines go nowhere anyway
        pass
    else:
        read, write = os.pipe()
        saved = os.dup(2)
        os.dup2(write, 2)
        os.close(write)

        def relay() -> None:
            with os.fdopen(read, "rb") as pipe:
                for line in pipe:
                    text = line.decode(errors="replace")
                    heard.texts.append(text)
                    if not _refusal(text):
                        os.write(terminal, line)
            os.close(terminal)

        relaying = threading.Thread(target=relay, daemon=True, name="accelopt-ray-stderr")
        relaying.start()
    try:
        with warnings.catch_warnings(record=True) as warned:  # the filters in force decide what is kept
            yield heard
        heard.warned = warned
    finally:
        sys.stderr.flush()
        if relaying is not None:
            os.dup2(saved, 2)  # the pipe's last writer closes: the relay reads to its end
            os.close(saved)
            relaying.join(timeout=5.0)
        client_log.removeHandler(handler)
        client_log.setLevel(level)
        client_log.propagate = propagate


def _probe(address: str, timeout_s: float = 5.0) -> None:
    """A TCP connection to the cluster's GCS (or Ray Client server) first: ray.init retries an
    address that does not answer for minutes, printing as it goes."""
    target = address
    if address == "auto":
        current = _ray_temp_dir() / "ray_current_cluster"
        target = os.environ.get("RAY_ADDRESS") or (current.read_text().strip() if current.is_file() else "")
        if not target or target == "auto":
            raise ClusterError("cannot reach the Ray cluster at auto: no running Ray cluster on this machine "
                               "(start one with `ray start --head`, or pass --ray-address HOST:6379)")
    host, _, port = target.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s) as conn:
            web = _speaks_http(conn)
    except (OSError, ValueError) as exc:
        raise ClusterError(f"cannot reach the Ray cluster at {address}: nothing answers at {target} ({exc})") from None
    if web:  # ray.init would retry it for minutes behind raw gRPC warnings (207 s seen at :8265)
        raise ClusterError(f"cannot join the Ray cluster at {address}: {target} is a web server (Ray's dashboard "
                           "listens on 8265), not the cluster: use HOST:6379, the head's address `ray start --head` "
                           "prints, or ray://HOST:10001")


def _speaks_http(conn: socket.socket, timeout_s: float = 2.0) -> bool:
    """Whether the port answers a plain HTTP request as a web server does. The GCS and the Ray Client
    server speak gRPC (HTTP/2 frames, never an `HTTP/1.x` status line), or say nothing."""
    try:
        conn.settimeout(timeout_s)
        conn.sendall(b"HEAD / HTTP/1.0\r\nHost: ray\r\n\r\n")
        return conn.recv(16).startswith(b"HTTP/")
    except OSError:
        return False


def _ray_temp_dir() -> Path:
    """Where `ray start` keeps this machine's clusters: Ray's own choice (RAY_TMPDIR, then TMPDIR on Linux)."""
    base = os.environ.get("RAY_TMPDIR") or (os.environ.get("TMPDIR") if sys.platform.startswith("linux") else None)
    return Path(base or "/tmp") / "ray"


def cluster_summary(address: str) -> dict:
    """For `accelopt doctor`: alive nodes, GPUs by kind, evaluation actors alive."""
    connect(address)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    gpus: dict[str, int] = {}
    for n in nodes:
        count = int(n["Resources"].get("GPU", 0))
        if count:
            gpus[_accelerator(n["Resources"]) or "GPU"] = gpus.get(_accelerator(n["Resources"]) or "GPU", 0) + count
    actors = 0
    try:
        from ray.util.state import list_actors

        # the connected cluster's address: left out, the state API looks for one on this machine
        # and gives up where it finds several
        actors = len(list_actors(address=ray.get_runtime_context().gcs_address,
                                 filters=[("class_name", "=", "EvaluationActor"), ("state", "=", "ALIVE")],
                                 raise_on_missing_output=False))
    except Exception:  # noqa: BLE001 - the state API needs the dashboard (ray[default])
        actors = -1
    return {"address": address, "nodes": [f"{n['NodeManagerAddress']}/{n['NodeID'][:8]}" for n in nodes],
            "cpus": sum(int(n["Resources"].get("CPU", 0)) for n in nodes), "gpus": gpus, "actors_alive": actors}


def _accelerator(resources: dict) -> str | None:
    kinds = [k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:")]
    return kinds[0] if kinds else None


# ---------------------------------------------------------------- the actor (on a cluster node)

class EvaluationActor:
    """One slot of the local pool on a node: a judge process (and its sandboxes) beside it."""

    def __init__(self, device: str):
        self.device = device
        ctx = ray.get_runtime_context()
        self.node_id = ctx.get_node_id()
        self.node = f"{ray.util.get_node_ip_address()}/{self.node_id[:8]}"
        gpu = None
        if device == "cuda":
            ids = ray.get_gpu_ids()
            gpu = str(ids[0]) if ids else os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
        self.kind = _gpu_name(gpu) if gpu is not None else "cpu"
        self.pool = WorkerPool(device, 1, [gpu] if gpu is not None else None)
        self.pool.warm()  # the judge and its spare sandboxes start now, not with the first candidate
        self.tasks: dict[str, Task] = {}
        sweep_task_dirs(Path(tempfile.gettempdir()))
        self.root = Path(tempfile.mkdtemp(prefix=f"{TASK_DIR_PREFIX}{os.getpid()}-"))

    def info(self) -> dict:
        return {"node": self.node, "node_id": self.node_id, "kind": self.kind, "pid": os.getpid()}

    def evaluate(self, task_digest: str, task_box: list, source: str, compare: dict[str, str], device: str,
                 timeout_s: float, trusted: bool, profile: bool, audit_winners: bool = True,
                 seed: int | None = None) -> dict:
        from accelopt.tools.harness.runner import evaluate

        task = self._task(task_digest, task_box)
        result = evaluate(task, source, device=device, timeout_s=timeout_s, compare=compare, trusted=trusted,
                          pool=self.pool, audit_winners=audit_winners, profile=profile, seed=seed)
        result.node = self.node
        return result.model_dump()

    def _task(self, digest: str, box: list) -> Task:
        """The task directory, written once per task into this actor's own temp dir."""
        if digest not in self.tasks:
            name, files = ray.get(box[0])
            where = self.root / digest[:16] / name
            for rel, data in files.items():
                path = where / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            self.tasks[digest] = load_task(where)
        return self.tasks[digest]

    def close(self) -> None:
        self.pool.close()
        shutil.rmtree(self.root, ignore_errors=True)


TASK_DIR_PREFIX = "accelopt-ray-tasks-"
CLOSE_WAIT_S = 5.0  # a closing pool's wait for its actors to close themselves before it kills them


def sweep_task_dirs(where: Path) -> list[Path]:
    """Remove the task folders of actors that are gone: an actor killed (a lost node, `ray.kill`,
    the cluster stopped) never runs `close`. A folder names its actor's pid. Returns what went."""
    return remove_orphaned(where, TASK_DIR_PREFIX, _task_dir_owner)


def _task_dir_owner(name: str) -> int | None:
    pid = name[len(TASK_DIR_PREFIX):].split("-", 1)[0]
    return int(pid) if pid.isdigit() else None


def _gpu_name(gpu: str) -> str:
    """The GPU's name without a CUDA context in this process (the judge owns the GPU)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", gpu],
                             capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return "GPU"


_RemoteActor = ray.remote(max_restarts=0, max_task_retries=0)(EvaluationActor)


# ---------------------------------------------------------------- the driver's side

@dataclass(eq=False)
class Slot:
    handle: Any
    node: str
    node_id: str
    kind: str
    busy: bool = False
    last_used: float = 0.0
    done: int = 0


@dataclass
class _Shipped:
    digest: str
    box: list = field(default_factory=list)


class RayPool:
    """The evaluation actors of one cluster for one device; thread-safe (the graph's parallel
    branches submit at once). `evaluate` mirrors `runner.evaluate`'s result."""

    def __init__(self, address: str, device: str, cpu_slots: int | None = None, start_timeout_s: float = 180.0,
                 max_actors: int | None = None):
        connect(address)
        self.address, self.device, self.max_actors = address, device, max_actors
        self.cpu_slots = cpu_slots or settings.ray_cpu_slots()  # evaluation actors per CPU-only node
        self.slots: list[Slot] = []
        self.starting: list[tuple[Any, Any, str]] = []  # (handle, info ref, node id) not ready yet
        self.kind: str | None = None
        self.in_flight: dict[str, int] = {}  # node -> requests running there
        self.losses: list[str] = []
        self.failed_starts: list[str] = []  # actors that died before they ran: node, and Ray's reason
        self._cond = threading.Condition()
        self._refresh_lock = threading.Lock()
        self._shipped: dict[str, _Shipped] = {}
        self._closed = False
        self.refresh(wait_s=start_timeout_s)
        if not self.slots:
            why = f"{'no GPU' if device == 'cuda' else 'no free CPU'} for an evaluation actor"
            if _sent_token[0] and self.failed_starts:  # a stray token: the actors die before they run (Ray 2.60)
                why = (f"every evaluation actor died before it ran, and this driver sent the authentication token in "
                       f"{_sent_token[0]}: a cluster started without authentication does not run a token-mode "
                       f"driver's actors; unset it, or start the cluster with a token ({TOKEN_HOWTO})")
            raise ClusterError(f"the Ray cluster at {address} has no node that can evaluate on {device} ({why})")
        self._watcher = threading.Thread(target=self._watch, daemon=True, name="accelopt-ray-refresh")
        self._watcher.start()

    # -------------------------------------------------------- membership

    def _wanted(self, node: dict) -> int:
        res = node["Resources"]
        if self.device == "cuda":
            return int(res.get("GPU", 0))
        cpus = int(res.get("CPU", 0))
        return min(cpus, self.cpu_slots) if self.cpu_slots else cpus

    def refresh(self, wait_s: float = 0.0) -> None:
        """Drop actors of nodes that left, start actors on nodes that joined or lost one."""
        with self._refresh_lock:
            alive = {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}
            with self._cond:
                gone = [s for s in self.slots if s.node_id not in alive]
                for s in gone:
                    self._retire(s, "its node left the cluster")
                have: dict[str, int] = {}
                for s in self.slots:
                    have[s.node_id] = have.get(s.node_id, 0) + 1
            self.starting = [(h, r, n) for h, r, n in self.starting if n in alive]
            for _h, _r, n in self.starting:
                have[n] = have.get(n, 0) + 1
            room = self.max_actors - sum(have.values()) if self.max_actors else None
            for node_id, node in alive.items():
                for _ in range(self._wanted(node) - have.get(node_id, 0)):
                    if room is not None:
                        if room <= 0:
                            break
                        room -= 1
                    options: dict[str, Any] = {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}
                    options.update({"num_gpus": 1, "num_cpus": 0} if self.device == "cuda" else {"num_cpus": 1})
                    handle: Any = _RemoteActor.options(**options).remote(self.device)
                    self.starting.append((handle, handle.info.remote(), node_id))
            self._collect(wait_s)

    def _collect(self, wait_s: float) -> None:
        """Move actors whose start finished into the pool (waiting up to `wait_s` for all)."""
        if not self.starting:
            return
        refs = [r for _h, r, _n in self.starting]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=wait_s)
        still = []
        for handle, ref, node_id in self.starting:
            if ref not in ready:
                still.append((handle, ref, node_id))
                continue
            try:
                info = ray.get(ref)
            except ray.exceptions.RayError as exc:  # it could not start: its node is going, or a bad install
                log.warning("an evaluation actor on node %s failed to start: %s", node_id[:8], str(exc)[:300])
                self.failed_starts.append(f"{node_id[:8]}: {str(exc)[:300]}")
                continue
            with self._cond:
                self.slots.append(Slot(handle, info["node"], info["node_id"], info["kind"]))
                self._cond.notify_all()
        self.starting = still

    def _watch(self) -> None:
        while not self._closed:
            time.sleep(REFRESH_S)
            try:
                self.refresh()
            except Exception as exc:  # noqa: BLE001 - the next round tries again
                log.warning("could not refresh the Ray cluster's nodes: %s", str(exc)[:300])

    def _retire(self, slot: Slot, why: str) -> None:
        """Called with the condition held."""
        if slot in self.slots:
            self.slots.remove(slot)
            self.losses.append(f"{slot.node}: {why}")
            try:
                ray.kill(slot.handle)
            except Exception:  # noqa: BLE001 - it is gone already
                pass
            self._cond.notify_all()

    # -------------------------------------------------------- scheduling

    def _acquire(self) -> Slot | None:
        deadline = time.monotonic() + NO_ACTOR_GRACE_S
        with self._cond:
            while True:
                kinds = [s for s in self.slots if self.kind is None or s.kind == self.kind]
                free = [s for s in kinds if not s.busy]
                if free:
                    if self.kind is None:  # the run's hardware kind: the most numerous one
                        count = {k: sum(s.kind == k for s in self.slots) for k in {s.kind for s in free}}
                        self.kind = max(count, key=lambda k: count[k])
                        free = [s for s in free if s.kind == self.kind]
                    slot = min(free, key=lambda s: s.last_used)
                    slot.busy, slot.last_used = True, time.monotonic()
                    self.in_flight[slot.node] = self.in_flight.get(slot.node, 0) + 1
                    return slot
                if not kinds and time.monotonic() > deadline:
                    return None
                self._cond.wait(timeout=1.0)

    def _release(self, slot: Slot) -> None:
        with self._cond:
            slot.busy = False
            slot.done += 1
            self.in_flight[slot.node] = max(0, self.in_flight.get(slot.node, 0) - 1)
            self._cond.notify_all()

    def _ship(self, task: Task) -> _Shipped:
        """The task directory's files, put in the object store once per content."""
        root = Path(task.root)
        files = {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
                 if p.is_file() and "__pycache__" not in p.parts}
        size = sum(len(b) for b in files.values())
        if size > TASK_BYTES_MAX:
            raise ClusterError(f"task directory {root} holds {size >> 20} MB: too large to send to the cluster")
        h = hashlib.sha256()
        for rel, data in files.items():
            h.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
        digest = h.hexdigest()
        with self._cond:
            if digest not in self._shipped:
                self._shipped[digest] = _Shipped(digest, [ray.put((root.name, files))])
            return self._shipped[digest]

    def evaluate(self, task: Task, source: str, *, timeout_s: float = 300.0, compare: dict[str, str] | None = None,
                 trusted: bool = False, profile: bool = True, audit_winners: bool = True,
                 on_node: Callable[[str], None] | None = None, seed: int | None = None) -> EvalResult:
        """`on_node(node)` is told where the request went (again when a lost one is re-queued): the
        live display's per-node count; it is only told, and whatever it does cannot fail the evaluation."""
        shipped = self._ship(task)
        lost: list[str] = []
        while True:
            slot = self._acquire()
            if slot is None:
                return EvalResult(status="infra_error", device=self.device, node=lost[-1] if lost else None,
                                  error=f"no evaluation actor of kind {self.kind or self.device} is left on the "
                                        f"Ray cluster at {self.address}" + (f" (lost: {'; '.join(lost)})" if lost else ""))
            if on_node is not None:
                try:
                    on_node(slot.node)
                except Exception:  # noqa: BLE001 - a progress display, not the evaluation
                    pass
            ref = slot.handle.evaluate.remote(shipped.digest, shipped.box, source, compare or {}, self.device,
                                              timeout_s, trusted, profile, audit_winners, seed)
            try:
                raw = ray.get(ref, timeout=3 * (timeout_s + JUDGE_MARGIN_S) + 300)
            except (*_LOSSES, ray.exceptions.GetTimeoutError) as exc:
                why = "it stopped answering" if isinstance(exc, ray.exceptions.GetTimeoutError) else type(exc).__name__
                with self._cond:
                    self.in_flight[slot.node] = max(0, self.in_flight.get(slot.node, 0) - 1)
                    self._retire(slot, why)
                lost.append(f"{slot.node} ({why})")
                if len(lost) >= 2:
                    return EvalResult(status="infra_error", device=self.device, node=slot.node,
                                      error="the evaluation was lost twice (node or actor lost twice: "
                                            f"{'; '.join(lost)}): an infrastructure fault, not the kernel's")
                log.warning("evaluation lost on %s (%s): re-queued once", slot.node, why)
                continue
            except ray.exceptions.RayTaskError as exc:  # the actor's own code raised: a harness fault
                self._release(slot)
                return EvalResult(status="infra_error", device=self.device, node=slot.node,
                                  error=f"the evaluation actor failed (a harness fault, not the kernel's): "
                                        f"{str(exc)[-1500:]}")
            self._release(slot)
            return EvalResult(**raw)

    def close(self) -> None:
        self._closed = True
        with self._cond:
            ready = [s.handle for s in self.slots]
            handles = ready + [h for h, _r, _n in self.starting]
            self.slots, self.starting = [], []
        try:  # each ready actor closes its judges and task folder; one busy past the wait is killed as is
            ray.wait([h.close.remote() for h in ready], num_returns=len(ready), timeout=CLOSE_WAIT_S)
        except Exception:  # noqa: BLE001 - the cluster is gone: nothing to close there
            pass
        for h in handles:
            try:
                ray.kill(h)
            except Exception:  # noqa: BLE001 - already gone, or the cluster is
                pass


_pools: dict[tuple[str, str], RayPool] = {}
_pools_lock = threading.Lock()


def resolve_device(address: str, device: str | None) -> str:
    """`auto` on a cluster: cuda when any node has a GPU, else the interpreter."""
    if device:
        return device
    connect(address)
    return "cuda" if ray.cluster_resources().get("GPU", 0) > 0 else "cpu"


def get_ray_pool(address: str, device: str | None) -> RayPool:
    """The process-wide pool for a cluster and device, started on first use."""
    device = resolve_device(address, device)
    with _pools_lock:
        if (address, device) not in _pools:
            _pools[(address, device)] = RayPool(address, device)
        return _pools[(address, device)]


def close_pools() -> None:
    with _pools_lock:
        for pool in _pools.values():
            pool.close()
        _pools.clear()


atexit.register(close_pools)
