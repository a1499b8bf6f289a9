import torch

EPS = 1e-6


def make_inputs(workload, seed, device, dtype):
    gen = torch.Generator(device=device).manual_seed(seed)
    t = getattr(torch, dtype)
    x = torch.randn(workload["M"], workload["H"], generator=gen, device=device, dtype=torch.float32)
    w = 1.0 + 0.1 * torch.randn(workload["H"], generator=gen, device=device, dtype=torch.float32)
    return (x.to(t), w.to(t))


def reference(x, w):
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + EPS)
    return (xf * rstd * w.float()).to(x.dtype)


def flops(workload, dtype):
    # per element: square, accumulate, scale by rstd, scale by weight; per row: one rsqrt
    return 4.0 * workload["M"] * workload["H"] + workload["M"]


def bytes_moved(workload, dtype):
    size = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    return (2.0 * workload["M"] * workload["H"] + workload["H"]) * size
