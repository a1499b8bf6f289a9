"""The task format's validation rules (tools/task.py), each failing with one line that names the
file and what to fix, and the judge's comparison rules a task selects (matched ratio, fp8, fp4)."""

import json
import shutil

import pytest
import torch

from accelopt.tools.harness.judge import Reject, _reference_failed
from accelopt.tools.task import SPEC_ORDER, TaskError, TaskSpec, load_task, task_spec, write_spec
from tests.conftest import TASKS
from tests.unit.test_compare import _compare


@pytest.fixture
def task_dir(tmp_path):
    dst = tmp_path / "softmax"
    shutil.copytree(TASKS / "softmax", dst)
    return dst


def spec_of(task_dir) -> dict:
    return json.loads((task_dir / "task.json").read_text())


def load_with(task_dir, **changes) -> TaskSpec:
    spec = {k: v for k, v in {**spec_of(task_dir), **changes}.items() if v is not ...}
    (task_dir / "task.json").write_text(json.dumps(spec))
    return load_task(task_dir).spec


def error_of(task_dir, **changes) -> str:
    with pytest.raises(TaskError) as info:
        load_with(task_dir, **changes)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(task_dir / "task.json") + ": ")
    return message.removeprefix(str(task_dir / "task.json") + ": ")


# ---------------------------------------------------------------- task.json

def test_the_bundled_task_loads(task_dir):
    spec = load_with(task_dir)
    assert spec.name == "softmax" and spec.required_matched_ratio is None and spec.gpu_only is None


@pytest.mark.parametrize("field, value", [("atol", -1e-3), ("rtol", float("nan")), ("atol", float("inf")),
                                          ("rtol", float("-inf"))])
def test_tolerances_are_finite_and_not_negative(task_dir, field, value):
    assert error_of(task_dir, **{field: value}) == f"{field}: {value} is not a tolerance: use a finite number >= 0"


def test_zero_tolerances_are_exact_and_allowed(task_dir):
    assert load_with(task_dir, atol=0.0, rtol=0.0).tolerances("float32") == (0.0, 0.0)


@pytest.mark.parametrize("field", ["workloads", "interpreter_workloads"])
def test_workload_lists_are_not_empty(task_dir, field):
    assert error_of(task_dir, **{field: []}) == f"{field}: List should have at least 1 item after validation, not 0"


@pytest.mark.parametrize("field", ["workloads", "interpreter_workloads"])
def test_workload_names_are_unique_within_a_list(task_dir, field):
    one = {"name": "w", "params": {"M": 4, "N": 8}}
    assert error_of(task_dir, **{field: [one, {**one, "params": {"M": 2, "N": 2}}]}) == \
        f"{field}: workload name(s) w appear more than once; names must be unique"


def test_the_same_name_in_both_lists_is_fine(task_dir):
    one = {"name": "w", "params": {"M": 4, "N": 8}}
    assert load_with(task_dir, workloads=[one], interpreter_workloads=[one]).workloads[0].name == "w"


@pytest.mark.parametrize("params, message", [
    ({"M": 0, "N": 8}, "size M is 0: sizes must be positive integers"),
    ({"M": 4, "batch_size": -2}, "size batch_size is -2: sizes must be positive integers"),
    ({"M": 4, "N": float("nan")}, "param N is nan: params must be finite numbers"),
])
def test_sizes_are_positive(task_dir, params, message):
    assert error_of(task_dir, workloads=[{"name": "w", "params": params}]) == f"workloads.0.params: {message}"


@pytest.mark.parametrize("params", [{"padding_h": 0}, {"dim": -1}, {"reduce_dim": 1}, {"fib_row": 0},
                                    {"local_expert_offset": 0}, {"output_padding[1]": 0}, {"eps": 0.0},
                                    {"shift": -3}, {"sm_scale": -0.5}, {"transpose": False}])
def test_positions_offsets_and_floats_are_not_sizes(task_dir, params):
    """KernelBench's `padding = 0`, `dim = -1`; FlashInfer-Bench's `fib_row`, a MoE's expert offset; flags."""
    spec = load_with(task_dir, workloads=[{"name": "w", "params": {"M": 4, **params}}])
    assert spec.workloads[0].params["M"] == 4


@pytest.mark.parametrize("name", ["../../..", "a/b", "..", ".hidden", "", "a\x00b", "-rf", "x" * 129, "a b",
                                  "runs\\x"])
def test_the_name_is_one_plain_path_component(task_dir, name):
    assert "is not a safe task name" in error_of(task_dir, name=name)


@pytest.mark.parametrize("name", ["softmax", "rmsnorm_h128", "level1_19_ReLU", "gemm+bias", "v1.2-x", "x" * 128])
def test_ordinary_names_are_safe(task_dir, name):
    assert load_with(task_dir, name=name).name == name


@pytest.mark.parametrize("ratio", [0, 0.0, 1.5, -0.1, float("nan")])
def test_a_matched_ratio_is_a_fraction(task_dir, ratio):
    assert error_of(task_dir, required_matched_ratio=ratio) == \
        f"required_matched_ratio: {float(ratio)} is not a ratio: use a fraction of the elements, 0 < ratio <= 1"


def test_a_matched_ratio_applies_to_allclose_only(task_dir):
    assert load_with(task_dir, required_matched_ratio=1.0).required_matched_ratio == 1.0
    assert load_with(task_dir, required_matched_ratio=0.95).required_matched_ratio == 0.95
    assert error_of(task_dir, required_matched_ratio=0.95, correctness="relative_l2") == \
        "(top level): required_matched_ratio applies to correctness allclose only"


def test_a_gpu_only_task_refuses_the_interpreter_with_its_reason(task_dir):
    spec = load_with(task_dir, gpu_only="the smallest workload needs 40 GB")
    assert spec.workloads_for("cuda") == spec.workloads
    with pytest.raises(TaskError) as info:
        spec.workloads_for("cpu")
    assert str(info.value) == "softmax runs on a GPU only: the smallest workload needs 40 GB"


def test_gpu_only_in_an_older_imports_origin_still_counts(task_dir):
    spec = load_with(task_dir, origin={"format": "flashinfer-bench", "gpu_only": "too big"})
    assert spec.gpu_only == "too big"


@pytest.mark.parametrize("changes, message", [
    ({"atoll": 1e-3}, "atoll: unknown field (known: name, description, "),
    ({"seeds": "three"}, "seeds: Input should be a valid integer"),
    ({"seeds": 0}, "seeds: Input should be greater than or equal to 1"),
    ({"interpreter_dtype": "bfloat16"}, "interpreter_dtype: Input should be 'float32' or 'float16'"),
    ({"dtype": "float64"}, "dtype: Input should be 'float32', 'float16' or 'bfloat16'"),
    ({"name": ...}, "name: Field required"),
    ({"workloads": {"w": {"M": 1}}}, "workloads: Input should be a valid list"),
    ({"entry_point": "run kernel"}, "entry_point: 'run kernel' is not a Python function name"),
])
def test_shapes_and_types(task_dir, changes, message):
    assert error_of(task_dir, **changes).startswith(message)


def test_a_spec_is_checked_before_and_written_from_the_model(task_dir):
    """How importers write task.json: the fields they set, in SPEC_ORDER, and nothing at its default."""
    assert set(SPEC_ORDER) == set(TaskSpec.model_fields)
    fields = {"gpu_only": "too big", "seeds": 4, "name": "t", "description": "d", "dtype": "float16",
              "workloads": [{"name": "w", "params": {"n": 8, "eps": 1e-6}}],
              "interpreter_workloads": [{"name": "w", "params": {"n": 2, "eps": 1e-6}}], "atol": 0.01}
    write_spec(task_dir, task_spec(fields, "here"))
    text = (task_dir / "task.json").read_text()
    assert list(json.loads(text)) == [k for k in SPEC_ORDER if k in fields] and text.endswith("}\n")
    assert json.loads(text) == fields and load_task(task_dir).spec == TaskSpec.model_validate(fields)
    with pytest.raises(TaskError, match="^there: seeds: Input should be less than or equal to 20$"):
        task_spec({**fields, "seeds": 21}, "there")


@pytest.mark.parametrize("text, message", [
    ("[1, 2]", "the top level must be a JSON object {...}, not list"),
    ('"softmax"', "the top level must be a JSON object {...}, not str"),
    ("{ not json", "invalid JSON at line 1: Expecting property name enclosed in double quotes"),
])
def test_the_top_level_is_a_json_object(task_dir, text, message):
    (task_dir / "task.json").write_text(text)
    with pytest.raises(TaskError) as info:
        load_task(task_dir)
    assert str(info.value) == f"{task_dir / 'task.json'}: {message}"


# ---------------------------------------------------------------- the Python files

@pytest.mark.parametrize("file", ["task.json", "reference.py", "baseline.py"])
def test_files_are_utf8(task_dir, file):
    (task_dir / file).write_bytes(b"# caf\xe9\n" + (task_dir / file).read_bytes())
    with pytest.raises(TaskError) as info:
        load_task(task_dir)
    assert str(info.value) == f"{task_dir / file}: not UTF-8 text (byte 0xe9 at offset 5): save it as UTF-8"


def test_a_nul_byte_in_python_source_is_one_line(task_dir):
    (task_dir / "reference.py").write_bytes(b"x = 1\x00\n")
    with pytest.raises(TaskError) as info:
        load_task(task_dir)
    assert str(info.value).startswith(f"{task_dir / 'reference.py'}: ") and "\n" not in str(info.value)


def test_reference_and_baseline_define_their_functions(task_dir):
    (task_dir / "baseline.py").write_text("def kernel(x):\n    return x\n")
    with pytest.raises(TaskError, match=r"baseline.py: missing function\(s\) run$"):
        load_task(task_dir)
    (task_dir / "baseline.py").unlink()
    (task_dir / "reference.py").write_text("def make_inputs(w, s, d, t):\n    return ()\n")
    with pytest.raises(TaskError, match=r"reference.py: missing function\(s\) reference, flops, bytes_moved$"):
        load_task(task_dir)


# ---------------------------------------------------------------- the judge's rules

def test_a_matched_ratio_passes_an_output_with_few_elements_off():
    ref = torch.ones(100)
    out = ref.clone()
    out[:4] = 2.0  # 96% matched
    assert _compare(torch, [out], ref, 1e-2, 1e-2, "w", ratio=0.95)["max_abs_err"] == 1.0
    with pytest.raises(Reject, match="4/100 elements outside"):
        _compare(torch, [out], ref, 1e-2, 1e-2, "w")  # no ratio: every element
    out[:6] = 2.0  # 94% matched
    with pytest.raises(Reject) as info:
        _compare(torch, [out], ref, 1e-2, 1e-2, "w", ratio=0.95)
    assert info.value.status == "wrong_output" and "94.00% matched where 95.00% is required" in info.value.error


def test_a_nan_fails_even_under_a_matched_ratio():
    out = torch.ones(100)
    out[0] = float("nan")
    with pytest.raises(Reject) as info:
        _compare(torch, [out], torch.ones(100), 1e-2, 1e-2, "w", ratio=0.5)
    assert info.value.status == "nan" and "1/100 NaN/Inf values where the reference is finite" in info.value.error


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_outputs_are_compared_as_float32(dtype):
    ref = torch.linspace(-4, 4, 64).to(dtype)
    assert _compare(torch, [ref.clone()], ref, 0.0, 0.0, "w")["max_abs_err"] == 0.0
    off = (ref.float() * 2).to(dtype)
    with pytest.raises(Reject, match="elements outside atol=0.01"):
        _compare(torch, [off], ref, 1e-2, 1e-2, "w")
    poisoned = ref.clone()
    poisoned[3] = float("nan")
    with pytest.raises(Reject, match="NaN/Inf"):
        _compare(torch, [poisoned], ref, 1e-2, 1e-2, "w")


@pytest.mark.skipif(not hasattr(torch, "float4_e2m1fn_x2"), reason="this torch has no float4_e2m1fn_x2")
def test_packed_fp4_outputs_are_compared_byte_for_byte():
    codes = torch.arange(256, dtype=torch.uint8).reshape(16, 16)
    ref = codes.clone().view(torch.float4_e2m1fn_x2)
    _compare(torch, [codes.clone().view(torch.float4_e2m1fn_x2)], ref, 1.0, 1.0, "w")
    codes[0, 0] ^= 1
    with pytest.raises(Reject) as info:
        _compare(torch, [codes.view(torch.float4_e2m1fn_x2)], ref, 1.0, 1.0, "w")  # tolerances do not apply
    assert info.value.status == "wrong_output" and "1/256 bytes of packed torch.float4_e2m1fn_x2 differ" \
        in info.value.error


def test_a_reference_failure_is_one_line_that_says_where():
    path = "/tmp/task/reference.py"
    code = compile("def reference(x):\n    raise ValueError('bad shape\\nsecond line')\n", path, "exec")
    scope: dict = {}
    exec(code, scope)
    try:
        scope["reference"](1)
    except ValueError as exc:
        reject = _reference_failed("reference (workload w seed 0)", exc, path)
    assert reject.status == "reference_error"
    assert reject.error == ("the task's reference failed: reference (workload w seed 0) raised ValueError at "
                            "reference.py line 2: bad shape")
