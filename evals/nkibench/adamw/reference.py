"""NKIBench task adamw: NumPy reference (fp32), exact shapes M10944 N2048.
make_inputs returns NumPy arrays; the NKI backend moves them to the device."""

import numpy as np


def _normal(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def make_inputs(workload, seed, device, dtype):
    rng = np.random.default_rng(seed)
    M, N = workload["M"], workload["N"]
    theta = _normal(rng, M, N)
    g = _normal(rng, M, N)
    m = _normal(rng, M, N)
    v = np.abs(_normal(rng, M, N))
    return [theta, g, m, v]


def reference(theta, g, m, v):
    theta_t = theta - np.float32(1e-5) * theta
    m_t = np.float32(0.9) * m + np.float32(0.1) * g
    v_t = np.float32(0.999) * v + np.float32(0.001) * g * g
    v_hat = v_t * np.float32(1000)
    return theta_t - np.float32(0.01) * m_t / (np.sqrt(v_hat) + np.float32(1e-8))


def matmul_flops(workload, dtype):
    return float(0)


def flops(workload, dtype):
    """All arithmetic: TensorEngine matmul plus Vector/Scalar work."""
    M, N = workload["M"], workload["N"]
    return float(0) + float(15 * M * N)


def bytes_moved(workload, dtype):
    M, N = workload["M"], workload["N"]
    return 4.0 * (5 * M * N)
