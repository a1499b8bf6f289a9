import torch
import triton
import triton.language as tl

SPLIT = 4


@triton.jit
def ce_partial(logits_ptr, pmax_ptr, psum_ptr, vocab, chunk, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    # program (row, part): one-pass online softmax over its part of the row, next chunk prefetched
    row = tl.program_id(0)
    part = tl.program_id(1)
    base = logits_ptr + row.to(tl.int64) * vocab
    lo = part * chunk
    hi = tl.minimum(lo + chunk, vocab)
    run_max = float("-inf")
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    cols0 = lo + tl.arange(0, BLOCK)
    nxt = tl.load(base + cols0, mask=cols0 < hi, other=-float("inf"))
    for start in range(lo, hi, BLOCK):
        x = nxt.to(tl.float32)
        ncols = start + BLOCK + tl.arange(0, BLOCK)
        nxt = tl.load(base + ncols, mask=ncols < hi, other=-float("inf"))
        prev = run_max
        run_max = tl.maximum(run_max, tl.max(x, 0))
        shift = tl.where(run_max == float("-inf"), 0.0, run_max)
        acc = acc * tl.exp(prev - shift) + tl.exp(x - shift)
    tl.store(pmax_ptr + row * SPLIT + part, run_max)
    tl.store(psum_ptr + row * SPLIT + part, tl.sum(acc, 0))


@triton.jit
def ce_combine(logits_ptr, labels_ptr, loss_ptr, pmax_ptr, psum_ptr, vocab, SPLIT: tl.constexpr):
    row = tl.program_id(0)
    parts = tl.arange(0, SPLIT)
    pm = tl.load(pmax_ptr + row * SPLIT + parts)
    ps = tl.load(psum_ptr + row * SPLIT + parts)
    row_max = tl.max(pm, 0)
    total = tl.sum(ps * tl.exp(pm - row_max), 0)
    label = tl.load(labels_ptr + row)
    target = tl.load(logits_ptr + row.to(tl.int64) * vocab + label).to(tl.float32)
    tl.store(loss_ptr + row, tl.log(total) + row_max - target)


def run(logits, labels):
    logits = logits.contiguous()
    tokens, vocab = logits.shape
    loss = torch.empty(tokens, dtype=torch.float32, device=logits.device)
    pmax = torch.empty((tokens, SPLIT), dtype=torch.float32, device=logits.device)
    psum = torch.empty((tokens, SPLIT), dtype=torch.float32, device=logits.device)
    BLOCK = 2048
    chunk = triton.cdiv(triton.cdiv(vocab, SPLIT), BLOCK) * BLOCK
    ce_partial[(tokens, SPLIT)](logits, pmax, psum, vocab, chunk, SPLIT=SPLIT, BLOCK=BLOCK, num_warps=4)
    ce_combine[(tokens,)](logits, labels, loss, pmax, psum, vocab, SPLIT=SPLIT, num_warps=1)
    return loss
