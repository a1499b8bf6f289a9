"""NKIBench task mamba: NumPy reference (fp32), exact shapes M7168 C256 S16.
make_inputs returns NumPy arrays; the NKI backend moves them to the device."""

import numpy as np


def _normal(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def make_inputs(workload, seed, device, dtype):
    rng = np.random.default_rng(seed)
    M, C, S = workload["M"], workload["C"], workload["S"]
    delta = np.float32(0.05) * _normal(rng, C, M)
    u = np.float32(0.05) * _normal(rng, C, M)
    a = np.float32(0.05) * _normal(rng, C, S)
    b = np.float32(0.05) * _normal(rng, S, M)
    c = np.float32(0.05) * _normal(rng, S, M)
    return [delta, u, a, b, c]


def reference(delta, u, a, b, c):
    (C, M), S = delta.shape, a.shape[1]
    d_a = np.exp(delta[:, None, :] * a[:, :, None])
    d_bu = delta[:, None, :] * b[None, :, :] * u[:, None, :]
    state = np.zeros((C, S), dtype=np.float32)
    scan = np.empty((C, S, M), dtype=np.float32)
    for i in range(M):
        state = d_a[..., i] * state + d_bu[..., i]
        scan[..., i] = state
    return np.sum(c[None, :, :] * scan, axis=1)


def matmul_flops(workload, dtype):
    return float(0)


def flops(workload, dtype):
    """All arithmetic: TensorEngine matmul plus Vector/Scalar work."""
    M, C, S = workload["M"], workload["C"], workload["S"]
    return float(0) + float(8 * C * S * M)


def bytes_moved(workload, dtype):
    M, C, S = workload["M"], workload["C"], workload["S"]
    return 4.0 * (3 * C * M + C * S + 2 * S * M)
