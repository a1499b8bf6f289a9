"""Inductor seeds through the harness on the Triton interpreter: the captures hold Inductor's
kernels for the tasks' interpreter workloads too (compiled on the GPU at those shapes), so the
converted module is judged like any candidate, trust boundary included."""

import json

import pytest

from accelopt.tools.harness.runner import evaluate
from accelopt.tools.inductor_seed import seed_source
from accelopt.tools.task import load_task
from tests.conftest import FIXTURES, TASKS


@pytest.mark.parametrize("task, capture", [
    ("merge_attn_states", "merge_attn_states.default"),   # two kernels, Grid2D, inputs reordered
    ("gemm_bf16", "gemm_bf16.triton"),                    # Inductor's matmul template, FixedGrid
])
def test_an_inductor_seed_verifies_like_any_candidate(task, capture):
    seed = seed_source(json.loads((FIXTURES / "inductor" / f"{capture}.json").read_text()))
    result = evaluate(load_task(TASKS / task), seed.source, device="cpu", timeout_s=300, rounds=1)
    assert result.status == "verified", result.error


def test_the_seed_benchmark_judges_each_rewrite_of_the_seed_against_the_seed(monkeypatch, softmax_task):
    """evals/bench_inductor_seeds.py, here on the interpreter (eager only: no torch.compile
    comparator, to keep CI short): a seed with Inductor's looped online softmax gets a second
    evaluation of its chunk-wise rewrite, checked like any candidate and timed against the seed.
    Interpreter times, not performance: only the verdicts and the comparators are asserted."""
    from accelopt.evals import bench_inductor_seeds as bench
    from accelopt.policies.rewrites import CHUNKWISE_ONLINE_SOFTMAX
    from accelopt.tools.harness.reference_kernel import reference_source

    monkeypatch.setattr(bench, "torch_comparators", lambda task, mode: {"eager": reference_source(task)})
    seed = seed_source(json.loads((FIXTURES / "inductor" / "softmax.default.json").read_text()))
    row = bench.bench_task(softmax_task, (seed.source, seed.origin), None, 300, device="cpu", rounds=1)
    assert row["status"] == "verified", row["error"]
    assert set(row["versus"]) == {"eager", "baseline"}
    rewrite = row["rewrites"][CHUNKWISE_ONLINE_SOFTMAX.name]
    assert rewrite["status"] == "verified", rewrite["error"]
    assert set(rewrite["versus"]) == {"eager", "baseline", "seed"} and "rewritten" in rewrite["median_us"]
    assert rewrite["source"] == CHUNKWISE_ONLINE_SOFTMAX.apply(seed.source)
