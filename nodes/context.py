"""The run context: search shape, models per role, budgets, device and memory.

Passed as LangGraph's `context` (Runtime), so Studio shows it as a form. Everything here is
plain data; clients are built from it lazily inside nodes.

The checks a run's settings get before any work, in one place for every entry point (the CLI,
`graph.invoke`, `langgraph dev`): `context_refusal` (each field's type and minimum, every role's
model settings, `--device cuda` where no GPU is visible), `setting_refusal` (one value, as a CLI
option is parsed) and `unknown_keys_refusal` (a context key RunContext has no field for). Each
answers one line or None; the refusal is raised as tools/settings.ConfigError. A field's minimum is
its metadata's `ge`/`gt`, its maximum its `le` (pydantic reads them: the JSON schema's `minimum`/
`exclusiveMinimum`/`maximum`, Studio's form). Messages name a setting as its caller did: the CLI by its option (`--beams -1`,
cli/options.py), every other door by its context key (`beams -1`: graph.invoke, langgraph dev,
MCP's settings, accelopt.toml).
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from enum import EnumType
from functools import cache
from typing import Any, Literal, get_type_hints

from pydantic import TypeAdapter, ValidationError
from pydantic.json_schema import SkipJsonSchema

from accelopt.nodes.schedule import DEFAULT_SCHEDULE, Schedule, schedules_with
from accelopt.tools.harness.reference_kernel import CompileMode
from accelopt.tools.llm_spec import GIVEN, ROLES, ConfigError, ModelSpec, given_spec, split_model, validate_spec

# Settings that belong to one model or one endpoint: a role that names another model does not
# inherit the default's price, nor, with another provider, its endpoint and key.
_MODEL_BOUND = {"input_price", "output_price"}
_PROVIDER_BOUND = {"base_url", "api_key_env"}

Device = Literal["auto", "cuda", "cpu"]  # NKI runs on the NeuronCores under auto; cpu is refused for it


@dataclass(kw_only=True)
class RunContext:
    beams: int = field(default=2, metadata={"description": "B: beam width (elitist)", "ge": 1})
    plans: int = field(default=2, metadata={"description": "N: plans per beam member", "ge": 1})
    samples: int = field(default=2, metadata={"description": "K: kernels written per plan (the tuner writes 1)", "ge": 1})
    fixes: int = field(default=2, metadata={"description": "F: fix attempts per failed kernel", "ge": 0})
    iterations: int = field(default=3, metadata={"description": "T: iterations", "ge": 1})
    schedule: Schedule = field(default=DEFAULT_SCHEDULE, metadata={
        "description": "pipeline (the default): overlap, and from the second iteration on the next iteration's "
                       "planners run beside this one's kernels, from the beam this iteration began with (the "
                       "fastest schedule that finds beam's best; no plan review: review_plans without a schedule "
                       "runs beam); beam: each iteration waits for its fixes and lessons (AccelOpt's published "
                       "schedule, deterministic call for call); overlap: an iteration's fixes run beside the next "
                       "iteration's first attempts and its lessons beside the next planners (the last iteration "
                       "fixes in place)"})
    quorum: float | None = field(default=None, metadata={
        "description": "overlap and pipeline: an iteration moves on once this share of its first attempts' replies "
                       "(and of those it collects) have landed; a reply still in flight (a kernel's or a fix's) then "
                       "joins the next iteration's selection when it lands (the last iteration waits for all). None: wait for all",
        "gt": 0, "le": 1})
    autotune: int = field(default=0, metadata={
        "description": "After a kernel verifies, search up to this many launch configurations of it (0: off)",
        "ge": 0})

    model: str = field(default="tuner", metadata={
        "description": "Default model for every role, PROVIDER:NAME (openai, vllm, sglang, ollama, tuner)"})
    base_url: str | None = field(default=None, metadata={"description": "OpenAI-compatible endpoint URL"})
    role_models: dict[str, dict] = field(default_factory=dict, metadata={
        "description": "Per-role model settings: {role: ModelSpec fields}, roles: default, " + ", ".join(ROLES)
                       + "; a role inherits every field of default it does not set"})
    # Programmatic use only: ready LangChain chat models per role (or 'default'); not serializable,
    # so left out of the JSON schema (Studio's form) and of run.json.
    chat_models: SkipJsonSchema[dict[str, Any] | None] = None

    max_tokens: int | None = field(default=None, metadata={"description": "Token budget for the run", "gt": 0})
    max_cost_usd: float | None = field(default=None, metadata={"description": "$ budget for the run", "gt": 0})
    max_wall_s: float | None = field(default=None, metadata={"description": "Wall-clock budget (s)", "gt": 0})
    roofline_stop_pct: float = field(default=95.0, metadata={
        "description": "Stop when the best kernel reaches this % of achievable peak (GPU timings only)", "gt": 0})

    device: Device = field(default="auto", metadata={
        "description": "auto (a GPU if there is one, else the Triton interpreter; NKI: the NeuronCores), cuda, or cpu "
                       "(Triton interpreter: correctness, no GPU times)"})
    profile: bool = field(default=True, metadata={
        "description": "Profile verified kernels on a GPU (ncu if present, else torch.profiler) for the planner"})
    eval_timeout_s: float = field(default=300.0, metadata={"description": "Per-candidate evaluation limit (s)", "gt": 0})
    confirm_best: bool = field(default=True, metadata={
        "description": "At the run's end on a GPU, evaluate the best kernel once more against the baseline on fresh "
                       "inputs and pool it with its earlier evaluations (summary.json best_figure); false: report "
                       "the search's own evaluations (`accelopt show RUN_DIR --confirm` confirms later)"})
    versus_torch_compile: bool = field(default=True, metadata={
        "description": "At the run's end on a GPU, time the best kernel interleaved with torch.compile and eager "
                       "PyTorch of the reference (summary.json versus_torch_compile, torch_compile.json)"})
    torch_compile_mode: CompileMode = field(
        default="default", metadata={
            "description": "torch.compile mode of that comparator: default (what torch.compile(f) gives) or "
                           "max-autotune-no-cudagraphs (autotuned templates and launch configurations: its "
                           "strongest kernels, longer to compile)"})
    ray_address: str | None = field(default=None, metadata={
        "description": "Evaluate on this Ray cluster (auto, ray://host:10001, host:6379); None: the local pool"})
    use_memory: bool = field(default=True, metadata={
        "description": "Recall insights from the memory before planning and store what this run learns"})
    memory_dir: str | None = field(default=None, metadata={
        "description": "Insight store directory (default: the user data dir)"})
    memory_url: str | None = field(default=None, metadata={
        "description": "A Chroma server (`chroma run`) shared by several runs, e.g. http://host:8000"})
    embedder: str = field(default="all-MiniLM-L6-v2", metadata={
        "description": "Sentence-transformers model for insights (offline: the bundled default, or a local dir)"})
    memory_capacity: int = field(default=2000, metadata={
        "description": "Most insights the store keeps (the least supported are evicted first)", "ge": 1})
    recall_k: int = field(default=5, metadata={"description": "Insights recalled per beam member for the planner",
                                                "ge": 0})
    learn_from_interpreter: bool = field(default=False, metadata={
        "description": "Distill insights from CPU-interpreter timings too (pipeline checks only: they are noise)"})
    llm_retry_wait_s: float = field(default=1.0, metadata={
        "description": "First wait before retrying a failed model call (s), doubling per attempt, when the server "
                       "sends no Retry-After", "ge": 0})
    preflight: bool = field(default=True, metadata={
        "description": "Before the run, check that each endpoint serves its model (GET /models, else a 1-token call)"})
    prices: dict[str, list[float]] = field(default_factory=dict, metadata={
        "description": "$ per 1M tokens, [input, output], by model label or name prefix; overrides the built-in "
                       "table (self-hosted models are free unless priced here)"})
    review_plans: bool = field(default=False, metadata={
        "description": "Pause after the planners (interrupt) with the iteration's plans; resume with the list to run "
                       "(edited, fewer, or [] to skip the iteration)"})
    seed: Literal["auto", "none", "inductor"] = field(default="auto", metadata={
        "description": "inductor: also start from torch.compile's own Triton kernels for the reference (needs a "
                       "CUDA GPU, or seed_capture), judged like any candidate and kept in the beam when they verify; "
                       "auto: under the tuner (no LLM) wherever a GPU or capture is there, baseline.py or not"})
    seed_mode: Literal["default", "max-autotune-no-cudagraphs", "max-autotune-triton"] | None = field(
        default=None, metadata={"description": "torch.compile mode of the Inductor seed; max-autotune-triton keeps "
                                                 "matmuls in Triton templates instead of cuBLAS; None: "
                                                 "torch_compile_mode's (start from the kernels the run is timed against)"})
    seed_capture: str | None = field(default=None, metadata={
        "description": "An Inductor capture made earlier on a GPU (accelopt seed --capture-out), used instead of "
                       "compiling here"})

    def __post_init__(self) -> None:
        # a schedule given by name (JSON, a form, run.json) becomes the type that owns its behaviour;
        # an unknown name stays as given, for settings_refusal to refuse in one line
        if not isinstance(self.schedule, Schedule) and self.schedule in Schedule._value2member_map_:
            self.schedule = Schedule(self.schedule)

    def with_sources(self, sources: dict[str, str]) -> RunContext:
        """This context, resolved: where each setting came from (graph/config.py), for run.json."""
        self.__dict__["_sources"] = dict(sources)
        return self

    def sources(self) -> dict[str, str]:
        """Where each setting came from; empty for a context no door has resolved yet."""
        return dict(self.__dict__.get("_sources") or {})

    def given_fields(self) -> frozenset[str]:
        """The fields this context was built with by name (what its caller set; the rest are defaults
        that accelopt.toml and the environment may fill: graph/config.resolve_context)."""
        return self.__dict__.get("_given", frozenset(f.name for f in fields(self)))

    def to_json(self) -> dict:
        """The context as plain data (run.json), whichever door built it: every field but the
        code-only chat models, K as the run uses it (kernels_per_plan: 1 under the tuner)."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "chat_models"}
        return {**data, "samples": self.kernels_per_plan()}

    def seed_capture_mode(self) -> str:
        """The seed's torch.compile mode: as given, else the comparator's."""
        return self.seed_mode or self.torch_compile_mode

    def kernels_per_plan(self) -> int:
        """K, except under the tuner: it writes one kernel per plan, the same every time, so a
        second sample would evaluate a copy (whatever entry point built the context: CLI, Studio)."""
        return 1 if self.model_spec("executor").provider == "tuner" else self.samples

    def model_spec(self, role: str) -> ModelSpec:
        """The role's model: its [models.ROLE] settings over [models.default], field by field; for
        a chat model given in code, its own name and endpoint with the role's retry settings."""
        spec = inherit(self.model, self.base_url, self.role_models.get("default") or {},
                       self.role_models.get(role) or {} if role != "default" else {})
        given = (self.chat_models or {}).get(role) or (self.chat_models or {}).get("default")
        if given is not None:
            spec = given_spec(given, spec)
        price = configured_price(self.prices, spec)
        if price and spec.input_price is None and spec.output_price is None:
            spec = spec.model_copy(update={"input_price": price[0], "output_price": price[1]})
        return spec


_generated_init = RunContext.__init__


@functools.wraps(_generated_init)
def _init_noting_given(self: RunContext, **given: Any) -> None:
    """The dataclass's own __init__, noting which fields the caller named (RunContext.given_fields).
    The schedule's default yields to a plan review asked for: pipeline leaves no pause between plans
    and kernels, so a review without a schedule named runs beam, wherever the context is built."""
    _generated_init(self, **given)
    self.__dict__["_given"] = frozenset(given)
    if "schedule" not in given and self.review_plans is True and not self.schedule.allows_review:
        self.schedule = Schedule.BEAM


RunContext.__init__ = _init_noting_given  # type: ignore[method-assign]


def inherit(model: str, base_url: str | None, default: dict, own: dict) -> ModelSpec:
    """A role's spec: the default's settings, overridden field by field by the role's own."""
    default = {k: v for k, v in default.items() if v is not None and k != "model"}
    own = {k: v for k, v in own.items() if v is not None}
    if base_url is not None:
        default.setdefault("base_url", base_url)
    text = own.pop("model", None) or model
    if split_model(text)[0] != split_model(model)[0]:
        default = {k: v for k, v in default.items() if k not in _PROVIDER_BOUND}
    if text != model:
        default = {k: v for k, v in default.items() if k not in _MODEL_BOUND}
    return ModelSpec.parse(text, **{**default, **own})


def configured_price(prices: dict[str, list[float]], spec: ModelSpec) -> list[float] | None:
    """The [prices] entry for a model: its full label (vllm:org/model) or name, else the longest
    name prefix (gpt-4.1 prices gpt-4.1-2025-04-14)."""
    for key in (spec.label(), spec.model):
        if key in prices:
            return prices[key]
    matches = [k for k in prices if spec.model.startswith(k)]
    return prices[max(matches, key=len)] if matches else None


# The budgets: a run without one has none (None), so 0 is refused rather than read as "no budget".
_BUDGETS = {"max_tokens", "max_cost_usd", "max_wall_s"}


@cache
def _field_types() -> dict[str, Any]:
    return get_type_hints(RunContext)


@cache
def _adapter(name: str) -> TypeAdapter:
    return TypeAdapter(_field_types()[name])


def _field(name: str) -> Any:
    return next(f for f in fields(RunContext) if f.name == name)


def _shown(value: Any) -> str:
    """A value as a command line would spell it: -5 for -5.0, 1.5, 'two' quoted."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def setting_refusal(name: str, value: Any, shown_as: str | None = None) -> str | None:
    """Why one setting's value cannot run (below the field's minimum; nan is never above one), in
    one line, or None. The setting is named as its caller named it: `shown_as` (a CLI option's own
    spelling), else its context key (graph.invoke, langgraph dev, MCP, accelopt.toml, run.json)."""
    meta = _field(name).metadata
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return None  # no budget, or not a number: the type check's to refuse
    label = f"{shown_as or name} {_shown(value)}"
    if meta.get("ge") is not None and not value >= meta["ge"]:
        return f"{label}: must be at least {meta['ge']}"
    if meta.get("gt") is not None and not value > meta["gt"]:
        if name in _BUDGETS:
            return f"{label}: a budget must be greater than {meta['gt']} (leave it out for no budget)"
        return f"{label}: must be greater than {meta['gt']}"
    if meta.get("le") is not None and not value <= meta["le"]:
        return f"{label}: must be at most {meta['le']}"
    return None


def _type_refusal(name: str, value: Any) -> str | None:
    """A value of the wrong type for its field (JSON from a form or the SDK: '2' for 2, 'tpu'), or
    None. Strict: a string is not read as a number, a float not as an int."""
    try:  # an enum (the schedule) by its name, as JSON gives it
        _adapter(name).validate_python(value, strict=not isinstance(_field_types()[name], EnumType))
    except ValidationError as e:
        error = e.errors()[0]
        where = f" at {'.'.join(str(p) for p in error['loc'])}" if error["loc"] else ""
        message = error["msg"][:1].lower() + error["msg"][1:]
        return f"{name} {_shown(value)}{where}: {message}"
    return None


def model_refusal(ctx: RunContext) -> str | None:
    """Every role's model settings as a run needs them (a known provider, a model name, a key where
    the endpoint needs one), or None; a chat model given in code is the caller's."""
    for role in ROLES:
        try:
            spec = ctx.model_spec(role)
            if spec.provider != GIVEN:
                validate_spec(spec)
        except ConfigError as e:
            return f"{role} model: {e}"
        except ValueError as e:  # pydantic: a bad field in [models.*]
            return f"{role} model settings are invalid: {e}".splitlines()[0]
    return None


def fields_refusal(ctx: RunContext, names: Iterable[str]) -> str | None:
    """The first of these settings whose value cannot run (its type, then its range), in one line,
    or None: what a graph that reads only some of the settings checks (the confirmation's)."""
    for name in names:
        value = getattr(ctx, name)
        refusal = _type_refusal(name, value) or setting_refusal(name, value)
        if refusal:
            return refusal
    return None


def settings_refusal(ctx: RunContext) -> str | None:
    """What is wrong with the settings themselves, wherever the run starts: a field's type or
    minimum, then the models' settings; None when they can run. Nothing here looks at the machine."""
    # chat_models: code-only, ready chat models whatever their class
    refusal = fields_refusal(ctx, [f.name for f in fields(ctx) if f.name != "chat_models"])
    if refusal:
        return refusal
    if ctx.quorum is not None and not ctx.schedule.allows_quorum:
        return (f"quorum: schedule '{ctx.schedule}' waits for every branch of an iteration, as AccelOpt publishes; "
                f"an iteration that moves on at a quorum of replies needs schedule "
                f"{' or '.join(repr(s) for s in schedules_with('allows_quorum'))}")
    if ctx.review_plans and not ctx.schedule.allows_review:
        return (f"schedule '{ctx.schedule}' makes each iteration's plans while the last one's kernels run, so no "
                "pause between plans and kernels is left to review them in: review plans under schedule "
                f"{' or '.join(repr(s) for s in schedules_with('allows_review'))}")
    return model_refusal(ctx)


def device_refusal(device: str | None, flag: bool = True) -> str | None:
    """Why a device cannot be used on this machine, or None: `cuda` where torch sees no GPU would
    only fail later, in a worker, blaming the baseline kernel. Said in the CLI's words (`--device`),
    or, `flag` False, in an API caller's (the `device` key)."""
    if device != "cuda":
        return None
    from accelopt.tools.harness.runner import gpu_count  # the harness: only to answer this

    if gpu_count() > 0:
        return None
    named, choices = ("--device cuda", "--device auto or --device cpu") if flag else ("device 'cuda'", "device 'auto' or 'cpu'")
    return (f"{named}: no CUDA GPU is visible here (no NVIDIA GPU in the driver's list and CUDA_VISIBLE_DEVICES, "
            f"or a torch without CUDA); use {choices} (Triton interpreter: correctness only, times are not GPU "
            "performance)")


def context_refusal(ctx: Any) -> str | None:
    """Everything a run's context is checked for before any work, in one line, or None: the
    settings, and the device on this machine (on a Ray cluster, the cluster's GPUs are the CLI's
    to check: cli/options.cluster_refusal)."""
    if not isinstance(ctx, RunContext):
        return (f"the run's context is {type(ctx).__name__}, not a RunContext: pass context=RunContext(...) or a "
                "dict of its fields")
    return settings_refusal(ctx) or (None if ctx.ray_address else device_refusal(ctx.device, flag=False))


def run_setting_names() -> list[str]:
    """The run settings' names, as every door but the CLI spells them: RunContext's fields (the
    chat models given in code are no setting)."""
    return sorted(f.name for f in fields(RunContext) if f.name != "chat_models")


def unknown_keys_refusal(keys: Iterable[str]) -> str | None:
    """A context key RunContext has no field for (`beems`) would be dropped and the run go on
    without it: one line naming it, the closest field, and every known key; or None."""
    known = run_setting_names()
    unknown = sorted(k for k in keys if k not in known and k != "chat_models")
    if not unknown:
        return None
    close = difflib.get_close_matches(unknown[0], known, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    names = ", ".join(f"'{k}'" for k in unknown)
    return (f"unknown run context key{'s' if len(unknown) > 1 else ''} {names}{hint}: the known keys are "
            f"{', '.join(known)}")


def refuse(refusal: str | None) -> None:
    """Raise a refusal as the error every entry point reports in one line (ConfigError)."""
    if refusal:
        raise ConfigError(refusal)
