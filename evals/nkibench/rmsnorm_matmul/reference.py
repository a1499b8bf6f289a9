"""NKIBench task rmsnorm_matmul: NumPy reference (fp32), exact shapes M4096 N2048 K1024.
make_inputs returns NumPy arrays; the NKI backend moves them to the device."""

import numpy as np


def _normal(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def make_inputs(workload, seed, device, dtype):
    rng = np.random.default_rng(seed)
    M, N, K = workload["M"], workload["N"], workload["K"]
    return [_normal(rng, M, K), _normal(rng, K, N)]


def reference(x, w):
    K = x.shape[1]
    rms = np.sqrt(np.sum(np.square(x) / np.float32(K), axis=1, keepdims=True))
    return np.matmul(x / rms, w)


def matmul_flops(workload, dtype):
    M, N, K = workload["M"], workload["N"], workload["K"]
    return float(2 * M * N * K)


def flops(workload, dtype):
    """All arithmetic: TensorEngine matmul plus Vector/Scalar work."""
    M, N, K = workload["M"], workload["N"], workload["K"]
    return float(2 * M * N * K) + float(4 * M * K + M)


def bytes_moved(workload, dtype):
    M, N, K = workload["M"], workload["N"], workload["K"]
    return 4.0 * (M * K + K * N + M * N)
