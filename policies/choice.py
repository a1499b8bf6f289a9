"""Which policy a role gets: a chat model given in code, else the tuner, else the configured
endpoint; traced as a span of its own when tracing is on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from accelopt.policies.interface import Policy
from accelopt.policies.tuner import TunerPolicy
from accelopt.tools.llm_spec import ModelSpec, client_missing
from accelopt.tools.tracing import TracedPolicy, tracing_enabled


class RoleSettings(Protocol):
    """What the choice reads of the run's context (nodes/context.RunContext, a floor above)."""

    @property
    def chat_models(self) -> Mapping[str, Any] | None: ...

    @property
    def llm_retry_wait_s(self) -> float: ...

    def model_spec(self, role: str) -> ModelSpec: ...


def policy_for(ctx: RoleSettings, role: str, run_dir: str | None) -> Policy:
    """The role's policy: a chat model given in code, else the tuner, else the configured endpoint."""
    spec = ctx.model_spec(role)
    given = ctx.chat_models or {}
    model = given.get(role) or given.get("default")
    policy: Policy
    if model is None and spec.provider == "tuner":
        policy = TunerPolicy()
    else:
        try:  # the chat-model half (openai, about 0.8 s of imports) only where a model is used
            from accelopt.policies.llm import LLMPolicy
            from accelopt.tools.llm import build_chat_model
        except ImportError as exc:
            raise client_missing(exc) from None
        policy = LLMPolicy(model if model is not None else build_chat_model(spec), spec, role, ctx.llm_retry_wait_s,
                           run_dir)
    return TracedPolicy(policy, role) if tracing_enabled() else policy
