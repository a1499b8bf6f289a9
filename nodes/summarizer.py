"""summarizer: turn this iteration's measured slow->fast (and fast->slow) pairs into insights
and hand them to memory. A reply that is empty or malformed yields a plain insight built from
the measurements and the diff, never a crash and never an empty lesson.

A pair teaches where the child is at least `POSITIVE` (1.04x) over its parent and beyond noise,
or at most `NEGATIVE` (1/1.15); the pair baseline -> a new best is added whenever the best changes. Only GPU
timings teach unless `learn_from_interpreter` is set: interpreter times are noise."""

from __future__ import annotations

import difflib
from typing import Any

from langchain_core.runnables.config import ContextThreadPoolExecutor
from langgraph.runtime import Runtime
from pydantic import ValidationError

from accelopt.memory.features import kernel_class, row_length
from accelopt.memory.schema import Evidence, Insight, InsightKind, Provenance, Recipe
from accelopt.nodes.common import task_of
from accelopt.nodes.context import RunContext
from accelopt.nodes.records import (
    Candidate,
    Plan,
    Usage,
    ahead,
    leads_parent,
    learned_insight,
    source_of,
    trails_parent,
    usage_entries,
)
from accelopt.nodes.services import open_store
from accelopt.nodes.state import RunState
from accelopt.policies import rewrites
from accelopt.policies.choice import policy_for
from accelopt.policies.interface import LessonDraft, PolicyError, SummarizeRequest
from accelopt.policies.replies import plan_title
from accelopt.tools.rundir import append_insights
from accelopt.tools.tunables import config_of

POSITIVE = 1.04         # child over parent, and beyond noise
NEGATIVE = 1 / 1.15     # child regressed this much
MAX_PER_ITERATION = 8


def measured_pairs(state: RunState, ctx: RunContext) -> list[tuple[Candidate, Candidate, InsightKind, float]]:
    """(parent, child, kind, measured child/parent ratio) for this iteration's clear wins and
    regressions, plus the whole way from the baseline to a new best kernel: the step that made
    a new best is often small, but the configuration it reached is the lesson a later run wants."""
    candidates = state["candidates"]
    pairs: list[tuple[Candidate, Candidate, InsightKind, float]] = []
    for child in candidates.values():
        if child.get("iteration") != state["iteration"] or child.get("status") != "verified":
            continue
        if "unaudited" in (child.get("flags") or []):
            continue  # too good to be true and never audited: no lesson may rest on it
        if child.get("timer") == "interpreter_wall" and not ctx.learn_from_interpreter:
            continue  # interpreter times say nothing about GPU performance
        parent_id, ratio = child["parent_id"], child.get("speedup_vs_parent")
        assert parent_id is not None, f"{child['id']}: an iteration's kernel has a parent (only the baseline has none)"
        if ratio is None or candidates[parent_id].get("kind") == "reference":
            continue  # a first kernel against eager PyTorch teaches nothing about rewriting kernels
        # beyond noise (on the interpreter, which decides nothing: a difference in work, records.ahead)
        if ratio >= POSITIVE and leads_parent(child):
            pairs.append((candidates[parent_id], child, "positive", ratio))
        elif ratio <= NEGATIVE and trails_parent(child):
            pairs.append((candidates[parent_id], child, "negative", ratio))
    pairs.sort(key=lambda p: -abs(p[3] - 1.0))
    pairs = pairs[:MAX_PER_ITERATION]
    best, baseline = candidates[state["beam"][0]], candidates[state["baseline_id"]]
    vs_baseline = (best.get("versus") or {}).get("baseline") or {}
    best_speedup = best.get("speedup") or 0.0
    if (best.get("iteration") == state["iteration"] and best.get("parent_id") != baseline["id"]
            and baseline.get("kind") != "reference" and best_speedup >= POSITIVE
            and ahead(vs_baseline, best.get("timer"))
            and (best.get("timer") != "interpreter_wall" or ctx.learn_from_interpreter)):
        pairs.append((baseline, best, "positive", best_speedup))
    return pairs


def _changed_lines(before: str, after: str) -> tuple[str, str]:
    diff = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0))
    removed = [l[1:] for l in diff if l.startswith("-") and not l.startswith("---")]
    added = [l[1:] for l in diff if l.startswith("+") and not l.startswith("+++")]
    return "\n".join(removed[:8]), "\n".join(added[:8])


def recipe_of(parent_source: str, child_source: str, speedup_vs_baseline: float | None,
              row: float | None = None) -> Recipe | None:
    """The change from parent to child as data, when it is the tuner's rewrites (none or several)
    and a launch configuration alone (rewrites.chain_between): the child is exactly that. `row`:
    the parent's scale (memory.features.row_length), which says where the recipe may transfer."""
    found = rewrites.chain_between(parent_source, child_source)
    if found is None:
        return None
    chain, rewritten = found
    before, after = config_of(rewritten), config_of(child_source)
    if not chain and (not before or before == after):
        return None  # no change, or nothing a launch could carry
    return Recipe(kernel_class=kernel_class(parent_source), start=before, result=after,
                  speedup_vs_baseline=speedup_vs_baseline, rewrites=chain, row=row)


def bottleneck(candidate: Candidate) -> str:
    """What limited a kernel: the profile's reading, else the roofline's bound per workload."""
    profile = candidate.get("profile") or ""
    if "reading: " in profile:
        return profile.split("reading: ", 1)[1].splitlines()[0]
    bound = sorted({f"{t['bound']}-bound" for t in (candidate.get("workloads") or {}).values() if t.get("bound")})
    return ", ".join(bound) or "unknown"


def build_insight(parent: Candidate, child: Candidate, kind: InsightKind, plan_text: str, draft: dict[str, str],
                  evidence: Evidence, provenance: Provenance, author: str) -> Insight:
    """The insight from a policy's lesson text, filled in from the measurements where the text
    is missing or unusable (then the author is "fallback")."""
    before, after = _changed_lines(parent.get("source") or "", child.get("source") or "")
    fallback_title = plan_title(plan_text) or "kernel rewrite"
    ratio = evidence.speedup
    fallback: dict[str, Any] = {  # Insight's fields by name, as is a draft's: Insight validates them
        "kernel_class": kernel_class(parent.get("source") or ""),
        "bottleneck": bottleneck(parent),
        "title": fallback_title if kind == "positive" else f"Avoid: {fallback_title}",
        "lesson": (f"On {evidence.task} ({evidence.hardware}) this change measured {ratio:.2f}x against its "
                   f"parent. Plan: {' '.join(plan_text.split())[:400]}"),
        "before": before, "after": after,
    }
    recipe = recipe_of(parent.get("source") or "", child.get("source") or "", child.get("speedup"),
                       row=row_length(parent.get("workloads")))
    if draft:
        try:
            return Insight(kind=kind, author=author, evidence=evidence, provenance=provenance, recipe=recipe,
                           **{**fallback, **draft})
        except ValidationError:
            pass
    return Insight(kind=kind, author="fallback", evidence=evidence, provenance=provenance, recipe=recipe, **fallback)


def summarizer(state: RunState, runtime: Runtime[RunContext]) -> RunState:
    ctx = runtime.context
    task = task_of(state["task_dir"])
    plans = {p["id"]: p for p in state.get("plans", [])}
    policy = policy_for(ctx, "summarizer", state.get("run_dir"))
    pairs = measured_pairs(state, ctx)

    def lesson(pair: tuple[Candidate, Candidate, InsightKind, float]) -> tuple[Insight, list[Usage]]:
        parent, child, kind, ratio = pair
        # an autotuned variant carries its own move; a rewrite, the plan it implemented
        plan_text = child.get("plan_text") or plans.get(child["plan_id"] or "", Plan()).get("text", "")
        if parent["id"] != child["parent_id"]:
            plan_text = (f"Every change from the baseline to the best kernel so far ({child['id']}); "
                         f"last step: {plan_text}")
        timer = child["timer"]
        assert timer is not None, f"{child['id']} is verified, so it was timed"
        spread = max((t["iqr_us"] / t["median_us"] for t in child["workloads"].values() if t["median_us"]),
                     default=None)
        evidence = Evidence(speedup=ratio, spread=spread, task=task.name,
                            backend=task.spec.backend, hardware=child.get("device_name") or child["device"],
                            timer=timer)
        provenance = Provenance(run_id=state.get("run_dir") or "in-memory", parent_id=parent["id"],
                                child_id=child["id"], iteration=state["iteration"])
        request = SummarizeRequest(
            task=task, iteration=state["iteration"], child_id=child["id"], kind=kind, hardware=evidence.hardware,
            plan_text=plan_text, parent_source=source_of(parent), child_source=source_of(child),
            speedup_vs_parent=evidence.speedup, speedup_vs_baseline=child.get("speedup") or 1.0,
            workloads=list(child["workloads"]), bottleneck=bottleneck(parent))
        try:
            draft = policy.summarize(request)
        except PolicyError:
            draft = LessonDraft({})
        return (build_insight(parent, child, kind, plan_text, draft.fields, evidence, provenance, policy.label),
                usage_entries(draft.usage))

    # the pairs' lessons are asked at once (a model's replies take seconds each), in pair order;
    # the context (the trace's parent run, the stream writer) goes with each call
    with ContextThreadPoolExecutor(max_workers=max(1, len(pairs))) as pool:
        answered = list(pool.map(lesson, pairs))
    insights = [insight for insight, _ in answered]
    usage = [entry for _, entries in answered for entry in entries]
    store = open_store(ctx)
    held = store.add(insights) if store is not None else [None] * len(insights)
    append_insights(state.get("run_dir"), insights)
    # stored_as: the store's id now holding the lesson (its own when new, an older one's when merged)
    return {"insights": [learned_insight(i, h) for i, h in zip(insights, held)], "usage": usage}
