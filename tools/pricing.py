"""$ per 1M tokens. Hosted list prices as published by their vendors (check them: they change);
self-hosted models (vLLM, SGLang, Ollama) and the tuner are free unless a price is configured."""

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


def price_per_mtok(model: str, provider: str, input_price: float | None = None,
                   output_price: float | None = None) -> tuple[float, float]:
    if input_price is not None or output_price is not None:
        return input_price or 0.0, output_price or 0.0
    if provider != "openai":
        return 0.0, 0.0
    matches = [k for k in HOSTED_PRICES if model.startswith(k)]
    return HOSTED_PRICES[max(matches, key=len)] if matches else (0.0, 0.0)
