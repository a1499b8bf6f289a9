import torch
import triton
import triton.language as tl
import math

@triton.autotune(
    configs=[
        triton.Config({'BLOCK_M': 32, 'BLOCK_N': 32}, num_warps=4, num_stages=3),
        triton.Config({'BLOCK_M': 32, 'BLOCK_N': 64}, num_warps=4, num_stages=4),
        triton.Config({'BLOCK_M': 64, 'BLOCK_N': 32}, num_warps=4, num_stages=4),
        triton.Config({'BLOCK_M': 64, 'BLOCK_N': 64}, num_warps=8, num_stages=5),
        triton.Config({'BLOCK_M': 128, 'BLOCK_N': 64}, num_warps=8, num_stages=5),
        triton.Config({'BLOCK_M': 128, 'BLOCK_N': 128}, num_warps=8, num_stages=6),
        triton.Config({'BLOCK_M': 256, 'BLOCK_N': 64}, num_warps=8, num_stages=6),
        triton.Config({'BLOCK_M': 256, 'BLOCK_N': 128}, num_warps=8, num_stages=6),
    ],
    key=['total_q', 'max_q_len'],
)
@triton.jit
def _gqa_paged_prefill_causal_kernel(
    Q, K_cache, V_cache,
    QO_indptr, KV_indptr, KV_indices,
    sm_scale,
    Output, LSE,
    stride_q_total, stride_q_head, stride_q_dim,
    stride_k_page, stride_k_head, stride_k_dim,
    stride_v_page, stride_v_head, stride_v_dim,
    total_q, max_q_len,
    NUM_QO_HEADS: tl.constexpr, 
    NUM_KV_HEADS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
):
    # Map program IDs to batch index, query tile index, and KV head index.
    batch_idx = tl.program_id(0)
    tile_idx = tl.program_id(1)
    kv_head_idx = tl.program_id(2)

    # GQA ratio: each KV head is shared by multiple Query heads.
    GQA_RATIO: tl.constexpr = NUM_QO_HEADS // NUM_KV_HEADS
    qo_head_base = kv_head_idx * GQA_RATIO
    qo_head_range = tl.arange(0, GQA_RATIO)
    
    # Identify sequence-specific boundaries for both Query and KV indices.
    q_start_ptr = tl.load(QO_indptr + batch_idx)
    q_end_ptr = tl.load(QO_indptr + batch_idx + 1)
    q_len = q_end_ptr - q_start_ptr

    # Tile-level boundary check.
    tile_start_in_seq = tile_idx * BLOCK_M
    if tile_start_in_seq >= q_len:
        return

    kv_start = tl.load(KV_indptr + batch_idx)
    kv_end = tl.load(KV_indptr + batch_idx + 1)
    num_kv_tokens = kv_end - kv_start
    
    # Delta used for causal masking.
    delta = num_kv_tokens - q_len

    # Coordinate ranges for the query and dimensions.
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    
    q_idx_in_seq = tile_start_in_seq + offs_m
    mask_q = q_idx_in_seq < q_len
    q_global_idx = q_start_ptr + q_idx_in_seq

    # Load Query block without pre-scaling (Optimization Plan)
    q_ptr = Q + (q_global_idx[None, :, None] * stride_q_total + 
                 (qo_head_base + qo_head_range)[:, None, None] * stride_q_head + 
                 offs_d[None, None, :] * stride_q_dim)
    q_block = tl.load(q_ptr, mask=mask_q[None, :, None], other=0.0)

    # Online softmax accumulators.
    m_i = tl.full([GQA_RATIO, BLOCK_M], -float("inf"), dtype=tl.float32)
    l_i = tl.zeros([GQA_RATIO, BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([GQA_RATIO, BLOCK_M, HEAD_DIM], dtype=tl.float32)

    # Main loop over the KV cache. 
    for n_offset in tl.range(0, num_kv_tokens, BLOCK_N):
        offs_n = n_offset + tl.arange(0, BLOCK_N)
        mask_n = offs_n < num_kv_tokens
        
        # Paged KV access: load physical page indices.
        page_ids = tl.load(KV_indices + kv_start + offs_n, mask=mask_n, other=0)

        # Construct pointers for the gathered K and V tiles.
        k_ptr = K_cache + (page_ids[:, None] * stride_k_page + 
                           kv_head_idx * stride_k_head + 
                           offs_d[None, :] * stride_k_dim)
        v_ptr = V_cache + (page_ids[:, None] * stride_v_page + 
                           kv_head_idx * stride_v_head + 
                           offs_d[None, :] * stride_v_dim)
        
        k_block = tl.load(k_ptr, mask=mask_n[:, None], other=0.0)
        v_block = tl.load(v_ptr, mask=mask_n[:, None], other=0.0)

        # Compute Attention Scores (Logits) and fuse sm_scale.
        k_block_3d = tl.broadcast_to(tl.trans(k_block)[None, :, :], [GQA_RATIO, HEAD_DIM, BLOCK_N])
        # dot produces [GQA_RATIO, BLOCK_M, BLOCK_N] in FP32 accumulation.
        logits = tl.dot(q_block, k_block_3d) * sm_scale

        # Apply causal mask.
        causal_mask = offs_n[None, :] < (q_idx_in_seq[:, None] + delta + 1)
        total_mask = mask_q[:, None] & mask_n[None, :] & causal_mask
        logits = tl.where(total_mask[None, :, :], logits, -float("inf"))

        # Online Softmax update.
        m_i_next = tl.maximum(m_i, tl.max(logits, axis=2))
        p = tl.exp(logits - m_i_next[:, :, None])
        alpha = tl.exp(m_i - m_i_next)
        l_i_next = alpha * l_i + tl.sum(p, axis=2)

        # Update Attention output accumulator.
        acc = acc * alpha[:, :, None]
        v_block_3d = tl.broadcast_to(v_block[None, :, :], [GQA_RATIO, BLOCK_N, HEAD_DIM])
        acc = tl.dot(p.to(Q.dtype.element_ty), v_block_3d, acc=acc)

        m_i = m_i_next
        l_i = l_i_next

    # Final normalization of the output values.
    o = acc / l_i[:, :, None]
    
    # Store finalized Attention Output.
    out_ptr = Output + (q_global_idx[None, :, None] * stride_q_total + 
                        (qo_head_base + qo_head_range)[:, None, None] * stride_q_head + 
                        offs_d[None, None, :] * stride_q_dim)
    tl.store(out_ptr, o.to(Q.dtype.element_ty), mask=mask_q[None, :, None])

    # Store Log-Sum-Exp (LSE) in base-2.
    lse_val = (m_i + tl.log(l_i)) * 1.44269504 # log2(e)
    lse_ptr = LSE + q_global_idx[None, :] * NUM_QO_HEADS + (qo_head_base + qo_head_range)[:, None]
    tl.store(lse_ptr, lse_val, mask=mask_q[None, :])


def run(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, sm_scale=None):
    total_q, num_qo_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    batch_size = qo_indptr.shape[0] - 1
    
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(head_dim)

    # Pre-allocate output buffers.
    output = torch.empty_like(q)
    lse = torch.empty((total_q, num_qo_heads), device=q.device, dtype=torch.float32)

    if batch_size > 0:
        q_lens = qo_indptr[1:] - qo_indptr[:-1]
        max_q_len = int(torch.max(q_lens).item())
    else:
        max_q_len = 0
    
    if total_q == 0 or max_q_len == 0:
        return output, lse

    # Grid: Each sequence in batch, Query tiles, and shared KV heads.
    grid = lambda META: (
        batch_size,
        (max_q_len + META['BLOCK_M'] - 1) // META['BLOCK_M'],
        num_kv_heads,
    )

    _gqa_paged_prefill_causal_kernel[grid](
        q, k_cache, v_cache,
        qo_indptr, kv_indptr, kv_indices,
        sm_scale,
        output, lse,
        q.stride(0), q.stride(1), q.stride(2),
        k_cache.stride(0), k_cache.stride(2), k_cache.stride(3),
        v_cache.stride(0), v_cache.stride(2), v_cache.stride(3),
        total_q, max_q_len,
        NUM_QO_HEADS=num_qo_heads,
        NUM_KV_HEADS=num_kv_heads,
        HEAD_DIM=head_dim,
    )

    return output, lse