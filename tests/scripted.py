"""Scripted replies for tests. These are canned texts chosen by the test, not model output."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

BASELINE = (Path(__file__).resolve().parents[1] / "evals" / "tasks" / "softmax" / "baseline.py").read_text()
# A correct rewrite that differs from the baseline (8 warps, exp2 instead of exp).
GOOD = (BASELINE.replace("num = tl.exp(x)", "num = tl.exp2(x * 1.4426950408889634)")
        .replace("num_warps=4", "num_warps=8"))
BROKEN = GOOD.replace("den = tl.sum(num, axis=0)", "den = tl.sum(num, axis=0")  # syntax error
WRONG = BASELINE.replace("num / den", "num / (den + 1.0)")
# Correct but 16x the work: 16 programs per row each write the same row. A deterministic
# regression, large enough to stand out of the interpreter's timing noise.
SLOW = BASELINE.replace("softmax_kernel[(n_rows,)]", "softmax_kernel[(n_rows, 16)]")

PLANS = """Some preamble the parser must skip.
### Plan 1: exp2 with more warps
Use exp2 with a log2(e) prescale and launch 8 warps per row to raise memory parallelism.
### Plan 2: broken attempt
Same as plan 1, but this one will be written with a syntax error on the first try.
### Plan 3: wrong normalization
A rewrite whose normalization is off by one, which the harness must reject.
### Plan 4: redundant programs
Launch 16 programs per row that all write the row: a regression the summarizer must record.
"""

INSIGHT = """```json
{"title": "exp2 and 8 warps for row softmax", "lesson": "Prefer exp2 with a folded log2(e) scale and more warps for long rows.",
 "bottleneck": "memory bandwidth", "kernel_class": "row reduction", "before": "tl.exp(x)", "after": "tl.exp2(x * LOG2E)"}
```"""


def fenced(code: str) -> str:
    return f"Here is the kernel.\n\n```python\n{code}```\nDone."


def reply_for(messages: list[BaseMessage]) -> str:
    """The canned reply for a prompt, by role and by which plan it carries."""
    system, prompt = str(messages[0].content), str(messages[-1].content)
    role = re.search(r"You are the accelopt (\w+)", system).group(1)
    if role == "planner":
        return PLANS
    if role == "summarizer":
        return INSIGHT
    plan = prompt.split("## Plan", 1)[1]
    if role == "executor":
        if "broken attempt" in plan:
            return fenced(BROKEN)
        if "wrong normalization" in plan:
            return fenced(WRONG)
        if "redundant programs" in plan:
            return fenced(SLOW)
        return fenced(GOOD)
    if role == "fixer":
        if "SyntaxError" in prompt:
            return fenced(GOOD)
        return fenced(WRONG)  # a fixer that cannot find the bug
    raise AssertionError(role)


class ScriptedChatModel(BaseChatModel):
    """A chat model whose replies come from a function of the messages, with token counts."""

    script: Callable[[list[BaseMessage]], str]

    @property
    def _llm_type(self) -> str:
        return "scripted-test"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        text = self.script(messages)
        tokens_in = sum(len(str(m.content)) for m in messages) // 4
        message = AIMessage(content=text, usage_metadata={
            "input_tokens": tokens_in, "output_tokens": len(text) // 4, "total_tokens": tokens_in + len(text) // 4})
        return ChatResult(generations=[ChatGeneration(message=message)])
