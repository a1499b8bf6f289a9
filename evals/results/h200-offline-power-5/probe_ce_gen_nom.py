import torch
import triton
import triton.language as tl

# columns of a row a program of the parts kernel walks (the split-row rewrite); the tuner moves it
PART_BLOCK = 16384


@triton.jit
def cross_entropy_kernel_parts(logits_ptr, labels_ptr, loss_ptr, vocab, BLOCK: tl.constexpr, _split_buf, _split_parts, PART_BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = logits_ptr + row.to(tl.int64) * vocab
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    _row_max_run = float('-inf')
    _split_cols = tl.cdiv(tl.cdiv(vocab - 0, _split_parts), BLOCK) * BLOCK
    _split_lo = 0 + tl.program_id(1) * _split_cols
    _pf0_first_cols = _split_lo + tl.arange(0, BLOCK)
    _pf0_0 = tl.load(base + _pf0_first_cols, mask=tl.where(_split_lo < tl.minimum(_split_lo + _split_cols, vocab), _pf0_first_cols < vocab, False), other=-float('inf'))
    for start in range(_split_lo, tl.minimum(_split_lo + _split_cols, vocab), BLOCK):
        _pf0_0_now = _pf0_0
        _pf0_next_cols = start + BLOCK + tl.arange(0, BLOCK)
        _pf0_0 = tl.load(base + _pf0_next_cols, mask=tl.where(start + BLOCK < tl.minimum(_split_lo + _split_cols, vocab), _pf0_next_cols < vocab, False), other=-float('inf'))
        cols = start + tl.arange(0, BLOCK)
        x = _pf0_0_now.to(tl.float32)
        _row_max_prev = _row_max_run
        _row_max_run = tl.maximum(_row_max_run, tl.max(x, 0))
        _row_max_shift = tl.where(_row_max_run == float('-inf'), 0.0, _row_max_run)
        acc = acc * tl.exp(_row_max_prev - _row_max_shift) + tl.exp(x - _row_max_shift)
    tl.store(_split_buf + (tl.program_id(0) * _split_parts + tl.program_id(1)) * 2 + 0, _row_max_run)
    tl.store(_split_buf + (tl.program_id(0) * _split_parts + tl.program_id(1)) * 2 + 1, tl.sum(acc, 0))


@triton.jit
def cross_entropy_kernel(logits_ptr, labels_ptr, loss_ptr, vocab, BLOCK: tl.constexpr, _split_buf, _split_parts, PARTS_P2: tl.constexpr):
    row = tl.program_id(0)
    base = logits_ptr + row.to(tl.int64) * vocab
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    _row_max_run = float('-inf')
    _split_at = tl.arange(0, PARTS_P2)
    _split_in = _split_at < _split_parts
    _split_slot = (tl.program_id(0) * _split_parts + _split_at) * 2
    _split__row_max_run_parts = tl.load(_split_buf + _split_slot + 0, mask=_split_in, other=float('-inf'))
    _split_acc_parts = tl.load(_split_buf + _split_slot + 1, mask=_split_in, other=0.0)
    _split__row_max_run = tl.max(_split__row_max_run_parts, 0)
    _split_acc = tl.sum(_split_acc_parts * tl.exp(tl.where(_split__row_max_run_parts == float('-inf'), 0.0, _split__row_max_run_parts) - tl.where(_split__row_max_run == float('-inf'), 0.0, _split__row_max_run)), 0)
    row_max = _split__row_max_run
    label = tl.load(labels_ptr + row)
    target = tl.load(base + label).to(tl.float32)
    tl.store(loss_ptr + row, tl.log(_split_acc) + row_max - target)


def run(logits, labels):
    logits = logits.contiguous()
    tokens, vocab = logits.shape
    loss = torch.empty(tokens, dtype=torch.float32, device=logits.device)
    _split_parts = triton.cdiv((vocab), PART_BLOCK)
    _split_buf = torch.empty((tokens) * _split_parts * 2, dtype=torch.float32, device=(logits).device)
    cross_entropy_kernel_parts[((tokens), _split_parts)](logits, labels, loss, vocab, BLOCK=1024, num_warps=2, _split_buf=_split_buf, _split_parts=_split_parts, PART_BLOCK=PART_BLOCK)
    cross_entropy_kernel[((tokens),)](logits, labels, loss, vocab, BLOCK=1024, num_warps=2, _split_buf=_split_buf, _split_parts=_split_parts, PARTS_P2=triton.next_power_of_2(_split_parts))
    return loss
