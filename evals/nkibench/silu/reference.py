"""NKIBench task silu: NumPy reference (fp32), exact shapes M4096 N7168.
make_inputs returns NumPy arrays; the NKI backend moves them to the device."""

import numpy as np


def _normal(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def make_inputs(workload, seed, device, dtype):
    rng = np.random.default_rng(seed)
    M, N = workload["M"], workload["N"]
    return [_normal(rng, M, N)]


def reference(x):
    return x / (np.float32(1) + np.exp(-x))


def matmul_flops(workload, dtype):
    return float(0)


def flops(workload, dtype):
    """All arithmetic: TensorEngine matmul plus Vector/Scalar work."""
    M, N = workload["M"], workload["N"]
    return float(0) + float(4 * M * N)


def bytes_moved(workload, dtype):
    M, N = workload["M"], workload["N"]
    return 4.0 * (2 * M * N)
