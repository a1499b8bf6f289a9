"""A program is parsed once: every reader of a kernel's source on the tuner's path (the planner and
writer, the judge's static reading, the program key, the nodes that measure, autotune, recall,
summarize and record) reads the text's one parse (tools/pyparse.program), and none changes it."""

import ast
import json
from collections import Counter

import pytest

from accelopt.nodes.measurements import measured_kernel
from accelopt.nodes.recall import recall_query
from accelopt.nodes.record import best_kernel_source
from accelopt.nodes.summarizer import recipe_of
from accelopt.policies.interface import MeasuredKernel, PlanRequest, SummarizeRequest, WriteRequest
from accelopt.policies.tuner import TunerPolicy
from accelopt.tools import pyparse
from accelopt.tools.best_figure import pinned_source, program_key
from accelopt.tools.harness.autotune_choices import pinning_evidence
from accelopt.tools.harness.kernel_source import KernelSource
from accelopt.tools.harness.static_checks import findings
from accelopt.tools.inductor_seed import seed_source
from accelopt.tools.task import load_task
from accelopt.tools.tunables import apply_config, config_of, neighbours, pins, unpinned, why_untunable
from tests.conftest import FIXTURES, TASKS, changed_parses

RMSNORM = (TASKS / "rmsnorm" / "baseline.py").read_text()
SOFTMAX_SEED = seed_source(json.loads((FIXTURES / "inductor" / "softmax.default.json").read_text())).source


@pytest.fixture
def parses(monkeypatch) -> Counter:
    """Each module text the interpreter's parser was handed, and how often (the one primitive every
    parse of ours goes through: tests/unit/test_pyparse.py)."""
    counted: Counter = Counter()
    real = ast.parse

    def counting(source, *args, **kw):
        if isinstance(source, str) and kw.get("mode", "exec") == "exec":  # ast.parse is everyone's: bytes too
            counted[source] += 1
        return real(source, *args, **kw)

    monkeypatch.setattr(pyparse.ast, "parse", counting)
    return counted


def life_of_a_kernel(task_name: str, parent: str) -> list[str]:
    """What the tuner's path asks of a kernel's source, from its parent's plans to its record; the
    children it wrote."""
    tuner, task = TunerPolicy(), load_task(TASKS / task_name)
    start = MeasuredKernel(id="p", title="", status="verified", parent_id=None, speedup_vs_parent=None,
                           speedup=1.0, config=config_of(parent))
    plans = tuner.plan(PlanRequest(task=task, iteration=1, member_id="p", source=parent, measurements="",
                                   tried=[start], lessons=[], n=4)).plans
    assert plans
    children = []
    for i, plan in enumerate(plans):
        child = tuner.write(WriteRequest(task=task, iteration=1, candidate_id=f"c{i}", source=parent, plan=plan)).source
        assert child
        children.append(child)
        # the judge (runner.evaluate): the parse, the static checks, the autotune choice's evidence
        kernel = KernelSource.parse(child)
        findings(kernel, task.spec.entry_point)
        pinning_evidence(kernel, None)
        # before the measurement: is it a program the run measured already
        program_key(child)
        candidate = {"id": f"c{i}", "source": child, "status": "verified", "parent_id": "p", "speedup": 1.1,
                     "speedup_vs_parent": 1.1}
        # the nodes: the measured kernels every planner reads, the autotune search, recall's query
        measured_kernel(candidate)  # type: ignore[arg-type]
        if not unpinned(child):
            for changes in (pins(child) or neighbours(config_of(child)))[:1]:
                program_key(apply_config(child, changes))
        recall_query(task.spec.description, candidate)
        why_untunable(child)
        # the lesson: the tuner's summary and the recipe the summarizer node attaches
        tuner.summarize(SummarizeRequest(task=task, iteration=1, child_id=f"c{i}", kind="positive",
                                         hardware="H100", plan_text=plan.text, parent_source=parent,
                                         child_source=child, speedup_vs_parent=1.1, speedup_vs_baseline=1.1,
                                         workloads=[], bottleneck=""))
        recipe_of(parent, child, 1.1)
        # the record: best_kernel.py, and the best figure's pooling by program
        best_kernel_source(candidate)  # type: ignore[arg-type]
        program_key(pinned_source(candidate) or "")
    return children


@pytest.mark.parametrize("task_name, parent", [("rmsnorm", RMSNORM), ("softmax", SOFTMAX_SEED)],
                         ids=["launch moves", "source rewrites"])
def test_each_source_is_parsed_once_across_a_kernels_life_on_the_tuner_path(parses, task_name, parent):
    children = life_of_a_kernel(task_name, parent)
    # every kernel module the path read (parents, children, rewrites, configurations), whoever read it
    modules = {text: n for text, n in parses.items() if "import triton" in text}
    assert parent in modules and all(child in modules for child in children)
    assert len(modules) > len(children)  # the rewrites' and the autotune search's sources besides
    again = {text.splitlines()[0][:60]: n for text, n in modules.items() if n > 1}
    assert not again, f"sources parsed more than once: {again}"
    assert not changed_parses()  # and no reader changed the tree it shared


def test_the_count_sees_a_second_parse(parses):
    """The test above counts real parses: a reader that parses the text itself again is seen."""
    program_key(RMSNORM)
    config_of(RMSNORM)
    assert parses[RMSNORM] == 1
    pyparse.parse(RMSNORM)
    assert parses[RMSNORM] == 2
