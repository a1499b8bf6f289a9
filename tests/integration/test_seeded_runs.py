"""A run seeded with torch.compile's own kernels (an Inductor seed), on the interpreter, with
no model: the seed is judged like any candidate, joins the beam, and the tuner improves on it.
The capture was made on an H100 (tests/fixtures/inductor/softmax.default.json)."""

import json

import pytest

from accelopt.graph.builder import build_graph
from accelopt.nodes.context import RunContext
from accelopt.policies.rewrites import CHUNKWISE_ONLINE_SOFTMAX, chunkwise_online_softmax
from tests.conftest import FIXTURES

pytestmark = pytest.mark.slow

CAPTURE = FIXTURES / "inductor" / "softmax.default.json"


def test_a_task_without_a_baseline_starts_from_the_inductor_seed_with_no_model(tmp_path, softmax_task):
    (softmax_task / "baseline.py").unlink()
    run_dir = tmp_path / "run"
    ctx = RunContext(beams=1, plans=1, samples=1, fixes=0, iterations=1, device="cpu", use_memory=False,
                     seed="inductor", seed_capture=str(CAPTURE))
    out = build_graph().compile().invoke({"task_dir": str(softmax_task), "run_dir": str(run_dir)}, context=ctx)
    seed = out["candidates"]["inductor"]
    assert seed["kind"] == "inductor_seed" and seed["status"] == "verified"
    assert seed["plan_title"].startswith("Inductor seed: torch.compile (Inductor, mode default), torch 2.11")
    assert out["notes"][0].startswith("Inductor seed verified")
    children = [c for c in out["candidates"].values() if c.get("parent_id") == "inductor"]
    assert children, "the tuner wrote nothing from the seed"
    assert all(c["source"] != seed["source"] for c in children if c.get("source"))
    # the tuner's first plan on Inductor's looped softmax: its online softmax made chunk-wise (the
    # rewritten kernels are the GPU shapes'; on the interpreter the module must still load and verify)
    rewrite, = children
    assert rewrite["plan_title"] == CHUNKWISE_ONLINE_SOFTMAX.title and rewrite["status"] == "verified"
    assert rewrite["source"] == chunkwise_online_softmax(seed["source"])
    assert json.loads((run_dir / "candidates" / "inductor" / "result.json").read_text())["status"] == "verified"


def test_a_seed_that_cannot_be_made_is_reported_and_the_run_goes_on_from_the_baseline(tmp_path, softmax_task):
    capture = json.loads(CAPTURE.read_text())
    capture["workloads"][0] = {"workload": "M4096_N4096", "error": "InductorError: boom"}
    (tmp_path / "capture.json").write_text(json.dumps(capture))
    ctx = RunContext(beams=1, plans=1, samples=1, fixes=0, iterations=1, device="cpu", use_memory=False,
                     seed="inductor", seed_capture=str(tmp_path / "capture.json"))
    out = build_graph().compile().invoke({"task_dir": str(softmax_task), "run_dir": str(tmp_path / "run")},
                                         context=ctx)
    assert out["notes"] == ["no Inductor seed: torch.compile failed on workload M4096_N4096: InductorError: boom"]
    assert "inductor" not in out["candidates"] and out["candidates"]["baseline"]["status"] == "verified"
    assert out["stop_reason"] == "reached T=1 iterations"
