"""Structured output: the response schemas plans and lessons are asked with, which models take
one, and the endpoints that refused one (asked in text from then on)."""

from __future__ import annotations

import re
from typing import Any

from langchain_core.language_models import BaseChatModel

from accelopt.policies.replies import LESSON_KEYS
from accelopt.tools import settings


def _schema(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def _response_format(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}


PLANS_SCHEMA = _response_format("plans", _schema({"plans": {"type": "array", "items": _schema(
    {"title": {"type": "string"}, "text": {"type": "string"}})}}))
LESSON_SCHEMA = _response_format("lesson", _schema({k: {"type": "string"} for k in LESSON_KEYS}))

TEXT_ONLY: set[str] = set()  # endpoints that refused a response schema in this process
# what a server says when it refuses a response schema (tools/llm.py makes such a 400 this call's failure)
REFUSED = re.compile(r"response_format|json_schema|structured|guided|NotImplemented", re.IGNORECASE)


def takes_schema(model: BaseChatModel) -> bool:
    """OpenAI-compatible endpoints (OpenAI, vLLM, SGLang, Ollama) take response_format json_schema;
    ACCELOPT_STRUCTURED_OUTPUT=0 asks in text everywhere."""
    if not settings.structured_output():
        return False
    from langchain_openai import ChatOpenAI

    return isinstance(model, ChatOpenAI)

