"""NKIBench task rope_single_freq_apply: NumPy reference (fp32), exact shapes B1 H64 N4096 D128.
make_inputs returns NumPy arrays; the NKI backend moves them to the device."""

import numpy as np


def _normal(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def make_inputs(workload, seed, device, dtype):
    rng = np.random.default_rng(seed)
    B, H, N, D = workload["B"], workload["H"], workload["N"], workload["D"]
    cols = B * H * N
    return [_normal(rng, D, cols), _normal(rng, D // 2, cols), _normal(rng, D // 2, cols)]


def reference(x, freqs_cos, freqs_sin):
    half = x.shape[0] // 2
    x0, x1 = x[:half], x[half:]
    return np.concatenate([x0 * freqs_cos - x1 * freqs_sin, x0 * freqs_sin + x1 * freqs_cos], axis=0)


def matmul_flops(workload, dtype):
    return float(0)


def flops(workload, dtype):
    """All arithmetic: TensorEngine matmul plus Vector/Scalar work."""
    B, H, N, D = workload["B"], workload["H"], workload["N"], workload["D"]
    return float(0) + float(3 * D * B * H * N)


def bytes_moved(workload, dtype):
    B, H, N, D = workload["B"], workload["H"], workload["N"], workload["D"]
    return 4.0 * (3 * D * B * H * N)
