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
