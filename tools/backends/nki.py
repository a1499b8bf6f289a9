"""The NKI backend (AWS Trainium), behind the same protocol as Triton.

- Correctness: the NKI simulator (`nki.simulate(kernel)(*inputs)`, or the older
  `neuronxcc.nki.simulate_kernel(kernel, *inputs)`) where the package is installed, the device
  itself on a Trainium host; AccelOpt's relative-L2 criterion (task `rtol`, default 2e-5) over
  every seed of every workload.
- Timing, on Trainium only: `nki.benchmark(warmup=, iters=)`, median and IQR of its latency
  percentiles, in rounds interleaved with the comparators (parent, baseline) as on GPUs.
- Profile: `neuron-profile view --output-format summary-json`, parsed by `parse_profile_summary`.
- One NeuronCore per evaluation (`NEURON_RT_VISIBLE_CORES`), so a trn1.32xlarge runs 32 at once.
Every evaluation runs in its own subprocess (tools/backends/nki_worker.py): a kernel that hangs
or kills its process becomes a timeout or a crash, never a dead run.

None of this has run on real Trainium hardware or the real simulator here: neither can be
installed on these machines. Its parsing and arithmetic are tested on fixtures and a stand-in
simulator (tests/fixtures/fake_nki), which the tests say they are.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import time
from pathlib import Path

from accelopt.tools import settings
from accelopt.tools.backends.protocol import Availability
from accelopt.tools.harness.result import EvalResult, WorkloadTiming, compare_rounds
from accelopt.tools.roofline import TRAINIUM_PEAKS
from accelopt.tools.task import Task

INSTALL_HINT = ("install the Neuron SDK's `nki` and `neuronx-cc` from AWS's Neuron pip repository (PyPI only has "
                "placeholders): pip install --extra-index-url https://pip.repos.neuron.amazonaws.com nki neuronx-cc "
                "(see README, Trainium)")


# Host-side compute in a kernel module would pass the simulator's check without any NKI at all.
_HOST_COMPUTE = re.compile(r"^\s*(import|from)\s+(numpy|torch|jax|scipy)\b|_reference\b", re.M)


class NKIUnavailable(RuntimeError):
    """No usable NKI here; the message says what to install."""


def nki_api() -> tuple[object, str] | tuple[None, None]:
    """(module, "nki") for the current `nki` package, (module, "neuronxcc") for the older
    neuronxcc.nki, or (None, None). PyPI's placeholder packages import but have no simulator."""
    try:
        import nki

        if hasattr(nki, "simulate"):
            return nki, "nki"
    except ImportError:
        pass
    try:
        import neuronxcc.nki as legacy

        if hasattr(legacy, "simulate_kernel"):
            return legacy, "neuronxcc"
    except ImportError:
        pass
    return None, None


def neuron_devices() -> list[Path]:
    return sorted(Path("/dev").glob("neuron[0-9]*"))


class NKIBackend:
    name = "nki"

    def availability(self) -> Availability:
        module, api = nki_api()
        if module is None:
            return Availability(False, f"NKI unavailable: {INSTALL_HINT}")
        devices = neuron_devices()
        where = (f"{len(devices)} Neuron device(s): simulator for correctness, nki.benchmark for timing" if devices
                 else "no Neuron device: simulator only (correctness, no timing)")
        return Availability(True, f"{api} {getattr(module, '__version__', '')}, {where}".replace("  ", " "),
                            can_time=bool(devices))

    def refuse(self, task: Task, device: str) -> str | None:
        refusal = self.availability().refusal()
        if refusal is None and device == "cpu":
            return ("NKI kernels are timed on Trainium only: --device cpu would check correctness and time nothing; "
                    "use --device auto on a trn1/trn2 host")
        if refusal is None and task.baseline_source is None:
            return (f"NKI task {task.name} has no baseline.py: its NumPy reference cannot be timed on a NeuronCore, "
                    "so there is nothing to measure speedups against; add an NKI baseline kernel (`def "
                    f"{task.spec.entry_point}`) to the task directory")
        return refusal

    def evaluate(self, task: Task, source: str, *, device: str | None, timeout_s: float,
                 compare: dict[str, str], trusted: bool = False) -> EvalResult:
        if not self.availability().usable:
            raise NKIUnavailable(f"NKI unavailable: {INSTALL_HINT}")
        if not trusted and _HOST_COMPUTE.search(source):
            return EvalResult(status="cheat_suspected", device="nki", error=(
                "an NKI kernel must compute on the NeuronCore: this one imports NumPy or torch, or calls the "
                "reference; use nki.language / nki.isa only"))
        hardware = bool(neuron_devices()) and device != "cpu"
        chip = settings.trainium()  # which peaks % of peak uses: trn1 or trn2
        if chip not in TRAINIUM_PEAKS:
            raise ValueError(f"{settings.TRAINIUM}={chip!r}: use one of {', '.join(TRAINIUM_PEAKS)}")
        job = {"task_dir": task.root, "source": source, "compare": compare, "hardware": hardware,
               "rounds": 5, "warmup": 5, "iters": 20, "chip": chip}
        core = _cores.acquire() if hardware else None
        try:
            return run_worker(job, timeout_s, core)
        finally:
            if core is not None:
                _cores.release(core)


def run_worker(job: dict, timeout_s: float, core: int | None) -> EvalResult:
    """One evaluation in a fresh subprocess, pinned to one NeuronCore."""
    env = dict(os.environ)
    if core is not None:
        env["NEURON_RT_VISIBLE_CORES"] = str(core)
    device = "trainium" if job["hardware"] else "nki_simulator"
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "accelopt.tools.backends.nki_worker"], input=json.dumps(job),
                              capture_output=True, text=True, timeout=timeout_s, env=env,
                              cwd=str(Path(__file__).resolve().parents[2]))
    except subprocess.TimeoutExpired:
        return EvalResult(status="timeout", device=device, error=f"no result within {timeout_s:.0f} s",
                          eval_s=time.perf_counter() - start)
    if proc.returncode < 0:
        return EvalResult(status="crashed", device=device, error=f"worker killed by signal {-proc.returncode}: "
                          f"{proc.stderr[-800:]}", eval_s=time.perf_counter() - start)
    try:
        raw = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return EvalResult(status="crashed", device=device, error=f"worker gave no result: {proc.stderr[-800:]}",
                          eval_s=time.perf_counter() - start)
    result = EvalResult.model_validate({**raw, "eval_s": time.perf_counter() - start})
    if result.ok and result.workloads and result.compare:
        result.versus = {name: compare_rounds(result.workloads, timings) for name, timings in result.compare.items()}
    return result


class _CorePool:
    """NeuronCore ids handed out one per evaluation: ACCELOPT_NEURON_CORES ("0-31" or "0,1"), else
    every core of the visible devices (two per Trn1 device, eight per Trn2)."""

    def __init__(self) -> None:
        self._free: queue.Queue[int] | None = None

    def _fill(self) -> queue.Queue[int]:
        ids = settings.neuron_cores() or list(range(max(1, 2 * len(neuron_devices()))))
        free: queue.Queue[int] = queue.Queue()
        for i in ids:
            free.put(i)
        return free

    def acquire(self) -> int:
        if self._free is None:
            self._free = self._fill()
        return self._free.get()

    def release(self, core: int) -> None:
        assert self._free is not None
        self._free.put(core)


_cores = _CorePool()


# ---------------------------------------------------------------- neuron-profile summary JSON

PROFILE_FIELDS = {
    # summary-json key -> what the planner reads
    "total_time": "latency (s)",
    "hbm_read_bytes": "HBM read bytes", "hbm_write_bytes": "HBM write bytes",
    "sbuf_read_bytes": "SBUF read bytes", "sbuf_write_bytes": "SBUF write bytes",
    "psum_read_bytes": "PSUM read bytes", "psum_write_bytes": "PSUM write bytes",
    "spill_save_bytes": "spill save bytes", "spill_reload_bytes": "spill reload bytes",
    "hardware_flops": "hardware FLOPs", "transpose_flops": "transpose FLOPs",
    "mm_arithmetic_intensity": "matmul arithmetic intensity", "peak_flops_bandwidth_ratio": "peak FLOPs/bandwidth",
    "hfu_estimated_percent": "hardware FLOPs utilisation %",
}
ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")


def parse_profile_summary(data: dict) -> dict:
    """The planner's view of a `neuron-profile view --output-format summary-json` file: the
    documented metrics, and each engine's active %. The summary nests its metrics under one key
    per profiled NEFF in some versions: the first such object is read."""
    if data and all(isinstance(v, dict) for v in data.values()) and "total_time" not in data:
        data = next(iter(data.values()))
    metrics = {k: float(data[k]) for k in PROFILE_FIELDS if isinstance(data.get(k), (int, float))}
    engines = {e: float(v) for e in ENGINES for k, v in data.items()
               if isinstance(v, (int, float)) and k in (f"{e}_active_time_percent", f"{e}_engine_active_percent")}
    return {"metrics": metrics, "engines": engines}


def profile_text(parsed: dict, task_flops: dict | None = None) -> str:
    """Short text for the planner: traffic by memory level, spills, FLOPs, intensity, busiest engine."""
    m, engines = parsed["metrics"], parsed["engines"]
    lines = []
    if "total_time" in m:
        lines.append(f"neuron-profile latency {m['total_time'] * 1e6:.1f} us")
    for level in ("hbm", "sbuf", "psum"):
        read, write = m.get(f"{level}_read_bytes"), m.get(f"{level}_write_bytes")
        if read is not None or write is not None:
            lines.append(f"{level.upper()} read {(read or 0) / 2**20:.1f} MiB, write {(write or 0) / 2**20:.1f} MiB")
    spills = (m.get("spill_save_bytes") or 0) + (m.get("spill_reload_bytes") or 0)
    if spills:
        lines.append(f"SBUF spills {spills / 2**20:.1f} MiB (save + reload): tiles do not fit")
    for key in ("hardware_flops", "transpose_flops", "mm_arithmetic_intensity", "hfu_estimated_percent"):
        if key in m:
            lines.append(f"{PROFILE_FIELDS[key]} {m[key]:.4g}")
    if engines:
        busiest = max(engines, key=engines.get)
        lines.append("engine active %: " + ", ".join(f"{e} {v:.0f}" for e, v in engines.items())
                     + f"; busiest: {busiest}")
    return "\n".join(lines)


def timing_from_latencies(latencies_us: list[float], rounds: list[float]) -> WorkloadTiming:
    """A workload timing from nki.benchmark latencies (us) and per-round medians."""
    ordered = sorted(latencies_us)
    q = lambda p: ordered[min(len(ordered) - 1, int(p * len(ordered)))]  # noqa: E731
    return WorkloadTiming(median_us=q(0.5), iqr_us=q(0.75) - q(0.25), samples=len(ordered), metric="nki_benchmark",
                          round_medians_us=rounds)
