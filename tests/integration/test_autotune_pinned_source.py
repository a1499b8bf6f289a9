"""The program pinned is the program judged (issue 64): a module whose @triton.autotune literal
list is not the list its autotuner runs is judged as it runs, said so in the evidence, and never
written with a literal entry the judge did not check; a pinned source whose program changes with its
own list is caught by the check of the pinned source; a list edited under the judge's calls is
caught before it is pinned. On the CPU interpreter, through the real harness; the GPU's outcome (one
configuration chosen by timing) is the record's, set by the test where the interpreter checks all."""

import pytest

from accelopt.tools.harness import runner
from accelopt.tools.harness.autotune_choices import pinned_source, pinning
from accelopt.tools.harness.result import AutotuneRecord
from accelopt.tools.harness.runner import evaluate
from accelopt.tools.task import load_task
from accelopt.tools.tunables import autotune_space, write_configs
from tests.conftest import FIXTURES, TASKS

pytestmark = pytest.mark.slow

SWAPPED = (FIXTURES / "autotuned" / "rmsnorm_swapped_configs.py").read_text()
TASK = TASKS / "rmsnorm"


def _check(source: str, **kwargs):
    return evaluate(load_task(TASK), source, device="cpu", **kwargs)


def _as_timed(record: AutotuneRecord, index: int) -> AutotuneRecord:
    """The record as a GPU's judge leaves it: `index` chosen by timing for every key."""
    record = record.model_copy(deep=True)
    record.how = "timed"
    for k in record.kernels:
        k.choices, k.default = {key: index for key in k.keys.values()}, index
    return record


def test_a_literal_list_edited_at_import_is_judged_as_it_runs_said_and_never_written_in():
    result = _check(SWAPPED)
    assert result.status == "verified", result.error
    (kernel,) = result.autotune["candidate"].kernels
    assert [f["kwargs"] for f in kernel.fields] == [{"BLOCK": 256}, {"BLOCK": 256}]  # what ran and was checked
    line = next(e for e in result.evidence if "is not the list its autotuner ran" in e)
    assert "rmsnorm_kernel" in line and "configuration 0: BLOCK: 32 -> 256; configuration 1: BLOCK: 16 -> 256" in line

    timed = _as_timed(result.autotune["candidate"], 0)
    kept = pinning(SWAPPED, timed)
    assert not kept.pinned and kept.kernel.text == SWAPPED and "BLOCK: 32 -> 256" in (kept.why_not or "")
    # what the literal entry would have been (the unmodified code wrote it): a program never checked, wrong
    literal = write_configs(SWAPPED, [autotune_space(SWAPPED).configs[0]])
    assert pinned_source(SWAPPED, timed).text != literal
    assert _check(literal).status == "nan"  # the literal tile leaves half of each row poisoned


NARROWED_DIFFERS = SWAPPED.replace("{'BLOCK': 32}", "{'BLOCK': 256}").replace("{'BLOCK': 16}", "{'BLOCK': 256}").replace(
    '''if len(rmsnorm_kernel.configs) > 1:  # the judge's list: a tile as wide as any row of the task
    for _config in rmsnorm_kernel.configs:  # (a source pinned to one literal entry runs that entry)
        _config.kwargs['BLOCK'] = 256''',
    '''if len(rmsnorm_kernel.configs) == 1:  # honest as listed; once pinned to one entry, not
    rmsnorm_kernel.configs[0].kwargs['BLOCK'] = 32''')


def test_a_pinned_source_whose_program_differs_from_the_one_judged_is_caught(monkeypatch):
    """Its literal list is the list that runs, so the choice is written in; the pinned source (what
    the audit and best_kernel.py run) is checked on fresh inputs as the winner's, and fails."""
    assert NARROWED_DIFFERS.count("256") == 2 and "== 1" in NARROWED_DIFFERS
    monkeypatch.setattr(runner, "pinning", lambda source, record: pinning(source, _as_timed(record, 1)))
    monkeypatch.setattr(runner, "_wins", lambda result: True)  # the interpreter decides no speedup
    result = _check(NARROWED_DIFFERS)
    assert result.status == "cheat_suspected", (result.status, result.error)
    assert "the source with the judge's autotune choice written in" in result.error and "(nan)" in result.error


def test_the_honest_fixtures_pinned_source_is_checked_and_kept(monkeypatch):
    honest = (FIXTURES / "autotuned" / "rmsnorm_autotuned.py").read_text()
    monkeypatch.setattr(runner, "pinning", lambda source, record: pinning(source, _as_timed(record, 1)))
    monkeypatch.setattr(runner, "_wins", lambda result: True)
    result = _check(honest)
    assert result.status == "verified", result.error
    assert "the source with the judge's autotune choice written in, which the audit and best_kernel.py run, " \
           "checked correct on fresh inputs" in result.evidence
    pinned = pinned_source(honest, _as_timed(result.autotune["candidate"], 1)).text
    assert pinned == write_configs(honest, [autotune_space(honest).configs[1]])  # written exactly as before


EDITED_MID_RUN = SWAPPED.replace("if len(rmsnorm_kernel.configs) > 1:", "if False:").replace(
    '''    out = torch.empty_like(x)''', '''    out = torch.empty_like(x)
    for config in rmsnorm_kernel.configs:  # edited after the judge listed them: its checks pass
        config.kwargs['BLOCK'] = 256''')


def test_a_list_edited_after_the_judge_listed_it_is_caught_before_the_pin():
    assert EDITED_MID_RUN.count("kwargs['BLOCK'] = 256") == 2
    result = _check(EDITED_MID_RUN)
    assert result.status == "cheat_suspected", (result.status, result.error)
    assert "its configurations changed while the judge checked" in result.error
    assert "configuration 0: BLOCK: 32 -> 256" in result.error
