"""$ per 1M tokens. Hosted list prices as published by their vendors (check them: they change);
self-hosted models (vLLM, SGLang, Ollama), chat models given in code and the tuner are unpriced
unless a price is configured. An unpriced model's calls count as $0, so a $ budget cannot stop
them: `known_price` says which models those are."""

from __future__ import annotations

# model name prefix -> (input $/Mtok, output $/Mtok); the longest matching prefix wins.
HOSTED_PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1": (2.00, 8.00),
    "o4-mini": (1.10, 4.40),
    "o3": (2.00, 8.00),
}


def known_price(model: str, provider: str, input_price: float | None = None,
                output_price: float | None = None) -> tuple[float, float] | None:
    """The model's price, or None when nothing prices it (configured, or the hosted table for openai)."""
    if input_price is not None or output_price is not None:
        return input_price or 0.0, output_price or 0.0
    if provider != "openai":
        return None
    matches = [k for k in HOSTED_PRICES if model.startswith(k)]
    return HOSTED_PRICES[max(matches, key=len)] if matches else None


def price_per_mtok(model: str, provider: str, input_price: float | None = None,
                   output_price: float | None = None) -> tuple[float, float]:
    return known_price(model, provider, input_price, output_price) or (0.0, 0.0)
