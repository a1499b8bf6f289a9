"""Builds the optimization graph. `graph` is the compiled graph for `langgraph dev`, Studio and
`graph.invoke`; the CLI compiles the same builder with a SQLite checkpointer.

    setup -> recall -> planner (Send per beam member) -> dispatch (plan review, when asked)
          -> candidate (Send per plan x K: executor -> profiler <-> fixer; profiler -> autotune)
          -> selector -> summarizer -> record -> recall | standing -> END

    --schedule overlap (graph/routing.py): selector -> record -> recall -> planner, with the
    summarizer Sent beside the planners (-> dispatch) and the pending fixes Sent beside the next
    iteration's kernels (candidate, entered at the fixer); the run's last lessons before its end.
    --schedule pipeline: overlap, and from the third iteration on recall sends the iteration's
    kernels, its pending fixes, the last lessons and the next iteration's planners at once (the
    second's dispatch sends the third's planners; planners ahead end at dispatch, which sends
    nothing more; the selector waits for the kernels).

A run's settings and input are checked before any work wherever it starts (nodes/context.py,
nodes/setup.input_refusal; setup raises the refusal). What cannot be checked inside the graph (a
key the schemas have no field for, an input on a thread that leaves a key to the last run) `graph`,
a ServedGraph, refuses where the caller's input and context are still whole (graph/doors.py).
"""

from collections.abc import Mapping
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

try:  # `langgraph dev` and Studio import this file: a broken environment must say what to do
    from accelopt.graph.doors import RunContextGraph, checked
    from accelopt.graph.routing import (
        after_lessons,
        after_profiler,
        after_record,
        after_selector,
        after_setup,
        entry,
        to_planners,
        to_samples,
    )
    from accelopt.graph.threads import MAX_CONCURRENCY
    from accelopt.nodes.autotune import autotune
    from accelopt.nodes.context import RunContext
    from accelopt.nodes.executor import executor
    from accelopt.nodes.fixer import fixer
    from accelopt.nodes.planner import planner, review
    from accelopt.nodes.profiler import profiler
    from accelopt.nodes.recall import recall
    from accelopt.nodes.record import record
    from accelopt.nodes.selector import selector
    from accelopt.nodes.setup import input_refusal, setup
    from accelopt.nodes.standing import standing
    from accelopt.nodes.state import CandidateOutput, CandidateState, InputState, OutputState, RunState
    from accelopt.nodes.summarizer import summarizer
    from accelopt.tools.run_record import run_failure
    from accelopt.tools.timeline import timed_node
    from accelopt.tools.tracing import configure_tracing
except ImportError as exc:
    raise ImportError(f"accelopt's graph cannot be imported ({exc}). Install accelopt into the Python environment "
                      "that loads it: `pip install -e .` in the repository (or `make install`, then run "
                      ".venv/bin/langgraph dev)") from exc


def build_candidate_graph() -> CompiledStateGraph[CandidateState, RunContext, CandidateState, CandidateOutput]:
    sub = StateGraph(CandidateState, context_schema=RunContext, output_schema=CandidateOutput)
    sub.add_node("executor", executor)
    sub.add_node("profiler", profiler)
    sub.add_node("fixer", fixer)
    sub.add_node("autotune", autotune)
    sub.add_conditional_edges(START, entry, ["executor", "fixer"])  # a pending fix enters at the fixer
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
    builder.add_conditional_edges("recall", to_planners, ["planner", "summarizer", "candidate", "selector"])
    builder.add_edge("planner", "dispatch")
    builder.add_conditional_edges("dispatch", to_samples, ["candidate", "planner", "summarizer", "selector", END])
    builder.add_edge("candidate", "selector")
    # beam: lessons, then the record; overlap: the record, the lessons beside the next planners
    builder.add_conditional_edges("selector", after_selector, ["summarizer", "record"])
    builder.add_conditional_edges("summarizer", after_lessons, ["record", "dispatch", END])
    builder.add_conditional_edges("record", after_record, ["recall", "standing"])
    builder.add_edge("standing", END)
    return builder


class ServedGraph(RunContextGraph):
    """The optimizer as every door but the CLI reaches it: unknown input and context keys refused,
    and an input without a task_dir, before it runs; its context resolved as the CLI's is
    (accelopt.toml, the environment, then the caller's keys); a run that failed raises RunFailed
    (graph/doors.py)."""

    def refuses_input(self, given: Mapping[str, Any]) -> str | None:
        return input_refusal(given)

    def failure(self, values: Mapping[str, Any]) -> str | None:
        return run_failure(values)


def compile_graph(**compile_kwargs: Any) -> CompiledStateGraph[RunState, RunContext, InputState, OutputState]:
    """The graph compiled (`compile_kwargs`: a checkpointer, a name), every task of a superstep
    allowed to run at once (graph/threads.py): LangGraph's default pool is cores + 4 threads."""
    return build_graph().compile(**compile_kwargs).with_config(max_concurrency=MAX_CONCURRENCY)


configure_tracing()  # before anything traces: compact payloads (no-op unless LANGSMITH_TRACING=true)
graph = checked(compile_graph(name="accelopt"), ServedGraph)
