"""Services the nodes share, so that no node imports another: a policy answer that yields a
kernel (executor, fixer), a measurement through the harness and the run cache (setup,
profiler, autotune), and the memory store (recall, summarizer).

`measure` skips a program already evaluated in the run (status `duplicate`), replays the run
cache (tools/runcache.py), records the evaluation's timeline span and asks the task's backend
(tools/backends). `emit` puts progress events on the custom stream: a no-op when nobody streams."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from accelopt.memory import embedder
from accelopt.memory.store import InsightStore
from accelopt.nodes.context import RunContext
from accelopt.nodes.measurements import mean_pct
from accelopt.nodes.records import Candidate, EvaluationStatus, attempt, usage_entries, with_outcome
from accelopt.nodes.state import CandidateState
from accelopt.policies.interface import Kernel, PolicyError
from accelopt.policies.replies import plan_title
from accelopt.tools import inflight, timeline
from accelopt.tools.backends import RayTritonBackend, backend_for
from accelopt.tools.best_figure import Confirmation, program_key
from accelopt.tools.harness.result import user_paths
from accelopt.tools.harness.verdict import ranked, void_comparisons
from accelopt.tools.llm_spec import BudgetExceeded
from accelopt.tools.runcache import RunCache, device_fingerprint, digest
from accelopt.tools.task import Task
from accelopt.tools.tracing import traced_evaluation

# ---------------------------------------------------------------- writing a kernel

def new_attempt(state: CandidateState, attempt_id: str, fix_of: str | None, fix_attempt: int) -> Candidate:
    return attempt(attempt_id, state["iteration"], state["parent"]["id"], state["plan"]["id"],
                   plan_title(state["plan"]["text"]), fix_of, fix_attempt)


def fill_attempt(attempt: Candidate, ask: Callable[[], Kernel]) -> CandidateState:
    """Ask the policy for the attempt's kernel and fill it in: a kernel, or the policy's status for
    a reply without one (no_code, or truncated: cut off at the token limit, so that the fixer is
    told to write less) with its reason, llm_error when the policy failed for good, not_sent
    when the run's budget could not pay for the call, or in_flight when the iteration's quorum
    moved on before the reply landed (tools/inflight.py: the call goes on, collected later)."""
    try:
        kernel = ask()
    except inflight.Detached as exc:
        return {"current": with_outcome(attempt, "in_flight", f"{exc}: a later iteration collects it"), "usage": []}
    except PolicyError as exc:  # not called for the budget is not a failed call
        status: EvaluationStatus = "not_sent" if isinstance(exc.__cause__, BudgetExceeded) else "llm_error"
        return {"current": with_outcome(attempt, status, str(exc)), "usage": []}
    if kernel.usage:
        attempt.update({"tokens": kernel.usage["input_tokens"] + kernel.usage["output_tokens"],
                        "cost_usd": kernel.usage["cost_usd"]})
    if kernel.source is None:
        attempt = with_outcome(attempt, kernel.status, kernel.note)
    else:
        attempt["source"] = kernel.source
    return {"current": attempt, "usage": usage_entries(kernel.usage)}


def fill_within_quorum(state: CandidateState, attempt: Candidate, asked_in: int, ask: Callable[[], Kernel],
                       counted: bool) -> CandidateState:
    """fill_attempt under the iteration's quorum (--quorum; without one, plainly): an attempt whose
    reply had not landed when the quorum had is in_flight, with the iteration its call was asked in;
    a `counted` reply (a kernel's, not a fix's) that landed counts toward the quorum. The run
    directory keeps the count, so that a resumed iteration does not wait again for the replies of
    branches that finished before the kill (the checkpoint does not run them again)."""
    needed = state.get("quorum")
    cache, landed = RunCache(state.get("run_dir")), f"quorum/i{state['iteration']}"
    at = inflight.quorum(state.get("run_dir"), state["iteration"], needed, cache.keys(landed)) if needed else None
    with inflight.detach_at(at):
        written = fill_attempt(attempt, ask)
    if written["current"]["status"] == "in_flight":
        written["current"]["asked_in"] = asked_in
    elif at is not None and counted:
        cache.claim(landed, attempt["id"], attempt["id"])
        at.land(attempt["id"])
    return written


# ---------------------------------------------------------------- measuring

@traced_evaluation
def measure(task: Task, source: str, ctx: RunContext, *, baseline: Mapping[str, Any] | None,
            parent: Mapping[str, Any] | None,
            trusted: bool = False, run_dir: str | None = None, candidate_id: str | None = None) -> dict:
    """Evaluate a source, timed interleaved with its parent and the baseline, and return the
    candidate fields the harness decides. Speedups are medians over rounds with a bootstrap interval (result.interval_label);
    `beats_parent` / `loses_to_parent` hold only when the interval clears the noise floor, and never on
    the interpreter (its times are not performance: records.leads_parent says what ranks there). With a run
    directory, a result measured before (e.g. before a crash) is reused, never measured again.
    A real evaluation (not a cached one) is announced on the run's custom stream (`emit`): its
    start, the cluster node it went to, its end. A candidate whose program (its source up to
    comments and layout) another candidate of the run evaluated first is not evaluated again: it
    comes back `duplicate`, naming that candidate, whatever policy wrote it."""
    first = RunCache(run_dir).claim("programs", program_key(source), candidate_id) if candidate_id else None
    if first is not None and first != candidate_id:
        return {"status": "duplicate", "duplicate_of": first,
                "error": f"the same program as {first}, already evaluated in this run: not evaluated again"}
    device = None if ctx.device == "auto" else ctx.device
    compare = {}
    if baseline is not None:
        compare["baseline"] = baseline["source"]
    if parent is not None and parent["id"] != (baseline or {}).get("id"):
        compare["parent"] = parent["source"]
    cache = RunCache(run_dir)
    key = digest({"source": source, "task": task.spec.model_dump(), "reference": task.reference_source,
                  "compare": compare, "trusted": trusted, "profile": ctx.profile,
                  "device": device_fingerprint(ctx.device),
                  **({"ray_address": ctx.ray_address} if ctx.ray_address else {})})
    cached = cache.get("evals", key)
    if cached is not None:
        return cached
    write, token = stream_writer(), f"e{next(_evaluations)}"
    ended: dict[str, Any] = {"event": "eval_end", "eval": token, "candidate": candidate_id, "status": "error"}
    write({"event": "eval_start", "eval": token, "candidate": candidate_id})

    def on_node(node: str) -> None:  # the Ray pool sent it to a node (again, when a lost one is re-queued)
        ended["node"] = node
        write({"event": "eval_node", "eval": token, "candidate": candidate_id, "node": node})

    try:
        with timeline.span(run_dir, "eval", candidate=candidate_id) as spent:
            fields = _measure(task, source, ctx, device, compare, baseline, parent, trusted, on_node)
            spent.update(status=fields["status"], device=fields["device"], phases_s=fields.pop("phases_s", {}),
                         gpu=fields.pop("gpu", None),
                         **({"node": fields["node"]} if fields.get("node") else {}))
        ended.update(status=fields["status"], node=fields.get("node") or ended.get("node"))
    finally:  # an evaluation that raised is no longer in flight either
        write(ended)
    if fields["status"] != "infra_error":  # a GPU held too long elsewhere, a lost node: a resume tries again
        cache.put("evals", key, fields)
    cache.log_evaluation(key, {"status": fields["status"], "device": fields["device"],
                               **({"node": fields["node"]} if fields.get("node") else {})})
    return fields


def _measure(task: Task, source: str, ctx: RunContext, device: str | None, compare: dict,
             baseline: Mapping[str, Any] | None, parent: Mapping[str, Any] | None, trusted: bool,
             on_node: Callable[[str], None] | None = None) -> dict:
    backend = backend_for(task, cluster=ctx.ray_address, profile=ctx.profile)
    if isinstance(backend, RayTritonBackend):  # the node it runs on is known once the pool picks an actor
        result = backend.evaluate(task, source, device=device, timeout_s=ctx.eval_timeout_s, compare=compare,
                                  trusted=trusted, on_node=on_node)
    else:
        result = backend.evaluate(task, source, device=device, timeout_s=ctx.eval_timeout_s, compare=compare,
                                  trusted=trusted)
    workloads = {k: v.model_dump() for k, v in result.workloads.items()}
    fields = {"status": result.status, "error": user_paths(result.error, "kernel.py"), "device": result.device,
              "device_name": result.device_name, "timer": result.timer, "workloads": workloads,
              "flags": result.flags, "eval_s": result.eval_s, "versus": {}, "speedup": None,
              "findings": [f.model_dump() for f in result.findings], "evidence": result.evidence,
              "kernels_seen": result.kernels_seen, "audit": result.audit.model_dump() if result.audit else None,
              "speedup_vs_parent": None, "beats_parent": False, "loses_to_parent": False,
              "pct_peak": mean_pct(workloads, "pct_peak"), "pct_achievable": mean_pct(workloads, "pct_achievable"),
              "pct_of_copy": mean_pct(workloads, "pct_of_copy"),
              "phases_s": result.phases_s, "gpu": result.gpu}  # for the run's timeline (measure), not the candidate
    if result.node is not None:  # evaluated on a Ray cluster's node
        fields["node"] = result.node
    if result.profile:  # taken by the harness on the GPU that judged it (TritonBackend's `profile`)
        fields["profile"] = result.profile
    if result.ok:
        # an LLM-written parent is a candidate too: timed far slower than in its own evaluation, it is void
        if parent is not None and "parent" in compare and parent.get("workloads"):
            void_comparisons(result, {"parent": dict(parent["workloads"])})
        fields["void"] = dict(result.void)
        # ranked as `check` judges it: on the timer each verdict rests on (tools/harness/verdict.ranked)
        decided = ranked(result)
        fields["versus"] = {k: {**c.model_dump(), "basis": basis} for k, (c, basis) in decided.items()}
        # comparators' medians from the same interleaved rounds (exports report them as reference latency)
        fields["compared_us"] = {k: {w: t.median_us for w, t in v.items()} for k, v in result.compare.items()}
        fields["max_abs_err"], fields["max_rel_err"] = result.max_abs_err, result.max_rel_err
        # which configuration each autotuned kernel ran (the judge's choice): best_kernel.py is written with it
        fields["autotune_choice"] = {k: v.model_dump() for k, v in result.autotune.items()}
        if baseline is None:
            fields["speedup"] = 1.0  # the baseline itself
        elif "baseline" in result.void or "baseline" not in decided:
            fields["speedup"] = None  # void (it ranks last), or untimed (NKI's simulator checks, times nothing)
        else:
            fields["speedup"] = decided["baseline"][0].speedup
        if parent is not None:
            vs_parent = (decided.get("parent") or decided.get("baseline") or (None,))[0]
            void = "parent" in result.void or ("parent" not in compare and "baseline" in result.void)
            if vs_parent is not None:
                fields.update(speedup_vs_parent=vs_parent.speedup, beats_parent=vs_parent.faster and not void,
                              loses_to_parent=vs_parent.slower and not void)
    return fields


def confirm(task: Task, source: str, baseline_source: str, ctx: RunContext, run_dir: str | None = None,
            nth: int = 0) -> Confirmation:
    """The best once more against the baseline, by the rules of `check`: untrusted, on inputs
    drawn afresh (a seed of its own), rounds until decided. The `nth` confirmation of a run is kept
    in its run cache, so that a resumed run's end does not time it again, while asking again
    (`accelopt show --confirm`) measures anew."""
    cache = RunCache(run_dir)
    where = None if ctx.device == "auto" else ctx.device
    key = digest({"confirm": source, "baseline": baseline_source, "task": task.spec.model_dump(),
                  "reference": task.reference_source, "device": device_fingerprint(where or "auto"), "nth": nth})
    cached = cache.get("evals", key)
    if cached is not None:
        return Confirmation.model_validate(cached)
    backend = backend_for(task, cluster=ctx.ray_address, profile=False)
    result = backend.evaluate(task, source, device=where, timeout_s=ctx.eval_timeout_s,
                              compare={"baseline": baseline_source}, trusted=False)
    got = Confirmation(status=result.status, timer=result.timer, device_name=result.device_name, seed=result.seed,
                       error=user_paths(result.error, "kernel.py"))
    if result.ok and "baseline" in result.void:
        got = got.model_copy(update={"status": "void", "error": result.void["baseline"]})
    elif result.ok and "baseline" in result.versus:
        comparison, basis = ranked(result)["baseline"]
        got = got.model_copy(update={"speedup": comparison.speedup, "ci_low": comparison.ci_low,
                                     "ci_high": comparison.ci_high, "rounds": comparison.rounds, "basis": basis})
    if result.status != "infra_error":  # a GPU held too long elsewhere: asking again tries again
        cache.put("evals", key, got.model_dump())
    return got


# ---------------------------------------------------------------- progress events

def measure_against_torch(task: Task, source: str, ctx: RunContext, run_dir: str | None = None) -> dict:
    """The kernel timed interleaved, in the same rounds, with torch.compile of the task's reference
    and eager PyTorch (torch_compile.json's record): each speedup with its interval, and every
    function's per-workload medians, spread and round medians for the report. A comparator that
    fails (Inductor cannot compile the reference) is recorded as such, not as a speedup. Kept in
    the run cache, so a resumed run does not time it again."""
    from accelopt.tools.harness.reference_kernel import torch_comparators

    compare = torch_comparators(task, ctx.torch_compile_mode)
    cache = RunCache(run_dir)
    key = digest({"versus_torch": source, "task": task.spec.model_dump(), "reference": task.reference_source,
                  "device": device_fingerprint(ctx.device), "mode": ctx.torch_compile_mode})
    cached = cache.get("evals", key)
    if cached is not None:
        return cached
    backend = backend_for(task, cluster=ctx.ray_address, profile=False)
    result = backend.evaluate(task, source, device="cuda", timeout_s=ctx.eval_timeout_s, compare=compare,
                              trusted=True)  # the kernel verified untrusted already; this only times it
    record: dict = {"status": result.status, "error": result.error, "device_name": result.device_name,
                    "torch_compile_mode": ctx.torch_compile_mode}
    if result.ok:
        record["versus"] = {k: {**c.model_dump(), "basis": basis} for k, (c, basis) in ranked(result).items()}
        record["median_us"] = {"best": {w: t.median_us for w, t in result.workloads.items()},
                               **{k: {w: t.median_us for w, t in v.items()} for k, v in result.compare.items()}}
        fields = {"median_us", "iqr_us", "round_medians_us"}
        record["workloads"] = {"best": {w: t.model_dump(include=fields) for w, t in result.workloads.items()},
                               **{k: {w: t.model_dump(include=fields) for w, t in v.items()}
                                  for k, v in result.compare.items()}}
        record["timer"] = result.timer
    cache.put("evals", key, record)
    return record


_evaluations = itertools.count(1)  # a token per evaluation of this process: its start and end pair up


def stream_writer() -> Callable[[dict], None]:
    """The run's custom-stream writer (LangGraph's `get_stream_writer`), taken in the node's own
    context so that it may be called from another thread. Its events are what the CLI's live
    display (graph/progress.py) shows: `{"event": "step", "text"}` for setup's steps, and
    `eval_start` / `eval_node` / `eval_end` (with `eval`, a token, `candidate`, and `node`
    and `status` where known) around every real evaluation. A no-op writer outside a graph,
    in a run streamed without the custom mode (graph.invoke, Studio), and it never raises: a
    progress event must not break a run."""
    try:
        from langgraph.config import get_stream_writer

        inner = get_stream_writer()
    except Exception:  # noqa: BLE001 - outside a runnable context: nobody is listening
        return _ignore

    def write(event: dict) -> None:
        try:
            inner(event)
        except Exception:  # noqa: BLE001 - the display is not the run
            pass

    return write


def emit(event: dict) -> None:
    """One progress event on the run's custom stream (see `stream_writer`)."""
    stream_writer()(event)


def _ignore(event: dict) -> None:
    return None


# ---------------------------------------------------------------- memory

def warm_memory(ctx: RunContext, timer: str | None) -> None:
    """Start loading the memory's embedding model while the first iteration waits on its models
    and GPUs, where the run will store lessons (timed on a GPU, or learning from the interpreter):
    the first summarizer otherwise loads it on the critical path (20 s on an H100 host)."""
    if ctx.use_memory and (timer != "interpreter_wall" or ctx.learn_from_interpreter):
        embedder.warm(ctx.embedder)


def open_store(ctx: RunContext) -> InsightStore | None:
    if not ctx.use_memory:
        return None
    return _store(ctx.memory_dir, ctx.memory_url, ctx.embedder, ctx.memory_capacity)


@lru_cache(maxsize=8)
def _store(directory: str | None, url: str | None, embedder: str, capacity: int) -> InsightStore:
    """One client per location and process: the embedder and Chroma client are slow to build."""
    return InsightStore(directory, url=url, embedder=embedder, capacity=capacity)
