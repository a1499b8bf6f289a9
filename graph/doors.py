"""What every door checks on what its caller gave, before a graph runs: `graph.invoke`, `langgraph
dev` (Studio, the SDK) and MCP (graph/served_app.py) all reach the compiled graphs through here;
the CLI builds the same input and context from its flags (cli/), so it meets the same rules.

Some checks cannot be made inside a graph, because LangGraph has already acted on the keys by then:
- an input key the input schema has no field for is dropped, and on a thread the state keeps the
  last run's value (`kernal` misspelt would judge the previous check's kernel);
- a context key RunContext has no field for (`beems`) is dropped by the server, and graph.invoke
  fails on it with a TypeError.
So the compiled graphs are `CheckedGraph`s, refusing such keys in one line (nodes/context.
refuse: a ConfigError; the server's run ends as an error with it) where the input and context are
still whole: `langgraph dev` calls a callable graph as a factory with the run's context as given,
and `stream`/`astream` (invoke's, the server's) see the input as given.

(No `from __future__ import annotations` here: the server reads CheckedGraph.__call__'s parameter
annotation, ServerRuntime, as an object to know what to pass it.)
"""

import difflib
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import Any

from langgraph.graph.state import CompiledStateGraph
from langgraph_sdk.runtime import ServerRuntime

from accelopt.graph.config import resolve_context
from accelopt.nodes.context import RunContext, refuse, run_setting_names, unknown_keys_refusal

# What LangGraph's server itself may put in a run's context beside RunContext's fields (a run given
# `config.configurable` instead of `context` has its configurable taken as the context).
_SERVER_KEYS = {"thread_id", "checkpoint_id", "checkpoint_ns", "checkpoint_map", "run_id", "assistant_id",
                "graph_id", "user_id", "cron_id"}


def own_keys(context: Mapping) -> list[str]:
    """The caller's keys of a server run's context, without the server's own."""
    return [k for k in context if not (k in _SERVER_KEYS or k.startswith(("__", "langgraph_", "x-")))]


def input_keys_refusal(given: Mapping, known: Iterable[str], graph_name: str) -> str | None:
    """An input key the graph's input schema has no field for, in one line naming it, the closest
    field and every known key; a run setting given as input says where settings go. None if all
    are known."""
    known = list(known)
    unknown = [k for k in given if k not in known]
    if not unknown:
        return None
    first = unknown[0]
    if first in run_setting_names():
        return (f"'{first}' is a run setting, not an input key of the {graph_name} graph: pass it in the run's "
                f"context (graph.invoke(input, context={{'{first}': ...}}); langgraph dev: the run's context; "
                "MCP: the tool's `settings`)")
    close = difflib.get_close_matches(first, known, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    names = ", ".join(f"'{k}'" for k in unknown)
    return (f"unknown input key{'s' if len(unknown) > 1 else ''} {names} of the {graph_name} graph{hint}: its input "
            f"keys are {', '.join(known)}")


class RunFailed(RuntimeError):
    """A run that ended on a fatal cause (a model endpoint that failed, a budget spent before any
    candidate, a task that cannot load or run here): what `graph.invoke` raises once the run is
    recorded, and the error a server's run ends with (the SDK's `error` status, MCP's isError).
    Carries the whole stop reason and the run directory; its message is one line."""

    def __init__(self, failure: str, run_dir: str | None = None, stop_reason: str | None = None):
        self.failure, self.run_dir, self.stop_reason = failure, run_dir, stop_reason or failure
        line = " ".join(failure.split())  # a baseline's error may run over lines
        super().__init__(f"{line} (run directory: {run_dir})" if run_dir else line)

    def __reduce__(self) -> tuple[Any, ...]:  # pickled whole, as its fields
        return RunFailed, (self.failure, self.run_dir, self.stop_reason)


class _Watch:
    """A stream with the run's last root state seen: "values" is added to the modes asked for (and
    its chunks left out of what the caller gets), so that the run's end can be judged whatever
    the caller streams. Chunks are given back in the shape the caller's stream_mode asks for."""

    def __init__(self, kwargs: dict[str, Any], default_mode: Any):
        mode = kwargs.get("stream_mode") or default_mode
        self.single = isinstance(mode, str)
        modes = [mode] if self.single else list(mode)
        self.added = "values" not in modes
        self.subgraphs = bool(kwargs.get("subgraphs"))
        self.kwargs = {**kwargs, "stream_mode": modes + (["values"] if self.added else [])}  # always a list
        self.last: Any = None

    def see(self, chunk: Any) -> tuple[bool, Any]:
        """Whether the caller asked for this chunk, and the chunk as the caller's modes shape it."""
        out: Any
        if isinstance(chunk, dict) and {"type", "data"} <= chunk.keys():  # v2's parts name their mode
            mode, ns, data, out = chunk["type"], chunk.get("ns") or (), chunk["data"], chunk
        elif self.subgraphs:
            ns, mode, data = chunk
            out = (ns, data) if self.single else chunk
        else:
            (mode, data), ns = chunk, ()
            out = data if self.single else chunk
        if mode == "values" and not ns:
            self.last = data
        return not (self.added and mode == "values"), out


class CheckedGraph(CompiledStateGraph[Any, Any, Any, Any]):
    """A compiled graph that refuses, before it runs, input keys its input schema lacks, input its
    `refuses_input` refuses (run on the input as given: on a thread, state from an earlier run must
    not fill a key this run left out), and context its `refuses_context` refuses; that resolves
    the context it runs with (`resolved`); and that raises RunFailed where `failure` says the run
    it finished failed."""

    def refuses_input(self, given: Mapping[str, Any]) -> str | None:
        """The graph's own rule for its input as given, in one line, or None."""
        return None

    def refuses_context(self, keys: list[str]) -> str | None:
        """The graph's rule for the caller's context keys, in one line, or None."""
        return None

    def resolved(self, context: Any) -> Any:
        """The context the run gets, from what its caller gave."""
        return context

    def failure(self, values: Mapping[str, Any]) -> str | None:
        """Why a finished run failed, in words, or None."""
        return None

    def _refuse(self, given: Any, context: Any) -> None:
        if isinstance(given, Mapping):  # None resumes a thread, a Command answers an interrupt
            refuse(input_keys_refusal(given, self.builder.input_schema.__annotations__, self.name))
            refuse(self.refuses_input(given))
        if isinstance(context, Mapping):
            refuse(self.refuses_context(own_keys(context)))

    def _raise_failure(self, values: Any) -> None:
        why = self.failure(values) if isinstance(values, Mapping) else None
        if why:
            raise RunFailed(why, values.get("run_dir"), values.get("stop_reason"))

    def __call__(self, runtime: ServerRuntime) -> "CheckedGraph":
        """`langgraph dev` calls a callable graph as a factory for every use, a run's with its
        context as the caller gave it (before the server filters it by the context schema)."""
        context = getattr(runtime, "context", None)
        if isinstance(context, Mapping):
            refuse(self.refuses_context(own_keys(context)))
        return self

    def _watch(self, input: Any, kwargs: dict[str, Any]) -> _Watch:
        self._refuse(input, kwargs.get("context"))
        kwargs = {**kwargs, "context": self.resolved(kwargs.get("context"))}
        return _Watch(kwargs, self.stream_mode)

    def stream(self, input: Any = None, *args: Any, **kwargs: Any) -> Iterator[Any]:  # invoke's too
        watch = self._watch(input, kwargs)  # refused now, not at the first chunk
        return self._stream(watch, super().stream(input, *args, **watch.kwargs))

    def _stream(self, watch: _Watch, chunks: Iterator[Any]) -> Iterator[Any]:
        for chunk in chunks:
            asked, out = watch.see(chunk)
            if asked:
                yield out
        self._raise_failure(watch.last)

    def astream(self, input: Any = None, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:  # ainvoke's, the server's
        watch = self._watch(input, kwargs)
        return self._astream(watch, super().astream(input, *args, **watch.kwargs))

    async def _astream(self, watch: _Watch, chunks: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for chunk in chunks:
            asked, out = watch.see(chunk)
            if asked:
                yield out
        self._raise_failure(watch.last)


class RunContextGraph(CheckedGraph):
    """A checked graph whose context is a run's (RunContext: the optimizer's, the confirmation's): a
    context key RunContext lacks refused, and the context resolved as the CLI resolves its flags
    (accelopt.toml, the environment, then the caller's keys)."""

    def refuses_context(self, keys: list[str]) -> str | None:
        return unknown_keys_refusal(keys)

    def resolved(self, context: Any) -> Any:
        if context is not None and not isinstance(context, Mapping | RunContext):
            return context  # the graph's first node refuses it in one line (nodes/context.context_refusal)
        return resolve_context(context)


def checked(compiled: CompiledStateGraph[Any, Any, Any, Any], kind: type[CheckedGraph]) -> CheckedGraph:
    """The compiled graph as a CheckedGraph of `kind` (its own copy, as Pregel.copy makes one)."""
    return kind(**{k: v for k, v in vars(compiled).items() if k != "__orig_class__"})

