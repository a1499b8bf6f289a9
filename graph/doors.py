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
from typing import Any, ClassVar

from langgraph.graph.state import CompiledStateGraph
from langgraph_sdk.runtime import ServerRuntime

from accelopt.nodes.context import refuse, run_setting_names, unknown_keys_refusal

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


class CheckedGraph(CompiledStateGraph[Any, Any, Any, Any]):
    """A compiled graph that refuses, before it runs, input keys its input schema lacks, input its
    `refuses_input` refuses (run on the input as given: on a thread, state from an earlier run must
    not fill a key this run left out), and, with `checks_context`, context keys RunContext lacks."""

    checks_context: ClassVar[bool] = False

    def refuses_input(self, given: Mapping[str, Any]) -> str | None:
        """The graph's own rule for its input as given, in one line, or None."""
        return None

    def _refuse(self, given: Any, context: Any) -> None:
        if isinstance(given, Mapping):  # None resumes a thread, a Command answers an interrupt
            refuse(input_keys_refusal(given, self.builder.input_schema.__annotations__, self.name))
            refuse(self.refuses_input(given))
        if self.checks_context and isinstance(context, Mapping):
            refuse(unknown_keys_refusal(own_keys(context)))

    def __call__(self, runtime: ServerRuntime) -> "CheckedGraph":
        """`langgraph dev` calls a callable graph as a factory for every use, a run's with its
        context as the caller gave it (before the server filters it by the context schema)."""
        context = getattr(runtime, "context", None)
        if self.checks_context and isinstance(context, Mapping):
            refuse(unknown_keys_refusal(own_keys(context)))
        return self

    def stream(self, input: Any = None, *args: Any, **kwargs: Any) -> Iterator[Any]:  # invoke's too
        self._refuse(input, kwargs.get("context"))
        return super().stream(input, *args, **kwargs)

    def astream(self, input: Any = None, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:  # ainvoke's, the server's
        self._refuse(input, kwargs.get("context"))
        return super().astream(input, *args, **kwargs)


def checked(compiled: CompiledStateGraph[Any, Any, Any, Any], kind: type[CheckedGraph]) -> CheckedGraph:
    """The compiled graph as a CheckedGraph of `kind` (its own copy, as Pregel.copy makes one)."""
    return kind(**{k: v for k, v in vars(compiled).items() if k != "__orig_class__"})

