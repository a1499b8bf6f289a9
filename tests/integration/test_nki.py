"""The NKI backend where neither the Neuron SDK nor Trainium exists (CI and our machines):
a clean refusal before any tokens, neuron-profile parsing and Trainium % of peak on fixtures,
and the worker's correctness path driven by a stand-in simulator (tests/fixtures/fake_nki),
which is NOT the real NKI simulator. The tests marked nki_sim / trainium need the real thing and
are skipped without it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from accelopt.graph.builder import build_graph
from accelopt.nodes.context import RunContext
from accelopt.tools.backends import backend_for
from accelopt.tools.backends.nki import parse_profile_summary, profile_text
from accelopt.tools.roofline import trainium_percent_of_peak
from accelopt.tools.task import load_task
from tests.conftest import FIXTURES, ROOT
from tests.scripted import ScriptedChatModel

FIXTURES = FIXTURES
SILU = ROOT / "evals" / "nkibench" / "silu"


def no_model_call(messages):
    raise AssertionError("a model was called for a task this machine cannot run")


@pytest.mark.skipif(backend_for("nki").availability().usable, reason="an NKI package is installed here")
def test_an_nki_task_is_refused_before_any_tokens_with_the_install_hint(tmp_path):
    ctx = RunContext(device="cpu", use_memory=False, model="openai:scripted",
                     chat_models={"default": ScriptedChatModel(script=no_model_call)})
    out = build_graph().compile().invoke({"task_dir": str(SILU)}, context=ctx)
    assert out["stop_reason"].startswith("NKI unavailable: install the Neuron SDK's `nki` and `neuronx-cc`")
    assert "pip.repos.neuron.amazonaws.com" in out["stop_reason"] and not out.get("usage")
    cli = subprocess.run([sys.executable, "-m", "accelopt", "optimize", str(SILU)], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert cli.returncode == 2 and "NKI unavailable: install" in cli.stderr and "Traceback" not in cli.stderr
    doctor = subprocess.run([sys.executable, "-m", "accelopt", "doctor"], capture_output=True, text=True, timeout=120,
                            cwd=ROOT, env={"COLUMNS": "250", "PATH": "/usr/bin:/bin"})
    rows = {line.split("│")[1].strip(): line for line in doctor.stdout.splitlines() if line.count("│") >= 3}
    assert "│ no " in rows["backend nki"] and "│ yes " in rows["backend triton"]


def test_neuron_profile_summary_fixture_parses_into_planner_text():
    """tests/fixtures/neuron_profile_summary.json is hand-written from the documented fields."""
    parsed = parse_profile_summary(json.loads((FIXTURES / "neuron_profile_summary.json").read_text()))
    assert parsed["metrics"]["total_time"] == pytest.approx(0.004821)
    assert parsed["metrics"]["hfu_estimated_percent"] == pytest.approx(61.3)
    assert parsed["engines"] == {"tensor": 88.5, "vector": 21.0, "scalar": 12.4, "gpsimd": 0.0, "sync": 3.1}
    text = profile_text(parsed)
    assert "neuron-profile latency 4821.0 us" in text and "HBM read 240.0 MiB, write 192.0 MiB" in text
    assert "SBUF spills 32.0 MiB" in text and "busiest: tensor" in text
    # Some versions nest the summary under the profiled NEFF's name.
    nested = parse_profile_summary({"kernel.neff": {"total_time": 1e-3, "vector_active_time_percent": 50}})
    assert nested == {"metrics": {"total_time": 1e-3}, "engines": {"vector": 50.0}}


def test_trainium_percent_of_peak_follows_accelopt_on_nkibench_shapes():
    """AccelOpt's t_ideal = max(vec/PEAK_VEC, mm/PEAK_MM, bytes/PEAK_BW), per Trn1 NeuronCore."""
    matmul = load_task(ROOT / "evals" / "nkibench" / "matmul")
    import importlib.util

    spec = importlib.util.spec_from_file_location("ref", Path(matmul.root) / "reference.py")
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    params = matmul.spec.workloads[0].params
    mm = ref.matmul_flops(params, "float32")
    assert mm == 2 * 4096 * 12288 * 5120
    ideal = mm / 23.75e12  # matmul-bound at 23.75 TFLOP/s
    out = trainium_percent_of_peak(ref.flops(params, "float32") - mm, mm, ref.bytes_moved(params, "float32"),
                                   measured_s=2 * ideal)
    assert out["bound"] == "matmul" and out["pct_peak"] == pytest.approx(50.0)
    silu = trainium_percent_of_peak(4 * 4096 * 7168, 0, 2 * 4 * 4096 * 7168, measured_s=1e-3)
    assert silu["bound"] == "memory"  # 235 MB at 410 GiB/s outweighs 117 MFLOP of vector work


@pytest.fixture
def fake_simulator(monkeypatch):
    fake = str(FIXTURES / "fake_nki")
    monkeypatch.syspath_prepend(fake)
    monkeypatch.setenv("PYTHONPATH", f"{fake}:{ROOT}")
    yield
    sys.modules.pop("nki", None)  # the stand-in must not outlive the test that asked for it


@pytest.mark.slow
@pytest.mark.parametrize("body, status, needle", [
    ("return x / (1.0 + 2.718281828459045 ** (-x))", "verified", None),
    ("return x * 0.5", "wrong_output", "relative L2 error"),
    ("raise ValueError('tile does not fit in SBUF')", "runtime_error", "does not fit in SBUF"),
    ("x *= 2.0\n    return x", "input_mutated", "wrote to an input"),
    ("return x[:1]", "shape_mismatch", "output shape"),
])
def test_the_worker_checks_every_seed_by_relative_l2(fake_simulator, body, status, needle):
    task = load_task(SILU)
    source = f"import nki\n\n\ndef kernel(x):\n    {body}\n"
    result = backend_for(task).evaluate(task, source, device=None, timeout_s=120, compare={}, trusted=False)
    assert result.status == status, result.error
    assert result.device == "nki_simulator" and not result.workloads  # no Trainium: no timing, and none claimed
    if needle:
        assert needle in result.error
    else:
        assert result.max_rel_err < 2e-5


def test_host_compute_in_an_nki_kernel_is_a_cheat(fake_simulator):
    task = load_task(SILU)
    source = "import numpy as np\nimport nki\n\n\ndef kernel(x):\n    return x / (1 + np.exp(-x))\n"
    result = backend_for(task).evaluate(task, source, device=None, timeout_s=60, compare={}, trusted=False)
    assert result.status == "cheat_suspected" and "NeuronCore" in result.error


def test_a_simulator_without_trainium_checks_but_refuses_to_optimize(fake_simulator, tmp_path):
    found = backend_for("nki").availability()
    assert found.usable and not found.can_time and "simulator only" in found.detail
    ctx = RunContext(device="cpu", use_memory=False, model="openai:scripted",
                     chat_models={"default": ScriptedChatModel(script=no_model_call)})
    out = build_graph().compile().invoke({"task_dir": str(SILU)}, context=ctx)
    assert "an optimization run needs timings" in out["stop_reason"] and not out.get("usage")


NKI_SILU = '''
try:
    import nki
    import nki.language as nl
except ImportError:  # the older package layout
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl


@nki.jit
def kernel(x):
    M, N = x.shape
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(M // 128):
        for j in nl.affine_range(N // 512):
            tile = nl.load(x[i * 128:(i + 1) * 128, j * 512:(j + 1) * 512])
            nl.store(out[i * 128:(i + 1) * 128, j * 512:(j + 1) * 512], value=nl.multiply(tile, nl.sigmoid(tile)))
    return out
'''


@pytest.mark.nki_sim
def test_a_real_nki_kernel_verifies_on_the_real_simulator():
    """Never run here (no simulator can be installed); runs wherever the Neuron SDK is."""
    task = load_task(SILU)
    result = backend_for(task).evaluate(task, NKI_SILU, device="cpu", timeout_s=600, compare={}, trusted=False)
    assert result.status == "verified", result.error


@pytest.mark.trainium
def test_a_real_nki_kernel_is_timed_on_trainium():
    """Never run here (no Trainium); on a trn1/trn2 host it times the kernel against itself."""
    task = load_task(SILU)
    result = backend_for(task).evaluate(task, NKI_SILU, device=None, timeout_s=1800,
                                        compare={"baseline": NKI_SILU}, trusted=False)
    assert result.status == "verified" and result.timer == "nki_benchmark"
    assert 0.8 < result.versus["baseline"].speedup < 1.25 and result.workloads["M4096_N7168"].pct_peak > 0


@pytest.mark.slow
def test_a_kernel_that_hangs_or_kills_its_process_is_contained(fake_simulator):
    task = load_task(SILU)
    hang = backend_for(task).evaluate(task, "import nki\n\n\ndef kernel(x):\n    while True:\n        pass\n",
                                      device=None, timeout_s=5, compare={}, trusted=False)
    assert hang.status == "timeout"
    crash = backend_for(task).evaluate(task, "import os\nimport signal\nimport nki\n\n\ndef kernel(x):\n"
                                             "    os.kill(os.getpid(), signal.SIGSEGV)\n",
                                       device=None, timeout_s=60, compare={}, trusted=False)
    assert crash.status == "crashed" and "signal 11" in crash.error


def test_device_cpu_on_a_trainium_host_is_refused_rather_than_left_untimed(fake_simulator, monkeypatch):
    from accelopt.tools.backends import nki as nki_backend
    from accelopt.tools.backends import run_refusal

    monkeypatch.setattr(nki_backend, "neuron_devices", lambda: [Path("/dev/neuron0")])  # as on a trn1 host
    task = load_task(SILU)
    assert "timed on Trainium only" in run_refusal(task, "cpu")
    # The bundled NKIBench tasks have no NKI baseline kernel: nothing to time speedups against.
    assert "has no baseline.py" in run_refusal(task, "auto")
    with_baseline = task.model_copy(update={"baseline_source": "import nki\n\n\ndef kernel(x):\n    return x\n"})
    assert run_refusal(with_baseline, "auto") is None
