"""LangSmith tracing, when the user turns it on (LANGSMITH_TRACING=true).

LangGraph and LangChain already trace every node and model call under their names; this module
keeps those traces readable and cheap: kernel sources and other long strings are cut to a head
plus their length and hash (the run directory holds the full text), and long lists are
shortened. It installs the process's LangSmith client with those filters before anything traces.
Harness evaluations get a span of their own (`harness`) with compact inputs.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from typing import Any, Callable

MAX_STRING = 1200
HEAD = 300
MAX_ITEMS = 40


def tracing_enabled() -> bool:
    return any(os.environ.get(v, "").lower() == "true" for v in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2"))


def compact(value: Any, depth: int = 0) -> Any:
    """The value with long strings cut to a head plus '[N chars, sha256 …]' and long lists cut."""
    if isinstance(value, str) and len(value) > MAX_STRING:
        sha = hashlib.sha256(value.encode()).hexdigest()[:12]
        return f"{value[:HEAD]}… [{len(value)} chars, sha256 {sha}]"
    if depth > 12:
        return "…"
    if hasattr(value, "model_dump") and not isinstance(value, type):  # chat messages and other models
        try:
            value = value.model_dump()
        except Exception:  # noqa: BLE001 - a model that cannot dump is shown as it is
            return value
    if isinstance(value, dict):
        return {k: compact(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [compact(v, depth + 1) for v in value[:MAX_ITEMS]]
        return items + [f"… {len(value) - MAX_ITEMS} more"] if len(value) > MAX_ITEMS else items
    return value


@functools.lru_cache(maxsize=1)
def configure_tracing() -> bool:
    """Install the compacting LangSmith client, once, if tracing is on; say whether it is."""
    if not tracing_enabled():
        return False
    from langsmith.run_trees import get_cached_client

    get_cached_client(hide_inputs=compact, hide_outputs=compact)
    return True


def flush_traces() -> None:
    """Send what is queued before the process exits (a CLI run ends right after the graph)."""
    if tracing_enabled():
        from langchain_core.tracers.langchain import wait_for_all_tracers

        wait_for_all_tracers()


def traced_evaluation(fn: Callable) -> Callable:
    """A `harness` span around an evaluation: which task and kernel (by hash), and the outcome."""
    from langsmith import traceable

    def inputs(args: dict) -> dict:
        source = args.get("source") or ""
        return {"task": getattr(args.get("task"), "name", None), "source_chars": len(source),
                "source_sha256": hashlib.sha256(source.encode()).hexdigest()[:12],
                "against": [k for k in ("baseline", "parent") if args.get(k)], "trusted": args.get("trusted")}

    def outputs(fields: dict) -> dict:
        keep = ("status", "error", "device_name", "timer", "speedup", "speedup_vs_parent", "pct_peak")
        return compact({k: fields.get(k) for k in keep})

    return traceable(name="harness", run_type="tool", process_inputs=inputs, process_outputs=outputs)(fn)


class TracedPolicy:
    """A policy whose every answer is a span of its own (`<role>-policy`) with the role, the
    candidate and the policy's label as metadata: the tuner answers with no model call, and its
    decisions belong in a trace as much as an LLM's. Inputs are the request's identity, never
    its task or sources; outputs are compacted."""

    def __init__(self, inner: Any, role: str):
        self.inner, self.role = inner, role
        self.label = getattr(inner, "label", type(inner).__name__)

    def _call(self, method: str, request: Any) -> Any:
        from langsmith import traceable

        candidate = getattr(request, "candidate_id", None) or getattr(request, "child_id", None) \
            or getattr(request, "member_id", None)
        metadata = {"role": self.role, "policy": self.label, "candidate_id": candidate,
                    "iteration": getattr(request, "iteration", None),
                    "task": getattr(getattr(request, "task", None), "name", None)}

        def inputs(_: dict) -> dict:
            return {"method": method, **metadata}

        def outputs(answer: Any) -> dict:
            if dataclasses.is_dataclass(answer) and not isinstance(answer, type):
                answer = dataclasses.asdict(answer)
            return compact(answer if isinstance(answer, dict) else {"output": answer})

        fn = traceable(name=f"{self.role}-policy", run_type="chain", metadata=metadata,
                       process_inputs=inputs, process_outputs=outputs)(getattr(self.inner, method))
        return fn(request)

    def plan(self, request: Any) -> Any:
        return self._call("plan", request)

    def write(self, request: Any) -> Any:
        return self._call("write", request)

    def fix(self, request: Any) -> Any:
        return self._call("fix", request)

    def summarize(self, request: Any) -> Any:
        return self._call("summarize", request)
