"""A comparator is someone's kernel too (an LLM-written parent, an --against kernel): its outputs are
checked when it is timed, and a comparator that misbehaves voids the comparison with it, never the
candidate's own verdict (timing_rounds.TimingRounds._one_round, verdict.void_comparisons)."""

from __future__ import annotations

import pytest

from accelopt.tools.harness.runner import evaluate
from accelopt.tools.task import load_task
from tests.conftest import FIXTURES, TASKS

SANDBAG = (FIXTURES / "comparators" / "sandbag_when_compared.py").read_text()


@pytest.fixture(scope="module")
def task():
    return load_task(TASKS / "softmax")


def test_a_comparator_wrong_only_when_compared_voids_that_comparison(task):
    """Judged itself it is correct (its first call is poisoned); as a comparator it returns zeros."""
    wrong = SANDBAG.replace("WRONG_AS_COMPARATOR = False", "WRONG_AS_COMPARATOR = True")
    alone = evaluate(task, wrong, device="cpu")
    assert alone.status == "verified", alone.error
    result = evaluate(task, task.baseline_source, device="cpu", compare={"parent": wrong, "baseline": task.baseline_source})
    assert result.status == "verified", result.error
    assert "wrong when timed as a comparator" in result.void["parent"]
    assert "parent" not in result.versus and "baseline" in result.versus and "baseline" not in result.void
    assert any(line.startswith("vs parent: the comparison is void") for line in result.evidence)


@pytest.mark.gpu
def test_a_parent_padded_only_when_compared_is_void_on_the_gpu(task):
    """Its own evaluation is the baseline's time; timed beside a candidate it runs its kernel three
    times. The candidate (the baseline itself) looks ~3x faster: the comparison is void."""
    from accelopt.tools.harness.verdict import void_comparisons

    own = evaluate(task, SANDBAG, device="cuda")
    assert own.status == "verified", own.error
    result = evaluate(task, task.baseline_source, device="cuda", compare={"parent": SANDBAG})
    assert result.status == "verified", result.error
    assert result.versus["parent"].speedup > 2.0  # what the padding alone would have claimed
    void_comparisons(result, {"parent": {w: t.model_dump() for w, t in own.workloads.items()}})
    assert result.verdicts["parent"].word == "undecided" and "slower as a comparator" in result.void["parent"]
