"""NKIBench task add_rmsnorm_matmul: NumPy reference (fp32), exact shapes M4096 N2048 K1024.
make_inputs returns NumPy arrays; the NKI backend moves them to the device."""

import numpy as np


def _normal(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def make_inputs(workload, seed, device, dtype):
    rng = np.random.default_rng(seed)
    M, N, K = workload["M"], workload["N"], workload["K"]
    x = _normal(rng, M, K)
    w = _normal(rng, K, N)
    z = _normal(rng, M, K)
    g = _normal(rng, K)
    return [x, w, np.float32(1e-5), z, g]


def reference(x, w, eps, z, g):
    y = x + z
    t = np.sum(np.square(y) / np.float32(y.shape[-1]), axis=-1, keepdims=True)
    y = y / np.sqrt(t + np.float32(eps)) * g
    return np.matmul(y, w)


def matmul_flops(workload, dtype):
    M, N, K = workload["M"], workload["N"], workload["K"]
    return float(2 * M * N * K)


def flops(workload, dtype):
    """All arithmetic: TensorEngine matmul plus Vector/Scalar work."""
    M, N, K = workload["M"], workload["N"], workload["K"]
    return float(2 * M * N * K) + float(6 * M * K + 2 * M)


def bytes_moved(workload, dtype):
    M, N, K = workload["M"], workload["N"], workload["K"]
    return 4.0 * (2 * M * K + K * N + K + M * N)
