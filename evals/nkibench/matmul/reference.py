"""NKIBench task matmul: NumPy reference (fp32), exact shapes M4096 N12288 K5120.
make_inputs returns NumPy arrays; the NKI backend moves them to the device."""

import numpy as np


def _normal(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def make_inputs(workload, seed, device, dtype):
    rng = np.random.default_rng(seed)
    M, N, K = workload["M"], workload["N"], workload["K"]
    return [_normal(rng, M, K), _normal(rng, K, N)]


def reference(x, w):
    return np.matmul(x, w)


def matmul_flops(workload, dtype):
    M, N, K = workload["M"], workload["N"], workload["K"]
    return float(2 * M * N * K)


def flops(workload, dtype):
    """All arithmetic: TensorEngine matmul plus Vector/Scalar work."""
    M, N, K = workload["M"], workload["N"], workload["K"]
    return float(2 * M * N * K) + float(0)


def bytes_moved(workload, dtype):
    M, N, K = workload["M"], workload["N"], workload["K"]
    return 4.0 * (M * K + K * N + M * N)
