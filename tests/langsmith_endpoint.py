"""A stand-in LangSmith endpoint on 127.0.0.1 for the tracing tests: it takes the runs langsmith
sends (multipart or batch) and puts each run back together (its post, then its patches), or
accepts connections and never answers (`answering=False`)."""

from __future__ import annotations

import json
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LangSmithEndpoint:
    def __init__(self, answering: bool = True):
        self.answering = answering
        self.bodies: list[bytes] = []
        self.ops: list[tuple[str, str, dict]] = []  # (post | patch, run id, fields)
        self.released = threading.Event()
        self.lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # /info: an empty server description (no compression, default batching)
                if endpoint._answers():
                    self._reply(b"{}")

            def do_POST(self):
                if not endpoint._answers():
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                endpoint._take(self.headers.get("Content-Type") or "", body)
                self._reply(b"{}")

            do_PATCH = do_POST

            def _reply(self, body: bytes):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def __enter__(self) -> LangSmithEndpoint:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()

    def _answers(self) -> bool:
        """Whether to answer: a silent endpoint holds the request until the test ends, then drops it."""
        if not self.answering:
            self.released.wait()
        return self.answering

    def _take(self, content_type: str, body: bytes) -> None:
        with self.lock:
            self.bodies.append(body)
            if "multipart" in content_type:
                boundary = content_type.split("boundary=", 1)[1].strip('"').encode()
                fields: dict[tuple[str, str], dict] = {}
                for chunk in body.split(b"--" + boundary)[1:]:
                    if chunk.startswith(b"--"):
                        break
                    head, _, data = chunk.partition(b"\r\n\r\n")
                    name = re.search(rb'name="([^"]+)"', head).group(1).decode()
                    op, run_id, *key = name.split(".")
                    if op not in ("post", "patch"):
                        continue
                    value = json.loads(data.removesuffix(b"\r\n") or b"null")
                    part = fields.setdefault((op, run_id), {})
                    if key:
                        part[key[0]] = value
                    else:
                        part.update(value)
                self.ops += [(op, run_id, part) for (op, run_id), part in fields.items()]
            else:  # /runs/batch
                batch = json.loads(body or b"{}")
                self.ops += [(op, str(run["id"]), run) for op in ("post", "patch") for run in batch.get(op) or []]

    def runs(self) -> dict[str, dict]:
        """Each run as LangSmith would hold it: its post, then its patches over it (metadata merged)."""
        runs: dict[str, dict] = {}
        with self.lock:
            ops = list(self.ops)
        for _op, run_id, fields in sorted(ops, key=lambda o: o[0] == "patch"):
            run = runs.setdefault(run_id, {})
            metadata = {**((run.get("extra") or {}).get("metadata") or {}),
                        **((fields.get("extra") or {}).get("metadata") or {})}
            run.update({k: v for k, v in fields.items() if v is not None})
            run.setdefault("extra", {})["metadata"] = metadata
        return runs

    def text(self) -> str:
        with self.lock:
            return b"\n".join(self.bodies).decode("utf-8", "replace")


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tracing_env(url: str, **more: str) -> dict[str, str]:
    import os

    return {**os.environ, "LANGSMITH_TRACING": "true", "LANGSMITH_API_KEY": "test-key", "LANGSMITH_ENDPOINT": url,
            "LANGSMITH_PROJECT": "accelopt-test", **more}
