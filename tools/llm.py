"""Chat models per role, built lazily; calls with retries, budgets and a token/cost ledger.

Every OpenAI-compatible endpoint (OpenAI, vLLM, SGLang, Ollama) goes through langchain-openai's
ChatOpenAI with the Chat Completions API. The `tuner` provider names the local no-LLM policy
(policies/tuner.py), which is not a chat model; `given` labels a chat model given in code.

A failed call is one of three kinds. Transient (429, 5xx, timeouts, a malformed 200 body) is
retried, honouring Retry-After up to a cap, within the spec's attempts and total wait. Fatal
(401, 403, 404, a 400 about the context or the parameters, connection refused after the
retries) is a `FatalLLMError` with one line naming the role, endpoint, model and the fix: no
later call can succeed, so the run stops (the run's ledger, tools/budget.py, fails every later
call at once). Anything else is an `LLMCallError`: this one call failed.
"""

from __future__ import annotations

import email.utils
import logging
import random
import re
import threading
import time
from http import HTTPStatus
from typing import Any

import httpx
import openai
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage

from accelopt.tools import timeline
from accelopt.tools.budget import estimate_tokens, ledger
from accelopt.tools.llm_spec import (  # noqa: F401 - re-exported: the light half of this module
    GIVEN,
    LIMIT_FIELDS,
    OPENAI_URL,
    PROVIDERS,
    ROLES,
    BudgetExceeded,
    ConfigError,
    FatalLLMError,
    LLMCallError,
    ModelSpec,
    _api_key,
    _key_names,
    _key_source,
    completion_limit_field,
    endpoint,
    given_spec,
    is_local,
    split_model,
    totals,
    validate_spec,
)
from accelopt.tools.runcache import RunCache, digest

log = logging.getLogger("accelopt")


# ---------------------------------------------------------------- building clients

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
        raise ConfigError("the tuner is a policy, not a chat model (policies/choice.policy_for)")
    from langchain_openai import ChatOpenAI

    kwargs: dict[str, Any] = {
        "model": spec.model, "api_key": _api_key(spec), "base_url": endpoint(spec),
        "use_responses_api": False, "timeout": spec.timeout_s,
        # Retries happen in call_model, once, honouring Retry-After; not again inside the client.
        "max_retries": 0, "stream_usage": True,
    }
    if spec.temperature is not None:
        kwargs["temperature"] = spec.temperature
    if spec.max_tokens is not None:
        if completion_limit_field(spec) == "max_completion_tokens":
            kwargs["max_completion_tokens"] = spec.max_tokens
        else:  # ChatOpenAI renames its own max_tokens field; a body field goes out as written
            kwargs["extra_body"] = {"max_tokens": spec.max_tokens}
    if spec.reasoning_effort:
        kwargs["reasoning_effort"] = spec.reasoning_effort
    return ChatOpenAI(**kwargs)


# ---------------------------------------------------------------- faults

_MALFORMED = (ValueError, TypeError, LookupError, openai.APIResponseValidationError)  # a 200 body we cannot read
_TIMEOUTS = (openai.APITimeoutError, httpx.TimeoutException)
_CONNECT = (openai.APIConnectionError, httpx.TransportError)  # after the timeouts: a timeout is one too
_TRANSIENT_STATUS = {408, 409, 425, 429}
# A 400 about what this request asked for (a response schema, tools) is this call's problem: the
# policy asks again in text. Any other 400 is about the model, the context or the settings.
_REQUEST_SPECIFIC = re.compile(r"response_format|json_schema|structured|guided|tool", re.IGNORECASE)
_CONTEXT = re.compile(r"context|too long|too many tokens|maximum.{0,40}tokens|max_(completion_)?tokens",
                      re.IGNORECASE)
_CONNECT_FIX = "is the server running there, and is the base URL right?"
# A parameter the model refuses: OpenAI's "Unsupported parameter: 'max_tokens' ..." and
# "Unsupported value: 'temperature' does not support 0.2 ...", Azure's "Unrecognized request
# argument supplied: reasoning_effort".
_UNSUPPORTED = re.compile(r"unsupported (?:parameter|value)s?:?\s*['\"`]?(\w+)|['\"`](\w+)['\"`] is not supported"
                          r"|unrecognized request arguments? supplied:?\s*['\"`]?(\w+)", re.IGNORECASE)
_SETTINGS_SENT = ("temperature", "reasoning_effort")  # body fields that come from a ModelSpec setting


def _server_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    text = body.get("message") if isinstance(body, dict) else body
    return " ".join(str(text or "").split())[:200]


def fatal_fix(status: int, message: str, spec: ModelSpec, code: str | None = None,
              schema: bool = False) -> str | None:
    """The fix for a status no retry can change, or None when retrying (or, for a request with a
    response schema, asking in text) may help."""
    source = _key_source(spec)
    key = f"${source}" if source else f"${' or $'.join(_key_names(spec))} (none is set)"
    if spec.provider == GIVEN:
        key = "the chat model given in code"
    if status == 401:
        return f"check the API key in {key}"
    if status == 403:
        return f"the API key in {key} may not use this model: check its project, organization and permissions"
    if status == 404:
        tail = "" if endpoint(spec).endswith("/v1") else " (an OpenAI-compatible base URL usually ends in /v1)"
        return f"check the model name '{spec.model}' and the base URL{tail}"
    if status == 429 and code == "insufficient_quota":
        return f"the account's quota is used up: check the plan and billing of the key in {key}"
    if status in _TRANSIENT_STATUS or status >= 500:
        return None
    unsupported = _unsupported_fix(message) if status in (400, 422) else None
    if unsupported:  # before the schema's benefit of the doubt: a request in text would send it again
        return unsupported
    if status in (400, 413, 422) and (schema or _REQUEST_SPECIFIC.search(message)):
        return None
    if _CONTEXT.search(message) or status == 413:
        return ("the prompt and max_tokens do not fit the model's context: lower max_tokens or use a "
                "longer-context model")
    if status in (400, 422):
        return ("the server refused the request's settings: check max_tokens, temperature and reasoning_effort "
                "for this model")
    return "the server refuses these requests: check the model and endpoint settings"


def _unsupported_fix(message: str) -> str | None:
    """The fix for a parameter the model refuses, when a setting sent it. Its message names
    max_tokens too, so without this it would read as a context overflow ("lower max_tokens")."""
    match = _UNSUPPORTED.search(message)
    param = next((g for g in match.groups() if g), None) if match else None
    if param in LIMIT_FIELDS:
        other = next(f for f in LIMIT_FIELDS if f != param)
        return (f"this model reads {other}, not {param}: set max_tokens_field = \"{other}\" in its [models.*] "
                "settings")
    if param in _SETTINGS_SENT:
        return f"this model does not take {param}: remove the {param} setting from its [models.*] settings"
    return None


def fatal_line(spec: ModelSpec, role: str, what: str, fix: str) -> str:
    return f"{role} model {spec.label()} at {endpoint(spec)}: {what} — {fix}"


def _status_text(status: int, message: str) -> str:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "error"
    return f"{status} {phrase}" + (f" ({message})" if message else "")


def _classify(exc: BaseException, spec: ModelSpec, role: str, schema: bool) -> tuple[str, str]:
    """(kind, text): kind 'fatal' (text: the fatal line), 'retry', 'connect' (retry, fatal when
    the retries run out) or 'fail' (this call only); text says what happened."""
    if isinstance(exc, openai.APIStatusError):
        message = _server_message(exc)
        fix = fatal_fix(exc.status_code, message, spec, exc.code, schema)
        what = _status_text(exc.status_code, message)
        if fix is not None:
            return "fatal", fatal_line(spec, role, what, fix)
        return ("retry" if exc.status_code in _TRANSIENT_STATUS or exc.status_code >= 500 else "fail"), what
    if isinstance(exc, _TIMEOUTS):
        return "retry", f"no reply within {spec.timeout_s:.0f} s ({type(exc).__name__})"
    if isinstance(exc, _CONNECT):
        return "connect", f"cannot connect ({type(exc).__name__}: {' '.join(str(exc).split())[:120]})"
    if isinstance(exc, _MALFORMED):
        return "retry", f"malformed reply ({type(exc).__name__}: {' '.join(str(exc).split())[:120]})"
    return "fail", f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"


def retry_after_s(exc: BaseException) -> float | None:
    """The server's Retry-After (retry-after-ms, seconds, or an HTTP date), if it sent one."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if not headers:
        return None
    try:
        if headers.get("retry-after-ms"):
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        value = headers.get("retry-after")
        if not value:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


def _wait_s(exc: BaseException, attempt: int, initial_s: float, cap_s: float) -> float:
    told = retry_after_s(exc)
    if told is not None:
        return min(told, cap_s)
    return min(initial_s * 2 ** (attempt - 1) + random.uniform(0, initial_s), cap_s)


# ---------------------------------------------------------------- calls

def call_model(model: BaseChatModel, spec: ModelSpec, messages: list[BaseMessage], *, role: str,
               candidate_id: str | None = None, iteration: int | None = None,
               retry_wait_s: float = 1.0, run_dir: str | None = None) -> tuple[str, dict]:
    """Invoke with retries on transient errors; return (text, usage record). With a run
    directory, a reply already received for this exact call (before a crash) is replayed with
    its original usage record: same kernel again, tokens counted once. Before a real call, the
    run's budget must hold its projected spend (else BudgetExceeded), and a fatal error earlier
    in the run fails it at once."""
    cache = RunCache(run_dir)
    key = digest({"model": spec.label(), "base_url": spec.base_url, "role": role, "candidate": candidate_id,
                  "iteration": iteration, "messages": [(m.type, str(m.content)) for m in messages]})
    replayed = cache.get("llm", key)
    if replayed is not None:
        return replayed["text"], replayed["usage"]
    run = ledger(run_dir)
    if run.fatal:
        raise FatalLLMError(run.fatal)
    reservation, refusal = run.admit(role, estimate_tokens(_prompt_text(messages)), spec.prices(),
                                     spec.max_tokens)
    if refusal is not None:
        raise BudgetExceeded(f"{role} model {spec.label()} not called: {refusal}")
    assert reservation is not None, "admit reserves whenever it does not refuse"
    record: dict | None = None
    try:
        with timeline.span(run_dir, "llm", role=role, candidate=candidate_id, iteration=iteration) as ended:
            text, record = _invoke(model, spec, messages, role, candidate_id, iteration, retry_wait_s,
                                   _reply_limit(spec, reservation.output_cap))
            ended["output_tokens"] = record.get("output_tokens")
    except FatalLLMError as exc:
        run.fail(str(exc))
        raise
    except LLMCallError as exc:
        run.call_failed(role, f"{role} model {spec.label()} at {endpoint(spec)}", str(exc))
        raise
    finally:
        run.settle(reservation, record)
    run.call_answered(role)
    cache.put("llm", key, {"text": text, "usage": record})
    return text, record


def _reply_limit(spec: ModelSpec, cap: int | None) -> dict[str, Any]:
    """The request's own reply limit where the budget sets one, in the field the server reads
    (a body field for max_tokens: ChatOpenAI would rename its own). A chat model given in code
    keeps its settings."""
    if cap is None or spec.provider == GIVEN:
        return {}
    if completion_limit_field(spec) == "max_completion_tokens":
        return {"max_completion_tokens": cap}
    return {"extra_body": {"max_tokens": cap}}


def _prompt_text(messages: list[BaseMessage]) -> str:
    return "\n".join(str(m.content) for m in messages)


def _invoke(model: BaseChatModel, spec: ModelSpec, messages: list[BaseMessage], role: str,
            candidate_id: str | None, iteration: int | None, retry_wait_s: float,
            limit: dict[str, Any] | None = None) -> tuple[str, dict]:
    config: Any = {"run_name": f"{role}-llm",
                   "metadata": {"role": role, "candidate_id": candidate_id, "iteration": iteration}}
    waited, what = 0.0, ""
    kinds: set[str] = set()
    # a 400 to a request with a response schema may be the schema's: the policy asks again in text
    schema = getattr(model, "response_format", None) is not None
    for attempt in range(1, max(1, spec.max_attempts) + 1):
        try:
            reply = model.invoke(messages, config=config, **(limit or {}))
        except Exception as exc:  # noqa: BLE001 - classified: fatal, retried, or this call's failure
            kind, what = _classify(exc, spec, role, schema)
            if kind == "fatal":
                raise FatalLLMError(what) from exc
            if kind == "fail":
                raise LLMCallError(f"{role} model {spec.label()} at {endpoint(spec)} failed: {what}"[:800]) from exc
            kinds.add(kind)
            if isinstance(exc, _TIMEOUTS) and not _answers(spec):  # hung, not busy: no attempt would end
                raise FatalLLMError(fatal_line(spec, role, f"{what}, and {endpoint(spec)}/models did not answer "
                                                           f"within {LIVENESS_TIMEOUT_S:g} s either",
                                               "the server hangs: restart it, or check the base URL")) from exc
            wait = _wait_s(exc, attempt, retry_wait_s, spec.retry_max_wait_s)
            if attempt == spec.max_attempts or waited + wait > spec.retry_total_wait_s:
                break
            log.warning("%s model %s: %s; retrying in %.1f s (attempt %d of %d)", role, spec.label(), what, wait,
                        attempt + 1, spec.max_attempts)
            time.sleep(wait)
            waited += wait
            continue
        return _text(reply), usage_record(reply, spec, role, candidate_id, iteration, messages)
    if kinds == {"connect"}:  # never reached the server: nothing later will either
        raise FatalLLMError(fatal_line(spec, role, what, _CONNECT_FIX))
    raise LLMCallError(f"{role} model {spec.label()} at {endpoint(spec)} failed after {attempt} attempts "
                       f"({waited:.0f} s of waiting): {what}"[:800])


LIVENESS_TIMEOUT_S = 10.0


def _answers(spec: ModelSpec) -> bool:
    """After a call timed out: does the server answer at all? A server busy generating still
    answers GET /models at once (vLLM, SGLang, Ollama and hosted APIs serve it apart from the
    generation); a hung one does not, and another attempt would wait its whole timeout again."""
    try:
        httpx.get(f"{endpoint(spec)}/models", headers={"Authorization": f"Bearer {_api_key(spec)}"},
                  timeout=LIVENESS_TIMEOUT_S)
    except httpx.HTTPError:
        return False
    return True


def _text(reply: AIMessage) -> str:
    content = reply.content
    if isinstance(content, list):  # content blocks
        content = "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    return content or ""


_no_usage_logged: set[str] = set()


def usage_record(reply: AIMessage, spec: ModelSpec, role: str, candidate_id: str | None,
                 iteration: int | None, messages: list[BaseMessage] | None = None) -> dict:
    """The ledger record of one reply: the server's token counts, or an estimate (marked) when
    it sent none; cost at the spec's price (unpriced: $0, marked)."""
    usage = getattr(reply, "usage_metadata", None) or {}
    estimated = not usage
    if estimated:
        tokens_in, reasoning = estimate_tokens(_prompt_text(messages or [])), 0
        tokens_out = estimate_tokens(_text(reply))
        if spec.label() not in _no_usage_logged:
            _no_usage_logged.add(spec.label())
            log.warning("%s sends no token usage: its calls are counted from an estimate (marked estimated)",
                        spec.label())
    else:
        tokens_in = int(usage.get("input_tokens", 0))
        tokens_out = int(usage.get("output_tokens", 0))
        reasoning = int((usage.get("output_token_details") or {}).get("reasoning", 0))
    price_in, price_out = spec.prices()
    return {
        "role": role, "model": spec.label(), "candidate_id": candidate_id, "iteration": iteration,
        "input_tokens": tokens_in, "output_tokens": tokens_out, "reasoning_tokens": reasoning,
        "cost_usd": (tokens_in * price_in + tokens_out * price_out) / 1e6,
        "estimated": estimated, "priced": spec.priced(),
    }


# ---------------------------------------------------------------- preflight

def preflight(spec: ModelSpec, role: str = "model", timeout_s: float = 20.0) -> None:
    """Before a run: can this endpoint answer this model? GET {base}/models where served (the
    model must be listed when the server lists models, and max_tokens must fit the context length
    it lists, as vLLM does), else one 1-token call. Raises
    FatalLLMError when no call could succeed; an inconclusive answer passes (the run's own
    retries deal with a busy server)."""
    if spec.provider in ("tuner", GIVEN):
        return
    url = endpoint(spec)
    headers = {"Authorization": f"Bearer {_api_key(spec)}"}
    try:
        resp = httpx.get(f"{url}/models", headers=headers, timeout=timeout_s)
    except httpx.TimeoutException:
        log.warning("%s model %s: %s/models did not answer within %.0f s; not checked", role, spec.label(), url,
                    timeout_s)
        return
    except httpx.TransportError as exc:
        raise FatalLLMError(fatal_line(spec, role, f"cannot connect ({type(exc).__name__})", _CONNECT_FIX)) from None
    if resp.status_code in (401, 403):
        _raise_for_status(spec, role, resp)
    served = _listed_models(resp)
    if served:
        if not _serves(served, spec.model):
            shown = ", ".join(sorted(served)[:8]) + (", ..." if len(served) > 8 else "")
            raise FatalLLMError(fatal_line(spec, role, f"the server does not list '{spec.model}' (it serves: {shown})",
                                           "check the model name"))
        _check_context_length(spec, role, _served_context(resp, spec.model))
        return
    if resp.status_code < 400 and isinstance(_json(resp), dict):
        return  # a model list, empty: nothing to check against, and no call is spent
    _probe(spec, role, url, headers, timeout_s)


def _probe(spec: ModelSpec, role: str, url: str, headers: dict, timeout_s: float) -> None:
    """One 1-token call, for servers that do not list their models."""
    body = {"model": spec.model, "messages": [{"role": "user", "content": "Reply with OK."}],
            completion_limit_field(spec): 1}
    try:
        resp = httpx.post(f"{url}/chat/completions", json=body, headers=headers, timeout=timeout_s)
    except httpx.TimeoutException:
        return
    except httpx.TransportError as exc:
        raise FatalLLMError(fatal_line(spec, role, f"cannot connect ({type(exc).__name__})", _CONNECT_FIX)) from None
    if resp.status_code in (401, 403, 404):  # a 400 may be the 1-token limit itself: inconclusive
        _raise_for_status(spec, role, resp)


def _json(resp: httpx.Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        return None


def _raise_for_status(spec: ModelSpec, role: str, resp: httpx.Response) -> None:
    data = _json(resp)
    error = data.get("error") if isinstance(data, dict) else None
    message = " ".join(str((error.get("message") if isinstance(error, dict) else error) or "").split())[:200]
    code = error.get("code") if isinstance(error, dict) else None
    fix = fatal_fix(resp.status_code, message, spec, code)
    if fix is not None:
        raise FatalLLMError(fatal_line(spec, role, _status_text(resp.status_code, message), fix))


def _listed_models(resp: httpx.Response) -> list[str]:
    data = _json(resp) if resp.status_code == 200 else None
    items = data.get("data") if isinstance(data, dict) else None
    return [str(m["id"]) for m in items if isinstance(m, dict) and m.get("id")] if isinstance(items, list) else []


def _served_context(resp: httpx.Response, model: str) -> int | None:
    """The model's context length as vLLM lists it (max_model_len on GET /models), if listed."""
    items = (_json(resp) or {}).get("data") or []
    for item in items:
        if isinstance(item, dict) and _serves([str(item.get("id"))], model):
            length = item.get("max_model_len")
            return length if isinstance(length, int) and not isinstance(length, bool) and length > 0 else None
    return None


def _check_context_length(spec: ModelSpec, role: str, context: int | None) -> None:
    """max_tokens at or above the served context leaves no room for any prompt: every call would be
    a 400, found only after the setup's work. Said before the run starts."""
    if context is None or spec.max_tokens is None or spec.max_tokens < context:
        return
    raise FatalLLMError(fatal_line(
        spec, role, f"max_tokens = {spec.max_tokens} leaves no room for a prompt in the served context of "
                    f"{context} tokens (max_model_len)",
        f"lower max_tokens well below {context}, or serve the model with a longer --max-model-len"))


def _serves(served: list[str], model: str) -> bool:
    """Listed as is, or as Ollama lists an untagged name (llama3 is llama3:latest)."""
    return model in served or (":" not in model and f"{model}:latest" in served)
