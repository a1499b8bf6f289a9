"""A time past physics is refused (runner.below_copy_floor): no kernel writes its outputs faster than
the device copies the same bytes, so a time far below that floor is cheat_suspected, with the
figures. Synthetic judge replies for the bundled softmax task's GPU workloads; no GPU needed."""

import pytest

from accelopt.tools.harness.runner import FLOOR_SHARE, _result, copied_bytes, copy_floor_us
from accelopt.tools.task import load_task
from tests.conftest import TASKS

TASK = load_task(str(TASKS / "softmax"))
WORKLOADS = [w.name for w in TASK.spec.workloads]
# softmax's float32 workloads: M x N read and written, 4 bytes each way
BYTES = {w.name: 8.0 * w.params["M"] * w.params["N"] for w in TASK.spec.workloads}
COPY_US = {name: 25.0 for name in WORKLOADS}   # about 2.7 TB/s over 67 MB: an H100's copy
KERNEL_COPY_US = {name: 24.0 for name in WORKLOADS}


def timing(us: float, kernel_us: float | None = None) -> dict:
    return {"median_us": us, "iqr_us": 0.5, "samples": 30, "round_medians_us": [us] * 3,
            "round_kernel_us": [kernel_us or us] * 3, "kernel_us": kernel_us or us, "metric": "gpu_span"}


def raw(times: dict[str, dict], output_bytes: dict | None = None) -> dict:
    return {"status": "verified", "device_name": "NVIDIA H100 80GB HBM3", "timings": times,
            "compare": {"baseline": {n: timing(40.0) for n in WORKLOADS}},
            "copy": {n: timing(COPY_US[n], KERNEL_COPY_US[n]) for n in WORKLOADS},
            "costs": {n: {"flops": 5.0 * BYTES[n] / 8, "bytes_moved": BYTES[n]} for n in WORKLOADS},
            "output_bytes": output_bytes if output_bytes is not None else {n: BYTES[n] / 2 for n in WORKLOADS},
            "rounds": {"ran": 3, "stopped": "decided", "noise_floor": 0.02}}


def test_the_floor_is_the_outputs_at_the_copys_bandwidth():
    # 64 MB copied (32 read, 32 written) in 25 µs; 32 MB of outputs: half the copy's time
    assert copy_floor_us(32e6, 64e6, 25.0) == pytest.approx(12.5)
    # outputs beyond what the copy moved: held to the copy's own time, never extrapolated
    assert copy_floor_us(200e6, 64e6, 25.0) == pytest.approx(25.0)
    assert copy_floor_us(1e6, 0, 25.0) == 0.0 and copy_floor_us(1e6, 64e6, 0.0) == 0.0
    assert copied_bytes(1001.0) == 1000


def test_an_honest_kernel_near_copy_speed_is_verified_with_its_floor():
    # read the input, write the output, at 95% of the copy's speed: twice the floor
    r = _result(TASK, raw({n: timing(COPY_US[n] / 0.95) for n in WORKLOADS}), "cuda", "float32")
    assert r.status == "verified", r.error
    t = r.workloads[WORKLOADS[0]]
    assert t.output_bytes == BYTES[WORKLOADS[0]] / 2 and t.floor_us == pytest.approx(COPY_US[WORKLOADS[0]] / 2, rel=1e-6)


def test_a_kernel_that_only_writes_near_its_floor_is_verified():
    # every byte it moves is output (a fill, an expansion): 0.82x the floor is what a plain fill
    # measured on an H100, on the span and kernel-only alike
    out = {n: BYTES[n] for n in WORKLOADS}
    times = {n: timing(0.82 * COPY_US[n], 0.82 * KERNEL_COPY_US[n]) for n in WORKLOADS}
    r = _result(TASK, raw(times, out), "cuda", "float32")
    assert r.status == "verified", r.error


def test_a_time_far_below_the_floor_is_cheat_suspected_with_the_figures():
    name = WORKLOADS[1]
    times = {n: timing(COPY_US[n]) for n in WORKLOADS}
    times[name] = timing(2.0)  # 32 MB of outputs "written" in 2 µs: 16 TB/s
    r = _result(TASK, raw(times), "cuda", "float32")
    assert r.status == "cheat_suspected"
    assert f"{name}: span 2.00 µs against a floor of 12.50 µs" in r.error
    assert "GB/s" in r.error and f"below {FLOOR_SHARE:g}x the copy floor" in r.error
    assert WORKLOADS[0] + ":" not in r.error


def test_kernel_only_time_below_its_floor_rejects_too():
    # a span padded by host work around kernels that cannot have written the outputs
    name = WORKLOADS[2]
    times = {n: timing(COPY_US[n]) for n in WORKLOADS}
    times[name] = timing(30.0, kernel_us=1.0)
    r = _result(TASK, raw(times), "cuda", "float32")
    assert r.status == "cheat_suspected" and f"{name}: kernel-only 1.00 µs" in r.error, r.error


def test_no_floor_without_a_yardstick_or_output_bytes():
    fast = {n: timing(0.01) for n in WORKLOADS}
    assert _result(TASK, {**raw(fast), "copy": {}}, "cuda", "float32").status == "verified"
    assert _result(TASK, {**raw(fast), "output_bytes": {}}, "cuda", "float32").status == "verified"
