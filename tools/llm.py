"""Chat models per role, built lazily, with retries and a token/cost ledger.

Every OpenAI-compatible endpoint (OpenAI, vLLM, SGLang, Ollama) goes through langchain-openai's
ChatOpenAI with the Chat Completions API. The `tuner` provider names the local no-LLM policy
(tools/tuner.py), which is not a chat model.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import httpx
import openai
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from pydantic import BaseModel

from accelopt.tools.pricing import price_per_mtok
from accelopt.tools.runcache import RunCache, digest

ROLES = ("planner", "executor", "fixer", "summarizer")

# Self-hosted servers: default endpoints, and no real key needed.
_LOCAL_SERVERS = {
    "vllm": "http://localhost:8000/v1",
    "sglang": "http://localhost:30000/v1",
    "ollama": "http://localhost:11434/v1",
}
PROVIDERS = ("openai", *_LOCAL_SERVERS, "tuner")


class ConfigError(ValueError):
    """Configuration that cannot work; the message says what to change."""


class ModelSpec(BaseModel):
    """One role's model. `model` may carry the provider as a prefix: 'vllm:openai/gpt-oss-120b'."""

    model: str
    provider: str = "openai"
    base_url: str | None = None
    api_key_env: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    reasoning_effort: str | None = None  # gpt-oss and other reasoning models: low / medium / high
    timeout_s: float = 600.0
    max_attempts: int = 5
    input_price: float | None = None   # $ per 1M tokens; None: the built-in table, else free
    output_price: float | None = None

    @classmethod
    def parse(cls, text: str, **overrides: Any) -> "ModelSpec":
        provider, sep, name = text.partition(":")
        if text == "tuner":
            provider, name = "tuner", "tuner"
        elif not sep or "/" in provider or provider.startswith("http"):
            provider, name = "openai", text
        return cls(model=name, provider=provider, **{k: v for k, v in overrides.items() if v is not None})

    def label(self) -> str:
        return f"{self.provider}:{self.model}"


def validate_spec(spec: ModelSpec) -> None:
    """Fail before any work starts: unknown provider, missing key, missing model name."""
    if spec.provider not in PROVIDERS:
        raise ConfigError(f"unknown model provider '{spec.provider}': use one of {', '.join(PROVIDERS)}")
    if spec.provider == "tuner":
        return
    if not spec.model:
        raise ConfigError("no model name given: pass --model PROVIDER:NAME, e.g. openai:gpt-4.1-mini")
    _api_key(spec)


def _api_key(spec: ModelSpec) -> str:
    names = [spec.api_key_env] if spec.api_key_env else ["ACCELOPT_API_KEY", "OPENAI_API_KEY"]
    for name in names:
        if os.environ.get(name):
            return os.environ[name]
    if spec.provider in _LOCAL_SERVERS or spec.base_url:
        return "EMPTY"  # self-hosted servers accept any key unless started with one
    raise ConfigError(f"missing API key for {spec.label()}: set {' or '.join(names)}")


_TRANSIENT = (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError,
              openai.APIConnectionError, httpx.TimeoutException, httpx.TransportError)

_cache: dict[str, BaseChatModel] = {}
_cache_lock = threading.Lock()


def build_chat_model(spec: ModelSpec) -> BaseChatModel:
    """A chat model for the spec, cached so that its HTTP client is shared across calls."""
    validate_spec(spec)
    key = spec.model_dump_json()
    with _cache_lock:
        if key not in _cache:
            _cache[key] = _make(spec)
        return _cache[key]


def _make(spec: ModelSpec) -> BaseChatModel:
    if spec.provider == "tuner":
        raise ConfigError("the tuner is a policy, not a chat model (nodes/policies.policy_for)")
    from langchain_openai import ChatOpenAI

    base_url = spec.base_url or _LOCAL_SERVERS.get(spec.provider) or os.environ.get("OPENAI_BASE_URL")
    kwargs: dict[str, Any] = {
        "model": spec.model, "api_key": _api_key(spec), "base_url": base_url,
        "use_responses_api": False, "timeout": spec.timeout_s,
        # Retries happen in with_retry below, once, with backoff; not again inside the client.
        "max_retries": 0, "stream_usage": True,
    }
    if spec.temperature is not None:
        kwargs["temperature"] = spec.temperature
    if spec.max_tokens is not None:
        kwargs["max_completion_tokens"] = spec.max_tokens
    if spec.reasoning_effort:
        kwargs["reasoning_effort"] = spec.reasoning_effort
    return ChatOpenAI(**kwargs)


class LLMCallError(RuntimeError):
    """The model call failed for good (after retries, or a non-transient error)."""


def call_model(model: BaseChatModel, spec: ModelSpec, messages: list[BaseMessage], *, role: str,
               candidate_id: str | None = None, iteration: int | None = None,
               retry_wait_s: float = 1.0, run_dir: str | None = None) -> tuple[str, dict]:
    """Invoke with retries on transient errors (429, 5xx, timeouts); return (text, usage record).
    With a run directory, a reply already received for this exact call (before a crash) is
    replayed with its original usage record: same kernel again, tokens counted once."""
    cache = RunCache(run_dir)
    key = digest({"model": spec.label(), "base_url": spec.base_url, "role": role, "candidate": candidate_id,
                  "iteration": iteration, "messages": [(m.type, str(m.content)) for m in messages]})
    replayed = cache.get("llm", key)
    if replayed is not None:
        return replayed["text"], replayed["usage"]
    text, usage = _invoke(model, spec, messages, role, candidate_id, iteration, retry_wait_s)
    cache.put("llm", key, {"text": text, "usage": usage})
    return text, usage


def _invoke(model: BaseChatModel, spec: ModelSpec, messages: list[BaseMessage], role: str,
            candidate_id: str | None, iteration: int | None, retry_wait_s: float) -> tuple[str, dict]:
    runnable = model.with_retry(
        retry_if_exception_type=_TRANSIENT, stop_after_attempt=spec.max_attempts,
        wait_exponential_jitter=True,
        exponential_jitter_params={"initial": retry_wait_s, "max": 60.0},
    )
    try:
        reply = runnable.invoke(messages, config={"run_name": f"{role}-llm", "metadata": {
            "role": role, "candidate_id": candidate_id, "iteration": iteration}})
    except Exception as exc:  # noqa: BLE001 - the caller turns this into a failed candidate
        raise LLMCallError(f"{role} model {spec.label()} failed: {type(exc).__name__}: {exc}"[:800]) from exc
    return _text(reply), usage_record(reply, spec, role, candidate_id, iteration)


def _text(reply: AIMessage) -> str:
    content = reply.content
    if isinstance(content, list):  # content blocks
        content = "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    return content or ""


def usage_record(reply: AIMessage, spec: ModelSpec, role: str, candidate_id: str | None,
                 iteration: int | None) -> dict:
    usage = getattr(reply, "usage_metadata", None) or {}
    tokens_in = int(usage.get("input_tokens", 0))
    tokens_out = int(usage.get("output_tokens", 0))
    reasoning = int((usage.get("output_token_details") or {}).get("reasoning", 0))
    price_in, price_out = price_per_mtok(spec.model, spec.provider, spec.input_price, spec.output_price)
    return {
        "role": role, "model": spec.label(), "candidate_id": candidate_id, "iteration": iteration,
        "input_tokens": tokens_in, "output_tokens": tokens_out, "reasoning_tokens": reasoning,
        "cost_usd": (tokens_in * price_in + tokens_out * price_out) / 1e6,
    }


def totals(usage: list[dict]) -> dict:
    """Sum a ledger: overall, and per role, per iteration and per candidate."""
    def bucket() -> dict:
        return {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0, "calls": 0}

    out: dict[str, Any] = {**bucket(), "by_role": {}, "by_iteration": {}, "by_candidate": {}}
    for rec in usage:
        targets = [out, out["by_role"].setdefault(rec["role"], bucket()),
                   out["by_iteration"].setdefault(str(rec.get("iteration")), bucket())]
        if rec.get("candidate_id"):
            targets.append(out["by_candidate"].setdefault(rec["candidate_id"], bucket()))
        for target in targets:
            target["input_tokens"] += rec["input_tokens"]
            target["output_tokens"] += rec["output_tokens"]
            target["cost_usd"] += rec["cost_usd"]
            target["calls"] += 1
    return out
