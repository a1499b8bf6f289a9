import torch
import triton
import triton.language as tl

# rows of the grid's second axis a program takes as a tile (the axis-tile rewrite); the tuner moves it
AXIS1_BLOCK = 8


@triton.jit
def rope_kernel(x_ptr, out_ptr, pos_ptr, cache_ptr, n_heads, HALF: tl.constexpr, _axis1_total, AXIS1_BLOCK: tl.constexpr):
    token = tl.program_id(0)
    head = tl.program_id(1) * AXIS1_BLOCK + tl.arange(0, AXIS1_BLOCK)[:, None]
    _axis1_mask = head < _axis1_total
    offs = tl.arange(0, HALF)[None, :]
    pos = tl.load(pos_ptr + token)
    cos = tl.load(cache_ptr + pos * 2 * HALF + offs)
    sin = tl.load(cache_ptr + pos * 2 * HALF + HALF + offs)
    base = (token * n_heads + head) * 2 * HALF
    x1 = tl.load(x_ptr + base + offs, mask=_axis1_mask).to(tl.float32)
    x2 = tl.load(x_ptr + base + HALF + offs, mask=_axis1_mask).to(tl.float32)
    tl.store(out_ptr + base + offs, (x1 * cos - x2 * sin).to(out_ptr.dtype.element_ty), mask=_axis1_mask)
    tl.store(out_ptr + base + HALF + offs, (x2 * cos + x1 * sin).to(out_ptr.dtype.element_ty), mask=_axis1_mask)


def _apply(x, positions, cos_sin_cache):
    x = x.contiguous()
    tokens, heads, dim = x.shape
    out = torch.empty_like(x)
    rope_kernel[(tokens, triton.cdiv(heads, AXIS1_BLOCK))](x, out, positions, cos_sin_cache, heads, HALF=dim // 2, num_warps=1, _axis1_total=heads, AXIS1_BLOCK=AXIS1_BLOCK)
    return out


def run(q, k, positions, cos_sin_cache):
    cache = cos_sin_cache.contiguous()
    return _apply(q, positions, cache), _apply(k, positions, cache)
