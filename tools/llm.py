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
import functools
import logging
import random
import re
import threading
import time
import uuid
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

import httpx
import openai
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, message_chunk_to_message
from langchain_core.messages.ai import UsageMetadata

from accelopt.tools import endpoint_gate, inflight, timeline
from accelopt.tools.budget import KERNEL_ROLES, RunningCount, Spend, estimate_tokens, ledger
from accelopt.tools.llm_spec import (  # noqa: F401 - re-exported: the light half of this module
    GIVEN,
    LIMIT_FIELDS,
    OPENAI_URL,
    PROVIDERS,
    ROLES,
    AskInText,
    BudgetExceeded,
    ConfigError,
    FatalLLMError,
    LLMCallError,
    ModelSpec,
    RateLimited,
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
    return _chat_openai()(**kwargs)


@functools.cache
def _chat_openai() -> type[BaseChatModel]:
    """ChatOpenAI, keeping what a streamed chunk's delta carries as reasoning (vLLM's and SGLang's
    `reasoning_content`, `reasoning`), which it would drop: a reply read up to a budget's cap
    counts its reasoning tokens too (read_reply), and the reply knows how much it reasoned."""
    from langchain_openai import ChatOpenAI

    class StreamedReasoningChatOpenAI(ChatOpenAI):
        def _convert_chunk_to_generation_chunk(self, chunk: dict, default_chunk_class: type,
                                               base_generation_info: dict | None) -> Any:
            out = super()._convert_chunk_to_generation_chunk(chunk, default_chunk_class, base_generation_info)
            choices = chunk.get("choices") or (chunk.get("chunk") or {}).get("choices") or []
            delta = (choices[0].get("delta") or {}) if choices and isinstance(choices[0], dict) else {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if out is not None and isinstance(reasoning, str) and reasoning:
                out.message.additional_kwargs["reasoning_content"] = reasoning
            return out

    return StreamedReasoningChatOpenAI


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
              schema: bool = False, prompt_tokens: int | None = None, reply_limit: int | None = None) -> str | None:
    """The fix for a status no retry can change, or None when retrying (or, for a request with a
    response schema, asking in text) may help. `prompt_tokens` (our estimate of the prompt) and
    `reply_limit` (the reply limit the request carried) say what a context overflow was made of."""
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
    if status in (400, 413, 422) and _REQUEST_SPECIFIC.search(message):
        return None
    # an overflow says its fix even for a request with a schema (tools/llm._classify: asked again in text)
    if _CONTEXT.search(message) or status == 413:
        return context_fix(message, prompt_tokens, reply_limit)
    if status in (400, 422) and schema:
        return None
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


# What servers say about an overflow: the context's length and the prompt's (vLLM old and new,
# OpenAI, SGLang), e.g. "maximum context length is 2048 tokens. However, you requested 2265 tokens
# (2217 in the messages, 48 in the completion)" or "... your request has 2217 input tokens".
_CONTEXT_LENGTH = re.compile(r"maximum context length (?:is |of )?([\d,]+)|maximum allowed length \(([\d,]+)"
                             r"|context (?:length|window) (?:is |of )?([\d,]+)", re.IGNORECASE)
_PROMPT_LENGTH = re.compile(r"([\d,]+) (?:tokens )?in the messages|has ([\d,]+) input tokens"
                            r"|messages resulted in ([\d,]+) tokens|input length \(([\d,]+) tokens"
                            r"|([\d,]+) tokens from the input", re.IGNORECASE)
_LONGER = "serve the model with a longer context (vLLM: --max-model-len) or use a longer-context model"


def _number(pattern: re.Pattern, text: str) -> int | None:
    found = pattern.search(text)
    value = next((g for g in found.groups() if g), None) if found else None
    return int(value.replace(",", "")) if value else None


def context_fix(message: str, prompt_tokens: int | None = None, reply_limit: int | None = None) -> str:
    """What a context overflow was, as far as the server's message and the request say: the
    prompt alone past the context, or the prompt and the reply limit together."""
    context, prompt, about = _number(_CONTEXT_LENGTH, message), _number(_PROMPT_LENGTH, message), ""
    if prompt is None and prompt_tokens:
        prompt, about = prompt_tokens, "about "
    served = f"the model's context of {context:,} tokens" if context else "the model's context"
    if prompt is None:
        return f"the prompt and its reply do not fit {served}: {_LONGER}"
    if context is not None and prompt >= context:
        return f"the prompt alone is {about}{prompt:,} tokens against {served}: {_LONGER}"
    if reply_limit:
        lower = f"lower max_tokens to at most {context - prompt:,}" if context else "lower max_tokens"
        return (f"the prompt ({about}{prompt:,} tokens) and a reply of up to {reply_limit:,} tokens do not fit "
                f"{served}: {lower}, or {_LONGER}")
    return f"the prompt ({about}{prompt:,} tokens) and its reply do not fit {served}: {_LONGER}"


def fatal_line(spec: ModelSpec, role: str, what: str, fix: str) -> str:
    return f"{role} model {spec.label()} at {endpoint(spec)}: {what} — {fix}"


def _status_text(status: int, message: str) -> str:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "error"
    return f"{status} {phrase}" + (f" ({message})" if message else "")


def _overflow(status: int, message: str) -> bool:
    """A context overflow (not a refused parameter, whose message names max_tokens too)."""
    return status == 413 or (status in (400, 422) and bool(_CONTEXT.search(message))
                             and _unsupported_fix(message) is None)


def _prompt_alone_past(message: str) -> bool:
    """The server says the prompt alone is longer than the context: no request of it can fit."""
    context, prompt = _number(_CONTEXT_LENGTH, message), _number(_PROMPT_LENGTH, message)
    return context is not None and prompt is not None and prompt >= context


def _classify(exc: BaseException, spec: ModelSpec, role: str, schema: bool, prompt_tokens: int | None = None,
              reply_limit: int | None = None) -> tuple[str, str]:
    """(kind, text): kind 'fatal' (text: the fatal line), 'retry', 'limited' (a 429: wait, the
    attempt not counted), 'connect' (retry, fatal when the retries run out), 'text' (a context
    overflow of a request with a schema: asked again in text; text: the fatal line) or 'fail'
    (this call only); text says what happened."""
    if isinstance(exc, openai.APIStatusError):
        message = _server_message(exc)
        fix = fatal_fix(exc.status_code, message, spec, exc.code, schema, prompt_tokens, reply_limit)
        what = _status_text(exc.status_code, message)
        if fix is not None and schema and _overflow(exc.status_code, message) and not _prompt_alone_past(message):
            return "text", fatal_line(spec, role, what, fix)  # the schema's tokens may be what overflowed
        if fix is not None:
            return "fatal", fatal_line(spec, role, what, fix)
        if exc.status_code == 429:
            return "limited", what
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


def _limit_wait_s(exc: BaseException, initial_s: float, cap_s: float) -> float:
    """A 429's wait: its Retry-After (up to the cap) as the floor, and jitter above it, so that the
    calls refused together do not all come back at once."""
    told = retry_after_s(exc)
    floor = min(told if told is not None else initial_s, cap_s)
    return floor + random.uniform(0, max(initial_s, floor / 4))


def _wait_s(exc: BaseException, attempt: int, initial_s: float, cap_s: float) -> float:
    told = retry_after_s(exc)
    if told is not None:
        return min(told, cap_s)
    return min(initial_s * 2 ** (attempt - 1) + random.uniform(0, initial_s), cap_s)


# ---------------------------------------------------------------- calls

def call_model(model: BaseChatModel, spec: ModelSpec, messages: list[BaseMessage], *, role: str,
               candidate_id: str | None = None, iteration: int | None = None,
               retry_wait_s: float = 1.0, run_dir: str | None = None, attempt: int = 1) -> tuple[str, dict]:
    """Invoke with retries on transient errors; return (text, usage record). With a run
    directory, a reply already received for this exact call (before a crash) is replayed with
    its original usage record, its `call` id included: same kernel again, tokens counted once
    (tools/budget.once_each). `attempt` > 1: the policy asks the same again (its first reply was
    unusable), a call of its own. Before a real call, the run's budget must hold its projected
    spend (else BudgetExceeded), and a fatal error earlier in the run fails it at once; under a
    budget the reply is read up to what the call reserved for it and no further (read_reply)."""
    asked: dict[str, Any] = {"model": spec.label(), "base_url": spec.base_url, "role": role, "candidate": candidate_id,
                             "iteration": iteration, "messages": [(m.type, str(m.content)) for m in messages]}
    if attempt > 1:  # the first attempt keeps the key it always had: older runs' caches replay
        asked["attempt"] = attempt
    key = digest(asked)
    # under an iteration's quorum (tools/inflight.py) the call may outlive this branch, which then
    # stops waiting (Detached); a later branch asking the same call collects it
    return inflight.start(run_dir, key, lambda: _call_once(model, spec, messages, role, candidate_id, iteration,
                                                           retry_wait_s, run_dir, key), label=candidate_id)


def _call_once(model: BaseChatModel, spec: ModelSpec, messages: list[BaseMessage], role: str,
               candidate_id: str | None, iteration: int | None, retry_wait_s: float, run_dir: str | None,
               key: str) -> tuple[str, dict]:
    """call_model's call of `key`: replayed from the run cache, else admitted, sent and cached."""
    cache = RunCache(run_dir)
    run = ledger(run_dir)
    if role in KERNEL_ROLES:
        run.redeem()
    replayed = cache.get("llm", key)
    if replayed is not None:
        return replayed["text"], replayed["usage"]
    if run.fatal:
        raise FatalLLMError(run.fatal)
    prompt = estimate_tokens(_prompt_text(messages))
    # refused while calls in flight hold the room: waits for them (up to one attempt's time each)
    reservation, refusal = run.admit(role, prompt, spec.prices(), spec.max_tokens, wait_s=spec.timeout_s)
    if refusal is not None:
        raise BudgetExceeded(f"{role} model {spec.label()} not called: {refusal}")
    assert reservation is not None, "admit reserves whenever it does not refuse"
    record: dict | None = None
    try:
        with timeline.span(run_dir, "llm", role=role, candidate=candidate_id, iteration=iteration) as ended:
            text, record = _invoke(model, spec, messages, role, candidate_id, iteration, retry_wait_s,
                                   _reply_limit(spec, reservation.output_cap), _held(spec, reservation))
            record["call"] = uuid.uuid4().hex[:16]
            ended["output_tokens"] = record.get("output_tokens")
    except FatalLLMError as exc:
        run.fail(str(exc))
        raise
    except (RateLimited, AskInText):  # a busy endpoint, or a schema asked again in text: not a dead one
        raise
    except LLMCallError as exc:
        run.call_failed(role, f"{role} model {spec.label()} at {endpoint(spec)}", str(exc))
        raise
    finally:
        run.settle(reservation, record, prompt)
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


def _held(spec: ModelSpec, reservation: Spend) -> tuple[int, int] | None:
    """(reply tokens, prompt tokens) a budget's reservation holds, where the reply is read no
    further than that; None without a budget, and for a chat model given in code (its settings
    and its reading are its own)."""
    if reservation.reply_tokens is None or spec.provider == GIVEN:
        return None
    return reservation.reply_tokens, reservation.input_tokens


def _prompt_text(messages: list[BaseMessage]) -> str:
    return "\n".join(str(m.content) for m in messages)


def _invoke(model: BaseChatModel, spec: ModelSpec, messages: list[BaseMessage], role: str,
            candidate_id: str | None, iteration: int | None, retry_wait_s: float,
            limit: dict[str, Any] | None = None, held: tuple[int, int] | None = None) -> tuple[str, dict]:
    """One call's requests: retried on transient errors (max_attempts in all); a 429 is waited out
    (its Retry-After the floor) without spending an attempt, and the endpoint's gate queues the
    calls beyond what it serves at once (tools/endpoint_gate.py); within retry_total_wait_s."""
    config: Any = {"run_name": f"{role}-llm",
                   "metadata": {"role": role, "candidate_id": candidate_id, "iteration": iteration}}
    limit = limit or {}
    waited, what, attempt = 0.0, "", 1
    kinds: set[str] = set()
    # a 400 to a request with a response schema may be the schema's: the policy asks again in text
    schema = getattr(model, "response_format", None) is not None
    # what a context overflow was made of, for its one line
    prompt = estimate_tokens(_prompt_text(messages))
    sent = limit.get("max_completion_tokens") or (limit.get("extra_body") or {}).get("max_tokens") or spec.max_tokens
    gate = endpoint_gate.gate(endpoint(spec))
    while True:
        try:
            with gate.slot():
                reply = _request(model, messages, config, limit, held)
        except Exception as exc:  # noqa: BLE001 - classified: fatal, retried, or this call's failure
            kind, what = _classify(exc, spec, role, schema, prompt, sent)
            if kind == "fatal":
                raise FatalLLMError(what) from exc
            if kind == "text":
                raise AskInText(what) from exc
            if kind == "fail":
                raise LLMCallError(f"{role} model {spec.label()} at {endpoint(spec)} failed: {what}"[:800]) from exc
            kinds.add(kind)
            if isinstance(exc, _TIMEOUTS) and not _answers(spec):  # hung, not busy: no attempt would end
                raise FatalLLMError(fatal_line(spec, role, f"{what}, and {endpoint(spec)}/models did not answer "
                                                           f"within {LIVENESS_TIMEOUT_S:g} s either",
                                               "the server hangs: restart it, or check the base URL")) from exc
            if kind == "limited":  # busy, not failing: a wait, and the calls beside it queue at the gate
                gate.refused()
                wait = _limit_wait_s(exc, retry_wait_s, spec.retry_max_wait_s)
            else:
                wait = _wait_s(exc, attempt, retry_wait_s, spec.retry_max_wait_s)
                if attempt >= spec.max_attempts:
                    break
                attempt += 1
            if waited + wait > spec.retry_total_wait_s:
                break
            log.warning("%s model %s: %s; retrying in %.1f s (attempt %d of %d)", role, spec.label(), what, wait,
                        attempt, spec.max_attempts)
            time.sleep(wait)
            waited += wait
            continue
        gate.answered()
        return _text(reply), usage_record(reply, spec, role, candidate_id, iteration, messages)
    if kinds == {"connect"}:  # never reached the server: nothing later will either
        raise FatalLLMError(fatal_line(spec, role, what, _CONNECT_FIX))
    failure = RateLimited if kinds == {"limited"} else LLMCallError
    raise failure(f"{role} model {spec.label()} at {endpoint(spec)} failed after {attempt} attempts "
                  f"({waited:.0f} s of waiting): {what}"[:800])


def _request(model: BaseChatModel, messages: list[BaseMessage], config: Any, limit: dict[str, Any],
             held: tuple[int, int] | None) -> Any:
    """One request: read whole, or up to what the budget's reservation holds (`held`)."""
    if held is None:
        return model.invoke(messages, config=config, **limit)
    if getattr(model, "reads_replies", False):  # it reads its own model's reply through read_reply
        return model.invoke(messages, config=config, read_up_to=held[0], prompt_tokens=held[1], **limit)
    return read_reply(model, messages, config, up_to=held[0], prompt_tokens=held[1], **limit)


# a reply read up to its reservation and no further: response_metadata says so, and its usage
# is our own count of what was read (the server's, which comes last, was never read)
READ_UP_TO = "accelopt_read_up_to"


def read_reply(model: BaseChatModel, messages: Any, config: Any = None, *, up_to: int | None = None,
               prompt_tokens: int = 0, **kwargs: Any) -> AIMessage:
    """The model's reply. With `up_to` (what a budget's reservation holds for the reply), the reply
    is streamed and read up to that many output tokens, by our count of what arrives (the answer,
    reasoning, tool-call arguments), and no further: a server that ignores the request's reply
    limit is cut off there, the reply marked as cut off at its token limit (finish_reason
    "length"). Its usage is then our count: `prompt_tokens` in (what the reservation holds for the
    prompt), what was read out, marked estimated. A reply that ends within the cap keeps the
    server's usage, when it sends one. Without `up_to`, a plain invoke."""
    if up_to is None:
        return model.invoke(messages, config=config, **kwargs)
    count = RunningCount()
    reasoning = RunningCount()
    pieces: list[AIMessageChunk] = []
    usage: UsageMetadata | None = None
    finish: str | None = None
    cut = False
    stream = model.stream(messages, config=config, **kwargs)
    try:
        for chunk in stream:
            usage = chunk.usage_metadata or usage  # the last: a schema stream repeats it in its final chunk
            thought = str(chunk.additional_kwargs.get("reasoning_content") or "")
            text = _chunk_text(chunk)
            if count.plus(text + thought) > up_to:
                fits = _fitting(count, text, up_to) if not thought and isinstance(chunk.content, str) else ""
                if fits:
                    pieces.append(AIMessageChunk(content=fits, id=chunk.id))
                    count.add(fits)
                cut = True
                break
            count.add(text + thought)
            reasoning.add(thought)
            pieces.append(chunk.model_copy(update={"usage_metadata": None}))
    except openai.LengthFinishReasonError as exc:  # a schema stream's final parse: cut off by the server's limit
        finish = "length"
        usage = _completion_usage(exc.completion) or usage
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()  # stops reading: the connection is closed, and the server stops generating
    merged = pieces[0] if len(pieces) == 1 else pieces[0] + pieces[1:] if pieces else AIMessageChunk(content="")
    message = message_chunk_to_message(merged)
    assert isinstance(message, AIMessage)
    metadata = dict(message.response_metadata or {})
    if cut or finish:
        metadata["finish_reason"] = "length"
    if cut or usage is None:
        metadata[READ_UP_TO] = up_to
        usage = UsageMetadata(input_tokens=prompt_tokens, output_tokens=count.tokens,
                              total_tokens=prompt_tokens + count.tokens,
                              output_token_details={"reasoning": reasoning.tokens})
    return message.model_copy(update={"usage_metadata": usage, "response_metadata": metadata})


def _chunk_text(chunk: AIMessageChunk) -> str:
    """What a chunk adds to the reply besides reasoning in a field of its own: text, text blocks,
    reasoning blocks, tool-call arguments."""
    content = chunk.content
    text = content if isinstance(content, str) else "".join(
        b if isinstance(b, str) else str(b.get("text") or b.get("reasoning") or b.get("thinking") or "")
        for b in content)
    # a model that does not stream yields its whole message, with tool_calls rather than chunks of them
    calls = "".join(str(c.get("args") or "") for c in
                    getattr(chunk, "tool_call_chunks", None) or getattr(chunk, "tool_calls", None) or [])
    return text + calls


def _fitting(count: RunningCount, text: str, up_to: int) -> str:
    """The longest start of `text` the count has room for (a reply that came in one piece)."""
    fits = text[:max(0, (up_to - count.tokens) * 4)]
    while fits and count.plus(fits) > up_to:
        fits = fits[:len(fits) * 3 // 4]
    return fits


def _completion_usage(completion: Any) -> UsageMetadata | None:
    usage = getattr(completion, "usage", None)
    if usage is None:
        return None
    tokens_in, tokens_out = int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0)
    details = getattr(usage, "completion_tokens_details", None)
    return UsageMetadata(input_tokens=tokens_in, output_tokens=tokens_out, total_tokens=tokens_in + tokens_out,
                         output_token_details={"reasoning": int(getattr(details, "reasoning_tokens", 0) or 0)})


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
    # no counts from the server, or a reply read up to its reservation: our own count (read_reply)
    estimated = not usage or READ_UP_TO in (reply.response_metadata or {})
    if not usage:
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

def preflight(spec: ModelSpec, role: str = "model", timeout_s: float = 20.0,
              prompt_tokens: Mapping[str, int] | None = None) -> None:
    """Before a run: can this endpoint answer this model? GET {base}/models where served (the
    model must be listed when the server lists models, and where it lists the context length, as
    vLLM does, max_tokens and the roles' prompts must fit it: `prompt_tokens`, the least prompt
    of each role this endpoint serves, from its templates, policies/llm.least_prompt_tokens),
    else one 1-token call. Raises FatalLLMError when no call could succeed, and warns when the
    prompts leave little room for the task's code and the reply; an inconclusive answer passes
    (the run's own retries deal with a busy server)."""
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
        _check_context_length(spec, role, _served_context(resp, spec.model), prompt_tokens)
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


# What a run's prompts need beyond their templates, at the least: the task's code (its reference
# and kernel) and a reply with a kernel in it. A served context with less room than this is warned of.
PROMPT_ROOM = 4096


def _check_context_length(spec: ModelSpec, role: str, context: int | None,
                          prompt_tokens: Mapping[str, int] | None = None) -> None:
    """max_tokens at or above the served context leaves no room for any prompt, and a prompt whose
    templates alone (or with max_tokens) pass it cannot be sent: every call would be a 400, found
    only after the setup's work. Said before the run starts; little room left is warned of."""
    if context is None:
        return
    if spec.max_tokens is not None and spec.max_tokens >= context:
        raise FatalLLMError(fatal_line(
            spec, role, f"max_tokens = {spec.max_tokens} leaves no room for a prompt in the served context of "
                        f"{context} tokens (max_model_len)",
            f"lower max_tokens well below {context}, or serve the model with a longer --max-model-len"))
    if not prompt_tokens:
        return
    largest, least = max(prompt_tokens.items(), key=lambda item: item[1])
    longer = "serve the model with a longer --max-model-len, or use a longer-context model"
    prompt = f"the {largest} prompt is about {least:,} tokens before the task's code (its templates alone)"
    if least >= context:
        raise FatalLLMError(fatal_line(spec, role, f"{prompt}, against the served context of {context:,} tokens "
                                                   "(max_model_len)", longer))
    if spec.max_tokens is not None and least + spec.max_tokens > context:
        raise FatalLLMError(fatal_line(spec, role, f"{prompt}; with max_tokens = {spec.max_tokens} it does not fit "
                                                   f"the served context of {context:,} tokens (max_model_len)",
                                       f"lower max_tokens to at most {context - least:,}, or {longer}"))
    left = context - least - (spec.max_tokens or 0)
    if left < PROMPT_ROOM:
        log.warning("%s", fatal_line(spec, role, f"{prompt}, of a served context of {context:,} tokens: "
                                                 f"{left:,} are left for the task's code"
                                                 f"{'' if spec.max_tokens else ' and the reply'}",
                                     f"calls may be refused or their replies cut off; {longer}"))


def _serves(served: list[str], model: str) -> bool:
    """Listed as is, or as Ollama lists an untagged name (llama3 is llama3:latest)."""
    return model in served or (":" not in model and f"{model}:latest" in served)
