"""Read model replies as real models write them: a kernel, plans, a lesson.

Reasoning models put their reasoning in every shape: a field of its own (never part of the
text), <think> pairs, a closing </think> alone (the chat template opened the tag inside the
prompt), gpt-oss harmony channels, or those channels flattened when the server skips special
tokens. Code comes in fences of every flavour, sometimes followed by an "optional alternative";
plans come under headings, as a numbered list or as JSON; a lesson comes as JSON, drafts first.
A reply may also be cut off at the token limit, or pass its code as tool-call arguments.
We parse text ourselves and treat "no usable code" as a normal outcome.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage

from accelopt.tools import pyparse

# ---------------------------------------------------------------- the reply as the model sent it


@dataclass(frozen=True)
class Reply:
    """A model's reply with what its text alone would lose."""

    text: str                          # the answer; reasoning may still be inline (strip_reasoning)
    finish_reason: str | None = None   # "length": cut off at the token limit
    tool_calls: tuple[dict, ...] = ()  # {"name", "args"} of the calls the model made
    reasoning_chars: int = 0           # reasoning that came in a field of its own

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


# Servers name a cut-off reply differently: OpenAI and vLLM "length", Anthropic "max_tokens".
_CUT_OFF = {"length", "max_tokens", "model_length"}
ENVELOPE = "\x00accelopt-reply/1\n"


def reply_of(message: BaseMessage) -> Reply:
    """The Reply inside a chat model's message."""
    meta = message.response_metadata or {}
    reason = meta.get("finish_reason") or meta.get("stop_reason") or meta.get("done_reason")
    reason = str(reason).lower() if reason else None
    calls = tuple({"name": c.get("name", ""), "args": c.get("args") or {}}
                  for c in (getattr(message, "tool_calls", None) or []))
    return Reply(_content_text(message.content), "length" if reason in _CUT_OFF else reason, calls,
                 _reasoning_chars(message))


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    # content blocks: keep text blocks, leave reasoning/thinking blocks out
    return "".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content
                   if isinstance(b, str) or b.get("type", "text") == "text")


def _reasoning_chars(message: BaseMessage) -> int:
    extra = message.additional_kwargs or {}
    field = extra.get("reasoning_content") or extra.get("reasoning") or ""
    blocks = [b for b in message.content if isinstance(b, dict) and b.get("type") in ("reasoning", "thinking")] \
        if isinstance(message.content, list) else []
    return len(str(field)) + sum(len(str(b.get("reasoning") or b.get("thinking") or "")) for b in blocks)


def encode_reply(reply: Reply) -> str:
    """The reply as one string (what call_model returns and its run cache replays): the plain
    text when nothing else matters, else a tagged JSON envelope."""
    if reply.finish_reason in (None, "stop") and not reply.tool_calls and not reply.reasoning_chars:
        return reply.text
    return ENVELOPE + json.dumps({"text": reply.text, "finish_reason": reply.finish_reason,
                                  "tool_calls": list(reply.tool_calls), "reasoning_chars": reply.reasoning_chars})


def decode_reply(text: str) -> Reply:
    if not text.startswith(ENVELOPE):
        return Reply(text)
    data = json.loads(text[len(ENVELOPE):])
    return Reply(data["text"], data.get("finish_reason"), tuple(data.get("tool_calls") or ()),
                 int(data.get("reasoning_chars") or 0))


# ---------------------------------------------------------------- reasoning

_THINK_PAIR = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</(?:think|thinking|reasoning)>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"<(?:think|thinking|reasoning)>", re.IGNORECASE)
_HARMONY_FINAL = re.compile(r"<\|channel\|>\s*final\b[^<]*(?:<\|constrain\|>[^<]*)?<\|message\|>"
                            r"(?P<body>.*?)(?=<\|(?:end|return|call|start)\|>|\Z)", re.DOTALL)
_HARMONY_TOKEN = re.compile(r"<\|[a-z_]+\|>")
# harmony with its special tokens skipped by the server: "analysisWe need...assistantfinal```python"
_HARMONY_FLAT = re.compile(r"^\s*analysis(?=[A-Z])")


def strip_reasoning(text: str) -> str:
    """The answer part of a reply: harmony's final channel, without <think> reasoning."""
    text = _harmony_answer(text)
    text = _THINK_PAIR.sub("", text)
    closing = list(_THINK_CLOSE.finditer(text))
    if closing:  # the template opened <think> in the prompt: everything before the tag is reasoning
        text = text[closing[-1].end():]
    opening = _THINK_OPEN.search(text)
    if opening:  # an unterminated <think> (cut off by max_tokens) hides everything after it
        text = text[:opening.start()]
    return text.strip()


def _harmony_answer(text: str) -> str:
    if "<|channel|>" in text:
        finals = [m.group("body") for m in _HARMONY_FINAL.finditer(text)]
        return "\n".join(finals)  # no final channel: the model never got past its analysis
    if _HARMONY_FLAT.match(text):
        _, sep, final = text.rpartition("assistantfinal")
        return final if sep else ""
    return text


# ---------------------------------------------------------------- kernels

_FENCE = re.compile(r"(?P<fence>```|~~~)[ \t]*(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)"
                    r"(?P<close>\n[ \t]*(?P=fence)|\Z)", re.DOTALL)
_CODE_LANGS = ("", "python", "py", "python3", "triton")
KERNEL_IMPORTS = ("import triton", "import nki", "from nki", "neuronxcc")
# What introduces a later module as the answer, and what marks it as an appendix.
_FINAL = re.compile(r"\b(final|corrected|fixed|updated|revised|optimi[sz]ed|rewritten|complete|full|new)\s+"
                    r"(version|kernel|module|code|implementation|solution)\b|\bfinal\s*(answer|:)"
                    r"|\blet me (fix|correct|rewrite|redo)\b|\b(wait|oops)\b[,:.!]"
                    r"|\b(a|the) (bug|mistake)\b", re.IGNORECASE)
_APPENDIX = re.compile(r"\b(optional(ly)?|alternatives?|alternatively|variant|bonus|for comparison"
                       r"|if you (want|prefer|need|like)|you (could|can|might) also|another (version|option|approach)"
                       r"|not (the|my) (answer|final))\b", re.IGNORECASE)


@dataclass(frozen=True)
class Block:
    """One fenced (or unfenced) code block of a reply."""

    body: str
    start: int
    end: int
    closed: bool       # its closing fence was there (an unterminated fence may be cut off)

    @property
    def source(self) -> str:
        return self.body.strip() + "\n"


def find_kernel(reply: str, entry_point: str = "run", echo: str | None = None) -> Block | None:
    """The kernel a reply presents as its answer: the first complete module defining the entry
    point, unless the text before a later one says that one is final (and not an alternative).
    A block identical to `echo` (the kernel the model was given) loses to any other."""
    text = strip_reasoning(reply or "")
    blocks = _code_blocks(text)
    if not blocks and _looks_like_kernel(text, entry_point):
        blocks = [Block(text, 0, len(text), True)]
    scored = [b for b in blocks if _score(b.body, entry_point) > 0]
    fresh = [b for b in scored if echo is None or _normal(b.body) != _normal(echo)]
    scored = fresh or scored
    complete = [b for b in scored if _defines(b.body, entry_point)]
    if complete:
        return _answer(text, complete)
    # No module defines the entry point: the most kernel-like block, so the harness can say why.
    return max(scored, key=lambda b: _score(b.body, entry_point), default=None)


def extract_kernel(reply: str, entry_point: str = "run", echo: str | None = None) -> str | None:
    """The source of find_kernel's block, or None."""
    block = find_kernel(reply, entry_point, echo)
    return block.source if block else None


def code_from_tool_calls(calls: tuple[dict, ...] | list[dict], entry_point: str = "run") -> str | None:
    """A kernel passed as a tool call's argument (code / source / kernel / ... or any string)."""
    for call in calls:
        args = call.get("args")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                args = {"code": args}
        if not isinstance(args, dict):
            continue
        preferred = [args[k] for k in ("code", "source", "kernel", "module", "python", "content") if k in args]
        for value in preferred + list(args.values()):
            if isinstance(value, str):
                found = extract_kernel(value, entry_point)
                if found is not None:
                    return found
    return None


def is_complete_python(source: str) -> bool:
    try:
        pyparse.parsed(source)
    except (SyntaxError, ValueError):
        return False
    return True


def _code_blocks(text: str) -> list[Block]:
    return [Block(m.group("body"), m.start(), m.end(), bool(m.group("close")))
            for m in _FENCE.finditer(text) if m.group("lang").lower() in _CODE_LANGS]


def _answer(text: str, complete: list[Block]) -> Block:
    chosen = complete[0]
    for before, block in zip(complete, complete[1:]):
        intro = text[before.end:block.start][-250:]  # the words that introduce this block
        if _FINAL.search(intro) and not _APPENDIX.search(intro):
            chosen = block
    return chosen


def _normal(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if line.strip()]


def _looks_like_kernel(text: str, entry_point: str) -> bool:
    return any(m in text for m in KERNEL_IMPORTS) and f"def {entry_point}(" in text


def _defines(block: str, entry_point: str) -> bool:
    return re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", block, re.MULTILINE) is not None \
        and _score(block, entry_point) > 0


def _score(block: str, entry_point: str) -> int:
    score = 0
    if f"def {entry_point}(" in block:
        score += 2
    if "@triton.jit" in block or "@jit" in block or "@nki.jit" in block:
        score += 2
    if any(m in block for m in KERNEL_IMPORTS):
        score += 1
    return score if score >= 3 else 0


# ---------------------------------------------------------------- JSON

_JSON_START = re.compile(r"[\[{]")


def json_values(text: str) -> list[Any]:
    """Every top-level JSON object or array in a text, in order. A value cut off midway is
    skipped, but the complete objects nested inside it are found on their own."""
    decoder, out, i = json.JSONDecoder(), [], 0
    while (m := _JSON_START.search(text, i)) is not None:
        try:
            value, end = decoder.raw_decode(text, m.start())
        except ValueError:
            i = m.start() + 1
            continue
        if isinstance(value, (dict, list)):
            out.append(value)
        i = end
    return out


def last_object_with(text: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """The last JSON object of a reply holding one of `keys` (a final answer after its drafts)."""
    for value in reversed(json_values(strip_reasoning(text))):
        if isinstance(value, dict) and any(k in value for k in keys):
            return value
    return {}


def as_text(value: Any, sep: str = " ") -> str:
    """A JSON value as prose: lists joined, never a Python repr."""
    if isinstance(value, list):
        return sep.join(as_text(v, sep) for v in value)
    if isinstance(value, dict):
        return json.dumps(value)
    return "" if value is None else str(value)


# ---------------------------------------------------------------- lessons

LESSON_KEYS = ("title", "lesson", "bottleneck", "kernel_class", "before", "after")


def parse_lesson(reply: str) -> dict[str, str]:
    """The lesson fields of a summarizer reply's last JSON object (empty when there is none)."""
    data = last_object_with(reply, LESSON_KEYS)
    fields = {k: as_text(data[k], "\n" if k in ("before", "after") else ", " if k != "lesson" else " ")
              for k in LESSON_KEYS if k in data}
    return {k: v for k, v in fields.items() if v.strip() not in ("", "unknown")}


# ---------------------------------------------------------------- plans

_HEADER_WORDS = r"(?:optimi[sz]ation\s+)?(?:plan|option|approach|proposal|idea|strategy|optimi[sz]ation)"
_PLAN_HEADER = re.compile(
    rf"^[ \t]*(?:#{{1,6}}[ \t]*|\*\*[ \t]*)?{_HEADER_WORDS}[ \t]*#?[ \t]*(?:\d+|(?-i:[A-Z]))\b[^\n]*$"
    r"|^[ \t]*#{1,6}[ \t]*\d+[.)][ \t]+\S[^\n]*$|^[ \t]*\*\*[ \t]*\d+[.)][ \t]+\S[^\n]*$",
    re.IGNORECASE | re.MULTILINE)
_NUMBERED = re.compile(r"^ ?(\d+)[.)][ \t]+(\S[^\n]*)$", re.MULTILINE)
_TITLE_KEYS = ("title", "name", "summary", "idea")
_BODY_KEYS = ("text", "description", "details", "plan", "body", "content", "rationale", "changes", "steps",
              "what", "how", "why")


def split_plans(reply: str, limit: int, truncated: bool = False) -> list[str]:
    """Plans from a planner reply: JSON (a list, or {"plans": [...]}), `### Plan n` headings, or
    a numbered list; a reply with none of these is one plan. From a reply cut off at the token
    limit the last plan is dropped: it ends mid-sentence. So is a cut-off reply in none of these
    shapes (half a JSON object, prose that stops): it holds no whole plan, and is asked again."""
    text = strip_reasoning(reply or "")
    if not text:
        return []
    plans = _json_plans(text)
    if not plans:
        plans = _headed_plans(text) or _numbered_plans(text)
        if truncated:
            plans = plans[:-1]
        plans = [p for p in plans if len(p.splitlines()) > 1 or len(p) > 40] or ([] if truncated else [text])
    return plans[:limit]


def _headed_plans(text: str) -> list[str]:
    starts = [m.start() for m in _PLAN_HEADER.finditer(text)]
    return [text[a:b].strip() for a, b in zip(starts, starts[1:] + [len(text)])]


def _numbered_plans(text: str) -> list[str]:
    """Items of a top-level list numbered 1, 2, 3, ...; nested steps (indented, or numbered out
    of sequence) stay inside their item."""
    items: list[re.Match] = []
    for m in _NUMBERED.finditer(text):
        if int(m.group(1)) == len(items) + 1:
            items.append(m)
    if len(items) < 2:
        return []
    ends = [m.start() for m in items[1:]] + [len(text)]
    return [_canonical(k + 1, *_title_and_rest(m.group(2)), text[m.end():end].strip())
            for k, (m, end) in enumerate(zip(items, ends))]


def _title_and_rest(line: str) -> tuple[str, str]:
    bold = re.match(r"\*\*(.+?)\*\*[ \t]*[:.\-\u2013\u2014]?[ \t]*(.*)", line)
    if bold:
        return bold.group(1).strip().rstrip(":"), bold.group(2)
    return line.strip(), ""


def _json_plans(text: str) -> list[str]:
    for value in reversed(json_values(text)):
        items = value.get("plans") if isinstance(value, dict) else value
        if isinstance(items, list) and items and all(_plan_like(i) for i in items):
            return [_plan_from_json(k + 1, item) for k, item in enumerate(items)]
    # a JSON reply cut off midway: the plan objects that were complete
    whole = [v for v in json_values(text) if isinstance(v, dict) and _plan_like(v) and "plans" not in v]
    titled = [v for v in whole if any(k in v for k in _TITLE_KEYS) and any(k in v for k in _BODY_KEYS)]
    return [_plan_from_json(k + 1, item) for k, item in enumerate(titled)]


def _plan_like(item: Any) -> bool:
    if isinstance(item, str):
        return len(item) >= 20
    return isinstance(item, dict) and any(k in item for k in _TITLE_KEYS + _BODY_KEYS)


def _plan_from_json(number: int, item: Any) -> str:
    if isinstance(item, str):
        title, _, rest = item.strip().partition("\n")
        return _canonical(number, title, "", rest)
    title = next((as_text(item[k]) for k in _TITLE_KEYS if k in item), "")
    body = "\n".join(as_text(item[k], "\n") for k in _BODY_KEYS if k in item)
    return _canonical(number, title, "", body)


def _canonical(number: int, title: str, rest_of_line: str, body: str) -> str:
    lines = [f"### Plan {number}: {title.strip()}", rest_of_line.strip(), body.strip()]
    return "\n".join(line for line in lines if line)


def plan_title(plan_text: str) -> str:
    """A plan's first line without its `### Plan n:` header: what the plan tries, in a few words."""
    first = (plan_text.strip().splitlines() or [""])[0]
    first = re.sub(rf"^[#*\s]*({_HEADER_WORDS}\s*#?\s*\w+\s*[:.\-)]\s*|\d+[.)]\s*)?", "", first, flags=re.I)
    return first.strip(" *")[:80]
