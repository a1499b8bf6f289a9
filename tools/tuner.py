"""The tuner: a deterministic local policy behind the chat-model interface (`--model tuner`).

It plays planner, executor, fixer and summarizer with no network, through the same graph,
prompts, harness and memory as an LLM, reading and writing the same text formats. It moves a
kernel's launch tunables (tools/tunables.py): num_warps, num_stages, tl.constexpr tile sizes.

- planner: first the configurations that recalled lessons reached on kernels of the same
  class ("recipes"), then single-knob steps, those recalled lessons measured as helping from
  the same starting configuration first and those they warned against last; never a
  configuration already measured this run.
- executor: applies every `NAME` from A to B of the plan to the source (AST edits).
- fixer: a failed multi-knob move drops its largest step; a failed big single step is halved
  (geometrically); a failed single step has nothing smaller, and says so with no code.
- summarizer: a structured lesson: which knobs moved, from what to what, the measured effect,
  the kernel class, the workloads and the resulting configuration with its speedup over the
  baseline, which is what the planner of a later run reads back as a recipe.

Replies are labelled "(tuner)"; they are never presented as model output.
"""

from __future__ import annotations

import json
import math
import re

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from accelopt.memory.features import kernel_class
from accelopt.tools.tunables import (IMPLICIT_DEFAULTS, apply_config, config_of, describe_moves, format_config, limits,
                            neighbours, parse_config, steps)

_ROLE = re.compile(r"You are the accelopt (\w+)")
_SECTION_CODE = r"## {title}[^\n]*\n```python\n(.*?)\n```"
_MOVE = re.compile(r"`(\w+)` from (\d+) to (\d+)")
_RECIPE = re.compile(r"Resulting launch config: ([\w=, ]+?) \(([\d.]+)x over the baseline\)")
_AVOID = re.compile(r"\] avoid: ")  # how Insight.compact() marks a negative lesson
_START = re.compile(r"Starting launch config: ([\w=, ]+)\.")
_TRIED = re.compile(r"\[config: ([^\]]*)\]")
_RESOURCE_ERROR = re.compile(r"(?i)out of resource|shared memory|registers|too many resources")


def _section(prompt: str, title: str, end: str = "\n## ") -> str:
    """The text of `## title...` up to the next level-2 heading."""
    _, found, rest = prompt.partition(f"## {title}")
    return rest.split(end, 1)[0] if found else ""


def _code(prompt: str, title: str) -> str | None:
    match = re.search(_SECTION_CODE.format(title=title), prompt, re.DOTALL)
    return match.group(1) + "\n" if match else None


def _moves(text: str) -> dict[str, tuple[int, int]]:
    return {name: (int(a), int(b)) for name, a, b in _MOVE.findall(text)}


def _same_tiles(other: dict[str, int], config: dict[str, int]) -> bool:
    """A lesson's configuration speaks about this kernel only if it tuned the same tiles
    (num_warps / num_stages every launch has): BLOCK_N says nothing about a BLOCK, and a
    kernel with no tile at all says little about one that has some."""
    return set(other) - set(IMPLICIT_DEFAULTS) == set(config) - set(IMPLICIT_DEFAULTS)


def recipes(insight_lines: str, config: dict[str, int], klass: str) -> list[tuple[dict[str, int], str]]:
    """Configurations that recalled positive lessons reached on kernels of this class with the same
    tiles, in recall order (most relevant first): (changes, insight id)."""
    found = []
    for line in insight_lines.splitlines():
        match = _RECIPE.search(line)
        if not match or _AVOID.search(line) or klass not in line:
            continue
        recipe = parse_config(match[1])
        if not _same_tiles(recipe, config):
            continue  # tuned other tiles (BLOCK_N where this kernel has BLOCK): not this kernel's recipe
        changes = {k: v for k, v in recipe.items() if k in config and config[k] != v
                   and limits(k)[0] <= v <= limits(k)[1]}
        ident = re.search(r"\((ins-\w+)\)", line)
        if changes:
            found.append((changes, ident[1] if ident else "a recalled lesson"))
    return found


def directions(insight_lines: str, config: dict[str, int], klass: str) -> tuple[set, set]:
    """Moves (knob, from, to) that recalled lessons measured as helping, and as hurting, where
    they apply: a lesson that names its starting configuration applies only to a kernel of its
    class with the same tiles, from a configuration that agrees (4 -> 8 warps may hurt at a
    small tile and help at a large one)."""
    liked, avoided = set(), set()
    for line in insight_lines.splitlines():
        start = parse_config(_START.search(line)[1]) if _START.search(line) else None
        if start is not None and (klass not in line or not _same_tiles(start, config)
                                  or any(config.get(k, v) != v for k, v in start.items())):
            continue
        for name, a, b in _MOVE.findall(line):
            (avoided if _AVOID.search(line) else liked).add((name, int(a), int(b)))
    return liked, avoided


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
        source = _code(prompt, "Current kernel")
        n = int((re.search(r"Propose (\d+) distinct", prompt) or [0, 1])[1])
        config = config_of(source) if source else {}
        if not config:
            return "(tuner) This kernel exposes no launch tunables to move."
        lessons = _section(prompt, "Lessons recalled")
        tried = {frozenset(parse_config(m).items()) for m in _TRIED.findall(_section(prompt, "Kernels already"))}
        tried.add(frozenset(config.items()))
        liked, avoided = directions(lessons, config, kernel_class(source))

        def rank(move: dict[str, int]) -> int:
            (name, value), = move.items()
            key = (name, config[name], value)
            return 0 if key in liked else 2 if key in avoided else 1

        options = [(c, f"following recalled lesson {i}") for c, i in recipes(lessons, config, kernel_class(source))]
        options += [(m, "one step") for m in sorted(neighbours(config), key=rank)]
        plans = []
        for changes, why in options:
            result = {**config, **changes}
            if frozenset(result.items()) in tried:
                continue
            tried.add(frozenset(result.items()))
            moves = {k: (config[k], v) for k, v in changes.items()}
            title = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in moves.items())
            plans.append(f"### Plan {len(plans) + 1}: {title}\n(tuner move, {why}) Set {describe_moves(moves)} in the "
                         f"kernel launch. Resulting launch config: {format_config(result)}.")
            if len(plans) == n:
                break
        return "\n\n".join(plans) or "(tuner) Every neighbouring launch configuration was measured already."

    def _executor(self, prompt: str) -> str:
        source = _code(prompt, "Current kernel")
        moves = _moves(_section(prompt, "Plan to implement"))
        if not source or not moves:
            return "(tuner) The plan names no launch parameter move, so there is no kernel to write."
        return f"```python\n{apply_config(source, {n: b for n, (a, b) in moves.items()})}```"

    def _fixer(self, prompt: str) -> str:
        source = _code(prompt, "Kernel that failed")
        moves = _moves(_section(prompt, "Plan that was being implemented"))
        current = config_of(source) if source else {}
        moves = {n: (a, current[n]) for n, (a, _) in moves.items() if n in current and current[n] != a}
        if not moves:
            return "(tuner) Nothing to revert: the failed kernel has none of the plan's moves left."
        span = {n: abs(math.log2(b / a)) if a > 0 and b > 0 else 1.0 for n, (a, b) in moves.items()}
        if len(moves) > 1:
            # Drop the biggest step; on a resource error, the biggest growth of a tile or stage count.
            resource = bool(_RESOURCE_ERROR.search(_section(prompt, "What went wrong")))
            grown = [n for n, (a, b) in moves.items() if b > a and n != "num_warps"]
            culprit = max(grown if resource and grown else moves, key=lambda n: span[n])
            return f"```python\n{apply_config(source, {culprit: moves[culprit][0]})}```"
        (name, (old, new)), = moves.items()
        if span[name] <= 1.0 or name == "num_stages" and abs(new - old) <= 1:
            return (f"(tuner) `{name}` {old} -> {new} is a single step with nothing smaller to try; "
                    "the parent configuration is already measured.")
        middle = 2 ** math.ceil((math.log2(old) + math.log2(new)) / 2) if name != "num_stages" \
            else (old + new + 1) // 2
        if middle in (old, new):
            middle = next(v for v in steps(name, new) if (v - new) * (old - new) > 0)
        return f"```python\n{apply_config(source, {name: middle})}```"

    def _summarizer(self, prompt: str) -> str:
        parent, child = _code(prompt, "Parent kernel"), _code(prompt, "Child kernel")
        speed = re.search(r"ran at ([\d.]+) x", prompt)
        if not parent or not child or not speed:
            return ""
        before, after = config_of(parent), config_of(child)
        moves = {k: (before[k], v) for k, v in after.items() if k in before and before[k] != v}
        if not moves:
            return ""  # not a launch-configuration change: the node writes its own plain lesson
        ratio = float(speed[1])
        task = (re.search(r"# Task: (\S+)", prompt) or [None, "this task"])[1]
        workloads = (re.search(r"Workloads: ([^;\n]+)", prompt) or [None, "its workloads"])[1]
        vs_base = re.search(r"([\d.]+) x the task's baseline", prompt)
        klass = kernel_class(parent)
        positive = ratio >= 1
        recipe = f" Resulting launch config: {format_config(after)} ({float(vs_base[1]):.2f}x over the baseline)." \
            if positive and vs_base else ""
        return "```json\n" + json.dumps({
            "title": ("" if positive else "Avoid: ") + describe_moves(moves),
            "lesson": (f"On {task} ({klass}; workloads {workloads}), moving {describe_moves(moves)} "
                       f"{'helped' if positive else 'hurt'}: {ratio:.2f}x against the parent. "
                       f"Starting launch config: {format_config(before)}.{recipe}"),
            "kernel_class": klass, "before": format_config(before), "after": format_config(after)}) + "\n```"
