"""The sandbox's Triton launch hook: it records every launch on both devices, and adds a profiler
annotation only on the interpreter. On a GPU an annotation per launch is host time that
torch.compile's launcher never pays, so multi-kernel candidates were timed slower than their
comparators."""

from __future__ import annotations

import contextlib

import pytest
import torch

from accelopt.tools.harness.sandbox import Launches


class _Kernel:
    __name__ = "add_kernel"


@pytest.mark.parametrize("interpreter", [False, True])
def test_launches_are_recorded_and_annotated_only_on_the_interpreter(monkeypatch, interpreter):
    annotations: list[str] = []

    @contextlib.contextmanager
    def record_function(name):
        annotations.append(name)
        yield

    monkeypatch.setattr(torch.profiler, "record_function", record_function)
    launches = Launches(torch, interpreter=interpreter)
    real_run = launches.original
    try:
        launches.original = lambda fn, *args, **kwargs: ("launched", args, kwargs)
        assert launches.cls.run(_Kernel(), 1, grid=(4,)) == ("launched", (1,), {"grid": (4,)})
        launches.stub = True
        assert launches.cls.run(_Kernel(), 2) is None  # ghost replay: stubbed, still recorded
    finally:
        launches.cls.run = real_run
    assert launches.names == ["add_kernel", "add_kernel"]
    assert annotations == (["accelopt::triton_launch"] if interpreter else [])
