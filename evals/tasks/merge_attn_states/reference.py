import torch


def make_inputs(workload, seed, device, dtype):
    gen = torch.Generator(device=device).manual_seed(seed)
    t = getattr(torch, dtype)
    n, h, d = workload["T"], workload["H"], workload["D"]
    prefix_out = torch.randn(n, h, d, generator=gen, device=device).to(t)
    suffix_out = torch.randn(n, h, d, generator=gen, device=device).to(t)
    prefix_lse = 4.0 + 2.0 * torch.randn(n, h, generator=gen, device=device)
    suffix_lse = 4.0 + 2.0 * torch.randn(n, h, generator=gen, device=device)
    return (prefix_out, prefix_lse, suffix_out, suffix_lse)


def reference(prefix_out, prefix_lse, suffix_out, suffix_lse):
    m = torch.maximum(prefix_lse, suffix_lse)
    wp, ws = torch.exp(prefix_lse - m), torch.exp(suffix_lse - m)
    total = wp + ws
    out = (prefix_out.float() * wp[..., None] + suffix_out.float() * ws[..., None]) / total[..., None]
    return out.to(prefix_out.dtype), m + torch.log(total)


def flops(workload, dtype):
    # per element: two scales, an add, a divide
    return 4.0 * workload["T"] * workload["H"] * workload["D"]


def bytes_moved(workload, dtype):
    size = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    rows = workload["T"] * workload["H"]
    return 3.0 * rows * workload["D"] * size + 3.0 * rows * 4
