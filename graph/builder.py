"""Builds the optimization graph. `graph` is the compiled graph for `langgraph dev`, Studio and
`graph.invoke`; the CLI compiles the same builder with a SQLite checkpointer.

    setup -> recall -> planner (Send per beam member) -> dispatch (plan review, when asked)
          -> candidate (Send per plan x K: executor -> profiler <-> fixer; profiler -> autotune)
          -> selector -> summarizer -> record -> recall | standing -> END

A run's settings are checked before any work wherever it starts (nodes/context.py; setup raises
the refusal). One check cannot be made inside the graph: a context key RunContext has no field for
(`beems`). LangGraph's server drops such keys before the graph sees the context, and graph.invoke
fails on them with a TypeError; so `graph` (a ServedGraph) refuses them itself, in the same words,
where the context is still whole: the server calls a callable graph as a factory with the run's
context as given, and `stream`/`astream` see graph.invoke's.

(No `from __future__ import annotations` here: the server reads ServedGraph.__call__'s parameter
annotation, ServerRuntime, as an object to know what to pass it.)
"""

from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

try:  # `langgraph dev` and Studio import this file: a broken environment must say what to do
    from langgraph_sdk.runtime import ServerRuntime

    from accelopt.graph.routing import (
        after_profiler,
        after_setup,
        after_summarizer,
        to_planners,
        to_samples,
    )
    from accelopt.nodes.autotune import autotune
    from accelopt.nodes.context import RunContext, refuse, unknown_keys_refusal
    from accelopt.nodes.executor import executor
    from accelopt.nodes.fixer import fixer
    from accelopt.nodes.planner import planner, review
    from accelopt.nodes.profiler import profiler
    from accelopt.nodes.recall import recall
    from accelopt.nodes.record import record
    from accelopt.nodes.selector import selector
    from accelopt.nodes.setup import setup
    from accelopt.nodes.standing import standing
    from accelopt.nodes.state import CandidateOutput, CandidateState, InputState, OutputState, RunState
    from accelopt.nodes.summarizer import summarizer
    from accelopt.tools.timeline import timed_node
    from accelopt.tools.tracing import configure_tracing
except ImportError as exc:
    raise ImportError(f"accelopt's graph cannot be imported ({exc}). Install accelopt into the Python environment "
                      "that loads it: `pip install -e .` in the repository (or `make install`, then run "
                      ".venv/bin/langgraph dev)") from exc

# What LangGraph's server itself may put in a run's context beside RunContext's fields (a run given
# `config.configurable` instead of `context` has its configurable taken as the context).
_SERVER_KEYS = {"thread_id", "checkpoint_id", "checkpoint_ns", "checkpoint_map", "run_id", "assistant_id",
                "graph_id", "user_id", "cron_id"}


def _own_keys(context: Mapping) -> list[str]:
    return [k for k in context if not (k in _SERVER_KEYS or k.startswith(("__", "langgraph_", "x-")))]


def build_candidate_graph() -> CompiledStateGraph[CandidateState, RunContext, CandidateState, CandidateOutput]:
    sub = StateGraph(CandidateState, context_schema=RunContext, output_schema=CandidateOutput)
    sub.add_node("executor", executor)
    sub.add_node("profiler", profiler)
    sub.add_node("fixer", fixer)
    sub.add_node("autotune", autotune)
    sub.add_edge(START, "executor")
    sub.add_edge("executor", "profiler")
    sub.add_conditional_edges("profiler", after_profiler, ["fixer", "autotune", END])
    sub.add_edge("autotune", END)
    sub.add_edge("fixer", "profiler")
    return sub.compile(name="candidate")


def build_graph() -> StateGraph[RunState, RunContext, InputState, OutputState]:
    # Studio's forms: the input a user provides, the output a user reads, the context (RunContext)
    builder = StateGraph(RunState, context_schema=RunContext, input_schema=InputState, output_schema=OutputState)
    builder.add_node("setup", timed_node("setup", setup))
    builder.add_node("recall", timed_node("recall", recall))
    builder.add_node("planner", timed_node("planner", planner))
    # barrier: all plans are in before the samples fan out; with review_plans, an interrupt to edit them
    builder.add_node("dispatch", timed_node("dispatch", review))
    builder.add_node("candidate", build_candidate_graph())
    builder.add_node("selector", timed_node("selector", selector))
    builder.add_node("summarizer", timed_node("summarizer", summarizer))
    builder.add_node("record", timed_node("record", record))
    builder.add_node("standing", timed_node("standing", standing))
    builder.add_edge(START, "setup")
    builder.add_conditional_edges("setup", after_setup, ["recall", END])
    builder.add_conditional_edges("recall", to_planners, ["planner"])
    builder.add_edge("planner", "dispatch")
    builder.add_conditional_edges("dispatch", to_samples, ["candidate", "selector"])
    builder.add_edge("candidate", "selector")
    builder.add_edge("selector", "summarizer")
    builder.add_edge("summarizer", "record")
    builder.add_conditional_edges("record", after_summarizer, ["recall", "standing"])
    builder.add_edge("standing", END)
    return builder


class ServedGraph(CompiledStateGraph[RunState, RunContext, InputState, OutputState]):
    """The compiled graph, refusing a context key RunContext has no field for in one line (a
    ConfigError: the server's run ends as an error with it) where the context is still whole."""

    def __call__(self, runtime: ServerRuntime) -> "ServedGraph":
        """`langgraph dev` calls a callable graph as a factory for every use, a run's with its
        context as the caller gave it (before the server filters it by the context schema)."""
        context = getattr(runtime, "context", None)
        if isinstance(context, Mapping):
            refuse(unknown_keys_refusal(_own_keys(context)))
        return self

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[Any]:  # invoke's too
        if isinstance(kwargs.get("context"), Mapping):
            refuse(unknown_keys_refusal(kwargs["context"]))
        return super().stream(*args, **kwargs)

    def astream(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:  # ainvoke's and the server's
        if isinstance(kwargs.get("context"), Mapping):
            refuse(unknown_keys_refusal(kwargs["context"]))
        return super().astream(*args, **kwargs)


def served(compiled: CompiledStateGraph[RunState, RunContext, InputState, OutputState]) -> ServedGraph:
    """The compiled graph as a ServedGraph (its own copy, as Pregel.copy makes one)."""
    return ServedGraph(**{k: v for k, v in vars(compiled).items() if k != "__orig_class__"})


configure_tracing()  # before anything traces: compact payloads (no-op unless LANGSMITH_TRACING=true)
graph = served(build_graph().compile(name="accelopt"))
