"""The judge's correctness rules: one evaluator per rule, chosen by the task's `correctness` name.

An evaluator is called with the kernel's outputs and the reference's and raises `Reject` on the
first output that fails (its status and message are the verdict), or returns the worst errors of
the outputs, all passed (`max_abs_err`, `max_rel_err`: the result's figures). Every rule first
checks what makes outputs comparable at all (their count, plain tensors, shape, dtype, device);
then, per output:
- `allclose` (`AllClose`): an element fails only when both atol and rtol fail (KernelBench,
  FlashInfer-Bench); with a matched ratio (FlashInfer-Bench's rule for MoE, whose routing ties
  flip a few elements honestly) an output passes when at least that fraction of its elements do;
- `relative_l2` (`RelativeL2`): ||out - ref|| / ||ref|| must stay below rtol (AccelOpt on NKI);
- packed sub-byte floats (float4_e2m1fn_x2: torch has no arithmetic on them) are compared bit
  for bit whatever the task's rule (`ExactBytes`): the rounding is part of the answer.
Floating outputs are compared in float64 a chunk at a time (`errors`), and a NaN or Inf where the
reference is finite rejects under every rule. A rule's `surely_passes` is its quick pass, for the
judge's reads of timed calls (hundreds a check): True only where the rule itself would pass, with
no figures and in float32 where that is exact enough; anything else (an element near its edge
too) goes to the rule, so the verdict and its message are always the rule's.

`EVALUATORS` maps the task format's names (tools/task.py `correctness`) to the rules;
`for_request` is the rule a judge request carries. Standard library only, torch passed in: the
judge, run as a script, loads this file by path (it imports nothing of the accelopt package), and
`Reject` is the one exception class the judge turns into a verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar


class Reject(Exception):
    """A verdict against the kernel (or the task): its status, message and extra result fields."""

    def __init__(self, status: str, error: str, **extra):
        super().__init__(error)
        self.status, self.error, self.extra = status, error, extra


class UnknownCorrectness(ValueError):
    """A correctness name no evaluator is registered under."""


# Elements compared at a time: float64 copies of a chunk, not of a whole output, so a judge that
# holds a KernelBench-sized output (1.6e9 float32 values) does not need five times it again.
COMPARE_CHUNK = 1 << 24


@dataclass
class Errors:
    numel: int = 0
    bad: int = 0             # non-finite where the reference is finite
    failed: int = 0          # outside atol and rtol
    max_abs: float = 0.0
    max_rel: float = 0.0
    diff_sq: float = 0.0     # for relative L2
    ref_sq: float = 0.0


def errors(torch, o, r, atol: float, rtol: float, chunk: int = COMPARE_CHUNK) -> Errors:
    """Element-wise errors of o against r, in float64, a chunk at a time. Both NaN counts as equal.
    The figures stay on o's device until one read at the end: on a GPU each read is a
    synchronization, and a timed call's check is on the judge's clock (six reads a chunk cost
    more than the arithmetic on a 16M-element output)."""
    out = Errors(numel=o.numel())
    flat_o, flat_r = o.detach().reshape(-1), r.detach().reshape(-1)
    rows = []
    for start in range(0, out.numel, chunk):
        of, rf = widened(torch, flat_o[start:start + chunk]), widened(torch, flat_r[start:start + chunk])
        delta = of - rf
        diff = delta.abs()
        diff = torch.where(torch.isnan(of) & torch.isnan(rf), torch.zeros_like(diff), diff)
        size = rf.abs()
        bad, failed = _bad_and_failed(torch, of, rf, diff, size, atol, rtol)
        # NaN where the reference is NaN and the kernel is not: no error size to report (nan_to_num)
        max_abs = diff.nan_to_num(nan=0.0, posinf=math.inf).max()
        max_rel = (diff / size.clamp_min(1e-12)).nan_to_num(nan=0.0, posinf=math.inf).max()
        # counts below 2**53 are exact in float64
        rows.append(torch.stack([bad.double(), failed.double(), max_abs, max_rel, delta.square().sum(),
                                 rf.square().sum()]))
    for bad, failed, max_abs, max_rel, diff_sq, ref_sq in torch.stack(rows).tolist() if rows else []:
        out.bad += int(bad)
        out.failed += int(failed)
        out.max_abs, out.max_rel = max(out.max_abs, max_abs), max(out.max_rel, max_rel)
        out.diff_sq += diff_sq
        out.ref_sq += ref_sq
    return out


def _bad_and_failed(torch, of, rf, diff, size, atol: float, rtol: float):
    """The rule's two counts of a chunk, as device scalars: non-finite where the reference is finite,
    and outside both atol and rtol (`of`, `rf` in float64, `diff` = |of - rf|, `size` = |rf|; a NaN
    difference is never outside). One home for `errors` and the quick pass (`_unsure`)."""
    return (~torch.isfinite(of) & torch.isfinite(rf)).sum(), ((diff > atol) & (diff > rtol * size)).sum()


def widened(torch, t):
    """float64 for the comparison; fp8 goes through float32, which every fp8 cast supports."""
    if str(t.dtype).startswith("torch.float8_"):
        t = t.to(torch.float32)
    return t.detach().double()


def packed(t) -> bool:
    """Sub-byte floats packed two to a byte (float4_e2m1fn_x2): torch has no arithmetic on them."""
    return str(t.dtype).startswith("torch.float4_")


def bits(torch, t):
    """What may be compared exactly: the tensor itself, or a packed tensor's bytes."""
    return t.view(torch.uint8) if packed(t) else t


# A fingerprint's weights are drawn below this (and >= 1): a 16-bit word times a weight, summed
# over a chunk of COMPARE_CHUNK words, stays inside int64, so every sum is exact.
FINGERPRINT_WEIGHT = 1 << 20


@dataclass(frozen=True)
class Fingerprint:
    """What the judge keeps of an input too large to copy: its shape, dtype and two keyed
    weighted sums of its bytes (`fingerprint`). The key never leaves the judge, so a kernel cannot
    aim a change at a sum it leaves alone."""
    shape: tuple
    dtype: object
    key: int
    chunk: int  # the weights drawn depend on it: a tensor is checked in the chunks it was summed in
    sums: tuple[int, int]


def fingerprint(torch, t, key: int, chunk: int = COMPARE_CHUNK) -> Fingerprint:
    """Two sums of t's bytes as 16-bit words (single bytes where their count is odd), each word
    times a weight drawn in [1, FINGERPRINT_WEIGHT) from `key`, computed on t's own device a chunk
    at a time. A change of one word always changes both sums (its weights are not zero); changes
    to several cancel in one sum with probability below 2^-20, in both below 2^-40. On a GPU this
    reads the tensor about three times and holds no copy of it (6.4 GB on an H100: 0.12 s)."""
    flat = t.detach().reshape(-1).view(torch.uint8)
    try:
        words = flat.view(torch.int16)
    except RuntimeError:  # an odd byte count, or an odd offset into the storage
        words = flat
    generator = torch.Generator(device=words.device).manual_seed(key)
    sums = [0, 0]
    for start in range(0, words.numel(), chunk):
        part = words[start:start + chunk].to(torch.int64)
        for i in range(2):
            weights = torch.randint(1, FINGERPRINT_WEIGHT, part.shape, generator=generator,
                                    device=words.device, dtype=torch.int64)
            sums[i] += int(weights.mul_(part).sum())
    return Fingerprint(tuple(t.shape), t.dtype, key, chunk, (sums[0], sums[1]))


def identical(torch, now, before, chunk: int = COMPARE_CHUNK) -> bool:
    """Bit for bit (a NaN is unchanged if its bits are), a chunk at a time; `before` is a copy
    (on any device) or the `Fingerprint` of a large input."""
    if tuple(now.shape) != tuple(before.shape) or now.dtype != before.dtype:
        return False
    if isinstance(before, Fingerprint):
        return fingerprint(torch, now, before.key, before.chunk).sums == before.sums
    flat_now, flat_before = now.reshape(-1), before.reshape(-1)
    return all(torch.equal(flat_now[i:i + chunk].view(torch.uint8),
                           flat_before[i:i + chunk].to(flat_now.device).view(torch.uint8))
               for i in range(0, flat_now.numel(), chunk))


def finite_errors(torch, o, r, atol: float, rtol: float, tag: str) -> Errors:
    """`errors`, rejecting (`nan`) an output with a NaN or Inf where the reference is finite."""
    found = errors(torch, o, r, atol, rtol)
    if found.bad:
        raise Reject("nan", f"{tag}: {found.bad}/{found.numel} NaN/Inf values where the reference is "
                            "finite (unwritten outputs read as NaN: they are pre-filled with poison)")
    return found


@dataclass(frozen=True)
class Evaluator:
    """One correctness rule with its tolerances; `ratio` (allclose only: the task format refuses it
    with another rule) is the fraction of an output's elements that must pass, None: every one."""

    atol: float = 0.0
    rtol: float = 0.0
    ratio: float | None = None
    name: ClassVar[str]

    def __call__(self, torch, outs, refs, where: str) -> dict[str, float]:
        """Raise Reject on the first failing output; return the worst errors of a passing call."""
        worst = {"max_abs_err": 0.0, "max_rel_err": 0.0}
        refs = list(refs) if isinstance(refs, (tuple, list)) else [refs]
        if len(outs) != len(refs):
            raise Reject("shape_mismatch", f"{where}: returned {len(outs)} outputs, expected {len(refs)}")
        for i, (o, r) in enumerate(zip(outs, refs)):
            tag = f"{where} output {i}"
            comparable(o, r, tag)
            rule = EXACT_BYTES if packed(o) else self
            for key, value in rule.output(torch, o, r, tag).items():
                worst[key] = max(worst[key], value)
        return worst

    def output(self, torch, o, r, tag: str) -> dict[str, float]:
        """One output against the reference's (same shape, dtype and device): Reject, or its errors."""
        raise NotImplementedError

    def surely_passes(self, torch, outs, refs) -> bool:
        """True only where the rule would pass every output: the judge's read of a timed call. No
        figures, and float32 arithmetic for outputs of 32 bits or fewer (`_unsure`): about a third
        of the device work of the rule's float64 counts. False means "ask the rule", never "it fails"."""
        return False


def comparable(o, r, tag: str) -> None:
    """What every rule needs before it compares values: a plain tensor of the reference's shape,
    dtype and device type."""
    if isinstance(o, dict):
        raise Reject("shape_mismatch", f"{tag}: returned {o['not_a_tensor']}, expected a plain torch.Tensor")
    if tuple(o.shape) != tuple(r.shape):
        raise Reject("shape_mismatch", f"{tag}: shape {tuple(o.shape)}, expected {tuple(r.shape)}")
    if o.dtype != r.dtype:
        raise Reject("dtype_mismatch", f"{tag}: dtype {o.dtype}, expected {r.dtype}")
    if o.device.type != r.device.type:
        raise Reject("shape_mismatch", f"{tag}: on {o.device.type}, expected a tensor on {r.device.type}")


class AllClose(Evaluator):
    """An element fails only when it is outside both atol and rtol; the output fails when fewer
    than `ratio` of its elements pass (None: when any fails)."""

    name = "allclose"

    def output(self, torch, o, r, tag: str) -> dict[str, float]:
        found = finite_errors(torch, o, r, self.atol, self.rtol, tag)
        max_abs, max_rel = found.max_abs, found.max_rel
        failed, required = found.failed, 1.0 if self.ratio is None else self.ratio
        if failed and 1.0 - failed / found.numel < required:
            matched = "" if self.ratio is None else (f", {1.0 - failed / found.numel:.2%} matched where "
                                                     f"{self.ratio:.2%} is required")
            raise Reject("wrong_output",
                         f"{tag}: {failed}/{found.numel} elements outside atol={self.atol} rtol={self.rtol}{matched}; "
                         f"max abs err {max_abs:.3g}, max rel err {max_rel:.3g}",
                         max_abs_err=max_abs, max_rel_err=max_rel)
        return {"max_abs_err": max_abs, "max_rel_err": max_rel}

    def surely_passes(self, torch, outs, refs) -> bool:
        refs = list(refs) if isinstance(refs, (tuple, list)) else [refs]
        if len(outs) != len(refs):
            return False
        counts = []
        for o, r in zip(outs, refs):
            if type(o) is not torch.Tensor or type(r) is not torch.Tensor:
                return False  # a description, or whatever else a sandbox sent: the rule says what it is
            try:
                comparable(o, r, "")
            except Reject:
                return False
            if o.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
                return False  # the rule itself decides the rest (fp8, packed, integers)
            counts.append(_unsure(torch, o, r, self.atol, self.rtol, count_bad=self.ratio is not None))
        if not counts:
            return True
        found = torch.stack(counts).tolist()  # one read from the device
        required = 1.0 if self.ratio is None else self.ratio
        return all(not bad and (not unsure or 1.0 - unsure / o.numel() >= required)
                   for o, (unsure, bad) in zip(outs, found))


# The quick pass reads outputs of 32 bits or fewer in float32, a quarter of float64's bytes. Each of
# its steps rounds by at most 2**-24 relative, so both tolerances shrink by QUICK_MARGIN: an element
# that close to its edge goes to the rule, and none the rule fails is ever passed. With atol below
# QUICK_MIN_ATOL (0 included) a product in float32's subnormal range rounds by more than the margin,
# so those tasks are read in float64, as the rule reads them.
QUICK_MARGIN = 1e-6
QUICK_MIN_ATOL = 1e-30
FLOAT32_MAX = 3.4028234663852886e38


def _unsure(torch, o, r, atol: float, rtol: float, count_bad: bool, chunk: int = COMPARE_CHUNK):
    """[elements not surely inside the tolerances (at least the rule's failed count), elements
    non-finite where the reference is finite (the rule's `bad`)] as a device tensor. On the float32
    path `bad` is counted only with `count_bad` (a ratio): without one, an output passes only with
    no unsure element, and then it has no bad one either."""
    flat_o, flat_r = o.detach().reshape(-1), r.detach().reshape(-1)
    total = torch.zeros(2, dtype=torch.int64, device=o.device)
    narrow = o.element_size() <= 4 and atol >= QUICK_MIN_ATOL
    for start in range(0, flat_o.numel(), chunk):
        part_o, part_r = flat_o[start:start + chunk], flat_r[start:start + chunk]
        if narrow:
            of, rf = part_o.float(), part_r.float()
            diff = torch.sub(of, rf).abs_()  # a new tensor: never the output or the reference
            # inside atol or rtol; a NaN anywhere, Inf in the output, or an overflow is not inside
            limit = rf.abs().mul_(rtol * (1 - QUICK_MARGIN)).clamp_(atol * (1 - QUICK_MARGIN), FLOAT32_MAX)
            total[0] += part_o.numel() - torch.count_nonzero(diff <= limit)
            if count_bad:
                total[1] += (~torch.isfinite(part_o) & torch.isfinite(part_r)).sum()
        else:  # float64 arithmetic, the rule's own counts (`_bad_and_failed`)
            of, rf = part_o.double(), part_r.double()
            diff = (of - rf).abs_()
            bad, failed = _bad_and_failed(torch, of, rf, diff, rf.abs(), atol, rtol)
            total[0] += failed
            total[1] += bad
    return total


class RelativeL2(Evaluator):
    """||out - ref|| / ||ref|| (over the whole output) must not exceed rtol; atol is not used."""

    name = "relative_l2"

    def output(self, torch, o, r, tag: str) -> dict[str, float]:
        found = finite_errors(torch, o, r, self.atol, self.rtol, tag)
        rel_l2 = math.sqrt(found.diff_sq) / max(math.sqrt(found.ref_sq), 1e-30)
        if rel_l2 > self.rtol:
            raise Reject("wrong_output", f"{tag}: relative L2 error {rel_l2:.3g} above {self.rtol}", max_rel_err=rel_l2)
        return {"max_rel_err": rel_l2}


class ExactBytes(Evaluator):
    """Every byte as the reference's: the rule for packed sub-byte floats, under any task rule."""

    name = "exact_bytes"

    def output(self, torch, o, r, tag: str) -> dict[str, float]:
        differ = bits(torch, o) != bits(torch, r)
        if bool(differ.any()):
            raise Reject("wrong_output", f"{tag}: {int(differ.sum())}/{differ.numel()} bytes of packed {o.dtype} "
                                         "differ from the reference (packed fp4 is compared exactly)")
        return {}


EXACT_BYTES = ExactBytes()

# The task format's `correctness` names (tools/task.py) and their rules.
EVALUATORS: dict[str, type[Evaluator]] = {rule.name: rule for rule in (AllClose, RelativeL2)}


def evaluator(name: str, atol: float, rtol: float, ratio: float | None = None) -> Evaluator:
    """The rule registered as `name`, with its tolerances; UnknownCorrectness for a name without one."""
    rule = EVALUATORS.get(name)
    if rule is None:
        raise UnknownCorrectness(f"no correctness rule named {name!r}; the rules are: {', '.join(EVALUATORS)}")
    return rule(atol, rtol, ratio)


def for_request(req: dict) -> Evaluator:
    """The task's rule as a judge request carries it (`correctness`, allclose where it names none;
    `atol`, `rtol`, `required_matched_ratio`)."""
    return evaluator(req.get("correctness") or "allclose", req["atol"], req["rtol"], req.get("required_matched_ratio"))
