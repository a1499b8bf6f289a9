"""The `check` graph: one kernel judged against a task, as `accelopt check TASK KERNEL --json`
judges it (tools/harness/check_kernel.py: one implementation for both), served by `langgraph dev`
beside the optimizer (langgraph.json) and so one of its MCP tools.

Input (`CheckInput`): `task_dir` and `kernel`, both paths on the machine that runs the graph (the
server's: a relative path is taken from its working directory); the kernel is a file, as a coding
agent has one, and its path is what a failure's traceback names. Optional: `against` (another
kernel file to time against instead of the task's baseline), `versus_torch`, `compile_mode`,
`device` (auto, cuda, cpu) and `timeout_s`. Output (`CheckOutput`): the verdict record, key for key
what `accelopt check --json` prints (`before_judge_s.process` is None here: a server's process did
not start for this check).

Bad input (no task_dir or kernel, a task that does not load or cannot run here, a missing file, a
source that is no kernel of the task, a setting out of range) is a ConfigError of one line, raised
before any judging: `graph.invoke` raises it and the server's run ends as an error with that line,
as the optimizer's refusals do (nodes/context.py). A kernel that runs and fails is a verdict, not an
error: its status says why (compile_error, wrong_output, ...), as the CLI's exit 1 does.

The judges are the process's own (tools/harness/pool.get_pool): a second check in the same
process finds its judge warm, until `ACCELOPT_JUDGE_IDLE_S` without one lets it go.

(No `from __future__ import annotations`: the server builds the schemas from these annotations.)
"""

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, NotRequired, cast

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from pydantic import Field

# typing_extensions' TypedDict: pydantic (the server's schemas) refuses typing's below Python 3.12
from typing_extensions import TypedDict

try:  # `langgraph dev` imports this file: a broken environment must say what to do
    from accelopt.graph.doors import CheckedGraph, checked
    from accelopt.nodes.context import device_refusal, refuse, setting_refusal
    from accelopt.tools.harness.check_kernel import Startup, judge, verdict_record
    from accelopt.tools.harness.reference_kernel import COMPILE_MODES, CompileMode
    from accelopt.tools.task import TaskError, load_task
except ImportError as exc:
    raise ImportError(f"accelopt's check graph cannot be imported ({exc}). Install accelopt into the Python "
                      "environment that loads it: `pip install -e .` in the repository (or `make install`)") from exc

Device = Literal["auto", "cuda", "cpu"]
DEVICES: tuple[str, ...] = ("auto", "cuda", "cpu")
DEFAULT_TIMEOUT_S = 300.0


class CheckInput(TypedDict):
    """What a check is asked: the graph's input schema (Studio's form, the MCP tool's arguments)."""

    # the descriptions: Studio's form and the MCP tool's arguments show them
    task_dir: Annotated[str, Field(description="A task folder (task.json, reference.py, baseline.py), a path on the "
                                               "server's machine")]
    kernel: Annotated[str, Field(description="The kernel file to judge, a path on the server's machine")]
    against: NotRequired[Annotated[str | None, Field(description=(
        "Time against this kernel file instead of the task's baseline"))]]
    versus_torch: NotRequired[Annotated[bool, Field(description=(
        "Also time eager PyTorch of the reference, and torch.compile on a GPU (default false)"))]]
    compile_mode: NotRequired[Annotated[CompileMode, Field(description="torch.compile's mode, where it is timed")]]
    device: NotRequired[Annotated[Device, Field(description=(
        "auto (a GPU if one is visible), cuda, or cpu (the Triton interpreter: correctness, no GPU times)"))]]
    timeout_s: NotRequired[Annotated[float, Field(description="The evaluation's limit in seconds (default 300)",
                                                   gt=0)]]
    replay: NotRequired[Annotated[int | None, Field(description=(
        "Draw the inputs of an earlier verdict again: the `seed` it recorded (each check draws its own by default)"),
        ge=0, lt=2**31)]]


class CheckOutput(TypedDict, total=False):
    """The verdict record, as `accelopt check --json` prints it (tools/harness/check_kernel.
    verdict_record: EvalResult's fields, dumped; tests/integration/test_check_graph.py keeps the two
    alike). Records are the harness's own (tools/harness/result.py), as plain dicts."""

    status: str                      # verified, or why not: compile_error, wrong_output, cheat_suspected, ...
    error: str | None
    device: str                      # where it was judged: cuda, or cpu (the interpreter)
    seed: int | None                 # every input the judge drew derives from it (`replay` draws them again)
    void: dict[str, str]             # per comparator: why the comparison with it is void
    device_name: str | None
    timer: str | None                # cuda_event, interpreter_wall (a CPU emulation's wall clock: not performance)
    workloads: dict[str, dict[str, Any]]   # per workload: median_us, iqr_us, kernel_us, pct_peak, ...
    compare: dict[str, dict[str, dict[str, Any]]]  # per comparator, its workloads timed in the same rounds
    versus: dict[str, dict[str, Any]]      # per comparator: speedup, ci_low, ci_high, rounds, faster, slower
    versus_kernel: dict[str, dict[str, Any]]  # the same on kernel-only time (GPU)
    verdicts: dict[str, dict[str, Any]]    # per comparator: word (faster, slower, within noise, ...), basis, reason
    rounds: dict[str, Any] | None          # the timing rounds run and why they stopped
    flags: list[str]
    findings: list[dict[str, Any]]         # static advice
    evidence: list[str]                    # the runtime checks the verdict rests on, in words
    kernels_seen: list[str]
    audit: dict[str, Any] | None
    max_abs_err: float | None
    max_rel_err: float | None
    eval_s: float | None
    phases_s: dict[str, float]             # the judge's and the runner's seconds per step
    profile: str | None
    gpu: str | None
    node: str | None
    # per timed function: the configuration each @triton.autotune kernel ran per workload, who chose it, notes
    autotune: dict[str, dict[str, Any]]
    torch_compile_mode: str                # where torch.compile was timed: its mode
    before_judge_s: dict[str, float | None]  # process, prepare, judge_pool, judge_start, to_verdict


class CheckState(TypedDict, total=False):
    """The input and the record in one state (`device`: as asked in the input, where it ran after)."""

    task_dir: str
    kernel: str
    against: str | None
    versus_torch: bool
    compile_mode: CompileMode
    device: str
    timeout_s: float
    replay: int | None
    status: str
    error: str | None
    seed: int | None
    void: dict[str, str]
    device_name: str | None
    timer: str | None
    workloads: dict[str, dict[str, Any]]
    compare: dict[str, dict[str, dict[str, Any]]]
    versus: dict[str, dict[str, Any]]
    versus_kernel: dict[str, dict[str, Any]]
    verdicts: dict[str, dict[str, Any]]
    rounds: dict[str, Any] | None
    flags: list[str]
    findings: list[dict[str, Any]]
    evidence: list[str]
    kernels_seen: list[str]
    audit: dict[str, Any] | None
    max_abs_err: float | None
    max_rel_err: float | None
    eval_s: float | None
    phases_s: dict[str, float]
    profile: str | None
    gpu: str | None
    node: str | None
    autotune: dict[str, dict[str, Any]]
    torch_compile_mode: str
    before_judge_s: dict[str, float | None]


def one_line(text: str) -> str:
    """A message as one line (a task's validation may say several things)."""
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def input_refusal(state: CheckState) -> str | None:
    """What is wrong with a check's input, in one line, or None: what the CLI refuses (exit 2)."""
    for key in ("task_dir", "kernel"):
        if not isinstance(state.get(key), str) or not state.get(key):
            return (f'no {key} in the check\'s input: give {{"task_dir": "PATH", "kernel": "PATH"}}, a task directory '
                    "(task.json, reference.py, baseline.py) and the kernel file to judge")
    device = state.get("device", "auto")
    if device not in DEVICES:
        return f"device {device!r}: use auto, cuda or cpu (the Triton interpreter: correctness, no GPU times)"
    timeout = state.get("timeout_s", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        return f"timeout_s {timeout!r}: input should be a valid number (seconds)"
    refusal = setting_refusal("eval_timeout_s", timeout, shown_as="timeout_s")  # the CLI's --timeout rule
    if refusal:
        return refusal
    replay = state.get("replay")
    if replay is not None and (type(replay) is not int or not 0 <= replay < 2**31):
        return f"replay {replay!r}: a verdict's seed, an integer from 0 to {2**31 - 1}"
    if not isinstance(state.get("versus_torch", False), bool):
        return f"versus_torch {state.get('versus_torch')!r}: true or false"
    if state.get("compile_mode", "default") not in COMPILE_MODES:
        return f"compile_mode {state.get('compile_mode')!r}: use {' or '.join(COMPILE_MODES)}"
    against = state.get("against")
    if against is not None and not isinstance(against, str):
        return f"against {against!r}: the path of a kernel file"
    for path in (state["kernel"], against):
        if path is not None and Path(path).is_dir():
            return f"{path}: a folder, not a kernel file (the check graph judges one kernel; `accelopt check` judges folders)"
        if path is not None and not Path(path).is_file():
            return f"{path}: no such file"
    return device_refusal(device, flag=False)


def unreadable(path: Path) -> str | None:
    """Why a file cannot be a kernel's source (not text, or not readable), or None."""
    try:
        path.read_text()
    except UnicodeDecodeError:
        return f"{path}: not text, so not a kernel's source"
    except OSError as e:
        return f"{path}: cannot be read ({e.strerror or type(e).__name__})"
    return None


def check(state: CheckState) -> CheckOutput:
    """Judge the kernel: the verdict record, or a ConfigError of one line for bad input."""
    began = time.monotonic()
    refuse(input_refusal(state))
    try:
        task = load_task(state["task_dir"])
    except TaskError as e:
        refuse(one_line(str(e)))
    kernel, against = Path(state["kernel"]), state.get("against")
    mode: CompileMode = state.get("compile_mode", "default")
    startup = Startup(began=began)
    for path in (kernel, None if against is None else Path(against)):
        if path is not None:
            refuse(unreadable(path))
    try:
        result = judge(task, kernel, Path(against) if against is not None else None,
                       state.get("versus_torch", False) or "compile_mode" in state, state.get("device", "auto"),
                       float(state.get("timeout_s", DEFAULT_TIMEOUT_S)), mode, startup=startup, seed=state.get("replay"))
    except TaskError as e:  # the task cannot run here, or the source is no kernel of it
        refuse(one_line(str(e)))
    return cast(CheckOutput, verdict_record(result, mode, startup))


def build_check_graph() -> StateGraph[CheckState, None, CheckInput, CheckOutput]:
    builder = StateGraph(CheckState, input_schema=CheckInput, output_schema=CheckOutput)
    builder.add_node("check", check)
    builder.add_edge(START, "check")
    builder.add_edge("check", END)
    return builder


class ServedCheckGraph(CheckedGraph):
    """The check graph as every door reaches it: an input key CheckInput lacks (`kernal`) and bad
    input refused on the input as given (graph/doors.py): on a thread, the last check's kernel
    never stands in for one this check left out."""

    def refuses_input(self, given: Mapping[str, Any]) -> str | None:
        return input_refusal(cast(CheckState, given))

    def refuses_context(self, keys: list[str]) -> str | None:
        return context_refusal(keys)


def context_refusal(keys: list[str]) -> str | None:
    """The check graph has no run context: every setting of a check is an input key. A context key
    (`{"beams": -1}`, or `device` given there) would be dropped and the check run without it:
    refused in one line, as the optimizer refuses a context key it lacks; or None."""
    if not keys:
        return None
    inputs = list(CheckInput.__annotations__)
    first = sorted(keys)[0]
    if first in inputs:
        return (f"'{first}' is an input key of the check graph, not a context key: pass it in the input "
                f"(its input keys are {', '.join(inputs)})")
    return (f"unknown context key{'s' if len(keys) > 1 else ''} {', '.join(repr(k) for k in sorted(keys))} of the "
            f"check graph: it takes no context; a check's settings are its input keys: {', '.join(inputs)}")


graph: CompiledStateGraph[CheckState, None, CheckInput, CheckOutput] = checked(
    build_check_graph().compile(name="check"), ServedCheckGraph)
