"""The sandbox's hand on an autotuner (tools/harness/sandbox.AutotuneControl): on a GPU every
configuration of a tuning key is compiled together before its first call, once per key; the
configuration that runs is the judge's pin for that key (else the "*" pin, else the first), and
Triton's autotuner never times one; an autotuner whose choice runs its own code is left alone."""

import importlib.util
import sys
import types
from pathlib import Path

import pytest

triton_autotuner = pytest.importorskip("triton.runtime.autotuner")
pytest.importorskip("triton.runtime._async_compile")

SANDBOX = Path(__file__).resolve().parents[2] / "tools" / "harness" / "sandbox.py"


class _Tensor:
    dtype = "torch.float32"


class _FakeTuner:
    """What the control reads of an Autotuner: its configurations, argument names, key and cache."""

    def __init__(self):
        self.configs, self.arg_names, self.keys, self.cache = ["c0", "c1", "c2"], ["x", "n"], ["n"], {}
        self.warmed: list[dict] = []
        self.base_fn = types.SimpleNamespace(__name__="kernel")

    def warmup(self, *args, **kwargs):
        self.warmed.append(kwargs)


@pytest.fixture
def sandbox(monkeypatch):
    ran: list[object] = []

    def original(self, *a, **k):  # Triton's run: a cached choice runs, else it would time them all
        key = tuple([dict(zip(self.arg_names, a))["n"], "torch.float32"])
        ran.append(self.cache.get(key, "timed by Triton"))

    monkeypatch.setattr(triton_autotuner.Autotuner, "run", original)
    spec = importlib.util.spec_from_file_location("sandbox_under_test", SANDBOX)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "sandbox_under_test", module)
    spec.loader.exec_module(module)
    module.ran = ran
    return module


def test_each_new_tuning_key_is_compiled_together_once_and_runs_the_pin(sandbox):
    control = sandbox.AutotuneControl(gpu=True, threads=2)
    tuner, x = _FakeTuner(), _Tensor()
    run = triton_autotuner.Autotuner.run
    run(tuner, x, 128, grid=(1,), warmup=False)
    assert len(tuner.warmed) == 1 and "warmup" not in tuner.warmed[0] and tuner.warmed[0]["grid"] == (1,)
    run(tuner, x, 128, grid=(1,), warmup=False)  # compiled: nothing compiled again
    assert len(tuner.warmed) == 1
    control.pins = {"kernel": {"(256, 'torch.float32')": 2, "*": 1}}
    run(tuner, x, 256, grid=(2,), warmup=False)  # a new key: its configurations, together
    run(tuner, x, 128, grid=(2,), warmup=False)
    assert len(tuner.warmed) == 2
    assert sandbox.ran == ["c0", "c0", "c2", "c1"]  # never "timed by Triton"
    assert control.ran() == [["kernel", "(128, 'torch.float32')", 1], ["kernel", "(256, 'torch.float32')", 2]]
    tuner.configs = ["only"]
    run(tuner, x, 512, grid=(2,), warmup=False)  # one configuration: nothing to choose or compile
    assert len(tuner.warmed) == 2 and control.ran() == []


def test_an_autotuner_whose_choice_runs_its_own_code_is_left_to_it(sandbox):
    control = sandbox.AutotuneControl(gpu=False)
    tuner, x = _FakeTuner(), _Tensor()
    tuner.early_config_prune = lambda configs, nargs, **kw: configs
    control.pins = {"kernel": {"*": 2}}
    triton_autotuner.Autotuner.run(tuner, x, 64)
    assert sandbox.ran == ["timed by Triton"] and tuner.warmed == []  # the interpreter compiles nothing ahead
    assert control.ran() == [["kernel", "(64, 'torch.float32')", None]]
    assert "prune_configs_by" in sandbox.why_not_controlled(tuner)
