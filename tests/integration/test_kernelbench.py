"""KernelBench import as its users know it, on a vendored sample of 37 problems of the three
levels (tests/fixtures/kernelbench, laid out as KernelBench's own folder): automatic small
interpreter workloads, sizes written as expressions, tuples and lists (a zero in the file stays
as written), the Model's state (BatchNorm's running statistics), Models the meta device cannot
run, missing packages, import by level and problem id, and export in KernelBench's file naming,
checked by KernelBench's own correctness routine (vendored: kernelbench_eval.py)."""

import ast
import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from accelopt.cli.app import app
from accelopt.evals.interop import kernelbench_reference as kbref
from accelopt.evals.interop import kernelbench_sizes as kbsizes
from accelopt.evals.interop.kernelbench import import_problem
from accelopt.evals.interop.kernelbench_shrink import TARGET_ELEMENTS
from accelopt.tools.harness.reference_kernel import reference_source
from accelopt.tools.harness.runner import _reference_module, evaluate
from accelopt.tools.task import TaskError, load_task
from tests.conftest import ROOT

KB = ROOT / "tests" / "fixtures" / "kernelbench"
PROBLEMS = sorted(KB.glob("level[123]/*.py"))
NEEDS_EINOPS = "48_Mamba2ReturnY.py"
CONV3D_GROUPED = "level1/72_conv_transposed_3D_asymmetric_input_asymmetric_kernel___strided_padded_grouped_.py"
DEPTHWISE = "level1/85_conv_depthwise_2D_asymmetric_input_asymmetric_kernel.py"
VERIFY_UP_TO = 2_000_000  # interpreter elements: the fixed-size level-3 networks above this are only imported
runner = CliRunner()


def _tree(relative: str) -> ast.Module:
    return ast.parse((KB / relative).read_text())


def _module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """Every fixture problem imported with automatic interpreter workloads: name -> task dir or error."""
    root = tmp_path_factory.mktemp("kernelbench")
    out = {}
    for problem in PROBLEMS:
        name = f"{problem.parent.name}_{problem.stem}"
        try:
            out[name] = import_problem(problem, root / name, name=name)
        except TaskError as e:
            out[name] = str(e)
    return out


def _interpreter_elements(task_dir) -> int:
    task = load_task(task_dir)
    problem = kbref.Problem(task_dir / "problem.py")
    return kbref.measure(problem, task.spec.interpreter_workloads[0].params, "float32")["elements"]


def test_the_sample_spans_the_three_levels():
    assert len(PROBLEMS) >= 30 and {p.parent.name for p in PROBLEMS} == {"level1", "level2", "level3"}
    assert (KB / "LICENSE-KernelBench").read_text().startswith("MIT License")


def test_every_problem_imports_with_a_small_interpreter_workload(imported):
    refused = {n: e for n, e in imported.items() if isinstance(e, str)}
    assert list(refused) == ["level3_48_Mamba2ReturnY"], refused
    assert "needs the Python package einops" in refused["level3_48_Mamba2ReturnY"]
    over = {}
    for name, task_dir in imported.items():
        if isinstance(task_dir, str):
            continue
        task = load_task(task_dir)
        level, number = name.split("_")[0].removeprefix("level"), name.split("_")[1]
        assert task.spec.origin == {"format": "kernelbench", "problem": f"{name.split('_', 1)[1]}.py",
                                    "level": level, "problem_id": number}
        elements = _interpreter_elements(task_dir)
        if elements > TARGET_ELEMENTS:
            over[name] = elements
            assert "the Model's own sizes are fixed in its code" in task.spec.description
    # Only a network whose layer widths and image size are written into its code stays larger.
    assert set(over) == {"level3_29_SwinMLP"}, over
    gemm = load_task(imported["level1_1_Square_matrix_multiplication_"]).spec
    assert gemm.workloads[0].params == {"N": 4096} and gemm.interpreter_workloads[0].params == {"N": 128}
    assert gemm.flops_kind == "tensor"
    relu = load_task(imported["level1_19_ReLU"]).spec
    assert relu.workloads[0].params == {"batch_size": 4096, "dim": 393216}  # 1.6e9 elements on the GPU
    assert relu.interpreter_workloads[0].params["batch_size"] * relu.interpreter_workloads[0].params["dim"] \
        <= TARGET_ELEMENTS
    # HingeLoss broadcasts batch_size against input_shape[0]: they went down together.
    hinge = load_task(imported["level1_100_HingeLoss"]).spec.interpreter_workloads[0].params
    assert hinge["batch_size"] == hinge["input_shape[0]"] < 32768
    # Structural sizes stay as the problem has them: kernel sizes, strides, paddings, groups.
    conv = load_task(imported["level1_72_conv_transposed_3D_asymmetric_input_asymmetric_kernel___strided_padded"
                              "_grouped_"]).spec.interpreter_workloads[0].params
    assert [conv[f"kernel_size[{i}]"] for i in range(3)] == [3, 5, 7] and conv["groups"] == 4


@pytest.mark.slow
@pytest.mark.timeout(1800)  # ~35 references judged one after another: about a minute on 2 busy cores
def test_every_cheap_reference_verifies_from_scratch_on_the_interpreter(imported):
    """The PyTorch reference judged as the baseline kernel of a from-scratch run, at the
    interpreter sizes: what `accelopt optimize` does first with a task that has no baseline.py."""
    failures, checked = {}, 0
    for name, task_dir in imported.items():
        if isinstance(task_dir, str) or _interpreter_elements(task_dir) > VERIFY_UP_TO:
            continue
        task = load_task(task_dir)
        result = evaluate(task, reference_source(task), device="cpu", trusted=True, rounds=1)
        checked += 1
        if result.status != "verified":
            failures[name] = f"{result.status}: {result.error}"
    assert checked >= 30 and not failures, failures


def test_sizes_written_as_expressions_tuples_and_lists_are_knobs_that_follow():
    # `M = 1024 * 2`: a knob of its own.
    assert kbsizes.free_knobs(_tree("level1/2_Standard_matrix_multiplication_.py")) == {"M": 2048, "K": 8192,
                                                                                        "N": 4096}
    # `groups = in_channels`: a knob that follows in_channels unless overridden itself.
    depthwise = _tree("level1/85_conv_depthwise_2D_asymmetric_input_asymmetric_kernel.py")
    assert "groups" not in kbsizes.free_knobs(depthwise) and kbsizes.evaluate(depthwise)["groups"] == 128
    assert kbsizes.evaluate(depthwise, {"in_channels": 8})["groups"] == 8
    assert kbsizes.evaluate(depthwise, {"in_channels": 8, "groups": 2})["groups"] == 2
    # `bias_shape = (out_channels, 1, 1)` and `height = width = 128`: element- and name-wise.
    conv = _tree("level2/1_Conv2D_ReLU_BiasAdd.py")
    free = kbsizes.free_knobs(conv)
    assert free["bias_shape[1]"] == 1 and "bias_shape[0]" not in free and free["height"] == free["width"] == 128
    sizes = kbsizes.evaluate(conv, {"out_channels": 8, "height": 7})
    assert sizes["bias_shape"] == (8, 1, 1) and (sizes["height"], sizes["width"]) == (7, 128)
    # `depth, height, width = (16, 32, 32)`, `kernel_size = (3, 3, 3)`, `norm_shape = (out_channels,)`.
    fused = _tree("level2/3_ConvTranspose3d_Sum_LayerNorm_AvgPool_GELU.py")
    sizes = kbsizes.evaluate(fused, {"height": 8, "kernel_size[2]": 1, "out_channels": 16})
    assert (sizes["depth"], sizes["height"], sizes["width"]) == (16, 8, 32)
    assert sizes["kernel_size"] == (3, 3, 1) and sizes["norm_shape"] == (16,)
    # `hidden_layer_sizes = [1024] * 16`: 16 knobs, a list still.
    mlp = _tree("level3/3_DeepNarrowMLP.py")
    assert sum(k.startswith("hidden_layer_sizes[") for k in kbsizes.free_knobs(mlp)) == 16
    assert kbsizes.evaluate(mlp, {"hidden_layer_sizes[3]": 7})["hidden_layer_sizes"][2:5] == [1024, 7, 1024]
    # `input_shape = (num_classes,)` follows num_classes.
    assert kbsizes.evaluate(_tree("level1/95_CrossEntropyLoss.py"), {"num_classes": 5})["input_shape"] == (5,)


def test_a_zero_or_negative_integer_in_the_file_is_no_size_and_stays_as_written(imported):
    """NetVLAD's `ghost_clusters = 0` (and a `padding = 0`, a `dim = -1`): a task's sizes must be
    positive, and there is nothing to shrink; the Model gets the file's value."""
    task = load_task(imported["level3_47_NetVladNoGhostClusters"])
    for workload in (*task.spec.workloads, *task.spec.interpreter_workloads):
        assert "ghost_clusters" not in workload.params and workload.params["num_clusters"] > 0
    assert "ghost_clusters=0" in task.spec.description
    ref = _reference_module(task.root)
    params = task.spec.interpreter_workloads[0].params
    x, clusters, *_ = ref.make_inputs(params, 0, "cpu", "float32")
    assert clusters.shape[1] == params["num_clusters"]  # no ghost clusters added
    assert ref.reference(x, clusters, *_).shape == (x.shape[0], params["num_clusters"] * params["feature_size"])
    depthwise = _tree(DEPTHWISE)
    assert "padding_h" not in kbsizes.free_knobs(depthwise) and kbsizes.evaluate(depthwise)["padding_h"] == 0
    assert kbsizes.evaluate(depthwise, {"padding_h": 1})["padding_h"] == 1  # still a knob to override


def test_inputs_are_drawn_on_the_judges_device_not_copied_there(tmp_path, monkeypatch):
    """get_inputs() runs under the target device (a level-1 Sigmoid input is 6.4 GB: drawn on the
    CPU and copied, the judge's fresh inputs per call ran an H100 evaluation past its time limit);
    the meta device shows it without a GPU: nothing of the size is made on the CPU."""
    result = runner.invoke(app, ["import", "kernelbench", str(KB / DEPTHWISE), "--out", str(tmp_path / "t")])
    assert result.exit_code == 0, result.output
    task = load_task(tmp_path / "t")
    ref = _reference_module(task.root)
    drawn, rand = [], torch.rand

    def seen_rand(*args, **kwargs):
        out = rand(*args, **kwargs)
        drawn.append(out.device.type)
        return out

    monkeypatch.setattr(torch, "rand", seen_rand)
    x, weight, *rest = ref.make_inputs(task.spec.workloads[0].params, 0, "meta", "float32")
    assert drawn == ["meta"] and x.device.type == "meta" and tuple(x.shape) == (32, 128, 128, 256)
    monkeypatch.undo()
    params = task.spec.interpreter_workloads[0].params
    first, again = ref.make_inputs(params, 3, "cpu", "float32"), ref.make_inputs(params, 3, "cpu", "float32")
    assert all(torch.equal(a, b) for a, b in zip(first, again))  # seeded, as before


def test_an_override_reaches_the_model_and_its_dependent_sizes(tmp_path):
    problem = KB / DEPTHWISE
    result = runner.invoke(app, ["import", "kernelbench", str(problem), "--out", str(tmp_path / "t"),
                                 "--interpreter-param", "in_channels=4", "--interpreter-param", "kernel_size_w=3"])
    assert result.exit_code == 0, result.output
    task = load_task(tmp_path / "t")
    params = task.spec.interpreter_workloads[0].params
    assert params["in_channels"] == 4 and params["kernel_size_w"] == 3 and "groups" not in params
    ref = _reference_module(task.root)
    x, weight, *rest = ref.make_inputs(params, 0, "cpu", "float32")
    assert x.shape[1] == 4 and tuple(weight.shape) == (4, 1, 3, 3)  # groups followed in_channels
    out = ref.reference(x, weight, *rest)
    assert out.shape[1] == 4
    assert task.spec.workloads[0].params["in_channels"] == 128  # the GPU workload is the problem as written


@pytest.mark.parametrize("problem, override, where", [
    (CONV3D_GROUPED, "groups=3", "in_channels must be divisible by groups"),
    (DEPTHWISE, "kernel_size_h=200", "Kernel size can't be greater than actual input size"),
    ("level2/1_Conv2D_ReLU_BiasAdd.py", "bias_shape[0]=5", "must match the size of tensor b (5)"),
])
def test_an_override_that_breaks_the_model_is_refused_at_import(tmp_path, problem, override, where):
    problem = KB / problem
    result = runner.invoke(app, ["import", "kernelbench", str(problem), "--out", str(tmp_path / "t"),
                                 "--interpreter-param", override])
    assert result.exit_code == 2, result.output
    line = " ".join(result.output.split())
    assert f"--interpreter-param {override} breaks the Model" in line and where in line
    assert len(result.output.strip().splitlines()) <= 3  # one error line (wrapped by the terminal at most)


def test_a_malformed_import_is_refused_before_anything_is_written(tmp_path):
    """The task's spec is built (and checked) before its files are: no half-written task is left."""
    with pytest.raises(TaskError, match=r"t/task.json: name: 'level 1/ReLU' is not a safe task name"):
        import_problem(KB / "level1/19_ReLU.py", tmp_path / "t", name="level 1/ReLU")
    with pytest.raises(TaskError, match=r"t/task.json: dtype: Input should be 'float32', 'float16' or 'bfloat16'"):
        import_problem(KB / "level1/19_ReLU.py", tmp_path / "t", dtype="float64")
    assert not (tmp_path / "t").exists()


def test_the_reference_run_as_a_kernel_uses_the_interpreter_sizes(imported):
    """A from-scratch baseline runs the reference in a process that never called make_inputs:
    it must still build the Model at the sizes of the inputs it is handed (groups=16, not 128)."""
    task_dir = imported["level1_85_conv_depthwise_2D_asymmetric_input_asymmetric_kernel"]
    params = load_task(task_dir).spec.interpreter_workloads[0].params
    judge = _module(task_dir / "reference.py", "kb_judge_side")
    inputs = judge.make_inputs(params, 1, "cpu", "float32")
    fresh = _module(task_dir / "reference.py", "kb_kernel_side")  # as reference_kernel.py loads it
    torch.testing.assert_close(fresh.reference(*inputs), judge.reference(*inputs), rtol=0, atol=0)
    wrong = [torch.zeros(3, 5, 7, 7), *inputs[1:]]
    with pytest.raises(ValueError, match="match no workload of this task"):
        fresh.reference(*wrong)


def test_batchnorm_state_is_updated_on_copies_as_the_model_does(imported):
    task_dir = imported["level1_33_BatchNorm"]
    task = load_task(task_dir)
    assert "Forward updates the Model's state bn.running_mean, bn.running_var, bn.num_batches_tracked" \
        in task.spec.description
    ref = _reference_module(task.root)
    args = ref.make_inputs(task.spec.interpreter_workloads[0].params, 0, "cpu", "float32")
    before = [a.clone() for a in args]
    out, updated = ref.reference_with_state(*args)
    assert all(torch.equal(a, b) for a, b in zip(args, before))  # the arguments stay as they were
    x, weight, bias, mean, var, count = args
    assert sorted(updated) == [3, 4, 5]
    batch_mean, batch_var = x.mean(dim=(0, 2, 3)), x.var(dim=(0, 2, 3), unbiased=True)
    torch.testing.assert_close(updated[3], 0.9 * mean + 0.1 * batch_mean)
    torch.testing.assert_close(updated[4], 0.9 * var + 0.1 * batch_var)
    assert int(updated[5]) == int(count) + 1
    torch.testing.assert_close(out, torch.nn.functional.batch_norm(x, mean.clone(), var.clone(), weight, bias,
                                                                   training=True))
    # From scratch: the reference as the baseline kernel is not `input_mutated` any more.
    result = evaluate(task, reference_source(task), device="cpu", trusted=True, rounds=1)
    assert result.status == "verified", result.error


def test_random_numbers_in_forward_and_tensor_attributes_are_the_same_on_every_call(imported):
    lstm = _reference_module(load_task(imported["level3_35_LSTM"]).root)  # h0, c0 = torch.randn(...) in forward
    args = lstm.make_inputs(load_task(imported["level3_35_LSTM"]).spec.interpreter_workloads[0].params, 0, "cpu",
                            "float32")
    torch.testing.assert_close(lstm.reference(*args), lstm.reference(*args), rtol=0, atol=0)
    task = load_task(imported["level3_33_VanillaRNN"])  # self.hidden = torch.randn(...): a tensor attribute
    assert "hidden [" in task.spec.description and "Forward updates the Model's state hidden" in task.spec.description


def test_models_the_meta_device_cannot_run_and_missing_packages(imported, tmp_path):
    # SwinMLP calls .item() in __init__: built for real, then its forward counted on the meta device.
    swin = _reference_module(load_task(imported["level3_29_SwinMLP"]).root)
    assert swin.flops(load_task(imported["level3_29_SwinMLP"]).spec.workloads[0].params, "float32") > 1e9
    # A problem needing a package that is not installed: one line naming it, exit code 2.
    result = runner.invoke(app, ["import", "kernelbench", str(KB / "level3" / NEEDS_EINOPS), "--out",
                                 str(tmp_path / "m")])
    assert result.exit_code == 2 and "needs the Python package einops" in result.output
    assert "pip install einops" in " ".join(result.output.split())


def test_import_by_level_and_problem_id(tmp_path):
    result = runner.invoke(app, ["import", "kernelbench", "--level", "1", "--problem", "19", "--repo", str(KB),
                                 "--out", str(tmp_path / "relu")])
    assert result.exit_code == 0, result.output
    task = load_task(tmp_path / "relu")
    assert task.name == "level1_19_ReLU" and task.spec.origin["level"] == "1" and task.spec.origin["problem_id"] == "19"
    result = runner.invoke(app, ["import", "kernelbench", "--level", "1", "--problem", "999", "--repo", str(KB),
                                 "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "level 1 has no problem 999" in result.output
    result = runner.invoke(app, ["import", "kernelbench", "--problem", "19", "--repo", str(KB), "--out", str(tmp_path)])
    assert result.exit_code == 2 and "give a problem file, or --level" in result.output
    result = runner.invoke(app, ["import", "kernelbench", "--level", "4", "--repo", str(KB), "--out", str(tmp_path)])
    assert result.exit_code == 2 and "no level 4" in result.output


def test_a_whole_level_becomes_one_suite(tmp_path):
    from accelopt.evals.suite import suite_tasks

    repo = tmp_path / "KernelBench-checkout"
    (repo / "KernelBench" / "level3").mkdir(parents=True)
    for name in ("4_LeNet5.py", "1_MLP.py", NEEDS_EINOPS):
        (repo / "KernelBench" / "level3" / name).write_text((KB / "level3" / name).read_text())
    result = runner.invoke(app, ["import", "kernelbench", "--level", "3", "--repo", str(repo), "--out",
                                 str(tmp_path / "suite")])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "suite written" in text and "2 tasks, 1 not imported" in text and "needs the Python package einops" in text
    tasks = suite_tasks(tmp_path / "suite")
    assert [t.name for t in tasks] == ["level3_1_MLP", "level3_4_LeNet5"]  # the refused one leaves nothing behind
    assert [load_task(t).spec.origin["problem_id"] for t in tasks] == ["1", "4"]
    record = json.loads((tmp_path / "suite" / "kernelbench_import.json").read_text())
    assert record["level"] == 3 and "einops" in record["not_imported"][NEEDS_EINOPS]


RELU_KERNEL = '''import torch
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=offs < n)


def run(x):
    y = torch.empty_like(x)
    relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y
'''


def _fake_run(run_dir, task_dir, kernel: str):
    """What export reads of a finished run: summary.json and best_kernel.py."""
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps({"task_dir": str(task_dir), "best_id": "r1"}))
    (run_dir / "best_kernel.py").write_text(kernel)
    return run_dir


def test_export_writes_kernelbench_file_names_that_kernelbench_accepts(tmp_path):
    problem = KB / "level1" / "19_ReLU.py"
    task_dir = import_problem(problem, tmp_path / "level1_19_ReLU")
    run_dir = _fake_run(tmp_path / "eval" / "level1_19_ReLU", task_dir, RELU_KERNEL)
    runs = tmp_path / "runs" / "accelopt"
    result = runner.invoke(app, ["export", "kernelbench", str(run_dir), "--out", str(runs), "--sample-id", "2"])
    assert result.exit_code == 0, result.output
    solution = runs / "level_1_problem_19_sample_2_kernel.py"  # as scripts/generate_samples.py names them
    assert solution.is_file() and "static check" not in result.output  # no `pass` left from "forward pass" docs
    # An eval directory exports each of its runs; one still at the reference is skipped with a reason.
    _fake_run(tmp_path / "eval" / "other", task_dir, reference_source(load_task(task_dir)))
    result = runner.invoke(app, ["export", "kernelbench", str(tmp_path / "eval"), "--out", str(tmp_path / "all")])
    assert result.exit_code == 0 and "skipped other: " in result.output and "still the task's PyTorch reference" \
        in " ".join(result.output.split())
    assert [p.name for p in (tmp_path / "all").iterdir()] == ["level_1_problem_19_sample_0_kernel.py"]
    result = runner.invoke(app, ["export", "kernelbench", str(run_dir), "--out", str(tmp_path / "x")])
    assert result.exit_code == 0  # a folder
    no_origin = import_problem(KB / "linear_relu.py", tmp_path / "lr")
    result = runner.invoke(app, ["export", "kernelbench", str(_fake_run(tmp_path / "r2", no_origin, RELU_KERNEL)),
                                 "--out", str(tmp_path / "y")])
    assert result.exit_code == 2 and "give --out a .py file name" in " ".join(result.output.split())


SCALE_RESIDUAL_KERNEL = '''import torch
import triton
import triton.language as tl


@triton.jit
def linear_scaled_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < N) & (rk[:, None] < K), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc * scale, mask=(rm[:, None] < M) & (rn[None, :] < N))


def run(x, weight, bias):
    M, K = x.shape
    N = weight.shape[0]
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))
    linear_scaled_kernel[grid](x, weight, bias, y, M, N, K, 1.5, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
    return y  # x * scaling_factor + x, scaling_factor = 0.5
'''

BATCHNORM_KERNEL = '''import torch
import triton
import triton.language as tl


@triton.jit
def scale_shift_kernel(x_ptr, scale_ptr, shift_ptr, y_ptr, n, channels, plane, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    c = (offs // plane) % channels
    x = tl.load(x_ptr + offs, mask=offs < n)
    y = x * tl.load(scale_ptr + c, mask=offs < n) + tl.load(shift_ptr + c, mask=offs < n)
    tl.store(y_ptr + offs, y, mask=offs < n)


def run(x, weight, bias, running_mean, running_var, num_batches_tracked):
    # Training mode, as KernelBench builds the Model: the batch's statistics normalise.
    mean = x.mean(dim=(0, 2, 3))
    var = x.var(dim=(0, 2, 3), unbiased=False)
    scale = weight / torch.sqrt(var + 1e-5)
    shift = bias - mean * scale
    x = x.contiguous()
    y = torch.empty_like(x)
    scale_shift_kernel[(triton.cdiv(x.numel(), 1024),)](x, scale.contiguous(), shift.contiguous(), y, x.numel(),
                                                         x.shape[1], x.shape[2] * x.shape[3], BLOCK=1024)
    return y
'''

# Problem, kernel, and sizes small enough for the CPU interpreter: elementwise with no state,
# parameters (nn.Linear) with a float init input, and buffers (BatchNorm's running statistics).
KERNELBENCH_CHECKED = [
    ("level1/19_ReLU.py", RELU_KERNEL, {"batch_size": 8, "dim": 300}),
    ("level2/40_Matmul_Scaling_ResidualAdd.py", SCALE_RESIDUAL_KERNEL,
     {"batch_size": 8, "in_features": 40, "out_features": 24}),
    ("level1/33_BatchNorm.py", BATCHNORM_KERNEL, {"batch_size": 4, "features": 3, "dim1": 8, "dim2": 8}),
]


def test_kernelbench_own_correctness_check_accepts_exported_solutions(tmp_path):
    """KernelBench's own correctness routine (run_and_check_correctness, vendored from its
    src/kernelbench/eval.py with the CUDA calls guarded: tests/fixtures/kernelbench/kernelbench_eval.py)
    on the ModelNew accelopt exports, for three problems, on Triton's CPU interpreter; and a wrong
    kernel is caught by it."""
    from accelopt.evals.interop.kernelbench_export import solution_source

    cases = []
    for relative, kernel, sizes in KERNELBENCH_CHECKED:
        task_dir = import_problem(KB / relative, tmp_path / relative.replace("/", "_").removesuffix(".py"))
        solution = tmp_path / f"{task_dir.name}_solution.py"
        solution.write_text(solution_source(task_dir, kernel))
        cases.append((str(KB / relative), str(solution), sizes))
    wrong = tmp_path / "wrong_solution.py"  # the bias subtracted instead of added
    wrong.write_text(solution_source(tmp_path / "level2_40_Matmul_Scaling_ResidualAdd",
                                     SCALE_RESIDUAL_KERNEL.replace("acc += tl.load(b_ptr", "acc -= tl.load(b_ptr")))
    cases.append((str(KB / "level2/40_Matmul_Scaling_ResidualAdd.py"), str(wrong), KERNELBENCH_CHECKED[1][2]))
    check = f"""
import importlib.util, json, sys, torch
spec = importlib.util.spec_from_file_location("kernelbench_eval", {str(KB / "kernelbench_eval.py")!r})
kb = importlib.util.module_from_spec(spec); spec.loader.exec_module(kb)
out = []
for problem, solution, sizes in {cases!r}:
    result = kb.check_correctness(open(problem).read(), open(solution).read(), num_correct_trials=3, sizes=sizes)
    out.append([result.compiled, result.correctness, result.metadata.get("correctness_trials"),
                str(result.metadata.get("runtime_error") or result.metadata.get("correctness_issue"))])
print("RESULTS " + json.dumps(out))
"""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=env, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULTS ")]
    assert lines, proc.stdout[-2000:] + proc.stderr[-2000:]
    results = json.loads(lines[-1].removeprefix("RESULTS "))
    for (relative, _, _), (compiled, correct, trials, issue) in zip(KERNELBENCH_CHECKED, results):
        assert compiled and correct and trials == "(3 / 3)", (relative, issue)
    assert results[-1][:2] == [True, False] and results[-1][3] == "Output mismatch"


TRACEABLE_LEVELS = ("level1_", "level2_")


def test_traceable_for_is_one_graph_over_the_arguments_with_the_reference_outputs(imported):
    """What torch.compile is handed for a KernelBench task (its comparator and Inductor seeds): the
    Model's forward with its state bound, traced to one graph whose inputs are all arguments;
    None where binding would change what the Model computes (BatchNorm in training mode)."""
    from accelopt.tools.inductor_capture import traced_reference
    from accelopt.tools.inductor_seed import graph_argument_positions

    traced, refused = [], []
    for name, task_dir in sorted(imported.items()):
        if not name.startswith(TRACEABLE_LEVELS) or isinstance(task_dir, str):
            continue
        ref = _reference_module(load_task(task_dir).root)
        args = ref.make_inputs(load_task(task_dir).spec.interpreter_workloads[0].params, 0, "cpu", "float32")
        function = traced_reference(ref, args)
        if function is ref.reference:
            refused.append(name)
            continue
        graphs = []

        def backend(gm, example_inputs, graphs=graphs):
            graphs.append([n.name for n in gm.graph.nodes if n.op == "placeholder"])
            return gm.forward

        torch._dynamo.reset()
        out = torch.compile(function, backend=backend, dynamic=False)(*args)
        torch.testing.assert_close(out, ref.reference(*args), rtol=1e-5, atol=1e-5, msg=name)
        assert len(graphs) == 1, (name, len(graphs))
        positions = graph_argument_positions(graphs[0], ["*args"])
        assert None not in positions and len(set(positions)) == len(positions), (name, graphs[0])
        traced.append(name)
    assert "level1_33_BatchNorm" in refused and "level2_33_Gemm_Scale_BatchNorm" in refused
    assert "level1_1_Square_matrix_multiplication_" in traced and "level2_1_Conv2D_ReLU_BiasAdd" in traced
    assert len(traced) >= 20, (traced, refused)


# A KernelBench solution as KernelBench users have it: ModelNew, its Triton kernel in the same file.
SCALED_LINEAR_PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """A linear layer whose outputs are scaled by a learned vector."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        return self.linear(x) * self.scale


batch_size = 8
in_features = 24
out_features = 16


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''

MODEL_NEW_SOLUTION = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_scale_kernel(x_ptr, w_ptr, b_ptr, s_ptr, y_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < N) & (rk[:, None] < K), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    acc *= tl.load(s_ptr + rn, mask=rn < N, other=0.0)[None, :]
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        M, K = x.shape
        N = self.linear.weight.shape[0]
        y = torch.empty((M, N), dtype=x.dtype, device=x.device)
        grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))
        linear_scale_kernel[grid](x, self.linear.weight, self.linear.bias, self.scale, y, M, N, K,
                                  BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
        return y
'''
# KernelBench's seeded construction gives this ModelNew another scale than the Model's: its own weights.
MODEL_NEW_OWN_WEIGHTS = MODEL_NEW_SOLUTION.replace("nn.Parameter(torch.randn(out_features))",
                                                   "nn.Parameter(torch.rand(out_features) + 0.5)")
# The same ModelNew returning what torch computes: launching its kernel too does not make it a kernel.
MODEL_NEW_IN_TORCH = MODEL_NEW_SOLUTION.replace("        return y\n", "        return self.linear(x) * self.scale\n")


def _check(task_dir, solution) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "accelopt", "check", str(task_dir), str(solution), "--device", "cpu",
                           "--json"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.returncode, json.loads(lines[-1])


@pytest.fixture
def scaled_linear(tmp_path):
    (tmp_path / "scaled_linear.py").write_text(SCALED_LINEAR_PROBLEM)
    return import_problem(tmp_path / "scaled_linear.py", tmp_path / "scaled_linear_task")


def test_a_kernelbench_solution_is_checked_with_the_models_weights(scaled_linear, tmp_path):
    """`accelopt check TASK solution.py` on a KernelBench solution (ModelNew with its Triton kernel,
    no `run`): verified on the judge's seeds, each with the state of a Model built under that seed,
    which ModelNew, built once under KernelBench's seed, can only match with the Model's weights.
    A ModelNew whose __init__ draws its scale otherwise keeps its own, as under KernelBench's
    seeded construction, and is wrong."""
    solution, own = tmp_path / "solution.py", tmp_path / "own_weights.py"
    solution.write_text(MODEL_NEW_SOLUTION)
    own.write_text(MODEL_NEW_OWN_WEIGHTS)
    code, result = _check(scaled_linear, solution)
    assert code == 0 and result["status"] == "verified", result["error"]
    # no baseline: timed against the PyTorch reference, as KernelBench does (eager alone on the interpreter)
    assert set(result["versus"]) == {"eager"}
    assert any("ghost replay" in e for e in result["evidence"])
    lines = len(MODEL_NEW_SOLUTION.splitlines())  # no advice about the entry point accelopt appended
    assert all(f["line"] is None or f["line"] <= lines for f in result["findings"]), result["findings"]
    code, result = _check(scaled_linear, own)
    assert code == 1 and result["status"] == "wrong_output", result
    assert "max abs err" in result["error"]


def test_a_kernelbench_solution_computing_in_torch_is_still_refused(scaled_linear):
    from accelopt.tools.kernelbench_solution import adapt

    task = load_task(scaled_linear)
    result = evaluate(task, adapt(task.root, MODEL_NEW_IN_TORCH, "run"), device="cpu", rounds=1)
    assert result.status == "cheat_suspected" and "compute outside the Triton launches" in result.error, result.error


class _BatchNormNew(torch.nn.Module):  # torch in forward: called directly here, never judged
    def __init__(self, num_features):
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(num_features=num_features)

    def forward(self, x):
        return self.bn(x)


class _LinearReluNew(torch.nn.Module):
    """Names of its own for the Linear's weight and bias, drawn as nn.Linear draws them."""

    def __init__(self, in_features, out_features):
        super().__init__()
        linear = torch.nn.Linear(in_features, out_features)
        self.weight = torch.nn.Parameter(linear.weight.detach().clone())
        self.bias = torch.nn.Parameter(linear.bias.detach().clone())

    def forward(self, x):
        return torch.relu(x @ self.weight.t() + self.bias)


@pytest.mark.parametrize("relative, model_new, tied", [
    ("level1/33_BatchNorm.py", _BatchNormNew,  # zero biases and running means: tied by name
     [("parameter", "bn", "weight", 0), ("parameter", "bn", "bias", 1), ("buffer", "bn", "running_mean", 2),
      ("buffer", "bn", "running_var", 3), ("buffer", "bn", "num_batches_tracked", 4)]),
    ("linear_relu.py", _LinearReluNew, [("parameter", "", "weight", 0), ("parameter", "", "bias", 1)]),
])
def test_model_new_takes_each_calls_model_state_where_its_seeded_weights_are_the_models(tmp_path, relative,
                                                                                        model_new, tied):
    """The entry point a KernelBench solution gets (reference.py's model_new_entry): ModelNew's
    tensors equal to the Model's under the same seed are the Model's, found by value (other names
    too), and every call computes with the state it is handed, which stays untouched."""
    task_dir = import_problem(KB / relative, tmp_path / "t")
    judge = _module(task_dir / "reference.py", "kb_judge_side_model_new")
    kernel = _module(task_dir / "reference.py", "kb_kernel_side_model_new")
    entry = kernel.model_new_entry(model_new)
    assert [e["ties"] for e in entry.built.values()] == [tied]
    params = load_task(task_dir).spec.interpreter_workloads[0].params
    for seed in (0, 1, 7):
        args = judge.make_inputs(params, seed, "cpu", "float32")
        before = [a.clone() for a in args]
        torch.testing.assert_close(entry(*args), judge.reference(*args), rtol=1e-5, atol=1e-5)
        assert all(torch.equal(a, b) for a, b in zip(args, before))


def test_a_kernelbench_solution_as_baseline_gets_its_entry_point_and_exports_as_written(scaled_linear, tmp_path):
    from accelopt.evals.interop.kernelbench_export import solution_source
    from accelopt.tools.kernelbench_solution import MARK, adapt

    (scaled_linear / "baseline.py").write_text(MODEL_NEW_SOLUTION)
    task = load_task(scaled_linear)
    assert task.baseline_source.startswith(MODEL_NEW_SOLUTION.rstrip()) and MARK in task.baseline_source
    assert "def run(*inputs_and_state)" in task.baseline_source
    assert solution_source(scaled_linear, task.baseline_source) == MODEL_NEW_SOLUTION  # already a KernelBench file
    with_run = MODEL_NEW_SOLUTION + "\n\ndef run(x, *state):\n    return x\n"
    assert adapt(task.root, with_run, "run") == with_run  # a module with the entry point is left alone
    other = tmp_path / "not_kernelbench"
    other.mkdir()
    assert adapt(other, MODEL_NEW_SOLUTION, "run") == MODEL_NEW_SOLUTION  # no problem.py: not a KernelBench task


DOUBLE_PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return []
'''

TRIPLE_SOLUTION = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 3, mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        scale_kernel[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64)
        return y
'''


def test_a_folder_of_solutions_is_judged_against_a_folder_of_tasks_with_fast_p(scaled_linear, tmp_path):
    """`accelopt check TASKS/ SOLUTIONS/`: each task's solution (by task name, or by KernelBench's file
    name through the level and problem id an imported task records) against the PyTorch reference;
    fast_p over all tasks, a task with no solution or a wrong one counted as not correct."""
    import shutil

    from typer.testing import CliRunner

    from accelopt.cli.app import app

    tasks, solutions = tmp_path / "suite", tmp_path / "solutions"
    tasks.mkdir(), solutions.mkdir()
    shutil.copytree(scaled_linear, tasks / "scaled_linear")
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "7_Double.py").write_text(DOUBLE_PROBLEM)
    import_problem(tmp_path / "level1" / "7_Double.py", tasks / "double")
    (tmp_path / "level1" / "8_Double_again.py").write_text(DOUBLE_PROBLEM)
    import_problem(tmp_path / "level1" / "8_Double_again.py", tasks / "unsolved", name="unsolved")
    (solutions / "scaled_linear.py").write_text(MODEL_NEW_SOLUTION)
    (solutions / "level_1_problem_7_sample_0_kernel.py").write_text(TRIPLE_SOLUTION)  # wrong: x * 3
    (solutions / "level_1_problem_7_sample_1_kernel.py").write_text(MODEL_NEW_SOLUTION)  # another sample
    out = CliRunner().invoke(app, ["check", str(tasks), str(solutions), "--device", "cpu", "--json"])
    assert out.exit_code == 1, out.output
    suite = json.loads(out.stdout.strip().splitlines()[-1])
    status = {r["task"]: r["status"] for r in suite["results"]}
    assert status == {"scaled_linear": "verified", "7_Double": "wrong_output", "unsolved": "missing"}, suite
    assert suite["tasks"] == 3 and suite["correct"] == 1 and suite["timer"] == "interpreter_wall"
    # interpreter times are not performance: fast_0 (the share correct) only
    assert suite["fast_p"]["eager"]["0.0"] == pytest.approx(1 / 3) and suite["fast_p"]["eager"]["1.0"] is None
    assert "not GPU times" in suite["note"]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "level_1_problem_9_sample_0_kernel.py").write_text(TRIPLE_SOLUTION)
    out = CliRunner().invoke(app, ["check", str(tasks), str(tmp_path / "other"), "--device", "cpu"])
    assert out.exit_code == 2 and "no solution matches a task" in out.output
