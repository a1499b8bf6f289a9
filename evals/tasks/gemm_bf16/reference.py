import torch


def make_inputs(workload, seed, device, dtype):
    gen = torch.Generator(device=device).manual_seed(seed)
    t = getattr(torch, dtype)
    m, n, k = workload["M"], workload["N"], workload["K"]
    x = torch.randn(m, k, generator=gen, device=device)
    w = torch.randn(n, k, generator=gen, device=device) * k ** -0.5  # unit-variance outputs
    return (x.to(t), w.to(t))


def reference(x, w):
    # In the task dtype, as nn.Linear runs it: cuBLAS accumulates bf16 products in float32. (An
    # upcast float32 GEMM here would make torch.compile of the reference a strawman comparator.)
    return x @ w.T


def flops(workload, dtype):
    return 2.0 * workload["M"] * workload["N"] * workload["K"]


def bytes_moved(workload, dtype):
    size = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    m, n, k = workload["M"], workload["N"], workload["K"]
    return (m * k + n * k + m * n) * size
