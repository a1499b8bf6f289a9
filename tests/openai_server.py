"""A scripted OpenAI-compatible HTTP server on 127.0.0.1 for tests: /v1/chat/completions with
`usage` fields, and a configurable number of 429 answers before the first success."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from langchain_core.messages import HumanMessage, SystemMessage


class ScriptedOpenAIServer:
    def __init__(self, reply: Callable[[list], str], fail_first: int = 0):
        self.reply = reply
        self.fail_first = fail_first
        self.requests: list[dict] = []
        self.usage_sent = {"prompt_tokens": 0, "completion_tokens": 0}
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.requests.append({"path": self.path, "body": body,
                                            "auth": self.headers.get("Authorization")})
                    failing = len(server.requests) <= server.fail_first
                if failing:
                    return self._send(429, {"error": {"message": "rate limited", "type": "rate_limit"}},
                                      {"Retry-After": "0"})
                messages = [SystemMessage(m["content"]) if m["role"] == "system" else HumanMessage(m["content"])
                            for m in body["messages"]]
                text = server.reply(messages)
                usage = {"prompt_tokens": 100 + len(server.requests), "completion_tokens": len(text) // 3}
                usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                with server._lock:
                    server.usage_sent["prompt_tokens"] += usage["prompt_tokens"]
                    server.usage_sent["completion_tokens"] += usage["completion_tokens"]
                self._send(200, {
                    "id": f"chatcmpl-{len(server.requests)}", "object": "chat.completion", "created": int(time.time()),
                    "model": body["model"], "usage": usage,
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}]})

            def _send(self, code, payload, headers=None):
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
