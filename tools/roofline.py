"""Device peaks and percent-of-peak: t_ideal = max(flops / peak_flops, bytes / peak_bw).

Datasheet figures are dense (no sparsity). Achievable figures were measured on this
workplace's lent machines (see BENCHMARKS.md); None where nobody has measured them.
"""

from __future__ import annotations

from typing import TypedDict

from pydantic import BaseModel


class DevicePeak(BaseModel):
    name: str
    tensor_tflops: float  # dense fp16/bf16 tensor-core rate
    vector_tflops: float  # fp32 CUDA-core rate, the roof for elementwise and reduction work
    hbm_tbps: float
    achievable_tensor_tflops: float | None = None
    achievable_hbm_tbps: float | None = None


DEVICE_PEAKS: dict[str, DevicePeak] = {
    "H100": DevicePeak(name="H100 SXM", tensor_tflops=989.0, vector_tflops=67.0, hbm_tbps=3.35,
                       achievable_tensor_tflops=798.0, achievable_hbm_tbps=3.0),
    "H200": DevicePeak(name="H200 SXM", tensor_tflops=989.0, vector_tflops=67.0, hbm_tbps=4.8,
                       achievable_tensor_tflops=788.0, achievable_hbm_tbps=4.3),
    "A100": DevicePeak(name="A100 SXM 80GB", tensor_tflops=312.0, vector_tflops=19.5, hbm_tbps=2.039),
    "L40S": DevicePeak(name="L40S", tensor_tflops=362.0, vector_tflops=91.6, hbm_tbps=0.864),
}


def lookup_peak(device_name: str) -> DevicePeak | None:
    """Match a CUDA device name such as 'NVIDIA H100 80GB HBM3' to its peak table entry."""
    upper = device_name.upper()
    for key, peak in DEVICE_PEAKS.items():
        if key in upper:
            return peak
    return None


def ideal_time_s(flops: float, bytes_moved: float, tflops: float, tbps: float) -> float:
    return max(flops / (tflops * 1e12), bytes_moved / (tbps * 1e12))


class Roofline(TypedDict):
    pct_peak: float
    pct_achievable: float | None  # None: nobody has measured the device's achievable roof
    bound: str                    # memory | compute


def percent_of_peak(flops: float, bytes_moved: float, measured_s: float, peak: DevicePeak,
                    flops_kind: str = "vector") -> Roofline:
    """% of the datasheet and the achievable roofline, and which roof binds."""
    tflops = peak.tensor_tflops if flops_kind == "tensor" else peak.vector_tflops
    datasheet = ideal_time_s(flops, bytes_moved, tflops, peak.hbm_tbps)
    bound = "memory" if bytes_moved / peak.hbm_tbps >= flops / tflops else "compute"
    achievable = None
    if peak.achievable_hbm_tbps:
        ach_tflops = (peak.achievable_tensor_tflops or tflops) if flops_kind == "tensor" else tflops
        achievable = 100.0 * ideal_time_s(flops, bytes_moved, ach_tflops, peak.achievable_hbm_tbps) / measured_s
    return {"pct_peak": 100.0 * datasheet / measured_s, "pct_achievable": achievable, "bound": bound}


# ---------------------------------------------------------------- Trainium (NKI), per NeuronCore
# AccelOpt's formula: t_ideal = max(vector_flops / PEAK_VEC, matmul_flops / PEAK_MM, bytes / PEAK_BW),
# fp32 throughout, one NeuronCore per job.

class NeuronCorePeak(BaseModel):
    name: str
    matmul_flops: float  # fp32 TensorEngine FLOP/s
    vector_flops: float  # Vector+Scalar engines, FLOP/s
    hbm_bytes_per_s: float


TRAINIUM_PEAKS: dict[str, NeuronCorePeak] = {
    # AccelOpt's Trn1 constants: 23.75 TFLOP/s fp32 matmul, 2 x 128 lanes x 1.12 GHz, 410 GiB/s.
    "trn1": NeuronCorePeak(name="Trainium1 NeuronCore-v2", matmul_flops=23.75e12, vector_flops=2 * 128 * 1.12e9,
                           hbm_bytes_per_s=410 * 2**30),
    # Trn2 chip: 181 fp32 TFLOP/s and 2.9 TB/s over 8 cores. The vector rate assumes the same
    # 2 x 128 lanes at 1.4 GHz: an estimate, not a datasheet figure.
    "trn2": NeuronCorePeak(name="Trainium2 NeuronCore-v3", matmul_flops=181e12 / 8, vector_flops=2 * 128 * 1.4e9,
                           hbm_bytes_per_s=2.9e12 / 8),
}


class TrainiumRoofline(TypedDict):
    pct_peak: float
    bound: str      # vector | matmul | memory
    ideal_s: float


def trainium_percent_of_peak(vector_flops: float, matmul_flops: float, bytes_moved: float, measured_s: float,
                             chip: str = "trn1") -> TrainiumRoofline:
    peak = TRAINIUM_PEAKS[chip]
    times = {"vector": vector_flops / peak.vector_flops, "matmul": matmul_flops / peak.matmul_flops,
             "memory": bytes_moved / peak.hbm_bytes_per_s}
    bound = max(times, key=times.__getitem__)
    return {"pct_peak": 100.0 * times[bound] / measured_s, "bound": bound, "ideal_s": times[bound]}
