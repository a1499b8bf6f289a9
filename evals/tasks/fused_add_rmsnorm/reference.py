import torch

EPS = 1e-6


def make_inputs(workload, seed, device, dtype):
    gen = torch.Generator(device=device).manual_seed(seed)
    t = getattr(torch, dtype)
    m, h = workload["M"], workload["H"]
    x = torch.randn(m, h, generator=gen, device=device)
    residual = torch.randn(m, h, generator=gen, device=device)
    w = 1.0 + 0.1 * torch.randn(h, generator=gen, device=device)
    return (x.to(t), residual.to(t), w.to(t))


def reference(x, residual, w):
    s = x.float() + residual.float()
    rstd = torch.rsqrt(s.pow(2).mean(dim=-1, keepdim=True) + EPS)
    return (s * rstd * w.float()).to(x.dtype), s.to(x.dtype)


def flops(workload, dtype):
    # per element: add, square, accumulate, two scales; per row: one rsqrt
    return 5.0 * workload["M"] * workload["H"] + workload["M"]


def bytes_moved(workload, dtype):
    size = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    # read x and residual, write out and the new residual; weight once
    return (4.0 * workload["M"] * workload["H"] + workload["H"]) * size
