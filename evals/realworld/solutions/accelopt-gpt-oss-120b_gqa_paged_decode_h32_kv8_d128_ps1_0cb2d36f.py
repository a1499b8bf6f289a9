import torch
import triton
import triton.language as tl
import math

@triton.autotune(
    configs=[
        # Optimized configurations following the plan
        # Small-block config for short sequences
        triton.Config({'BLOCK_M': 16, 'UNROLL_FACTOR': 1, 'STAGES_L': 2}, num_warps=2, num_stages=2),
        # Existing and refined configurations
        triton.Config({'BLOCK_M': 32, 'UNROLL_FACTOR': 1, 'STAGES_L': 2}, num_warps=4, num_stages=2),
        triton.Config({'BLOCK_M': 64, 'UNROLL_FACTOR': 1, 'STAGES_L': 4}, num_warps=4, num_stages=4),
        triton.Config({'BLOCK_M': 128, 'UNROLL_FACTOR': 1, 'STAGES_L': 8}, num_warps=4, num_stages=4),
        triton.Config({'BLOCK_M': 256, 'UNROLL_FACTOR': 1, 'STAGES_L': 8}, num_warps=8, num_stages=4),
        triton.Config({'BLOCK_M': 512, 'UNROLL_FACTOR': 1, 'STAGES_L': 4}, num_warps=8, num_stages=4),
        triton.Config({'BLOCK_M': 1024, 'UNROLL_FACTOR': 1, 'STAGES_L': 4}, num_warps=8, num_stages=4),
        # Larger blocks for longer sequences, more warps, and deeper pipelines
        triton.Config({'BLOCK_M': 2048, 'UNROLL_FACTOR': 2, 'STAGES_L': 8}, num_warps=16, num_stages=8),
        triton.Config({'BLOCK_M': 4096, 'UNROLL_FACTOR': 2, 'STAGES_L': 8}, num_warps=16, num_stages=8),
    ],
    key=['batch_size'],
)
@triton.jit
def gqa_paged_decode_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr,
    kv_indptr_ptr, kv_indices_ptr,
    output_ptr, lse_ptr,
    sm_scale,
    batch_size,
    NUM_QO_HEADS: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    GQA_RATIO: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_G: tl.constexpr,
    UNROLL_FACTOR: tl.constexpr,
    STAGES_L: tl.constexpr,
):
    # Program IDs: Each block handles one sequence and one group of GQA query heads
    batch_idx = tl.program_id(0)
    kv_head_idx = tl.program_id(1)

    if batch_idx >= batch_size:
        return

    # Constants for indexing
    d_idx = tl.arange(0, HEAD_DIM)
    g_idx = tl.arange(0, BLOCK_G)

    # Sequence bounds for paged KV cache
    seq_start = tl.load(kv_indptr_ptr + batch_idx)
    seq_end = tl.load(kv_indptr_ptr + batch_idx + 1)
    seq_len = seq_end - seq_start

    # Load group of queries: [BLOCK_G, HEAD_DIM]
    # Each group shares the same KV head in GQA
    q_group_base_ptr = (
        q_ptr + 
        batch_idx * NUM_QO_HEADS * HEAD_DIM + 
        (kv_head_idx * GQA_RATIO) * HEAD_DIM
    )
    q_ptrs = q_group_base_ptr + g_idx[:, None] * HEAD_DIM + d_idx[None, :]
    q_group = tl.load(q_ptrs)

    # Online softmax accumulators
    m_i = tl.full((BLOCK_G,), -float("inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_G,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_G, HEAD_DIM), dtype=tl.float32)

    # Paged cache strides
    stride_cache_p = NUM_KV_HEADS * HEAD_DIM
    stride_cache_h = HEAD_DIM

    if seq_len > 0:
        token_offsets_base = tl.arange(0, BLOCK_M)
        
        # Iterate over tokens in chunks of BLOCK_M
        # STAGES_L and UNROLL_FACTOR are used to deepen the pipeline and reduce branch overhead
        for token_start in tl.range(0, seq_len, BLOCK_M, num_stages=STAGES_L, loop_unroll_factor=UNROLL_FACTOR, flatten=True):
            token_offsets = token_start + token_offsets_base
            token_mask = token_offsets < seq_len
            
            # Load page indices for the current token block
            page_indices = tl.load(
                kv_indices_ptr + seq_start + token_offsets,
                mask=token_mask,
                other=0
            )

            # Load K and V from the paged cache: [BLOCK_M, HEAD_DIM]
            # Offsets are calculated relative to the shared KV head in the group
            offs_kv_base = kv_head_idx * stride_cache_h + d_idx[None, :]
            kv_ptrs = k_cache_ptr + page_indices[:, None] * stride_cache_p + offs_kv_base
            
            k_vals = tl.load(kv_ptrs, mask=token_mask[:, None], other=0.0)
            
            # Attention Logits: [BLOCK_G, HEAD_DIM] @ [HEAD_DIM, BLOCK_M] -> [BLOCK_G, BLOCK_M]
            logits = tl.dot(q_group.to(tl.bfloat16), tl.trans(k_vals).to(tl.bfloat16))
            logits *= sm_scale
            
            # Mask padding within the block
            logits = tl.where(token_mask[None, :], logits, -float("inf"))

            # Update Online Softmax state
            m_i_new = tl.maximum(m_i, tl.max(logits, axis=1))
            alpha = tl.exp(m_i - m_i_new)
            p = tl.exp(logits - m_i_new[:, None])
            
            l_i = l_i * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None]

            # Weighted sum for Output (V): [BLOCK_G, BLOCK_M] @ [BLOCK_M, HEAD_DIM] -> [BLOCK_G, HEAD_DIM]
            # Reuse kv_ptrs base for V-cache access
            v_ptrs = v_cache_ptr + page_indices[:, None] * stride_cache_p + offs_kv_base
            v_vals = tl.load(v_ptrs, mask=token_mask[:, None], other=0.0)
            acc = tl.dot(p.to(tl.bfloat16), v_vals.to(tl.bfloat16), acc=acc)

            m_i = m_i_new

        # Final normalization of output
        acc = acc / l_i[:, None]
        # Compute base-2 Log-Sum-Exp: log2(e) * (m_i + ln(l_i))
        lse_val = (m_i + tl.log(l_i)) * 1.44269504
    else:
        lse_val = tl.full((BLOCK_G,), -float("inf"), dtype=tl.float32)

    # Store final attention results: [BLOCK_G, HEAD_DIM]
    out_base_ptr = (
        output_ptr + 
        batch_idx * NUM_QO_HEADS * HEAD_DIM + 
        (kv_head_idx * GQA_RATIO) * HEAD_DIM
    )
    out_ptrs = out_base_ptr + g_idx[:, None] * HEAD_DIM + d_idx[None, :]
    tl.store(out_ptrs, acc.to(tl.bfloat16))

    # Store LSE: [BLOCK_G]
    lse_ptrs = lse_ptr + (batch_idx * NUM_QO_HEADS + kv_head_idx * GQA_RATIO) + g_idx
    tl.store(lse_ptrs, lse_val)

def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    # Dimensions
    batch_size, num_qo_heads, head_dim = q.shape
    num_pages, page_size, num_kv_heads, _ = k_cache.shape
    
    # Assertions for kernel support
    assert page_size == 1, "Currently only page_size=1 is supported."
    assert head_dim == 128
    assert num_qo_heads == 32
    assert num_kv_heads == 8
    
    gqa_ratio = num_qo_heads // num_kv_heads
    
    # Allocate outputs
    output = torch.empty_like(q)
    lse = torch.empty((batch_size, num_qo_heads), dtype=torch.float32, device=q.device)

    # Grid dimension: Sequence Batch x KV Head Groups
    grid = (batch_size, num_kv_heads)
    
    # Flatten cache for easier kernel indexing
    k_cache_flat = k_cache.view(num_pages, num_kv_heads, head_dim)
    v_cache_flat = v_cache.view(num_pages, num_kv_heads, head_dim)

    # Launch optimized GQA Paged Decode Kernel
    gqa_paged_decode_kernel[grid](
        q_ptr=q,
        k_cache_ptr=k_cache_flat,
        v_cache_ptr=v_cache_flat,
        kv_indptr_ptr=kv_indptr,
        kv_indices_ptr=kv_indices,
        output_ptr=output,
        lse_ptr=lse,
        sm_scale=sm_scale,
        batch_size=batch_size,
        NUM_QO_HEADS=num_qo_heads,
        NUM_KV_HEADS=num_kv_heads,
        HEAD_DIM=head_dim,
        GQA_RATIO=gqa_ratio,
        BLOCK_G=gqa_ratio,
    )
    
    return output, lse