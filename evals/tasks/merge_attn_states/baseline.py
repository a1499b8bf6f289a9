import torch
import triton
import triton.language as tl


@triton.jit
def merge_kernel(p_ptr, p_lse_ptr, s_ptr, s_lse_ptr, out_ptr, lse_ptr, D: tl.constexpr):
    # One program per (token, head) row of D values.
    row = tl.program_id(0)
    offs = tl.arange(0, D)
    p_lse = tl.load(p_lse_ptr + row)
    s_lse = tl.load(s_lse_ptr + row)
    m = tl.maximum(p_lse, s_lse)
    wp = tl.exp(p_lse - m)
    ws = tl.exp(s_lse - m)
    total = wp + ws
    p = tl.load(p_ptr + row * D + offs).to(tl.float32)
    s = tl.load(s_ptr + row * D + offs).to(tl.float32)
    tl.store(out_ptr + row * D + offs, ((p * wp + s * ws) / total).to(out_ptr.dtype.element_ty))
    tl.store(lse_ptr + row, m + tl.log(total))


def run(prefix_out, prefix_lse, suffix_out, suffix_lse):
    prefix_out, suffix_out = prefix_out.contiguous(), suffix_out.contiguous()
    tokens, heads, dim = prefix_out.shape
    out = torch.empty_like(prefix_out)
    lse = torch.empty((tokens, heads), dtype=torch.float32, device=prefix_out.device)
    merge_kernel[(tokens * heads,)](prefix_out, prefix_lse.contiguous(), suffix_out, suffix_lse.contiguous(),
                                    out, lse, D=dim, num_warps=1)
    return out, lse
