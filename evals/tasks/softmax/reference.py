import torch


def make_inputs(workload, seed, device, dtype):
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(workload["M"], workload["N"], generator=gen, device=device, dtype=torch.float32) * 4.0
    return (x.to(getattr(torch, dtype)),)


def reference(x):
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def flops(workload, dtype):
    # per element: max compare, subtract, exp, sum add, divide
    return 5.0 * workload["M"] * workload["N"]


def bytes_moved(workload, dtype):
    # read x once, write out once
    return 2.0 * workload["M"] * workload["N"] * torch.empty((), dtype=getattr(torch, dtype)).element_size()
