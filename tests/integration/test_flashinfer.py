"""FlashInfer-Bench import and export as its users know it, checked with flashinfer-bench's own
code: its pydantic models, TraceSet (`report best`), apply(), and its dataset `validate` (the
installed one when the release has it, else the copy under tests/fixtures/flashinfer/fib_validate,
Apache-2.0, from flashinfer-bench commit 40e6ca7)."""

import argparse
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
import torch
from typer.testing import CliRunner

from accelopt.cli.app import app
from accelopt.tools.harness.reference_kernel import reference_source
from accelopt.tools.harness.runner import evaluate
from accelopt.tools.run_record import run_summary, write_summary
from accelopt.tools.rundir import write_candidate
from accelopt.tools.task import TaskError, load_task
from tests.conftest import FIXTURES

fib = pytest.importorskip("flashinfer_bench.data", reason="flashinfer-bench is not installed (`make install` adds it "
                                                          "with --no-deps); its models judge what we export")
FIB = FIXTURES / "flashinfer"
MLA = "mla_paged_decode_h16_ckv512_kpe64_ps1"
runner = CliRunner()


def _module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fib_validate(monkeypatch):
    """flashinfer-bench's `validate` (flashinfer_bench.data.validate), CPU checks only."""
    try:
        from flashinfer_bench.data.validate import validate_dataset
    except ImportError:  # releases up to 0.1.2 predate it: the vendored copy runs against the installed package
        vendored = FIB / "fib_validate"
        monkeypatch.setitem(sys.modules, "flashinfer_bench.data.validate_render",
                            _module(vendored / "validate_render.py", "flashinfer_bench.data.validate_render"))
        validate_dataset = _module(vendored / "validate.py", "fib_validate").validate_dataset
    return lambda path: validate_dataset(str(path), disable_gpu=True, outputs=["json"],
                                         output_folder=tempfile.mkdtemp(dir=path.parent))  # a report per call


def _errors(report) -> list[str]:
    return [f"{name}.{check}: {m.message}" for name, d in report.definitions.items()
            for check in ("layout", "definition", "workload", "solution", "trace", "baseline")
            for m in (getattr(d, check).messages if getattr(d, check) else []) if m.level == "error"]


def _report_best(dataset) -> str:
    """What `flashinfer-bench report best --local DATASET` logs."""
    from flashinfer_bench.cli.main import best

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("flashinfer-bench")
    level, logger.level = logger.level, logging.INFO
    logger.addHandler(handler)
    try:
        best(argparse.Namespace(local=[dataset], hub=False))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return "\n".join(r.getMessage() for r in records)


APPLY = """
import sys, torch
from flashinfer_bench.apply import ApplyConfig, apply, enable_apply
enable_apply(sys.argv[1], ApplyConfig())
def fallback(*args):
    raise SystemExit("fallback")
x, w = torch.randn(1, 128), torch.randn(128)
out = apply("rmsnorm_h128", args=(x, w, 1e-6), fallback=fallback)
ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
print("applied", float((out - ref).abs().max()))
try:
    apply("rmsnorm_h128", args=(torch.randn(3, 128), w, 1e-6), fallback=fallback)
except SystemExit as e:
    print("batch 3:", e)
"""


def test_round_trip_into_a_dataset_that_flashinfer_bench_validates_ranks_and_applies(tmp_path, monkeypatch):
    task_dir, run_dir, dataset = tmp_path / "task", tmp_path / "run", tmp_path / "dataset"
    result = runner.invoke(app, ["import", "flashinfer", str(FIB / "rmsnorm_h128.json"), "--workloads",
                                 str(FIB / "rmsnorm_h128.workloads.jsonl"), "--out", str(task_dir),
                                 "--baseline", str(FIB / "rmsnorm_h128.kernel.py")])
    assert result.exit_code == 0, result.output
    task = load_task(task_dir)
    assert (task.spec.atol, task.spec.rtol) == (1e-2, 1e-2)  # FlashInfer-Bench's tolerances
    assert [w.params["fib_row"] for w in task.spec.interpreter_workloads] == [0, 1]  # real workloads, the smallest
    result = runner.invoke(app, ["optimize", str(task_dir), "-B", "1", "-N", "1", "-K", "1", "-T", "1", "--device",
                                 "cpu", "--no-memory", "--run-dir", str(run_dir)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["export", "flashinfer", str(run_dir), "--out", str(dataset)])
    assert result.exit_code == 0, result.output

    trace_set = fib.TraceSet.from_path(str(dataset))  # the dataset as flashinfer-bench loads it
    (solution,) = trace_set.solutions["rmsnorm_h128"]
    assert solution.get_entry_source().content == (run_dir / "best_kernel.py").read_text()
    assert solution.spec.language.value == "triton" and not solution.spec.destination_passing_style
    lines = (FIB / "rmsnorm_h128.workloads.jsonl").read_text().splitlines()
    workloads = [json.loads(line)["workload"] for line in lines]
    assert [t.workload.model_dump() for t in trace_set.workloads["rmsnorm_h128"]] == workloads
    traces = trace_set.traces["rmsnorm_h128"]
    # One Trace per real workload the interpreter measured, each naming the Definition's own workload.
    assert sorted(t.workload.uuid for t in traces) == sorted(w["uuid"] for w in workloads[:2])
    for t in traces:
        assert t.is_successful() and t.solution == solution.name
        assert "interpreter" in t.evaluation.environment.hardware and "not GPU performance" in t.evaluation.log
        perf = t.evaluation.performance
        assert perf.latency_ms > 0 and perf.reference_latency_ms > 0  # the Definition's reference, timed now
        assert perf.speedup_factor == pytest.approx(perf.reference_latency_ms / perf.latency_ms)
        assert "Definition's reference" in t.evaluation.log

    report = _fib_validate(monkeypatch)(dataset)
    assert not _errors(report), _errors(report)
    assert report.definitions["rmsnorm_h128"].solution.status == "ok"
    assert report.definitions["rmsnorm_h128"].layout.status == "ok"
    assert f"- Solution: {solution.name}" in _report_best(dataset)
    assert trace_set.get_best_trace("rmsnorm_h128").solution == solution.name

    env = {**os.environ, "TRITON_INTERPRET": "1", "FIB_CACHE_PATH": str(tmp_path / "fib-cache")}
    proc = subprocess.run([sys.executable, "-c", APPLY, str(dataset)], capture_output=True, text=True, env=env,
                          timeout=120)
    applied = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("applied ")]
    assert applied and float(applied[0]) < 1e-5, proc.stdout + proc.stderr[-2000:]  # our kernel, not the fallback
    assert "batch 3: fallback" in proc.stdout  # no Trace for batch 3: apply() falls back

    # Exporting again replaces the solution's Traces; it adds no second Definition or workload.
    assert runner.invoke(app, ["export", "flashinfer", str(run_dir), "--out", str(dataset)]).exit_code == 0
    again = fib.TraceSet.from_path(str(dataset))
    assert len(again.traces["rmsnorm_h128"]) == len(traces) and len(again.workloads["rmsnorm_h128"]) == 3


def _mla_dataset(root, *, shared_blob=False):
    """A dataset in FlashInfer-Bench's layout with an MLA decode Definition whose index tensors are
    safetensors blobs at dataset-relative paths, as flashinfer-trace keeps them."""
    from safetensors.torch import save_file

    (root / "definitions" / "mla_paged").mkdir(parents=True)
    shutil.copy(FIB / f"{MLA}.json", root / "definitions" / "mla_paged")
    gen = torch.Generator().manual_seed(0)
    rows = []
    for uuid, batch, pages in (("0b7e1d2a-aaaa", 48, 1600), ("0b7e1d2a-bbbb", 64, 2000)):
        lengths = torch.randint(5, 30, (batch,), generator=gen)
        indptr = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)]).to(torch.int32)
        indices = torch.randperm(pages, generator=gen)[: int(indptr[-1])].to(torch.int32)
        blob = f"blob/workloads/mla_paged/{MLA}/{MLA}_{uuid}.safetensors"
        (root / blob).parent.mkdir(parents=True, exist_ok=True)
        save_file({"kv_indptr": indptr, "kv_indices": indices}, str(root / blob))
        inputs = {n: {"type": "random"} for n in ("q_nope", "q_pe", "ckv_cache", "kpe_cache")}
        inputs |= {n: {"type": "safetensors", "path": blob, "tensor_key": n} for n in ("kv_indptr", "kv_indices")}
        inputs["sm_scale"] = {"type": "scalar", "value": 192 ** -0.5}
        axes = {"batch_size": batch, "num_pages": pages, "len_indptr": batch + 1, "num_kv_indices": int(indptr[-1])}
        rows.append({"uuid": uuid, "axes": axes, "inputs": inputs})
    if shared_blob:  # a third workload reading the first one's blob again
        rows.append({**rows[0], "uuid": "0b7e1d2a-cccc"})
    (root / "workloads" / "mla_paged").mkdir(parents=True)
    (root / "workloads" / "mla_paged" / f"{MLA}.jsonl").write_text("".join(
        json.dumps({"definition": MLA, "solution": None, "workload": r, "evaluation": None}) + "\n" for r in rows))
    return root / "definitions" / "mla_paged" / f"{MLA}.json", root / "workloads" / "mla_paged" / f"{MLA}.jsonl"


def test_dict_outputs_are_judged_in_the_definitions_order(tmp_path):
    from accelopt.evals.interop.flashinfer import import_definition

    definition, _ = _mla_dataset(tmp_path / "dataset")
    task = load_task(import_definition(definition, None, tmp_path / "task"))  # workloads found in the dataset
    # The Definition's reference returns {"output": ..., "lse": ...}: run as a kernel, it is correct.
    assert evaluate(task, reference_source(task), device="cpu", trusted=True, rounds=1).status == "verified"
    swapped = reference_source(task).replace("return _reference.reference(*inputs)",
                                             "output, lse = _reference.reference(*inputs)\n    return lse, output")
    result = evaluate(task, swapped, device="cpu", trusted=True, rounds=1)
    assert result.status == "shape_mismatch" and "output 0: shape (2, 16), expected (2, 16, 512)" in result.error

    # The CPU workload is cut from the smallest real one: its first two requests, the pages they read.
    (entry,) = task.spec.interpreter_workloads
    ref = _module(tmp_path / "task" / "reference.py", "mla_reference")
    names = json.loads(definition.read_text())["inputs"]
    inputs = dict(zip(names, ref.make_inputs(entry.params, 0, "cpu", "float32")))
    indptr, indices = inputs["kv_indptr"], inputs["kv_indices"]
    assert entry.params["batch_size"] == 2 and len(indptr) == 3 and int(indptr[-1]) == len(indices)
    assert sorted(indices.tolist()) == list(range(entry.params["num_pages"]))  # pool compacted to the pages read
    assert inputs["ckv_cache"].shape == (entry.params["num_pages"], 1, 512) and inputs["q_nope"].dtype == torch.float32
    assert "gpu_only" not in task.spec.origin

    # Bytes moved count the pages the indices name (distinct here), not the whole pool.
    real = task.spec.workloads[0].params
    assert real["num_kv_indices"] < real["num_pages"]
    q_and_out = 48 * 16 * (512 + 64) * 2 + 48 * 16 * (512 * 2 + 4)
    index_and_scale = 4 * (real["len_indptr"] + real["num_kv_indices"]) + 4
    assert ref.bytes_moved(real, "bfloat16") == real["num_kv_indices"] * (512 + 64) * 2 + q_and_out + index_and_scale


def test_safetensors_paths_are_relative_to_the_dataset_root_and_stay_inside_it(tmp_path):
    from accelopt.evals.interop.flashinfer import import_definition

    definition, workloads = _mla_dataset(tmp_path / "dataset", shared_blob=True)
    task_dir = import_definition(definition, workloads, tmp_path / "task")  # blob/... from the root, not workloads/
    blobs = sorted((task_dir / "data" / "blob").rglob("*.safetensors"))
    assert len(blobs) == 2  # three workloads, six inputs, two distinct blobs: each stored once
    for blob in blobs:
        source = tmp_path / "dataset" / blob.relative_to(task_dir / "data")
        assert blob.read_bytes() == source.read_bytes()
        assert blob.stat().st_ino == source.stat().st_ino  # a hard link, not a copy, on one filesystem

    rows = [json.loads(line) for line in workloads.read_text().splitlines()]
    secret = tmp_path / "secret.safetensors"
    shutil.copy(tmp_path / "dataset" / rows[0]["workload"]["inputs"]["kv_indptr"]["path"], secret)
    (tmp_path / "dataset" / "blob" / "escape.safetensors").symlink_to(secret)
    for path in ("/etc/passwd", "../secret.safetensors", "blob/escape.safetensors"):
        row = json.loads(json.dumps(rows[0]))
        row["workload"]["inputs"]["kv_indptr"]["path"] = path
        workloads.write_text(json.dumps(row) + "\n")
        with pytest.raises(TaskError, match="refused") as info:
            import_definition(definition, workloads, tmp_path / "refused")
        assert "\n" not in str(info.value) and path in str(info.value)
        assert not (tmp_path / "refused").exists()  # refused before anything is written


FP8_KERNEL = '''import torch
import triton
import triton.language as tl


@triton.jit
def _dequant(x_ptr, s_ptr, o_ptr, H: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, H)
    x = tl.load(x_ptr + row * H + cols).to(tl.float32)
    tl.store(o_ptr + row * H + cols, (x * tl.load(s_ptr + row)).to(o_ptr.dtype.element_ty))


def run(x, scale):
    out = torch.empty(x.shape, dtype=torch.bfloat16 if x.is_cuda else torch.float32, device=x.device)
    _dequant[(x.shape[0],)](x, scale, out, H=x.shape[1])
    return out
'''


def test_fp8_and_fp4_inputs_are_made_as_flashinfer_bench_makes_them(tmp_path):
    from accelopt.evals.interop.flashinfer import import_definition

    task = load_task(import_definition(FIB / "fp8_dequant_rows_h256.json",
                                       FIB / "fp8_dequant_rows_h256.workloads.jsonl", tmp_path / "fp8"))
    assert task.spec.dtype == "bfloat16"  # the output's dtype, not the first float input's (float32 scales)
    ref = _module(tmp_path / "fp8" / "reference.py", "fp8_reference")
    x, scale = ref.make_inputs(task.spec.workloads[0].params, 0, "cpu", "float32")
    assert x.dtype == torch.float8_e4m3fn and x.shape == (5, 256) and scale.dtype == torch.float32
    assert float(x.float().abs().max()) <= 2.0 and float(x.float().abs().max()) > 1.0  # randn clamped to [-2, 2]
    assert torch.equal(x.float(), ref.make_inputs(task.spec.workloads[0].params, 0, "cpu", "float32")[0].float())
    out = ref.reference(x, scale)
    assert out.dtype == torch.float32 and out.shape == (5, 256)  # bf16 runs as float32 on the interpreter
    assert evaluate(task, FP8_KERNEL, device="cpu", rounds=1).status == "verified"  # fp8 through the judge

    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip("this torch has no float4_e2m1fn_x2")
    spec = json.loads((FIB / "fp8_dequant_rows_h256.json").read_text())
    spec["inputs"]["x"]["dtype"] = "float4_e2m1"
    spec["reference"] = "def run(x, scale):\n    return scale\n"
    spec["outputs"] = {"out": {"shape": ["num_tokens"], "dtype": "float32"}}
    (tmp_path / "fp4.json").write_text(json.dumps(spec))
    import_definition(tmp_path / "fp4.json", FIB / "fp8_dequant_rows_h256.workloads.jsonl", tmp_path / "fp4")
    packed = _module(tmp_path / "fp4" / "reference.py", "fp4_reference").make_inputs(
        {"num_tokens": 5, "fib_row": 0}, 0, "cpu", "float32")[0]
    assert packed.dtype == torch.float4_e2m1fn_x2 and packed.shape == (5, 256)  # two e2m1 values per element
    codes = torch.stack([packed.view(torch.uint8) & 15, packed.view(torch.uint8) >> 4])
    assert set((codes & 7).unique().tolist()) <= {0, 1, 2, 3, 4}  # magnitudes 0..2: the clamped grid


@pytest.mark.parametrize("name, op_type, evaluator", [
    ("top_k_sampling_from_probs_v129280", "sampling", "SamplingEvaluator"),
    ("dsa_topk_indexer_fp8_h64_d128_topk2048_ps64", "dsa_paged", "DsaTopkIndexerEvaluator"),
])
def test_definitions_flashinfer_bench_judges_otherwise_are_refused(tmp_path, name, op_type, evaluator):
    spec = {**json.loads((FIB / "rmsnorm_h128.json").read_text()), "name": name, "op_type": op_type}
    (tmp_path / "d.json").write_text(json.dumps(spec))
    result = runner.invoke(app, ["import", "flashinfer", str(tmp_path / "d.json"), "--workloads",
                                 str(FIB / "rmsnorm_h128.workloads.jsonl"), "--out", str(tmp_path / "t")])
    assert result.exit_code == 2 and evaluator in result.output
    assert len(result.output.strip().splitlines()) <= 3 and not (tmp_path / "t" / "task.json").exists()


@pytest.mark.parametrize("name, evaluator", [
    ("moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048", "LowBitEvaluator"),
    ("moe_bf16_topk8_e32_h4096_i1024", "DefaultEvaluator (op_type moe)"),
])
def test_moe_definitions_import_with_flashinfer_benchs_matched_ratio(tmp_path, name, evaluator):
    definition, workloads = _as_moe(tmp_path, name)
    result = runner.invoke(app, ["import", "flashinfer", str(definition), "--workloads", str(workloads),
                                 "--out", str(tmp_path / "t")])
    assert result.exit_code == 0, result.output
    task = load_task(tmp_path / "t")
    assert task.spec.required_matched_ratio == 0.95 and task.spec.origin["evaluator"] == evaluator


def _as_moe(tmp_path, name):
    """The rmsnorm fixture renamed as a MoE Definition (op_type moe), with its workloads."""
    spec = {**json.loads((FIB / "rmsnorm_h128.json").read_text()), "name": name, "op_type": "moe"}
    (tmp_path / "d.json").write_text(json.dumps(spec))
    rows = [{**json.loads(line), "definition": name}
            for line in (FIB / "rmsnorm_h128.workloads.jsonl").read_text().splitlines()]
    (tmp_path / "w.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path / "d.json", tmp_path / "w.jsonl"


def _off_by(columns: int) -> str:
    """The fixture's rmsnorm kernel, 0.5 off in the first `columns` of 128 columns of every row."""
    source = (FIB / "rmsnorm_h128.kernel.py").read_text()
    return source.replace("(x * rstd * w).to(", f"(x * rstd * w + tl.where(cols < {columns}, 0.5, 0.0)).to(")


@pytest.mark.slow
def test_moe_is_judged_by_its_matched_ratio(tmp_path):
    """FlashInfer-Bench passes a MoE output when 95% of its elements are within atol/rtol: 4 of 128
    elements off (96.9% matched) passes, 8 of 128 (93.75%) does not."""
    from accelopt.evals.interop.flashinfer import import_definition

    task = load_task(import_definition(*_as_moe(tmp_path, "moe_bf16_h128"), tmp_path / "t"))
    assert evaluate(task, _off_by(4), device="cpu", rounds=1).status == "verified"
    result = evaluate(task, _off_by(8), device="cpu", rounds=1)
    assert result.status == "wrong_output" and "93.75% matched where 95.00% is required" in result.error


def test_a_real_definition_too_big_for_the_interpreter_is_marked_gpu_only(tmp_path):
    # gemm_n4096_k4096 and its workloads, verbatim from flashinfer-bench's examples/ffi dataset
    result = runner.invoke(app, ["import", "flashinfer", str(FIB / "gemm_n4096_k4096.json"), "--workloads",
                                 str(FIB / "gemm_n4096_k4096.workloads.jsonl"), "--out", str(tmp_path / "gemm")])
    assert result.exit_code == 0, result.output
    task = load_task(tmp_path / "gemm")
    assert len(task.spec.workloads) == 43 and task.spec.dtype == "float16" and task.spec.flops_kind == "tensor"
    reason = task.spec.origin["gpu_only"]
    assert "16,7" in reason and "GPU only" in result.output and task.spec.gpu_only == reason
    with pytest.raises(TaskError) as info:
        task.spec.workloads_for("cpu")
    assert str(info.value) == f"gemm_n4096_k4096 runs on a GPU only: {reason}"
    ref = _module(tmp_path / "gemm" / "reference.py", "gemm_reference")
    with pytest.raises(RuntimeError, match="runs on a GPU only"):
        ref.make_inputs(task.spec.interpreter_workloads[0].params, 0, "cpu", "float32")
    assert ref.flops(task.spec.workloads[0].params, "float16") == 2 * 256 * 4096 * 4096

    # Every input random and only the variable axes large: the CPU workload clamps them to 4.
    big = json.loads((FIB / "rmsnorm_h128.workloads.jsonl").read_text().splitlines()[0])
    big["workload"]["axes"]["batch_size"] = 1 << 16
    (tmp_path / "big.jsonl").write_text(json.dumps(big) + "\n")
    from accelopt.evals.interop.flashinfer import import_definition

    task = load_task(import_definition(FIB / "rmsnorm_h128.json", tmp_path / "big.jsonl", tmp_path / "rms"))
    (entry,) = task.spec.interpreter_workloads
    assert entry.params["batch_size"] == 4 and entry.params["fib_row"] == 1 and "gpu_only" not in task.spec.origin


def _fake_run(tmp_path, task, best: dict, best_source: str):
    """A run directory as the graph writes it, around the given best candidate."""
    run_dir = tmp_path / "run"
    baseline = {"id": "baseline", "iteration": 0, "kind": "reference", "source": reference_source(task),
                "status": "verified", "device": "cpu", "device_name": "cpu (Triton interpreter)",
                "timer": "interpreter_wall", "workloads": {w.name: {"median_us": 2000.0}
                                                           for w in task.spec.interpreter_workloads}}
    candidates = {"baseline": baseline, best["id"]: {**best, "source": best_source}}
    for c in candidates.values():
        write_candidate(str(run_dir), c)
    state = {"candidates": candidates, "beam": [best["id"]], "baseline_id": "baseline", "task_dir": task.root,
             "iteration": 1}
    write_summary(str(run_dir), run_summary(state), best_source)
    return run_dir


def test_export_refuses_a_reference_and_times_against_the_definitions_reference(tmp_path):
    from accelopt.evals.interop.flashinfer import import_definition

    task = load_task(import_definition(FIB / "rmsnorm_h128.json", FIB / "rmsnorm_h128.workloads.jsonl",
                                       tmp_path / "task"))
    (tmp_path / "task" / "baseline.py").unlink(missing_ok=True)
    reference = {"id": "baseline", "kind": "reference", "status": "verified"}
    run_dir = _fake_run(tmp_path, task, reference, reference_source(task))
    result = runner.invoke(app, ["export", "flashinfer", str(run_dir), "--out", str(tmp_path / "ds")])
    assert result.exit_code == 2 and "still the task's PyTorch reference" in result.output
    assert not (tmp_path / "ds" / "solutions").exists()

    # A kernel found from scratch: its Traces carry the reference's time from the same interleaved rounds.
    names = [w.name for w in task.spec.interpreter_workloads]
    kernel = {"id": "i1.m0.p0.k0", "status": "verified", "device": "cpu", "device_name": "cpu (Triton interpreter)",
              "timer": "interpreter_wall", "speedup": 2.0, "max_abs_err": 0.0, "max_rel_err": 0.0,
              "workloads": {n: {"median_us": 1000.0} for n in names},
              "compared_us": {"baseline": {n: 3000.0 for n in names}}}
    shutil.rmtree(run_dir)
    run_dir = _fake_run(tmp_path, task, kernel, (FIB / "rmsnorm_h128.kernel.py").read_text())
    result = runner.invoke(app, ["export", "flashinfer", str(run_dir), "--out", str(tmp_path / "ds")])
    assert result.exit_code == 0, result.output
    traces = fib.TraceSet.from_path(str(tmp_path / "ds")).traces["rmsnorm_h128"]
    assert [(t.evaluation.performance.reference_latency_ms, t.evaluation.performance.speedup_factor)
            for t in traces] == [(3.0, 3.0)] * len(names)
    assert all("starting point" in t.evaluation.log for t in traces)


DICT_KERNEL = '''import torch
import triton
import triton.language as tl


@triton.jit
def _fused(x_ptr, r_ptr, w_ptr, out_ptr, res_ptr, H: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, H)
    s = tl.load(x_ptr + row * H + cols).to(tl.float32) + tl.load(r_ptr + row * H + cols).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(s * s, axis=0) / H + 1e-6)
    w = tl.load(w_ptr + cols).to(tl.float32)
    tl.store(res_ptr + row * H + cols, s.to(res_ptr.dtype.element_ty))
    tl.store(out_ptr + row * H + cols, (s * rstd * w).to(out_ptr.dtype.element_ty))


def run(hidden_states, residual, weight):
    out, res = torch.empty_like(hidden_states), torch.empty_like(hidden_states)
    _fused[(hidden_states.shape[0],)](hidden_states, residual, weight, out, res, H=hidden_states.shape[1])
    return {"residual_out": res, "output": out}
'''


def test_a_kernel_returning_a_dict_is_judged_in_the_definitions_order(tmp_path):
    (tmp_path / "kernel.py").write_text(DICT_KERNEL)  # FlashInfer-Bench solutions often return a dict
    result = runner.invoke(app, ["import", "flashinfer", str(FIB / "fused_add_rmsnorm_h256.json"), "--workloads",
                                 str(FIB / "fused_add_rmsnorm_h256.workloads.jsonl"), "--out", str(tmp_path / "t"),
                                 "--baseline", str(tmp_path / "kernel.py")])
    assert result.exit_code == 0 and "shim" in result.output, result.output
    task = load_task(tmp_path / "t")
    assert evaluate(task, task.baseline_source, device="cpu", rounds=1).status == "verified"
    raw = evaluate(task, DICT_KERNEL, device="cpu", rounds=1)  # what the judge says without the shim
    assert raw.status == "shape_mismatch" and "returned 1 outputs, expected 2" in raw.error


def test_export_of_a_paged_task_carries_its_blobs_into_a_dataset_flashinfer_bench_validates(tmp_path, monkeypatch):
    from accelopt.evals.interop.flashinfer import import_definition

    definition, _ = _mla_dataset(tmp_path / "source")
    validate = _fib_validate(monkeypatch)
    assert not _errors(validate(tmp_path / "source"))  # the workloads as flashinfer-bench reads them
    task = load_task(import_definition(definition, None, tmp_path / "task"))
    names = [w.name for w in task.spec.workloads]
    kernel = {"id": "i3.m0.p1.k0", "status": "verified", "device": "cuda", "device_name": "NVIDIA H100 80GB HBM3",
              "timer": "cuda_event", "speedup": 1.5, "max_abs_err": 3e-3, "max_rel_err": 2e-2,
              "workloads": {n: {"median_us": 50.0} for n in names},
              "compared_us": {"baseline": {n: 100.0 for n in names}}}
    run_dir = _fake_run(tmp_path, task, kernel, "import triton\n\n\ndef run(*inputs):\n    raise NotImplementedError\n")
    result = runner.invoke(app, ["export", "flashinfer", str(run_dir), "--out", str(tmp_path / "ds"), "--author", "me"])
    assert result.exit_code == 0, result.output
    assert "report best` skips these Traces" in " ".join(result.output.split())  # max rel 2e-2 > its 1e-2 filter
    errors = _errors(validate(tmp_path / "ds"))
    assert not errors, errors
    trace_set = fib.TraceSet.from_path(str(tmp_path / "ds"))
    traces = trace_set.traces[MLA]
    assert sorted(t.workload.uuid for t in traces) == ["0b7e1d2a-aaaa", "0b7e1d2a-bbbb"]
    assert all(t.evaluation.environment.hardware == "NVIDIA H100 80GB HBM3" for t in traces)
    for t in traces:  # each blob the workloads name is in the new dataset, at the same relative path
        blob = t.workload.inputs["kv_indices"].path
        assert (tmp_path / "ds" / blob).read_bytes() == (tmp_path / "source" / blob).read_bytes()
    assert trace_set.solutions[MLA][0].author == "me"


@pytest.mark.parametrize("workloads, root", [
    ("ds/workloads/mla_paged/x.jsonl", "ds"),               # the dataset layout
    ("ds/traces/workloads/gemm/x.jsonl", "ds"),             # the older one (traces/workloads/...)
    ("ds/traces/x_workloads.jsonl", "ds"),                  # `flashinfer-bench report merge` output
    ("loose/x.jsonl", "loose"),                             # a loose file: its own folder
    ("traces/a/b/c/x.jsonl", "traces/a/b/c"),               # far ancestors never count
])
def test_the_dataset_root_is_found_from_the_workloads_files_place(tmp_path, workloads, root):
    from accelopt.evals.interop.flashinfer_data import dataset_root

    assert dataset_root(tmp_path / workloads) == (tmp_path / root).resolve()
