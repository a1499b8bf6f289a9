"""The replay server: an OpenAI-compatible HTTP endpoint that answers every role of an accelopt
run with real material, at a modelled speed. A REHEARSAL, NOT AN LLM: it reads nothing of a
request but which role asks (and how many plans, and the reply's token limit), and serves its
material whatever the prompt says, so that a configuration's wall time and GPU cost can be
rehearsed before tokens are paid for. It serves one model id, `replay`.

Roles are told apart by, in order: the response schema's name (`plans`: planner, `lesson`:
summarizer), the role the system message names (`You are the accelopt executor`), then the
prompt templates' section headings. What each role gets (material.py): the executor a kernel
in one ```python block (real, a variant, or, for a share of replies, a realistic failure); the
fixer a real kernel or a variant that keeps what it computes; the planner plans as the response
schema's JSON, or under `### Plan n: title` headings; the summarizer a lesson as one JSON object
with the keys the summarizer's reader takes.

Every choice is a function of (seed, role, the request's messages, and how many identical
requests came before: the K samples of one plan send one prompt), never of arrival order
among different requests. Timing and tokens: latency.py. Endpoints: POST /v1/chat/completions
(also `stream: true`, as SSE chunks with a final usage chunk, as vLLM sends them), GET /v1/models
(with vLLM's max_model_len), GET /replay/stats, GET /replay/served, GET /health.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from accelopt.evals.replay.latency import Flow, LatencyModel, Profile, Timing, count_tokens, draw_reasoning, unit
from accelopt.evals.replay.latency import profile as named_profile
from accelopt.evals.replay.material import FAILURES, Material, Served, failure
from accelopt.policies.replies import LESSON_KEYS
from accelopt.policies.structured_output import LESSON_SCHEMA, PLANS_SCHEMA
from accelopt.tools.llm_spec import ROLES

MODEL_ID = "replay"
NOTE = "accelopt replay server: a rehearsal, not an LLM"
DEFAULT_PLANS = 4
_SCHEMA_ROLES = {PLANS_SCHEMA["json_schema"]["name"]: "planner", LESSON_SCHEMA["json_schema"]["name"]: "summarizer"}
_ROLE_WORD = re.compile(rf"\b({'|'.join(ROLES)})\b", re.IGNORECASE)
# the prompt templates' own headings, when no system message names the role
_MARKERS = (("fixer", re.compile(r"^## (What went wrong|Kernel that failed)", re.MULTILINE)),
            ("executor", re.compile(r"^## Plan to implement", re.MULTILINE)),
            ("summarizer", re.compile(r"optimization lesson", re.IGNORECASE)),
            ("planner", re.compile(r"optimization plans", re.IGNORECASE)))
_PLAN_COUNT = re.compile(r"\b(\d{1,3})\s+(?:[\w-]+\s+){0,3}plans\b", re.IGNORECASE)


def message_text(message: dict) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def identify_role(body: dict) -> str:
    """planner, executor, fixer, summarizer, or unknown."""
    response_format = body.get("response_format")
    if isinstance(response_format, dict):
        name = (response_format.get("json_schema") or {}).get("name")
        if name in _SCHEMA_ROLES:
            return _SCHEMA_ROLES[name]
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    system = "\n".join(message_text(m) for m in messages if m.get("role") in ("system", "developer"))
    named = _ROLE_WORD.search(system)
    if named:
        return named.group(1).lower()
    prompt = "\n".join(message_text(m) for m in messages if m.get("role") == "user")
    return next((role for role, marker in _MARKERS if marker.search(prompt)), "unknown")


def plans_asked(body: dict) -> int:
    """How many plans the request asks for, where its text says a number; else DEFAULT_PLANS."""
    prompt = "\n".join(message_text(m) for m in body.get("messages") or [] if isinstance(m, dict))
    found = _PLAN_COUNT.search(prompt)
    return min(max(int(found.group(1)), 1), 64) if found else DEFAULT_PLANS


def messages_digest(body: dict) -> str:
    messages = [(m.get("role"), message_text(m)) for m in body.get("messages") or [] if isinstance(m, dict)]
    return hashlib.sha256(json.dumps(messages).encode()).hexdigest()


def source_digest(source: str) -> str:
    """A kernel's identity as served and as a run keeps it (a fenced block's text, stripped)."""
    return hashlib.sha256(source.strip().encode()).hexdigest()[:16]


@dataclass
class Answer:
    """One reply as the server composed it, with its place in the modelled server (its timing once it ends)."""

    role: str
    content: str
    finish_reason: str
    reasoning: str
    served: str                    # what the reply holds: real, variant, a failure's kind, plans, lesson, text
    origin: str
    flow: Flow | None = None
    schema: bool = False


@dataclass
class _RoleTotals:
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    modelled_s: float = 0.0
    queue_s: float = 0.0
    queued: int = 0
    served: dict[str, int] = field(default_factory=dict)


class ReplayServer:
    """The replay endpoint for one task, in a thread of this process:

        with ReplayServer("evals/realworld/tasks/rmsnorm_h128", seed=0, time_scale=0) as server:
            ... accelopt optimize TASK --model vllm:replay --base-url server.url ...
            server.stats()
    """

    def __init__(self, task_dir: str | Path, *, seed: int = 0, profile: str | Profile = "gpt-oss-120b",
                 time_scale: float = 1.0, failure_rate: float = 0.2, real_share: float = 0.3,
                 host: str = "127.0.0.1", port: int = 0):
        if not 0 <= failure_rate <= 1 or not 0 <= real_share <= 1:
            raise ValueError("failure_rate and real_share are shares: between 0 and 1")
        self.material = Material(task_dir)
        self.profile = profile if isinstance(profile, Profile) else named_profile(profile)
        self.seed, self.time_scale = seed, time_scale
        self.failure_rate, self.real_share = failure_rate, real_share
        self.host, self.port = host, port
        self.latency = LatencyModel(self.profile, time_scale)
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], int] = {}
        self._totals: dict[str, _RoleTotals] = {}
        self._kernels: dict[str, dict] = {}
        self._peak_streams = 0
        self._max_queue_s = 0.0
        self._started = time.monotonic()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ life

    def start(self) -> ReplayServer:
        server = self

        class Handler(_Handler):
            replay = server

        httpd = _HTTPServer((self.host, self.port), Handler)
        self._httpd = httpd
        self.port = httpd.server_address[1]
        self.latency = LatencyModel(self.profile, self.time_scale)
        self._started = time.monotonic()
        self._thread = threading.Thread(target=httpd.serve_forever, name="replay-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> ReplayServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The OpenAI-compatible base URL (ends in /v1)."""
        return f"http://{self.host}:{self.port}/v1"

    # ------------------------------------------------------------ answers

    def answer(self, body: dict) -> Answer:
        """The reply to one chat completion request, admitted to the latency model."""
        role = identify_role(body)
        digest = messages_digest(body)
        with self._lock:
            nth = self._seen.get((role, digest), 0)
            self._seen[(role, digest)] = nth + 1
        key = f"{self.seed}|{role}|{digest}|{nth}"
        answer = self._compose(role, key, body)
        reasoning_tokens = draw_reasoning(self.profile, role, key)
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        if isinstance(limit, int) and limit > 0:
            answer, reasoning_tokens = _cut_to(answer, reasoning_tokens, limit)
        answer.reasoning = (f"[replayed stand-in reasoning: {NOTE}. The {reasoning_tokens} reasoning tokens of this "
                            "reply are modelled, not written.]") if reasoning_tokens else ""
        prompt_tokens = sum(count_tokens(message_text(m)) for m in body.get("messages") or [] if isinstance(m, dict))
        answer.flow = self.latency.enter(prompt_tokens, reasoning_tokens, count_tokens(answer.content))
        self._count(answer)
        return answer

    def finished(self, answer: Answer) -> Timing:
        """Wait until the answer's last token is out (modelled, at the time scale), and count its seconds."""
        assert answer.flow is not None
        self.latency.until(answer.flow)
        timing = self.latency.timing(answer.flow)
        with self._lock:
            totals = self._totals.setdefault(answer.role, _RoleTotals())
            totals.modelled_s += timing.total_s
            totals.queue_s += timing.queue_s
            totals.queued += timing.queue_s > 0
            self._peak_streams = max(self._peak_streams, timing.streams)
            self._max_queue_s = max(self._max_queue_s, timing.queue_s)
        return timing

    def _compose(self, role: str, key: str, body: dict) -> Answer:
        schema = isinstance(body.get("response_format"), dict) and \
            body["response_format"].get("type") in ("json_schema", "json_object")
        m = self.material
        if role in ("executor", "fixer"):
            fixer = role == "fixer"
            kernel = m.kernel(unit(key, "pick"), unit(key, "which"), self.real_share, fixer=fixer)
            if not fixer and unit(key, "fail") < self.failure_rate:
                kernel = failure(kernel, FAILURES[int(unit(key, "kind") * len(FAILURES))], unit(key, "where"))
            return _kernel_answer(role, kernel)
        if role == "planner":
            plans = m.plan_choice(plans_asked(body), [unit(key, "plan", i) for i in range(len(m.plans))])
            if schema:
                content = json.dumps({"plans": [{"title": p["title"], "text": p["text"]} for p in plans]})
            else:
                content = f"Replayed plans ({NOTE}).\n\n" + "\n\n".join(
                    f"### Plan {i}: {p['title']}\n{p['text']}" for i, p in enumerate(plans, 1))
            return Answer(role, content, "stop", "", "plans", f"{len(plans)} of plans.json", schema=schema)
        if role == "summarizer":
            lesson = m.lesson(unit(key, "lesson"))
            lesson = {k: lesson[k] for k in LESSON_KEYS if k in lesson}
            text = json.dumps(lesson, indent=1)
            content = text if schema else f"Replayed lesson ({NOTE}).\n\n```json\n{text}\n```"
            return Answer(role, content, "stop", "", "lesson", f"plans.json lesson '{lesson['title']}'", schema=schema)
        return Answer(role, f"OK. ({NOTE}: it serves the accelopt roles {', '.join(ROLES)}; this request named "
                            "none of them.)", "stop", "", "text", "no role")

    def _count(self, answer: Answer) -> None:
        """Its request and tokens, as it is admitted (its seconds: `finished`)."""
        flow = answer.flow
        assert flow is not None
        with self._lock:
            totals = self._totals.setdefault(answer.role, _RoleTotals())
            totals.requests += 1
            totals.prompt_tokens += flow.prompt_tokens
            totals.completion_tokens += flow.completion_tokens
            totals.reasoning_tokens += flow.reasoning_tokens
            totals.served[answer.served] = totals.served.get(answer.served, 0) + 1
            if answer.role in ("executor", "fixer") and answer.served != "truncated":
                source = _fenced_source(answer.content)
                if source is not None:
                    self._kernels.setdefault(source_digest(source), {"kind": answer.served, "origin": answer.origin,
                                                                     "role": answer.role})

    # ------------------------------------------------------------ reports

    def stats(self) -> dict[str, Any]:
        """Totals so far: requests, tokens and modelled seconds per role, queue waits."""
        with self._lock:
            totals = {role: dataclasses.replace(t, served=dict(t.served)) for role, t in sorted(self._totals.items())}
            peak, max_queue = self._peak_streams, self._max_queue_s
        every = list(totals.values())
        completion, wall = sum(t.completion_tokens for t in every), time.monotonic() - self._started
        # what the served model's own speed allows: its replies decoded at its peak, every stream slot busy
        floor = completion / self.profile.peak_decode_tok_s
        return {
            "note": f"{NOTE}. Seconds are modelled (latency.py), not measured; tokens are counted as 4 characters "
                    "each and reasoning tokens drawn per reply.",
            "model": MODEL_ID, "profile": self.profile.describe(), "time_scale": self.time_scale, "seed": self.seed,
            "failure_rate": self.failure_rate, "real_share": self.real_share, "material": self.material.describe(),
            "requests": sum(t.requests for t in every),
            "prompt_tokens": sum(t.prompt_tokens for t in every),
            "completion_tokens": completion,
            "reasoning_tokens": sum(t.reasoning_tokens for t in every),
            "modelled_s": round(sum(t.modelled_s for t in every), 3),
            "queue_s": round(sum(t.queue_s for t in every), 3),
            "queued_requests": sum(t.queued for t in every),
            "max_queue_s": round(max_queue, 3), "peak_streams": peak,
            "wall_s": round(wall, 3),
            "decode_floor_s": round(floor, 1),  # modelled seconds
            "decode_share_of_peak": round(floor * self.time_scale / wall, 3) if self.time_scale > 0 and wall > 0 else None,
            "by_role": {role: {"requests": t.requests, "prompt_tokens": t.prompt_tokens,
                               "completion_tokens": t.completion_tokens, "reasoning_tokens": t.reasoning_tokens,
                               "modelled_s": round(t.modelled_s, 3), "queue_s": round(t.queue_s, 3),
                               "queued_requests": t.queued, "served": t.served}
                        for role, t in totals.items()},
        }

    def served(self) -> dict[str, dict]:
        """Every kernel served whole (not cut off), by `source_digest`: kind, origin, role."""
        with self._lock:
            return {k: dict(v) for k, v in self._kernels.items()}

    def models(self) -> dict:
        return {"object": "list", "data": [{"id": MODEL_ID, "object": "model", "created": 0,
                                            "owned_by": "accelopt-replay (a rehearsal, not an LLM)",
                                            "root": MODEL_ID, "max_model_len": self.profile.max_model_len}]}


def _kernel_answer(role: str, kernel: Served) -> Answer:
    intro = f"Replayed kernel ({NOTE}; material: {kernel.origin})."
    if kernel.kind == "truncated":  # cut off inside its code fence
        return Answer(role, f"{intro}\n\n```python\n{kernel.source}", "length", "", kernel.kind, kernel.origin)
    return Answer(role, f"{intro}\n\n```python\n{kernel.source.rstrip()}\n```\n", "stop", "", kernel.kind,
                  kernel.origin)


_FENCED = re.compile(r"```python\n(.*?)\n```", re.DOTALL)


def _fenced_source(content: str) -> str | None:
    found = _FENCED.search(content)
    return found.group(1) if found else None


def _cut_to(answer: Answer, reasoning: int, limit: int) -> tuple[Answer, int]:
    """The reply as a server cuts it at the request's token limit: reasoning first, then content."""
    if reasoning + count_tokens(answer.content) <= limit:
        return answer, reasoning
    if reasoning >= limit:
        return Answer(answer.role, "", "length", "", "cut off", answer.origin, schema=answer.schema), limit
    content = answer.content[:(limit - reasoning) * 4]
    kind = answer.served if answer.served == "truncated" else "cut off"
    return Answer(answer.role, content, "length", "", kind, answer.origin, schema=answer.schema), reasoning


# ---------------------------------------------------------------- HTTP


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # a full search opens many connections at once

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away mid-reply (a run killed while its calls were in flight) is no
        # server error: a served model sees it and carries on; anything else is printed as before.
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    replay: ReplayServer
    server_version = "accelopt-replay/1"

    def log_message(self, *args: Any) -> None:
        pass

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, kind: str) -> None:
        self._send_json(status, {"error": {"message": message, "type": kind, "code": status}})

    def do_GET(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        if path in ("/v1/models", "/models"):
            return self._send_json(200, self.replay.models())
        if path == "/replay/stats":
            return self._send_json(200, self.replay.stats())
        if path == "/replay/served":
            return self._send_json(200, self.replay.served())
        if path == "/health":
            return self._send_json(200, {"status": "ok", "note": NOTE})
        self._error(404, f"no such path: {path} ({NOTE})", "NotFoundError")

    def do_POST(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        if path not in ("/v1/chat/completions", "/chat/completions"):
            return self._error(404, f"no such path: {path} ({NOTE}; it serves /v1/chat/completions)", "NotFoundError")
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        except ValueError:
            return self._error(400, "the request body is not JSON", "BadRequestError")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return self._error(400, "a chat completion request needs `messages`", "BadRequestError")
        if body.get("model") != MODEL_ID:
            return self._error(404, f"The model `{body.get('model')}` does not exist. This server ({NOTE}) serves "
                                    f"`{MODEL_ID}` only.", "NotFoundError")
        answer = self.replay.answer(body)
        flow = answer.flow
        assert flow is not None
        headers = {"x-replay-role": answer.role, "x-replay-served": answer.served, "x-replay-note": NOTE}
        usage = {"prompt_tokens": flow.prompt_tokens, "completion_tokens": flow.completion_tokens,
                 "total_tokens": flow.prompt_tokens + flow.completion_tokens,
                 "completion_tokens_details": {"reasoning_tokens": flow.reasoning_tokens}}
        ident = f"chatcmpl-replay-{hashlib.sha256(answer.content.encode()).hexdigest()[:24]}"
        if body.get("stream"):
            return self._stream(answer, usage, ident, headers, bool((body.get("stream_options") or {})
                                                                       .get("include_usage")))
        timing = self.replay.finished(answer)  # a whole reply: its headers say how long it took, modelled
        headers.update({"x-replay-modelled-s": f"{timing.total_s:.3f}", "x-replay-queue-s": f"{timing.queue_s:.3f}"})
        message: dict[str, Any] = {"role": "assistant", "content": answer.content}
        if answer.reasoning:
            message["reasoning_content"] = answer.reasoning
        self._send_json(200, {"id": ident, "object": "chat.completion", "created": int(time.time()), "model": MODEL_ID,
                              "system_fingerprint": "accelopt-replay",
                              "choices": [{"index": 0, "message": message, "logprobs": None,
                                           "finish_reason": answer.finish_reason}],
                              "usage": usage}, headers)

    def _stream(self, answer: Answer, usage: dict, ident: str, headers: dict[str, str], include_usage: bool) -> None:
        """Server-sent chunks as vLLM sends them: the role, the reasoning, the content in pieces
        (each once the model has decoded its tokens), the finish reason, then usage when asked for."""
        flow = answer.flow
        assert flow is not None
        latency = self.replay.latency
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        created = int(time.time())

        def chunk(delta: dict, finish: str | None = None, **extra: Any) -> None:
            payload = {"id": ident, "object": "chat.completion.chunk", "created": created, "model": MODEL_ID,
                       "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], **extra}
            self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
            self.wfile.flush()

        latency.until(flow, 0)
        chunk({"role": "assistant", "content": ""})
        if answer.reasoning:
            latency.until(flow, flow.reasoning_tokens)
            chunk({"reasoning_content": answer.reasoning})
        pieces = [answer.content[i:i + 400] for i in range(0, len(answer.content), 400)]
        for i, piece in enumerate(pieces, 1):
            latency.until(flow, flow.reasoning_tokens + flow.content_tokens * i / len(pieces))
            chunk({"content": piece})
        self.replay.finished(answer)
        chunk({}, answer.finish_reason)
        if include_usage:
            payload = {"id": ident, "object": "chat.completion.chunk", "created": created, "model": MODEL_ID,
                       "choices": [], "usage": usage}
            self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
