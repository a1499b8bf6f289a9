"""Token and $ budgets that hold, and the running spend they are held against.

The state's usage ledger is the record, but parallel branches (the samples of one iteration)
cannot see each other's usage in it. So each run has a `RunLedger` in this process, keyed by
its run directory: what was spent, what the calls in flight are expected to spend, the limits,
and a fatal endpoint error that ends the run. `tools/llm.call_model` admits every model call
against it (spend + reservations + this call's projection must fit the budget); the graph syncs
its spend from the state at each iteration start, where the state is exact, with the calls this
process settled that the state does not hold yet (each call once: `once_each`, for a replayed
reply whose record the state holds already); a call in flight there (one that outlived its
iteration under --quorum) keeps its reservation until it settles.

Projections come from the calls so far: the mean call of the same role (`Means`). Under a budget
a call reserves its worst case, the prompt and the longest reply it may get, which the request
carries as its reply limit (tools/llm.read_reply reads no further); a call the budget cannot pay
for is `not_sent`, not failed. A role whose calls failed `DEAD_AFTER` times in a row is recorded
here like a fatal endpoint error, so every later call of the run fails at once.

A budget buys kernels before plans: each iteration promises the kernel calls of the plans already
made (`RunLedger.promise`), and a planner that plans ahead of them (the pipeline schedule's,
`planning_ahead`) is admitted only where those calls, at their full reservation, still fit after
its own."""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import math
import os
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

# A role whose calls fail this many times in a row (each after its retries) ends the run.
DEAD_AFTER = 3
# Under a budget, a call reserves its longest possible reply: the model's max_tokens, else this
# many of its role's mean replies, at least OUTPUT_CEILING_MIN; below MIN_OUTPUT it is not sent.
OUTPUT_CEILING_CALLS, OUTPUT_CEILING_MIN, MIN_OUTPUT = 4, 8192, 256


# ---------------------------------------------------------------- token estimates

@lru_cache(maxsize=1)
def _encoder() -> Any:
    """tiktoken's o200k_base when its file is already cached (tiktoken downloads it otherwise,
    and a run must not wait on the network for an estimate); else None."""
    try:
        import tiktoken
    except ImportError:
        return None
    url = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
    cache = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR") or os.path.join(
        tempfile.gettempdir(), "data-gym-cache")
    if not os.path.isfile(os.path.join(cache, hashlib.sha1(url.encode()).hexdigest())):
        return None
    try:
        return tiktoken.get_encoding("o200k_base")
    except Exception:  # noqa: BLE001 - a corrupt cache: fall back to the character estimate
        return None


def estimate_tokens(text: str) -> int:
    """Tokens in text: tiktoken where available offline, else ~4 characters per token."""
    encoder = _encoder()
    if encoder is not None:
        return len(encoder.encode(text, disallowed_special=()))
    return (len(text) + 3) // 4


class RunningCount:
    """estimate_tokens of a text that arrives in pieces (a streamed reply), without counting it
    all again at each piece: characters summed, or with tiktoken each piece on its own (a token
    split between two pieces counts in both: the count errs high, never low)."""

    def __init__(self) -> None:
        self.tokens = 0
        self._chars = 0

    def plus(self, text: str) -> int:
        """The count once `text` is added (not added yet)."""
        if _encoder() is not None:
            return self.tokens + estimate_tokens(text)
        return (self._chars + len(text) + 3) // 4

    def add(self, text: str) -> None:
        self.tokens = self.plus(text)
        self._chars += len(text)


# ---------------------------------------------------------------- spend

@dataclass
class Spend:
    tokens: int = 0
    cost_usd: float = 0.0
    # a reservation's reply limit: the request must carry it (None: the model's own limit holds)
    output_cap: int | None = None
    # under a budget, what the reservation holds for the prompt and for the reply: the reply is
    # read up to `reply_tokens` and no further, whatever the server sends (tools/llm.read_reply)
    input_tokens: int = 0
    reply_tokens: int | None = None

    def add(self, tokens: int, cost_usd: float, sign: int = 1) -> None:
        self.tokens += sign * tokens
        self.cost_usd += sign * cost_usd


@dataclass(frozen=True)
class Limits:
    max_tokens: int | None = None
    max_cost_usd: float | None = None

    def output_room(self, spent: Spend, prompt_tokens: int, prices: tuple[float, float]) -> float:
        """Reply tokens the budget left pays for, after `spent` and a prompt of `prompt_tokens`."""
        room = float("inf")
        if self.max_tokens is not None:
            room = self.max_tokens - spent.tokens - prompt_tokens
        if self.max_cost_usd is not None and prices[1] > 0:
            left = self.max_cost_usd - spent.cost_usd - prompt_tokens * prices[0] / 1e6
            room = min(room, left * 1e6 / prices[1])
        return max(0.0, room)

    def refusal(self, spent: Spend, more: Spend) -> str | None:
        """Why `more` on top of `spent` does not fit, or None when it does."""
        if self.max_tokens is not None and spent.tokens + more.tokens > self.max_tokens:
            return (f"token budget of {self.max_tokens:,} would be exceeded ({spent.tokens:,} spent or in flight, "
                    f"about {more.tokens:,} more needed)")
        if self.max_cost_usd is not None and spent.cost_usd + more.cost_usd > self.max_cost_usd:
            return (f"cost budget of ${self.max_cost_usd:.4g} would be exceeded (${spent.cost_usd:.4g} spent or in "
                    f"flight, about ${more.cost_usd:.4g} more needed)")
        return None


def call_tokens(record: Mapping[str, Any]) -> int:
    return int(record.get("input_tokens") or 0) + int(record.get("output_tokens") or 0)


JOINED = "+"  # a record of several requests (policies/llm._merged) joins their `call` ids with it


def call_ids(record: Mapping[str, Any]) -> list[str]:
    """The ids of the requests a ledger record stands for (none for a record of an older run)."""
    return [part for part in str(record.get("call") or "").split(JOINED) if part]


def once_each(usage: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    """The ledger's records, each call once. A reply replayed from the run cache carries its
    original record, `call` id included: when the state already holds that record (a resumed run
    that runs a failed iteration again), it is the same call, not another. Records without an id
    (older runs) all count."""
    seen: set[str] = set()
    for record in usage:
        call = record.get("call")
        if call:
            if call in seen:
                continue
            seen.add(call)
        yield record


@dataclass
class Means:
    """Mean tokens per call by role (input, output, calls): the projection of a role's next call.
    Its input is the larger of the role's mean (a server's count, not our estimate of it) and the
    prompt's estimate; its output the role's mean, else the mean of every call so far."""

    by_role: dict[str, list[int]] = field(default_factory=dict)

    def add(self, record: Mapping[str, Any]) -> None:
        for key in (record.get("role") or "?", "*"):
            entry = self.by_role.setdefault(key, [0, 0, 0])
            entry[0] += int(record.get("input_tokens") or 0)
            entry[1] += int(record.get("output_tokens") or 0)
            entry[2] += 1

    def call(self, role: str, prompt_estimate: int) -> tuple[int, int]:
        own = self.by_role.get(role)
        seen = own or self.by_role.get("*")
        output = seen[1] // seen[2] if seen else 0
        # the larger of the role's mean and this prompt's estimate: prompts grow over a run
        return max(own[0] // own[2] if own else 0, prompt_estimate), output


def _call_spend(tokens_in: int, tokens_out: int, prices: tuple[float, float], output_cap: int | None = None,
                held: bool = False) -> Spend:
    """A call's projected spend; `held`: a budget's reservation, whose reply is read no further."""
    return Spend(tokens_in + tokens_out, (tokens_in * prices[0] + tokens_out * prices[1]) / 1e6, output_cap,
                 tokens_in, tokens_out if held else None)


_ahead: contextvars.ContextVar[bool] = contextvars.ContextVar("accelopt_planning_ahead", default=False)
KERNEL_ROLES = ("executor", "fixer")  # the calls that write kernels: what a promise is kept for


@contextlib.contextmanager
def planning_ahead(ahead: bool = True) -> Iterator[None]:
    """Model calls inside the block plan a later iteration: the kernels promised come first."""
    token = _ahead.set(ahead)
    try:
        yield
    finally:
        _ahead.reset(token)


class RunLedger:
    """One run's running spend, shared by its branches; every method is thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)  # a reservation went: a refused call may fit now
        self.limits = Limits()
        self.spent = Spend()
        self.reserved = Spend()
        self.means = Means()
        self.fatal: str | None = None
        self.failing: dict[str, int] = {}  # a role's calls failed in a row (retries spent), reset by a reply
        # every call this process settled for the run, by call id: one the state does not hold yet (a
        # call that outlived its iteration under --quorum, landed and not yet collected) still counts
        self.settled: dict[str, Mapping[str, Any]] = {}
        # per role, the most a server's prompt count exceeded our estimate by (x): later prompts are
        # projected at it, so that a reply the server ends itself stays within its reservation
        self.input_ratio: dict[str, float] = {}
        self.promised = 0  # kernel calls of plans already made that have not asked for admission yet

    def promise(self, calls: int) -> None:
        """An iteration's kernels are sent: `calls` kernel calls come, ahead of any plan for later."""
        with self._lock:
            self.promised = calls

    def redeem(self) -> None:
        """A kernel call asks (admitted, refused or replayed): one promise less to keep room for."""
        with self._lock:
            self.promised = max(0, self.promised - 1)

    def sync(self, usage: Sequence[Mapping[str, Any]], limits: Limits, fresh: bool = False) -> None:
        """At an iteration boundary: the spend is the state's ledger (exact: replies replayed from
        the run cache are in it) with every call this process settled that it does not hold yet,
        each call once. Under --quorum a call may outlive its iteration: landed, it is among the
        settled; in flight, its reservation stays until it settles. A fatal error stays for the
        run's later iterations (one met after the selector stops the next); `fresh` (a run's first
        iteration) forgets one of an earlier run in this process."""
        with self._lock:
            self.limits, self.spent, self.means, self.promised = limits, Spend(), Means(), 0
            if fresh:
                self.fatal, self.failing, self.input_ratio, self.settled = None, {}, {}, {}
            held = {call for record in usage for call in call_ids(record)}
            for record in once_each([*usage, *(r for call, r in self.settled.items() if call not in held)]):
                self.spent.add(call_tokens(record), float(record.get("cost_usd") or 0.0))
                self.means.add(record)

    def admit(self, role: str, prompt_estimate: int, prices: tuple[float, float],
              max_output: int | None = None, wait_s: float = 0.0) -> tuple[Spend | None, str | None]:
        """Reserve what this call may spend: (the reservation, None), or (None, why not).

        Without a budget, its projected spend (the role's mean call). With one, its worst case:
        the prompt and the longest reply it may get, the model's max_tokens (`max_output`; without
        one, OUTPUT_CEILING_CALLS x the role's mean reply, at least OUTPUT_CEILING_MIN tokens),
        cut to what the budget has left after the calls in flight (then `output_cap`, which the
        request carries). The reply is read up to what the reservation holds for it and no further
        (`reply_tokens`: tools/llm.read_reply stops reading there), so a server that ignores the
        request's limit cannot take a run past its budget either, however many calls are in
        flight. A call left less than half its role's mean reply is not sent: it would be cut off.
        A call refused while others hold reservations waits (up to `wait_s` for each) for them to
        settle and asks again: what they spend is mostly less than they hold, and the room they
        leave may be enough."""
        with self._settled:
            while True:
                more, refusal = self._admit_once(role, prompt_estimate, prices, max_output)
                held = self.reserved.tokens > 0 or self.reserved.cost_usd > 1e-12
                if refusal is None or not held or not self._settled.wait(wait_s):
                    return more, refusal

    def _admit_once(self, role: str, prompt_estimate: int, prices: tuple[float, float],
                    max_output: int | None) -> tuple[Spend | None, str | None]:
        """admit's reservation against what is spent and held now (the lock held)."""
        ratio = self.input_ratio.get(role, 1.0)
        tokens_in, tokens_out = self.means.call(role, math.ceil(prompt_estimate * ratio))
        in_flight = Spend(self.spent.tokens + self.reserved.tokens, self.spent.cost_usd + self.reserved.cost_usd)
        short = False
        if self.limits.max_tokens is None and self.limits.max_cost_usd is None:
            more = _call_spend(tokens_in, tokens_out, prices)
        else:
            ceiling = max_output or max(OUTPUT_CEILING_MIN, OUTPUT_CEILING_CALLS * tokens_out)
            cap = int(min(ceiling, self.limits.output_room(in_flight, tokens_in, prices)))
            least = min(ceiling, max(MIN_OUTPUT, tokens_out // 2))  # shorter, the reply would be cut off
            short = cap < least
            more = _call_spend(tokens_in, max(cap, least), prices,
                               output_cap=cap if cap < ceiling or max_output is None else None, held=True)
        refusal = self.limits.refusal(in_flight, more) or (
            "the budget left cannot pay for a whole reply" if short else None)
        if refusal is None and _ahead.get() and self.promised:
            refusal = self._kernels_first(in_flight, more, prices, max_output)
        if refusal is not None:
            return None, refusal
        self.reserved.add(more.tokens, more.cost_usd)
        return more, None

    def _kernels_first(self, in_flight: Spend, more: Spend, prices: tuple[float, float],
                       max_output: int | None) -> str | None:
        """Why a call planning ahead does not fit beside the kernels promised (each at the
        reservation it would get alone: its role's mean prompt and longest reply), or None."""
        tokens_in, tokens_out = self.means.call("executor", more.input_tokens)
        ceiling = max_output or max(OUTPUT_CEILING_MIN, OUTPUT_CEILING_CALLS * tokens_out)
        kernels = _call_spend(tokens_in * self.promised, ceiling * self.promised, prices)
        ahead = Spend(in_flight.tokens + more.tokens, in_flight.cost_usd + more.cost_usd)
        if self.limits.refusal(ahead, kernels) is None:
            return None
        return (f"the {self.promised} kernel call(s) of the plans already made come first (about "
                f"{kernels.tokens:,} tokens held for them)")

    def settle(self, reservation: Spend | None, record: dict | None, prompt_estimate: int = 0) -> None:
        """A call ended: its reservation goes, its real spend (if it got a reply) comes in; the
        server's count of the prompt against our estimate of it (`prompt_estimate`) calibrates
        the role's later projections."""
        with self._settled:
            self._settled.notify_all()
            if reservation is not None:
                self.reserved.add(reservation.tokens, reservation.cost_usd, sign=-1)
            if record is not None and prompt_estimate > 0 and not record.get("estimated"):
                ratio = int(record.get("input_tokens") or 0) / prompt_estimate
                role = record.get("role") or "?"
                self.input_ratio[role] = max(self.input_ratio.get(role, 1.0), ratio)
            if record is not None:
                self.spent.add(call_tokens(record), float(record.get("cost_usd") or 0.0))
                self.means.add(record)
                if record.get("call"):
                    self.settled[str(record["call"])] = record

    def fail(self, message: str) -> None:
        """A fatal endpoint error: every later call of this run fails at once with it."""
        with self._lock:
            self.fatal = self.fatal or message

    def call_failed(self, role: str, who: str, message: str) -> None:
        """A call failed for good (its retries spent). DEAD_AFTER in a row from one role end the
        run as a fatal error would: that role cannot get a reply, and waiting on it costs time.
        `who`: the role's model and endpoint, as the run's failure line names them."""
        with self._lock:
            self.failing[role] = self.failing.get(role, 0) + 1
            if self.failing[role] >= DEAD_AFTER and self.fatal is None:
                self.fatal = f"{who}: no usable reply to {self.failing[role]} calls in a row; the last: {message}"

    def call_answered(self, role: str) -> None:
        with self._lock:
            self.failing.pop(role, None)

    def reopen(self) -> None:
        """A resumed run: the endpoint may be fixed; its calls are tried again."""
        with self._lock:
            self.fatal, self.failing = None, {}


_ledgers: dict[str | None, RunLedger] = {}
_ledgers_lock = threading.Lock()


def ledger(run_dir: str | None) -> RunLedger:
    """The run's ledger in this process (runs without a directory share one, synced per iteration)."""
    with _ledgers_lock:
        return _ledgers.setdefault(run_dir, RunLedger())


# ---------------------------------------------------------------- projections from the state's ledger

def mean_call(spent: dict, role: str) -> Spend:
    """The mean call of a role in a `tools/llm.totals` summary (of every call before the role made one)."""
    bucket = spent.get("by_role", {}).get(role) or spent
    calls = bucket.get("calls") or 0
    if not calls:
        return Spend()
    return Spend((bucket["input_tokens"] + bucket["output_tokens"]) // calls, bucket["cost_usd"] / calls)


def next_step(spent: dict, planners: int, executors: int) -> Spend:
    """What the next iteration spends before anything can be measured: its planner calls and executor calls."""
    planner, executor = mean_call(spent, "planner"), mean_call(spent, "executor")
    return Spend(planner.tokens * planners + executor.tokens * executors,
                 planner.cost_usd * planners + executor.cost_usd * executors)


def affordable(spent: dict, limits: Limits, role: str, wanted: int) -> int:
    """How many of `wanted` calls of a role fit what is left of the budget, at the role's mean call."""
    each = mean_call(spent, role)
    used = Spend(spent.get("input_tokens", 0) + spent.get("output_tokens", 0), spent.get("cost_usd", 0.0))
    fits = wanted
    if limits.max_tokens is not None and each.tokens > 0:
        fits = min(fits, max(0, (limits.max_tokens - used.tokens) // each.tokens))
    if limits.max_cost_usd is not None and each.cost_usd > 0:
        fits = min(fits, max(0, int((limits.max_cost_usd - used.cost_usd) / each.cost_usd)))
    return fits
