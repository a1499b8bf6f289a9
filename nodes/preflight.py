"""Before a run's first model call, wherever it starts (the CLI before its graph, setup for
`graph.invoke`, `langgraph dev` and MCP): can every endpoint the roles use answer its model? A dead
endpoint, a wrong key or an unknown model is one line before any work, not three retries per call
and a run that returns normally with the baseline as its result.

An endpoint that answered is not asked again for a while in the same process (`CHECKED_FOR_S`):
the CLI checks before it starts the graph, whose setup would check again, and a served process
starts run after run against the same endpoint. The run's own retries deal with one that goes
away later."""

from __future__ import annotations

import threading
import time

from accelopt.nodes.context import RunContext
from accelopt.tools.llm_spec import GIVEN, ROLES, ModelSpec, client_missing, endpoint

CHECKED_FOR_S = 300.0
_passed: dict[tuple, float] = {}  # (endpoint, model, key variable) -> when it last answered
_lock = threading.Lock()


def preflight_context(ctx: RunContext) -> None:
    """Check every endpoint the roles use, once per (endpoint, model, key), unless ctx.preflight is
    off; raise tools/llm.FatalLLMError naming the roles. Chat models given in code are not checked."""
    if not ctx.preflight:
        return
    checks: dict[tuple, tuple[ModelSpec, list[str]]] = {}
    for role in ROLES:
        spec = ctx.model_spec(role)
        if spec.provider in ("tuner", GIVEN):
            continue
        key = (endpoint(spec), spec.model, spec.api_key_env)
        checks.setdefault(key, (spec, []))[1].append(role)
    with _lock:
        now = time.monotonic()
        checks = {k: v for k, v in checks.items() if now - _passed.get(k, -CHECKED_FOR_S) >= CHECKED_FOR_S}
    if not checks:
        return
    try:  # httpx and openai: only when there is an endpoint to check
        from accelopt.policies.llm import least_prompt_tokens
        from accelopt.tools.llm import preflight
    except ImportError as exc:
        raise client_missing(exc) from None

    for key, (spec, roles) in checks.items():  # the roles' least prompts held against a served context length
        preflight(spec, ", ".join(roles), prompt_tokens=least_prompt_tokens(roles))
        with _lock:
            _passed[key] = time.monotonic()
