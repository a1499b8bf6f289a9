import torch
import triton
import triton.language as tl


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, hidden, eps, BLOCK: tl.constexpr):
    # One program per row, three passes over it: the mean, the variance, then the output.
    row = tl.program_id(0)
    base = row * hidden
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, hidden, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + base + cols, mask=cols < hidden, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / hidden
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, hidden, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < hidden
        x = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / hidden + eps)
    for start in range(0, hidden, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < hidden
        x = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + base + cols, ((x - mean) * rstd * w + b).to(out_ptr.dtype.element_ty), mask=mask)


def run(x, w, b):
    x = x.contiguous()
    n_rows, hidden = x.shape
    out = torch.empty_like(x)
    layernorm_kernel[(n_rows,)](x, w, b, out, hidden, 1e-5, BLOCK=256, num_warps=4)
    return out
