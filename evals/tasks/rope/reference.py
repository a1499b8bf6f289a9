import torch

BASE = 500000.0  # Llama 3


def make_inputs(workload, seed, device, dtype):
    gen = torch.Generator(device=device).manual_seed(seed)
    t = getattr(torch, dtype)
    n, hq, hk, d, p = workload["T"], workload["HQ"], workload["HK"], workload["D"], workload["P"]
    q = torch.randn(n, hq, d, generator=gen, device=device).to(t)
    k = torch.randn(n, hk, d, generator=gen, device=device).to(t)
    positions = torch.randint(0, p, (n,), generator=gen, device=device, dtype=torch.int64)
    inv_freq = 1.0 / BASE ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d)
    angles = torch.arange(p, device=device, dtype=torch.float32)[:, None] * inv_freq[None, :]
    cos_sin_cache = torch.cat([angles.cos(), angles.sin()], dim=-1)
    return (q, k, positions, cos_sin_cache)


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


def reference(q, k, positions, cos_sin_cache):
    cos, sin = cos_sin_cache[positions].chunk(2, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]
    return _rotate(q, cos, sin), _rotate(k, cos, sin)


def flops(workload, dtype):
    # per rotated pair: four multiplies and two adds
    return 3.0 * workload["T"] * (workload["HQ"] + workload["HK"]) * workload["D"]


def bytes_moved(workload, dtype):
    size = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    n, heads, d = workload["T"], workload["HQ"] + workload["HK"], workload["D"]
    # q and k read and written; one cos/sin row (float32) and one position per token
    return 2.0 * n * heads * d * size + n * d * 4 + n * 8
