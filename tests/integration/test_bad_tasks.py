"""Tasks that cannot lie: malformed task directories and import inputs, each run through the real
CLI in a process of its own, exit non-zero with one line that names the problem, no traceback,
and nothing written outside the test's own folder. Most are refused when the task is loaded (a
second or two each); the few that only running can show (a reference that raises, flops() that
returns NaN) go through the judge on the CPU and are blamed on the task's reference."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT, TASKS

FIB = FIXTURES / "flashinfer"
KERNELBENCH = FIXTURES / "kernelbench"


def run_cli(*args, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "accelopt", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def _listing(path: Path) -> set[str]:
    return set(os.listdir(path)) if path.is_dir() else set()


@pytest.fixture
def place(tmp_path):
    """A working directory inside tmp_path; afterwards, nothing may have appeared in the repository,
    its runs/ folder, or beside tmp_path (where a '../..' name would escape to)."""
    watched = [ROOT, ROOT / "runs", tmp_path.parent]
    before = [_listing(p) for p in watched]
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    yield cwd
    after = [_listing(p) for p in watched]
    for path, old, new in zip(watched, before, after):
        assert new <= old | {tmp_path.name}, f"written outside the test's folder, in {path}: {sorted(new - old)}"
    assert not list(tmp_path.rglob("..*-*")), "a run directory was named after an unsafe task name"


def error_line(proc: subprocess.CompletedProcess, code: int = 2) -> str:
    """The one error line of a refused command (asserting the refusal is clean)."""
    output = proc.stdout + proc.stderr
    assert proc.returncode == code, output
    assert "Traceback" not in output, output
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0] == lines[-1], output
    return errors[0]


# ---------------------------------------------------------------- malformed task directories

def softmax(tmp_path) -> Path:
    dst = tmp_path / "task"
    shutil.copytree(TASKS / "softmax", dst)
    return dst


def with_spec(**changes):
    def apply(task: Path) -> None:
        spec = {k: v for k, v in {**json.loads((task / "task.json").read_text()), **changes}.items() if v is not ...}
        (task / "task.json").write_text(json.dumps(spec))
    return apply


def with_file(name: str, content: str | bytes | None):
    def apply(task: Path) -> None:
        if content is None:
            (task / name).unlink()
        elif isinstance(content, bytes):
            (task / name).write_bytes(content)
        else:
            (task / name).write_text(content)
    return apply


def with_reference(old: str, new: str):
    def apply(task: Path) -> None:
        source = (task / "reference.py").read_text()
        assert old in source
        (task / "reference.py").write_text(source.replace(old, new))
    return apply


ONE = {"name": "w", "params": {"M": 4, "N": 8}}
TASK_JSON = "task.json: "

LOAD_CASES = [
    ("bad_json", with_file("task.json", "{ not json"), TASK_JSON + "invalid JSON at line 1"),
    ("json_list", with_file("task.json", "[1, 2, 3]"), TASK_JSON + "the top level must be a JSON object"),
    ("json_not_utf8", with_file("task.json", b'{"name": "caf\xe9"}'), TASK_JSON + "not UTF-8 text (byte 0xe9"),
    ("missing_name", with_spec(name=...), TASK_JSON + "name: Field required"),
    ("missing_workloads", with_spec(workloads=...), TASK_JSON + "workloads: Field required"),
    ("seeds_not_int", with_spec(seeds="three"), TASK_JSON + "seeds: Input should be a valid integer"),
    ("workloads_not_list", with_spec(workloads={"w": {"M": 4}}), TASK_JSON + "workloads: Input should be a valid list"),
    ("negative_atol", with_spec(atol=-0.001), TASK_JSON + "atol: -0.001 is not a tolerance: use a finite number >= 0"),
    ("nan_rtol", with_spec(rtol=float("nan")), TASK_JSON + "rtol: nan is not a tolerance"),
    ("empty_workloads", with_spec(workloads=[]), TASK_JSON + "workloads: List should have at least 1 item"),
    ("empty_interpreter_workloads", with_spec(interpreter_workloads=[]),
     TASK_JSON + "interpreter_workloads: List should have at least 1 item"),
    ("duplicate_workloads", with_spec(workloads=[ONE, ONE]),
     TASK_JSON + "workloads: workload name(s) w appear more than once"),
    ("zero_size", with_spec(interpreter_workloads=[{"name": "w", "params": {"M": 0, "N": 8}}]),
     TASK_JSON + "interpreter_workloads.0.params: size M is 0: sizes must be positive integers"),
    ("negative_size", with_spec(workloads=[{"name": "w", "params": {"M": 4, "N": -8}}]),
     TASK_JSON + "workloads.0.params: size N is -8"),
    ("nan_param", with_spec(workloads=[{"name": "w", "params": {"M": 4, "N": float("nan")}}]),
     TASK_JSON + "workloads.0.params: param N is nan: params must be finite numbers"),
    ("name_escapes", with_spec(name="../../.."), TASK_JSON + "name: '../../..' is not a safe task name"),
    ("name_with_slash", with_spec(name="a/b"), TASK_JSON + "name: 'a/b' is not a safe task name"),
    ("name_hidden", with_spec(name=".hidden"), TASK_JSON + "name: '.hidden' is not a safe task name"),
    ("name_nul", with_spec(name="soft\x00max"), TASK_JSON + "name: 'soft\\x00max' is not a safe task name"),
    ("bad_interpreter_dtype", with_spec(interpreter_dtype="bfloat16"),
     TASK_JSON + "interpreter_dtype: Input should be 'float32' or 'float16'"),
    ("ratio_zero", with_spec(required_matched_ratio=0), TASK_JSON + "required_matched_ratio: 0.0 is not a ratio"),
    ("ratio_above_one", with_spec(required_matched_ratio=1.5),
     TASK_JSON + "required_matched_ratio: 1.5 is not a ratio: use a fraction of the elements, 0 < ratio <= 1"),
    ("misspelled_field", with_spec(atoll=0.01), TASK_JSON + "atoll: unknown field (known: name, description"),
    ("bad_entry_point", with_spec(entry_point="run()"), TASK_JSON + "entry_point: 'run()' is not a Python function"),
    ("reference_missing", with_file("reference.py", None), "task: missing reference.py"),
    ("reference_not_utf8", with_file("reference.py", b"import torch\n# \xff\xfe\n"),
     "reference.py: not UTF-8 text (byte 0xff at offset 15): save it as UTF-8"),
    ("reference_syntax_error", with_reference("def reference(x):", "def reference(x)"),
     "reference.py: syntax error at line 10"),
    ("reference_missing_flops", with_reference("def flops(", "def flops_estimate("),
     "reference.py: missing function(s) flops"),
    ("baseline_missing_entry_point", with_file("baseline.py", "def kernel(x):\n    return x\n"),
     "baseline.py: missing function(s) run"),
    ("baseline_not_utf8", with_file("baseline.py", b"\x80import triton\n"), "baseline.py: not UTF-8 text (byte 0x80"),
    ("no_task_json", with_file("task.json", None), "task is not a task: it has no task.json"),
]


@pytest.mark.parametrize("breaks, needle", [c[1:] for c in LOAD_CASES], ids=[c[0] for c in LOAD_CASES])
def test_a_malformed_task_is_refused_before_anything_runs(tmp_path, place, breaks, needle):
    task = softmax(tmp_path)
    breaks(task)
    run = tmp_path / "run"
    proc = run_cli("optimize", task, "--device", "cpu", "--no-memory", "-T", "1", "--run-dir", run, cwd=place)
    assert needle in error_line(proc)
    assert not run.exists() and not (place / "runs").exists()


def test_a_missing_task_directory(tmp_path, place):
    proc = run_cli("optimize", tmp_path / "nowhere", "--device", "cpu", "--no-memory", cwd=place)
    assert "task directory not found" in error_line(proc)


def test_check_refuses_a_gpu_only_task_on_the_interpreter_with_its_reason(tmp_path, place):
    task = softmax(tmp_path)
    with_spec(gpu_only="its smallest workload touches 16,785,408 elements")(task)
    proc = run_cli("check", task, task / "baseline.py", "--device", "cpu", "--json", cwd=place)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "reference_error"
    assert result["error"] == "softmax runs on a GPU only: its smallest workload touches 16,785,408 elements"


# ---------------------------------------------------------------- what only running shows

RAISES = "raise ValueError('the reference is broken')\n    "


def _seedless(message: str) -> str:
    """The message with its seed as N: each evaluation draws its own (tools/harness/seeds.py)."""
    return re.sub(r"seed \d+", "seed N", message)
RUN_CASES = [
    ("make_inputs_raises", with_reference("gen = torch.Generator", RAISES + "gen = torch.Generator"),
     "the task's reference failed: make_inputs (workload M4_N37, seed N) raised ValueError at reference.py line 5: "
     "the reference is broken"),
    ("flops_raises", with_reference('return 5.0 * workload["M"]', 'return 5.0 * workload["rows"]'),
     "the task's reference failed: flops(workload M4_N37) raised KeyError at reference.py line 16: 'rows'"),
    ("flops_nan", with_reference('return 5.0 * workload["M"] * workload["N"]', 'return float("nan")'),
     "the task's reference failed: flops(workload M4_N37) returned nan; it must return a finite count >= 0"),
    ("bytes_negative", with_reference('return 2.0 * workload["M"]', 'return -2.0 * workload["M"]'),
     "the task's reference failed: bytes_moved(workload M4_N37) returned -"),
    ("import_raises", with_reference("import torch\n", "import torch\nimport no_such_module_here\n"),
     "the task's reference failed: importing reference.py raised ModuleNotFoundError at reference.py line 2: "
     "No module named 'no_such_module_here'"),
]


@pytest.mark.slow
@pytest.mark.parametrize("breaks, message", [c[1:] for c in RUN_CASES], ids=[c[0] for c in RUN_CASES])
def test_a_broken_reference_is_blamed_on_the_reference(tmp_path, place, breaks, message):
    task = softmax(tmp_path)
    breaks(task)
    proc = run_cli("check", task, task / "baseline.py", "--device", "cpu", "--json", cwd=place)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "reference_error" and _seedless(result["error"]).startswith(message), result["error"]
    assert "\n" not in result["error"] and "baseline" not in result["error"]


@pytest.mark.slow
def test_a_run_whose_reference_raises_stops_with_the_references_line(tmp_path, place):
    task = softmax(tmp_path)
    with_reference("return torch.softmax", RAISES + "return torch.softmax")(task)
    run = tmp_path / "run"
    proc = run_cli("optimize", task, "--device", "cpu", "--no-memory", "-T", "1", "--run-dir", run, cwd=place)
    line = error_line(proc, code=1)
    assert ("the task's reference failed: reference (workload M4_N37 seed N) raised ValueError at reference.py "
            "line 11: the reference is broken") in _seedless(line)
    assert "baseline kernel" not in line  # the task is broken, not the baseline
    baseline = json.loads((run / "candidates" / "baseline" / "result.json").read_text())
    assert baseline["status"] == "reference_error"


# ---------------------------------------------------------------- imports

KERNELBENCH_NO_MODEL = "import torch\n\n\ndef get_inputs():\n    return [torch.randn(4)]\n"
DEFINITION_NO_AXES = {"name": "rmsnorm_x", "op_type": "rmsnorm", "inputs": {}, "outputs": {}, "reference": ""}
IMPORT_CASES = [
    ("kernelbench_missing_file", ["kernelbench", "nope.py"], None, "problem file not found: nope.py"),
    ("kernelbench_no_model", ["kernelbench", "p.py"], KERNELBENCH_NO_MODEL,
     "p.py is not a KernelBench problem: missing Model, get_init_inputs"),
    ("kernelbench_syntax_error", ["kernelbench", "p.py"], "class Model(:\n", "p.py: syntax error at line 1"),
    ("kernelbench_no_such_problem", ["kernelbench", "--level", "1", "--problem", "999", "--repo", KERNELBENCH],
     None, "level 1 has no problem 999"),
    ("flashinfer_bad_json", ["flashinfer", "p.json"], '{"name": "x"', "p.json: invalid JSON at line 1"),
    ("flashinfer_not_an_object", ["flashinfer", "p.json"], "[1]",
     "p.json: not a FlashInfer-Bench Definition: : Input should be a valid dictionary"),
    ("flashinfer_missing_axes", ["flashinfer", "p.json"], json.dumps(DEFINITION_NO_AXES),
     "p.json: not a FlashInfer-Bench Definition: axes: Field required"),
    ("flashinfer_unknown_dtype", ["flashinfer", "p.json", "--workloads", FIB / "rmsnorm_h128.workloads.jsonl"],
     (FIB / "rmsnorm_h128.json").read_text().replace('"dtype": "float32"', '"dtype": "float128"'),
     "p.json: not a FlashInfer-Bench Definition: inputs.eps.dtype: Input should be"),
]


@pytest.mark.parametrize("args, content, needle", [c[1:] for c in IMPORT_CASES], ids=[c[0] for c in IMPORT_CASES])
def test_a_bad_import_is_refused_and_writes_nothing(place, args, content, needle):
    if content is not None:
        (place / args[1]).write_text(content)
    proc = run_cli("import", *args, "--out", "out", cwd=place)
    assert needle in error_line(proc)
    assert not (place / "out" / "task.json").exists()


# ---------------------------------------------------------------- a suite with bad tasks

@pytest.mark.slow
def test_eval_records_each_bad_task_as_failed_and_still_writes_the_report(tmp_path, place):
    suite = tmp_path / "suite"
    for name, breaks in (("a_bad_json", with_file("task.json", "{ not json")),
                         ("b_reference_raises", with_reference("return torch.softmax", RAISES + "return torch.softmax")),
                         ("c_unsafe_name", with_spec(name="../../..")),
                         ("d_gpu_only", with_spec(gpu_only="needs 40 GB"))):
        shutil.copytree(TASKS / "softmax", suite / name)
        breaks(suite / name)
    out = tmp_path / "eval"
    proc = run_cli("eval", suite, "--out", out, "--device", "cpu", "--no-memory", "-T", "1", cwd=place, timeout=600)
    # the suite goes on past each bad task; its exit says some failed (the GPU-only one was skipped: no failure)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert "error: 3 of 4 tasks failed: a_bad_json (" in proc.stderr
    rows = {row["task"]: row for row in json.loads((out / "report.json").read_text())["tasks"]}
    assert (out / "report.html").is_file()
    assert {name: row["outcome"] for name, row in rows.items()} == {
        "a_bad_json": "failed", "b_reference_raises": "failed", "c_unsafe_name": "failed", "d_gpu_only": "skipped"}
    assert rows["a_bad_json"]["note"].endswith("a_bad_json/task.json: invalid JSON at line 1: Expecting property "
                                               "name enclosed in double quotes")
    assert _seedless(rows["b_reference_raises"]["note"]).startswith(
        "the task's reference failed: reference (workload M4_N37 seed N) raised ValueError at reference.py line 11")
    assert "name: '../../..' is not a safe task name" in rows["c_unsafe_name"]["note"]
    assert rows["d_gpu_only"]["note"] == "softmax runs on a GPU only: needs 40 GB"
    assert "[1/4] a_bad_json: failed (" in proc.stdout and "[3/4] c_unsafe_name: failed (" in proc.stdout
