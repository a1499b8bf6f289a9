"""Every task of a superstep runs at once (graph/threads.py): LangGraph's own pool is cores + 4
threads, which made a 2-core machine's 16 kernel branches call their model 6 at a time."""

import asyncio
import operator
import os
import time
from typing import Annotated, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from accelopt.graph.threads import MAX_CONCURRENCY

WIDE = (os.cpu_count() or 1) + 4 + 4  # more branches than LangGraph's default pool has threads
NAP_S = 0.4


class Fan(TypedDict):
    done: Annotated[list, operator.add]


def _fan_out():
    def fan(state: Fan) -> list[Send]:
        return [Send("nap", {"done": []}) for _ in range(WIDE)]

    def nap(state: Fan) -> dict:
        time.sleep(NAP_S)  # a model call: waiting, not computing
        return {"done": [1]}

    builder = StateGraph(Fan)
    builder.add_node("nap", nap)
    builder.add_conditional_edges(START, fan, ["nap"])
    builder.add_edge("nap", END)
    return builder.compile()


def _timed(run) -> float:
    began = time.monotonic()
    assert len(run()["done"]) == WIDE
    return time.monotonic() - began


def test_the_graph_every_door_compiles_lets_a_whole_superstep_run_at_once():
    from accelopt.graph.builder import compile_graph, graph

    assert compile_graph().config["max_concurrency"] == MAX_CONCURRENCY
    assert graph.config["max_concurrency"] == MAX_CONCURRENCY  # langgraph dev, Studio, graph.invoke
    plain, wide = _fan_out(), _fan_out().with_config(max_concurrency=MAX_CONCURRENCY)
    assert _timed(lambda: plain.invoke({"done": []})) >= 2 * NAP_S  # LangGraph's default: waves
    assert _timed(lambda: wide.invoke({"done": []})) < 2 * NAP_S  # one wave


def test_the_served_apps_loop_runs_an_async_runs_sync_nodes_at_once():
    from accelopt.graph.served_app import app, lifespan

    wide = _fan_out().with_config(max_concurrency=MAX_CONCURRENCY)

    async def served() -> float:
        async with lifespan(app):
            began = time.monotonic()
            assert len((await wide.ainvoke({"done": []}))["done"]) == WIDE
            return time.monotonic() - began

    assert asyncio.run(served()) < 2 * NAP_S
