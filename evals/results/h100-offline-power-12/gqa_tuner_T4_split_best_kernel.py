import math

import torch
import triton
import triton.language as tl

# the most parts a program's sequence is split into (the split-KV rewrite); the tuner moves it
KV_SPLITS = 4

def _split_kv_parts(programs, device):
    """Parts per program of a split-KV launch: the grid made to fill the SMs twice, at most KV_SPLITS."""
    if device.type != "cuda":
        return KV_SPLITS
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(KV_SPLITS, 2 * sms // max(programs, 1)))


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


@triton.jit
def decode_kernel_parts(q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, out_ptr, scale, max_pages, HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr, BLOCK_N: tl.constexpr, _heads_total, HEADS_TILE: tl.constexpr, DOT_PRECISION: tl.constexpr, _split_m_i, _split_acc, _split_l_i, _split_parts, KV_SPLITS: tl.constexpr):
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
    _split_span = tl.cdiv(tl.cdiv(seq_len - 0, BLOCK_N), _split_parts) * BLOCK_N
    _split_lo = 0 + tl.program_id(2) * _split_span
    for start in range(_split_lo, tl.minimum(_split_lo + _split_span, seq_len), BLOCK_N):
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
    tl.store(_split_m_i + ((tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)) * _split_parts + tl.program_id(2)) * HEADS_TILE + tl.arange(0, HEADS_TILE), tl.reshape(m_i, [HEADS_TILE]))
    tl.store(_split_acc + ((tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)) * _split_parts + tl.program_id(2)) * (HEADS_TILE * D) + tl.arange(0, HEADS_TILE * D), tl.reshape(acc, [HEADS_TILE * D]))
    tl.store(_split_l_i + ((tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)) * _split_parts + tl.program_id(2)) * HEADS_TILE + tl.arange(0, HEADS_TILE), tl.reshape(l_i, [HEADS_TILE]))


@triton.jit
def decode_kernel_combine(q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, out_ptr, scale, max_pages, HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr, BLOCK_N: tl.constexpr, _heads_total, HEADS_TILE: tl.constexpr, DOT_PRECISION: tl.constexpr, _split_m_i, _split_acc, _split_l_i, _split_parts, KV_SPLITS: tl.constexpr):
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
    for _split_p in tl.static_range(KV_SPLITS):
        if _split_p < _split_parts:
            _split_m_i_p = tl.reshape(tl.load(_split_m_i + ((tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)) * _split_parts + _split_p) * HEADS_TILE + tl.arange(0, HEADS_TILE)), [HEADS_TILE])
            _split_acc_p = tl.reshape(tl.load(_split_acc + ((tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)) * _split_parts + _split_p) * (HEADS_TILE * D) + tl.arange(0, HEADS_TILE * D)), [HEADS_TILE, D])
            _split_l_i_p = tl.reshape(tl.load(_split_l_i + ((tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)) * _split_parts + _split_p) * HEADS_TILE + tl.arange(0, HEADS_TILE)), [HEADS_TILE])
            _split_m_i_new = tl.maximum(m_i, _split_m_i_p)
            _split_m_i_shift = tl.where(_split_m_i_new == float('-inf'), 0.0, _split_m_i_new)
            _split_m_i_a = tl.exp(m_i - _split_m_i_shift)
            _split_m_i_b = tl.exp(_split_m_i_p - _split_m_i_shift)
            acc = acc * _split_m_i_a[:, None] + _split_acc_p * _split_m_i_b[:, None]
            l_i = l_i * _split_m_i_a + _split_l_i_p * _split_m_i_b
            m_i = _split_m_i_new
    tl.store((out_ptr + (b * HQ + h) * D)[:, None] + offs_d, (acc / l_i[:, None]).to(out_ptr.dtype.element_ty), mask=_head_mask[:, None])


def run(q, k_cache, v_cache, block_table, seq_lens):
    q = q.contiguous()
    batch, hq, d = q.shape
    page, hkv = k_cache.shape[1], k_cache.shape[2]
    out = torch.empty_like(q)
    _split_grid = (batch, triton.cdiv(hq, hq // hkv))
    _split_parts = _split_kv_parts(_split_grid[0] * _split_grid[1], (q).device)
    if _split_parts > 1:
        _split_m_i = torch.empty(_split_grid[0] * _split_grid[1] * _split_parts * max(16, triton.next_power_of_2(hq // hkv)), dtype=torch.float32, device=(q).device)
        _split_acc = torch.empty(_split_grid[0] * _split_grid[1] * _split_parts * max(16, triton.next_power_of_2(hq // hkv)) * d, dtype=torch.float32, device=(q).device)
        _split_l_i = torch.empty(_split_grid[0] * _split_grid[1] * _split_parts * max(16, triton.next_power_of_2(hq // hkv)), dtype=torch.float32, device=(q).device)
        decode_kernel_parts[(_split_grid[0], _split_grid[1], _split_parts)](q, k_cache, v_cache, block_table, seq_lens, out, 1.0 / math.sqrt(d), block_table.shape[1], HQ=hq, HKV=hkv, D=d, PAGE=page, BLOCK_N=128, num_warps=4, _heads_total=hq, HEADS_TILE=max(16, triton.next_power_of_2(hq // hkv)), DOT_PRECISION='tf32x3' if any((str(getattr(a, 'dtype', '')) == 'torch.float32' for a in (q, k_cache, v_cache, block_table, seq_lens))) else 'tf32', _split_m_i=_split_m_i, _split_acc=_split_acc, _split_l_i=_split_l_i, _split_parts=_split_parts, KV_SPLITS=KV_SPLITS)
        decode_kernel_combine[_split_grid](q, k_cache, v_cache, block_table, seq_lens, out, 1.0 / math.sqrt(d), block_table.shape[1], HQ=hq, HKV=hkv, D=d, PAGE=page, BLOCK_N=128, num_warps=4, _heads_total=hq, HEADS_TILE=max(16, triton.next_power_of_2(hq // hkv)), DOT_PRECISION='tf32x3' if any((str(getattr(a, 'dtype', '')) == 'torch.float32' for a in (q, k_cache, v_cache, block_table, seq_lens))) else 'tf32', _split_m_i=_split_m_i, _split_acc=_split_acc, _split_l_i=_split_l_i, _split_parts=_split_parts, KV_SPLITS=KV_SPLITS)
    else:  # one part a program: the kernel as written
        decode_kernel[_split_grid](q, k_cache, v_cache, block_table, seq_lens, out, 1.0 / math.sqrt(d), block_table.shape[1], HQ=hq, HKV=hkv, D=d, PAGE=page, BLOCK_N=128, num_warps=4, _heads_total=hq, HEADS_TILE=max(16, triton.next_power_of_2(hq // hkv)), DOT_PRECISION='tf32x3' if any((str(getattr(a, 'dtype', '')) == 'torch.float32' for a in (q, k_cache, v_cache, block_table, seq_lens))) else 'tf32')
    return out
