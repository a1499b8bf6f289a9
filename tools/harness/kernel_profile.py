"""A short profile of a verified kernel, for the planner.

With ncu on the PATH: hardware counters of the kernels launched by one call on the first
workload (always `--clock-control none`: ncu's default locks clocks and changes timings).
Without ncu: the kernel list and durations from torch.profiler (CUPTI). Either way the result
is a few lines an LLM can read. Runs as its own sandboxed process, like every candidate run.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from accelopt.tools.harness import confine
from accelopt.tools.harness.pool import scrubbed_env
from accelopt.tools.task import Task

NCU_METRICS = {
    "gpu__time_duration.sum": "time",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM throughput %",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM throughput %",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "memory pipes %",
    "lts__t_sector_hit_rate.pct": "L2 hit %",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved occupancy %",
    "launch__registers_per_thread": "registers/thread",
    "launch__occupancy_limit_registers": "occupancy limit (registers, blocks/SM)",
    "launch__occupancy_limit_shared_mem": "occupancy limit (shared mem, blocks/SM)",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor pipe %",
}

_SCRIPT = """
import importlib.util, json, sys, torch
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec); sys.modules[name] = mod; spec.loader.exec_module(mod); return mod
req = json.load(open(sys.argv[1]))
ref = load(req["reference_path"], "ref"); run = getattr(load(req["source_path"], "cand"), req["entry_point"])
inputs = ref.make_inputs(req["params"], 0, "cuda", req["dtype"])
run(*inputs); torch.cuda.synchronize()  # compile outside the profiled range
if req["mode"] == "ncu":
    torch.cuda.nvtx.range_push("accelopt_profile"); run(*inputs); torch.cuda.synchronize(); torch.cuda.nvtx.range_pop()
else:
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run(*inputs); torch.cuda.synchronize()
    rows = [{"name": e.name, "us": e.time_range.elapsed_us()} for e in prof.events() if e.device_type.name == "CUDA"]
    print("@@KERNELS@@" + json.dumps(rows))
"""


def profile_kernel(task: Task, source: str, *, workload: str | None = None, timeout_s: float = 180.0,
                   metrics: list[str] | None = None) -> dict | None:
    """{'tool': 'ncu'|'torch.profiler', 'kernels': [...], 'summary': text}, or None if it failed."""
    mode = "ncu" if shutil.which("ncu") else "torch"
    workload = next((w for w in task.spec.workloads if w.name == workload), task.spec.workloads[0])
    with tempfile.TemporaryDirectory(prefix="accelopt-profile-") as tmp:
        home = Path(tmp)
        (home / "candidate.py").write_text(source)
        (home / "profile.py").write_text(_SCRIPT)
        (home / "request.json").write_text(json.dumps({
            "reference_path": str(Path(task.root) / "reference.py"), "source_path": str(home / "candidate.py"),
            "entry_point": task.spec.entry_point, "params": workload.params, "dtype": task.spec.dtype, "mode": mode}))
        cmd = [sys.executable, str(home / "profile.py"), str(home / "request.json")]
        if mode == "ncu":
            cmd = [shutil.which("ncu"), "--clock-control", "none", "--nvtx", "--nvtx-include", "accelopt_profile/",
                   "--metrics", ",".join(metrics or NCU_METRICS), "--csv", "--page", "raw", *cmd]
        try:
            proc = subprocess.run([*confine.process_prefix(tmp), *cmd], capture_output=True, text=True, cwd=tmp,
                                  env=scrubbed_env(home, "cuda", None), timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
    kernels = parse_ncu_csv(proc.stdout) if mode == "ncu" else _parse_torch(proc.stdout)
    if not kernels:
        return None
    return {"tool": "ncu" if mode == "ncu" else "torch.profiler", "workload": workload.name, "kernels": kernels,
            "summary": summarize(kernels, workload.name)}


def parse_ncu_csv(text: str) -> list[dict]:
    """Rows of `ncu --csv --page raw`: a header of metric names, a units row, one row per kernel."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    if len(lines) < 3:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header, units, data = rows[0], rows[1], rows[2:]
    kernels = []
    for row in data:
        record = dict(zip(header, row))
        kernel = {"name": record.get("Kernel Name", "?")}
        for metric in NCU_METRICS:
            if metric in record:
                kernel[metric] = _number(record[metric])
        unit = dict(zip(header, units)).get("gpu__time_duration.sum", "ns")
        if kernel.get("gpu__time_duration.sum") is not None:
            scale = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "nsecond": 1e-3, "ms": 1e3, "msecond": 1e3}.get(unit, 1e-3)
            kernel["time_us"] = kernel["gpu__time_duration.sum"] * scale
        kernels.append(kernel)
    return kernels


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def _parse_torch(text: str) -> list[dict]:
    for line in text.splitlines():
        if line.startswith("@@KERNELS@@"):
            return [{"name": r["name"], "time_us": r["us"]} for r in json.loads(line[len("@@KERNELS@@"):])]
    return []


def summarize(kernels: list[dict], workload: str) -> str:
    lines = [f"Profile of one call on workload {workload}:"]
    for k in kernels[:4]:
        parts = [f"{k['name'][:60]}: {k.get('time_us', 0):.1f} us"]
        for metric, label in NCU_METRICS.items():
            if metric != "gpu__time_duration.sum" and k.get(metric) is not None:
                parts.append(f"{label} {k[metric]:.0f}")
        lines.append("- " + ", ".join(parts))
        dram, sm = k.get("dram__throughput.avg.pct_of_peak_sustained_elapsed"), \
            k.get("sm__throughput.avg.pct_of_peak_sustained_elapsed")
        if dram is not None and sm is not None:
            lines.append("  reading: " + _reading(dram, sm))
    if len(kernels) > 4:
        lines.append(f"- ... and {len(kernels) - 4} more kernels")
    return "\n".join(lines)


def _reading(dram: float, sm: float) -> str:
    if dram >= 80:
        return "memory-bound at DRAM bandwidth: only moving fewer bytes helps"
    if dram >= 60:
        return "mostly memory-bound: more bytes in flight (wider tiles, more warps or stages) may close the gap"
    if sm >= 60:
        return "compute-bound: cheaper math, or tensor cores, helps"
    if max(dram, sm) < 40:
        return ("latency-bound: neither DRAM nor SMs are busy (too little work in flight, low occupancy, "
                "or serialization)")
    return "no unit saturated: check occupancy limits and stalls"
