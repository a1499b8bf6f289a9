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


@pytest.mark.parametrize("limit", [1 << 40, 1], ids=["copy", "fingerprint"])
def test_an_input_change_is_found_in_any_chunk(limit):
    """The judge keeps a copy of each input, or a keyed fingerprint of a large one (_kept), and
    compares a chunk at a time: a single changed bit anywhere is still a change, NaN payloads
    included."""
    from accelopt.tools.harness.correctness import Fingerprint
    from accelopt.tools.harness.correctness import identical as _same
    from accelopt.tools.harness.judge import _kept

    x = torch.randn(3, 1001)
    x[1, 7] = float("nan")
    before = _kept(torch, x, limit)
    assert isinstance(before, Fingerprint) == (limit == 1)
    assert before is not x and _same(torch, x, before, chunk=64)
    for where in (0, 1000, 3002):
        for bit in (1, 1 << 16, 1 << 31):  # the lowest mantissa bit, each 16-bit half's lowest, the sign
            changed = x.clone()
            flat = changed.view(-1).view(torch.int32)
            flat[where] ^= bit
            assert not _same(torch, changed, before, chunk=64) and not _same(torch, changed, before, chunk=1 << 20)
    assert not _same(torch, x.reshape(1001, 3), before)             # same values, another shape
    assert not _same(torch, x.double(), before)                      # same values, another dtype
    if limit > 1:
        assert _same(torch, x.t(), before.t(), chunk=100)            # views compare by their elements


def test_a_fingerprint_sees_two_changes_that_cancel_in_a_plain_sum():
    """Two words moved by +d and -d leave an unweighted sum as it was; the weights do not."""
    from accelopt.tools.harness.correctness import fingerprint, identical

    x = torch.arange(4096, dtype=torch.int16)
    before = fingerprint(torch, x, key=12345, chunk=1000)
    swapped = x.clone()
    swapped[[10, 3000]] = swapped[[3000, 10]]
    assert int(swapped.sum()) == int(x.sum()) and not identical(torch, swapped, before, chunk=1000)
    assert fingerprint(torch, x, key=12345, chunk=1000) == before              # the same key, the same sums
    assert fingerprint(torch, x, key=54321, chunk=1000).sums != before.sums    # another key, other weights
    odd = torch.arange(1001, dtype=torch.uint8)                                # an odd byte count: single bytes
    assert identical(torch, odd.clone(), fingerprint(torch, odd, key=1))
    odd_changed = odd.clone()
    odd_changed[1000] += 1
    assert not identical(torch, odd_changed, fingerprint(torch, odd, key=1))


def _rule_passes(rule, outs, refs) -> bool:
    try:
        rule(torch, outs, refs, "w")
    except Reject:
        return False
    return True


def _near_edge(out, ref, atol: float, rtol: float) -> bool:
    """Some element is non-finite, or within 1e-5 (relative) of its tolerance's edge: where the
    quick read may ask the rule instead of passing."""
    o, r = out.double().cpu(), ref.double().cpu()
    if not (torch.isfinite(o).all() and torch.isfinite(r).all()):
        return True
    edge = torch.maximum(torch.full_like(r, atol), rtol * r.abs())
    return bool((((o - r).abs() - edge).abs() <= 1e-5 * edge).any())


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_a_timed_call_s_quick_read_passes_only_what_the_rule_passes(dtype, device):
    """A timed call's outputs are read with `surely_passes` (no figures, float32 arithmetic), the
    rule itself only where it says no. Pass must mean pass: over draws at the tolerance's edge,
    with NaN and Inf on either side, under a matched ratio too, it never passes what the rule
    fails; and it passes everything the rule passes but outputs with an element at its edge
    (within the quick read's rounding margin) or non-finite, which go to the rule."""
    gen = torch.Generator().manual_seed(1)
    agreed = {True: 0, False: 0}
    for trial in range(300):
        ref = (torch.randn(64, generator=gen) * 4).to(dtype)
        atol, rtol = [(1e-2, 1e-2), (0.0, 1e-3), (1e-3, 0.0), (0.0, 0.0)][trial % 4]
        scale = torch.rand(64, generator=gen).double() * 2.5  # below, at and past the edge
        edge = torch.maximum(torch.full((64,), atol, dtype=torch.float64), rtol * ref.double().abs())
        out = (ref.double() + torch.where(torch.rand(64, generator=gen) < 0.5, 1, -1) * edge * scale).to(dtype)
        if trial % 3 == 0:
            out = torch.where(torch.rand(64, generator=gen) < 0.9, ref, out)  # most exact, a few off
        if trial % 5 == 0:
            out[3], ref[3] = float("nan"), float("nan")  # both NaN: equal
        if trial % 7 == 0:
            out[5] = float("inf") if trial % 2 else float("nan")  # non-finite where ref is finite
        if trial % 11 == 0:
            ref[6] = out[6] = float("-inf")
        out, ref = out.to(device), ref.to(device)  # on a GPU, as the judge reads timed calls
        for ratio in (None, 0.9):
            rule = evaluator("allclose", atol, rtol, ratio)
            verdict = _rule_passes(rule, [out], ref)
            quick = rule.surely_passes(torch, [out], ref)
            assert quick <= verdict, (trial, ratio)
            assert quick == verdict or _near_edge(out, ref, atol, rtol), (trial, ratio)
            agreed[verdict] += quick == verdict
    assert min(agreed.values()) > 50  # both outcomes drawn often, and agreed on


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_the_quick_read_never_passes_an_output_one_step_past_its_edge(dtype, device):
    """Outputs stepped one representable value at a time across the edge of each tolerance. The
    hard edges are tolerances a hair below a value the output can hold: float32 rounds such a
    tolerance up onto that value, so without its margin the quick read would pass an output the
    float64 rule fails."""
    def held(x: float) -> float:  # the nearest value of the output's dtype
        return torch.tensor(x, dtype=dtype).item()

    hair = 1 - 2.0 ** -26
    ulp_one = held(1.0 + 2.0 ** -6) - 1.0  # a step of the output's grid at 1.0
    cases = [(0.0, held(1e-3) * hair, 0.0),             # atol just below an output value
             (1.0, 1e-20, 8 * ulp_one * hair),          # rtol just below a step of 1.0
             (0.37, 1e-6, 1e-3), (250.0, 1e-2, 1e-2), (3.0, 1e-3, 0.0)]
    passed = failed = 0
    for value, atol, rtol in cases:
        ref = torch.tensor([value], dtype=dtype)
        out = torch.tensor([value + max(atol, rtol * abs(value))], dtype=dtype)
        for _ in range(6):  # back below the edge
            out = torch.nextafter(out, torch.full_like(out, -math.inf))
        for _ in range(12):  # and up past it, a step at a time
            rule = evaluator("allclose", atol, rtol)
            verdict = _rule_passes(rule, [out.to(device)], ref.to(device))
            assert rule.surely_passes(torch, [out.to(device)], ref.to(device)) <= verdict, (value, atol, rtol, out.item())
            passed, failed = passed + verdict, failed + (not verdict)
            out = torch.nextafter(out, torch.full_like(out, math.inf))
    assert passed and failed


def test_the_quick_read_leaves_what_it_cannot_read_to_the_rule():
    """Another count, shape or dtype, a description instead of a tensor, and outputs it has no
    fast arithmetic for are never passed by the quick read; nor is any rule but allclose."""
    ref = torch.randn(8)
    rule = evaluator("allclose", 1e-2, 1e-2)
    assert rule.surely_passes(torch, [ref.clone()], ref)
    assert not rule.surely_passes(torch, [ref.clone(), ref.clone()], ref)
    assert not rule.surely_passes(torch, [ref.clone()[:4]], ref)
    assert not rule.surely_passes(torch, [ref.double()], ref)
    assert not rule.surely_passes(torch, [{"not_a_tensor": "a list", "on": ""}], ref)
    assert not rule.surely_passes(torch, [7], ref)  # plain data a sandbox may send instead
    assert not rule.surely_passes(torch, [torch.arange(8)], torch.arange(8))
    assert not evaluator("relative_l2", 0, 1e-2).surely_passes(torch, [ref.clone()], ref)
