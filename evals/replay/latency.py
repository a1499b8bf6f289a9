"""The replay server's stated model of a served LLM: how long a reply would take, and how many
tokens it would spend. A model of a server, not a measurement of one.

One request, in modelled seconds:

    queue    = the wait for a free sequence slot: at most `max_num_seqs` requests are past their
               queue at once (vLLM's --max-num-seqs); a request past it waits until one of them ends
    ttft     = ttft_base_s + prompt_tokens / prefill_tok_s
    decode   = (reasoning_tokens + content_tokens) tokens, decoded while the server shares its
               decode among the requests decoding at each moment (processor sharing, as a
               continuously batched server does): while n decode, each gets
               decode_tok_s / (1 + slowdown * (n - 1)) tokens a second, so a request slows as
               others start and speeds up as they end
    total    = queue + ttft + decode

Tokens: prompt and content tokens are their characters / 4 (rounded up); reasoning tokens are
drawn per reply, deterministically from a hash of the request, from the profile's range for the
role (`draw_reasoning`).

The profiles' numbers are this project's assumptions, in the range public reports give; none was
measured here, and each can be replaced (`Profile(...)`, `dataclasses.replace`):

- `gpt-oss-120b`: one H100 80 GB serving gpt-oss-120b (MXFP4 MoE weights, ~5B active
  parameters) under vLLM. Prefill 8,000 tok/s; TTFT base 0.3 s (scheduling, the first forward,
  the HTTP round trip); decode 150 tok/s for a stream alone, falling 3 % per concurrent stream
  (32 streams: 78 tok/s each, ~2,500 tok/s in all, the order of vLLM's reported batch throughput
  for this model on one H100); max_num_seqs 32. Reasoning (medium effort): planner 1,500-4,000
  tokens, executor 1,000-3,000, fixer 800-2,000, summarizer 300-800.
- `gpt-4.1-mini-hosted`: OpenAI's hosted gpt-4.1-mini. TTFT base 0.5 s (network and queueing
  at the provider), prefill 20,000 tok/s, decode 75 tok/s per stream (the order of public
  output-speed listings), no slowdown with load (the provider's capacity is not ours), and 256
  streams at once (a stand-in for a rate limit). Not a reasoning model: no reasoning tokens.

`--time-scale` multiplies every wait the server actually sleeps: 1 answers in modelled real
time, 0.1 ten times faster, 0 at once (tests). The modelled seconds are reported either way, but
only at 1 is a run's wall time a rehearsal: at 0 replies come at once, so requests that would
have waited on earlier replies overlap on the modelled clock, and a reply's modelled seconds are
those it would take should nothing else arrive (`LatencyModel.timing`).

Until 2026-11-28 (commit before this model's), a request's rate was fixed when it started: it
did not speed up as the others ended, which overstated the slowest reply of a batch sent at once
(the tail --quorum cuts). Figures in BENCHMARKS.md name their commit.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from copy import deepcopy
from dataclasses import asdict, dataclass, field
from typing import Any

CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class Profile:
    """A served model's speed and token habits."""

    name: str
    prefill_tok_s: float = 8000.0
    ttft_base_s: float = 0.3
    decode_tok_s: float = 150.0          # one stream alone
    slowdown: float = 0.03               # per extra concurrent stream: rate / (1 + slowdown * (n - 1))
    max_num_seqs: int = 32               # requests decoding at once; the rest queue
    max_model_len: int = 131072          # what GET /v1/models lists
    reasoning: dict[str, tuple[int, int]] = field(default_factory=lambda: {
        "planner": (1500, 4000), "executor": (1000, 3000), "fixer": (800, 2000), "summarizer": (300, 800)})
    note: str = ""

    @property
    def peak_decode_tok_s(self) -> float:
        """The most tokens a second this server decodes, all streams together: with max_num_seqs decoding
        (n streams decode n * rate(n), which grows with n while slowdown < 1)."""
        n = self.max_num_seqs
        return n * self.decode_tok_s / (1 + self.slowdown * (n - 1))

    def describe(self) -> dict:
        return {**asdict(self), "peak_decode_tok_s": round(self.peak_decode_tok_s, 1)}


PROFILES: dict[str, Profile] = {
    "gpt-oss-120b": Profile(
        "gpt-oss-120b", note="gpt-oss-120b on one H100 under vLLM-like serving (assumed numbers, see latency.py)"),
    "gpt-4.1-mini-hosted": Profile(
        "gpt-4.1-mini-hosted", prefill_tok_s=20000.0, ttft_base_s=0.5, decode_tok_s=75.0, slowdown=0.0,
        max_num_seqs=256, max_model_len=1047576,
        reasoning={"planner": (0, 0), "executor": (0, 0), "fixer": (0, 0), "summarizer": (0, 0)},
        note="OpenAI's hosted gpt-4.1-mini (assumed numbers, see latency.py); no reasoning tokens"),
}


def profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r}: use one of {', '.join(PROFILES)}") from None


def count_tokens(text: str) -> int:
    """Tokens of a text as this model counts them: characters / 4, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def unit(*parts: object) -> float:
    """A number in [0, 1) that depends on the parts only (sha256): the replay's dice."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 64


def draw_reasoning(prof: Profile, role: str, key: str) -> int:
    """Reasoning tokens of one reply: uniform in the role's range, a function of the key alone."""
    low, high = prof.reasoning.get(role, (0, 0))
    return low + int(unit("reasoning", key) * (high - low + 1)) if high > low else low


@dataclass(frozen=True)
class Timing:
    """One request as modelled: its tokens and seconds (start and end on the model's clock)."""

    prompt_tokens: int
    reasoning_tokens: int
    content_tokens: int
    arrival_s: float
    queue_s: float
    ttft_s: float
    decode_s: float
    streams: int           # the most requests decoding at once while it decoded, itself included
    tok_s: float           # its mean decode rate

    @property
    def completion_tokens(self) -> int:
        return self.reasoning_tokens + self.content_tokens

    @property
    def total_s(self) -> float:
        return self.queue_s + self.ttft_s + self.decode_s

    @property
    def end_s(self) -> float:
        return self.arrival_s + self.total_s


@dataclass(eq=False)
class Flow:
    """One request inside the modelled server: where it stands on the model's clock."""

    prompt_tokens: int
    reasoning_tokens: int
    content_tokens: int
    arrival_s: float
    ttft_s: float
    left: float                        # decode tokens still to come
    start_s: float | None = None       # when it took a sequence slot (its queue ends)
    decode_from_s: float | None = None  # start + ttft
    end_s: float | None = None
    streams: int = 1                   # the most requests decoding at once while it decoded, itself included

    @property
    def completion_tokens(self) -> int:
        return self.reasoning_tokens + self.content_tokens


EPS_TOKENS = 1e-6


class LatencyModel:
    """The modelled server: admits requests on a modelled clock (real seconds since start divided
    by the time scale, or plain real seconds at scale 0), queues them past max_num_seqs, and shares
    its decode among the requests decoding at each moment (processor sharing: each gets
    decode_tok_s / (1 + slowdown * (n - 1)) while n decode). A request's waits (`until`) end when
    its tokens are decoded on that clock, at the time scale; at scale 0 at once. Thread-safe."""

    def __init__(self, prof: Profile, time_scale: float = 1.0, clock: Callable[[], float] = time.monotonic):
        if time_scale < 0:
            raise ValueError("time_scale must be >= 0")
        self.profile, self.time_scale = prof, time_scale
        self._clock = clock
        self._t0 = clock()
        self._t = 0.0                       # the model has been advanced to this moment
        self._queue: deque[Flow] = deque()  # waiting for a sequence slot
        self._prefill: list[Flow] = []      # a slot taken, its first token not yet out
        self._decoding: list[Flow] = []
        self._changed = threading.Condition()

    def now(self) -> float:
        """The modelled clock."""
        elapsed = self._clock() - self._t0
        return elapsed / self.time_scale if self.time_scale > 0 else elapsed

    def rate(self, streams: int) -> float:
        """Each stream's decode rate while `streams` decode at once."""
        return self.profile.decode_tok_s / (1 + self.profile.slowdown * (max(streams, 1) - 1))

    def enter(self, prompt_tokens: int, reasoning_tokens: int, content_tokens: int, at: float | None = None) -> Flow:
        """A request arriving now (or at `at`, modelled seconds, not before the model's last moment)."""
        prof = self.profile
        with self._changed:
            arrival = max(self.now() if at is None else at, self._t)
            self._advance(arrival)
            flow = Flow(prompt_tokens, reasoning_tokens, content_tokens, arrival,
                        prof.ttft_base_s + prompt_tokens / prof.prefill_tok_s, float(reasoning_tokens + content_tokens))
            self._queue.append(flow)
            self._settle(arrival)
            self._changed.notify_all()  # the decoders' rates changed: their waits are recomputed
        return flow

    def admit(self, prompt_tokens: int, reasoning_tokens: int, content_tokens: int,
              at: float | None = None) -> Timing:
        """`enter`, and its timing should nothing else arrive (`timing`)."""
        return self.timing(self.enter(prompt_tokens, reasoning_tokens, content_tokens, at))

    def timing(self, flow: Flow) -> Timing:
        """The flow's timing: as it ran, once ended; else as it would run should nothing else arrive."""
        with self._changed:
            ended = flow if flow.end_s is not None else self._projected(flow)
        assert ended.end_s is not None and ended.start_s is not None and ended.decode_from_s is not None
        decode = ended.end_s - ended.decode_from_s
        return Timing(flow.prompt_tokens, flow.reasoning_tokens, flow.content_tokens, flow.arrival_s,
                      ended.start_s - flow.arrival_s, flow.ttft_s, decode, ended.streams,
                      flow.completion_tokens / decode if decode > 0 else self.rate(ended.streams))

    def until(self, flow: Flow, decoded: float | None = None) -> None:
        """Wait until the flow has decoded `decoded` of its tokens (0: its first token is out; None:
        all, it ended), on the modelled clock at the time scale; at scale 0, not at all."""
        if self.time_scale == 0:
            return
        target = flow.completion_tokens if decoded is None else min(decoded, flow.completion_tokens)
        with self._changed:
            while True:
                now = self.now()
                self._advance(now)
                if self._reached(flow, target, now):
                    return
                wake = self._next_event(now, flow, target)
                self._changed.wait(timeout=max(0.0, wake - now) * self.time_scale + 1e-4)

    # ------------------------------------------------------------ the model (the caller holds the lock)

    def _reached(self, flow: Flow, target: float, now: float) -> bool:
        if flow.end_s is not None:
            return True
        return flow.decode_from_s is not None and flow.decode_from_s <= now and \
            flow.completion_tokens - flow.left >= target - EPS_TOKENS

    def _next_event(self, now: float, flow: Flow, target: float) -> float:
        """The next moment the model changes by itself (a request's first token, one ending), or
        the flow reaches its target at the rate it has now."""
        events = [f.decode_from_s for f in self._prefill if f.decode_from_s is not None]
        if self._decoding:
            rate = self.rate(len(self._decoding))
            events.append(now + min(f.left for f in self._decoding) / rate)
            if flow in self._decoding:
                events.append(now + max(0.0, target - (flow.completion_tokens - flow.left)) / rate)
        return min(events, default=now + 1.0)

    def _advance(self, to: float) -> None:
        """Run the model from its last moment to `to`: decode shared among the streams of each stretch."""
        t = self._t
        while True:
            self._settle(t)
            n = len(self._decoding)
            step = to
            if n:
                step = min(step, t + min(f.left for f in self._decoding) / self.rate(n))
            if self._prefill:
                step = min(step, min(f.decode_from_s or t for f in self._prefill))
            if step > t and n:
                for f in self._decoding:
                    f.left -= (step - t) * self.rate(n)
            t = max(t, step)
            if t >= to:
                self._settle(t)
                break
        self._t = max(self._t, to)

    def _settle(self, t: float) -> None:
        """What happens at moment t: requests that end, first tokens out, queued requests taking freed slots."""
        limit = self.profile.max_num_seqs
        changed = True
        while changed:
            changed = False
            for f in [f for f in self._decoding if f.left <= EPS_TOKENS]:
                f.left, f.end_s = 0.0, t
                self._decoding.remove(f)
                changed = True
            for f in [f for f in self._prefill if (f.decode_from_s or 0.0) <= t + 1e-12]:
                self._prefill.remove(f)
                self._decoding.append(f)
                changed = True
            while self._queue and len(self._prefill) + len(self._decoding) < limit:
                f = self._queue.popleft()
                f.start_s, f.decode_from_s = t, t + f.ttft_s
                self._prefill.append(f)
                changed = True
        for f in self._decoding:
            f.streams = max(f.streams, len(self._decoding))

    def _projected(self, flow: Flow) -> Flow:
        """The flow, ended, in a copy of the model run on with no other arrival."""
        copy = LatencyModel(self.profile, 0.0, self._clock)
        memo: dict[int, Any] = {}
        copy._t = self._t
        copy._queue = deque(deepcopy(list(self._queue), memo))
        copy._prefill = deepcopy(self._prefill, memo)
        copy._decoding = deepcopy(self._decoding, memo)
        mine = memo.get(id(flow)) or deepcopy(flow, memo)
        horizon = copy._t
        while mine.end_s is None:
            horizon += 3600.0
            copy._advance(horizon)
        return mine
