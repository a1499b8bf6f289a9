"""Model calls that outlive the branch that sent them: an iteration that does not wait for its slowest reply.

Under `--quorum Q` (the overlapping schedules), an iteration's kernel branches share a `Quorum`:
once Q of its replies have landed, a branch still waiting on its model stops waiting (`Detached`)
and its attempt joins a later iteration (the selector's `pending_writes`). The call itself goes on
in its own thread: `tools/llm.call_model` runs it through `start`, and the later iteration's branch,
asking the very same call again, finds it here by its key (or, once landed, in the run cache) and
waits for it. No call is sent twice in one process; a call in flight when the process dies is sent
again by the resumed run, as any call in flight at a kill is.

The run's budget ledger (tools/budget.py) keeps an in-flight call's reservation across the
iteration boundary, and counts a call that landed before any branch collected it. A run that
stops before its last iteration waits for its calls in flight (`collect`, from the selector), so
that every call it made is in its ledger.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from typing import Any


class Detached(Exception):
    """The iteration moved on before this call's reply landed: the call goes on, collected later."""


class Quorum:
    """One iteration's kernel branches: how many replies must land before the rest stop waiting.
    A reply is named by its attempt, so that it counts once however often its branch runs: a
    resumed run starts from the replies that landed before the kill (`landed`)."""

    def __init__(self, needed: int, landed: Iterable[str] = ()):
        self.needed = needed
        self._landed = set(landed)
        self._changed = threading.Condition()

    @property
    def landed(self) -> int:
        return len(self._landed)

    def land(self, reply: str) -> None:
        with self._changed:
            self._landed.add(reply)
            self._changed.notify_all()

    def met(self) -> bool:
        return self.landed >= self.needed

    def wait(self, call: Future) -> bool:
        """Until the call is done (True) or the quorum is met without it (False)."""
        call.add_done_callback(lambda _: self._notify())
        with self._changed:
            self._changed.wait_for(lambda: call.done() or self.met())
        return call.done()

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()


def needed(share: float, replies: int) -> int:
    """The replies of `replies` an iteration waits for under --quorum `share` (at least one)."""
    return max(1, math.ceil(share * replies - 1e-9))


_quorums: dict[tuple[str | None, int], Quorum] = {}
_calls: dict[tuple[str | None, str], Future] = {}
_labels: dict[tuple[str | None, str], str] = {}  # the attempt each call writes (its candidate id)
_lock = threading.Lock()
_detach_at: contextvars.ContextVar[Quorum | None] = contextvars.ContextVar("accelopt_detach_at", default=None)


def quorum(run_dir: str | None, iteration: int, replies: int, landed: Iterable[str] = ()) -> Quorum:
    """The iteration's quorum in this process, of `replies`, made by its first branch (the same in
    all), counting the replies that had `landed` in an earlier process of the run."""
    with _lock:
        if (run_dir, iteration) not in _quorums:
            _quorums[(run_dir, iteration)] = Quorum(replies, landed)
        return _quorums[(run_dir, iteration)]


@contextlib.contextmanager
def detach_at(at: Quorum | None) -> Iterator[None]:
    """Model calls made inside the block stop waiting once `at` is met (None: they wait for their reply)."""
    token = _detach_at.set(at)
    try:
        yield
    finally:
        _detach_at.reset(token)


def start(run_dir: str | None, key: str, call: Callable[[], Any], label: str | None = None) -> Any:
    """`call()`'s result. Inside `detach_at(quorum)`, the call runs in a thread of its own (in this
    context: its trace and timeline stay the branch's), and a call of the same key already in flight
    is waited on instead of sent again; Detached when the quorum is met first. Outside, it runs here.
    `label`: the attempt the call writes, which `outcomes` names."""
    at = _detach_at.get()
    with _lock:  # looked up and, under a quorum, registered at once: a call of one key starts once
        running = _calls.get((run_dir, key))
        fresh = running is None and at is not None
        if fresh:
            running = _calls[(run_dir, key)] = Future()
            if label:
                _labels[(run_dir, key)] = label
    if running is None:
        return call()
    if fresh:
        context = contextvars.copy_context()
        threading.Thread(target=context.run, args=(_settle, running, call), daemon=True,
                         name=f"accelopt-call-{key[:8]}").start()
    if at is not None and not at.wait(running):
        raise Detached("the iteration met its quorum before this reply landed")
    with _lock:
        _calls.pop((run_dir, key), None)  # collected: its usage is the collecting branch's to record
        _labels.pop((run_dir, key), None)
    return running.result()  # (outside a quorum: waits for it, whatever it ends with)


def _settle(running: Future, call: Callable[[], Any]) -> None:
    try:
        running.set_result(call())
    except BaseException as exc:  # noqa: BLE001 - handed to whoever collects the call
        running.set_exception(exc)


def _usage_of(result: Any) -> Mapping[str, Any] | None:
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], Mapping):
        return result[1]
    return None


def in_flight(run_dir: str | None) -> int:
    """This run's calls made under a quorum that have not landed yet (waited on or not)."""
    with _lock:
        return sum(1 for (rd, _), f in _calls.items() if rd == run_dir and not f.done())


Outcome = tuple[str | None, Mapping[str, Any] | None, BaseException | None]  # (attempt, usage, error)


def outcomes(run_dir: str | None) -> list[Outcome]:
    """A run that stops before its last iteration: wait for its calls still in flight (none is sent
    again; each ends on its own, its retries bounded) and give, per call, the attempt it writes and
    its usage record (a reply) or its error, so that what the run spent is all in its ledger and
    every attempt left in flight gets its real outcome. They leave the registry."""
    with _lock:
        mine = [k for k in _calls if k[0] == run_dir]
    ended: list[Outcome] = []
    for k in mine:
        call = _calls.get(k)
        if call is None:
            continue
        record, error = None, None
        try:
            record = _usage_of(call.result())
        except BaseException as exc:  # noqa: BLE001 - a call that failed spent nothing the ledger counts
            error = exc
        with _lock:
            _calls.pop(k, None)
            ended.append((_labels.pop(k, None), record, error))
    return ended


def collect(run_dir: str | None) -> list[Mapping[str, Any]]:
    """The usage records of `outcomes`: the calls in flight that got a reply."""
    return [record for _, record, _ in outcomes(run_dir) if record is not None]


def forget(run_dir: str | None) -> None:
    """A run ended: its quorums and uncollected calls are dropped (a call still in flight ends on its own)."""
    with _lock:
        for iteration in [k for k in _quorums if k[0] == run_dir]:
            del _quorums[iteration]
        for call in [k for k in _calls if k[0] == run_dir]:
            del _calls[call]
            _labels.pop(call, None)
