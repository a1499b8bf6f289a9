"""An @triton.autotune kernel (the bundled rmsnorm as FlashInfer-Bench solutions write it,
tests/fixtures/autotuned/) through the tuner and the --autotune node, each variant verified by the
real harness on the CPU interpreter: every candidate is one pinned configuration of its own.

The variants are verified alone, without the interleaved comparators, and their speedups are
set by the test: the search's order is under test here, not interpreter timings (the judge's own
choice among an autotuner's configurations is tests/integration/test_judge_autotune.py's)."""

from types import SimpleNamespace

import pytest

from accelopt.nodes import autotune as autotune_node
from accelopt.nodes import services
from accelopt.nodes.context import RunContext
from accelopt.policies.interface import PlanRequest, WriteRequest
from accelopt.policies.tuner import TunerPolicy
from accelopt.tools.task import load_task
from accelopt.tools.tunables import autotune_space, config_of, neighbours, pins
from tests.conftest import FIXTURES, TASKS

pytestmark = pytest.mark.slow

AUTOTUNED = (FIXTURES / "autotuned" / "rmsnorm_autotuned.py").read_text()
SPEEDUP = {64: 0.9, 128: 1.05}  # BLOCK -> speedup the test assigns: the second entry is the fastest


def test_pinned_configs_of_an_autotuned_kernel_verify_on_the_interpreter(monkeypatch, tmp_path):
    def alone(task, source, ctx, *, baseline, parent, run_dir, candidate_id=None):
        fields = services.measure(task, source, ctx, baseline=None, parent=None, run_dir=run_dir)
        speedup = SPEEDUP.get(config_of(source)["BLOCK"], 0.8) if fields["status"] == "verified" else None
        return {**fields, "speedup": speedup, "speedup_vs_parent": speedup, "beats_parent": False}

    monkeypatch.setattr(autotune_node, "measure", alone)
    rewrite = {"id": "i1.m0.p0.k0", "source": AUTOTUNED, "speedup": 1.0, "status": "verified", "plan_id": "i1.m0.p0"}
    state = {"task_dir": str(TASKS / "rmsnorm"), "current": rewrite, "iteration": 1, "baseline": None,
             "run_dir": str(tmp_path / "run"),
             "parent": {"id": "baseline", "source": (TASKS / "rmsnorm" / "baseline.py").read_text()}}
    out = autotune_node.autotune(state, SimpleNamespace(context=RunContext(autotune=4, device="cpu")))
    variants = [out["candidates"][f"i1.m0.p0.k0.a{j}"] for j in range(1, 5)]
    assert [v["status"] for v in variants] == ["verified"] * 4, [v.get("error") for v in variants]
    assert all(autotune_space(v["source"]).pinned for v in variants)
    configs = [config_of(v["source"]) for v in variants]
    # the autotuner's own three configurations, in list order, then a step from the fastest
    assert configs[:3] == pins(AUTOTUNED) == [{"BLOCK": 64, "num_warps": 2, "num_stages": 3},
                                             {"BLOCK": 128, "num_warps": 4, "num_stages": 2},
                                             {"BLOCK": 256, "num_warps": 8, "num_stages": 3}]
    assert configs[3] == {**configs[1], **neighbours(configs[1])[0]} == {"BLOCK": 256, "num_warps": 4, "num_stages": 2}
    assert out["current"]["autotune"] == {"tried": 4, "verified": 4, "best_id": "i1.m0.p0.k0", "gain": 1.0}

    # The tuner policy's first plans on the same kernel are the same pins, written the same way.
    task = load_task(TASKS / "rmsnorm")
    plans = TunerPolicy().plan(PlanRequest(task=task, iteration=1, member_id="baseline", source=AUTOTUNED,
                                           measurements="", tried=[], lessons=[], n=3)).plans
    written = [TunerPolicy().write(WriteRequest(task=task, iteration=1, candidate_id="k", source=AUTOTUNED,
                                                plan=p)).source for p in plans]
    assert written == [v["source"] for v in variants[:3]]
