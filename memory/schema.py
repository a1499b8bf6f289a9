"""An insight: one measured lesson, with its evidence and provenance."""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, Field

from accelopt.memory.features import near_rows


class Evidence(BaseModel):
    speedup: float              # child over parent, geometric mean over workloads
    spread: float | None = None  # relative IQR of the child's timings
    hardware: str
    timer: str                  # cuda_event, or interpreter_wall (never mixed with GPU lessons)
    task: str
    backend: str


class Provenance(BaseModel):
    run_id: str
    parent_id: str
    child_id: str
    iteration: int


class Recipe(BaseModel):
    """A change as measured data: the tuner's source `rewrites` (policies/rewrites.py, by name, in
    the order applied; none for a launch change alone), then from `start` (the launch tunables
    after those rewrites) the kernel reached `result`. The summarizer sets it from the two sources
    (never from model text) when the child is exactly the parent put through those rewrites with
    the child's launch configuration; the tuner reads it back."""

    kernel_class: str                # memory.features.kernel_class of the parent
    start: dict[str, int]
    result: dict[str, int]
    speedup_vs_baseline: float | None = None  # the child's, when the lesson was written
    rewrites: list[str] = []
    row: float | None = None  # the parent's scale, memory.features.row_length (None: not recorded)

    def moves(self) -> dict[str, tuple[int, int]]:
        return {k: (self.start[k], v) for k, v in self.result.items() if k in self.start and self.start[k] != v}

    def same_change(self, other: Recipe | None) -> bool:
        """The same change measured (on whatever task, at whatever speedup) on rows alike."""
        return other is not None and (self.kernel_class, self.rewrites, self.start, self.result) == \
            (other.kernel_class, other.rewrites, other.start, other.result) and near_rows(self.row, other.row)


def config_key(config: dict[str, int]) -> str:
    """A launch configuration as one string: store metadata holds scalars, and recall matches it."""
    return ",".join(f"{k}={v}" for k, v in sorted(config.items()))


InsightKind = Literal["positive", "negative"]


class Insight(BaseModel):
    id: str = ""
    kind: InsightKind
    title: str = Field(min_length=1)
    lesson: str = Field(min_length=1)
    bottleneck: str = "unknown"
    kernel_class: str = "unknown"
    before: str = ""
    after: str = ""
    support: int = 1              # measured pairs behind this lesson (near-duplicates merge into it)
    merged_ids: list[str] = []    # ids of the near-duplicate insights merged into this one
    author: str = "fallback"  # the summarizer model (e.g. openai:gpt-4.1), or fallback: built from measurements
    evidence: Evidence
    provenance: Provenance
    recipe: Recipe | None = None  # a launch-configuration change, as data

    def model_post_init(self, __context) -> None:
        if not self.id:
            key = f"{self.provenance.run_id}/{self.provenance.parent_id}/{self.provenance.child_id}"
            self.id = "ins-" + hashlib.sha1(key.encode()).hexdigest()[:12]

    def compact(self) -> str:
        """One line for a planner prompt."""
        sign = "avoid: " if self.kind == "negative" else ""
        rows = f", rows of {self.recipe.row:.0f}" if self.recipe is not None and self.recipe.row else ""
        return f"[{self.evidence.speedup:.2f}x on {self.evidence.task}{rows}] {sign}{self.title}: {self.lesson}"
