"""NKIBench task gqa_full: NumPy reference (fp32), exact shapes B1 N4096 QH16 KH8 D128.
make_inputs returns NumPy arrays; the NKI backend moves them to the device."""

import numpy as np


def _normal(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def make_inputs(workload, seed, device, dtype):
    rng = np.random.default_rng(seed)
    B, N, QH, KH, D = workload["B"], workload["N"], workload["QH"], workload["KH"], workload["D"]
    return [_normal(rng, B, N, QH, D), _normal(rng, B, N, KH, D), _normal(rng, B, N, KH, D)]


def reference(q, k, v):
    QH, KH, D = q.shape[2], k.shape[2], q.shape[3]
    rep = QH // KH
    xq = q.transpose(0, 2, 1, 3)
    xk = np.repeat(k, rep, axis=2).transpose(0, 2, 1, 3)
    xv = np.repeat(v, rep, axis=2).transpose(0, 2, 1, 3)
    s = (xq @ xk.transpose(0, 1, 3, 2)) / np.float32(np.sqrt(D))
    e = np.exp(s - np.max(s, axis=-1, keepdims=True))
    return (e / np.sum(e, axis=-1, keepdims=True)) @ xv


def matmul_flops(workload, dtype):
    B, N, QH, D = workload["B"], workload["N"], workload["QH"], workload["D"]
    return float(4 * B * QH * N * N * D)


def flops(workload, dtype):
    """All arithmetic: TensorEngine matmul plus Vector/Scalar work."""
    B, N, QH, D = workload["B"], workload["N"], workload["QH"], workload["D"]
    return float(4 * B * QH * N * N * D) + float(6 * B * QH * N * N)


def bytes_moved(workload, dtype):
    B, N, QH, KH, D = workload["B"], workload["N"], workload["QH"], workload["KH"], workload["D"]
    return 4.0 * (2 * B * N * QH * D + 2 * B * N * KH * D)
