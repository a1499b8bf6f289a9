import torch


def make_inputs(workload, seed, device, dtype):
    gen = torch.Generator(device=device).manual_seed(seed)
    n, v = workload["T"], workload["V"]
    logits = 3.0 * torch.randn(n, v, generator=gen, device=device)
    labels = torch.randint(0, v, (n,), generator=gen, device=device, dtype=torch.int64)
    return (logits.to(getattr(torch, dtype)), labels)


def reference(logits, labels):
    return torch.nn.functional.cross_entropy(logits.float(), labels, reduction="none")


def flops(workload, dtype):
    # per logit: max, subtract, exp, accumulate
    return 4.0 * workload["T"] * workload["V"]


def bytes_moved(workload, dtype):
    size = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    return workload["T"] * workload["V"] * size + workload["T"] * (8 + 4)
