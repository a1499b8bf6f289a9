"""An autotuned kernel's configurations are compiled together before its first benchmark of a
tuning key (tools/harness/sandbox.compile_configs_together), once per key, never on the calls after."""

import importlib.util
import sys
from pathlib import Path

import pytest

triton_autotuner = pytest.importorskip("triton.runtime.autotuner")
pytest.importorskip("triton.runtime._async_compile")

SANDBOX = Path(__file__).resolve().parents[2] / "tools" / "harness" / "sandbox.py"


class _Tensor:
    dtype = "torch.float32"


class _FakeTuner:
    """What the hook reads of an Autotuner: its configurations, argument names, key and cache."""

    def __init__(self):
        self.configs, self.arg_names, self.keys, self.cache = [1, 2, 3], ["x", "n"], ["n"], {}
        self.warmed: list[dict] = []

    def warmup(self, *args, **kwargs):
        self.warmed.append(kwargs)


def test_each_new_tuning_key_is_compiled_together_once(monkeypatch):
    monkeypatch.setattr(triton_autotuner.Autotuner, "run", lambda self, *a, **k: self.cache.setdefault(
        tuple([dict(zip(self.arg_names, a))["n"], "torch.float32"]), "best"))
    spec = importlib.util.spec_from_file_location("sandbox_under_test", SANDBOX)
    sandbox = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "sandbox_under_test", sandbox)
    spec.loader.exec_module(sandbox)
    sandbox.compile_configs_together(threads=2)
    tuner, x = _FakeTuner(), _Tensor()
    run = triton_autotuner.Autotuner.run
    run(tuner, x, 128, grid=(1,), warmup=False)
    assert len(tuner.warmed) == 1 and "warmup" not in tuner.warmed[0] and tuner.warmed[0]["grid"] == (1,)
    run(tuner, x, 128, grid=(1,), warmup=False)  # tuned: nothing compiled again
    assert len(tuner.warmed) == 1
    run(tuner, x, 256, grid=(2,), warmup=False)  # a new key: its configurations, together
    assert len(tuner.warmed) == 2
    tuner.configs = [1]
    run(tuner, x, 512, grid=(2,), warmup=False)  # one configuration: nothing to tune
    assert len(tuner.warmed) == 2
