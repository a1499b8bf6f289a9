"""NKIBench task transpose_matmul: NumPy reference (fp32), exact shapes M4096 K2048 N10944.
make_inputs returns NumPy arrays; the NKI backend moves them to the device."""

import numpy as np


def _normal(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def make_inputs(workload, seed, device, dtype):
    rng = np.random.default_rng(seed)
    M, K, N = workload["M"], workload["K"], workload["N"]
    return [_normal(rng, K, M), _normal(rng, K, N)]


def reference(lhs, rhs):
    return np.matmul(lhs.T, rhs)


def matmul_flops(workload, dtype):
    M, K, N = workload["M"], workload["K"], workload["N"]
    return float(2 * M * N * K)


def flops(workload, dtype):
    """All arithmetic: TensorEngine matmul plus Vector/Scalar work."""
    M, K, N = workload["M"], workload["K"], workload["N"]
    return float(2 * M * N * K) + float(0)


def bytes_moved(workload, dtype):
    M, K, N = workload["M"], workload["K"], workload["N"]
    return 4.0 * (K * M + K * N + M * N)
