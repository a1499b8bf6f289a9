"""The search's schedule (RunContext.schedule): one type that owns what each schedule does.

Every place that behaves differently by schedule (graph/routing.py, graph/progress.py, the recall,
the selector, the settings' checks) asks the schedule for a trait, never compares its name. Each
member states every trait in `_TRAITS` (a `Traits` has no defaults), and the module refuses to
import if a member has none, so a new schedule cannot take another's behaviour by accident.

- `beam`, AccelOpt's published schedule: each iteration waits for its fixes and its lessons;
  deterministic call for call.
- `overlap`: a failed first attempt's fix runs beside the next iteration's first attempts, and an
  iteration's lessons beside the next one's planners.
- `pipeline` (the default): overlap, and from the second iteration on the next iteration's
  planners run beside this one's kernels.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

# Where an iteration's lessons are distilled: right after its selection, beside the next
# iteration's planners, or beside its kernels.
Lessons = Literal["after_selection", "beside_planners", "beside_kernels"]


@dataclass(frozen=True)
class Traits:
    """What a schedule does; no field has a default, so each member must state each one."""

    defers_fixes: bool   # a failed first attempt ends its branch; its fix runs in the next iteration
    lessons: Lessons     # where the summarizer runs
    plans_ahead: bool    # the next iteration's planners run beside this one's kernels
    allows_quorum: bool  # an iteration may move on at a quorum of replies (--quorum)
    allows_review: bool  # a pause between plans and kernels is left to review plans in


class Schedule(StrEnum):
    BEAM = "beam"
    OVERLAP = "overlap"
    PIPELINE = "pipeline"

    @property
    def traits(self) -> Traits:
        return _TRAITS[self]

    @property
    def defers_fixes(self) -> bool:
        return self.traits.defers_fixes

    @property
    def lessons(self) -> Lessons:
        return self.traits.lessons

    @property
    def plans_ahead(self) -> bool:
        return self.traits.plans_ahead

    @property
    def allows_quorum(self) -> bool:
        return self.traits.allows_quorum

    @property
    def allows_review(self) -> bool:
        return self.traits.allows_review


_TRAITS: dict[Schedule, Traits] = {
    Schedule.BEAM: Traits(defers_fixes=False, lessons="after_selection", plans_ahead=False, allows_quorum=False,
                          allows_review=True),
    Schedule.OVERLAP: Traits(defers_fixes=True, lessons="beside_planners", plans_ahead=False, allows_quorum=True,
                             allows_review=True),
    Schedule.PIPELINE: Traits(defers_fixes=True, lessons="beside_kernels", plans_ahead=True, allows_quorum=True,
                              allows_review=False),
}
_MISSING = [s.value for s in Schedule if s not in _TRAITS]
if _MISSING:  # a member without traits would fail mid-run; say so at import
    raise ImportError(f"schedule(s) {', '.join(_MISSING)} state no Traits in nodes/schedule.py _TRAITS")

DEFAULT_SCHEDULE = Schedule.PIPELINE


def schedules_with(trait: str) -> list[str]:
    """The schedules' names that have a boolean trait, for a refusal that says which to use."""
    return [s.value for s in Schedule if getattr(s.traits, trait)]
