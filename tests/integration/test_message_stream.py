"""`graph.stream(..., stream_mode="messages")` streams every role's reply as it is written, the
executor's and fixer's too (they run inside the `candidate` subgraph, whose model calls LangGraph's
messages stream drops unless asked for subgraphs: policies/answering.streamed_to_the_graph), through
the real ChatOpenAI client against a scripted OpenAI-compatible server that streams (SSE)."""

from __future__ import annotations

import io
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from accelopt.graph.builder import graph
from accelopt.nodes.context import RunContext
from tests.openai_server import ScriptedOpenAIServer
from tests.scripted import BROKEN, GOOD, reply_for

pytestmark = pytest.mark.slow

PIECE = 64  # characters per streamed chunk


def _streaming(handler: type) -> type:
    """The scripted server's handler, answering a request with `stream: true` as a real server
    does: the reply in chunks of PIECE characters, then the finish reason, then (when
    `stream_options.include_usage` asks) the usage, then [DONE]. Errors are sent as they are."""

    class Streaming(handler):  # type: ignore[misc, valid-type]
        def do_POST(self):
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            self.body = json.loads(raw)
            self.rfile = io.BytesIO(raw)  # the scripted handler reads the body again
            super().do_POST()

        def _send(self, code, payload, headers=None):
            body = getattr(self, "body", None) or {}
            if code != 200 or not body.get("stream") or payload.get("object") != "chat.completion":
                return super()._send(code, payload, headers)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            head = {"id": payload["id"], "object": "chat.completion.chunk", "created": payload["created"],
                    "model": payload["model"]}

            def event(data: dict) -> None:
                self.wfile.write(b"data: " + json.dumps(data).encode() + b"\n\n")

            choice = payload["choices"][0]
            text = choice["message"]["content"]
            for n, start in enumerate(range(0, max(len(text), 1), PIECE)):
                delta = {"content": text[start:start + PIECE], **({"role": "assistant"} if n == 0 else {})}
                event({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
            event({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]})
            if "usage" in payload and (body.get("stream_options") or {}).get("include_usage"):
                event({**head, "choices": [], "usage": payload["usage"]})
            self.wfile.write(b"data: [DONE]\n\n")

    return Streaming


class StreamingServer(ScriptedOpenAIServer):
    """ScriptedOpenAIServer that also answers streamed requests (what ChatOpenAI sends while a
    LangGraph messages stream listens)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.httpd.RequestHandlerClass = _streaming(self.httpd.RequestHandlerClass)


BROKEN_PLAN = ("### Plan 1: broken attempt\n"
               "Use exp2 with 8 warps; this one is written with a syntax error on the first try.\n")


def _reply(messages) -> str:
    """One plan, whose kernel comes back with a syntax error (executor) and is then repaired (fixer)."""
    if re.search(r"You are the accelopt planner", str(messages[0].content)):
        return BROKEN_PLAN
    return reply_for(messages)


def _stream_run(tmp_path: Path, task: Path, subgraphs: bool):
    """A run of one plan, one kernel, one fix, streamed in messages mode: (chunks by node,
    metadata by node, the final state from a values stream beside it, the server)."""
    text: dict[str, list[str]] = defaultdict(list)
    meta: dict[str, list[dict]] = defaultdict(list)
    spaces: dict[str, set] = defaultdict(set)
    final: dict = {}
    with StreamingServer(_reply) as server:
        ctx = RunContext(beams=1, plans=1, samples=1, fixes=1, iterations=1, device="cpu", use_memory=False,
                         model="vllm:scripted/model", base_url=server.url, llm_retry_wait_s=0.0)
        for part in graph.stream({"task_dir": str(task), "run_dir": str(tmp_path / "run")}, context=ctx,
                                 stream_mode=["messages", "values"], subgraphs=subgraphs):
            ns, mode, payload = part if subgraphs else ((), *part)
            if mode == "values":
                if not ns:
                    final = payload
                continue
            chunk, metadata = payload
            node = metadata["langgraph_node"]
            text[node].append(chunk.content)
            meta[node].append(metadata)
            spaces[node].add(ns)
    return text, meta, spaces, final, server


def test_executor_and_fixer_stream_their_chunks_with_their_node_names(tmp_path, softmax_task):
    text, meta, spaces, final, server = _stream_run(tmp_path, softmax_task, subgraphs=False)

    # Every model call streamed, in several chunks, each labelled with its node and its call.
    assert {"planner", "executor", "fixer"} <= set(text), dict(text)
    assert all(r["body"].get("stream") for r in server.requests)
    assert "".join(text["planner"]) == BROKEN_PLAN
    assert "".join(text["executor"]) == f"Here is the kernel.\n\n```python\n{BROKEN}```\nDone."
    assert "".join(text["fixer"]) == f"Here is the kernel.\n\n```python\n{GOOD}```\nDone."
    assert len(text["executor"]) > 2 and len(text["fixer"]) > 2
    assert {(m["role"], m["candidate_id"], m["iteration"]) for m in meta["executor"]} == {
        ("executor", "i1.m0.p0.k0", 1)}
    assert {(m["role"], m["candidate_id"]) for m in meta["fixer"]} == {("fixer", "i1.m0.p0.k0.f1")}
    # the full namespace stays in the metadata
    assert all(m["checkpoint_ns"].startswith("candidate:") for m in meta["executor"] + meta["fixer"])

    # What the run computes is what it computes unstreamed: the failed kernel, its repair, the ledger.
    cands = final["candidates"]
    assert cands["i1.m0.p0.k0"]["status"] == "compile_error"
    assert cands["i1.m0.p0.k0.f1"]["status"] == "verified" and cands["i1.m0.p0.k0.f1"]["source"] == GOOD
    assert len(server.requests) == 3  # planner, executor, fixer: no retries, no second calls
    usage = final["usage"]
    assert [u["role"] for u in usage] == ["planner", "executor", "fixer"]
    assert sum(u["input_tokens"] for u in usage) == server.usage_sent["prompt_tokens"]
    assert sum(u["output_tokens"] for u in usage) == server.usage_sent["completion_tokens"]
    assert not any(u["estimated"] for u in usage)


def test_with_subgraphs_the_candidate_chunks_keep_their_namespace(tmp_path, softmax_task):
    """A stream that asks for subgraphs gets the executor's and fixer's chunks under the
    candidate subgraph's namespace, once each, as LangGraph labels them."""
    text, meta, spaces, final, server = _stream_run(tmp_path, softmax_task, subgraphs=True)
    assert spaces["planner"] == {()}
    assert len(spaces["executor"]) == 1 and spaces["executor"] == spaces["fixer"]
    (space,) = spaces["executor"]
    assert len(space) == 1 and space[0].startswith("candidate:")
    assert "".join(text["executor"]) == f"Here is the kernel.\n\n```python\n{BROKEN}```\nDone."
    assert "".join(text["fixer"]) == f"Here is the kernel.\n\n```python\n{GOOD}```\nDone."
    assert final["candidates"]["i1.m0.p0.k0.f1"]["status"] == "verified"
