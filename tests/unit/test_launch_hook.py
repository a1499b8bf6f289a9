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
        if launches.graph_cls is not None:
            launches.graph_cls.replay = launches.original_replay
    assert launches.names == ["add_kernel", "add_kernel"]
    assert annotations == (["accelopt::triton_launch"] if interpreter else [])


def test_a_cuda_graph_replay_is_a_launch_recorded_and_stubbed_like_one():
    # an honest kernel that replays a CUDA graph launches its Triton kernels without
    # JITFunction.run: the ghost replay must stub the replay, or it finds "no launch" and rejects
    from accelopt.tools.harness.sandbox import GRAPH_REPLAY

    replayed: list[object] = []
    launches = Launches(torch, interpreter=False)
    real_run, real_replay = launches.original, launches.original_replay
    try:
        launches.original_replay = replayed.append
        graph = object()
        torch.cuda.CUDAGraph.replay(graph)
        assert launches.intact()
        launches.stub = True
        torch.cuda.CUDAGraph.replay(graph)
        torch.cuda.CUDAGraph.replay = lambda g: None  # what a kernel would do to hide a replay
        assert not launches.intact()
    finally:
        launches.cls.run, torch.cuda.CUDAGraph.replay = real_run, real_replay
    assert replayed == [graph] and launches.names == [GRAPH_REPLAY, GRAPH_REPLAY]
