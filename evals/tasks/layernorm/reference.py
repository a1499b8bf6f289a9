import torch

EPS = 1e-5


def make_inputs(workload, seed, device, dtype):
    gen = torch.Generator(device=device).manual_seed(seed)
    t = getattr(torch, dtype)
    m, h = workload["M"], workload["H"]
    x = 0.5 + torch.randn(m, h, generator=gen, device=device)
    w = 1.0 + 0.1 * torch.randn(h, generator=gen, device=device)
    b = 0.1 * torch.randn(h, generator=gen, device=device)
    return (x.to(t), w.to(t), b.to(t))


def reference(x, w, b):
    out = torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float(), EPS)
    return out.to(x.dtype)


def flops(workload, dtype):
    # mean (1), centre + square + accumulate (3), normalize, scale, shift (3)
    return 7.0 * workload["M"] * workload["H"] + 2.0 * workload["M"]


def bytes_moved(workload, dtype):
    size = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    return (2.0 * workload["M"] * workload["H"] + 2.0 * workload["H"]) * size
