"""NKIBench task bmm_softmax: NumPy reference (fp32), exact shapes B16 M4096 K64 N4096.
make_inputs returns NumPy arrays; the NKI backend moves them to the device."""

import numpy as np


def _normal(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def make_inputs(workload, seed, device, dtype):
    rng = np.random.default_rng(seed)
    B, M, K, N = workload["B"], workload["M"], workload["K"], workload["N"]
    return [_normal(rng, B, M, K), _normal(rng, B, K, N)]


def reference(lhs, rhs):
    x = np.matmul(lhs, rhs)
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def matmul_flops(workload, dtype):
    B, M, K, N = workload["B"], workload["M"], workload["K"], workload["N"]
    return float(2 * B * M * N * K)


def flops(workload, dtype):
    """All arithmetic: TensorEngine matmul plus Vector/Scalar work."""
    B, M, K, N = workload["B"], workload["M"], workload["K"], workload["N"]
    return float(2 * B * M * N * K) + float(5 * B * M * N)


def bytes_moved(workload, dtype):
    B, M, K, N = workload["B"], workload["M"], workload["K"], workload["N"]
    return 4.0 * (B * M * K + B * K * N + B * M * N)
