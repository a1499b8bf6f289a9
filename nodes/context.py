"""The run context: search shape, models per role, budgets, device and memory.

Passed as LangGraph's `context` (Runtime), so Studio shows it as a form. Everything here is
plain data; clients are built from it lazily inside nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

from pydantic.json_schema import SkipJsonSchema

from accelopt.tools.harness.reference_kernel import CompileMode
from accelopt.tools.llm_spec import ROLES, ModelSpec, given_spec, split_model

# Settings that belong to one model or one endpoint: a role that names another model does not
# inherit the default's price, nor, with another provider, its endpoint and key.
_MODEL_BOUND = {"input_price", "output_price"}
_PROVIDER_BOUND = {"base_url", "api_key_env"}

Device = Literal["auto", "cuda", "cpu"]  # NKI runs on the NeuronCores under auto; cpu is refused for it


@dataclass(kw_only=True)
class RunContext:
    beams: int = field(default=2, metadata={"description": "B: beam width (elitist)"})
    plans: int = field(default=2, metadata={"description": "N: plans per beam member"})
    samples: int = field(default=2, metadata={"description": "K: kernels written per plan"})
    fixes: int = field(default=2, metadata={"description": "F: fix attempts per failed kernel"})
    iterations: int = field(default=3, metadata={"description": "T: iterations"})
    autotune: int = field(default=0, metadata={
        "description": "After a kernel verifies, search up to this many launch configurations of it (0: off)"})

    model: str = field(default="tuner", metadata={
        "description": "Default model for every role, PROVIDER:NAME (openai, vllm, sglang, ollama, tuner)"})
    base_url: str | None = field(default=None, metadata={"description": "OpenAI-compatible endpoint URL"})
    role_models: dict[str, dict] = field(default_factory=dict, metadata={
        "description": "Per-role model settings: {role: ModelSpec fields}, roles: default, " + ", ".join(ROLES)
                       + "; a role inherits every field of default it does not set"})
    # Programmatic use only: ready LangChain chat models per role (or 'default'); not serializable,
    # so left out of the JSON schema (Studio's form) and of run.json.
    chat_models: SkipJsonSchema[dict[str, Any] | None] = None

    max_tokens: int | None = field(default=None, metadata={"description": "Token budget for the run"})
    max_cost_usd: float | None = field(default=None, metadata={"description": "$ budget for the run"})
    max_wall_s: float | None = field(default=None, metadata={"description": "Wall-clock budget (s)"})
    roofline_stop_pct: float = field(default=95.0, metadata={
        "description": "Stop when the best kernel reaches this % of achievable peak (GPU timings only)"})

    device: Device = field(default="auto", metadata={
        "description": "auto (a GPU if there is one, else the Triton interpreter; NKI: the NeuronCores), cuda, or cpu "
                       "(Triton interpreter: correctness, no GPU times)"})
    profile: bool = field(default=True, metadata={
        "description": "Profile verified kernels on a GPU (ncu if present, else torch.profiler) for the planner"})
    eval_timeout_s: float = field(default=300.0, metadata={"description": "Per-candidate evaluation limit (s)"})
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
        "description": "Most insights the store keeps (the least supported are evicted first)"})
    recall_k: int = field(default=5, metadata={"description": "Insights recalled per beam member for the planner"})
    learn_from_interpreter: bool = field(default=False, metadata={
        "description": "Distill insights from CPU-interpreter timings too (pipeline checks only: they are noise)"})
    llm_retry_wait_s: float = field(default=1.0, metadata={
        "description": "First wait before retrying a failed model call (s), doubling per attempt, when the server "
                       "sends no Retry-After"})
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

    def to_json(self) -> dict:
        """The context as plain data (run.json): every field but the code-only chat models."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "chat_models"}

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
