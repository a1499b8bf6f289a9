"""FlashInfer-Bench files as its users have them: the published Definitions (optional lists
given as null), Solutions passed as a baseline, and the dataset folder the export writes, as the
README lists it (read out of README.md, so the two cannot drift apart)."""

import json
import re

import pytest
from typer.testing import CliRunner

from accelopt.cli.app import app
from accelopt.tools.harness.runner import evaluate
from accelopt.tools.task import load_task
from tests.conftest import FIXTURES, ROOT
from tests.integration.test_flashinfer import _fake_run

fib = pytest.importorskip("flashinfer_bench.data", reason="flashinfer-bench's models check what we read and write")
FIB = FIXTURES / "flashinfer"
REALWORLD = ROOT / "evals" / "realworld"
runner = CliRunner()


def _import(tmp_path, definition, workloads, *extra):
    return runner.invoke(app, ["import", "flashinfer", str(definition), "--workloads", str(workloads),
                               "--out", str(tmp_path / "task"), *map(str, extra)])


def test_a_published_definition_with_null_optional_lists_imports(tmp_path):
    published = REALWORLD / "tasks" / "rmsnorm_h128" / "definition.json"  # upstream bytes: "constraints": null
    assert json.loads(published.read_text())["constraints"] is None
    result = _import(tmp_path, published, published.with_name("workloads.jsonl"))
    assert result.exit_code == 0, result.output
    assert load_task(tmp_path / "task").spec.origin["definition"] == "rmsnorm_h128"
    assert (tmp_path / "task" / "definition.json").read_bytes() == published.read_bytes()  # kept verbatim

    # Exported, it is a Definition flashinfer-bench's own model reads (null lists written empty).
    task = load_task(tmp_path / "task")
    names = [w.name for w in task.spec.workloads]
    kernel = {"id": "k", "status": "verified", "device": "cuda", "device_name": "NVIDIA H100", "speedup": 2.0,
              "max_abs_err": 0.0, "max_rel_err": 0.0, "workloads": {n: {"median_us": 1000.0} for n in names},
              "compared_us": {"baseline": {n: 3000.0 for n in names}}}
    run_dir = _fake_run(tmp_path, task, kernel, (FIB / "rmsnorm_h128.kernel.py").read_text())
    result = runner.invoke(app, ["export", "flashinfer", str(run_dir), "--out", str(tmp_path / "fib")])
    assert result.exit_code == 0, result.output
    exported = fib.TraceSet.from_path(str(tmp_path / "fib"))
    assert exported.definitions["rmsnorm_h128"].constraints == [] and len(exported.traces["rmsnorm_h128"]) == 2
    assert exported.definitions["rmsnorm_h128"].reference == json.loads(published.read_text())["reference"]

    nulls = {**json.loads((FIB / "rmsnorm_h128.json").read_text()), "tags": None, "constraints": None,
             "description": None}
    (tmp_path / "nulls.json").write_text(json.dumps(nulls))
    result = _import(tmp_path, tmp_path / "nulls.json", FIB / "rmsnorm_h128.workloads.jsonl", "--force")  # over the first
    assert result.exit_code == 0, result.output


def _solution(source: str, **changes) -> dict:
    """A Solution as flashinfer-bench writes one (checked with its own model)."""
    spec = {"language": "triton", "target_hardware": ["NVIDIA_H100"], "entry_point": "main.py::run",
            "dependencies": [], "destination_passing_style": False, **changes.pop("spec", {})}
    solution = {"name": "gpt-5_triton_rms128", "definition": "rmsnorm_h128", "author": "gpt-5",
                "description": "one program per row", "spec": spec,
                "sources": [{"path": "main.py", "content": source}], **changes}
    fib.Solution.model_validate(solution)
    return solution


def test_a_solution_json_is_a_baseline(tmp_path):
    kernel = (FIB / "rmsnorm_h128.kernel.py").read_text()
    renamed = kernel.replace("def run(", "def rmsnorm(")  # an entry point not named run
    (tmp_path / "solution.json").write_text(json.dumps(_solution(renamed, spec={"entry_point": "main.py::rmsnorm"})))
    result = _import(tmp_path, FIB / "rmsnorm_h128.json", FIB / "rmsnorm_h128.workloads.jsonl",
                     "--baseline", tmp_path / "solution.json")
    assert result.exit_code == 0, result.output
    task = load_task(tmp_path / "task")  # validates, baseline.py defines the task's entry point
    assert task.baseline_source.startswith(renamed.rstrip()) and "def run(*inputs):" in task.baseline_source
    assert evaluate(task, task.baseline_source, device="cpu", rounds=1).status == "verified"

    # The published pair: flashinfer-trace's Definition (constraints null) and an upstream Solution for it.
    pair = next(p for p in json.loads((REALWORLD / "manifest.json").read_text())["pairs"]
                if p["definition"] == "rmsnorm_h128")
    upstream = {"name": pair["origin"]["solution_name"], "definition": pair["definition"], "author": pair["author"],
                "spec": {"language": pair["language"], "target_hardware": ["B200"],
                         "entry_point": pair["entry_point"], "dependencies": []},  # no destination_passing_style
                "sources": [{"path": "main.py", "content": (REALWORLD / pair["solution"]).read_text()}]}
    (tmp_path / "upstream.json").write_text(json.dumps(upstream))
    task_dir = REALWORLD / pair["task"]
    result = runner.invoke(app, ["import", "flashinfer", str(task_dir / "definition.json"), "--workloads",
                                 str(task_dir / "workloads.jsonl"), "--out", str(tmp_path / "published"),
                                 "--baseline", str(tmp_path / "upstream.json")])
    assert result.exit_code == 0, result.output
    assert load_task(tmp_path / "published").baseline_source == (REALWORLD / pair["solution"]).read_text()


def test_what_is_no_python_kernel_nor_a_solution_is_refused_at_once(tmp_path):
    kernel = (FIB / "rmsnorm_h128.kernel.py").read_text()
    cases = {
        "cuda.json": (_solution("extern \"C\" void run() {}", spec={"language": "cuda", "entry_point": "main.cu::run"},
                                sources=[{"path": "main.cu", "content": "extern \"C\" void run() {}"}]),
                      "is written in cuda"),
        "other.json": (_solution(kernel, definition="rmsnorm_h4096"),
                       "is for Definition rmsnorm_h4096, not rmsnorm_h128"),
        "two.json": (_solution(kernel, sources=[{"path": "main.py", "content": kernel},
                                                {"path": "helpers.py", "content": "X = 1\n"}]),
                     "has 2 source files (main.py, helpers.py): an accelopt baseline is one Python module"),
        "dps.json": (_solution(kernel, spec={"destination_passing_style": True}), "is destination-passing"),
        "missing.json": (_solution(kernel, spec={"entry_point": "main.py::kernel"}),
                         "its entry point main.py::kernel names nothing main.py defines"),
        "definition.json": (json.loads((FIB / "rmsnorm_h128.json").read_text()),
                            "a JSON file but not a FlashInfer-Bench Solution: definition: Field required"),
    }
    for name, (content, _reason) in cases.items():
        (tmp_path / name).write_text(json.dumps(content))
    (tmp_path / "kernel.cu").write_text('#include <cuda.h>\n__global__ void run(float* x) {}\n')
    cases["kernel.cu"] = (None, "neither a Python kernel module nor a FlashInfer-Bench Solution JSON (syntax error")
    for name, (_, reason) in cases.items():
        result = _import(tmp_path, FIB / "rmsnorm_h128.json", FIB / "rmsnorm_h128.workloads.jsonl",
                         "--baseline", tmp_path / name)
        assert result.exit_code == 2 and reason in result.output, (name, result.output)
        assert len(result.output.strip().splitlines()) == 1, result.output
        assert not (tmp_path / "task").exists()  # refused before the task is written


def _readme_layout() -> list[str]:
    """The paths README.md says `accelopt export flashinfer ... --out fib/` writes."""
    (block,) = re.findall(r"```text\n((?:fib/.*\n)+)```", (ROOT / "README.md").read_text())
    return [line.split()[0] for line in block.splitlines()]


def test_the_export_writes_what_the_readme_lists(tmp_path):
    from accelopt.evals.interop.flashinfer import import_definition

    task = load_task(import_definition(FIB / "rmsnorm_h128.json", FIB / "rmsnorm_h128.workloads.jsonl",
                                       tmp_path / "task"))
    names = [w.name for w in task.spec.interpreter_workloads]
    kernel = {"id": "i1.m0.p0.k0", "status": "verified", "device": "cpu", "device_name": "cpu (Triton interpreter)",
              "timer": "interpreter_wall", "speedup": 2.0, "max_abs_err": 0.0, "max_rel_err": 0.0,
              "workloads": {n: {"median_us": 1000.0} for n in names},
              "compared_us": {"baseline": {n: 3000.0 for n in names}}}
    run_dir = _fake_run(tmp_path, task, kernel, (FIB / "rmsnorm_h128.kernel.py").read_text())
    result = runner.invoke(app, ["export", "flashinfer", str(run_dir), "--out", str(tmp_path / "fib")])
    assert result.exit_code == 0, result.output

    layout = _readme_layout()
    assert len(layout) == 4
    values = {"op_type": "rmsnorm", "definition": "rmsnorm_h128", "author": "accelopt"}
    written = {p.relative_to(tmp_path).as_posix() for p in (tmp_path / "fib").rglob("*") if p.is_file()}
    for listed in layout:
        pattern = re.sub(r"<(\w+)>", lambda m: values.get(m[1], "*"), listed)
        matches = [p for p in written if re.fullmatch(re.escape(pattern).replace(r"\*", "[^/]+"), p)]
        assert len(matches) == 1, (listed, sorted(written))
        written -= set(matches)
    assert not written, f"the export writes files the README does not list: {sorted(written)}"
    assert fib.TraceSet.from_path(str(tmp_path / "fib")).traces["rmsnorm_h128"]  # the folder FIB reads
