"""On a GPU: the judge's sandbox, seeded with what the compile-ahead pass compiled in a process
with no GPU (tools/harness/compile_ahead.py), finds every kernel of the candidate compiled: its
load and first calls compile nothing (its own Triton cache, kept, holds no cubin the pass did not
write). A plain kernel, an autotuned one (every configuration), and a wrapper written for CUDA."""

from pathlib import Path

import pytest

from accelopt.evals.bench_compile_ahead import sandbox_check
from accelopt.tools.harness.compile_ahead import compile_ahead, gpu_target
from accelopt.tools.task import load_task
from tests.conftest import FIXTURES, TASKS

pytestmark = pytest.mark.gpu

CUDA_WRAPPER = (TASKS / "softmax" / "baseline.py").read_text().replace("def run(x):\n", (
    "def run(x):\n"
    "    if not torch.cuda.is_available():\n"
    "        raise RuntimeError('CUDA is required')\n"
    "    x = x if x.is_cuda else x.cuda()\n"
    "    scratch = torch.empty(16, device='cuda')\n"
    "    assert float(x[0, 0].cpu().item()) == float(x[0, 0].cpu().item())\n"))  # a read back: no compute


@pytest.fixture(scope="module")
def pool():
    from accelopt.tools.harness.pool import make_pool

    pool = make_pool("cuda", 1)
    yield pool
    pool.close()


@pytest.mark.parametrize("task_name, source", [
    ("softmax", None), ("rmsnorm", (FIXTURES / "autotuned" / "rmsnorm_autotuned.py").read_text()),
    ("softmax", CUDA_WRAPPER)], ids=["baseline", "autotuned", "cuda-wrapper"])
def test_the_sandbox_finds_every_kernel_compiled_ahead(pool, tmp_path, task_name, source):
    task = load_task(TASKS / task_name)
    kernel = tmp_path / "kernel.py"
    kernel.write_text(source or task.baseline_source)
    target = gpu_target(pool.workers[0].gpu)
    assert target is not None, "nvidia-smi reads no GPU"
    record = compile_ahead(task, kernel, None, tmp_path / "ahead", target, timeout_s=300)
    assert record.predicted and record.binaries, record
    check = sandbox_check(pool, task, kernel, tmp_path / "ahead", tmp_path / "kept")
    assert check["status"] == "verified", check["error"]
    assert check["compiled_in_sandbox"] == [], check  # every launch's kernel found in the seeded cache
    if record.utils:  # Triton's CUDA utility module too: built ahead, found by the sandbox's driver
        ahead_so = {p.parent.name for p in Path(tmp_path / "ahead").glob("*/cuda_utils*.so")}
        assert ahead_so and ahead_so == {p.parent.name for p in Path(tmp_path / "kept").glob("*/cuda_utils*.so")}
