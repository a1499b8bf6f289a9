"""The records the graph keeps, typed: a candidate (every kernel evaluated), a plan and the
autotune summary. They stay plain JSON-friendly dicts in the state (the checkpointer and the dev
server serialize it), so they are TypedDicts; each way a candidate is born has one constructor
here, and a measurement is attached in one way (`with_measurement`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, cast

from typing_extensions import TypedDict  # pydantic accepts it on every Python

from accelopt.policies.interface import PlanDraft

CandidateKind = Literal["kernel", "reference", "autotuned", "inductor_seed"]


class AutotuneSummary(TypedDict):
    tried: int
    verified: int
    best_id: str
    gain: float  # the best variant's speedup over the rewrite's, both measured against the baseline


class Plan(TypedDict, total=False):
    id: str                 # i{iteration}.m{member}.p{plan}
    parent_id: str          # the beam member it modifies
    text: str
    moves: dict[str, list[int]]  # launch-tunable moves, knob -> [from, to] (the tuner's plans; else empty)
    configs: list[dict[str, int]]  # a shorter @triton.autotune list to write (the tuner's plans; else absent)
    rewrite: str            # a source rewrite by name (the tuner's plans, policies/rewrites.py; else absent)
    insight_ids: list[str]  # the recalled insights the planner saw


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


class Candidate(TypedDict, total=False):
    # --- identity and lineage (set when it is born)
    id: str                 # i{iteration}.m{member}.p{plan}.k{sample}[.f{fix}][.a{variant}], or "baseline"
    iteration: int
    kind: CandidateKind     # absent for LLM/tuner rewrites (a "kernel")
    parent_id: str | None
    plan_id: str | None
    plan_title: str
    plan_text: str          # autotuned variants: the configuration change, as a plan would say it
    fix_of: str | None      # the failed attempt this one repairs
    fix_attempt: int
    autotune_of: str        # autotuned variants: the rewrite whose launch was searched
    source: str | None
    tokens: int
    cost_usd: float
    # --- the harness's verdict (with_measurement)
    status: str | None      # verified, compile_error, wrong_output, cheat_suspected, no_code, llm_error, ...
    error: str | None
    duplicate_of: str       # status duplicate: the candidate that evaluated the same program first
    device: str
    device_name: str | None
    timer: str | None       # cuda_event | interpreter_wall
    workloads: dict[str, dict[str, Any]]  # per workload: median_us, iqr_us, kernel_us, ..., pct_peak, bound
    flags: list[str]        # above_estimated_roofline, over_10x_reverified, timing_contradicted, unaudited
    findings: list[dict[str, Any]]  # static advice
    evidence: list[str]     # the runtime checks the verdict rests on
    kernels_seen: list[str]
    audit: dict[str, Any] | None
    eval_s: float | None
    versus: dict[str, dict[str, Any]]     # comparator -> speedup and interval over interleaved rounds
    compared_us: dict[str, dict[str, float]]  # comparator -> workload -> median µs, same rounds
    speedup: float | None   # geomean over workloads vs the baseline
    speedup_vs_parent: float | None
    beats_parent: bool
    loses_to_parent: bool
    pct_peak: float | None
    pct_achievable: float | None
    pct_of_copy: float | None  # mean over memory-bound workloads: % of a same-size device copy's speed
    max_abs_err: float | None
    max_rel_err: float | None
    profile: str | None     # ncu / torch.profiler / neuron-profile summary for the planner
    node: str               # on a Ray cluster: the node that evaluated it (IP/node id)
    # --- after autotuning (the rewrite only)
    autotune: AutotuneSummary


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
    """The candidate with the harness's fields attached (a new record; the input is not changed)."""
    unknown = set(measured) - set(Candidate.__annotations__)
    if unknown:  # a field the record does not declare would silently escape the docs and the tests
        raise ValueError(f"measurement fields not declared on Candidate: {sorted(unknown)}")
    return cast(Candidate, {**candidate, **measured})
