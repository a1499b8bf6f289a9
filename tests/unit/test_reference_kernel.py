"""The torch.compile comparator in each mode: the reference compiled as asked, and nothing else."""

import pytest
import torch

from accelopt.tools.harness.reference_kernel import COMPILE_MODES, compiled_reference_source, torch_comparators
from accelopt.tools.task import load_task
from tests.conftest import TASKS


def _module(source: str) -> dict:
    namespace: dict = {}
    exec(compile(source, "<comparator>", "exec"), namespace)  # noqa: S102 - the task's own reference, trusted
    return namespace


@pytest.mark.parametrize("mode", COMPILE_MODES)
def test_each_mode_compiles_the_reference_in_that_mode(mode, monkeypatch):
    task = load_task(TASKS / "rmsnorm")
    calls = []

    def fake_compile(function, **kwargs):
        calls.append(kwargs)
        return function

    monkeypatch.setattr(torch, "compile", fake_compile)
    entry = _module(compiled_reference_source(task, mode))[task.spec.entry_point]
    x, w = torch.randn(4, 64), torch.randn(64)
    torch.testing.assert_close(entry(x, w), entry.__globals__["_reference"].reference(x, w))
    assert calls == [{"dynamic": False, "mode": None if mode == "default" else mode}]


def test_the_comparators_name_the_mode_in_their_docstring_and_refuse_an_unknown_one():
    task = load_task(TASKS / "rmsnorm")
    assert "mode max-autotune-no-cudagraphs" in torch_comparators(task, "max-autotune-no-cudagraphs")["torch_compile"]
    with pytest.raises(ValueError, match="expected one of default, max-autotune-no-cudagraphs"):
        compiled_reference_source(task, "max-autotune")  # type: ignore[arg-type] - CUDA graphs: not offered
