"""The tuner: a deterministic local policy behind the chat-model interface (`--model tuner`).

It plays planner, executor, fixer and summarizer with no network, through the same graph,
prompts, harness and memory as an LLM. It moves a kernel's launch tunables: integer keyword
arguments of `kernel[grid](...)` launches (num_warps, num_stages, tl.constexpr block sizes).
Edits are located with the AST and spliced into the text, so formatting and comments survive.
Replies are plain text in the same formats an LLM is asked for; they are labelled as tuner
output and never presented as model output.
"""

from __future__ import annotations

import ast
import itertools
import json
import re
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

_ROLE = re.compile(r"You are the accelopt (\w+)")
_SECTION_CODE = r"## {title}[^\n]*\n```python\n(.*?)\n```"
_MOVE = re.compile(r"`(\w+)` from (\d+) to (\d+)")
_LIMITS = {"num_warps": (1, 32), "num_stages": (1, 6)}


def launch_tunables(source: str) -> dict[str, tuple[int, ast.Constant]]:
    """Integer keyword arguments of every `kernel[grid](...)` launch: name -> (value, node)."""
    found: dict[str, tuple[int, ast.Constant]] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript):
            for kw in node.keywords:
                if kw.arg and isinstance(kw.value, ast.Constant) and type(kw.value.value) is int:
                    found.setdefault(kw.arg, (kw.value.value, kw.value))
    return found


def set_tunable(source: str, name: str, value: int) -> str:
    """Replace every launch keyword `name=<int>` with `name=value`, editing only those spans."""
    lines = source.splitlines(keepends=True)
    targets = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript):
            targets += [kw.value for kw in node.keywords
                        if kw.arg == name and isinstance(kw.value, ast.Constant) and type(kw.value.value) is int]
    for const in sorted(targets, key=lambda c: (c.lineno, c.col_offset), reverse=True):
        line = lines[const.lineno - 1]
        lines[const.lineno - 1] = line[:const.col_offset] + str(value) + line[const.end_col_offset:]
    return "".join(lines)


def candidate_moves(tunables: dict[str, tuple[int, Any]]) -> list[tuple[str, int, int]]:
    per_knob = []
    for name, (value, _) in tunables.items():
        options = [value + 1, value - 1] if name == "num_stages" else [value * 2, value // 2]
        lo, hi = _LIMITS.get(name, (16, 65536))
        per_knob.append([(name, value, v) for v in options if lo <= v <= hi and v != value])
    # Round-robin over knobs, so that N plans explore several knobs rather than one knob twice.
    return [m for row in itertools.zip_longest(*per_knob) for m in row if m is not None]


def _preferred(moves: list[tuple[str, int, int]], insights_text: str) -> list[tuple[str, int, int]]:
    """Moves in the direction that recalled positive lessons measured first; avoided ones last."""
    liked, avoided = set(), set()
    for line in insights_text.splitlines():
        for name, a, b in _MOVE.findall(line):
            (avoided if "avoid" in line.lower() else liked).add((name, int(b) > int(a)))
    key = lambda m: (0 if (m[0], m[2] > m[1]) in liked else 2 if (m[0], m[2] > m[1]) in avoided else 1)  # noqa: E731
    return sorted(moves, key=key)


class TunerChatModel(BaseChatModel):
    """Deterministic tuning policy; see the module docstring."""

    @property
    def _llm_type(self) -> str:
        return "accelopt-tuner"

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs) -> ChatResult:
        system = str(messages[0].content)
        prompt = str(messages[-1].content)
        role = (_ROLE.search(system) or _ROLE.search(prompt))
        text = getattr(self, f"_{role.group(1)}", lambda p: "")(prompt) if role else ""
        message = AIMessage(content=text, response_metadata={"model_name": "tuner"},
                            usage_metadata={"input_tokens": 0, "output_tokens": 0, "total_tokens": 0})
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _planner(self, prompt: str) -> str:
        source = _code(prompt, r"Current kernel")
        n = int((re.search(r"Propose (\d+) distinct", prompt) or [0, 1])[1])
        iteration = int((re.search(r"\(iteration (\d+)\)", prompt) or [0, 1])[1])
        insights = prompt.split("## Lessons recalled", 1)[-1].split("## What to do", 1)[0]
        moves = _preferred(candidate_moves(launch_tunables(source)), insights) if source else []
        if not moves:
            return "(tuner) This kernel exposes no integer launch tunables to move."
        start = ((iteration - 1) * n) % len(moves)
        chosen = (moves[start:] + moves[:start])[:n]
        return "\n\n".join(f"### Plan {i + 1}: {name} {a} -> {b}\n(tuner move) Set the launch parameter "
                           f"`{name}` from {a} to {b} in every kernel launch."
                           for i, (name, a, b) in enumerate(chosen))

    def _executor(self, prompt: str) -> str:
        source = _code(prompt, r"Current kernel")
        move = _MOVE.search(prompt.split("## Plan to implement", 1)[-1])
        if not source or not move:
            return "(tuner) The plan names no launch parameter move, so there is no kernel to write."
        return f"```python\n{set_tunable(source, move[1], int(move[3]))}```"

    def _fixer(self, prompt: str) -> str:
        source = _code(prompt, r"Kernel that failed")
        move = _MOVE.search(prompt.split("## Plan that was being implemented", 1)[-1])
        if not source or not move:
            return "(tuner) Nothing to revert."
        name, old, new = move[1], int(move[2]), int(move[3])
        current = launch_tunables(source).get(name, (new, None))[0]
        # Shrink a large step halfway back; otherwise revert to the parent's value.
        shrunk = current // 2 if current > 2 * old else old
        return f"```python\n{set_tunable(source, name, shrunk)}```"

    def _summarizer(self, prompt: str) -> str:
        move = _MOVE.search(prompt.split("## Plan that produced the child", 1)[-1])
        speed = re.search(r"ran at ([\d.]+) x", prompt)
        task = re.search(r"# Task: (\S+)", prompt)
        if not move or not speed:
            return ""
        name, a, b = move[1], move[2], move[3]
        ratio = float(speed[1])
        verb = "helped" if ratio >= 1 else "hurt"
        return "```json\n" + json.dumps({
            "title": f"`{name}` from {a} to {b}",
            "lesson": (f"Moving the launch parameter `{name}` from {a} to {b} {verb}: measured {ratio:.2f}x "
                       f"on {task[1] if task else 'this task'}."),
            "bottleneck": "launch configuration", "kernel_class": "unknown",
            "before": f"{name}={a}", "after": f"{name}={b}"}) + "\n```"


def _code(prompt: str, title: str) -> str | None:
    match = re.search(_SECTION_CODE.format(title=title), prompt, re.DOTALL)
    return match.group(1) + "\n" if match else None
