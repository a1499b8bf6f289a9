"""Stress draws: the task's own inputs pushed to where float arithmetic breaks, still inside the
reference's finite range (the judge's `Judge.stress`).

A task's draws (randn x 4 for softmax) may never reach where a numerical shortcut fails: a softmax
without its max subtraction overflows exp once a logit passes ~88, a one-pass variance cancels
once the mean is large against the spread. From one draw of the task's inputs, each plain float
input (float16/bfloat16/float32/float64, more than one value, not integer-valued, not rows of
probabilities) becomes, in turn for every such input at once:
- scaled by a power of two (exact) until its largest |value| is about MAGNITUDES[0];
- shifted by a power of two about SHIFT_SPREADS times its range (max - min);
- constant along its last dimension (each row its first value);
- one-hot along its last dimension (one value of MAGNITUDES[0] per row, the rest zero).
Integer inputs, fp8/fp4 and the inputs left alone above keep the task's values. The judge skips a
draw where the reference fails or its outputs are not finite (it is not defined there), and tries
the next magnitude of MAGNITUDES where a product of large inputs overflowed it.

Torch passed in, standard library only: the judge loads this file by path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The largest |value| of the scaled and one-hot draws: past exp's float32 overflow (~88.7) and
# float16's (~11), far inside every float width. A draw whose reference overflows (a product of
# two scaled inputs in float16) is tried again at the next, smaller magnitude.
MAGNITUDES = (1024.0, 128.0)
# The shift, in ranges (max - min of the input): large enough that a softmax without its max
# overflows (randn x 4 over a row of 37, a range of about 20, shifts by 1024) and that x^2 swamps
# the variance in a one-pass E[x^2] - E[x]^2, small enough that each float32 value keeps 18 of
# its 24 bits for the spread, so an honest float32 sum of a row still resolves it.
SHIFT_SPREADS = 64.0
BY_MAGNITUDE = {"scaled", "one-hot"}  # the kinds tried again at a smaller magnitude where the reference overflowed


@dataclass
class Draw:
    """One stress draw: its kind, its name in a verdict, its inputs, and which of them it changed."""
    kind: str
    label: str
    inputs: tuple
    changed: list[int]


def _float(torch, t) -> bool:
    return (isinstance(t, torch.Tensor) and t.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64)
            and t.dim() >= 1 and t.numel() > 1)


def _probabilities(torch, t) -> bool:
    """Rows of a distribution (all >= 0, each last-dimension row summing to 1): structure a kernel
    may rely on (a sampler need not renormalize), so such an input keeps the task's values."""
    if not bool((t >= 0).all()):
        return False
    sums = t.sum(dim=-1, dtype=torch.float32)
    return bool(torch.allclose(sums, torch.ones_like(sums), rtol=1e-2, atol=1e-2))


def stressable(torch, t) -> bool:
    """A plain float input: not an integer, fp8 or fp4 tensor, not a scalar, not integer-valued
    floats (lengths, positions), not rows of probabilities."""
    if not _float(torch, t) or not bool(torch.isfinite(t).all()):
        return False
    if bool((t == t.round()).all()):
        return False
    return not _probabilities(torch, t)


def _power_of_two(x: float) -> float:
    return 2.0 ** round(math.log2(x))


def scale_of(t, magnitude: float) -> float:
    """The power of two that brings t's largest |value| nearest `magnitude`; never below 1."""
    top = float(t.abs().max())
    return max(1.0, _power_of_two(magnitude / top)) if top > 0 else 1.0


def shift_of(torch, t) -> float:
    """A power of two about SHIFT_SPREADS times t's spread (its range)."""
    low, high = torch.aminmax(t)
    return _power_of_two(SHIFT_SPREADS * max(float(high) - float(low), 1e-3))


def constant_rows(t):
    """Each last-dimension row its first value, repeated: a variance of zero, a uniform softmax."""
    return t[..., :1].expand_as(t).clone()


def one_hot_rows(torch, t, magnitude: float, seed: int):
    """Each last-dimension row zero but for one value of `magnitude`, at a position drawn per row."""
    generator = torch.Generator(device=t.device).manual_seed(seed)
    rows = t.reshape(-1, t.shape[-1])
    where = torch.randint(0, rows.shape[1], (rows.shape[0], 1), generator=generator, device=t.device)
    return torch.zeros_like(rows).scatter_(1, where, magnitude).reshape(t.shape)


def chosen(torch, inputs: tuple) -> list[int]:
    """The inputs a stress draw changes: the plain float ones."""
    return [i for i, t in enumerate(inputs) if stressable(torch, t)]


def draws(torch, inputs: tuple, changed: list[int], seed: int, magnitude: float = MAGNITUDES[0],
          skip: set[str] | frozenset[str] = frozenset()):
    """The stress draws of one draw of the task's inputs, made one at a time (each holds a copy of
    the changed inputs: a KernelBench input is 6 GB), but for the kinds in `skip`. A draw that
    would change nothing is left out."""
    def replaced(make) -> tuple:
        return tuple(make(i, t) if i in changed else t for i, t in enumerate(inputs))

    rows = any(inputs[i].shape[-1] > 1 for i in changed)
    if "scaled" not in skip:
        factors = {i: scale_of(inputs[i], magnitude) for i in changed}
        if any(f > 1 for f in factors.values()):
            yield Draw("scaled", f"scaled by {_named(factors.values(), 'x')} (largest |value| about {magnitude:g})",
                       replaced(lambda i, t: t * factors[i]), changed)
    if "shifted" not in skip:
        shifts = {i: shift_of(torch, inputs[i]) for i in changed}
        yield Draw("shifted", f"shifted by {_named(shifts.values(), '+')}", replaced(lambda i, t: t + shifts[i]),
                   changed)
    if rows and "constant" not in skip:
        yield Draw("constant", "constant rows", replaced(lambda i, t: constant_rows(t)), changed)
    if rows and "one-hot" not in skip:
        yield Draw("one-hot", f"one-hot rows ({magnitude:g} in each)",
                   replaced(lambda i, t: one_hot_rows(torch, t, magnitude, seed * 1000 + i)), changed)


def _named(values, sign: str) -> str:
    """The factors or shifts of a draw, said once where every input got the same."""
    return "/".join(f"{sign}{v:g}" for v in sorted(set(values)))


def perturbed(torch, inputs: tuple, changed: list[int], seed: int) -> tuple:
    """The inputs with each changed value moved by about one unit in its own dtype's last place,
    in a direction drawn at random: what an honest kernel that rounds an intermediate to the
    input's dtype may lose. The reference's outputs on these measure how sensitive it is there."""
    out = list(inputs)
    for i in changed:
        t = inputs[i]
        generator = torch.Generator(device=t.device).manual_seed(seed * 1000 + i)
        signs = torch.empty_like(t).bernoulli_(0.5, generator=generator).mul_(2).sub_(1)
        out[i] = t * signs.mul_(torch.finfo(t.dtype).eps).add_(1)
    return tuple(out)
