import torch
import triton
import triton.language as tl

# rows of the grid's second axis a program takes as a tile (the axis-tile rewrite); the tuner moves it
AXIS1_GROUP = 8


# The fused-launch rewrite's recorder and joiner: launches of one kernel recorded as written, then
# made as one where that changes no result (policies/fused_launches.py in accelopt).
_fused_GRID_LIMITS = (2**31 - 1, 65535, 65535)


class _fused_LaunchLater:
    """`later[grid](*args, **kwargs)`: a launch as written, recorded to be made with others:
    (grid, args, kwargs, runtime arguments, constexprs, launch options)."""

    def __init__(self, bind):
        self.bind = bind

    def __getitem__(self, grid):
        return lambda *args, **kwargs: (tuple(grid), args, kwargs, *self.bind(*args, **kwargs))


def _fused_span(value):
    """The bytes a tensor argument covers, [start, end); None for anything else or an empty tensor.
    (Read on every call: kept to a few attribute reads for the contiguous tensors kernels take.)"""
    nbytes = getattr(value, "nbytes", None)
    if not nbytes or not hasattr(value, "data_ptr"):
        return None
    start = value.data_ptr()
    if value.is_contiguous():
        return start, start + nbytes
    last = sum((size - 1) * stride for size, stride in zip(value.shape, value.stride()))
    return start, start + (last + 1) * value.element_size()


def _fused_joined(records, written):
    """One launch for the recorded launches of a kernel: (grid, runtime arguments in launch order,
    where launches 2.. start on the joined last axis, constexprs, options); None where they must be
    made one by one: other constexprs, options or extents on the other axes, a joined axis past
    CUDA's limit, or a tensor one launch may write (`written`: positions among its runtime
    arguments) overlapping any tensor of another launch."""
    grid, _, _, _, constexprs, options = records[0]
    axis = len(grid) - 1
    for other in records[1:]:
        if len(other[0]) != axis + 1 or other[0][:axis] != grid[:axis] or other[4] != constexprs                 or other[5] != options:
            return None
    sizes = [r[0][axis] for r in records]
    total = sum(sizes)
    if total > _fused_GRID_LIMITS[axis]:
        return None
    spans = [[_fused_span(value) for value in r[3]] for r in records] if written else []
    for i, mine in enumerate(spans):
        for w in (mine[p] for p in written):
            if w is not None and any(s is not None and w[0] < s[1] and s[0] < w[1]
                                     for j, theirs in enumerate(spans) if j != i for s in theirs):
                return None
    starts, at = [], 0
    for size in sizes[:-1]:
        at += size
        starts.append(at)
    return (*grid[:axis], total), [value for r in records for value in r[3]], starts, constexprs, options


@triton.jit
def rope_kernel(x_ptr, out_ptr, pos_ptr, cache_ptr, n_heads, HALF: tl.constexpr, _axis1_total, AXIS1_GROUP: tl.constexpr):
    token = tl.program_id(0)
    head = tl.program_id(1) * AXIS1_GROUP + tl.arange(0, AXIS1_GROUP)[:, None]
    _axis1_mask = head < _axis1_total
    offs = tl.arange(0, HALF)[None, :]
    pos = tl.load(pos_ptr + token)
    cos = tl.load(cache_ptr + pos * 2 * HALF + offs)
    sin = tl.load(cache_ptr + pos * 2 * HALF + HALF + offs)
    base = (token * n_heads + head) * 2 * HALF
    x1 = tl.load(x_ptr + base + offs, mask=_axis1_mask).to(tl.float32)
    x2 = tl.load(x_ptr + base + HALF + offs, mask=_axis1_mask).to(tl.float32)
    tl.store(out_ptr + base + offs, (x1 * cos - x2 * sin).to(out_ptr.dtype.element_ty), mask=_axis1_mask)
    tl.store(out_ptr + base + HALF + offs, (x2 * cos + x1 * sin).to(out_ptr.dtype.element_ty), mask=_axis1_mask)


@triton.jit
def rope_kernel_fused_2(x_ptr, out_ptr, pos_ptr, cache_ptr, n_heads, _axis1_total, x_ptr_fused_1, out_ptr_fused_1, pos_ptr_fused_1, cache_ptr_fused_1, n_heads_fused_1, _axis1_total_fused_1, _fused_start_1, HALF: tl.constexpr, AXIS1_GROUP: tl.constexpr):
    _fused_pid = tl.program_id(1)
    if _fused_pid < _fused_start_1:
        token = tl.program_id(0)
        head = tl.program_id(1) * AXIS1_GROUP + tl.arange(0, AXIS1_GROUP)[:, None]
        _axis1_mask = head < _axis1_total
        offs = tl.arange(0, HALF)[None, :]
        pos = tl.load(pos_ptr + token)
        cos = tl.load(cache_ptr + pos * 2 * HALF + offs)
        sin = tl.load(cache_ptr + pos * 2 * HALF + HALF + offs)
        base = (token * n_heads + head) * 2 * HALF
        x1 = tl.load(x_ptr + base + offs, mask=_axis1_mask).to(tl.float32)
        x2 = tl.load(x_ptr + base + HALF + offs, mask=_axis1_mask).to(tl.float32)
        tl.store(out_ptr + base + offs, (x1 * cos - x2 * sin).to(out_ptr.dtype.element_ty), mask=_axis1_mask)
        tl.store(out_ptr + base + HALF + offs, (x2 * cos + x1 * sin).to(out_ptr.dtype.element_ty), mask=_axis1_mask)
    else:
        token_fused_1 = tl.program_id(0)
        head_fused_1 = (tl.program_id(1) - _fused_start_1) * AXIS1_GROUP + tl.arange(0, AXIS1_GROUP)[:, None]
        _axis1_mask_fused_1 = head_fused_1 < _axis1_total_fused_1
        offs_fused_1 = tl.arange(0, HALF)[None, :]
        pos_fused_1 = tl.load(pos_ptr_fused_1 + token_fused_1)
        cos_fused_1 = tl.load(cache_ptr_fused_1 + pos_fused_1 * 2 * HALF + offs_fused_1)
        sin_fused_1 = tl.load(cache_ptr_fused_1 + pos_fused_1 * 2 * HALF + HALF + offs_fused_1)
        base_fused_1 = (token_fused_1 * n_heads_fused_1 + head_fused_1) * 2 * HALF
        x1_fused_1 = tl.load(x_ptr_fused_1 + base_fused_1 + offs_fused_1, mask=_axis1_mask_fused_1).to(tl.float32)
        x2_fused_1 = tl.load(x_ptr_fused_1 + base_fused_1 + HALF + offs_fused_1, mask=_axis1_mask_fused_1).to(tl.float32)
        tl.store(out_ptr_fused_1 + base_fused_1 + offs_fused_1, (x1_fused_1 * cos_fused_1 - x2_fused_1 * sin_fused_1).to(out_ptr_fused_1.dtype.element_ty), mask=_axis1_mask_fused_1)
        tl.store(out_ptr_fused_1 + base_fused_1 + HALF + offs_fused_1, (x2_fused_1 * cos_fused_1 + x1_fused_1 * sin_fused_1).to(out_ptr_fused_1.dtype.element_ty), mask=_axis1_mask_fused_1)


def _rope_kernel_arguments(x_ptr, out_ptr, pos_ptr, cache_ptr, n_heads, HALF, _axis1_total, AXIS1_GROUP, **options):
    """A launch of rope_kernel as Triton binds it: (runtime arguments, constexprs, launch options)."""
    return (x_ptr, out_ptr, pos_ptr, cache_ptr, n_heads, _axis1_total), {'HALF': HALF, 'AXIS1_GROUP': AXIS1_GROUP}, options


_rope_kernel_later = _fused_LaunchLater(_rope_kernel_arguments)


def _launch_rope_kernel(*records):
    """Launches of rope_kernel recorded by _rope_kernel_later, made as one launch where they can be,
    else one by one as written."""
    joined = _fused_joined(records, written=())
    if joined is not None and len(records) == 2:
        grid, runtime, starts, constexprs, options = joined
        # bound before the call: the tuner's launch keywords are the recorded launches'
        launch = rope_kernel_fused_2[grid]
        launch(*runtime, *starts, **constexprs, **options)
        return
    for grid, args, kwargs, *_ in records:
        launch = rope_kernel[grid]
        launch(*args, **kwargs)


def _apply_deferred(x, positions, cos_sin_cache):
    x = x.contiguous()
    tokens, heads, dim = x.shape
    out = torch.empty_like(x)
    _fused_launch = _rope_kernel_later[(tokens, triton.cdiv(heads, AXIS1_GROUP))](x, out, positions, cos_sin_cache, heads, HALF=dim // 2, num_warps=1, _axis1_total=heads, AXIS1_GROUP=AXIS1_GROUP)
    return out, _fused_launch


def run(q, k, positions, cos_sin_cache):
    cache = cos_sin_cache.contiguous()
    _fused_out0, _fused_launch0 = _apply_deferred(q, positions, cache)
    _fused_out1, _fused_launch1 = _apply_deferred(k, positions, cache)
    _launch_rope_kernel(_fused_launch0, _fused_launch1)
    return _fused_out0, _fused_out1
