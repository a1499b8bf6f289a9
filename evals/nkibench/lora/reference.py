"""NKIBench task lora: NumPy reference (fp32), exact shapes M4096 N12288 K5120 R128.
make_inputs returns NumPy arrays; the NKI backend moves them to the device."""

import numpy as np


def _normal(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def make_inputs(workload, seed, device, dtype):
    rng = np.random.default_rng(seed)
    M, N, K, R = workload["M"], workload["N"], workload["K"], workload["R"]
    return [_normal(rng, M, K), _normal(rng, K, N), _normal(rng, K, R), _normal(rng, R, N)]


def reference(x, w, a, b):
    return np.matmul(x, w) + np.matmul(np.matmul(x, a), b)


def matmul_flops(workload, dtype):
    M, N, K, R = workload["M"], workload["N"], workload["K"], workload["R"]
    return float(2 * M * N * K + 2 * M * K * R + 2 * M * R * N)


def flops(workload, dtype):
    """All arithmetic: TensorEngine matmul plus Vector/Scalar work."""
    M, N, K, R = workload["M"], workload["N"], workload["K"], workload["R"]
    return float(2 * M * N * K + 2 * M * K * R + 2 * M * R * N) + float(M * N)


def bytes_moved(workload, dtype):
    M, N, K, R = workload["M"], workload["N"], workload["K"], workload["R"]
    return 4.0 * (M * K + K * N + K * R + R * N + M * N)
