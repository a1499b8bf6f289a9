"""The policy interface: what the planner, executor, fixer and summarizer ask of a policy, and
what comes back, as typed records.

Two policies implement it: an LLM (llm.py renders prompts from the requests and parses the
replies) and the tuner (tuner.py reads the requests directly). The nodes build the
requests and turn the results into candidates, plans and insights; no policy sees graph state,
and no prompt text is an interface.

A policy that fails for good (an endpoint that refuses, retries spent) raises `PolicyError`;
the node turns it into a failed candidate or an empty plan list, never a crash.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, Protocol

from typing_extensions import TypedDict

from accelopt.memory.schema import Insight
from accelopt.tools.task import Task

Usage = dict[str, Any]  # one ledger record: role, model, tokens, cost (tools/llm.usage_record)


class PolicyError(RuntimeError):
    """The policy could not answer (after retries, or a non-transient error)."""


class MeasuredKernel(TypedDict):
    """A kernel already measured in this run, as the planner sees it (it travels in Send)."""

    id: str
    title: str               # what it tried (its plan's title), or "the starting kernel"
    status: str              # verified, compile_error, ..., or pending
    parent_id: str | None
    speedup_vs_parent: float | None
    speedup: float | None    # over the task's baseline
    config: dict[str, int]   # its launch tunables (empty when it exposes none)
    workload_speedups: NotRequired[dict[str, float]]  # per workload over the baseline, same rounds (verified)
    # verified: against its parent beyond the noise floor ("faster", "slower") or not ("within noise")
    versus_parent: NotRequired[Literal["faster", "slower", "within noise"]]


@dataclass(frozen=True)
class PlanDraft:
    """One plan as a policy wrote it. `moves` (knob -> (from, to)) is set by a policy that works
    in launch tunables (the tuner); an LLM's plan is prose only."""

    text: str
    moves: dict[str, tuple[int, int]] = field(default_factory=dict)
    # a shorter @triton.autotune list to write instead of moves (the tuner: per-workload winners)
    configs: tuple[dict[str, int], ...] = ()
    rewrite: str = ""  # a source rewrite to apply instead (the tuner: rewrites.py, by name)


@dataclass(frozen=True)
class PlanRequest:
    task: Task
    iteration: int
    member_id: str
    source: str | None            # the beam member's kernel; None when it is the PyTorch reference
    measurements: str             # its measurements, as text
    tried: list[MeasuredKernel]   # every kernel measured so far in this run, oldest first
    lessons: list[Insight]        # recalled from memory, most relevant first
    n: int                        # how many plans
    row: float | None = None      # the member's scale (memory.features.row_length); None: unknown


@dataclass(frozen=True)
class WriteRequest:
    task: Task
    iteration: int
    candidate_id: str
    source: str | None            # the kernel to modify; None when starting from the reference
    plan: PlanDraft


@dataclass(frozen=True)
class FixRequest:
    task: Task
    iteration: int
    candidate_id: str             # the new attempt's id
    plan: PlanDraft
    parent_source: str | None     # the kernel the plan modifies
    source: str | None            # the attempt that failed; None when no kernel was produced
    status: str                   # its status: no_code and truncated (cut off at the token limit)
                                  # come from the reply, the others from the harness
    error: str
    findings: str                 # static advice, as text


@dataclass(frozen=True)
class SummarizeRequest:
    task: Task
    iteration: int
    child_id: str
    kind: str                     # positive (the child was faster) or negative (a regression)
    hardware: str
    plan_text: str
    parent_source: str
    child_source: str
    speedup_vs_parent: float
    speedup_vs_baseline: float
    workloads: list[str]
    bottleneck: str               # what limited the parent


@dataclass(frozen=True)
class Plans:
    plans: list[PlanDraft]
    usage: Usage | None = None
    note: str = ""                # why there are none, when there are none


@dataclass(frozen=True)
class Kernel:
    source: str | None            # the complete module, or None
    note: str = ""                # why there is none, in the policy's own words
    usage: Usage | None = None
    status: Literal["no_code", "truncated"] = "no_code"  # the attempt's status when there is none: no_code, or truncated
                                  # (the reply was cut off at the model's token limit)


@dataclass(frozen=True)
class LessonDraft:
    """The text of a lesson; the summarizer node adds the evidence, the provenance and (for a
    launch-configuration change) the recipe, all from measurements."""

    fields: dict[str, str]        # any of title, lesson, bottleneck, kernel_class, before, after
    usage: Usage | None = None


class Policy(Protocol):
    """What every policy answers. `label` names it in the usage ledger and in lesson authorship."""

    label: str

    def plan(self, request: PlanRequest) -> Plans: ...

    def write(self, request: WriteRequest) -> Kernel: ...

    def fix(self, request: FixRequest) -> Kernel: ...

    def summarize(self, request: SummarizeRequest) -> LessonDraft: ...
