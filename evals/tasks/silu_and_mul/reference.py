import torch


def make_inputs(workload, seed, device, dtype):
    gen = torch.Generator(device=device).manual_seed(seed)
    x = 2.0 * torch.randn(workload["T"], 2 * workload["I"], generator=gen, device=device)
    return (x.to(getattr(torch, dtype)),)


def reference(x):
    gate, up = x.float().chunk(2, dim=-1)
    return (torch.nn.functional.silu(gate) * up).to(x.dtype)


def flops(workload, dtype):
    # silu: negate, exp, add, divide, multiply; then the product with up
    return 6.0 * workload["T"] * workload["I"]


def bytes_moved(workload, dtype):
    size = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    return 3.0 * workload["T"] * workload["I"] * size
