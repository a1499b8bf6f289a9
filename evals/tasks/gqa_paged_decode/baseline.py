import math

import torch
import triton
import triton.language as tl


@triton.jit
def decode_kernel(q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, out_ptr, scale, max_pages, HQ: tl.constexpr,
                  HKV: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr, BLOCK_N: tl.constexpr):
    # One program per (sequence, query head); walks the sequence BLOCK_N tokens at a time with an
    # online softmax, reading the query head's KV head through the block table.
    b = tl.program_id(0)
    h = tl.program_id(1)
    kvh = h // (HQ // HKV)
    offs_d = tl.arange(0, D)
    offs_n = tl.arange(0, BLOCK_N)
    q = tl.load(q_ptr + (b * HQ + h) * D + offs_d).to(tl.float32)
    seq_len = tl.load(lens_ptr + b)
    m_i = tl.zeros([], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([], dtype=tl.float32)
    acc = tl.zeros([D], dtype=tl.float32)
    for start in range(0, seq_len, BLOCK_N):
        tok = start + offs_n
        valid = tok < seq_len
        page = tl.load(table_ptr + b * max_pages + tok // PAGE, mask=valid, other=0)
        kv_off = ((page * PAGE + tok % PAGE)[:, None] * HKV + kvh) * D + offs_d[None, :]
        k = tl.load(k_ptr + kv_off, mask=valid[:, None], other=0.0).to(tl.float32)
        s = tl.sum(k * q[None, :], axis=1) * scale
        s = tl.where(valid, s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m_i - m_new)
        v = tl.load(v_ptr + kv_off, mask=valid[:, None], other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new
    tl.store(out_ptr + (b * HQ + h) * D + offs_d, (acc / l_i).to(out_ptr.dtype.element_ty))


def run(q, k_cache, v_cache, block_table, seq_lens):
    q = q.contiguous()
    batch, hq, d = q.shape
    page, hkv = k_cache.shape[1], k_cache.shape[2]
    out = torch.empty_like(q)
    decode_kernel[(batch, hq)](q, k_cache, v_cache, block_table, seq_lens, out, 1.0 / math.sqrt(d),
                               block_table.shape[1], HQ=hq, HKV=hkv, D=d, PAGE=page, BLOCK_N=64,
                               num_warps=4)
    return out
