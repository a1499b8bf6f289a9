"""Model settings without the clients: roles, providers, the error classes, ModelSpec, endpoints,
API keys, and the usage ledger's totals.

Everything here is light (pydantic and the standard library), so that the run context
(nodes/context.py), the configuration (graph/config.py) and the CLI can read and check model
settings without importing openai, httpx or LangChain. tools/llm.py builds the clients and makes
the calls, and re-exports every name here.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlparse

from pydantic import BaseModel

from accelopt.tools import settings
from accelopt.tools.budget import once_each
from accelopt.tools.pricing import known_price
from accelopt.tools.settings import ConfigError  # defined with the settings: a setting that cannot work is one

log = logging.getLogger("accelopt")

ROLES = ("planner", "executor", "fixer", "summarizer")

# Self-hosted servers: default endpoints, and no real key needed.
_LOCAL_SERVERS = {
    "vllm": "http://localhost:8000/v1",
    "sglang": "http://localhost:30000/v1",
    "ollama": "http://localhost:11434/v1",
}
OPENAI_URL = "https://api.openai.com/v1"
PROVIDERS = ("openai", *_LOCAL_SERVERS, "tuner")
GIVEN = "given"  # the provider of a chat model given in code (RunContext.chat_models)
_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}


class LLMCallError(RuntimeError):
    """The model call failed for good (after retries, or a non-transient error)."""


class FatalLLMError(LLMCallError):
    """No call to this endpoint can succeed until the configuration changes: the run must stop.
    The message is one line: role, model, endpoint, what the server said, and the fix."""


class BudgetExceeded(LLMCallError):
    """The call was not made: its projected spend does not fit the run's token or $ budget."""


class RateLimited(LLMCallError):
    """The endpoint answered only 429 (busy, not broken) until the call's waits were spent: not a
    failed call of a dead endpoint (tools/budget.RunLedger.call_failed is not told)."""


class AskInText(LLMCallError):
    """A request with a response schema failed in a way the schema may have caused (a context
    overflow: a server may count the schema in the prompt): the policy asks again in text, and
    the message already says the fix, should the text request fail the same way."""


class ModelSpec(BaseModel):
    """One role's model. `model` may carry the provider as a prefix: 'vllm:openai/gpt-oss-120b'."""

    model: str
    provider: str = "openai"
    base_url: str | None = None
    api_key_env: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    max_tokens_field: str | None = None  # the body field of max_tokens; None: as the endpoint reads it
    reasoning_effort: str | None = None  # gpt-oss and other reasoning models: low / medium / high
    timeout_s: float = 300.0             # per attempt: reasoning models think for minutes
    max_attempts: int = 4                # per call, the first included
    retry_max_wait_s: float = 120.0      # cap on one wait, Retry-After included
    retry_total_wait_s: float = 300.0    # cap on all waits of one call
    input_price: float | None = None   # $ per 1M tokens; None: the built-in table, else unpriced
    output_price: float | None = None

    @classmethod
    def parse(cls, text: str, **overrides: Any) -> ModelSpec:
        check_model_settings(overrides, "the model settings")
        provider, name = split_model(text)
        return cls(model=name, provider=provider, **{k: v for k, v in overrides.items() if v is not None})

    def label(self) -> str:
        return self.model if self.provider == GIVEN else f"{self.provider}:{self.model}"

    def prices(self) -> tuple[float, float]:
        return known_price(self.model, self.provider, self.input_price, self.output_price) or (0.0, 0.0)

    def priced(self) -> bool:
        return known_price(self.model, self.provider, self.input_price, self.output_price) is not None


# What a [models.*] table may set: the provider is part of `model` ('vllm:NAME').
MODEL_SETTINGS = tuple(name for name in ModelSpec.model_fields if name != "provider")
LIMIT_FIELDS = ("max_tokens", "max_completion_tokens")


def unknown_key(key: str, valid: Any, table: str) -> str:
    """One line naming the key, where it was, and the closest valid key (else the valid ones)."""
    close = difflib.get_close_matches(key, list(valid), n=1)
    hint = f"did you mean '{close[0]}'?" if close else f"valid: {', '.join(sorted(valid))}"
    return f"unknown setting '{key}' in {table}: {hint}"


def check_model_settings(settings: dict, table: str) -> None:
    """Refuse a key ModelSpec has no field for: pydantic would drop it silently, and the run would
    go on without it (max_token, reasoning_efort). A key itself is never a setting: files get copied
    and committed, so the message names the environment variable instead (and not the value)."""
    for key in settings:
        if key == "api_key":
            named = settings.get("api_key_env")
            where = (f"put the key in the environment variable {named} (this table's api_key_env)" if named else
                     "set ACCELOPT_API_KEY or OPENAI_API_KEY, or name your own variable with "
                     "api_key_env = \"MY_KEY_VAR\"")
            raise ConfigError(f"api_key in {table}: keys are never stored in the config file; remove it and {where}")
        if key == "provider":
            raise ConfigError(f"provider in {table}: name it in the model, e.g. model = \"vllm:NAME\"")
        if key not in MODEL_SETTINGS:
            raise ConfigError(unknown_key(key, MODEL_SETTINGS, table))
    _check_values(settings, f" in {table}")


# What a numeric model setting must be: (the test, what it says). A value outside its range was
# sent as it was (max_tokens = -10, max_attempts = 0) or failed each call in a way that named
# something else (timeout_s = -1 read as a malformed reply after every retry).
_RANGES: dict[str, tuple[Any, str]] = {
    "timeout_s": (lambda v: v > 0, "the seconds one attempt may take: above 0"),
    "max_tokens": (lambda v: v >= 1 and float(v).is_integer(), "the longest reply in tokens: a whole number, 1 or more"),
    "max_attempts": (lambda v: v >= 1 and float(v).is_integer(), "attempts per call, the first included: a whole "
                                                                 "number, 1 or more"),
    "retry_max_wait_s": (lambda v: v >= 0, "the longest wait before a retry, in seconds: 0 or more"),
    "retry_total_wait_s": (lambda v: v >= 0, "all waits of one call, in seconds: 0 or more"),
    "temperature": (lambda v: 0 <= v <= 2, "between 0 and 2"),
    "input_price": (lambda v: v >= 0, "$ per 1M tokens: 0 or more"),
    "output_price": (lambda v: v >= 0, "$ per 1M tokens: 0 or more"),
}


def _check_values(values: Mapping[str, Any], where: str = "") -> None:
    """Refuse a numeric model setting outside its range, in one line, before any call."""
    for key, (fits, what) in _RANGES.items():
        value = values.get(key)
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue  # unset; a value of the wrong type is pydantic's to refuse
        if value != value or not fits(value):  # NaN fits nothing
            raise ConfigError(f"{key} = {value:g}{where}: {what}")


# Model names OpenAI's own API serves, taken as openai's without a prefix: gpt-4.1, gpt-4o-mini,
# chatgpt-4o-latest, o1, o3-mini, o4-mini, and fine-tunes of them (ft:gpt-4o-mini:org::id).
# gpt-oss is open weights, served by vLLM, SGLang or Ollama: it needs its provider named.
_OPENAI_FAMILY = re.compile(r"(ft:)?(gpt-(?!oss)|chatgpt-|o[134]($|-))", re.IGNORECASE)


def split_model(text: str) -> tuple[str, str]:
    """(provider, model name) of 'PROVIDER:NAME'. A name without a provider is openai's only when
    it is one of OpenAI's own model families (gpt-*, o1/o3/o4*); any other is a ConfigError that
    says how to name the provider (a bare 'llama3' sent to api.openai.com could only fail)."""
    if text == "tuner":
        return "tuner", "tuner"
    if _OPENAI_FAMILY.match(text):
        return "openai", text
    provider, sep, name = text.partition(":")
    if sep and "/" not in provider and not provider.startswith("http"):
        return provider, name
    if re.match(r"https?://", text):  # an endpoint given as the model: the URL goes in --base-url
        return _url_as_model(text)
    raise ConfigError(f"model '{text}' names no provider: write PROVIDER:NAME, e.g. openai:{text}, vllm:{text} or "
                      f"ollama:{text} (providers: {', '.join(PROVIDERS)}); only OpenAI's own families (gpt-*, o1, "
                      "o3, o4) are taken as openai's without one")


def _url_as_model(url: str) -> tuple[str, str]:
    raise ConfigError(f"model '{url}' is an endpoint's address, not a model: name the model and give the address "
                      f"as the base URL, e.g. --model vllm:MODEL_NAME --base-url {url} (base_url in [models.*]); "
                      "the server's GET /v1/models lists the names it serves")


def given_spec(model: Any, like: ModelSpec) -> ModelSpec:
    """The spec of a chat model given in code: its own name, endpoint and no price (a configured
    one is added by the context); retries and timeouts as the role's settings say."""
    name = getattr(model, "model_name", None) or getattr(model, "model", None)
    return like.model_copy(update={
        "provider": GIVEN, "model": name if isinstance(name, str) and name else type(model).__name__,
        "base_url": getattr(model, "openai_api_base", None), "api_key_env": None,
        "input_price": None, "output_price": None})


def endpoint(spec: ModelSpec) -> str:
    """The base URL calls go to."""
    if spec.provider == GIVEN:
        return spec.base_url or "(a chat model given in code)"
    return (spec.base_url or _LOCAL_SERVERS.get(spec.provider) or settings.openai_base_url()
            or OPENAI_URL).rstrip("/")


def is_local(url: str) -> bool:
    return (urlparse(url).hostname or "") in _LOCAL_HOSTS


def validate_spec(spec: ModelSpec) -> None:
    """Fail before any work starts: unknown provider, missing key, missing model name, a numeric
    setting out of its range (timeout_s, max_tokens, max_attempts, waits, temperature, prices)."""
    if spec.provider not in PROVIDERS:
        raise ConfigError(f"unknown model provider '{spec.provider}': use one of {', '.join(PROVIDERS)}")
    if spec.provider == "tuner":
        return
    if not spec.model:
        raise ConfigError("no model name given: pass --model PROVIDER:NAME, e.g. openai:gpt-4.1-mini")
    if spec.max_tokens_field not in (None, *LIMIT_FIELDS):
        raise ConfigError(f"max_tokens_field = '{spec.max_tokens_field}': use \"max_tokens\" or "
                          "\"max_completion_tokens\" (or leave it out: the field the endpoint reads)")
    _check_values(spec.model_dump())
    if spec.base_url is not None and urlparse(spec.base_url).scheme not in ("http", "https"):
        # a placeholder pasted as is (`URL`), or a host without its scheme: the client would say only
        # "cannot connect (UnsupportedProtocol)"
        raise ConfigError(f"base_url '{spec.base_url}' is not an http(s) URL: give the endpoint's address, e.g. "
                          "http://127.0.0.1:8000/v1")
    _api_key(spec)


def _key_names(spec: ModelSpec) -> list[str]:
    return list(settings.api_key_names(spec.api_key_env))


def _key_source(spec: ModelSpec) -> str | None:
    """The environment variable the key comes from, or None when none is set."""
    found = settings.api_key(spec.api_key_env)
    return found[0] if found else None


_placeholder_logged: set[str] = set()


def _api_key(spec: ModelSpec) -> str:
    found = settings.api_key(spec.api_key_env)
    if found:
        return found[1]
    url = endpoint(spec)
    names = " or ".join(_key_names(spec))
    if spec.provider == "openai" and not is_local(url):  # a hosted API: a placeholder would only earn a 401
        hint = (" (a self-hosted server: use the vllm:, sglang: or ollama: provider, which needs no key)"
                if spec.base_url else "")
        raise ConfigError(f"missing API key for {spec.label()} at {url}: set {names}{hint}")
    if url not in _placeholder_logged:
        _placeholder_logged.add(url)
        log.info("no API key set (%s) for %s: sending a placeholder, which self-hosted servers accept unless "
                 "started with --api-key", names, url)
    return "EMPTY"


def completion_limit_field(spec: ModelSpec) -> str:
    """OpenAI's own API reads max_completion_tokens (and refuses max_tokens for reasoning models);
    Ollama reads only max_tokens, and vLLM, SGLang and proxies read max_tokens everywhere. An
    endpoint that guesses wrong (Azure's reasoning models want max_completion_tokens) is set with
    the spec's max_tokens_field."""
    if spec.max_tokens_field:
        return spec.max_tokens_field
    host = urlparse(endpoint(spec)).hostname or ""
    return "max_completion_tokens" if spec.provider == "openai" and host == "api.openai.com" else "max_tokens"


def totals(usage: Sequence[Mapping[str, Any]]) -> dict:
    """Sum a ledger, each call once: overall, and per role, per iteration and per candidate;
    overall, how many calls were counted from an estimate and how many had no price."""
    def bucket() -> dict:
        return {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0, "calls": 0}

    out: dict[str, Any] = {**bucket(), "estimated_calls": 0, "unpriced_calls": 0,
                           "by_role": {}, "by_iteration": {}, "by_candidate": {}}
    for rec in once_each(usage):  # a replayed reply the ledger holds already is the same call
        targets = [out, out["by_role"].setdefault(rec["role"], bucket()),
                   out["by_iteration"].setdefault(str(rec.get("iteration")), bucket())]
        if rec.get("candidate_id"):
            targets.append(out["by_candidate"].setdefault(rec["candidate_id"], bucket()))
        for target in targets:
            target["input_tokens"] += rec["input_tokens"]
            target["output_tokens"] += rec["output_tokens"]
            target["cost_usd"] += rec["cost_usd"]
            target["calls"] += int(rec.get("requests") or 1)  # a record may hold a schema try and its retry
        out["estimated_calls"] += bool(rec.get("estimated"))
        out["unpriced_calls"] += rec.get("priced") is False
    return out


def client_missing(exc: ImportError) -> ConfigError:
    """The one line for a model run whose chat client cannot be imported (openai, httpx or
    langchain-openai missing or broken): imported only where a model is used, it fails there,
    not when the graph is imported, so a tuner run never needs it."""
    return ConfigError(f"the LLM client cannot be imported ({exc}): install accelopt into this Python environment "
                       "(pip install -e . in its folder), or run without a model (--model tuner)")
