"""The bundled suites: the Triton serving tasks and NKIBench's 14 NumPy references."""

import json
import math
import shutil

import numpy as np
import pytest

from accelopt.tools.harness.runner import _reference_module, evaluate
from accelopt.tools.roofline import TRAINIUM_PEAKS, trainium_percent_of_peak
from accelopt.tools.task import load_task
from tests.conftest import ROOT, TASKS

NKIBENCH = ROOT / "evals" / "nkibench"
TRITON_TASKS = sorted(p.name for p in TASKS.iterdir() if (p / "task.json").is_file())
NKI_TASKS = sorted(p.name for p in NKIBENCH.iterdir() if (p / "task.json").is_file())


def test_the_triton_suite_covers_the_serving_kernels_asked_for():
    assert {"rmsnorm", "fused_add_rmsnorm", "silu_and_mul", "rope", "softmax", "layernorm", "gemm_bf16",
            "gqa_paged_decode", "cross_entropy", "merge_attn_states"} <= set(TRITON_TASKS)
    gemm = load_task(TASKS / "gemm_bf16").spec
    assert gemm.dtype == "bfloat16" and gemm.flops_kind == "tensor" and len(gemm.workloads) >= 2
    assert gemm.dtype_for("cpu") == "float16"  # bf16 arithmetic is broken in the interpreter


@pytest.mark.parametrize("name", TRITON_TASKS)
def test_real_shapes_have_exact_positive_costs(name):
    task = load_task(TASKS / name)
    ref = _reference_module(task.root)
    assert len(task.spec.workloads) >= 2 and task.baseline_source
    for w in task.spec.workloads:
        assert ref.flops(w.params, task.spec.dtype) > 0 and ref.bytes_moved(w.params, task.spec.dtype) > 0


def test_gemm_and_decode_costs_match_hand_counts():
    gemm = _reference_module(str(TASKS / "gemm_bf16"))
    assert gemm.flops({"M": 4096, "N": 6144, "K": 4096}, "bfloat16") == 2 * 4096 * 6144 * 4096
    assert gemm.bytes_moved({"M": 128, "N": 28672, "K": 4096}, "bfloat16") == 2 * (128 * 4096 + 28672 * 4096
                                                                                  + 128 * 28672)
    decode = _reference_module(str(TASKS / "gqa_paged_decode"))
    w = {"B": 16, "L": 4096, "HQ": 32, "HKV": 8, "D": 128, "PAGE": 16}
    kv_bytes = 2 * 16 * 4096 * 8 * 128 * 2  # each KV head read once: the GQA group must share it
    assert kv_bytes < decode.bytes_moved(w, "bfloat16") < kv_bytes * 1.01


def test_a_wrong_decode_kernel_is_caught_on_the_interpreter(tmp_path):
    task = load_task(TASKS / "gqa_paged_decode")
    # Reading KV head h % HKV instead of h // (HQ/HKV): right shapes, wrong heads.
    wrong = task.baseline_source.replace("kvh = h // (HQ // HKV)", "kvh = h % HKV")
    result = evaluate(task, wrong, device="cpu", rounds=1)
    assert result.status == "wrong_output", result.error


def test_relative_l2_correctness_mode(tmp_path, softmax_task):
    spec = json.loads((softmax_task / "task.json").read_text())
    (softmax_task / "task.json").write_text(json.dumps({**spec, "correctness": "relative_l2", "rtol": 1e-2}))
    task = load_task(softmax_task)
    close = task.baseline_source.replace("num / den", "num / den * 1.001")  # 0.1% off everywhere
    far = task.baseline_source.replace("num / den", "num / den * 1.05")
    assert evaluate(task, close, device="cpu", rounds=1).status == "verified"
    result = evaluate(task, far, device="cpu", rounds=1)
    assert result.status == "wrong_output" and "relative L2 error" in result.error


# ---------------------------------------------------------------- NKIBench

def _nki(name):
    return load_task(NKIBENCH / name), _reference_module(str(NKIBENCH / name))


def test_nkibench_has_the_fourteen_tasks_at_their_exact_shapes():
    assert len(NKI_TASKS) == 14
    shapes = {n: load_task(NKIBENCH / n).spec.workloads[0].params for n in NKI_TASKS}
    assert shapes["matmul"] == {"M": 4096, "N": 12288, "K": 5120}
    assert shapes["gqa_full"] == {"B": 1, "N": 4096, "QH": 16, "KH": 8, "D": 128}
    assert shapes["mamba"] == {"M": 7168, "C": 256, "S": 16}
    for n in NKI_TASKS:
        spec = load_task(NKIBENCH / n).spec
        assert spec.backend == "nki" and spec.dtype == "float32" and spec.correctness == "relative_l2"


@pytest.mark.parametrize("name", NKI_TASKS)
def test_nkibench_reference_runs_at_tiny_shapes(name):
    task, ref = _nki(name)
    params = task.spec.interpreter_workloads[0].params
    a = ref.reference(*ref.make_inputs(params, 0, "cpu", "float32"))
    b = ref.reference(*ref.make_inputs(params, 0, "cpu", "float32"))
    c = ref.reference(*ref.make_inputs(params, 1, "cpu", "float32"))
    assert a.dtype == np.float32 and np.isfinite(a).all() and np.array_equal(a, b) and not np.array_equal(a, c)
    real = task.spec.workloads[0].params
    assert 0 <= ref.matmul_flops(real, "float32") <= ref.flops(real, "float32") and ref.bytes_moved(real, "float32") > 0


def test_nkibench_references_agree_with_their_parts():
    _, matmul = _nki("matmul")
    _, rms_mm = _nki("rmsnorm_matmul")
    _, bmm_sm = _nki("bmm_softmax")
    _, lora = _nki("lora")
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((8, 16), dtype=np.float32), rng.standard_normal((16, 4), dtype=np.float32)
    normed = x / np.sqrt((x ** 2).mean(axis=1, keepdims=True))
    np.testing.assert_allclose(rms_mm.reference(x, w), matmul.reference(normed, w), rtol=1e-5)
    lhs, rhs = rng.standard_normal((2, 4, 3), dtype=np.float32), rng.standard_normal((2, 3, 5), dtype=np.float32)
    probs = bmm_sm.reference(lhs, rhs)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)
    a, b = rng.standard_normal((16, 2), dtype=np.float32), rng.standard_normal((2, 4), dtype=np.float32)
    np.testing.assert_allclose(lora.reference(x, w, a, b), x @ w + (x @ a) @ b, rtol=1e-5)


def test_mamba_scan_matches_the_closed_form():
    _, mamba = _nki("mamba")
    delta, u, a, b, c = mamba.make_inputs({"M": 5, "C": 3, "S": 2}, 0, "cpu", "float32")
    d_a = np.exp(delta[:, None, :] * a[:, :, None])
    d_bu = delta[:, None, :] * b[None] * u[:, None, :]
    # h_i = sum_j (prod_{j<l<=i} dA_l) dBu_j
    expected = np.zeros((3, 5))
    for i in range(5):
        h = sum(np.prod(d_a[..., j + 1:i + 1], axis=-1) * d_bu[..., j] for j in range(i + 1))
        expected[:, i] = (c[None, :, i] * h).sum(axis=1)
    np.testing.assert_allclose(mamba.reference(delta, u, a, b, c), expected, rtol=1e-4, atol=1e-9)


def test_trainium_percent_of_peak_uses_the_binding_engine():
    _, matmul = _nki("matmul")
    w = {"M": 4096, "N": 12288, "K": 5120}
    mm = matmul.matmul_flops(w, "float32")
    assert mm == 2 * 4096 * 12288 * 5120
    ideal = mm / TRAINIUM_PEAKS["trn1"].matmul_flops
    roof = trainium_percent_of_peak(0.0, mm, matmul.bytes_moved(w, "float32"), ideal * 2, "trn1")
    assert roof["bound"] == "matmul" and math.isclose(roof["pct_peak"], 50.0)
    _, silu = _nki("silu")
    s = {"M": 4096, "N": 7168}
    roof = trainium_percent_of_peak(silu.flops(s, "float32") - silu.matmul_flops(s, "float32"), 0.0,
                                    silu.bytes_moved(s, "float32"), 1.0, "trn1")
    # 4 flops per element on 2 x 128 lanes at 1.12 GHz (14 ps) against 8 bytes at 410 GiB/s (18 ps)
    assert roof["bound"] == "memory"
    assert math.isclose(roof["ideal_s"], 2 * 4096 * 7168 * 4 / (410 * 2**30))


def test_an_nki_task_needs_its_matmul_share(tmp_path):
    from accelopt.tools.task import TaskError

    shutil.copytree(NKIBENCH / "silu", tmp_path / "silu")
    ref = tmp_path / "silu" / "reference.py"
    ref.write_text(ref.read_text().replace("def matmul_flops", "def not_matmul_flops"))
    with pytest.raises(TaskError, match="matmul_flops"):
        load_task(tmp_path / "silu")
