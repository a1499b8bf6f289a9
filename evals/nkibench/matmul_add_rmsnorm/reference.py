"""NKIBench task matmul_add_rmsnorm: NumPy reference (fp32), exact shapes M4096 N2048 K2048.
make_inputs returns NumPy arrays; the NKI backend moves them to the device."""

import numpy as np


def _normal(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def make_inputs(workload, seed, device, dtype):
    rng = np.random.default_rng(seed)
    M, N, K = workload["M"], workload["N"], workload["K"]
    x = _normal(rng, M, K)
    w = _normal(rng, K, N)
    z = _normal(rng, M, N)
    g = _normal(rng, N)
    return [x, w, np.float32(1e-5), z, g]


def reference(x, w, eps, z, g):
    y = np.matmul(x, w) + z
    rms = np.sqrt(np.mean(y ** 2, axis=-1, keepdims=True) + np.float32(eps))
    return y * g / rms


def matmul_flops(workload, dtype):
    M, N, K = workload["M"], workload["N"], workload["K"]
    return float(2 * M * N * K)


def flops(workload, dtype):
    """All arithmetic: TensorEngine matmul plus Vector/Scalar work."""
    M, N, K = workload["M"], workload["N"], workload["K"]
    return float(2 * M * N * K) + float(5 * M * N + 2 * M)


def bytes_moved(workload, dtype):
    M, N, K = workload["M"], workload["N"], workload["K"]
    return 4.0 * (M * K + K * N + 2 * M * N + N)
