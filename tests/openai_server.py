"""A scripted OpenAI-compatible HTTP server on 127.0.0.1 for tests: /v1/chat/completions with
`usage` fields, streamed as server-sent chunks when the request asks (`stream`, with a last usage
chunk under `stream_options.include_usage`, as vLLM and OpenAI send them), /v1/models, and faults
as data: each request gets the next scripted `Answer` (a status with an error body and headers, a
raw malformed body, a reply without usage, a reply of its own cut off at the limit), then `then`
for every later one. `fail_first=n` is n 429 answers (Retry-After: 0) before the rest.
`ignore_max_tokens`: a server that sends the whole reply whatever limit the request carries.
`max_concurrent=n`: a server under load (vLLM's queue, a hosted API's concurrency limit) that
serves n chat completions at a time and answers the rest 429 with `Retry-After: busy_retry_after`."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from langchain_core.messages import HumanMessage, SystemMessage


@dataclass(frozen=True)
class Answer:
    """One scripted answer to a chat completion request."""

    status: int = 200
    error: str = ""                 # the error message of a status >= 400
    code: str | None = None         # the error code (e.g. insufficient_quota)
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None        # a 200 body sent as is: a malformed reply
    usage: bool = True              # a completion carries `usage`
    delay_s: float = 0.0            # seconds before answering: a slow or hung generation
    text: str | None = None         # this reply's text, instead of the reply function's
    finish_reason: str | None = None  # sent as is (e.g. "length": cut off at the server's limit)


OK = Answer()
RATE_LIMITED = Answer(429, "rate limited", headers={"Retry-After": "0"})


def dead_url() -> str:
    """A base URL on which nothing listens: connections are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


class ScriptedOpenAIServer:
    def __init__(self, reply: Callable[[list], str], fail_first: int = 0, answers: Sequence[Answer] = (),
                 then: Answer = OK, models: Sequence[str] = (), serve_models: bool = True,
                 api_key: str | None = None, count_tokens: bool = False,
                 model_fields: dict[str, dict] | None = None, ignore_max_tokens: bool = False,
                 chunk_chars: int = 64, max_concurrent: int | None = None, busy_retry_after: str = "20"):
        self.reply = reply
        self.answers = [RATE_LIMITED] * fail_first + list(answers)
        self.then = then
        self.models, self.serve_models, self.api_key = list(models), serve_models, api_key
        self.model_fields = model_fields or {}  # extra fields of a model's /v1/models entry (vLLM's max_model_len)
        self.count_tokens = count_tokens  # usage as a server counts it (~4 characters a token), not 100 + n
        self.ignore_max_tokens = ignore_max_tokens  # the whole reply, whatever the request's limit
        self.chunk_chars = chunk_chars   # characters per streamed chunk
        self.max_concurrent, self.busy_retry_after = max_concurrent, busy_retry_after
        self.serving = 0                 # chat completions being served now (under max_concurrent)
        self.peak = 0                    # the most served at once
        self.busy = 0                    # requests refused 429 for max_concurrent
        self.streams_left = 0            # streamed replies whose client stopped reading before the end
        self.gets_delay_s = 0.0          # seconds before answering a GET: set it to hang the model list
        self.requests: list[dict] = []   # chat completions, in order, each with its time (monotonic)
        self.gets: list[str] = []        # paths of GET requests (model lists)
        self.usage_sent = {"prompt_tokens": 0, "completion_tokens": 0}
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _refused_key(self) -> bool:
                if server.api_key is None or self.headers.get("Authorization") == f"Bearer {server.api_key}":
                    return False
                self._send(401, _error("Incorrect API key provided", "invalid_api_key"))
                return True

            def do_GET(self):
                with server._lock:
                    server.gets.append(self.path)
                time.sleep(server.gets_delay_s)  # a hung server answers nothing, its model list included
                if self._refused_key():
                    return
                if self.path.rstrip("/") != "/v1/models" or not server.serve_models:
                    return self._send(404, {"detail": "Not Found"})
                self._send(200, {"object": "list", "data": [{"id": m, "object": "model", **server.model_fields.get(m, {})}
                                                            for m in server.models]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.requests.append({"path": self.path, "body": body, "t": time.monotonic(),
                                            "auth": self.headers.get("Authorization")})
                    n = len(server.requests)
                    answer = server.answers[n - 1] if n <= len(server.answers) else server.then
                if self._refused_key():
                    return
                if self.path != "/v1/chat/completions":
                    return self._send(404, {"detail": "Not Found"})
                with server._lock:
                    busy = server.max_concurrent is not None and server.serving >= server.max_concurrent
                    server.busy += busy
                    server.serving += not busy
                    server.peak = max(server.peak, server.serving)
                if busy:
                    return self._send(429, _error("Too many requests: the server is at capacity"),
                                      {"Retry-After": server.busy_retry_after})
                try:
                    self._answer(body, n, answer)
                finally:
                    with server._lock:
                        server.serving -= 1

            def _answer(self, body, n, answer):
                time.sleep(answer.delay_s)
                if answer.status != 200:
                    return self._send(answer.status, _error(answer.error, answer.code), answer.headers)
                if answer.raw is not None:
                    return self._send_bytes(200, answer.raw, answer.headers)
                messages = [SystemMessage(m["content"]) if m["role"] == "system" else HumanMessage(m["content"])
                            for m in body["messages"]]
                text = server.reply(messages) if answer.text is None else answer.text
                finish = answer.finish_reason or "stop"
                limit = body.get("max_completion_tokens") or body.get("max_tokens")
                per_token = 4 if server.count_tokens else 3  # as `usage` counts them below
                if limit is not None and len(text) > limit * per_token and not server.ignore_max_tokens:
                    text, finish = text[: limit * per_token], "length"  # cut off at the limit, as servers do
                usage = None
                if answer.usage:
                    usage = ({"prompt_tokens": sum(len(m["content"]) for m in body["messages"]) // 4,
                              "completion_tokens": len(text) // 4} if server.count_tokens else
                             {"prompt_tokens": 100 + n, "completion_tokens": len(text) // 3})
                    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                if body.get("stream"):
                    include = bool((body.get("stream_options") or {}).get("include_usage"))
                    return self._stream(n, body["model"], text, finish, usage if include else None, answer.headers)
                payload = {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()),
                           "model": body["model"],
                           "choices": [{"index": 0, "finish_reason": finish,
                                        "message": {"role": "assistant", "content": text}}]}
                if usage is not None:
                    payload["usage"] = usage
                    server._count(usage)
                self._send(200, payload, answer.headers)

            def _stream(self, n, model, text, finish, usage, headers):
                """Server-sent chunks: the role, the text in pieces, the finish reason, usage when asked
                for, [DONE]. A client that stops reading ends it (the server stops generating)."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()

                def event(choices, **extra):
                    payload = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": int(time.time()),
                               "model": model, "choices": choices, **extra}
                    self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
                    self.wfile.flush()

                size = max(1, server.chunk_chars)
                try:
                    event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
                    for i in range(0, len(text), size):
                        event([{"index": 0, "delta": {"content": text[i:i + size]}, "finish_reason": None}])
                    event([{"index": 0, "delta": {}, "finish_reason": finish}])
                    if usage is not None:
                        event([], usage=usage)
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    with server._lock:
                        server.streams_left += 1
                    return
                if usage is not None:
                    server._count(usage)

            def _send(self, code, payload, headers=None):
                self._send_bytes(code, json.dumps(payload).encode(), headers)

            def _send_bytes(self, code, data, headers=None):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def _count(self, usage: dict) -> None:
        with self._lock:
            self.usage_sent["prompt_tokens"] += usage["prompt_tokens"]
            self.usage_sent["completion_tokens"] += usage["completion_tokens"]

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _error(message: str, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": "invalid_request_error", "code": code, "param": None}}
