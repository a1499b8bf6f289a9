"""Pull a kernel out of a model reply, and plans out of a planner reply.

Models wrap code in fences of every flavour (```python, ```py, ~~~, unterminated fences,
several blocks, reasoning in <think> tags). Structured output is unreliable on open models
served by vLLM, so we parse text ourselves and treat "no usable code" as a normal outcome.
"""

from __future__ import annotations

import re

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"(?P<fence>```|~~~)[ \t]*(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)(?:\n[ \t]*(?P=fence)|\Z)",
                    re.DOTALL)
_PLAN_HEADER = re.compile(r"^\s*(?:#{1,6}\s*|\*\*)?\s*Plan\s*#?\s*(\d+)\b[^\n]*$", re.IGNORECASE | re.MULTILINE)


def strip_reasoning(text: str) -> str:
    text = _THINK.sub("", text)
    # An unterminated <think> (cut off by max_tokens) hides everything after it.
    return text.split("<think>")[0] if "<think>" in text and "</think>" not in text else text


def extract_kernel(reply: str, entry_point: str = "run") -> str | None:
    """The fenced block that looks most like a complete kernel module, or None."""
    text = strip_reasoning(reply or "")
    blocks = [m.group("body") for m in _FENCE.finditer(text)
              if m.group("lang").lower() in ("", "python", "py", "python3", "triton")]
    if not blocks and _looks_like_kernel(text, entry_point):
        blocks = [text]
    scored = [(_score(b, entry_point), i, b) for i, b in enumerate(blocks)]
    scored = [s for s in scored if s[0] > 0]
    if not scored:
        return None
    # Highest score wins; among equals, the last block (models put the final version last).
    _, _, best = max(scored)
    return best.strip() + "\n"


KERNEL_IMPORTS = ("import triton", "import nki", "from nki", "neuronxcc")


def _looks_like_kernel(text: str, entry_point: str) -> bool:
    return any(m in text for m in KERNEL_IMPORTS) and f"def {entry_point}(" in text


def _score(block: str, entry_point: str) -> int:
    score = 0
    if f"def {entry_point}(" in block:
        score += 2
    if "@triton.jit" in block or "@jit" in block or "@nki.jit" in block:
        score += 2
    if any(m in block for m in KERNEL_IMPORTS):
        score += 1
    return score if score >= 3 else 0


def split_plans(reply: str, limit: int) -> list[str]:
    """Split a planner reply on 'Plan 1' / '### Plan 2' headers; a reply without headers is one plan."""
    text = strip_reasoning(reply or "").strip()
    if not text:
        return []
    starts = [m.start() for m in _PLAN_HEADER.finditer(text)]
    if not starts:
        return [text][:limit]
    plans = [text[a:b].strip() for a, b in zip(starts, starts[1:] + [len(text)])]
    return [p for p in plans if len(p.splitlines()) > 1 or len(p) > 40][:limit]


def plan_title(plan_text: str) -> str:
    """A plan's first line without its `### Plan n:` header: what the plan tries, in a few words."""
    first = (plan_text.strip().splitlines() or [""])[0]
    return re.sub(r"^[#*\s]*(plan\s*\d+\s*[:.\-]\s*)?", "", first, flags=re.I).strip(" *")[:80]
