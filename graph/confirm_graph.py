"""The `confirm` graph: an ended run's best kernel confirmed once more against its baseline, as
`accelopt show RUN_DIR --confirm` confirms it (nodes/standing.confirm_run: one implementation for
both), served by `langgraph dev` beside the optimizer and the check (langgraph.json), and so one of
its MCP tools; `graph.invoke` reaches it as `accelopt.graph.confirm_graph.graph`.

Input (`ConfirmInput`): `run_dir`, a path on the machine that runs the graph. Its context is the
optimizer's (RunContext), resolved as every door resolves it (accelopt.toml, the environment, then
the caller's keys): `device`, `eval_timeout_s` and `ray_address` say where and how long. Output
(`ConfirmOutput`): the new confirmation, and the run's figure pooled anew with it (summary.json
`best_figure`: speedup, interval, how many evaluations it pools and how many confirm it).

Bad input (no run directory, a run still held by its process, a best that is the baseline, a task
that no longer loads or has changed since the run) is a ConfigError of one line, raised before any
judging. A confirmation that runs and fails (the kernel crashes this time) is an answer, not an
error: its status says so, and the figure records it (`failed_confirmation`).

(No `from __future__ import annotations`: the server builds the schemas from these annotations.)
"""

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from pydantic import Field

# typing_extensions' TypedDict: pydantic (the server's schemas) refuses typing's below Python 3.12
from typing_extensions import TypedDict

try:  # `langgraph dev` imports this file: a broken environment must say what to do
    from accelopt.graph.doors import RunContextGraph, checked
    from accelopt.nodes.context import (
        RunContext,
        context_refusal,
        device_refusal,
        fields_refusal,
        refuse,
    )
    from accelopt.nodes.standing import confirm_run
except ImportError as exc:
    raise ImportError(f"accelopt's confirm graph cannot be imported ({exc}). Install accelopt into the Python "
                      "environment that loads it: `pip install -e .` in the repository (or `make install`)") from exc


class ConfirmInput(TypedDict):
    """What a confirmation is asked: the graph's input schema (Studio's form, the MCP tool's arguments)."""

    run_dir: Annotated[str, Field(description="An ended accelopt run's directory, a path on the server's machine")]


class ConfirmOutput(TypedDict, total=False):
    """The new confirmation (tools/best_figure.Confirmation, dumped) and the run's figure pooled
    anew (tools/best_figure.BestFigure, dumped), with the run's best and its file."""

    run_dir: str
    best_id: str
    best_kernel: str | None               # RUN_DIR/best_kernel.py, where the run wrote one
    confirmation: dict[str, Any]          # status, speedup, ci_low, ci_high, rounds, basis, timer, device_name, seed
    best_figure: dict[str, Any] | None    # speedup, ci_low, ci_high, measurements, confirmed, word, ...
    confirmations: int                    # how many the run now has


class ConfirmState(TypedDict, total=False):
    """The input and the answer in one state."""

    run_dir: str
    best_id: str
    best_kernel: str | None
    confirmation: dict[str, Any]
    best_figure: dict[str, Any] | None
    confirmations: int


def input_refusal(given: Mapping[str, Any]) -> str | None:
    """What is wrong with a confirmation's input, in one line, or None."""
    run_dir = given.get("run_dir")
    if not isinstance(run_dir, str) or not run_dir:
        return 'no run_dir in the confirmation\'s input: give {"run_dir": "PATH"}, an ended accelopt run\'s directory'
    return None


def confirm(state: ConfirmState, runtime: Runtime[RunContext]) -> ConfirmOutput:
    """Confirm the run's best: the answer, or a ConfigError of one line for bad input."""
    ctx = runtime.context
    refuse(input_refusal(state))
    if not isinstance(ctx, RunContext):
        refuse(context_refusal(ctx))
    refuse(fields_refusal(ctx, ("device", "eval_timeout_s", "ray_address"))  # the settings it reads
           or (None if ctx.ray_address else device_refusal(ctx.device, flag=False)))
    run_dir = Path(state["run_dir"])
    summary, got = confirm_run(run_dir, ctx)
    best_file = run_dir / "best_kernel.py"
    return {"run_dir": str(run_dir), "best_id": summary.best_id or "", "confirmation": got.model_dump(),
            "best_kernel": str(best_file) if best_file.is_file() else None,
            "best_figure": summary.best_figure.model_dump() if summary.best_figure else None,
            "confirmations": len(summary.confirmations)}


def build_confirm_graph() -> StateGraph[ConfirmState, RunContext, ConfirmInput, ConfirmOutput]:
    builder = StateGraph(ConfirmState, context_schema=RunContext, input_schema=ConfirmInput,
                         output_schema=ConfirmOutput)
    builder.add_node("confirm", confirm)
    builder.add_edge(START, "confirm")
    builder.add_edge("confirm", END)
    return builder


class ServedConfirmGraph(RunContextGraph):
    """The confirm graph as every door reaches it: unknown input and context keys refused, and its
    context resolved as the optimizer's is (graph/doors.py)."""

    def refuses_input(self, given: Mapping[str, Any]) -> str | None:
        return input_refusal(given)


graph: CompiledStateGraph[ConfirmState, RunContext, ConfirmInput, ConfirmOutput] = checked(
    build_confirm_graph().compile(name="confirm"), ServedConfirmGraph)
