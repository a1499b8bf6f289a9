"""FlashInfer-Bench and KernelBench round trips, validated by the peer formats' own code:
flashinfer-bench's pydantic models, and KernelBench's way of comparing Model with ModelNew."""

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from accelopt.cli.app import app
from accelopt.tools.harness.runner import _reference_module, evaluate
from accelopt.tools.task import TaskError, load_task
from tests.conftest import ROOT

fib = pytest.importorskip("flashinfer_bench.data")
FIXTURES = ROOT / "tests" / "fixtures"
FIB = FIXTURES / "flashinfer"
KB = FIXTURES / "kernelbench"
runner = CliRunner()


@pytest.mark.parametrize("name", ["rmsnorm_h128", "gemm_n64_k128", "fused_add_rmsnorm_h256"])
def test_flashinfer_fixtures_import_as_tasks(tmp_path, name):
    definition = fib.Definition.model_validate_json((FIB / f"{name}.json").read_text())  # the peer's own model
    task = load_task(__import__("accelopt.evals.interop.flashinfer", fromlist=["x"]).import_definition(
        FIB / f"{name}.json", FIB / f"{name}.workloads.jsonl", tmp_path / name))
    workloads = (FIB / f"{name}.workloads.jsonl").read_text().splitlines()
    assert len(task.spec.workloads) == len(workloads) and task.spec.origin["definition"] == definition.name
    assert len({w.name for w in task.spec.workloads}) == len(workloads)  # unique even with shared uuid prefixes
    ref = _reference_module(task.root)
    w = task.spec.interpreter_workloads[0].params
    inputs = ref.make_inputs(w, 0, "cpu", task.spec.dtype_for("cpu"))
    outs = ref.reference(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    assert len(outs) == len(definition.outputs)
    axes = {**definition.const_axes, **{k: int(v) for k, v in w.items() if k in definition.axes}}
    for out, spec in zip(outs, definition.outputs.values()):  # the Definition's shapes, for these axes
        assert list(out.shape) == [axes[a] for a in spec.shape]
    if definition.op_type == "gemm":
        assert ref.flops({"M": 16}, "float16") == 2 * 16 * 64 * 128


def test_flashinfer_round_trip_through_a_run(tmp_path):
    task_dir = tmp_path / "rmsnorm_h128"
    result = runner.invoke(app, ["import", "flashinfer", str(FIB / "rmsnorm_h128.json"), "--workloads",
                                 str(FIB / "rmsnorm_h128.workloads.jsonl"), "--out", str(task_dir),
                                 "--baseline", str(FIB / "rmsnorm_h128.kernel.py")])
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / "run"
    result = runner.invoke(app, ["optimize", str(task_dir), "-B", "1", "-N", "1", "-K", "1", "-T", "1", "--device",
                                 "cpu", "--no-memory", "--run-dir", str(run_dir)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["export", "flashinfer", str(run_dir), "--out", str(tmp_path / "export")])
    assert result.exit_code == 0, result.output

    # The export is a FlashInfer-Bench dataset: solutions/<author>/<op_type>/<definition>/<name>.json, traces/...
    (solution_path,) = (tmp_path / "export" / "solutions").rglob("*.json")
    solution = fib.Solution.model_validate_json(solution_path.read_text())
    assert solution.definition == "rmsnorm_h128" and solution.spec.language.value == "triton"
    assert solution.get_entry_source().content == (run_dir / "best_kernel.py").read_text()
    (traces_path,) = (tmp_path / "export" / "traces").rglob("*.jsonl")
    traces = [fib.Trace.model_validate_json(line) for line in traces_path.read_text().splitlines()]
    assert traces and all(t.solution == solution.name and t.is_successful() for t in traces)
    # Interpreter numbers say so, in the environment and the log.
    assert all("interpreter" in t.evaluation.environment.hardware and "not GPU performance" in t.evaluation.log
               for t in traces)
    assert all(t.evaluation.performance.latency_ms > 0 and t.evaluation.performance.reference_latency_ms > 0
               for t in traces)


def test_flashinfer_import_refuses_what_it_cannot_judge(tmp_path):
    from accelopt.evals.interop.flashinfer import import_definition

    definition = json.loads((FIB / "rmsnorm_h128.json").read_text())
    (tmp_path / "sampling.json").write_text(json.dumps({**definition, "op_type": "top_k_sampling"}))
    with pytest.raises(TaskError, match="distribution test"):
        import_definition(tmp_path / "sampling.json", FIB / "rmsnorm_h128.workloads.jsonl", tmp_path / "a")
    with pytest.raises(TaskError, match="variable axes: pass its workloads"):
        import_definition(FIB / "rmsnorm_h128.json", None, tmp_path / "b")
    (tmp_path / "bad.json").write_text('{"name": "x", ')
    with pytest.raises(TaskError, match="invalid JSON"):
        import_definition(tmp_path / "bad.json", None, tmp_path / "c")
    (tmp_path / "latin1.json").write_bytes(json.dumps(definition).encode().replace(b"rmsnorm", b"caf\xe9"))
    with pytest.raises(TaskError, match=r"latin1.json: not UTF-8 text \(byte 0xe9"):
        import_definition(tmp_path / "latin1.json", FIB / "rmsnorm_h128.workloads.jsonl", tmp_path / "d")
    (tmp_path / "syntax.json").write_text(json.dumps({**definition, "reference": "def run(x:\n    return x\n"}))
    with pytest.raises(TaskError, match="the Definition's reference has a syntax error at line 1"):
        import_definition(tmp_path / "syntax.json", FIB / "rmsnorm_h128.workloads.jsonl", tmp_path / "e")
    with pytest.raises(TaskError, match=r"f/task.json: seeds: Input should be greater than or equal to 1"):
        import_definition(FIB / "rmsnorm_h128.json", FIB / "rmsnorm_h128.workloads.jsonl", tmp_path / "f", seeds=0)
    assert not any((tmp_path / d).exists() for d in "def")  # refused before anything is written
    result = runner.invoke(app, ["export", "flashinfer", str(tmp_path), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "no summary.json" in result.output


def _kernelbench_task(tmp_path):
    task_dir = tmp_path / "linear_relu"
    result = runner.invoke(app, ["import", "kernelbench", str(KB / "linear_relu.py"), "--out", str(task_dir),
                                 "--interpreter-param", "batch_size=4", "--interpreter-param", "in_features=32",
                                 "--interpreter-param", "out_features=16",
                                 "--baseline", str(KB / "linear_relu_kernel.py")])
    assert result.exit_code == 0, result.output
    return task_dir


def test_kernelbench_import_describes_the_call_and_checks_kernels(tmp_path):
    task = load_task(_kernelbench_task(tmp_path))
    assert "linear.weight [512, 1024]" in task.spec.description and task.spec.flops_kind == "tensor"
    ref = _reference_module(task.root)
    assert ref.flops({"batch_size": 128, "in_features": 1024, "out_features": 512}, "float32") == 2 * 128 * 1024 * 512
    assert evaluate(task, task.baseline_source, device="cpu", rounds=1).status == "verified"
    no_bias = task.baseline_source.replace("acc += tl.load(b_ptr", "acc += 0 * tl.load(b_ptr")
    assert evaluate(task, no_bias, device="cpu", rounds=1).status == "wrong_output"


def test_kernelbench_solution_passes_kernelbench_style_check(tmp_path):
    task_dir = _kernelbench_task(tmp_path)
    run_dir = tmp_path / "run"
    result = runner.invoke(app, ["optimize", str(task_dir), "-B", "1", "-N", "1", "-K", "1", "-T", "1", "--device",
                                 "cpu", "--no-memory", "--run-dir", str(run_dir)])
    assert result.exit_code == 0, result.output
    solution = tmp_path / "solution.py"
    result = runner.invoke(app, ["export", "kernelbench", str(run_dir), "--out", str(solution)])
    assert result.exit_code == 0, result.output
    # KernelBench's protocol: seed, build Model and ModelNew from get_init_inputs, same inputs, allclose.
    check = f"""
import importlib.util, torch
def load(p, n):
    s = importlib.util.spec_from_file_location(n, p); m = importlib.util.module_from_spec(s); s.loader.exec_module(m); return m
problem, sol = load({str(KB / 'linear_relu.py')!r}, "problem"), load({str(solution)!r}, "solution")
for mod in (problem, sol):
    mod.batch_size, mod.in_features, mod.out_features = 4, 32, 16
for seed in range(3):
    torch.manual_seed(seed); model = problem.Model(*problem.get_init_inputs())
    torch.manual_seed(seed); new = sol.ModelNew(*sol.get_init_inputs())
    torch.manual_seed(100 + seed); x = problem.get_inputs()
    torch.testing.assert_close(new(*x), model(*x), atol=1e-4, rtol=1e-4)
print("kernelbench-check-ok")
"""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=env, timeout=300)
    assert "kernelbench-check-ok" in proc.stdout, proc.stderr[-2000:]


def test_kernelbench_import_errors_are_one_line(tmp_path):
    (tmp_path / "bad.py").write_text("import torch\n\ndef get_inputs():\n    return []\n")
    result = runner.invoke(app, ["import", "kernelbench", str(tmp_path / "bad.py"), "--out", str(tmp_path / "t")])
    assert result.exit_code == 2 and "missing Model, get_init_inputs" in result.output
    result = runner.invoke(app, ["import", "kernelbench", str(KB / "linear_relu.py"), "--out", str(tmp_path / "u"),
                                 "--interpreter-param", "nope=3"])
    assert result.exit_code == 2 and "no module-level constant named nope" in result.output
    (tmp_path / "latin1.py").write_bytes(b"# caf\xe9\nimport torch\n")
    result = runner.invoke(app, ["import", "kernelbench", str(tmp_path / "latin1.py"), "--out", str(tmp_path / "v")])
    assert result.exit_code == 2 and "latin1.py: not UTF-8 text (byte 0xe9 at offset 5)" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_an_import_never_writes_into_a_run_nor_over_a_task_unasked(tmp_path):
    """A re-import refuses an existing task unless --force, which replaces it whole (a hand-edited
    baseline.py does not survive as if it were the import's); a run directory is always refused;
    a failed --force import leaves the old task as it was."""
    task_dir = _kernelbench_task(tmp_path)
    (task_dir / "baseline.py").write_text("# edited by hand\n")
    args = ["import", "kernelbench", str(KB / "linear_relu.py"), "--out", str(task_dir),
            "--interpreter-param", "batch_size=4"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "already holds files" in result.output and "--force" in result.output
    assert (task_dir / "baseline.py").read_text() == "# edited by hand\n"
    result = runner.invoke(app, [*args, "--interpreter-param", "nope=3", "--force"])  # fails: the old task stays
    assert result.exit_code == 2 and (task_dir / "baseline.py").read_text() == "# edited by hand\n"
    assert not list(tmp_path.glob(".*importing"))
    result = runner.invoke(app, [*args, "--force"])
    assert result.exit_code == 0, result.output
    assert not (task_dir / "baseline.py").exists() and load_task(task_dir).baseline_source is None
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text("{}")
    for extra in ([], ["--force"]):
        result = runner.invoke(app, ["import", "kernelbench", str(KB / "linear_relu.py"), "--out", str(run_dir), *extra])
        assert result.exit_code == 2 and "is a run directory" in result.output
    assert sorted(p.name for p in run_dir.iterdir()) == ["run.json"]


def test_an_export_of_a_run_that_found_nothing_faster_says_so(tmp_path):
    task_dir = _kernelbench_task(tmp_path)
    run_dir = tmp_path / "run"
    result = runner.invoke(app, ["optimize", str(task_dir), "--model", "tuner", "-B", "1", "-N", "1", "-T", "1",
                                 "--device", "cpu", "--no-memory", "--run-dir", str(run_dir)])
    assert result.exit_code == 0, result.output
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["best_id"] = "baseline"  # as a run that found nothing faster records it
    (run_dir / "summary.json").write_text(json.dumps(summary))
    result = runner.invoke(app, ["export", "kernelbench", str(run_dir), "--out", str(tmp_path / "solution.py")])
    assert result.exit_code == 0, result.output
    assert "found no kernel faster than its baseline" in " ".join(result.output.split())
