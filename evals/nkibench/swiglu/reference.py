"""NKIBench task swiglu: NumPy reference (fp32), exact shapes M4096 N3072 K1024.
make_inputs returns NumPy arrays; the NKI backend moves them to the device."""

import numpy as np


def _normal(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def make_inputs(workload, seed, device, dtype):
    rng = np.random.default_rng(seed)
    M, N, K = workload["M"], workload["N"], workload["K"]
    x = _normal(rng, M, K)
    w_up = np.float32(K ** -0.5) * _normal(rng, K, N)
    w_down = np.float32(N ** -0.5) * _normal(rng, N, K)
    w_gate = np.float32(K ** -0.5) * _normal(rng, K, N)
    return [x, w_up, w_down, w_gate]


def reference(x, w_up, w_down, w_gate):
    gate = np.matmul(x, w_gate)
    return np.matmul(gate / (np.float32(1) + np.exp(-gate)) * np.matmul(x, w_up), w_down)


def matmul_flops(workload, dtype):
    M, N, K = workload["M"], workload["N"], workload["K"]
    return float(6 * M * N * K)


def flops(workload, dtype):
    """All arithmetic: TensorEngine matmul plus Vector/Scalar work."""
    M, N, K = workload["M"], workload["N"], workload["K"]
    return float(6 * M * N * K) + float(5 * M * N)


def bytes_moved(workload, dtype):
    M, N, K = workload["M"], workload["N"], workload["K"]
    return 4.0 * (2 * M * K + 3 * K * N)
