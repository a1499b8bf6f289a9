"""What MCP clients get from `langgraph dev`: langgraph.json's `http.app`, whose middleware the
server puts in front of its own routes.

langgraph-api serves every assistant as an MCP tool at `/mcp` (streamable HTTP, JSON answers).
Its tools/list gives a graph's input schema as the tool's arguments; its tools/call runs the graph
statelessly (`runs.wait`, the arguments as the input) and answers `repr()` of the whole output state
(Python's repr, not JSON: 43 KB for a one-iteration optimization), or on a run's error only the
error's class name (`ConfigError`), not its message. Neither can be fixed from the graphs: whatever
the output state is, the client gets its repr. So for accelopt's own graphs (`DIGESTS`, by graph
id) this middleware answers tools/call itself, through the same in-process client the built-in
uses (langgraph_sdk's `get_client(url=None)`), with the MCP result a coding agent can parse:
one text block of JSON, the same object as `structuredContent`:

- `check`: the verdict, short (`check_digest`): status, error, per comparator the speedup, its
  interval and the verdict's word and reason, the evidence, flags, findings, seconds.
- `accelopt` (the optimizer): what the run ended with (`run_digest`): stop reason, the best
  kernel's id and file (RUN_DIR/best_kernel.py), its speedup over the baseline with its interval
  and verdict, the run directory.
- `confirm`: an ended run's best confirmed once more (`confirm_digest`): this confirmation's
  figure, then the run's figure pooled anew with it.
- a run that failed: `isError`, with `{"error": CLASS, "message": LINE}` (a refusal's one line).

The optimizer's and the confirmation's tools also take `settings`, the run's context (RunContext: B, N, K, T, the model,
the device, budgets; Studio's context form), which MCP has no other way to pass: tools/list adds
it to the tool's arguments as the server publishes the context schema, and tools/call sends it as
the run's context, checked where every run's context is (graph/builder.ServedGraph for unknown
keys, setup's context_refusal for the values): a refusal is the run's error, in the CLI's words.

Unknown keys are refused in each door's word before the server acts on them: a run request's field
(POST .../runs, /runs/wait, /runs/stream, /runs/batch: `contxt` ran a default run) with 422 and one
line, a tool call's argument (`setings`) as the tool's error. The server's worker logs a refused or
failed run once, in one line (`OneLineRefusals`), not twice with a traceback.

Everything else (initialize, ping, other assistants' tools) is the built-in's. Nothing here reads
the built-in's internals: the JSON-RPC messages of the MCP protocol and the SDK's client only.

The app's lifespan widens the server loop's default executor, where an async run's sync nodes
run (graph/threads.py), and closes the process's judge pools when the server stops: `langgraph
dev` ends on SIGTERM by raising it again once its app shut down (uvicorn), so no atexit handler
runs there.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import functools
import json
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from accelopt.nodes.context import run_setting_names
from accelopt.tools.harness.result import interval_label
from accelopt.tools.run_record import split_statuses

log = logging.getLogger("accelopt.served")

EVIDENCE_CHARS = 200  # an evidence line past this is cut (they are one sentence each)
# Request headers not passed on to the in-process client's calls (it sets its own).
_NOT_PASSED = {"content-length", "content-type", "transfer-encoding", "host", "accept", "accept-encoding",
               "connection", "mcp-protocol-version", "mcp-session-id"}


# ---------------------------------------------------------------- the digests

def _word(versus: dict[str, Any], timer: str | None) -> str:
    if timer == "interpreter_wall":
        return "no verdict"  # the interpreter's wall clock never decides faster or slower
    return "faster" if versus.get("faster") else "slower" if versus.get("slower") else "within noise"


def _comparison(versus: dict[str, Any], verdict: dict[str, Any] | None, timer: str | None) -> dict[str, Any]:
    """The verdict's own figure and timer (kernel-only where the calls are host-dominated), else the span's."""
    figure = verdict if verdict else versus
    return {"speedup": round(figure["speedup"], 4),
            "interval": [round(figure["ci_low"], 4), round(figure["ci_high"], 4)],
            "interval_is": (f"across evaluations: the {interval_label(versus.get('rounds'))} "
                            f"({verdict['rounds_low']:.4f}-{verdict['rounds_high']:.4f}) widened by the noise floor"
                            if verdict and verdict.get("rounds_low") is not None
                            else interval_label(versus.get("rounds"))),
            "timer": verdict["basis"] if verdict else "span",
            "verdict": verdict["word"] if verdict else _word(versus, timer),
            **({"reason": verdict["reason"]} if verdict and verdict.get("reason") else {})}


def _short(line: str) -> str:
    return line if len(line) <= EVIDENCE_CHARS else line[:EVIDENCE_CHARS - 1] + "…"


def check_digest(record: dict[str, Any]) -> dict[str, Any]:
    """A check's verdict record (graph/check_graph.CheckOutput), short: what an agent acts on."""
    timer = record.get("timer")
    verdicts = record.get("verdicts") or {}
    digest: dict[str, Any] = {
        "status": record.get("status"), "verified": record.get("status") == "verified",
        "error": record.get("error"), "device": record.get("device"), "device_name": record.get("device_name"),
        "timer": timer,
        "versus": {name: _comparison(v, verdicts.get(name), timer) for name, v in (record.get("versus") or {}).items()},
        "evidence": [_short(e) for e in record.get("evidence") or []],
        "flags": record.get("flags") or [],
        "findings": [f"{f.get('severity')}{' line ' + str(f['line']) if f.get('line') else ''}: {f.get('message')}"
                     for f in record.get("findings") or []],
        "eval_s": record.get("eval_s"), "before_judge_s": record.get("before_judge_s"),
    }
    if record.get("autotune"):  # per function, kernel and workload: the configuration it ran
        digest["autotune"] = {name: {"how": r.get("how"), "ran": {
            k["kernel"]: {w: k["configs"][i] for w, i in (k.get("ran") or {}).items() if i < len(k["configs"])}
            for k in r.get("kernels") or []}, "notes": [_short(n) for n in r.get("notes") or []]}
            for name, r in record["autotune"].items()}
    if timer == "interpreter_wall":
        digest["note"] = "CPU Triton interpreter: correctness only; its times are not GPU performance"
    return digest


def run_digest(state: dict[str, Any]) -> dict[str, Any]:
    """An optimization's output state (nodes/state.OutputState), short: where it ended and with what."""
    summary = state.get("summary") or {}
    run_dir = state.get("run_dir")
    best_id = state.get("best_id") or summary.get("best_id")
    best = (state.get("candidates") or {}).get(best_id) or {}
    timer = summary.get("timer") or best.get("timer")
    best_file = Path(run_dir) / "best_kernel.py" if run_dir else None
    digest: dict[str, Any] = {
        "stop_reason": state.get("stop_reason") or summary.get("stop_reason"),
        "run_dir": run_dir,
        "best_id": best_id,
        "best_kernel": str(best_file) if best_file is not None and best_file.is_file() else None,
        "best_status": best.get("status"),
        "speedup_vs_baseline": summary.get("best_speedup"),
        "timer": timer,
        "iterations": state.get("iteration"),
        "candidates_evaluated": summary.get("candidates_evaluated"),
    }
    # the evaluated ones' statuses add up to candidates_evaluated; a duplicate was never evaluated
    digest["statuses"], digest["not_evaluated"] = split_statuses(summary.get("statuses") or {})
    versus = (best.get("versus") or {}).get("baseline")
    figure = summary.get("best_figure")
    if figure and summary.get("best_id") == best_id:  # every evaluation of its program pooled
        digest["versus_baseline"] = figure_digest(figure)
    elif versus and best_id != state.get("baseline_id", "baseline"):
        digest["versus_baseline"] = _comparison(versus, None, timer)
    if summary.get("not_confirmed") and best_id != state.get("baseline_id", "baseline"):
        digest["not_confirmed"] = summary["not_confirmed"]
    if state.get("fatal"):
        digest["fatal"] = state["fatal"]
    if timer == "interpreter_wall":
        digest["note"] = ("CPU Triton interpreter: correctness only; best_id is the beam's head, and no kernel is "
                          "called faster (its times are not GPU performance)")
    return digest


def figure_digest(figure: dict[str, Any]) -> dict[str, Any]:
    """A run's figure for its best (tools/best_figure.BestFigure, dumped): every evaluation of its
    program pooled, the confirmations among them."""
    return {"speedup": round(figure["speedup"], 4), "interval": [round(figure["ci_low"], 4), round(figure["ci_high"], 4)],
            "interval_is": f"across {figure['measurements']} evaluation(s) of its program, pooled, "
                           f"{figure.get('confirmed') or 0} of them confirming it",
            "timer": figure.get("basis"), "verdict": figure["word"],
            **({"failed_confirmation": figure["failed_confirmation"]} if figure.get("failed_confirmation") else {})}


def confirm_digest(answer: dict[str, Any]) -> dict[str, Any]:
    """A confirmation's answer (graph/confirm_graph.ConfirmOutput), short: this confirmation, then
    the run's figure pooled anew."""
    got = answer.get("confirmation") or {}
    this = {"status": got.get("status"), "timer": got.get("timer"), "device_name": got.get("device_name"),
            "seed": got.get("seed")}
    if got.get("speedup") is not None:
        this.update(speedup=round(got["speedup"], 4), interval=[round(got["ci_low"], 4), round(got["ci_high"], 4)],
                    basis=got.get("basis"))
    if got.get("error"):
        this["error"] = _short(str(got["error"]))
    figure = answer.get("best_figure")
    digest = {"run_dir": answer.get("run_dir"), "best_id": answer.get("best_id"),
              "best_kernel": answer.get("best_kernel"), "confirmation": this,
              "confirmations": answer.get("confirmations"),
              "versus_baseline": figure_digest(figure) if figure else None}
    if got.get("timer") == "interpreter_wall":
        digest["note"] = ("CPU Triton interpreter: correctness only; its times are not GPU performance, so the figure "
                          "carries no verdict")
    return digest


DIGESTS = {"check": check_digest, "accelopt": run_digest, "confirm": confirm_digest}  # graph id -> its tool's answer
WITH_SETTINGS = {"accelopt", "confirm"}  # graphs whose tool takes `settings`, the run's context
SETTINGS_DESCRIPTION = ("The run's settings, its context (RunContext, as Studio's context form shows it): beams (B), "
                        "plans (N), samples (K), fixes (F), iterations (T), model ('tuner', or PROVIDER:NAME), device, "
                        "budgets and the rest; each optional, checked as the CLI checks its flags")


# ---------------------------------------------------------------- unknown keys, in the door's word

# A run request's fields besides the server's published schema (RunCreateStateful/-Stateless):
# those langgraph_sdk's client sends and the server reads.
_SDK_RUN_FIELDS = {"checkpoint_id", "langsmith_tracer", "on_disconnect", "on_completion", "cancel_on_disconnect",
                   "strict_resume", "if_not_exists", "multitask_strategy", "durability"}
_RUN_PATH = re.compile(r"^(/threads/[^/]+)?/runs(/stream|/wait|/batch)?/?$")


@functools.cache
def run_request_fields() -> frozenset[str]:
    """The fields a run request may have: the server's OpenAPI schema's, and the SDK's."""
    try:
        from langgraph_api.validation import openapi  # type: ignore[import-untyped]

        schemas = openapi["components"]["schemas"]
        published = {k for name in ("RunCreateStateful", "RunCreateStateless") for k in schemas[name]["properties"]}
    except (ImportError, KeyError):  # another server version: its own validation answers
        return frozenset()
    return frozenset(published | _SDK_RUN_FIELDS)


def unknown_refusal(given: list[str], known: list[str], word: str, of: str) -> str | None:
    """The first key not known, in one line: named, the nearest known one offered, in the door's
    word (`field` of a run request at the HTTP door, `argument` of a tool at MCP); or None."""
    unknown = [k for k in given if k not in known]
    if not unknown:
        return None
    close = difflib.get_close_matches(unknown[0], known, n=1, cutoff=0.6)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    names = ", ".join(f"'{k}'" for k in unknown)
    return (f"unknown {word}{'s' if len(unknown) > 1 else ''} {names} of {of}{hint}: its {word}s are "
            f"{', '.join(known)}")


def request_refusal(path: str, body: bytes) -> str | None:
    """A run request (POST .../runs, /runs/wait, /runs/stream, /runs/batch) with a field the server
    does not know: the server ignores it (`contxt` ran a default run; `inptu` got "Received no input
    for __start__"), so it is refused here, naming it."""
    known = run_request_fields()
    if not known or not _RUN_PATH.match(path):
        return None
    try:
        payload = json.loads(body)
    except ValueError:
        return None  # not JSON: the server's own error
    for request in payload if isinstance(payload, list) else [payload]:
        if isinstance(request, dict):
            refusal = unknown_refusal(list(request), sorted(known), "field", "a run request")
            if refusal:
                return refusal
    return None


def arguments_refusal(arguments: dict[str, Any], known: list[str], tool: str) -> str | None:
    """A tool call's argument the tool lacks, in MCP's word; a run setting given beside `settings`
    says where it goes."""
    first = next((k for k in arguments if k not in known), None)
    if first is not None and "settings" in known and first in run_setting_names():
        return (f"'{first}' is a run setting, not an argument of the {tool} tool: give it inside the `settings` "
                f"argument ({{\"settings\": {{\"{first}\": ...}}}})")
    return unknown_refusal(list(arguments), known, "argument", f"the {tool} tool")


# ---------------------------------------------------------------- the middleware

def tool_name(name: str) -> str:
    """An assistant's name as an MCP tool name (`^[a-zA-Z0-9_\\-.]{1,128}$`), as the server makes it."""
    return re.sub(r"[^a-zA-Z0-9_\-.]", "", re.sub(r"\s+", "_", name.strip()))[:128]


def _is_run_post(scope: Scope) -> bool:
    return scope["type"] == "http" and scope["method"] == "POST" and bool(_RUN_PATH.match(scope["path"]))


def _is_mcp_post(scope: Scope) -> bool:
    return scope["type"] == "http" and scope["method"] == "POST" and scope["path"].rstrip("/").endswith("/mcp")


async def _body(receive: Receive) -> bytes:
    chunks, more = [], True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks)


def _replayed(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the body read already, then whatever the client sends next (a disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _send_json(send: Send, payload: dict[str, Any], status: int = 200,
                     headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps(payload).encode()
    kept = [(k, v) for k, v in headers or [] if k.lower() not in (b"content-length", b"content-type")]
    await send({"type": "http.response.start", "status": status,
                "headers": [*kept, (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _text_result(payload: dict[str, Any], error: bool) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": json.dumps(payload)}], "structuredContent": payload, "isError": error}


class ConciseTools:
    """ASGI middleware: accelopt's graphs' MCP tools/call answered as JSON, the optimizer's
    `settings` argument added to tools/list and sent as the run's context."""

    def __init__(self, app: ASGIApp):
        self.app = app
        self._client: Any = None

    def client(self) -> Any:
        if self._client is None:  # the server's own app, in process (set up once the server has started)
            from langgraph_sdk import get_client

            self._client = get_client(url=None)
        return self._client

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if _is_run_post(scope):
            await self._run_request(scope, receive, send)
            return
        if not _is_mcp_post(scope):
            await self.app(scope, receive, send)
            return
        body = await _body(receive)
        replay = _replayed(body, receive)
        try:
            message = json.loads(body)
        except ValueError:
            message = None
        method = message.get("method") if isinstance(message, dict) and message.get("id") is not None else None
        params = message.get("params") if isinstance(message, dict) else None
        params = params if isinstance(params, dict) else {}
        if method == "tools/call":
            answer = await self._call(scope, params)
            if answer is not None:
                await _send_json(send, {"jsonrpc": "2.0", "id": message["id"], "result": answer})
                return
        elif method == "tools/list":
            await self._list(scope, replay, send)
            return
        await self.app(scope, replay, send)

    async def _run_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A run request with an unknown field: 422 with its one line (logged as one line)."""
        body = await _body(receive)
        refusal = request_refusal(scope["path"], body)
        if refusal is None:
            await self.app(scope, _replayed(body, receive), send)
            return
        log.warning("refused %s %s: %s", scope["method"], scope["path"], refusal)
        await _send_json(send, {"detail": refusal}, status=422)

    def _headers(self, scope: Scope) -> dict[str, str]:
        return {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])
                if k.decode("latin-1").lower() not in _NOT_PASSED}

    async def _ours(self, scope: Scope, name: str) -> dict[str, Any] | None:
        """The one assistant whose tool this is, where its graph is one of ours; else None (the
        built-in answers: unknown tool, several of one name, another graph's)."""
        assistants = await self.client().assistants.search(limit=1000, headers=self._headers(scope))
        matching = [a for a in assistants if tool_name(a["name"]) == name]
        if len(matching) != 1 or matching[0]["graph_id"] not in DIGESTS:
            return None
        return matching[0]

    async def _call(self, scope: Scope, params: dict[str, Any]) -> dict[str, Any] | None:
        name = params.get("name")
        assistant = await self._ours(scope, name) if isinstance(name, str) and name else None
        if assistant is None:
            return None
        arguments, context = params.get("arguments") or {}, params.get("context") or {}
        if not isinstance(arguments, dict) or not isinstance(context, dict):
            return None  # not what a tool call sends: the built-in answers it
        arguments, context = dict(arguments), dict(context)
        refusal = arguments_refusal(arguments, await self._arguments(scope, assistant), tool_name(assistant["name"]))
        if refusal:
            log.warning("refused tools/call %s: %s", name, refusal)
            return _text_result({"error": "ConfigError", "message": refusal}, error=True)
        if assistant["graph_id"] in WITH_SETTINGS and "settings" in arguments:
            settings = arguments.pop("settings")
            if settings is not None and not isinstance(settings, dict):
                return _text_result({"error": "ConfigError", "message": f"settings {settings!r}: an object of the "
                                     "run's settings, e.g. {\"beams\": 1, \"iterations\": 2, \"model\": \"tuner\"}"},
                                    error=True)
            context.update(settings or {})
        try:
            value = await self.client().runs.wait(None, assistant["assistant_id"], input=arguments,
                                                  context=context or None, headers=self._headers(scope),
                                                  raise_error=False)
        except Exception as exc:  # noqa: BLE001 - the call's failure is the tool's error, said whole
            return _text_result({"error": type(exc).__name__, "message": str(exc)}, error=True)
        if isinstance(value, dict) and "__error__" in value:
            error = value["__error__"] or {}
            return _text_result({"error": error.get("error"), "message": error.get("message")}, error=True)
        if not isinstance(value, dict):
            return _text_result({"error": "UnexpectedOutput", "message": f"the run returned {type(value).__name__}"},
                                error=True)
        return _text_result(DIGESTS[assistant["graph_id"]](value), error=False)

    async def _arguments(self, scope: Scope, assistant: dict[str, Any]) -> list[str]:
        """The tool's arguments: its graph's input keys, and `settings` where it takes them."""
        schemas = await self.client().assistants.get_schemas(assistant["assistant_id"], headers=self._headers(scope))
        known = list((schemas.get("input_schema") or {}).get("properties") or {})
        return known + (["settings"] if assistant["graph_id"] in WITH_SETTINGS else [])

    async def _list(self, scope: Scope, replay: Receive, send: Send) -> None:
        """The built-in's tools/list, with `settings` added to the arguments of WITH_SETTINGS's tools."""
        started: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def keep(message: Message) -> None:
            if message["type"] == "http.response.start":
                started.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, replay, keep)
        body = b"".join(chunks)
        try:
            answer = json.loads(body)
            tools = answer["result"]["tools"]
            assert started.get("status") == 200 and isinstance(tools, list)
        except (ValueError, KeyError, TypeError, AssertionError):  # an error, or not what this reads: as it was
            await send(started or {"type": "http.response.start", "status": 500, "headers": []})
            await send({"type": "http.response.body", "body": body})
            return
        await self._with_settings(scope, tools)
        await _send_json(send, answer, started["status"], started.get("headers"))

    async def _with_settings(self, scope: Scope, tools: list[dict[str, Any]]) -> None:
        for tool in tools:
            assistant = await self._ours(scope, tool.get("name", ""))
            if assistant is None or assistant["graph_id"] not in WITH_SETTINGS:
                continue
            schemas = await self.client().assistants.get_schemas(assistant["assistant_id"],
                                                                 headers=self._headers(scope))
            context = dict(schemas.get("context_schema") or {})
            if not context.get("properties"):
                continue
            arguments = tool.setdefault("inputSchema", {"type": "object"})
            defs = context.pop("$defs", {})
            clash = {k for k in defs if k in arguments.get("$defs", {}) and arguments["$defs"][k] != defs[k]}
            if clash:  # one name, two schemas: leave the tool as the server gave it
                continue
            if defs:
                arguments.setdefault("$defs", {}).update(defs)
            context.pop("title", None)
            arguments.setdefault("properties", {})["settings"] = {**context, "title": "Settings",
                                                                  "description": SETTINGS_DESCRIPTION}


# The worker's logger: it logs a run's error twice, each time with a traceback.
_WORKER_LOGGER = "langgraph_api.worker"


class OneLineRefusals(logging.Filter):
    """The server's worker logs a run's error twice, each with a full traceback (64 tracebacks in
    one short tour). For accelopt's own one-line errors, a refusal (ConfigError) and a failed run
    (RunFailed), the traceback says nothing the line does not: one log line each, the second left
    out. Records are structlog's event dicts (langgraph_api/logging.py: the traceback is already
    text, under `exception`)."""

    def __init__(self) -> None:
        super().__init__()
        from accelopt.graph.doors import RunFailed
        from accelopt.tools.llm_spec import ConfigError

        self.classes = tuple(str(c) for c in (ConfigError, RunFailed))  # "<class 'accelopt....'>"

    def filter(self, record: logging.LogRecord) -> bool:
        event = record.msg if isinstance(record.msg, dict) else None
        text = str(event.get("event", "")) if event is not None else record.getMessage()
        ours = next((c for c in self.classes if c in text), None)
        if ours is None:
            return True
        if text.startswith("Background run failed"):
            return False  # said once already, by "Run encountered an error"
        kind = ours.split("'")[1].rsplit(".", 1)[-1]
        line = f"run ended: {kind}: {text.split(ours, 1)[1].strip('()')}"
        if event is not None:
            event.pop("exception", None)
            event["event"] = line
        else:
            record.msg, record.args = line, ()
        record.exc_info = record.exc_text = None
        return True


@contextlib.asynccontextmanager
async def lifespan(_app: Starlette) -> AsyncIterator[None]:
    """At the server's start, the loop's default executor as wide as a superstep (an async run's
    sync nodes run there: graph/threads.py). At its stop, its judges killed and their homes
    removed: `langgraph dev` ends on SIGTERM by raising it again after its app shut down, so the
    process's atexit never runs."""
    from accelopt.graph.threads import widen_default_executor

    widen_default_executor(asyncio.get_running_loop())
    quiet = OneLineRefusals()
    logging.getLogger(_WORKER_LOGGER).addFilter(quiet)
    yield
    logging.getLogger(_WORKER_LOGGER).removeFilter(quiet)
    from accelopt.tools.harness.pool import close_pools

    await asyncio.to_thread(close_pools)  # kills and waits: off the event loop


app = Starlette(middleware=[Middleware(ConciseTools)], lifespan=lifespan)
