import torch
import triton
import triton.language as tl


@triton.jit
def cross_entropy_kernel(logits_ptr, labels_ptr, loss_ptr, vocab, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = logits_ptr + row.to(tl.int64) * vocab
    m = tl.full([BLOCK], -float('inf'), dtype=tl.float32)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    _row_max_run = float('-inf')
    _pf0_first_cols = 0 + tl.arange(0, BLOCK)
    _pf0_0 = tl.load(base + _pf0_first_cols, mask=tl.where(0 < vocab, _pf0_first_cols < vocab, False), other=-float('inf'))
    for start in range(0, vocab, BLOCK):
        _pf0_0_now = _pf0_0
        _pf0_next_cols = start + BLOCK + tl.arange(0, BLOCK)
        _pf0_0 = tl.load(base + _pf0_next_cols, mask=tl.where(start + BLOCK < vocab, _pf0_next_cols < vocab, False), other=-float('inf'))
        cols = start + tl.arange(0, BLOCK)
        x = _pf0_0_now.to(tl.float32)
        _row_max_prev = _row_max_run
        _row_max_run = tl.maximum(_row_max_run, tl.max(x, 0))
        _row_max_shift = tl.where(_row_max_run == float('-inf'), 0.0, _row_max_run)
        acc = acc * tl.exp(_row_max_prev - _row_max_shift) + tl.exp(x - _row_max_shift)
    row_max = _row_max_run
    label = tl.load(labels_ptr + row)
    target = tl.load(base + label).to(tl.float32)
    tl.store(loss_ptr + row, tl.log(tl.sum(acc, axis=0)) + row_max - target)


def run(logits, labels):
    logits = logits.contiguous()
    tokens, vocab = logits.shape
    loss = torch.empty(tokens, dtype=torch.float32, device=logits.device)
    cross_entropy_kernel[(tokens,)](logits, labels, loss, vocab, BLOCK=2048, num_warps=4, num_stages=6)
    return loss
