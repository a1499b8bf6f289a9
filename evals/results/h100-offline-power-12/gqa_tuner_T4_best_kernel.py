import math

import torch
import triton
import triton.language as tl


@triton.jit
def decode_kernel(q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, out_ptr, scale, max_pages, HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr, BLOCK_N: tl.constexpr, _heads_total, HEADS_TILE: tl.constexpr, DOT_PRECISION: tl.constexpr):
    b = tl.program_id(0)
    _kv_head = tl.program_id(1)
    _head_in_group = tl.arange(0, HEADS_TILE)
    h = _kv_head * (HQ // HKV) + _head_in_group
    _head_mask = (_head_in_group < HQ // HKV) & (h < _heads_total)
    kvh = _kv_head
    offs_d = tl.arange(0, D)
    offs_n = tl.arange(0, BLOCK_N)
    q = tl.load((q_ptr + (b * HQ + h) * D)[:, None] + offs_d, mask=_head_mask[:, None]).to(tl.float32)
    seq_len = tl.load(lens_ptr + b)
    m_i = tl.zeros([HEADS_TILE], dtype=tl.float32) - float('inf')
    l_i = tl.zeros([HEADS_TILE], dtype=tl.float32)
    acc = tl.zeros([HEADS_TILE, D], dtype=tl.float32)
    for start in range(0, seq_len, BLOCK_N):
        tok = start + offs_n
        valid = tok < seq_len
        page = tl.load(table_ptr + b * max_pages + tok // PAGE, mask=valid, other=0)
        kv_off = ((page * PAGE + tok % PAGE)[:, None] * HKV + kvh) * D + offs_d[None, :]
        k = tl.load(k_ptr + kv_off, mask=valid[:, None], other=0.0).to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale
        s = tl.where(valid, s, -float('inf'))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        v = tl.load(v_ptr + kv_off, mask=valid[:, None], other=0.0).to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=DOT_PRECISION)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        m_i = m_new
    tl.store((out_ptr + (b * HQ + h) * D)[:, None] + offs_d, (acc / l_i[:, None]).to(out_ptr.dtype.element_ty), mask=_head_mask[:, None])


def run(q, k_cache, v_cache, block_table, seq_lens):
    q = q.contiguous()
    batch, hq, d = q.shape
    page, hkv = k_cache.shape[1], k_cache.shape[2]
    out = torch.empty_like(q)
    decode_kernel[(batch, triton.cdiv(hq, (hq // hkv)))](q, k_cache, v_cache, block_table, seq_lens, out, 1.0 / math.sqrt(d), block_table.shape[1], HQ=hq, HKV=hkv, D=d, PAGE=page, BLOCK_N=128, num_warps=4, _heads_total=hq, HEADS_TILE=max(16, triton.next_power_of_2((hq // hkv))), DOT_PRECISION=('tf32x3' if any(str(getattr(a, 'dtype', '')) == 'torch.float32' for a in (q, k_cache, v_cache, block_table, seq_lens, out,)) else 'tf32'))
    return out
