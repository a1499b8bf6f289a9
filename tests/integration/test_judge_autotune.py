"""The judge owns autotuning, checked on the CPU interpreter through the real harness (a judge,
its sandboxes): an @triton.autotune kernel, which Triton's own autotuner cannot run without a GPU
driver, is checked configuration by configuration; a wrong configuration rejects the kernel and
is named; a kernel that takes the choice back from the judge is caught; an autotuner the judge
cannot replay keeps its own choice, and the record says why."""

import pytest

from accelopt.tools.harness.runner import evaluate
from accelopt.tools.task import load_task
from tests.conftest import FIXTURES, TASKS

pytestmark = pytest.mark.slow

AUTOTUNED = (FIXTURES / "autotuned" / "rmsnorm_autotuned.py").read_text()
TASK = TASKS / "rmsnorm"


def _check(source: str, **kwargs):
    task = load_task(TASK)
    return evaluate(task, source, device="cpu", **kwargs)


def test_every_configuration_is_checked_and_none_is_timed():
    result = _check(AUTOTUNED, compare={"baseline": load_task(TASK).baseline_source})
    assert result.status == "verified", result.error
    record = result.autotune["candidate"]
    assert record.how == "checked"
    (kernel,) = record.kernels
    assert kernel.kernel == "rmsnorm_kernel" and kernel.checked == 3 and not kernel.timed
    assert kernel.configs[2].startswith("BLOCK: 256, num_warps: 8")
    assert set(kernel.ran) == {"T4_H64", "T3_H200"} and set(kernel.ran.values()) == {0}
    assert kernel.keys["T4_H64"] != kernel.keys["T3_H200"]  # key=['hidden']: two shapes, two keys
    line = next(e for e in result.evidence if e.startswith("autotune, the kernel:"))
    assert "all 3 configurations checked correct on every workload, none timed (no GPU)" in line


WRONG_LAST = AUTOTUNED.replace(
    "triton.Config({'BLOCK': 256}, num_warps=8),", "triton.Config({'BLOCK': 256, 'SCALE': 2.0}, num_warps=8),").replace(
    "triton.Config({'BLOCK': 64}, num_warps=2),", "triton.Config({'BLOCK': 64, 'SCALE': 1.0}, num_warps=2),").replace(
    "triton.Config({'BLOCK': 128}, num_warps=4, num_stages=2),",
    "triton.Config({'BLOCK': 128, 'SCALE': 1.0}, num_warps=4, num_stages=2),").replace(
    "eps, BLOCK: tl.constexpr):", "eps, BLOCK: tl.constexpr, SCALE: tl.constexpr):").replace(
    "(x * rstd * w)", "(x * rstd * w * SCALE)")


def test_a_wrong_configuration_rejects_the_kernel_and_is_named():
    assert WRONG_LAST != AUTOTUNED and WRONG_LAST.count("SCALE") == 5
    result = _check(WRONG_LAST)
    assert result.status == "wrong_output", (result.status, result.error)
    assert "configuration 2 of rmsnorm_kernel (BLOCK: 256, SCALE: 2.0, num_warps: 8" in result.error


TAKES_THE_CHOICE = AUTOTUNED + '''

from triton.runtime.autotuner import Autotuner as _Autotuner

_judged = _Autotuner.run


def _own_choice(self, *args, **kwargs):  # tunes for itself whatever the judge pinned
    self.cache.clear()
    return _judged(self, *args, **kwargs)


_Autotuner.run = _own_choice
'''


def test_a_kernel_that_takes_the_choice_back_from_the_judge_is_caught():
    result = _check(TAKES_THE_CHOICE)
    assert result.status == "cheat_suspected", (result.status, result.error)
    assert "Autotuner.run was replaced" in result.error


PRUNED = AUTOTUNED.replace(
    "key=['hidden'],", "key=['hidden'],\n    prune_configs_by={'early_config_prune': lambda configs, nargs, **kw: configs[:1]},")


def test_an_autotuner_the_judge_cannot_replay_keeps_its_own_choice_and_says_why():
    assert PRUNED != AUTOTUNED
    result = _check(PRUNED)
    assert result.status == "verified", result.error
    (kernel,) = result.autotune["candidate"].kernels
    assert not kernel.controlled and "prune_configs_by" in (kernel.why or "")
    assert any("its own autotuner chose (prune_configs_by" in e for e in result.evidence), result.evidence


TENSOR_KEY = AUTOTUNED.replace("key=['hidden'],", "key=['w_ptr'],")


def test_a_key_the_judge_cannot_name_is_left_to_triton_and_the_interpreter_says_why():
    """A tuning key on a tensor argument: its values are not numbers or strings, so the judge cannot
    name the key across processes and leaves the choice to Triton's autotuner, which needs a GPU
    driver to time configurations: on the interpreter the kernel fails, and the error says why."""
    assert TENSOR_KEY != AUTOTUNED
    result = _check(TENSOR_KEY)
    assert result.status == "runtime_error", (result.status, result.error)
    assert "active drivers" in result.error and "the judge chooses instead, except for" in result.error


TORCH_IN_ONE = AUTOTUNED.replace(
    "triton.Config({'BLOCK': 256}, num_warps=8),", "triton.Config({'BLOCK': 256, 'EAGER': 1}, num_warps=8),").replace(
    "eps, BLOCK: tl.constexpr):", "eps, BLOCK: tl.constexpr, EAGER: tl.constexpr = 0):").replace(
    '''    rmsnorm_kernel[(n_rows,)](x, w, out, x.stride(0), hidden, 1e-6)
    return out''', '''    rmsnorm_kernel[(n_rows,)](x, w, out, x.stride(0), hidden, 1e-6)
    if rmsnorm_kernel.best_config.kwargs.get("EAGER"):  # this configuration's answer is torch's
        xf = x.float()
        out = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)
    return out''')


def test_a_configuration_that_computes_outside_triton_is_caught_and_named():
    """Honest under the first configuration, which the interpreter's checks run; under the third
    the answer is torch's. Each configuration's checked call is traced too."""
    assert TORCH_IN_ONE.count("EAGER") == 3
    result = _check(TORCH_IN_ONE)
    assert result.status == "cheat_suspected", (result.status, result.error)
    assert "configuration 2 of rmsnorm_kernel" in result.error and "compute outside the Triton launches" in result.error
