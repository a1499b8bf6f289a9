"""A short profile of a verified kernel, for the planner and the audit.

With ncu on the PATH: hardware counters of the kernels launched by one call per workload
(always `--clock-control none`: ncu's default locks clocks and changes timings). Without ncu:
the kernel list and durations from torch.profiler (CUPTI). Either way the result is a few lines
an LLM can read. Runs as its own sandboxed process, like every candidate run: one process for
all the workloads asked for, so torch's import, the CUDA context and ncu's start are paid once
(the audit's three launches took 22 s on an H100).
"""

from __future__ import annotations

import csv
import io
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelopt.tools.harness import confine, device_lease, seeds
from accelopt.tools.harness import triton_cache as carried_cache
from accelopt.tools.harness.pool import scrubbed_env
from accelopt.tools.task import Task, Workload

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

# Every profiled call is preceded by this Triton kernel (a random suffix per run, so a candidate
# cannot launch one): ncu lists kernels in launch order, and its rows are split at each marker.
MARKER_PREFIX = "accelopt_mark"
NVTX_RANGE = "accelopt_profile"

_SCRIPT = """
import importlib.util, json, os, sys, time, torch, triton, triton.language as tl

@triton.jit
def MARKER_NAME(ptr):
    tl.store(ptr, 1.0)

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec); sys.modules[name] = mod; spec.loader.exec_module(mod); return mod
req = json.load(open(sys.argv[1]))
ref = load(req["reference_path"], "ref")
mark = torch.empty(1, device="cuda")  # the CUDA context (and ncu's start in it), no kernel launched
if req["mode"] == "ncu":
    MARKER_NAME.warmup(mark, grid=(1,))  # compiled, not launched
# Ready. Nothing of the candidate runs, and nothing runs on the GPU, until the go file appears:
# another kernel may be timed on this GPU meanwhile. A parent gone (or an hour) ends the wait.
go, parent, began = os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "go"), os.getppid(), time.monotonic()
while not os.path.exists(go):
    if os.getppid() != parent or time.monotonic() - began > 3600:
        sys.exit(3)
    time.sleep(0.005)
seed = int(open(go).read().strip() or "0")  # drawn at the go: the candidate never saw it before its import
run = getattr(load(req["source_path"], "cand"), req["entry_point"])
def inputs(w):
    return ref.make_inputs(w["params"], seed, "cuda", req["dtype"])
if req["mode"] == "ncu":
    MARKER_NAME[(1,)](mark)
# compile, autotune and warm up every workload outside the profiled range, before any profiled
# call; one workload's inputs at a time (a KernelBench input is 6 GB), made again for its call
for w in req["workloads"]:
    run(*inputs(w)); torch.cuda.synchronize()
for w in req["workloads"]:
    args = inputs(w); torch.cuda.synchronize()
    if req["mode"] == "ncu":
        torch.cuda.nvtx.range_push("NVTX_RANGE"); MARKER_NAME[(1,)](mark); run(*args); torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    else:
        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run(*args); torch.cuda.synchronize()
        rows = [{"name": e.name, "us": e.time_range.elapsed_us()} for e in prof.events() if e.device_type.name == "CUDA"]
        print("@@KERNELS@@" + json.dumps({"workload": w["name"], "rows": rows}), flush=True)
    del args
"""


@dataclass(frozen=True)
class ProfileRun:
    """One profiling process: the kernels of one call per workload, in launch order, or why not."""

    tool: str                                                          # "ncu" or "torch.profiler"
    kernels: dict[str, list[dict]] = field(default_factory=dict)       # workload name -> kernels of its call
    error: str | None = None                                           # set when a workload has no kernels
    timed_out: bool = False                                            # the process ran past its limit


def profile_kernel(task: Task, source: str, *, workload: str | None = None, timeout_s: float = 180.0,
                   metrics: list[str] | None = None, gpu: str | None = None) -> dict | None:
    """{'tool': 'ncu'|'torch.profiler', 'kernels': [...], 'summary': text} of one call on one
    workload (the first unless named), or None if it failed. It runs on `gpu` (a CUDA_VISIBLE_DEVICES
    entry; the first visible unless named) holding that GPU's device lease, as an evaluation does:
    no other process times kernels there meanwhile (None also when another held it past the wait)."""
    name = _chosen(task, [workload] if workload else [])[0].name
    gpu = gpu or device_lease.default_gpu()
    try:
        with device_lease.hold(gpu, "profile"):
            run = Profiling(task, source, [name], metrics=metrics, gpu=gpu).collect(timeout_s)
    except device_lease.DeviceBusy:
        return None
    if run.error:
        return None
    kernels = run.kernels[name]
    return {"tool": run.tool, "workload": name, "kernels": kernels, "summary": summarize(kernels, name)}


def profile_workloads(task: Task, source: str, workloads: list[str] | None = None, *, timeout_s: float = 180.0,
                      metrics: list[str] | None = None, triton_cache: str | None = None,
                      gpu: str | None = None) -> ProfileRun:
    """One call per workload (the first workload unless named), all in one fresh process under
    ncu (torch.profiler without it); `timeout_s` bounds the whole process. `triton_cache`: what
    this source's own sandbox compiled (a copy is used: compiled once, not once per process).
    `gpu`: the one it runs on (the judge's), else the first visible."""
    return Profiling(task, source, workloads, metrics=metrics, gpu=gpu).collect(timeout_s, triton_cache)


class Profiling:
    """One profiling process, started ahead of need: ncu's start, Python, torch, Triton, the CUDA
    context, the marker compiled and the task's reference loaded (about 8 of an audit's 12 s on
    an H100), then it waits. `collect` lets it go on (the candidate's import, its calls, ncu's
    report); `cancel` ends it unused. Nothing of the candidate runs and no kernel is launched before
    `collect`, so it may start while a judge times kernels on the same GPU."""

    def __init__(self, task: Task, source: str, workloads: list[str] | None = None, *,
                 metrics: list[str] | None = None, gpu: str | None = None):
        self.mode = "ncu" if shutil.which("ncu") else "torch"
        self.tool = "ncu" if self.mode == "ncu" else "torch.profiler"
        self.workloads = [w.name for w in _chosen(task, workloads or [])]
        self.marker = f"{MARKER_PREFIX}_{secrets.token_hex(6)}"
        self.tmp = tempfile.TemporaryDirectory(prefix="accelopt-profile-")
        self.home = home = Path(self.tmp.name)
        by_name = {w.name: w for w in task.spec.workloads}
        (home / "candidate.py").write_text(source)
        (home / "profile.py").write_text(_SCRIPT.replace("MARKER_NAME", self.marker).replace("NVTX_RANGE", NVTX_RANGE))
        (home / "request.json").write_text(json.dumps({
            "reference_path": str(Path(task.root) / "reference.py"), "source_path": str(home / "candidate.py"),
            "entry_point": task.spec.entry_point, "dtype": task.spec.dtype, "mode": self.mode, "marker": self.marker,
            "workloads": [{"name": n, "params": by_name[n].params} for n in self.workloads]}))
        cmd = [sys.executable, str(home / "profile.py"), str(home / "request.json")]
        if self.mode == "ncu":
            cmd = [shutil.which("ncu") or "ncu", "--clock-control", "none", "--nvtx", "--nvtx-include",
                   f"{NVTX_RANGE}/", "--metrics", ",".join(metrics or NCU_METRICS), "--csv", "--page", "raw",
                   "--print-units", "base", *cmd]  # one unit per column: the marker's µs beside long kernels
        self.proc = _launch([*confine.process_prefix(str(home), (str(task.root),)), *cmd], cwd=str(home),
                            env=scrubbed_env(home, "cuda", gpu))

    def collect(self, timeout_s: float, triton_cache: str | None = None, source: str | None = None) -> ProfileRun:
        """Let the process run the candidate; its kernels, or why not. `timeout_s` bounds this part.
        `source`: the kernel it runs, if not the one it was started with (the judge's autotune choice
        written in: runner.pinned_source, known only once the verdict is); read after the go."""
        try:
            if source is not None:
                (self.home / "candidate.py").write_text(source)
            if triton_cache and Path(triton_cache).is_dir():  # scrubbed_env's TRITON_CACHE_DIR
                carried_cache.copy(triton_cache, str(self.home / "triton-cache"))
            (self.home / "go.part").write_text(str(seeds.draw()))  # the profiled calls' inputs: a fresh seed
            (self.home / "go.part").rename(self.home / "go")
            try:
                stdout, stderr = self.proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return ProfileRun(self.tool, error=f"the profiled process ran past {timeout_s:.0f} s", timed_out=True)
        finally:
            self.cancel()
        found = (split_workloads(parse_ncu_csv(stdout), self.marker, self.workloads) if self.mode == "ncu"
                 else _complete(self.tool, _parse_torch(stdout), self.workloads))
        if found.error and self.proc.returncode:  # the process's own failure says more than the missing rows
            return ProfileRun(self.tool, found.kernels, f"the profiled process exited with {self.proc.returncode}: "
                                                        f"{_why(stdout, stderr)}")
        return found

    def cancel(self) -> None:
        """End the process (ncu and its child both: they are one session) and remove its folder."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                self.proc.kill()
            try:
                self.proc.communicate(timeout=30)
            except (subprocess.TimeoutExpired, ValueError, OSError):
                pass
        self.tmp.cleanup()


def _launch(cmd: list[str], *, cwd: str, env: dict[str, str]) -> subprocess.Popen:
    """The profiling process, in a session of its own (cancel ends ncu and its child together),
    dying with this process (PR_SET_PDEATHSIG; the script also leaves when its parent is gone),
    at the lowest CPU priority: its start (torch's import) may overlap a judge's timing, whose
    host-side figures a busy core nearby can move (H100: host work measured 0-70 µs higher)."""
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=cwd, env=env, start_new_session=True, preexec_fn=_low_priority_child)


def _low_priority_child() -> None:
    confine.die_with_parent()
    os.nice(19)


def _chosen(task: Task, names: list[str]) -> list[Workload]:
    """The task's workloads named, in that order; the first workload when none is named (or known)."""
    by_name = {w.name: w for w in task.spec.workloads}
    return [by_name[n] for n in dict.fromkeys(names) if n in by_name] or [task.spec.workloads[0]]


def split_workloads(kernels: list[dict], marker: str, workloads: list[str]) -> ProfileRun:
    """ncu's rows of one run, one profiled call per workload in `workloads`' order, each call
    preceded by the marker kernel (`marker`, its name in this run)."""
    calls = split_at_marker(kernels, marker)
    if len(calls) != len(workloads):
        return ProfileRun("ncu", error=f"ncu recorded {len(calls)} profiled calls for {len(workloads)} workloads")
    return _complete("ncu", dict(zip(workloads, calls)), workloads)


def split_at_marker(kernels: list[dict], marker: str) -> list[list[dict]]:
    """The kernels after each marker kernel, up to the next one (ncu lists them in launch order).
    Rows before the first marker were in a profiled range too: they join the first call."""
    calls: list[list[dict]] = []
    leading: list[dict] = []
    for kernel in kernels:
        if kernel["name"].startswith(marker):
            calls.append([])
        else:
            (calls[-1] if calls else leading).append(kernel)
    if calls:
        calls[0][:0] = leading
    return calls


def _complete(tool: str, kernels: dict[str, list[dict]], workloads: list[str]) -> ProfileRun:
    """Every workload's call must have launched kernels that the profiler recorded."""
    missing = [w for w in workloads if not kernels.get(w)]
    error = f"{tool} recorded no kernel of the call on {', '.join(missing)}" if missing else None
    return ProfileRun(tool, {w: kernels[w] for w in workloads if kernels.get(w)}, error)


def _why(stdout: str, stderr: str) -> str:
    """ncu's own error, else the last line the process wrote to stderr (a Python exception)."""
    lines = [line.strip() for line in f"{stdout}\n{stderr}".splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("==ERROR==")]
    stderr_lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return (errors or stderr_lines or ["no output"])[-1][:300]


def parse_ncu_csv(text: str) -> list[dict]:
    """Rows of `ncu --csv --page raw`: a header of metric names, a units row, one row per kernel.
    ncu prints its report after the program has exited, so CSV-like lines the program printed
    come before it: parsing starts at the last header."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    headers = [i for i, line in enumerate(lines) if line.startswith('"ID",')]
    lines = lines[headers[-1]:] if headers else lines
    if len(lines) < 3:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header, units, data = rows[0], rows[1], rows[2:]
    unit = dict(zip(header, units)).get("gpu__time_duration.sum", "ns")
    scale = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "nsecond": 1e-3, "ms": 1e3, "msecond": 1e3}.get(unit, 1e-3)
    kernels = []
    for row in data:
        record = dict(zip(header, row))
        kernel: dict[str, Any] = {"name": record.get("Kernel Name", "?")}
        for metric in NCU_METRICS:
            if metric in record:
                kernel[metric] = _number(record[metric])
        if kernel.get("gpu__time_duration.sum") is not None:
            kernel["time_us"] = kernel["gpu__time_duration.sum"] * scale
        kernels.append(kernel)
    return kernels


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def _parse_torch(text: str) -> dict[str, list[dict]]:
    found = {}
    for line in text.splitlines():
        if line.startswith("@@KERNELS@@"):
            entry = json.loads(line[len("@@KERNELS@@"):])
            found[entry["workload"]] = [{"name": r["name"], "time_us": r["us"]} for r in entry["rows"]]
    return found


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
