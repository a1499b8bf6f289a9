"""The judge's element-wise comparison runs a chunk at a time (a KernelBench level-1 output is
1.6e9 float32 values; float64 copies of whole outputs ran an 80 GB GPU out of memory). Chunked
errors must be the errors of the whole tensor."""

import math

import pytest
import torch

from accelopt.tools.harness.correctness import Reject, evaluator
from accelopt.tools.harness.correctness import errors as _errors


def _compare(torch, outs, refs, atol: float, rtol: float, where: str, mode: str = "allclose",
             ratio: float | None = None) -> dict:
    """The judge's comparison: the rule named `mode` with these tolerances, applied to `outs`."""
    return evaluator(mode, atol, rtol, ratio)(torch, outs, refs, where)


def _outputs():
    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(1000, generator=gen)
    out = ref + 1e-3 * torch.randn(1000, generator=gen)
    out[10], ref[10] = float("nan"), float("nan")   # both NaN: equal
    out[500] += 1.0                                    # one element far off
    return out, ref


def test_chunked_errors_are_the_whole_tensors_errors():
    out, ref = _outputs()
    whole = _errors(torch, out, ref, 1e-2, 1e-2, chunk=1 << 30)
    for chunk in (1, 7, 333):
        assert _errors(torch, out, ref, 1e-2, 1e-2, chunk=chunk).failed == whole.failed == 1
        got = _errors(torch, out, ref, 1e-2, 1e-2, chunk=chunk)
        assert got.max_abs == whole.max_abs and got.max_rel == whole.max_rel and got.bad == whole.bad == 0
    o, r = out.double(), ref.double()
    assert whole.max_abs == pytest.approx(float((o - r).abs().nan_to_num(0).max()))
    keep = ~torch.isnan(r)
    assert math.sqrt(_errors(torch, out[keep], ref[keep], 0, 0, chunk=7).diff_sq) == pytest.approx(
        float((o[keep] - r[keep]).norm()))


def test_a_nan_where_the_reference_is_finite_is_found_in_any_chunk():
    out, ref = _outputs()
    out[999] = float("nan")
    with pytest.raises(Reject, match="1/1000 NaN/Inf values") as caught:
        _compare(torch, [out], ref, 1e-2, 1e-2, "w")
    assert caught.value.status == "nan"
    with pytest.raises(Reject, match="1/1000 elements outside atol"):
        _compare(torch, [_outputs()[0]], _outputs()[1], 1e-2, 1e-2, "w")


def test_an_input_change_is_found_in_any_chunk_and_against_a_host_copy():
    """The judge keeps large inputs' copies on the host (_kept) and compares them a chunk at a
    time (_same): a single changed bit anywhere is still a change, NaN payloads included."""
    from accelopt.tools.harness.correctness import identical as _same
    from accelopt.tools.harness.judge import _kept

    x = torch.randn(3, 1001)
    x[1, 7] = float("nan")
    before = _kept(x)
    assert before is not x and _same(torch, x, before, chunk=64)
    for where in (0, 1000, 3002):
        changed = x.clone()
        flat = changed.view(-1).view(torch.int32)
        flat[where] ^= 1  # the lowest mantissa bit
        assert not _same(torch, changed, before, chunk=64) and not _same(torch, changed, before, chunk=1 << 20)
    assert not _same(torch, x.reshape(1001, 3), before)             # same values, another shape
    assert not _same(torch, x.double(), before)                      # same values, another dtype
    assert _same(torch, x.t(), before.t(), chunk=100)                # views compare by their elements
