"""The LLM policy's prompts: the $-templates in prompts/ (the only code that reads them) and the
parts a request fills them with. Measurements, findings and measured kernels as text:
measurement_text.py."""

from __future__ import annotations

import textwrap
from functools import cache
from pathlib import Path
from string import Template

from accelopt.memory.schema import Insight
from accelopt.policies.interface import FixRequest
from accelopt.tools.task import Task

PROMPTS = Path(__file__).with_name("prompts")

FROM_SCRATCH = ("(There is no Triton kernel yet: this task starts from scratch. The current implementation is the "
                "PyTorch reference above, measured as the baseline; the first kernel must be written from it.)")

SNIPPET_LINES = 8  # of a recalled lesson's before/after code: enough to show the change, no more


@cache
def _template(name: str) -> Template:
    return Template((PROMPTS / f"{name}.txt").read_text())


def render(name: str, **values) -> str:
    # $-templates, because kernel sources are full of braces.
    return _template(name).substitute(**values)


def backend_parts(task: Task) -> dict[str, str]:
    """The backend's rules and API pitfalls for the roles that write kernels (executor, fixer)
    and its notes on fast kernels for all three: prompts/rules_<backend>.txt,
    pitfalls_<backend>.txt and notes_<backend>.txt (the optional ones may be missing)."""
    backend = task.spec.backend
    return {"rules": _template(f"rules_{backend}").substitute(entry_point=task.spec.entry_point),
            "backend_notes": _optional(f"notes_{backend}"), "pitfalls": _optional(f"pitfalls_{backend}")}


def _optional(name: str) -> str:
    path = PROMPTS / f"{name}.txt"
    return path.read_text() if path.is_file() else ""


def workloads_text(task: Task) -> str:
    """The sizes and dtype a kernel is timed on: a kernel is tuned for shapes it can see."""
    sizes = "; ".join(f"{w.name} ({', '.join(f'{k}={v}' for k, v in w.params.items())})"
                      for w in task.spec.workloads)
    return (f"\nTimed on these workloads, with {task.spec.dtype} data (the reference's `make_inputs` builds "
            f"the inputs from the sizes): {sizes}.")


def task_parts(task: Task) -> dict[str, str]:
    return {"task_name": task.name, "task_description": task.spec.description, "reference": task.reference_source,
            "entry_point": task.spec.entry_point, "workloads": workloads_text(task), **backend_parts(task)}


def lessons_text(lessons: list[Insight]) -> str:
    """Recalled lessons for the planner, each with the code it changed (the snippets are what
    makes a lesson concrete enough to apply)."""
    return "\n".join(_lesson_text(i) for i in lessons) or "(none yet)"


def _lesson_text(insight: Insight) -> str:
    text = f"- ({insight.id}) {insight.compact()}"
    for label, code in (("before", insight.before), ("after", insight.after)):
        lines = textwrap.dedent(code.strip("\n")).splitlines()
        if lines:
            cut = "\n    ..." if len(lines) > SNIPPET_LINES else ""
            text += f"\n  {label}:\n" + "\n".join("    " + line for line in lines[:SNIPPET_LINES]) + cut
    return text


PLAN_FORMAT = {
    False: ("Each plan must start with a line `### Plan <number>: <short title>` followed by a few sentences\n"
            "that say exactly what to change and why it should be faster given the measurements."),
    True: ('Reply with one JSON object: {"plans": [{"title": "<short title>", "text": "<a few sentences that say '
           'exactly what to change and why it should be faster given the measurements>"}, ...]}.'),
}
LESSON_FORMAT = {False: "Reply with a single JSON object in a ```json block",
                 True: "Reply with a single JSON object"}

FIX_ADVICE = {
    "truncated": ("The previous reply was cut off at the token limit before the kernel was complete, so nothing "
                  "could be run. Write a much shorter reply: reason briefly, then give the kernel module alone, "
                  "with no explanation, no commented-out code and no alternative versions; keep the kernel compact "
                  "(no unused helpers, few autotune configs)."),
    "no_code": ("The previous reply held no complete kernel module. Implement the plan on the kernel above and "
                "return the whole module."),
}
FIX_DEFAULT = ("Fix the kernel so that it compiles, runs and matches the reference, keeping the plan's optimization "
               "where you can.")


def fix_attempt(request: FixRequest) -> str:
    """The failed kernel; after a reply with no kernel, the kernel the plan was to modify."""
    if request.source is not None:
        return f"## Kernel that failed\n```python\n{request.source}\n```"
    parent = request.parent_source if request.parent_source is not None else FROM_SCRATCH
    return f"## Kernel the plan modifies (the failed reply produced no kernel)\n```python\n{parent}\n```"
