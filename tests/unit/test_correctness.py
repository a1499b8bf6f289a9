"""The judge's correctness rules (tools/harness/correctness.py), each evaluator on CPU tensors: what
it passes, what it rejects with which status and message, and the registry that picks it by the
task's `correctness` name."""

import subprocess
import sys
import typing

import pytest
import torch

from accelopt.tools.harness import correctness
from accelopt.tools.harness.correctness import (
    EVALUATORS,
    AllClose,
    ExactBytes,
    Reject,
    RelativeL2,
    UnknownCorrectness,
    evaluator,
    for_request,
)
from accelopt.tools.task import TaskSpec
from tests.conftest import ROOT

FP4 = getattr(torch, "float4_e2m1fn_x2", None)
needs_fp4 = pytest.mark.skipif(FP4 is None, reason="this torch has no float4_e2m1fn_x2")


def _rejected(rule, outs, refs) -> Reject:
    with pytest.raises(Reject) as caught:
        rule(torch, outs, refs, "w")
    return caught.value


def _fp4(values: list[int]):
    return torch.tensor(values, dtype=torch.uint8).view(FP4)


# ---------------------------------------------------------------- allclose

def test_allclose_passes_within_tolerance_and_reports_the_worst_errors():
    ref = torch.tensor([1.0, 2.0, 4.0])
    out = ref + torch.tensor([0.0, 0.005, -0.02])  # 0.02 is outside atol, inside rtol * 4
    worst = AllClose(1e-2, 1e-2)(torch, [out], ref, "w")
    assert worst["max_abs_err"] == pytest.approx(0.02, rel=1e-5)
    assert worst["max_rel_err"] == pytest.approx(0.005, rel=1e-5)


def test_allclose_rejects_an_element_outside_both_tolerances():
    ref = torch.ones(10)
    out = ref.clone()
    out[4] = 1.5
    rejected = _rejected(AllClose(1e-2, 1e-2), [out], ref)
    assert rejected.status == "wrong_output"
    assert rejected.error == ("w output 0: 1/10 elements outside atol=0.01 rtol=0.01; max abs err 0.5, "
                              "max rel err 0.5")
    assert rejected.extra == {"max_abs_err": 0.5, "max_rel_err": 0.5}


def test_allclose_with_a_matched_ratio_passes_few_elements_off_and_rejects_more():
    ref = torch.ones(100)
    out = ref.clone()
    out[:3] = 2.0
    assert AllClose(1e-2, 1e-2, ratio=0.97)(torch, [out], ref, "w")["max_abs_err"] == 1.0
    out[:4] = 2.0
    rejected = _rejected(AllClose(1e-2, 1e-2, ratio=0.97), [out], ref)
    assert rejected.status == "wrong_output" and "96.00% matched where 97.00% is required" in rejected.error


def test_both_nan_is_equal_but_a_nan_the_reference_lacks_rejects_under_every_rule():
    ref = torch.tensor([1.0, float("nan"), 3.0])
    assert AllClose(0.0, 0.0)(torch, [ref.clone()], ref, "w") == {"max_abs_err": 0.0, "max_rel_err": 0.0}
    out = ref.clone()
    out[0] = float("inf")
    for name in EVALUATORS:
        rejected = _rejected(evaluator(name, 1.0, 1.0, None), [out], ref)
        assert rejected.status == "nan", name
        assert rejected.error.startswith("w output 0: 1/3 NaN/Inf values where the reference is finite")


# ---------------------------------------------------------------- relative L2

def test_relative_l2_passes_below_rtol_whatever_single_elements_do():
    ref = torch.ones(10_000)
    out = ref.clone()
    out[0] = 2.0  # one element 100% off: ||d|| / ||ref|| = 1/100
    worst = RelativeL2(atol=0.0, rtol=0.02)(torch, [out], ref, "w")
    assert worst == {"max_abs_err": 0.0, "max_rel_err": pytest.approx(0.01)}
    with pytest.raises(Reject):  # the same output under allclose with that rtol
        AllClose(0.0, 0.02)(torch, [out], ref, "w")


def test_relative_l2_rejects_above_rtol_with_its_figure():
    ref = torch.ones(100)
    out = ref * 1.1
    rejected = _rejected(RelativeL2(atol=1.0, rtol=0.05), [out], ref)  # atol is not part of the rule
    assert rejected.status == "wrong_output"
    assert rejected.error == "w output 0: relative L2 error 0.1 above 0.05"
    assert rejected.extra == {"max_rel_err": pytest.approx(0.1)}


# ---------------------------------------------------------------- exact bytes (packed fp4)

@needs_fp4
def test_exact_bytes_passes_the_same_bytes_and_rejects_one_flipped_bit():
    ref = _fp4([0x12, 0x34, 0x56, 0x78])
    assert ExactBytes()(torch, [ref.clone()], ref, "w") == {"max_abs_err": 0.0, "max_rel_err": 0.0}
    rejected = _rejected(ExactBytes(), [_fp4([0x12, 0x35, 0x56, 0x78])], ref)
    assert rejected.status == "wrong_output"
    assert rejected.error == ("w output 0: 1/4 bytes of packed torch.float4_e2m1fn_x2 differ from the reference "
                              "(packed fp4 is compared exactly)")


@needs_fp4
@pytest.mark.parametrize("name", sorted(EVALUATORS))
def test_packed_outputs_are_compared_bit_for_bit_under_every_rule(name):
    """Loose tolerances change nothing for a packed output; its float neighbour is still judged
    by the task's rule."""
    ref = _fp4([0x12, 0x34])
    loose = evaluator(name, 1e9, 1e9, None)
    assert loose(torch, [ref.clone(), torch.ones(2)], (ref, torch.ones(2)), "w")["max_abs_err"] == 0.0
    assert _rejected(loose, [_fp4([0x13, 0x34]), torch.ones(2)], (ref, torch.ones(2))).status == "wrong_output"


# ---------------------------------------------------------------- what every rule checks first

@pytest.mark.parametrize("name", sorted(EVALUATORS))
def test_every_rule_rejects_outputs_that_cannot_be_compared(name):
    rule, ref = evaluator(name, 1.0, 1.0, None), torch.ones(4)
    cases = [
        ([ref, ref], "shape_mismatch", "w: returned 2 outputs, expected 1"),
        ([ref.reshape(2, 2)], "shape_mismatch", "w output 0: shape (2, 2), expected (4,)"),
        ([ref.double()], "dtype_mismatch", "w output 0: dtype torch.float64, expected torch.float32"),
        ([{"not_a_tensor": "a list"}], "shape_mismatch", "w output 0: returned a list, expected a plain torch.Tensor"),
    ]
    for outs, status, error in cases:
        rejected = _rejected(rule, outs, ref)
        assert (rejected.status, rejected.error) == (status, error)
    assert rule(torch, (ref.clone(),), [ref], "w")["max_rel_err"] == 0.0


def test_the_worst_errors_are_the_worst_over_all_outputs():
    refs = (torch.ones(3), torch.ones(3))
    outs = [torch.tensor([1.0, 1.0, 1.004]), torch.tensor([1.002, 1.0, 1.0])]
    worst = AllClose(1e-2, 0.0)(torch, outs, refs, "w")
    assert worst["max_abs_err"] == pytest.approx(0.004, rel=1e-4)
    with pytest.raises(Reject, match="w output 1: 1/3 elements outside"):  # the second output fails alone
        AllClose(1e-2, 0.0)(torch, [outs[0], torch.tensor([1.5, 1.0, 1.0])], refs, "w")


# ---------------------------------------------------------------- the registry

def test_the_registry_holds_every_name_the_task_format_accepts():
    assert set(EVALUATORS) == set(typing.get_args(TaskSpec.model_fields["correctness"].annotation))
    assert all(EVALUATORS[name].name == name for name in EVALUATORS)


def test_the_registry_refuses_an_unknown_name_and_says_which_rules_exist():
    with pytest.raises(UnknownCorrectness, match=r"no correctness rule named 'max_ulp'; the rules are: "
                                                 r"allclose, relative_l2"):
        evaluator("max_ulp", 1e-2, 1e-2)
    with pytest.raises(UnknownCorrectness):
        for_request({"correctness": "exact_bytes", "atol": 0.0, "rtol": 0.0})  # a rule, not a task's name


def test_a_request_gets_its_tasks_rule_with_its_tolerances():
    req = {"atol": 1e-3, "rtol": 2e-3, "required_matched_ratio": 0.9}
    assert for_request(req) == AllClose(1e-3, 2e-3, 0.9)  # no name: allclose
    assert for_request({**req, "correctness": None}) == AllClose(1e-3, 2e-3, 0.9)
    assert type(for_request({**req, "correctness": "relative_l2"})) is RelativeL2


def test_the_judge_refuses_an_unknown_rule_before_any_sandbox_starts(tmp_path):
    from accelopt.tools.harness.judge import Judge

    path = tmp_path / "reference.py"
    path.write_text("def flops(params, dtype):\n    return 1.0\n\n\ndef bytes_moved(params, dtype):\n    return 4.0\n")
    judge = Judge.__new__(Judge)  # no torch set-up, no sandboxes: only what evaluate reads first
    judge.references, judge.costs_checked, judge.boxes = {}, {}, None
    req = {"reference_path": str(path), "dtype": "float32", "workloads": [{"name": "w", "params": {}}],
           "correctness": "max_ulp", "atol": 0.0, "rtol": 0.0}
    with pytest.raises(Reject) as caught:
        judge.evaluate(req)
    assert caught.value.status == "reference_error" and "no correctness rule named 'max_ulp'" in caught.value.error
    assert judge.boxes is None


def test_the_judge_run_as_a_script_loads_the_rules_by_path_without_torch():
    """judge.py runs as a script that imports nothing of the accelopt package: it loads this module
    by path, and its Reject is the one the rules raise. Importing the rules imports no torch."""
    code = ("import runpy, sys\n"
            f"judge = runpy.run_path({str(ROOT / 'tools' / 'harness' / 'judge.py')!r})\n"
            "rules = judge['correctness']\n"
            "assert rules.__name__ == 'accelopt_correctness' and judge['Reject'] is rules.Reject\n"
            "assert 'torch' not in sys.modules and 'accelopt' not in sys.modules\n"
            "print(sorted(rules.EVALUATORS))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['allclose', 'relative_l2']"


def test_the_judge_and_the_rules_share_one_reject():
    from accelopt.tools.harness import judge

    assert judge.Reject is correctness.Reject
    with pytest.raises(judge.Reject):
        judge._judged(torch, [torch.zeros(2)], torch.ones(2), {"atol": 0.0, "rtol": 0.0}, "w")
