import math
import torch
import triton
import triton.language as tl

# TMA descriptors require a global memory allocation function
def alloc_fn(size: int, alignment: int, stream: int):
    return torch.empty(size, device="cuda", dtype=torch.int8)

triton.set_allocator(alloc_fn)

@triton.autotune(
    configs=[
        triton.Config({'BLOCK_M': 32,  'PIPE_STAGES': 2}, num_warps=2, num_stages=2),
        triton.Config({'BLOCK_M': 64,  'PIPE_STAGES': 2}, num_warps=4, num_stages=2),
        triton.Config({'BLOCK_M': 64,  'PIPE_STAGES': 3}, num_warps=4, num_stages=3),
        triton.Config({'BLOCK_M': 128, 'PIPE_STAGES': 4}, num_warps=8, num_stages=4),
        triton.Config({'BLOCK_M': 256, 'PIPE_STAGES': 4}, num_warps=8, num_stages=4),
    ],
    key=['batch_size']
)
@triton.jit
def gqa_paged_decode_kernel_optimized(
    q_ptr,                         # *bf16 [B, Hq, D]
    k_cache_ptr,                   # *bf16 [P, S=1, Hk, D]
    v_cache_ptr,                   # *bf16 [P, S=1, Hk, D]
    kv_indptr_ptr,                 # *i32  [B+1]
    kv_indices_ptr,                # *i32  [N]
    sm_scale,                      # f32 scalar
    output_ptr,                    # *bf16 [B, Hq, D]
    lse_ptr,                       # *f32  [B, Hq]
    batch_size,                    # i32
    num_pages,                     # i32
    num_kv_heads,                  # i32
    stride_q_b, stride_q_h, stride_q_d,
    stride_k_p, stride_k_s, stride_k_h, stride_k_d,
    stride_v_p, stride_v_s, stride_v_h, stride_v_d,
    stride_o_b, stride_o_h, stride_o_d,
    stride_lse_b, stride_lse_h,
    BLOCK_M: tl.constexpr,         
    D_HEAD: tl.constexpr,          
    GQA_RATIO: tl.constexpr,       
    PIPE_STAGES: tl.constexpr      
):
    # Map each program to one KV head group for a specific batch index
    pid = tl.program_id(0)
    kv_h = pid % num_kv_heads
    b = pid // num_kv_heads

    if b >= batch_size:
        return

    # Offsets
    h_offsets = tl.arange(0, GQA_RATIO)
    d_offsets = tl.arange(0, D_HEAD)
    t_offsets = tl.arange(0, BLOCK_M)
    INV_LN2: tl.constexpr = 1.4426950408889634
    
    # Retrieve page range (sequence length) for this sequence
    page_start = tl.load(kv_indptr_ptr + b).to(tl.int32)
    page_end = tl.load(kv_indptr_ptr + (b + 1)).to(tl.int32)
    seq_len = page_end - page_start

    # Base pointers for the specific KV head
    k_ptr_base = k_cache_ptr + kv_h * stride_k_h
    v_ptr_base = v_cache_ptr + kv_h * stride_v_h

    # Load Query block: [GQA_RATIO, D_HEAD]
    q_base = q_ptr + b * stride_q_b + (kv_h * GQA_RATIO) * stride_q_h
    q_ptrs = q_base + h_offsets[:, None] * stride_q_h + d_offsets[None, :] * stride_q_d
    
    # Keep Q in BF16 for the dot product, but apply scaling.
    # We cast to FP32 for scaling and back to BF16 to satisfy tl.dot constraints.
    q_block = tl.load(q_ptrs)
    q_block = (q_block.to(tl.float32) * sm_scale).to(tl.bfloat16)
    
    # Online softmax accumulators
    m_i = tl.full([GQA_RATIO], -float("inf"), dtype=tl.float32)
    l_i = tl.zeros([GQA_RATIO], dtype=tl.float32)
    acc = tl.zeros([GQA_RATIO, D_HEAD], dtype=tl.float32)

    # Main KV loop
    for pos in tl.range(0, seq_len, step=BLOCK_M, num_stages=PIPE_STAGES):
        mask_t = (pos + t_offsets) < seq_len
        
        # Gather load physical page IDs
        page_indices = page_start + pos + t_offsets
        page_ids = tl.load(kv_indices_ptr + page_indices, mask=mask_t, other=0)
        
        # Load K-block: [BLOCK_M, D_HEAD]
        k_ptrs = k_ptr_base + page_ids[:, None] * stride_k_p + d_offsets[None, :] * stride_k_d
        k_block = tl.load(k_ptrs, mask=mask_t[:, None], other=0.0)
        
        # Compute Logits: [GQA_RATIO, BLOCK_M]
        # Both operands are BF16, result is FP32
        logits = tl.dot(q_block, tl.trans(k_block))
        logits = tl.where(mask_t[None, :], logits, -float("inf"))

        # Online Softmax update
        m_curr = tl.max(logits, axis=1)
        m_new = tl.maximum(m_i, m_curr)
        
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(logits - m_new[:, None])
        
        l_i = l_i * alpha + tl.sum(p, axis=1)
        
        # Load V-block: [BLOCK_M, D_HEAD]
        v_ptrs = v_ptr_base + page_ids[:, None] * stride_v_p + d_offsets[None, :] * stride_v_d
        v_block = tl.load(v_ptrs, mask=mask_t[:, None], other=0.0)
        
        # Update numerator: acc = acc * alpha + p @ v
        acc = acc * alpha[:, None]
        # Cast p back to BF16 for the dot product with v_block (BF16)
        acc = tl.dot(p.to(tl.bfloat16), v_block, acc=acc)
        
        m_i = m_new

    # Final normalization
    acc = acc / l_i[:, None]
    
    # Store Output
    o_base = output_ptr + b * stride_o_b + (kv_h * GQA_RATIO) * stride_o_h
    o_ptrs = o_base + h_offsets[:, None] * stride_o_h + d_offsets[None, :] * stride_o_d
    tl.store(o_ptrs, acc.to(tl.bfloat16))

    # Store Log-Sum-Exp (LSE)
    lse_val = (m_i + tl.log(l_i)) * INV_LN2
    lse_base = lse_ptr + b * stride_lse_b + (kv_h * GQA_RATIO + h_offsets) * stride_lse_h
    tl.store(lse_base, lse_val)

def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale=None):
    batch_size, num_qo_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    gqa_ratio = num_qo_heads // num_kv_heads
    
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(head_dim)
    
    output = torch.empty_like(q)
    lse = torch.empty((batch_size, num_qo_heads), dtype=torch.float32, device=q.device)

    # Grid: One program per KV head per batch item
    grid = lambda META: (batch_size * num_kv_heads,)

    gqa_paged_decode_kernel_optimized[grid](
        q_ptr=q, 
        k_cache_ptr=k_cache, 
        v_cache_ptr=v_cache, 
        kv_indptr_ptr=kv_indptr, 
        kv_indices_ptr=kv_indices,
        sm_scale=float(sm_scale), 
        output_ptr=output, 
        lse_ptr=lse,
        batch_size=batch_size, 
        num_pages=k_cache.shape[0],
        num_kv_heads=num_kv_heads,
        stride_q_b=q.stride(0), stride_q_h=q.stride(1), stride_q_d=q.stride(2),
        stride_k_p=k_cache.stride(0), stride_k_s=k_cache.stride(1), stride_k_h=k_cache.stride(2), stride_k_d=k_cache.stride(3),
        stride_v_p=v_cache.stride(0), stride_v_s=v_cache.stride(1), stride_v_h=v_cache.stride(2), stride_v_d=v_cache.stride(3),
        stride_o_b=output.stride(0), stride_o_h=output.stride(1), stride_o_d=output.stride(2),
        stride_lse_b=lse.stride(0), stride_lse_h=lse.stride(1),
        D_HEAD=head_dim,
        GQA_RATIO=gqa_ratio,
    )

    return output, lse