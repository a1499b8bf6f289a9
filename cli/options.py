"""Options shared by `optimize` and `eval`, and the checks both make before any work (each
the check of nodes/context.py, imported when a value is given: the graph makes the same).

Light on purpose: typer and the standard library only, so that `accelopt --help` (and every
command's help) answers without importing torch, LangGraph, LangChain or openai. The defaults
shown in help are RunContext's (tests/unit/test_cli_startup.py keeps them equal).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated as Opt  # an import alias: mypy takes `Opt = Annotated` for a variable
from typing import Any, Literal

import typer

from accelopt.nodes.schedule import DEFAULT_SCHEDULE
from accelopt.nodes.schedule import Schedule as ScheduleType

DeviceName = Literal["auto", "cuda", "cpu"]

# Every value a RunContext field bounds (B, N, K, F, T, budgets, the evaluation limit) is checked as
# it is parsed, by the field's own rule (nodes/context.setting_refusal): one `error:` line, in the
# words the graph's setup uses for the same value from Studio or graph.invoke.
_FIELDS = {"max_cost": "max_cost_usd", "max_wall": "max_wall_s", "eval_timeout": "eval_timeout_s",
           "timeout": "eval_timeout_s"}  # the option's name -> the field whose rule it follows


def checked(param: typer.CallbackParam, value: float | None) -> float | None:
    """Refuse a value below its field's minimum (or nan) in one `error:` line, exit 2."""
    if value is not None:
        from accelopt.cli.memory import fail
        from accelopt.nodes.context import setting_refusal

        refusal = setting_refusal(_FIELDS.get(param.name or "", param.name or ""), value, shown_as=param.opts[0])
        if refusal:
            fail(refusal)
    return value


# The search shape (B, N, K, F, T) and the launch-configuration search.
Beams = Opt[int | None, typer.Option("--beams", "-B", callback=checked, show_default="2", help=(
    "B: beam width, 1 or more (elitist: the best verified kernel is never dropped)"))]
Plans = Opt[int | None, typer.Option("--plans", "-N", callback=checked, show_default="2",
                                        help="N: plans per beam member, 1 or more")]
Samples = Opt[int | None, typer.Option("--samples", "-K", callback=checked, show_default="2; 1 with the tuner",
                                          help="K: kernels written per plan, 1 or more")]
Fixes = Opt[int | None, typer.Option("--fixes", "-F", callback=checked, show_default="2",
                                        help="F: fix attempts per failed kernel, 0 or more")]
Iterations = Opt[int | None, typer.Option("--iterations", "-T", callback=checked, show_default="3", help=(
    "T: iterations, 1 or more (a larger T than a finished run's extends it)"))]
Autotune = Opt[int | None, typer.Option(callback=checked, show_default="0: off",
                                           help="Search up to N launch configurations of each verified kernel")]

# Models: one for every role, or per role; each role's endpoint.
Model = Opt[str | None, typer.Option(
    help="PROVIDER:NAME for every role: openai:gpt-4.1-mini, vllm:ORG/NAME, sglang:..., ollama:..., or tuner (no LLM; "
         "the default with none configured). Only OpenAI's gpt-*/o1/o3/o4 names may leave out the provider")]
BaseUrl = Opt[str | None, typer.Option(help="OpenAI-compatible endpoint, e.g. http://host:8000/v1")]
PlannerModel = Opt[str | None, typer.Option(help="Model for the planner only (PROVIDER:NAME)")]
ExecutorModel = Opt[str | None, typer.Option(help="Model for the executor only (PROVIDER:NAME)")]
FixerModel = Opt[str | None, typer.Option(help="Model for the fixer only (PROVIDER:NAME)")]
SummarizerModel = Opt[str | None, typer.Option(help="Model for the summarizer only (PROVIDER:NAME)")]
PlannerBaseUrl = Opt[str | None, typer.Option(help="Endpoint for the planner only")]
ExecutorBaseUrl = Opt[str | None, typer.Option(help="Endpoint for the executor only")]
FixerBaseUrl = Opt[str | None, typer.Option(help="Endpoint for the fixer only")]
SummarizerBaseUrl = Opt[str | None, typer.Option(help="Endpoint for the summarizer only")]
NoPreflight = Opt[bool, typer.Option("--no-preflight", help="Skip checking that each endpoint serves its model "
                                                            "before any work")]
Config = Opt[Path | None, typer.Option(help="TOML config file (default: ./accelopt.toml, or $ACCELOPT_CONFIG)")]

# Where kernels run, and the memory.
Device = Opt[DeviceName | None, typer.Option(
    show_default="auto", help="auto (a GPU if there is one), cuda (refused where no GPU is visible), or cpu (Triton "
                              "interpreter: correctness only, times are not GPU performance)")]
Memory = Opt[Path | None, typer.Option(help="Insight store directory (default: the user data dir)")]
MemoryUrl = Opt[str | None, typer.Option(help="Chroma server shared by runs, e.g. http://host:8000")]
Embedder = Opt[str | None, typer.Option(show_default="all-MiniLM-L6-v2",
                                           help="Sentence-transformers model for insights (offline)")]
NoMemory = Opt[bool, typer.Option("--no-memory", help="Neither recall nor store insights")]
LearnFromInterpreter = Opt[bool, typer.Option(
    "--learn-from-interpreter", help="Store lessons from CPU-interpreter timings too (they are noise: for checking "
                                     "the pipeline offline, not for real lessons)")]
CreateMemory = Opt[bool, typer.Option("--create-memory", help="Start a new insight store at --memory if there is "
                                                              "none (else a missing directory is an error: a typo)")]

# Budgets: per run (under `eval`, per task); zero or less would stop a run before it starts.
MaxTokens = Opt[int | None, typer.Option(callback=checked, help="Token budget per run (eval: per task)")]
MaxCost = Opt[float | None, typer.Option(callback=checked, help="$ budget per run (eval: per task)")]
MaxWall = Opt[float | None, typer.Option(callback=checked, help="Wall-clock budget per run in seconds (eval: per task)")]
EvalTimeout = Opt[float | None, typer.Option(callback=checked, show_default="300",
                                                help="Per-candidate evaluation limit in seconds")]

# Where evaluations run: the local pool, or a Ray cluster (pip install "accelopt[ray]").
# Help is rich markup: a literal [word] is written \\[word], else it vanishes (tests/unit/test_cli_startup.py).
Cluster = Opt[Literal["local", "ray"] | None, typer.Option(
    show_default="local", help="local (one judge per GPU of this host) or ray (evaluation actors on every GPU of a "
                               "Ray cluster; --ray-address, $ACCELOPT_RAY_ADDRESS or \\[cluster] in accelopt.toml, "
                               "else auto)")]
RayAddress = Opt[str | None, typer.Option(help="Ray cluster to evaluate on: auto, ray://HOST:10001 or HOST:6379 "
                                                  "(implies --cluster ray)")]

# The search's schedule (nodes/schedule.py, one type for the CLI and the graph): light, no heavy imports.
Schedule = Opt[ScheduleType | None, typer.Option(
    show_default=DEFAULT_SCHEDULE.value,
    help="pipeline (the default, the fastest that finds beam's best): overlap, and from the second iteration "
         "on the next one is planned while this one's kernels run (from the beam this one began with; "
         "--review-plans without --schedule runs beam); beam: each iteration waits for its fixes and lessons, "
         "as AccelOpt publishes (deterministic call for call); overlap: fixes run beside the next iteration's "
         "first attempts and lessons beside its planners (the last one fixes in place)")]
Quorum = Opt[float | None, typer.Option(callback=checked, show_default="off: wait for every reply", help=(
    "overlap and pipeline: an iteration moves on once this share (0 to 1) of its kernel replies has landed; a "
    "kernel or fix still in flight joins the next iteration's selection when it lands (the last iteration waits for all)"))]

# Seeds: candidates made without a model (nodes/seeding.py).
SeedName = Literal["auto", "none", "inductor"]
SeedModeName = Literal["default", "max-autotune-no-cudagraphs", "max-autotune-triton"]
Seed = Opt[SeedName | None, typer.Option(
    show_default="auto", help="inductor: also start from torch.compile's own Triton kernels for the reference "
                              "(compiled on this machine's GPU), judged like any candidate; auto: under the tuner on "
                              "a GPU (torch.compile's kernel is the bar to clear); none: never")]
SeedMode = Opt[SeedModeName | None, typer.Option(
    show_default="--compile-mode's", help="torch.compile mode of the Inductor seed; max-autotune-triton keeps matmuls "
                                          "in Triton templates instead of cuBLAS")]
# The comparator of the run's end (nodes/standing.py) and of `accelopt check`.
CompileModeName = Literal["default", "max-autotune-no-cudagraphs"]  # reference_kernel.COMPILE_MODES
CompileMode = Opt[CompileModeName | None, typer.Option(
    show_default="default", help="torch.compile mode of the comparator the best kernel is timed against: "
                                 "max-autotune-no-cudagraphs is its strongest kernel search (autotuned templates "
                                 "and launch configurations; longer to compile)")]
SeedCapture = Opt[Path | None, typer.Option(
    help="An Inductor capture made earlier on a GPU (`accelopt seed --capture-out`), used instead of compiling")]

# The defaults shown above, as RunContext has them (a unit test compares the two).
SHOWN_DEFAULTS = {"beams": 2, "plans": 2, "samples": 2, "fixes": 2, "iterations": 3, "autotune": 0,
                  "schedule": DEFAULT_SCHEDULE.value, "device": "auto", "embedder": "all-MiniLM-L6-v2", "eval_timeout_s": 300.0}


def context_flags(*, memory: Path | None, no_memory: bool, no_preflight: bool, max_cost: float | None,
                  max_wall: float | None, eval_timeout: float | None, learn_from_interpreter: bool = False,
                  **flags: Any) -> dict[str, Any]:
    """The shared options as graph/config.load_context's keyword arguments (the CLI's short names
    mapped to RunContext's fields; a flag not given is None: the config file or default decides)."""
    return {**flags, "memory_dir": str(memory) if memory else None, "use_memory": False if no_memory else None,
            "preflight": False if no_preflight else None, "max_cost_usd": max_cost, "max_wall_s": max_wall,
            "learn_from_interpreter": True if learn_from_interpreter else None,
            "eval_timeout_s": eval_timeout}


def cluster_refusal(ray_address: str | None) -> str | None:
    """Why the configured Ray cluster cannot be used (Ray missing, or the cluster unreachable), in one
    line, or None; connects this process to it as the driver."""
    if not ray_address:
        return None
    try:
        from accelopt.tools.harness.ray_pool import ClusterError, connect
    except ImportError:
        return 'evaluation on a Ray cluster needs Ray: pip install "accelopt[ray]"'
    try:
        connect(ray_address)
    except ClusterError as e:
        return str(e)
    return None


def device_refusal(device: str | None) -> str | None:
    """Why --device cannot be used on this machine, or None: nodes/context.device_refusal, the
    check the graph's setup makes for Studio and graph.invoke too."""
    if device != "cuda":
        return None
    from accelopt.nodes.context import device_refusal as refusal

    return refusal(device)
