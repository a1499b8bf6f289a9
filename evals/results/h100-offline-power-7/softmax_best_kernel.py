"""Inductor seed for task softmax: the Triton kernels of torch.compile (Inductor, mode max-autotune-no-cudagraphs), torch 2.11.0+cu130, Triton 3.6.0, captured on NVIDIA H100 80GB HBM3, one specialization per workload, launched with the configurations Inductor's autotuner chose."""

import torch
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math

@triton.jit
def _online_softmax_chunk(row_max, lane_sum, x, mask):
    """One chunk of an online softmax: the row's maximum ([rows, 1]) moves once per chunk, so an
    element costs one exponential; lane_sum ([rows, chunk]) stays scaled to the row's maximum."""
    x = tl.where(mask, x, float("-inf"))
    new_max = tl.maximum(row_max, tl.max(x, 1)[:, None])
    shift = tl.where(new_max == float("-inf"), 0.0, new_max)  # a row with nothing yet: exp(-inf) = 0
    lane_sum = lane_sum * tl.exp(row_max - shift) + tl.exp(x - shift)
    return new_max, lane_sum


def _reinterpret(t, size, stride, offset):
    """Inductor's reinterpret_tensor: a view of t's storage at t's offset + offset."""
    return t.as_strided(size, stride, t.storage_offset() + offset)


def _cdiv(a, b):
    return (a + b - 1) // b


def _scratch_on(device):
    """Triton's global scratch allocator, for kernels that build TMA descriptors on the device
    (Inductor's persistent matmul template): Triton asks the host for that memory at launch."""
    return lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=device)


# ---- workload M4096_N4096 (cuda): float32[4096, 4096]
@triton.jit
def triton_red_fused__softmax_exp_prepare_softmax_online_sub_0_w0(in_ptr0, out_ptr2, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 4096
    r0_numel = 4096
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK], True, tl.int1)[:, None]
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    x0 = xindex
    _tmp2_max = tl.full([XBLOCK, 1], float('-inf'), tl.float32)
    _tmp2_sum = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + 4096*x0), r0_mask, eviction_policy='evict_last', other=0.0)
        tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])

        _tmp2_max, _tmp2_sum = _online_softmax_chunk(_tmp2_max, _tmp2_sum, tmp1, r0_mask)

    tmp2, tmp3 = tl.max(_tmp2_max, 1), tl.sum(_tmp2_sum, 1)
    tmp2 = tmp2[:, None]
    tmp3 = tmp3[:, None]
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp4 = tl.load(in_ptr0 + (r0_1 + 4096*x0), r0_mask, eviction_policy='evict_first', other=0.0)
        tmp5 = tmp4 - tmp2
        tmp6 = tl.math.exp(tmp5)
        tmp7 = (tmp6 / tmp3)
        tl.store(out_ptr2 + (r0_1 + 4096*x0), tmp7, r0_mask)

def _call_0(args, _device):
    arg0_1, = args
    buf2 = torch.empty_strided((4096, 4096), (4096, 1), dtype=torch.float32, device=_device)
    triton_red_fused__softmax_exp_prepare_softmax_online_sub_0_w0[lambda META: (_cdiv(4096, META['XBLOCK']),)](arg0_1, buf2, 4096, 4096, XBLOCK=1, R0_BLOCK=4096, num_warps=16, num_stages=1)
    del arg0_1
    return (buf2,)


# ---- workload M1024_N32000 (cuda): float32[1024, 32000]
@triton.jit
def triton_red_fused__softmax_exp_prepare_softmax_online_sub_0_w1(in_ptr0, out_ptr2, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 1024
    r0_numel = 32000
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    x0 = xindex
    _tmp2_max = tl.full([XBLOCK, 1], float('-inf'), tl.float32)
    _tmp2_sum = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + 32000*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])

        _tmp2_max, _tmp2_sum = _online_softmax_chunk(_tmp2_max, _tmp2_sum, tmp1, r0_mask & xmask)

    tmp2, tmp3 = tl.max(_tmp2_max, 1), tl.sum(_tmp2_sum, 1)
    tmp2 = tmp2[:, None]
    tmp3 = tmp3[:, None]
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp4 = tl.load(in_ptr0 + (r0_1 + 32000*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0)
        tmp5 = tmp4 - tmp2
        tmp6 = tl.math.exp(tmp5)
        tmp7 = (tmp6 / tmp3)
        tl.store(out_ptr2 + (r0_1 + 32000*x0), tmp7, r0_mask & xmask)

def _call_1(args, _device):
    arg0_1, = args
    buf2 = torch.empty_strided((1024, 32000), (32000, 1), dtype=torch.float32, device=_device)
    triton_red_fused__softmax_exp_prepare_softmax_online_sub_0_w1[lambda META: (_cdiv(1024, META['XBLOCK']),)](arg0_1, buf2, 1024, 32000, XBLOCK=2, R0_BLOCK=8192, num_warps=16, num_stages=1)
    del arg0_1
    return (buf2,)


# ---- workload M16384_N1024 (cuda): float32[16384, 1024]
@triton.jit
def triton_per_fused__softmax_exp_prepare_softmax_online_sub_0_w2(in_ptr0, out_ptr2, xnumel, r0_numel, XBLOCK : tl.constexpr):
    xnumel = 16384
    r0_numel = 1024
    R0_BLOCK: tl.constexpr = 1024
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK], True, tl.int1)[:, None]
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_offset = 0
    r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]
    roffset = r0_offset
    rindex = r0_index
    r0_1 = r0_index
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (r0_1 + 1024*x0), None)
    tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
    tmp3 = tl.broadcast_to(tmp1, [XBLOCK, R0_BLOCK])
    tmp5 = triton_helpers.max2(tmp3, 1)[:, None].to(tl.float32)
    tmp6 = tmp1 - tmp5
    tmp7 = tl.math.exp(tmp6)
    tmp8 = tl.broadcast_to(tmp7, [XBLOCK, R0_BLOCK])
    tmp10 = tl.sum(tmp8, 1)[:, None].to(tl.float32)
    tmp11 = tmp0 - tmp5
    tmp12 = tl.math.exp(tmp11)
    tmp13 = (tmp12 / tmp10)
    tl.store(out_ptr2 + (r0_1 + 1024*x0), tmp13, None)

def _call_2(args, _device):
    arg0_1, = args
    buf2 = torch.empty_strided((16384, 1024), (1024, 1), dtype=torch.float32, device=_device)
    triton_per_fused__softmax_exp_prepare_softmax_online_sub_0_w2[lambda META: (_cdiv(16384, META['XBLOCK']),)](arg0_1, buf2, 16384, 1024, XBLOCK=1, num_warps=2, num_stages=1)
    del arg0_1
    return (buf2,)


# ---- workload M4_N37 (cpu): float32[4, 37]
@triton.jit
def triton_per_fused__softmax_exp_prepare_softmax_online_sub_0_w3(in_ptr0, out_ptr2, xnumel, r0_numel, XBLOCK : tl.constexpr):
    xnumel = 4
    r0_numel = 37
    R0_BLOCK: tl.constexpr = 64
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_offset = 0
    r0_mask = r0_index < r0_numel
    roffset = r0_offset
    rindex = r0_index
    r0_1 = r0_index
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (r0_1 + 37*x0), r0_mask & xmask, other=0.0)
    tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
    tmp3 = tl.broadcast_to(tmp1, [XBLOCK, R0_BLOCK])
    tmp5 = tl.where(r0_mask & xmask, tmp3, float("-inf"))
    tmp6 = triton_helpers.max2(tmp5, 1)[:, None].to(tl.float32)
    tmp7 = tmp1 - tmp6
    tmp8 = tl.math.exp(tmp7)
    tmp9 = tl.broadcast_to(tmp8, [XBLOCK, R0_BLOCK])
    tmp11 = tl.where(r0_mask & xmask, tmp9, 0)
    tmp12 = tl.sum(tmp11, 1)[:, None].to(tl.float32)
    tmp13 = tmp0 - tmp6
    tmp14 = tl.math.exp(tmp13)
    tmp15 = (tmp14 / tmp12)
    tl.store(out_ptr2 + (r0_1 + 37*x0), tmp15, r0_mask & xmask)

def _call_3(args, _device):
    arg0_1, = args
    buf2 = torch.empty_strided((4, 37), (37, 1), dtype=torch.float32, device=_device)
    triton_per_fused__softmax_exp_prepare_softmax_online_sub_0_w3[lambda META: (_cdiv(4, META['XBLOCK']),)](arg0_1, buf2, 4, 37, XBLOCK=1, num_warps=2, num_stages=1)
    del arg0_1
    return (buf2,)


# ---- workload M3_N130 (cpu): float32[3, 130]
@triton.jit
def triton_per_fused__softmax_exp_prepare_softmax_online_sub_0_w4(in_ptr0, out_ptr2, xnumel, r0_numel, XBLOCK : tl.constexpr):
    xnumel = 3
    r0_numel = 130
    R0_BLOCK: tl.constexpr = 256
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_offset = 0
    r0_mask = r0_index < r0_numel
    roffset = r0_offset
    rindex = r0_index
    r0_1 = r0_index
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (r0_1 + 130*x0), r0_mask & xmask, other=0.0)
    tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
    tmp3 = tl.broadcast_to(tmp1, [XBLOCK, R0_BLOCK])
    tmp5 = tl.where(r0_mask & xmask, tmp3, float("-inf"))
    tmp6 = triton_helpers.max2(tmp5, 1)[:, None].to(tl.float32)
    tmp7 = tmp1 - tmp6
    tmp8 = tl.math.exp(tmp7)
    tmp9 = tl.broadcast_to(tmp8, [XBLOCK, R0_BLOCK])
    tmp11 = tl.where(r0_mask & xmask, tmp9, 0)
    tmp12 = tl.sum(tmp11, 1)[:, None].to(tl.float32)
    tmp13 = tmp0 - tmp6
    tmp14 = tl.math.exp(tmp13)
    tmp15 = (tmp14 / tmp12)
    tl.store(out_ptr2 + (r0_1 + 130*x0), tmp15, r0_mask & xmask)

def _call_4(args, _device):
    arg0_1, = args
    buf2 = torch.empty_strided((3, 130), (130, 1), dtype=torch.float32, device=_device)
    triton_per_fused__softmax_exp_prepare_softmax_online_sub_0_w4[lambda META: (_cdiv(3, META['XBLOCK']),)](arg0_1, buf2, 3, 130, XBLOCK=1, num_warps=1, num_stages=1)
    del arg0_1
    return (buf2,)


_BY_INPUTS = {
    (((4096, 4096), 'float32'),): (_call_0, (0,)),
    (((1024, 32000), 'float32'),): (_call_1, (0,)),
    (((16384, 1024), 'float32'),): (_call_2, (0,)),
    (((4, 37), 'float32'),): (_call_3, (0,)),
    (((3, 130), 'float32'),): (_call_4, (0,)),
}


def _key(inputs):
    return tuple((tuple(x.shape), str(x.dtype).removeprefix("torch.")) if isinstance(x, torch.Tensor) else repr(x)
                 for x in inputs)


def run(*inputs):
    key = _key(inputs)
    if key not in _BY_INPUTS:
        raise ValueError(f"this Inductor seed has no specialization for inputs {key}; it covers {list(_BY_INPUTS)}")
    call, order = _BY_INPUTS[key]
    device = next(x.device for x in inputs if isinstance(x, torch.Tensor))
    outputs = call([inputs[i] for i in order], device)
    return outputs[0] if len(outputs) == 1 else tuple(outputs)
