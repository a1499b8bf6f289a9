"""The judge's choice of an autotuned kernel's configuration (tools/harness/autotune_rounds.py):
per tuning key the least geometric-mean time over the workloads sharing it, a tie within the noise
floor to the earlier configuration, and the cost of a shared key said with its figures; the choice
carried to a fresh process as a pinned source (tools/harness/autotune_choices.py)."""

import math

from accelopt.tools.harness.autotune_choices import autotune_evidence, pinned_source
from accelopt.tools.harness.autotune_rounds import choose, first_within, pins_of, shared_key_notes
from accelopt.tools.harness.result import AutotuneRecord, EvalResult
from accelopt.tools.tunables import autotune_space
from tests.conftest import FIXTURES

# AccelOpt's rmsnorm_h128 best on FlashInfer-Bench's two workloads, as measured on an H100: every
# configuration ~2 µs on batch 1088; 172 µs or 317 µs on batch 520128 depending on the configuration.
SMALL = [2.00, 1.98, 2.01, 2.00]
LARGE = [317.0, 172.0, 300.0, 171.5]
KEY = "(128, 'torch.bfloat16')"


def test_a_shared_key_takes_the_configuration_best_over_its_workloads():
    times = {"batch_size1088": SMALL, "batch_size520128": LARGE}
    keys = {"batch_size1088": KEY, "batch_size520128": KEY}
    # geomean over both: configuration 1 and 3 tie within 2% (3 is 0.3% faster): the earlier wins
    assert choose(times, keys, 0.02) == {KEY: 1}
    # what the small workload alone would pick (any of them is within noise) is never the rule
    assert choose({"batch_size1088": SMALL}, {"batch_size1088": KEY}, 0.02) == {KEY: 0}


def test_separate_keys_choose_apart_and_a_configuration_that_cannot_run_is_never_chosen():
    times = {"a": [1.0, 2.0, math.inf], "b": [5.0, 4.0, math.inf]}
    assert choose(times, {"a": "k1", "b": "k2"}, 0.02) == {"k1": 0, "k2": 1}
    assert choose({"a": [math.inf, 3.0]}, {"a": "k"}, 0.02) == {"k": 1}
    assert first_within([math.log(1.0), math.log(1.015), math.log(0.999)], 0.02) == 0


def test_the_cost_of_a_shared_key_is_said_with_its_figures():
    times = {"batch_size1088": SMALL, "batch_size520128": LARGE}
    keys = {"batch_size1088": KEY, "batch_size520128": KEY}
    notes = shared_key_notes("rmsnorm_kernel", ["hidden"], times, keys, {KEY: 1}, 0.02,
                             {"batch_size1088": "kernel-only", "batch_size520128": "span"})
    assert len(notes) == 1, notes
    assert "batch_size520128 runs the configuration chosen on batch_size1088 when that shape comes first" in notes[0]
    assert "up to 317.0 µs against 171.5 µs" in notes[0] and "`key`" in notes[0]
    # workloads that agree on their best cost nothing: no advice
    assert shared_key_notes("k", ["n"], {"a": [1.0, 3.0], "b": [2.0, 9.0]}, {"a": "x", "b": "x"}, {"x": 0}, 0.02,
                            {"a": "span", "b": "span"}) == []


AUTOTUNED = (FIXTURES / "autotuned" / "rmsnorm_autotuned.py").read_text()


def _record(how: str, choices: dict, default: int, configs: int = 3) -> AutotuneRecord:
    return AutotuneRecord(how=how, kernels=[{"kernel": "rmsnorm_kernel", "key": ["hidden"], "configs": ["c"] * configs,
                                             "choices": choices, "default": default}])


def test_the_chosen_configuration_is_written_into_the_source_for_a_fresh_process():
    pinned = pinned_source(AUTOTUNED, _record("timed", {"(64,)": 1, "(200,)": 1}, 1))
    space = autotune_space(pinned)
    assert space is not None and space.pinned and space.configs == [{"BLOCK": 128, "num_warps": 4, "num_stages": 2}]
    assert pinned.replace(" ", "").count("key=['hidden']") == 1  # the rest of the decorator kept
    # nothing chosen by timing, two configurations chosen, or a list that does not match: unchanged
    assert pinned_source(AUTOTUNED, _record("checked", {}, 0)) == AUTOTUNED
    assert pinned_source(AUTOTUNED, _record("timed", {"(64,)": 0, "(200,)": 2}, 0)) == AUTOTUNED
    assert pinned_source(AUTOTUNED, _record("timed", {}, 0, configs=4)) == AUTOTUNED
    assert pins_of(_record("timed", {"(64,)": 2}, 2).model_dump()) == {"rmsnorm_kernel": {"(64,)": 2, "*": 2}}


def test_the_evidence_says_which_configuration_ran_and_who_chose_it():
    record = _record("timed", {KEY: 1}, 1)
    record.kernels[0].ran = {"batch_size1088": 1, "batch_size520128": 1}
    record.notes = ["rmsnorm_kernel: batch_size520128 runs the configuration chosen on batch_size1088 ..."]
    lines = autotune_evidence(EvalResult(status="verified", device="cuda", autotune={"candidate": record}))
    assert lines[0] == ("autotune, the kernel: rmsnorm_kernel (the judge timed 3 configurations): "
                        "batch_size1088: 1: c; batch_size520128: 1: c")
    assert lines[1].startswith("autotune, the kernel: rmsnorm_kernel: batch_size520128 runs")
