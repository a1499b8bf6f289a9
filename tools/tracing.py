"""LangSmith tracing, when the user turns it on (LANGSMITH_TRACING=true).

LangGraph and LangChain already trace every node and model call under their names; this module
keeps those traces complete, findable and cheap. It installs the process's LangSmith client (or
adopts the one that exists already, keeping its endpoint, key and filters) as a `TracedClient`,
through which every run passes:

- payloads: state is compacted (kernel sources cut to a head plus their length and hash, errors
  to their end, where the exception is, candidate maps to id -> status and speedup: the run
  directory holds everything whole); model calls go whole, so a prompt can be read and replayed;
- metadata: every run of a graph run carries its `task`, and a run whose `candidate_id` is
  missing or None takes its parent's (a known value is never replaced by None); nodes say which
  candidate their run works on, and that a candidate failed (the run's `error`, so LangSmith's
  error filter finds failed kernels), with `label_run`;
- delivery: `flush_traces` waits a few seconds at most and says in one line what did not go out
  (langsmith's own multi-line warnings about an unreachable endpoint are dropped for it), the
  sender threads of a client made here never hold the process at exit (an exit hook flushes, as
  boundedly), and `end_open_runs` ends every run still open with an error (Ctrl-C,
  cli/interrupt.py), so none stays "running" in LangSmith.

Harness evaluations get a span of their own (`harness`) with compact inputs, and every policy
answer one (`<role>-policy`).
"""

from __future__ import annotations

import atexit
import dataclasses
import datetime
import functools
import hashlib
import inspect
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from langsmith import Client

from accelopt.tools import settings
from accelopt.tools.harness.result import NOT_EVALUATED
from accelopt.tools.task import load_task

MAX_STRING = 1200
HEAD = 300
TAIL = 1000        # of a long error kept in a payload: its last lines name the exception
MAX_ERROR = 4000   # of an error in a run's `error` field
MAX_ITEMS = 40
ERROR_KEYS = ("error",)
CANDIDATE_SUMMARY = ("status", "speedup")  # what a payload shows of each candidate in a candidate map
FLUSH_S = 3.0      # the longest the process waits for LangSmith at the end of a run or on Ctrl-C

log = logging.getLogger("accelopt.tracing")


def tracing_enabled() -> bool:
    return settings.langsmith_tracing()


# ---------------------------------------------------------------- payloads

def compact(value: Any, depth: int = 0, key: str | None = None) -> Any:
    """The value with long strings cut to a head plus '[N chars, sha256 …]' (an error keeps its
    end instead: the exception is on its last line), long lists cut, and a map of candidates
    summarised as id -> status and speedup (their sources and measurements are in the run
    directory; whole, a payload would grow by kilobytes per candidate)."""
    if isinstance(value, str) and len(value) > MAX_STRING:
        sha = hashlib.sha256(value.encode()).hexdigest()[:12]
        if key in ERROR_KEYS:
            return f"[{len(value)} chars, sha256 {sha}] …{value[-TAIL:]}"
        return f"{value[:HEAD]}… [{len(value)} chars, sha256 {sha}]"
    if depth > 12:
        return "…"
    if hasattr(value, "model_dump") and not isinstance(value, type):  # chat messages and other models
        try:
            value = value.model_dump()
        except Exception:  # noqa: BLE001 - a model that cannot dump is shown as it is
            return value
    if isinstance(value, dict):
        if key == "candidates" and value and all(isinstance(c, dict) for c in value.values()):
            return {cid: {k: c.get(k) for k in CANDIDATE_SUMMARY} for cid, c in value.items()}
        return {k: compact(v, depth + 1, k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [compact(v, depth + 1) for v in value[:MAX_ITEMS]]
        return items + [f"… {len(value) - MAX_ITEMS} more"] if len(value) > MAX_ITEMS else items
    return value


def run_error(fields: Mapping[str, Any]) -> str | None:
    """A failed candidate's or evaluation's error for a run's `error` field: its status and the
    end of its error text (where the exception is); None for a verified or unevaluated one."""
    status = fields.get("status")
    if status is None or status == "verified" or status in NOT_EVALUATED:
        return None
    text = str(fields.get("error") or "").strip()
    if len(text) > MAX_ERROR:
        text = "…" + text[-MAX_ERROR:]
    return f"{status}: {text}" if text else str(status)


@functools.lru_cache(maxsize=64)
def task_label(task_dir: str) -> str:
    """The task's name in trace metadata: its task.json name (as the policies' spans say it), or
    its folder's name for a folder that holds no valid task."""
    try:
        return load_task(task_dir).name
    except Exception:  # noqa: BLE001 - a label never fails a run
        return Path(task_dir).name


def _task_of_inputs(inputs: Any) -> str | None:
    task_dir = inputs.get("task_dir") if isinstance(inputs, dict) else None
    return task_label(task_dir) if isinstance(task_dir, str) and task_dir else None


# ---------------------------------------------------------------- the runs of the process

@dataclasses.dataclass
class OpenRun:
    """A run posted and not yet ended: what ending it needs, and what its children inherit."""

    client: TracedClient
    name: str
    run_type: str
    trace_id: Any
    dotted_order: str | None
    parent_run_id: Any
    session_name: str | None
    task: str | None
    candidate_id: str | None


class RunLedger:
    """Every run the process's client posts, from its start to its end: the open ones (to end on
    Ctrl-C, and for their children's metadata), and which runs' data may not have reached the
    endpoint.

    Delivery is judged without langsmith's internals: whenever the client is idle (nothing
    queued or being sent) and no send failed since the last time it was, everything before has
    arrived; runs with data since then stay pending, and a failed send makes them lost."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # re-entrant: a signal handler may run while the main thread holds it
        self.open: dict[str, OpenRun] = {}
        self.clients: dict[int, Client] = {}
        self.pending: set[str] = set()   # runs with data since the client was last seen idle
        self.lost: set[str] = set()      # runs whose data was in a failed send, or never sent in time
        self.reported: set[str] = set()
        self.failures = 0
        self.failures_seen = 0
        self.reason: str | None = None   # the last failed send's cause, in a few words
        self.gave_up = False             # a flush timed out: later ones do not wait again
        self.ending = False              # Ctrl-C: only the runs' ends go out now

    # -- what the client reports
    def posted(self, client: TracedClient, name: str, run_type: str, inputs: Any, kwargs: dict) -> dict | None:
        """The run's post with its metadata completed, or None while the process is ending."""
        run_id = str(kwargs.get("id"))
        own_task = _task_of_inputs(inputs)
        with self.lock:
            if self.ending:
                return None
            parent = self.open.get(str(kwargs.get("parent_run_id")))
            extra = dict(kwargs.get("extra") or {})
            meta = dict(extra.get("metadata") or {})
            task = meta.get("task") or own_task or (parent.task if parent else None)
            if task:
                meta["task"] = task
                self._tell_ancestors(parent, task)
            if meta.get("candidate_id") is None and parent is not None and parent.candidate_id:
                meta["candidate_id"] = parent.candidate_id
            if not kwargs.get("end_time"):
                self.open[run_id] = OpenRun(client, name, run_type, kwargs.get("trace_id"), kwargs.get("dotted_order"),
                                            kwargs.get("parent_run_id"), kwargs.get("session_name"), task,
                                            meta.get("candidate_id"))
            self.clients[id(client)] = client
        return {**kwargs, "extra": {**extra, "metadata": meta}}

    def patched(self, client: TracedClient, run_id: str, kwargs: dict) -> dict | None:
        """The run's end with its metadata completed, or None while the process is ending."""
        with self.lock:
            if self.ending:
                return None
            run = self.open.pop(run_id, None)
            self.clients[id(client)] = client
        if run is None:
            return kwargs
        patched = {**kwargs, "run_type": kwargs.get("run_type") or run.run_type}
        if kwargs.get("extra") is not None:
            meta = dict(kwargs["extra"].get("metadata") or {})
            if not meta.get("task") and run.task:
                meta["task"] = run.task
            if meta.get("candidate_id") is None and run.candidate_id:
                meta["candidate_id"] = run.candidate_id
            patched["extra"] = {**kwargs["extra"], "metadata": meta}
        return patched

    def label(self, run_id: str, candidate_id: str) -> None:
        """The run works on candidate_id; so does the branch it runs in where that had no candidate
        yet (a sample's `candidate` subgraph, named by its first attempt: two runs of one name, the
        graph's node and the subgraph's own)."""
        with self.lock:
            run = self.open.get(run_id)
            if run is None:
                return
            run.candidate_id = candidate_id
            parent = self.open.get(str(run.parent_run_id))
            branch = parent.name if parent is not None else None
            while parent is not None and parent.name == branch and parent.candidate_id is None:
                parent.candidate_id = candidate_id
                parent = self.open.get(str(parent.parent_run_id))

    def _tell_ancestors(self, parent: OpenRun | None, task: str) -> None:
        """A task learned below (a resumed graph's root has no task_dir in its input) goes up to the
        open runs above that have none."""
        while parent is not None and not parent.task:
            parent.task = task
            parent = self.open.get(str(parent.parent_run_id))

    def send(self, client: Client, run_id: str, send: Callable[[], None]) -> None:
        """Hand one run's data to the client (send), keeping track of what may not arrive."""
        with self.lock:
            self._settle(client)  # checked before: the data about to be queued keeps it busy
        send()
        with self.lock:
            self.pending.add(run_id)

    def failed(self, error: BaseException) -> None:
        with self.lock:
            self.failures += 1
            self.reason = _why(error)

    def _settle(self, client: Client) -> bool:
        """Whether the client is idle; when it is, what was pending arrived, unless a send failed."""
        if not _idle(client):
            return False
        if self.failures > self.failures_seen:
            self.lost |= self.pending
            self.failures_seen = self.failures
        self.pending.clear()
        return True

    # -- what the process asks
    def flush(self, within_s: float) -> str | None:
        """Wait up to within_s for the clients to send what they hold; the line saying what did
        not reach the endpoint (not said before), or None."""
        with self.lock:
            clients = list(self.clients.values())
            wait = not self.gave_up
        deadline = time.monotonic() + within_s
        for client in clients:
            if wait:
                try:
                    client.flush(timeout=max(0.0, deadline - time.monotonic()))
                except Exception as exc:  # noqa: BLE001 - tracing never fails the run
                    self.failed(exc)
        with self.lock:
            idle = all([self._settle(c) for c in clients])
            if not idle:
                self.gave_up = True
                self.lost |= self.pending
                self.pending.clear()
            unsent = self.lost - self.reported
            self.reported |= unsent
            if not unsent:
                return None
            endpoint = ", ".join(sorted({str(getattr(c, "api_url", "?")) for c in clients}))
            runs = f"{len(unsent)} run{'s' * (len(unsent) != 1)}"
            why = f": {self.reason}" if self.reason else f" did not answer within {within_s:g} s"
            return f"LangSmith: {runs} not sent: endpoint {endpoint}{why}"

    def end_open(self, reason: str, within_s: float) -> str | None:
        """End every open run with `reason` as its error, from now on let nothing else out, and
        flush (within_s at most); the line saying what did not reach the endpoint, or None."""
        with self.lock:
            self.ending = True
            runs, self.open = self.open, {}
        now = datetime.datetime.now(datetime.UTC)
        for run_id, run in runs.items():
            try:
                self.send(run.client, run_id, functools.partial(
                    run.client.end_run, run_id, name=run.name, run_type=run.run_type, end_time=now, error=reason,
                    trace_id=run.trace_id, dotted_order=run.dotted_order, parent_run_id=run.parent_run_id,
                    session_name=run.session_name))
            except Exception as exc:  # noqa: BLE001 - tracing never fails the exit
                self.failed(exc)
        return self.flush(within_s)


_LEDGER = RunLedger()


def _idle(client: Client) -> bool:
    queue = getattr(client, "tracing_queue", None)
    compressed = getattr(client, "compressed_traces", None)
    return (queue is None or queue.unfinished_tasks == 0) and (compressed is None or not compressed.trace_count)


def _why(error: BaseException | str) -> str:
    """A failed send's cause in a few words (langsmith's own message runs to kilobytes)."""
    text = str(error)
    errno = re.search(r"\[Errno -?\d+\] ([^'\"()\\]+)", text)
    if errno:
        return errno.group(1).strip().lower()
    status = re.search(r"\b([45]\d\d) (?:Client|Server) Error: ([^'\"]+?) for url", text)
    if status:
        return f"HTTP {status.group(1)} {status.group(2)}"
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return first[:120]


class TracedClient(Client):
    """The process's LangSmith client (see the module's doc). No state of its own (the ledger is
    the module's), so a client that existed before tracing was configured becomes one by taking
    this class, keeping its settings."""

    __slots__ = ()

    def create_run(self, name: str, inputs: dict[str, Any], run_type: Any, **kwargs: Any) -> None:
        posted = _LEDGER.posted(self, name, run_type, inputs, kwargs)
        if posted is not None:
            _LEDGER.send(self, str(kwargs.get("id")), functools.partial(
                super().create_run, name, inputs if run_type == "llm" else compact(inputs), run_type, **posted))

    def update_run(self, run_id: Any, **kwargs: Any) -> None:
        patched = _LEDGER.patched(self, str(run_id), kwargs)
        if patched is not None:
            if patched.get("run_type") != "llm":
                patched.update({k: compact(patched[k]) for k in ("inputs", "outputs") if patched.get(k) is not None})
            _LEDGER.send(self, str(run_id), functools.partial(super().update_run, run_id, **patched))

    def end_run(self, run_id: str, **kwargs: Any) -> None:
        """End a run past this class's update_run, which lets nothing out while the process ends."""
        super().update_run(run_id, **kwargs)

    def _invoke_tracing_error_callback(self, error: Exception) -> None:
        # langsmith calls this, in its sender thread, for every send that failed for good
        _LEDGER.failed(error)
        super()._invoke_tracing_error_callback(error)

    # The sender threads need not hold the process at exit: `flush_traces` (and an exit hook)
    # waits for them, FLUSH_S at most, where langsmith's own threads would wait minutes on an
    # endpoint that accepts and never answers.
    @property  # type: ignore[override]
    def _use_daemon_threads(self) -> bool:
        return True

    @_use_daemon_threads.setter
    def _use_daemon_threads(self, value: bool) -> None:
        pass


_TRACED_CLASSES: dict[type, type] = {Client: TracedClient}


def _traced_class(cls: type) -> type:
    """TracedClient, or TracedClient over a client class of the user's own."""
    if cls not in _TRACED_CLASSES:
        _TRACED_CLASSES[cls] = type(f"Traced{cls.__name__}", (TracedClient, cls), {"__slots__": ()})
    return _TRACED_CLASSES[cls]


class _QuietLangSmith(logging.Filter):
    """Drops langsmith's warnings about traces it could not send: one per batch, multi-line and
    listing every run, printed over the progress display and again after the run. `flush_traces`
    says it in one line instead."""

    FAILURES = ("Failed to multipart ingest runs", "Failed to batch ingest runs", "Failed to send compressed multipart",
                "Failed to get info from", "LangSmith tracing error: Failed to submit")

    def __init__(self) -> None:
        super().__init__()
        self.info_failed = False

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if message.startswith("Failed to get info from"):
            self.info_failed = True
        # a consequence of the unanswered /info, not advice about the server's version
        if self.info_failed and message.startswith("Run compression is not enabled"):
            return False
        return not message.startswith(self.FAILURES)


@functools.lru_cache(maxsize=1)
def configure_tracing() -> bool:
    """Install the process's TracedClient, once, if tracing is on; say whether it is. A client
    that exists already (something traced before the graph was imported) is adopted, not
    replaced: it keeps its endpoint, key and filters."""
    if not tracing_enabled():
        return False
    import langsmith
    from langsmith import run_trees

    # before the client: its sender thread asks the endpoint for /info as it starts
    logging.getLogger("langsmith.client").addFilter(_QuietLangSmith())  # the client's and its threads' logger
    existing = getattr(run_trees, "_CLIENT", None)  # langsmith's process client, if one was made
    if existing is None:
        langsmith.configure(client=TracedClient())
    elif not isinstance(existing, TracedClient):
        existing.__class__ = _traced_class(type(existing))
    atexit.register(_flush_at_exit)
    return True


def flush_traces(within_s: float = FLUSH_S) -> str | None:
    """Send what is queued, waiting within_s at most (a CLI run ends right after the graph); log
    and return the one line saying what did not reach LangSmith, if anything."""
    line = _LEDGER.flush(within_s)
    if line:
        log.warning("%s", line)
    return line


def end_open_runs(reason: str = "interrupted", within_s: float = FLUSH_S) -> str | None:
    """End every run still open with `reason` as its error and send them, within_s at most (the
    work runs in a thread of its own: the caller, a signal handler, may have interrupted a
    thread holding one of langsmith's locks); the line saying what did not reach LangSmith."""
    with _LEDGER.lock:
        if not _LEDGER.clients:
            return None
    said: list[str | None] = [None]

    def end() -> None:
        said[0] = _LEDGER.end_open(reason, within_s)

    worker = threading.Thread(target=end, name="accelopt-trace-end", daemon=True)
    worker.start()
    worker.join(within_s + 1.0)
    return said[0]


def _flush_at_exit() -> None:
    try:
        flush_traces()
    except Exception:  # noqa: BLE001 - nothing at exit may fail the process
        pass


def label_run(candidate_id: str | None, outcome: Mapping[str, Any] | None = None) -> None:
    """From inside a node: the node's run works on candidate_id (its metadata, that of the runs
    it starts from now on, and its branch's: RunLedger.label), and with `outcome` (the candidate
    as measured) a failed candidate's error is the run's error."""
    if not tracing_enabled():
        return
    from langsmith.run_helpers import get_current_run_tree

    run = get_current_run_tree()
    if run is None:
        return
    if candidate_id is not None:
        # a new metadata dict: LangChain may share the one it gave the run with other runs
        run.extra["metadata"] = {**(run.extra.get("metadata") or {}), "candidate_id": candidate_id}
        _LEDGER.label(str(run.id), candidate_id)
    error = run_error(outcome) if outcome is not None else None
    if error:
        run.error = error


# ---------------------------------------------------------------- spans of our own

def traced_evaluation(fn: Callable) -> Callable:
    """A `harness` span around an evaluation: which task and kernel (by hash), and the outcome; a
    failed evaluation is the span's error, and the span carries the candidate's id."""
    from langsmith import traceable
    from langsmith.run_helpers import LangSmithExtra

    signature = inspect.signature(fn)

    def inputs(args: dict) -> dict:
        source = args.get("source") or ""
        return {"task": getattr(args.get("task"), "name", None), "source_chars": len(source),
                "source_sha256": hashlib.sha256(source.encode()).hexdigest()[:12],
                "against": [k for k in ("baseline", "parent") if args.get(k)], "trusted": args.get("trusted")}

    def outputs(fields: dict) -> dict:
        keep = ("status", "error", "device_name", "timer", "speedup", "speedup_vs_parent", "pct_peak")
        return compact({k: fields.get(k) for k in keep})

    @functools.wraps(fn)
    def evaluate(*args: Any, **kwargs: Any) -> Any:
        fields = fn(*args, **kwargs)
        label_run(None, fields)
        return fields

    traced = traceable(name="harness", run_type="tool", process_inputs=inputs, process_outputs=outputs)(evaluate)

    @functools.wraps(fn)
    def measure(*args: Any, **kwargs: Any) -> Any:
        candidate = signature.bind_partial(*args, **kwargs).arguments.get("candidate_id")
        extra = LangSmithExtra(metadata={"candidate_id": candidate}) if candidate else LangSmithExtra()
        return traced(*args, **kwargs, langsmith_extra=extra)

    return measure


class TracedPolicy:
    """A policy whose every answer is a span of its own (`<role>-policy`) with the role, the
    candidate and the policy's label as metadata: the tuner answers with no model call, and its
    decisions belong in a trace as much as an LLM's. Inputs are the request's identity, never
    its task or sources; outputs are compacted."""

    def __init__(self, inner: Any, role: str):
        self.inner, self.role = inner, role
        self.label = getattr(inner, "label", type(inner).__name__)

    def _call(self, method: str, request: Any) -> Any:
        from langsmith import traceable

        candidate = getattr(request, "candidate_id", None) or getattr(request, "child_id", None) \
            or getattr(request, "member_id", None)
        metadata = {"role": self.role, "policy": self.label, "candidate_id": candidate,
                    "iteration": getattr(request, "iteration", None),
                    "task": getattr(getattr(request, "task", None), "name", None)}

        def inputs(_: dict) -> dict:
            return {"method": method, **metadata}

        def outputs(answer: Any) -> dict:
            if dataclasses.is_dataclass(answer) and not isinstance(answer, type):
                answer = dataclasses.asdict(answer)
            return compact(answer if isinstance(answer, dict) else {"output": answer})

        fn = traceable(name=f"{self.role}-policy", run_type="chain", metadata=metadata,
                       process_inputs=inputs, process_outputs=outputs)(getattr(self.inner, method))
        return fn(request)

    def plan(self, request: Any) -> Any:
        return self._call("plan", request)

    def write(self, request: Any) -> Any:
        return self._call("write", request)

    def fix(self, request: Any) -> Any:
        return self._call("fix", request)

    def summarize(self, request: Any) -> Any:
        return self._call("summarize", request)
