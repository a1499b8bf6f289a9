"""What the interpreter's trace counts (sandbox.host_ops), what a hook may write (sandbox.Hooks), and
which ops and kernels are bookkeeping (judge.foreign_work)."""

import threading

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from accelopt.tools.harness.judge import foreign_work
from accelopt.tools.harness.sandbox import HOOK, LAUNCH, Hooks, _all_threads, host_ops


def _traced(fn) -> list[str]:
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, experimental_config=_all_threads()) as prof:
        with record_function("accelopt::call"):
            fn()
    return host_ops(prof.events())


def test_ops_at_any_depth_and_on_any_thread_count_but_not_inside_a_launch():
    x = torch.randn(4, 8)

    def call():
        with record_function(LAUNCH):
            x.exp()  # the launch's own host work (Triton's interpreter)
            with record_function(HOOK):
                x.amax()  # a hook Triton calls inside the launch
        with record_function("mine"):
            x.sum()  # under the kernel's own annotation
        worker = threading.Thread(target=lambda: x.tanh())
        worker.start()
        worker.join()

    ops = [op.split("<")[0] for op in _traced(call)]
    assert "aten::exp" not in ops
    assert {"aten::amax", "aten::sum", "aten::tanh"} <= set(ops)


def test_index_ops_are_bookkeeping_on_integers_only():
    x, lengths = torch.randn(4, 8, dtype=torch.float64), torch.arange(5)
    seen = _traced(lambda: (torch.cumsum(lengths, 0), torch.cumsum(x, -1)))
    assert foreign_work("cpu", seen, []) == ["aten::cumsum<double>"]
    cub = "void at_cuda_detail::cub::DeviceScanKernel<Policy, {}*, {}*, Sum>"
    assert foreign_work("cuda", [cub.format("long", "long"), cub.format("float", "float")], []) == \
        [cub.format("float", "float")]


def test_a_hook_may_reset_buffers_not_write_values():
    hooks = Hooks(torch, annotate=False)
    hooks.checking = True
    buf = torch.randn(16)
    hooks.wrap(lambda nargs: nargs["buf"].zero_(), "reset")({"buf": buf})
    hooks.wrap(lambda nargs: nargs["buf"].zero_(), "reset")({"buf": buf})  # unchanged: nothing to say
    assert hooks.wrote == []
    hooks.wrap(lambda nargs: nargs["buf"].copy_(torch.arange(16.0)), "compute")({"buf": buf})
    assert "differing values" in hooks.wrote[0]


@pytest.mark.parametrize("fills", [(1.0, 2.0)])
def test_a_fill_that_changes_between_calls_is_computed(fills):
    hooks = Hooks(torch, annotate=False)
    hooks.checking = True
    buf = torch.zeros(8)
    guarded = hooks.wrap(lambda b, v: b.fill_(v), "fill")
    for v in fills:
        guarded(buf, v)
    assert "changes from call to call" in hooks.wrote[0]
