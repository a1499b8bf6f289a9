"""The records the graph keeps, typed: a candidate (every kernel evaluated), a plan, the
autotune summary, and the state's other values (usage ledger entries, insights, iteration
entries, the run record). They stay plain JSON-friendly dicts in the state (the checkpointer and
the dev server serialize it), so they are TypedDicts. The candidate is typed in parts (solution,
lineage, evaluation: tools/candidate_record.py, re-exported here); each way a candidate is born has
one constructor here, and a verdict is written into it in one of two ways: the harness's
(`with_measurement`), or the run's where no judge saw it (`with_outcome`), both checked against the
status's rules (candidate_record.evaluation_refusal). Where another
floor owns a record as a pydantic model (memory's Insight, summary.json's RunSummary), the
TypedDict here is the shape of its dump, and the dict is made from the model in one place
(`insight_record`, `summary_record`); tests/unit/test_records.py keeps the two alike."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal, NotRequired, Required, cast

from typing_extensions import TypedDict  # pydantic accepts it on every Python

from accelopt.memory.schema import Insight
from accelopt.nodes.context import RunContext
from accelopt.policies.interface import PlanDraft
from accelopt.tools.candidate_record import (  # noqa: F401 - re-exported: the node layer reads the parts here
    EVALUATION_FIELDS,
    UNJUDGED,
    AutotuneSummary,
    Candidate,
    CandidateEvaluation,
    CandidateKind,
    CandidateLineage,
    CandidateSolution,
    EvaluationStatus,
    checked_evaluation,
    evaluation_of,
    lineage_of,
    program_of,
    solution_of,
)
from accelopt.tools.harness.result import FIXABLE
from accelopt.tools.run_record import RunSummary


class Plan(TypedDict, total=False):
    """One plan of this iteration (state.plans), by id: what a policy proposed for a beam member."""

    id: str                 # i{iteration}.m{member}.p{plan}
    parent_id: str          # the beam member it modifies
    text: str
    moves: dict[str, list[int]]  # launch-tunable moves, knob -> [from, to] (the tuner's plans; else empty)
    configs: list[dict[str, int]]  # a shorter @triton.autotune list to write (the tuner's plans; else absent)
    rewrite: str            # a source rewrite by name (the tuner's plans, policies/rewrites.py; else absent)
    insight_ids: list[str]  # the recalled insights the planner saw


_OF_ITERATION = re.compile(r"i(\d+)\.")


def iteration_of(identifier: str) -> int:
    """The iteration a plan or kernel id names (i{iteration}.m{member}.p{plan}...); 0 for one
    that names none (the baseline, a seed)."""
    found = _OF_ITERATION.match(identifier or "")
    return int(found.group(1)) if found else 0


def plans_of(plans: list[Plan], iteration: int) -> list[Plan]:
    """The plans made for `iteration` (under the pipeline schedule the state also holds the next
    one's); a plan whose id names no iteration counts as the one at hand."""
    return [p for p in plans if iteration_of(str(p.get("id") or "")) in (0, iteration)]


def plans_after(plans: list[Plan], iteration: int) -> list[Plan]:
    """The plans made ahead for an iteration after `iteration` (the pipeline schedule)."""
    return [p for p in plans if iteration_of(str(p.get("id") or "")) > iteration]


def fixable(status: str | None, fixes_made: int, ctx: RunContext) -> bool:
    """An attempt the fix loop sends to the fixer: a fixable status with fixes left (F). The tuner
    fixes by undoing launch moves: with no kernel (no_code) there is nothing to undo."""
    if status == "no_code" and ctx.model_spec("fixer").provider == "tuner":
        return False
    return status in FIXABLE and fixes_made < ctx.fixes


class PendingFix(TypedDict):
    """The overlap schedule (RunContext.schedule): a failed attempt whose next fix runs beside the
    next iteration's first attempts (graph/routing.to_samples), with the plan it implements."""

    failed: Candidate
    plan: Plan


class PendingWrite(TypedDict):
    """--quorum: an attempt whose reply had not landed when its iteration moved on (status
    in_flight), with its plan, and for a fix the failed attempt it repairs; a branch of the next
    iteration asks the same call again and collects it."""

    attempt: Candidate
    plan: Plan
    failed: NotRequired[Candidate]


class LessonsDue(TypedDict):
    """The overlap schedule: the iteration whose lessons the summarizer distills beside the next
    iteration's planners, as it stood at its end (recall resets the state's plans)."""

    iteration: int
    plans: list[Plan]
    beam: list[str]


def plan_record(plan_id: str, parent_id: str, draft: PlanDraft, insight_ids: list[str]) -> Plan:
    plan = Plan(id=plan_id, parent_id=parent_id, text=draft.text, insight_ids=insight_ids,
                moves={k: [a, b] for k, (a, b) in draft.moves.items()})
    if draft.configs:
        plan["configs"] = [dict(c) for c in draft.configs]
    if draft.rewrite:
        plan["rewrite"] = draft.rewrite
    return plan


def plan_draft(plan: Plan) -> PlanDraft:
    """The plan as the policy wrote it (for the executor and fixer requests)."""
    return PlanDraft(plan["text"], {k: (a, b) for k, (a, b) in (plan.get("moves") or {}).items()},
                     tuple(dict(c) for c in plan.get("configs") or ()), plan.get("rewrite", ""))


def source_of(candidate: Candidate | CompactCandidate) -> str:
    """The source of a kernel that was evaluated: every measured candidate has one (only an
    attempt the policy wrote no code for has None)."""
    source = candidate["source"]
    assert source is not None, f"candidate {candidate['id']} was evaluated, so it has a source"
    return source


def baseline_candidate(source: str, from_scratch: bool) -> Candidate:
    """The task's baseline kernel, or its PyTorch reference when the task starts from scratch."""
    return Candidate(id="baseline", iteration=0, parent_id=None, plan_id=None, fix_of=None, fix_attempt=0,
                     kind="reference" if from_scratch else "kernel", source=source)


def seed_candidate(source: str, origin: str) -> Candidate:
    """A kernel made without a model (nodes/seeding.py): a beam member beside the baseline."""
    return Candidate(id="inductor", iteration=0, parent_id="baseline", plan_id=None, fix_of=None, fix_attempt=0,
                     kind="inductor_seed", plan_title=f"Inductor seed: {origin}", tokens=0, cost_usd=0.0,
                     source=source)


def attempt(attempt_id: str, iteration: int, parent_id: str, plan_id: str, plan_title: str,
            fix_of: str | None = None, fix_attempt: int = 0) -> Candidate:
    """A kernel to be written (executor) or repaired (fixer) by the policy; its source comes later."""
    return Candidate(id=attempt_id, iteration=iteration, parent_id=parent_id, plan_id=plan_id,
                     plan_title=plan_title, fix_of=fix_of, fix_attempt=fix_attempt, source=None, status=None,
                     error=None, tokens=0, cost_usd=0.0)


def autotuned_variant(rewrite: Candidate, number: int, iteration: int, parent_id: str, source: str,
                      moves: str, config_text: str) -> Candidate:
    """A launch configuration of a verified rewrite, searched by `--autotune`."""
    return Candidate(id=f"{rewrite['id']}.a{number}", iteration=iteration, parent_id=parent_id,
                     plan_id=rewrite.get("plan_id"), kind="autotuned", autotune_of=rewrite["id"],
                     plan_title=f"autotune: {moves.replace('`', '')}",
                     plan_text=f"(autotune) Set {moves} in the kernel launch. Resulting launch config: {config_text}.",
                     fix_of=None, fix_attempt=0, tokens=0, cost_usd=0.0, source=source)


# The harness never calls an interpreter time faster or slower (a CPU emulation's wall clock is not
# performance). A CPU run's search must still move to exercise the pipeline: there a child leads
# (or trails) only where every round has it this far ahead (behind), a difference in work such as
# 4x fewer loop trips; identical copies differ by up to about 10% between interpreter rounds.
INTERPRETER_LEAD = 1.25


def ahead(vs: Mapping[str, Any] | None, timer: str | None) -> bool:
    """A comparison (result.Comparison, as a dict) that puts the candidate first: the harness's
    `faster`, or on the interpreter an interval above INTERPRETER_LEAD."""
    if not vs:
        return False
    if timer == "interpreter_wall":
        return (vs.get("ci_low") or 0.0) > INTERPRETER_LEAD
    return bool(vs.get("faster"))


def behind(vs: Mapping[str, Any] | None, timer: str | None) -> bool:
    """The harness's `slower`, or on the interpreter an interval below 1 / INTERPRETER_LEAD."""
    if not vs:
        return False
    if timer == "interpreter_wall":
        return vs.get("ci_high") is not None and vs["ci_high"] < 1.0 / INTERPRETER_LEAD
    return bool(vs.get("slower"))


def _vs_parent(cand: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The comparison with its parent (services.measure: "parent", or "baseline" when the parent is it)."""
    versus = cand.get("versus") or {}
    return versus.get("parent") or versus.get("baseline")


def leads_parent(cand: Mapping[str, Any]) -> bool:
    """A verified child that may rank above its parent: `beats_parent` on a real timer."""
    if cand.get("timer") == "interpreter_wall":
        return ahead(_vs_parent(cand), "interpreter_wall")
    return bool(cand.get("beats_parent"))


def trails_parent(cand: Mapping[str, Any]) -> bool:
    if cand.get("timer") == "interpreter_wall":
        return behind(_vs_parent(cand), "interpreter_wall")
    return bool(cand.get("loses_to_parent"))


def with_measurement(candidate: Candidate, measured: dict[str, Any]) -> Candidate:
    """The candidate with the harness's fields attached (a new record; the input is not changed):
    fields of its evaluation only, whose status and fields agree (candidate_record.evaluation_refusal),
    else ValueError naming the candidate and the rule."""
    unknown = set(measured) - EVALUATION_FIELDS
    if unknown:  # a field the record does not declare would silently escape the docs and the tests
        raise ValueError(f"measurement fields not declared on CandidateEvaluation: {sorted(unknown)}")
    return checked_evaluation(cast(Candidate, {**candidate, **measured}))


def with_outcome(candidate: Candidate, status: EvaluationStatus, error: str | None,
                 **solution: Any) -> Candidate:
    """The candidate with a status no judge gave (a new record): the model's reply held no kernel
    (no_code, truncated), its call failed (llm_error), was not paid for (not_sent), had not landed
    (in_flight) or was never collected (cancelled), with why; `solution`: what the reply that landed
    cost (tokens, cost_usd). Checked as with_measurement is."""
    if status not in UNJUDGED:
        raise ValueError(f"candidate {candidate.get('id')}: {status} is the judge's to give, not the run's")
    unknown = set(solution) - set(CandidateSolution.__annotations__)
    if unknown:
        raise ValueError(f"not fields of a candidate's solution: {sorted(unknown)}")
    return checked_evaluation(cast(Candidate, {**candidate, **solution, "status": status, "error": error}))


class CompactCandidate(TypedDict):
    """The part of a candidate a branch is sent about its parent, the baseline or the beam member
    it plans for (state.compact): every key present, None where the candidate has none."""

    id: str
    kind: CandidateKind | None
    plan_title: str | None
    source: str | None
    status: EvaluationStatus | None
    workloads: dict[str, dict[str, Any]] | None
    speedup: float | None
    versus: dict[str, dict[str, Any]] | None
    profile: str | None
    timer: str | None
    pct_peak: float | None
    iteration: int | None


# ---------------------------------------------------------------- the usage ledger (state.usage)

class Usage(TypedDict, total=False):
    """One model call (tools/llm.usage_record; the LLM policy adds prompt_chars, and `requests`
    where a schema call and its text fallback are one record). The tuner makes none. Keys that
    are not required were added over time, or are set by some paths only."""

    role: Required[str]            # planner, executor, fixer, summarizer
    model: Required[str]           # provider:name
    candidate_id: Required[str | None]
    iteration: Required[int | None]
    input_tokens: Required[int]
    output_tokens: Required[int]
    cost_usd: Required[float]
    reasoning_tokens: Required[int]
    estimated: bool                # the server sent no token counts: counted from an estimate
    priced: bool                   # False: a model with no price, counted as $0
    prompt_chars: int              # the prompt's size (system + user)
    requests: int                  # requests that reached the server for this record (absent: 1)
    call: str                      # the call's own id: a replayed record (a resume) is counted once


def usage_entries(usage: Mapping[str, Any] | None) -> list[Usage]:
    """A policy answer's usage (policies.interface.Usage) as the state's ledger entries: one, or
    none where the policy made no call."""
    return [cast(Usage, dict(usage))] if usage else []


# ---------------------------------------------------------------- insights (state.recalled, state.insights)

class EvidenceRecord(TypedDict):
    speedup: float
    spread: float | None
    hardware: str
    timer: str
    task: str
    backend: str


class ProvenanceRecord(TypedDict):
    run_id: str
    parent_id: str
    child_id: str
    iteration: int


class RecipeRecord(TypedDict):
    kernel_class: str
    start: dict[str, int]
    result: dict[str, int]
    speedup_vs_baseline: float | None
    rewrites: list[str]
    row: float | None


class InsightRecord(TypedDict):
    """memory.schema.Insight, dumped: a lesson recalled for a beam member (state.recalled)."""

    id: str
    kind: Literal["positive", "negative"]
    title: str
    lesson: str
    bottleneck: str
    kernel_class: str
    before: str
    after: str
    support: int
    merged_ids: list[str]
    author: str
    evidence: EvidenceRecord
    provenance: ProvenanceRecord
    recipe: RecipeRecord | None


class LearnedInsight(InsightRecord):
    """A lesson this run wrote (state.insights), with the store's id now holding it: its own when
    new, an older one's when merged (None without a memory)."""

    stored_as: str | None


def insight_record(insight: Insight) -> InsightRecord:
    return cast(InsightRecord, insight.model_dump())


def learned_insight(insight: Insight, stored_as: str | None) -> LearnedInsight:
    return cast(LearnedInsight, {**insight_record(insight), "stored_as": stored_as})


# ---------------------------------------------------------------- iterations (state.history, summary.iterations)

class IterationRecord(TypedDict):
    """The selector's record of a finished iteration (tools/run_record.IterationRecord)."""

    iteration: int
    evaluated: int
    verified: int
    best_id: str
    best_speedup: float | None
    beam: list[str]
    tokens: int
    cost_usd: float


# planner_deferred: a call ahead (the pipeline schedule) the budget could not admit beside the
# kernels in flight; the iteration is planned again when it begins, with nothing else in flight
PlannerEventKind = Literal["planner_failed", "planner_skipped", "planner_empty", "planner_deferred"]


class PlannerEvent(TypedDict):
    """A planner call that failed, was skipped or deferred for the budget, or answered no plan
    (tools/run_record.IterationEvent)."""

    iteration: int
    event: PlannerEventKind
    member: str | None
    error: str | None


def planner_event(iteration: int, event: PlannerEventKind, member: str, error: str) -> PlannerEvent:
    return PlannerEvent(iteration=iteration, event=event, member=member, error=error)


# an entry with `event` is a planner event, any other an iteration's record
HistoryEntry = IterationRecord | PlannerEvent


# ---------------------------------------------------------------- the run record (state.summary)

class UsageBucket(TypedDict):
    input_tokens: int
    output_tokens: int
    cost_usd: float
    calls: int


class UsageTotals(UsageBucket):
    """tools/llm_spec.totals of the ledger: overall, and per role, iteration and candidate."""

    estimated_calls: NotRequired[int]
    unpriced_calls: NotRequired[int]
    by_role: dict[str, UsageBucket]
    by_iteration: NotRequired[dict[str, UsageBucket]]
    by_candidate: NotRequired[dict[str, UsageBucket]]


class AutotuneSplit(TypedDict):
    """What --autotune added apart from the rewrites (tools/run_record.AutotuneSummary)."""

    rewrites_tuned: int
    variants: int
    gain_geomean: float | None
    best_is_autotuned: bool
    best_rewrite_speedup: float | None
    best_autotune_gain: float


class TorchCompileStanding(TypedDict):
    """The best kernel timed interleaved with torch.compile(reference); speedups > 1: the best is faster."""

    speedup: float
    ci_low: float | None
    ci_high: float | None
    rounds: int | None
    verdict: str                 # faster | slower | within noise
    eager: float | None          # over eager PyTorch
    device_name: str | None
    mode: str                    # torch.compile's mode (reference_kernel.COMPILE_MODES)


class NotMeasured(TypedDict):
    not_measured: str            # why there is no standing against torch.compile


class Summary(TypedDict):
    """summary.json (tools/run_record.RunSummary, dumped) as of the last iteration. Keys that are
    not required were added to the file over time (older states and files lack them);
    versus_torch_compile comes with the standing node, at the run's end."""

    task_dir: str
    iteration: int
    stop_reason: str | None
    best_id: str
    best_speedup: float | None
    baseline_kind: NotRequired[str]           # kernel | reference (a from-scratch run)
    best_speedup_vs_parent: NotRequired[float | None]
    best_parent_id: NotRequired[str | None]
    timer: str | None
    device_name: str | None
    best_pct_peak: float | None
    best_pct_achievable: float | None
    best_pct_of_copy: NotRequired[float | None]
    beam: list[str]
    failure: NotRequired[str | None]
    candidates_evaluated: int
    statuses: dict[str, int]
    usage: UsageTotals
    iterations: list[HistoryEntry]
    insights: int
    autotune: NotRequired[AutotuneSplit | None]
    note: str | None
    versus_torch_compile: NotRequired[TorchCompileStanding | NotMeasured]
    best_figure: NotRequired[dict[str, Any] | None]   # tools/best_figure.BestFigure: best_speedup's, pooled
    confirmations: NotRequired[list[dict[str, Any]]]  # tools/best_figure.Confirmation each
    not_confirmed: NotRequired[str | None]


def summary_record(summary: RunSummary) -> Summary:
    """The run record as the state keeps it (summary.json's contents)."""
    return cast(Summary, summary.dump())
