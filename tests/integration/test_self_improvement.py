"""The self-improvement benchmark's counting (on hand-written run directories) and its whole
cold/warm protocol on the CPU interpreter (plumbing only: interpreter times are not performance)."""

import json
import subprocess
import sys

import pytest

from accelopt.evals.bench_self_improvement import compare, evaluation_trace, evaluations_to_target, summarize
from tests.conftest import ROOT, TASKS


def write_run(root, task, candidates):
    """Hand-written candidates: (id, iteration, status, latency us or None)."""
    for cid, iteration, status, latency in candidates:
        folder = root / task / "candidates" / cid
        folder.mkdir(parents=True)
        workloads = {"w": {"median_us": latency, "iqr_us": 0.1, "samples": 10}} if latency else {}
        (folder / "result.json").write_text(json.dumps(
            {"id": cid, "iteration": iteration, "status": status, "workloads": workloads}))


def test_evaluations_are_counted_in_plan_order_until_within_five_percent(tmp_path):
    cold, warm = tmp_path / "cold", tmp_path / "warm"
    write_run(cold, "rmsnorm", [("baseline", 0, "verified", 100.0), ("i1.m0.p1.k0", 1, "verified", 90.0),
                                ("i1.m0.p0.k0", 1, "verified", 95.0), ("i1.m0.p10.k0", 1, "no_code", None),
                                ("i2.m0.p0.k0", 2, "compile_error", None), ("i2.m0.p1.k0", 2, "verified", 52.0)])
    write_run(warm, "rmsnorm", [("baseline", 0, "verified", 101.0), ("i1.m0.p0.k0", 1, "verified", 50.0)])
    trace = evaluation_trace(cold / "rmsnorm")
    # Natural id order within an iteration; no_code never reached the harness, so it is no evaluation.
    assert [c["id"] for c in trace] == ["i1.m0.p0.k0", "i1.m0.p1.k0", "i2.m0.p0.k0", "i2.m0.p1.k0"]
    assert evaluations_to_target(trace, 52.5) == 4 and evaluations_to_target(trace, 10.0) is None
    write_run(cold, "softmax", [("baseline", 0, "verified", 10.0), ("i1.m0.p0.k0", 1, "verified", 10.2)])
    write_run(warm, "softmax", [("baseline", 0, "verified", 10.1)])
    rows = {r["task"]: r for r in compare(cold, warm, [TASKS / "rmsnorm", TASKS / "softmax"])}
    # The best of either run (50 us) sets the target, 52.5 us: 4 evaluations cold, 1 warm.
    assert rows["rmsnorm"]["best_us"] == pytest.approx(50.0)
    assert (rows["rmsnorm"]["cold_to_target"], rows["rmsnorm"]["warm_to_target"]) == (4, 1)
    # A baseline already within 5% needs no evaluation at all.
    assert rows["softmax"]["cold_to_target"] == rows["softmax"]["warm_to_target"] == 0
    # rmsnorm and softmax differ in tunables, so neither resembles the other.
    assert not rows["rmsnorm"]["resembles"] and not rows["softmax"]["resembles"]
    summary = summarize(list(rows.values()))
    assert summary["not_resembling"]["geomean_cold_over_warm"] == pytest.approx(4.0)


@pytest.mark.slow
def test_the_cold_and_warm_protocol_runs_on_the_interpreter(tmp_path):
    out = tmp_path / "si"
    subprocess.run([sys.executable, "evals/bench_self_improvement.py", "--out", str(out), "--device", "cpu",
                    "--tasks", "rmsnorm,layernorm", "-T", "1", "-N", "1", "--embedder", "all-MiniLM-L6-v2"],
                   cwd=ROOT, check=True, capture_output=True, text=True, timeout=600)
    result = json.loads((out / "self_improvement.json").read_text())
    assert [r["task"] for r in result["rows"]] == ["rmsnorm", "layernorm"]  # as given
    assert all(r["resembles"] for r in result["rows"])  # same class, same tunables
    for task in ("rmsnorm", "layernorm"):
        assert (out / "cold" / task / "summary.json").is_file() and (out / "warm" / task / "summary.json").is_file()
        cold_ctx = json.loads((out / "cold" / task / "run.json").read_text())["context"]
        warm_ctx = json.loads((out / "warm" / task / "run.json").read_text())["context"]
        assert cold_ctx["use_memory"] is False and warm_ctx["use_memory"] is True
        assert warm_ctx["memory_dir"].endswith(f"memories/{task}")
    assert "evals to 5% cold" in (out / "self_improvement.md").read_text()
