import torch
import triton
import triton.language as tl

AXIS1_GROUP = 8


@triton.jit
def rope_kernel_fused(x_ptr, out_ptr, pos_ptr, cache_ptr, n_heads, _axis1_total,
                      x_ptr__1, out_ptr__1, pos_ptr__1, cache_ptr__1, n_heads__1, _axis1_total__1,
                      _fused_start_1, HALF: tl.constexpr, AXIS1_GROUP: tl.constexpr):
    _fused_pid = tl.program_id(1)
    if _fused_pid < _fused_start_1:
        token = tl.program_id(0)
        head = tl.program_id(1) * AXIS1_GROUP + tl.arange(0, AXIS1_GROUP)[:, None]
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
    else:
        token__1 = tl.program_id(0)
        head__1 = (tl.program_id(1) - _fused_start_1) * AXIS1_GROUP + tl.arange(0, AXIS1_GROUP)[:, None]
        _axis1_mask__1 = head__1 < _axis1_total__1
        offs__1 = tl.arange(0, HALF)[None, :]
        pos__1 = tl.load(pos_ptr__1 + token__1)
        cos__1 = tl.load(cache_ptr__1 + pos__1 * 2 * HALF + offs__1)
        sin__1 = tl.load(cache_ptr__1 + pos__1 * 2 * HALF + HALF + offs__1)
        base__1 = (token__1 * n_heads__1 + head__1) * 2 * HALF
        x1__1 = tl.load(x_ptr__1 + base__1 + offs__1, mask=_axis1_mask__1).to(tl.float32)
        x2__1 = tl.load(x_ptr__1 + base__1 + HALF + offs__1, mask=_axis1_mask__1).to(tl.float32)
        tl.store(out_ptr__1 + base__1 + offs__1, (x1__1 * cos__1 - x2__1 * sin__1).to(out_ptr__1.dtype.element_ty), mask=_axis1_mask__1)
        tl.store(out_ptr__1 + base__1 + HALF + offs__1, (x2__1 * cos__1 + x1__1 * sin__1).to(out_ptr__1.dtype.element_ty), mask=_axis1_mask__1)


def run(q, k, positions, cos_sin_cache):
    cache = cos_sin_cache.contiguous()
    q = q.contiguous()
    k = k.contiguous()
    tokens, hq, dim = q.shape
    hk = k.shape[1]
    qo = torch.empty_like(q)
    ko = torch.empty_like(k)
    gq = triton.cdiv(hq, AXIS1_GROUP)
    gk = triton.cdiv(hk, AXIS1_GROUP)
    rope_kernel_fused[(tokens, gq + gk)](q, qo, positions, cache, hq, hq, k, ko, positions, cache, hk, hk, gq,
                                         HALF=dim // 2, AXIS1_GROUP=AXIS1_GROUP, num_warps=1)
    return qo, ko
