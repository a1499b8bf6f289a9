"""summarizer: turn this iteration's measured slow->fast (and fast->slow) pairs into insights
and hand them to memory. A reply that is empty or malformed yields a plain insight built from
the measurements and the diff, never a crash and never an empty lesson."""

from __future__ import annotations

import difflib
import json
import re

from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.runtime import Runtime
from pydantic import ValidationError

from accelopt.nodes.context import RunContext
from accelopt.nodes.state import RunState
from accelopt.memory.features import kernel_class
from accelopt.memory.schema import Evidence, Insight, Provenance
from accelopt.nodes.common import chat_model, render, task_of
from accelopt.nodes.services import open_store
from accelopt.tools.codeparse import plan_title, strip_reasoning
from accelopt.tools.llm import LLMCallError, call_model
from accelopt.tools.rundir import append_insights

POSITIVE = 1.04         # child over parent, and beyond noise
NEGATIVE = 1 / 1.15     # child regressed this much
MAX_PER_ITERATION = 8


def measured_pairs(state: RunState, ctx: RunContext) -> list[tuple[dict, dict, str, float]]:
    """(parent, child, kind, measured child/parent ratio) for this iteration's clear wins and
    regressions, plus the whole way from the baseline to a new best kernel: the step that made
    a new best is often small, but the configuration it reached is the lesson a later run wants."""
    candidates = state["candidates"]
    pairs = []
    for child in candidates.values():
        if child.get("iteration") != state["iteration"] or child.get("status") != "verified":
            continue
        if "unaudited" in (child.get("flags") or []):
            continue  # too good to be true and never audited: no lesson may rest on it
        if child.get("timer") == "interpreter_wall" and not ctx.learn_from_interpreter:
            continue  # interpreter times say nothing about GPU performance
        ratio = child.get("speedup_vs_parent")
        if ratio is None or candidates[child["parent_id"]].get("kind") == "reference":
            continue  # a first kernel against eager PyTorch teaches nothing about rewriting kernels
        if ratio >= POSITIVE and child.get("beats_parent"):
            pairs.append((candidates[child["parent_id"]], child, "positive", ratio))
        elif ratio <= NEGATIVE and child.get("loses_to_parent"):
            pairs.append((candidates[child["parent_id"]], child, "negative", ratio))
    pairs.sort(key=lambda p: -abs(p[3] - 1.0))
    pairs = pairs[:MAX_PER_ITERATION]
    best, baseline = candidates[state["beam"][0]], candidates[state["baseline_id"]]
    vs_baseline = (best.get("versus") or {}).get("baseline") or {}
    if (best.get("iteration") == state["iteration"] and best.get("parent_id") != baseline["id"]
            and baseline.get("kind") != "reference" and (best.get("speedup") or 0) >= POSITIVE
            and vs_baseline.get("faster") and (best.get("timer") != "interpreter_wall" or ctx.learn_from_interpreter)):
        pairs.append((baseline, best, "positive", best["speedup"]))
    return pairs


def _changed_lines(before: str, after: str) -> tuple[str, str]:
    diff = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0))
    removed = [l[1:] for l in diff if l.startswith("-") and not l.startswith("---")]
    added = [l[1:] for l in diff if l.startswith("+") and not l.startswith("+++")]
    return "\n".join(removed[:8]), "\n".join(added[:8])


def _parse_reply(reply: str) -> dict | None:
    text = strip_reasoning(reply)
    match = re.search(r"```(?:json)?\s*(\{.*?\})\s*```", text, re.DOTALL) or re.search(r"(\{.*\})", text, re.DOTALL)
    if not match:
        return None
    try:
        data = json.loads(match.group(1))
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def bottleneck(candidate: dict) -> str:
    """What limited a kernel: the profile's reading, else the roofline's bound per workload."""
    profile = candidate.get("profile") or ""
    if "reading: " in profile:
        return profile.split("reading: ", 1)[1].splitlines()[0]
    bound = sorted({f"{t['bound']}-bound" for t in (candidate.get("workloads") or {}).values() if t.get("bound")})
    return ", ".join(bound) or "unknown"


def build_insight(parent: dict, child: dict, kind: str, plan_text: str, reply: dict | None,
                  evidence: Evidence, provenance: Provenance, author: str) -> Insight:
    before, after = _changed_lines(parent.get("source") or "", child.get("source") or "")
    fallback_title = plan_title(plan_text) or "kernel rewrite"
    ratio = evidence.speedup
    fallback = {
        "kernel_class": kernel_class(parent.get("source") or ""),
        "bottleneck": bottleneck(parent),
        "title": fallback_title if kind == "positive" else f"Avoid: {fallback_title}",
        "lesson": (f"On {evidence.task} ({evidence.hardware}) this change measured {ratio:.2f}x against its "
                   f"parent. Plan: {' '.join(plan_text.split())[:400]}"),
        "before": before, "after": after,
    }
    if reply:
        try:
            return Insight(kind=kind, author=author, evidence=evidence, provenance=provenance,
                           **{**fallback, **{k: str(v) for k, v in reply.items()
                                             if k in ("title", "lesson", "bottleneck", "kernel_class", "before",
                                                      "after") and str(v).strip() not in ("", "unknown")}})
        except ValidationError:
            pass
    return Insight(kind=kind, author="fallback", evidence=evidence, provenance=provenance, **fallback)


def summarizer(state: RunState, runtime: Runtime[RunContext]) -> dict:
    ctx = runtime.context
    task = task_of(state["task_dir"])
    plans = {p["id"]: p for p in state.get("plans", [])}
    insights, usage = [], []
    for parent, child, kind, ratio in measured_pairs(state, ctx):
        # an autotuned variant carries its own move; a rewrite, the plan it implemented
        plan_text = child.get("plan_text") or plans.get(child["plan_id"], {}).get("text", "")
        if parent["id"] != child["parent_id"]:
            plan_text = (f"Every change from the baseline to the best kernel so far ({child['id']}); "
                         f"last step: {plan_text}")
        spread = max((t["iqr_us"] / t["median_us"] for t in child["workloads"].values() if t["median_us"]),
                     default=None)
        evidence = Evidence(speedup=ratio, spread=spread, task=task.name,
                            backend=task.spec.backend, hardware=child.get("device_name") or child["device"],
                            timer=child["timer"])
        provenance = Provenance(run_id=state.get("run_dir") or "in-memory", parent_id=parent["id"],
                                child_id=child["id"], iteration=state["iteration"])
        prompt = render("summarizer", task_name=task.name, backend=task.spec.backend, hardware=evidence.hardware,
                        speedup=f"{evidence.speedup:.3f}", plan=plan_text,
                        workloads=", ".join(child["workloads"]), bottleneck=bottleneck(parent),
                        baseline_speedup=f"{child.get('speedup') or 1.0:.3f}", parent_source=parent["source"],
                        child_source=child["source"],
                        direction="faster" if kind == "positive" else "slower: a regression",
                        direction_hint="" if kind == "positive" else
                        "It was a regression: phrase the lesson as what to avoid and why.")
        model, spec = chat_model(ctx, "summarizer")
        messages = [SystemMessage(render("system", role="summarizer")), HumanMessage(prompt)]
        try:
            reply, record = call_model(model, spec, messages, role="summarizer", candidate_id=child["id"],
                                       iteration=state["iteration"], retry_wait_s=ctx.llm_retry_wait_s,
                                       run_dir=state.get("run_dir"))
            usage.append(record)
            parsed = _parse_reply(reply)
        except LLMCallError:
            parsed = None
        insights.append(build_insight(parent, child, kind, plan_text, parsed, evidence, provenance, spec.label()))
    store = open_store(ctx)
    if store is not None:
        store.add(insights)
    append_insights(state.get("run_dir"), insights)
    return {"insights": [i.model_dump() for i in insights], "usage": usage}
