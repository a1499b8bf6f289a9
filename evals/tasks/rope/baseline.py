import torch
import triton
import triton.language as tl


@triton.jit
def rope_kernel(x_ptr, out_ptr, pos_ptr, cache_ptr, n_heads, HALF: tl.constexpr):
    # One program per (token, head): load that head's two halves and its position's cos/sin.
    token = tl.program_id(0)
    head = tl.program_id(1)
    offs = tl.arange(0, HALF)
    pos = tl.load(pos_ptr + token)
    cos = tl.load(cache_ptr + pos * 2 * HALF + offs)
    sin = tl.load(cache_ptr + pos * 2 * HALF + HALF + offs)
    base = (token * n_heads + head) * 2 * HALF
    x1 = tl.load(x_ptr + base + offs).to(tl.float32)
    x2 = tl.load(x_ptr + base + HALF + offs).to(tl.float32)
    tl.store(out_ptr + base + offs, (x1 * cos - x2 * sin).to(out_ptr.dtype.element_ty))
    tl.store(out_ptr + base + HALF + offs, (x2 * cos + x1 * sin).to(out_ptr.dtype.element_ty))


def _apply(x, positions, cos_sin_cache):
    x = x.contiguous()
    tokens, heads, dim = x.shape
    out = torch.empty_like(x)
    rope_kernel[(tokens, heads)](x, out, positions, cos_sin_cache, heads, HALF=dim // 2, num_warps=1)
    return out


def run(q, k, positions, cos_sin_cache):
    cache = cos_sin_cache.contiguous()
    return _apply(q, positions, cache), _apply(k, positions, cache)
