"""The replay server's stated model of a served LLM: how long a reply would take, and how many
tokens it would spend. A model of a server, not a measurement of one.

One request, in modelled seconds:

    queue    = the wait for a free sequence slot: at most `max_num_seqs` requests decode at once
               (vLLM's --max-num-seqs); a request past it waits until one of them ends
    ttft     = ttft_base_s + prompt_tokens / prefill_tok_s
    decode   = (reasoning_tokens + content_tokens) / rate
    rate     = decode_tok_s / (1 + slowdown * (streams - 1)), `streams` being the requests decoding
               when this one starts, itself included; the rate is fixed at that moment (a stream
               that starts alone keeps its speed when others join: a simplification; and one that
               starts in a crowd does not speed up as the crowd ends, which overstates the slowest
               reply of a batch sent at once, the tail --quorum cuts: a served model shares its
               decode among the streams running at each step)
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
have waited on earlier replies overlap on the modelled clock, and its modelled seconds and queue
waits are upper bounds.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

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

    def describe(self) -> dict:
        return asdict(self)


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
    streams: int           # requests decoding when this one started, itself included
    tok_s: float           # its decode rate

    @property
    def completion_tokens(self) -> int:
        return self.reasoning_tokens + self.content_tokens

    @property
    def total_s(self) -> float:
        return self.queue_s + self.ttft_s + self.decode_s

    @property
    def end_s(self) -> float:
        return self.arrival_s + self.total_s


class LatencyModel:
    """The modelled server: admits requests on a modelled clock (real seconds since start divided
    by the time scale, or plain real seconds at scale 0), queues them past max_num_seqs, and
    sleeps what it models, scaled. Thread-safe."""

    def __init__(self, prof: Profile, time_scale: float = 1.0, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        if time_scale < 0:
            raise ValueError("time_scale must be >= 0")
        self.profile, self.time_scale = prof, time_scale
        self._clock, self._sleep = clock, sleep
        self._t0 = clock()
        self._ends: list[float] = []   # modelled end times of the requests admitted
        self._lock = threading.Lock()

    def now(self) -> float:
        """The modelled clock."""
        elapsed = self._clock() - self._t0
        return elapsed / self.time_scale if self.time_scale > 0 else elapsed

    def admit(self, prompt_tokens: int, reasoning_tokens: int, content_tokens: int,
              at: float | None = None) -> Timing:
        """Model one request arriving at `at` (modelled seconds; default now)."""
        prof = self.profile
        with self._lock:
            arrival = self.now() if at is None else at
            running = sorted(e for e in self._ends if e > arrival)
            start = arrival
            if len(running) >= prof.max_num_seqs:
                # wait until enough of them have ended to leave one slot
                start = running[len(running) - prof.max_num_seqs]
            streams = sum(1 for e in running if e > start) + 1
            rate = prof.decode_tok_s / (1 + prof.slowdown * (streams - 1))
            ttft = prof.ttft_base_s + prompt_tokens / prof.prefill_tok_s
            decode = (reasoning_tokens + content_tokens) / rate
            timing = Timing(prompt_tokens, reasoning_tokens, content_tokens, arrival, start - arrival, ttft, decode,
                            streams, rate)
            # a request ended long before this arrival can no longer hold a slot
            self._ends = [e for e in self._ends if e > arrival - 3600.0] + [timing.end_s]
        return timing

    def wait(self, modelled_s: float) -> None:
        """Sleep modelled seconds at the time scale; at scale 0, not at all."""
        if self.time_scale > 0 and modelled_s > 0:
            self._sleep(modelled_s * self.time_scale)
