"""autotune (`--autotune N`): after a rewrite verifies, search up to N launch configurations
of its tunables, so that a good idea with bad constants is not thrown away.

A greedy local search: the single-knob neighbours of the best configuration so far, each timed
interleaved with that best (and the baseline); a variant that beats it beyond noise becomes the
new centre. Every variant is a candidate of its own (id `<rewrite>.a<j>`, kind "autotuned",
parent = the kernel it was derived from), so the selector and the summarizer see them like any
other kernel. The rewrite records what autotuning added on top of it (`autotune`).

A rewrite under @triton.autotune whose list still picks at run time is searched from its list:
each configuration pinned in turn (the autotuner's own candidates, measured one by one), then,
when none beat it beyond noise, the neighbours of the fastest pinned one."""

from __future__ import annotations

from langgraph.runtime import Runtime

from accelopt.nodes.common import task_of
from accelopt.nodes.context import RunContext
from accelopt.nodes.records import (
    AutotuneSummary,
    Candidate,
    autotuned_variant,
    leads_parent,
    source_of,
    with_measurement,
)
from accelopt.nodes.services import measure
from accelopt.nodes.state import CandidateState
from accelopt.tools.rundir import write_candidate
from accelopt.tools.tracing import label_run
from accelopt.tools.tunables import apply_config, config_of, describe_moves, format_config, neighbours, pins, unpinned


def autotune(state: CandidateState, runtime: Runtime[RunContext]) -> CandidateState:
    ctx = runtime.context
    task = task_of(state["task_dir"])
    rewrite = state["current"].copy()
    label_run(rewrite["id"])
    best = rewrite
    # a kernel whose autotuner picks at run time was not measured as any one configuration
    seen = {frozenset(config_of(s).items()) for s in (source_of(rewrite), source_of(state["parent"]))
            if not unpinned(s)}
    variants: dict[str, Candidate] = {}
    queue = pins(source_of(best)) or neighbours(config_of(source_of(best)))
    walked: list[dict] = []  # pinned configurations the search went on from, while the list still picks
    while len(variants) < ctx.autotune:
        if not queue and unpinned(source_of(best)):
            # every pin measured and none beyond noise: go on from the fastest pinned one
            verified = [v for v in variants.values() if v["status"] == "verified"]
            fastest = (config_of(source_of(max(verified, key=lambda v: v.get("speedup") or 0.0)))
                       if verified else None)
            if fastest is not None and fastest not in walked:
                walked.append(fastest)
                queue = [{**fastest, **m} for m in neighbours(fastest)]
        if not queue:
            break
        centre = config_of(source_of(best))
        changes = queue.pop(0)
        config = {**centre, **changes}
        if frozenset(config.items()) in seen:
            continue
        seen.add(frozenset(config.items()))
        moves = describe_moves({k: (centre[k], v) for k, v in changes.items()})
        variant = autotuned_variant(rewrite, len(variants) + 1, state["iteration"], best["id"],
                                    apply_config(source_of(best), changes), moves, format_config(config))
        variant = with_measurement(variant, measure(task, variant["source"], ctx, baseline=state["baseline"],
                                                    parent=best, run_dir=state.get("run_dir"),
                                                    candidate_id=variant["id"]))
        write_candidate(state.get("run_dir"), variant)
        variants[variant["id"]] = variant
        if variant["status"] == "verified" and leads_parent(variant):
            best = variant
            queue = neighbours(config)  # re-centre on the new best
    rewrite_speedup = rewrite.get("speedup")
    rewrite["autotune"] = AutotuneSummary(
        tried=len(variants), verified=sum(v["status"] == "verified" for v in variants.values()), best_id=best["id"],
        # speedups over the baseline, each measured interleaved with it: what the search added
        gain=(best.get("speedup") or 0) / rewrite_speedup if rewrite_speedup else 1.0)
    write_candidate(state.get("run_dir"), rewrite)
    return {"current": rewrite, "candidates": {rewrite["id"]: rewrite, **variants}}
