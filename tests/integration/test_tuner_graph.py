"""The tuner through the real graph on the CPU interpreter: a short optimization with
--autotune, insights written and recalled by a later run, and the fix loop driven by an
invalid configuration. Interpreter times check the pipeline, not GPU performance; these tests
assert behaviour, never timings."""

import ast
import json
import shutil
from collections import Counter

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from accelopt.graph.builder import build_graph
from accelopt.memory.features import kernel_class
from accelopt.memory.schema import Evidence, Insight, Provenance, Recipe
from accelopt.memory.store import InsightStore
from accelopt.nodes.context import RunContext
from accelopt.nodes.records import Candidate
from accelopt.policies import rewrites
from accelopt.tools import pyparse
from accelopt.tools.tunables import config_of
from tests.conftest import TASKS

pytestmark = pytest.mark.slow


def run(task_dir, tmp_path, name, **settings):
    ctx = RunContext(**{"beams": 1, "plans": 2, "samples": 1, "fixes": 0, "iterations": 1, "device": "cpu",
                        "model": "tuner", "memory_dir": str(tmp_path / "memory"), **settings})
    # the whole final state (plans and recalled included), not only the graph's output schema
    graph, config = build_graph().compile(checkpointer=InMemorySaver()), {"configurable": {"thread_id": name}}
    graph.invoke({"task_dir": str(task_dir), "run_dir": str(tmp_path / name)}, config, context=ctx)
    return graph.get_state(config).values


def long_rows(tmp_path, name: str):
    """A copy of a bundled task whose interpreter rows are long enough that the tile size changes
    the number of loop trips: a deterministic effect, far above the interpreter's timing noise."""
    task = tmp_path / name
    shutil.copytree(TASKS / name, task)
    spec = json.loads((task / "task.json").read_text())
    spec["interpreter_workloads"] = [{"name": "T2_H4096", "params": {"M": 2, "H": 4096}}]
    (task / "task.json").write_text(json.dumps(spec))
    return task


def test_tuner_optimizes_autotunes_learns_and_a_later_run_recalls(tmp_path, monkeypatch):
    # Launch recipes only: a source rewrite (tests of their own) that wins on the interpreter's
    # timings puts its changed source in the best's lineage, and a pair whose sources differ by
    # more than the launch records no recipe, so what a later run could recall would hang on timing.
    monkeypatch.setattr(rewrites, "REWRITES", ())
    parses, real_parse = Counter(), ast.parse  # each kernel module the run's process parses (tools/pyparse)
    monkeypatch.setattr(pyparse.ast, "parse", lambda text, *a, **kw: parses.update(
        [text] if isinstance(text, str) and "import triton" in text and kw.get("mode", "exec") == "exec" else [])
        or real_parse(text, *a, **kw))
    out = run(long_rows(tmp_path, "rmsnorm"), tmp_path, "first", iterations=2, autotune=2, learn_from_interpreter=True)
    monkeypatch.setattr(pyparse.ast, "parse", real_parse)
    # A program is parsed once: planners, the judge's reading, measurements, autotune, lessons and
    # the record all read its one parse (tests/unit/test_parsed_once.py follows one kernel)
    assert len(parses) > 4 and set(parses.values()) == {1}
    cands = out["candidates"]
    planned_kernels = [c for c in cands.values() if c.get("plan_title") and c.get("kind") != "autotuned"]
    variants = [c for c in cands.values() if c.get("kind") == "autotuned"]
    assert not {k for c in cands.values() for k in c} - set(Candidate.__annotations__)  # autotune's fields are declared
    assert len(planned_kernels) == 4 and all(c["status"] == "verified" for c in planned_kernels)
    # Each verified rewrite was autotuned with at most 2 configurations, recorded on it.
    for c in planned_kernels:
        assert 1 <= c["autotune"]["tried"] <= 2 and c["autotune"]["gain"] > 0
    for v in variants:  # derived from its rewrite, or from a variant of it that beat the rewrite
        assert cands[v["autotune_of"]].get("kind") != "autotuned"
        assert v["parent_id"] == v["autotune_of"] or cands[v["parent_id"]].get("autotune_of") == v["autotune_of"]
    assert variants and all(config_of(v["source"]) != config_of(cands[v["parent_id"]]["source"]) for v in variants)
    # The planner never proposed a configuration measured before in the run.
    planned = [tuple(sorted(config_of(c["source"]).items())) for c in planned_kernels] + \
        [tuple(sorted(config_of(cands["baseline"]["source"]).items()))]
    assert len(planned) == len(set(planned))

    # Lessons were written to the run dir and memory, with the configuration they reached.
    lines = (tmp_path / "first" / "insights.jsonl").read_text().splitlines()
    written = [json.loads(line) for line in lines]
    assert written and len(written) == len(out["insights"])
    recipes = [i for i in written if i["kind"] == "positive" and i["recipe"]]
    assert recipes and all(i["author"] == "tuner:tuner" for i in recipes)
    for i in recipes:  # the recipe is the measured pair's configurations, as data
        child = cands[i["provenance"]["child_id"]]
        assert i["recipe"]["result"] == config_of(child["source"])
        assert i["recipe"]["start"] == config_of(cands[i["provenance"]["parent_id"]]["source"])
        assert i["recipe"]["speedup_vs_baseline"] == child["speedup"]
    kept = [i for i, _ in InsightStore(tmp_path / "memory").all()]
    stored = {i.id for i in kept}
    assert {i["id"] for i in written} <= stored | {m for i in kept for m in i.merged_ids}  # near-duplicates merge
    # each lesson in the state names the store entry that holds it: its own, or the one it merged into
    assert {i["stored_as"] for i in out["insights"]} == stored
    assert all(i["stored_as"] == i["id"] or i["id"] in next(k.merged_ids for k in kept if k.id == i["stored_as"])
               for i in out["insights"])
    from accelopt.cli.app import _stored_text

    assert _stored_text([{"id": "a", "stored_as": "a"}, {"id": "b", "stored_as": "a"}]).startswith("1 new, 1 merged")
    merged = sum(i["stored_as"] != i["id"] for i in out["insights"])
    assert _stored_text(out["insights"]) == (str(len(written)) if not merged else
                                             f"{len(written) - merged} new, {merged} merged into lessons already "
                                             "stored (more support)")

    # A later run on another row reduction recalls them and jumps to a recalled configuration first.
    # (rows as long as the first run's: a recipe from rows of 4096 says nothing for rows of 64)
    later = run(long_rows(tmp_path, "layernorm"), tmp_path, "second", plans=1, learn_from_interpreter=True)
    recalled = later["recalled"]["baseline"]
    assert {i["id"] for i in recalled} & stored
    assert "following recalled lesson" in later["plans"][0]["text"]


def test_fix_loop_repairs_an_invalid_configuration(tmp_path):
    """A kernel that only compiles with BLOCK <= 512, and a recalled lesson that says 2048: the
    first kernel fails, and the fixer halves the step until it verifies."""
    task = tmp_path / "rmsnorm_capped"
    shutil.copytree(TASKS / "rmsnorm", task)
    source = (task / "baseline.py").read_text()
    capped = source.replace("    acc = tl.zeros([BLOCK], dtype=tl.float32)",
                            "    tl.static_assert(BLOCK <= 512, 'BLOCK must be at most 512')\n"
                            "    acc = tl.zeros([BLOCK], dtype=tl.float32)", 1).replace("BLOCK=256", "BLOCK=128")
    assert capped != source
    (task / "baseline.py").write_text(capped)
    lesson = Insight(
        kind="positive", title="`BLOCK` from 256 to 2048 for RMSNorm rows",
        lesson=(f"On rmsnorm ({kernel_class(capped)}; workloads T4_H64), moving `BLOCK` from 256 to 2048 helped: "
                "1.50x against the parent. Resulting launch config: BLOCK=2048, num_warps=4 (1.50x over the baseline)."),
        kernel_class=kernel_class(capped), bottleneck="memory-bound", author="tuner:tuner",
        evidence=Evidence(speedup=1.5, spread=0.01, hardware="cpu", timer="interpreter_wall", task="rmsnorm",
                          backend="triton"),
        provenance=Provenance(run_id="seed", parent_id="a", child_id="b", iteration=1),
        recipe=Recipe(kernel_class=kernel_class(capped), start={"BLOCK": 256, "num_warps": 4},
                      result={"BLOCK": 2048, "num_warps": 4}, speedup_vs_baseline=1.5))
    InsightStore(tmp_path / "memory").add([lesson])

    out = run(task, tmp_path, "run", plans=1, fixes=2)
    cands = out["candidates"]
    first, fix1 = cands["i1.m0.p0.k0"], cands["i1.m0.p0.k0.f1"]
    assert lesson.id in out["plans"][0]["insight_ids"] and "BLOCK 128 -> 2048" in out["plans"][0]["text"]
    assert first["status"] in ("compile_error", "runtime_error") and "at most 512" in first["error"]
    assert fix1["fix_of"] == first["id"] and config_of(fix1["source"])["BLOCK"] == 512
    assert fix1["status"] == "verified" and "i1.m0.p0.k0.f2" not in cands
