"""One NKI evaluation in its own process: a job as JSON on stdin, an EvalResult as the last line
of stdout. Run by tools/backends/nki.py with NEURON_RT_VISIBLE_CORES pinned to one core.

Correctness on every seed of every workload (the interpreter-sized workloads on the simulator,
the real ones on hardware), by relative L2 against the NumPy reference; then, on hardware
only, timing rounds in which the candidate and its comparators take turns under nki.benchmark.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from accelopt.tools.backends.nki import nki_api, parse_profile_summary, profile_text, timing_from_latencies
from accelopt.tools.roofline import trainium_percent_of_peak
from accelopt.tools.task import load_task


def load_module(name: str, source: str):
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None  # a .py path has both
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def relative_l2(actual: np.ndarray, expected: np.ndarray) -> float:
    diff = np.linalg.norm((actual.astype(np.float64) - expected.astype(np.float64)).ravel())
    norm = np.linalg.norm(expected.astype(np.float64).ravel())
    return float(diff / norm) if norm > 0 else float(diff)


def simulate(module, api: str, kernel, inputs: list):
    if api == "nki":
        return module.simulate(kernel)(*inputs)
    return module.simulate_kernel(kernel, *inputs)


def benchmark_us(module, kernel, inputs: list, warmup: int, iters: int) -> list[float]:
    """Latency percentiles (us) of one nki.benchmark run: p1..p99 stand in for the samples."""
    bench = module.benchmark(warmup=warmup, iters=iters)(kernel)
    bench(*inputs)
    latency = bench.benchmark_result.nc_latency
    return [float(latency.get_latency_percentile(p)) for p in (1, 10, 25, 50, 75, 90, 99)]


def neuron_profile(module, kernel, inputs: list) -> str | None:
    """The planner's profile: nki.benchmark saves the NEFF and its trace, and `neuron-profile view
    --output-format summary-json` summarizes them. None when the tool is missing or fails."""
    if shutil.which("neuron-profile") is None:
        return None
    folder = Path(tempfile.mkdtemp())
    neff, ntff, summary = folder / "kernel.neff", folder / "kernel.ntff", folder / "summary.json"
    try:
        bench = module.benchmark(warmup=1, iters=1, save_neff_name=str(neff), save_trace_name=str(ntff))(kernel)
        bench(*inputs)
        subprocess.run(["neuron-profile", "view", "-n", str(neff), "-s", str(ntff), "--output-format", "summary-json",
                        "--output-file", str(summary)], check=True, capture_output=True, timeout=600)
        return profile_text(parse_profile_summary(json.loads(summary.read_text())))
    except Exception:  # noqa: BLE001 - a profile is advice for the planner, never a reason to fail
        return None


def check(task, reference, module, api, kernel, workloads, dtype) -> tuple[str, str | None, float]:
    """(status, error, worst relative L2) over every workload and seed."""
    rtol = task.spec.rtol if task.spec.rtol is not None else 2e-5
    worst = 0.0
    for workload in workloads:
        for seed in range(task.spec.seeds):
            inputs = reference.make_inputs(workload.params, seed, "cpu", dtype)
            expected = np.asarray(reference.reference(*[np.copy(x) for x in inputs]))
            originals = [np.copy(x) for x in inputs]
            try:
                actual = np.asarray(simulate(module, api, kernel, inputs))
            except Exception as exc:  # noqa: BLE001 - the kernel's own error, reported to the fixer
                status = "compile_error" if "compil" in type(exc).__name__.lower() else "runtime_error"
                return status, f"{workload.name} seed {seed}: {type(exc).__name__}: {str(exc)[:1500]}", worst
            where = f"{workload.name} seed {seed}"
            if actual.shape != expected.shape:
                return "shape_mismatch", f"{where}: output shape {actual.shape}, expected {expected.shape}", worst
            if any(not np.array_equal(a, b) for a, b in zip(inputs, originals)):
                return "input_mutated", f"{where}: the kernel wrote to an input", worst
            if not np.all(np.isfinite(actual)) and np.all(np.isfinite(expected)):
                return "nan", f"{where}: NaN/Inf where the reference is finite", worst
            error = relative_l2(actual, expected)
            worst = max(worst, error)
            if error > rtol:
                return "wrong_output", f"{where}: relative L2 error {error:.3g} above {rtol:g}", worst
    return "verified", None, worst


def main() -> None:
    job = json.loads(sys.stdin.read())
    task = load_task(job["task_dir"])
    module, api = nki_api()
    hardware = job["hardware"]
    device = "trainium" if hardware else "nki_simulator"
    reference = load_module("_reference", task.reference_source)
    kernels = {"candidate": job["source"], **job["compare"]}
    try:
        loaded = {name: getattr(load_module(f"_kernel_{name}", src), task.spec.entry_point)
                  for name, src in kernels.items()}
    except Exception as exc:  # noqa: BLE001
        print(json.dumps({"status": "compile_error", "device": device,
                          "error": f"{type(exc).__name__}: {str(exc)[:1500]}"}))
        return
    workloads = task.spec.workloads if hardware else task.spec.interpreter_workloads
    status, error, worst = check(task, reference, module, api, loaded["candidate"], workloads, task.spec.dtype)
    result: dict[str, Any] = {"status": status, "error": error, "device": device, "max_rel_err": worst, "timer": None}
    if status == "verified" and hardware:
        timings: dict[str, dict] = {name: {} for name in loaded}
        for workload in workloads:
            inputs = reference.make_inputs(workload.params, 0, "cpu", task.spec.dtype)
            samples: dict[str, list[float]] = {name: [] for name in loaded}
            rounds: dict[str, list[float]] = {name: [] for name in loaded}
            for _ in range(job["rounds"]):  # interleaved: every kernel once per round
                for name, kernel in loaded.items():
                    lat = benchmark_us(module, kernel, inputs, job["warmup"], job["iters"])
                    samples[name] += lat
                    rounds[name].append(statistics.median(lat))
            for name in loaded:
                timing = timing_from_latencies(samples[name], rounds[name])
                cost = {"vector_flops": reference.flops(workload.params, task.spec.dtype)
                        - reference.matmul_flops(workload.params, task.spec.dtype),
                        "matmul_flops": reference.matmul_flops(workload.params, task.spec.dtype),
                        "bytes_moved": reference.bytes_moved(workload.params, task.spec.dtype)}
                peak = trainium_percent_of_peak(**cost, measured_s=timing.median_us * 1e-6,
                                                chip=job.get("chip", "trn1"))
                timing.pct_peak, timing.bound = peak["pct_peak"], peak["bound"]
                timing.flops, timing.bytes = cost["vector_flops"] + cost["matmul_flops"], cost["bytes_moved"]
                timings[name][workload.name] = timing.model_dump()
        result.update(timer="nki_benchmark", workloads=timings.pop("candidate"), compare=timings,
                      profile=neuron_profile(module, loaded["candidate"],
                                             reference.make_inputs(workloads[0].params, 0, "cpu", task.spec.dtype)))
    print(json.dumps(result))


if __name__ == "__main__":
    try:
        main()
    except Exception:  # noqa: BLE001 - the parent turns a missing result line into `crashed`
        traceback.print_exc()
        sys.exit(1)
