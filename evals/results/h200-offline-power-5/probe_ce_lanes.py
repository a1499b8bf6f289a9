import torch
import triton
import triton.language as tl


@triton.jit
def ce_kernel(logits_ptr, labels_ptr, loss_ptr, vocab, BLOCK: tl.constexpr):
    # per-lane running maxima: no cross-warp reduction inside the loop, two exponentials an element
    row = tl.program_id(0)
    base = logits_ptr + row.to(tl.int64) * vocab
    m = tl.full([BLOCK], -float("inf"), dtype=tl.float32)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    cols0 = tl.arange(0, BLOCK)
    nxt = tl.load(base + cols0, mask=cols0 < vocab, other=-float("inf"))
    for start in range(0, vocab, BLOCK):
        x = nxt.to(tl.float32)
        ncols = start + BLOCK + tl.arange(0, BLOCK)
        nxt = tl.load(base + ncols, mask=ncols < vocab, other=-float("inf"))
        m_new = tl.maximum(m, x)
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        acc = acc * tl.exp(m - shift) + tl.exp(x - shift)
        m = m_new
    row_max = tl.max(m, 0)
    total = tl.sum(acc * tl.exp(m - row_max), 0)
    label = tl.load(labels_ptr + row)
    target = tl.load(base + label).to(tl.float32)
    tl.store(loss_ptr + row, tl.log(total) + row_max - target)


def run(logits, labels):
    logits = logits.contiguous()
    tokens, vocab = logits.shape
    loss = torch.empty(tokens, dtype=torch.float32, device=logits.device)
    ce_kernel[(tokens,)](logits, labels, loss, vocab, BLOCK=2048, num_warps=4)
    return loss
