"""How many calls an endpoint serves at once, learned from its 429s.

A server that admits n requests at a time (vLLM's and SGLang's queues, a hosted API's concurrency
limit) answers the rest with 429 and a Retry-After. Retried as they came, the refused calls all
come back together at the end of the wait and n of them get through again: a stampede each
round, and calls fail once their attempts are spent. So each endpoint has a `Gate`: after a 429
its calls run at most as many at a time as were running beside the refused one, and the others
queue here, each sent as a running call ends. After `PROBE_AFTER` x the limit replies without a
429 the gate lets one more through (the server may have room again), as AIMD would."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

PROBE_AFTER = 4  # replies per allowed call without a 429 before one more call is let through


class Gate:
    """One endpoint's calls at once; thread-safe. `limit` is None until the endpoint refuses one."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self.limit: int | None = None
        self.running = 0
        self.peak = 0  # the most calls this gate let run at once (for tests and logs)
        self._answered = 0  # replies since the limit was last set or raised

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one of the endpoint's calls for the block; waits while the limit is reached."""
        with self._changed:
            self._changed.wait_for(lambda: self.limit is None or self.running < self.limit)
            self.running += 1
            self.peak = max(self.peak, self.running)
        try:
            yield
        finally:
            with self._changed:
                self.running -= 1
                self._changed.notify_all()

    def refused(self) -> None:
        """A call (out of its slot now) got a 429: the endpoint serves at most the calls running now."""
        with self._changed:
            running = max(1, self.running)
            self.limit = running if self.limit is None else min(self.limit, running)
            self._answered = 0

    def answered(self) -> None:
        """A reply: enough of them in a row and the gate lets one more call through."""
        with self._changed:
            if self.limit is None:
                return
            self._answered += 1
            if self._answered >= PROBE_AFTER * self.limit:
                self.limit, self._answered = self.limit + 1, 0
                self._changed.notify_all()


_gates: dict[str, Gate] = {}
_lock = threading.Lock()


def gate(endpoint: str) -> Gate:
    """The gate of an endpoint (its base URL) in this process, shared by every role and run."""
    with _lock:
        return _gates.setdefault(endpoint, Gate())
