"""The run context: search shape, models per role, budgets, device and memory.

Passed as LangGraph's `context` (Runtime), so Studio shows it as a form. Everything here is
plain data; clients are built from it lazily inside nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from accelopt.tools.llm import ROLES, ModelSpec


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
        "description": "Per-role model settings: {role: ModelSpec fields}, roles: " + ", ".join(ROLES)})
    # Programmatic use only: ready LangChain chat models per role (or 'default'); not serializable.
    chat_models: dict[str, Any] | None = None

    max_tokens: int | None = field(default=None, metadata={"description": "Token budget for the run"})
    max_cost_usd: float | None = field(default=None, metadata={"description": "$ budget for the run"})
    max_wall_s: float | None = field(default=None, metadata={"description": "Wall-clock budget (s)"})
    roofline_stop_pct: float = field(default=95.0, metadata={
        "description": "Stop when the best kernel reaches this % of achievable peak (GPU timings only)"})

    device: str = field(default="auto", metadata={"description": "auto, cuda, or cpu (Triton interpreter)"})
    profile: bool = field(default=True, metadata={
        "description": "Profile verified kernels on a GPU (ncu if present, else torch.profiler) for the planner"})
    eval_timeout_s: float = field(default=300.0, metadata={"description": "Per-candidate evaluation limit (s)"})
    use_memory: bool = True
    memory_dir: str | None = field(default=None, metadata={
        "description": "Insight store directory (default: the user data dir)"})
    memory_url: str | None = field(default=None, metadata={
        "description": "A Chroma server (`chroma run`) shared by several runs, e.g. http://host:8000"})
    embedder: str = field(default="all-MiniLM-L6-v2", metadata={
        "description": "Sentence-transformers model for insights (offline: the bundled default, or a local dir)"})
    memory_capacity: int = 2000
    recall_k: int = 5
    learn_from_interpreter: bool = field(default=False, metadata={
        "description": "Distill insights from CPU-interpreter timings too (pipeline checks only: they are noise)"})
    llm_retry_wait_s: float = 1.0
    prices: dict[str, list[float]] = field(default_factory=dict, metadata={
        "description": "$ per 1M tokens, [input, output], by model label or name prefix; overrides the built-in "
                       "table (self-hosted models are free unless priced here)"})

    def model_spec(self, role: str) -> ModelSpec:
        settings = dict(self.role_models.get(role) or self.role_models.get("default") or {})
        text = settings.pop("model", None) or self.model
        settings.setdefault("base_url", self.base_url)
        spec = ModelSpec.parse(text, **settings)
        price = configured_price(self.prices, spec)
        if price and spec.input_price is None and spec.output_price is None:
            spec = spec.model_copy(update={"input_price": price[0], "output_price": price[1]})
        return spec


def configured_price(prices: dict[str, list[float]], spec: ModelSpec) -> list[float] | None:
    """The [prices] entry for a model: its full label (vllm:org/model) or name, else the longest
    name prefix (gpt-4.1 prices gpt-4.1-2025-04-14)."""
    for key in (spec.label(), spec.model):
        if key in prices:
            return prices[key]
    matches = [k for k in prices if spec.model.startswith(k)]
    return prices[max(matches, key=len)] if matches else None
