"""The split-row rewrite (policies/split_rows.py): a one-row-per-program kernel whose one loop only
reduces its row is split into parts and a combine. On the interpreter the bundled cross_entropy
after the one-pass rewrite (and with its loads prefetched after the split) and a kernel carrying a
maximum, a minimum and a sum compute what they did, with rows split in many parts, some past the
row's end; kernels whose loop does anything else are left alone; the tuner plans it and moves
PART_BLOCK."""

import pytest

from accelopt.policies.interface import MeasuredKernel, PlanRequest
from accelopt.policies.one_pass_softmax import one_pass_softmax
from accelopt.policies.prefetch_loads import prefetch_loads
from accelopt.policies.rewrites import PREFETCH_LOADS, SPLIT_ROWS
from accelopt.policies.split_rows import FIRST_VALUE, KNOB, split_rows
from accelopt.policies.tuner import TunerPolicy
from accelopt.tools.task import load_task
from accelopt.tools.tunables import apply_config, config_of
from tests.conftest import TASKS
from tests.unit.test_rewrites import MODULE, run_on_interpreter

HEADER = "import torch\nimport triton\nimport triton.language as tl\n"

# a row's max - min + sum: a vector maximum, a scalar minimum and a vector sum, a launch through a named grid
STATS = HEADER + '''

@triton.jit
def stats_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    hi = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    lo = float("inf")
    total = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
        hi = tl.maximum(hi, tl.where(cols < n_cols, x, float("-inf")))
        lo = tl.minimum(lo, tl.min(tl.where(cols < n_cols, x, float("inf")), 0))
        total += x
    tl.store(y_ptr + row, tl.max(hi, 0) - lo + tl.sum(total, 0))


def run(x):
    y = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    grid = (x.shape[0],)
    stats_kernel[grid](x, y, x.shape[1], BLOCK=16)
    return y
'''


def test_cross_entropy_and_a_kernel_of_maxima_minima_and_sums_compute_what_they_did(tmp_path):
    one_pass = one_pass_softmax((TASKS / "cross_entropy" / "baseline.py").read_text())
    assert one_pass is not None
    split = split_rows(one_pass)
    assert split is not None and "def cross_entropy_kernel_parts(" in split
    assert config_of(split)[KNOB] == FIRST_VALUE and split_rows(split) is None
    prefetched = prefetch_loads(split)  # the parts' loop is still one the prefetch takes
    stats = split_rows(STATS)
    assert prefetched is not None and stats is not None
    small = {"BLOCK": 16}
    pairs = [(one_pass, apply_config(s, {**small, KNOB: part}), "cross_entropy")
             for s in (split, prefetched) for part in (16, 64, 256)]
    pairs += [(STATS, apply_config(stats, {KNOB: part}), "stats") for part in (16, 32, 1024)]
    run_on_interpreter(tmp_path, f'''
import importlib.util, sys, torch
sys.path.insert(0, {str(TASKS / "cross_entropy")!r})
import reference

TMP = {str(tmp_path)!r}
{MODULE}
PAIRS = {pairs!r}
SMALL = {small!r}
for n, (before, after, task) in enumerate(PAIRS):
    written, split = module(f"before{{n}}", before), module(f"after{{n}}", after)
    if task == "cross_entropy":
        written = module(f"before{{n}}b", before.replace("BLOCK=1024", "BLOCK=16"))
        for params in ({{"T": 3, "V": 50}}, {{"T": 2, "V": 700}}, {{"T": 2, "V": 1000}}):
            inputs = reference.make_inputs(params, 0, "cpu", "float32")
            want, got = written.run(*inputs), split.run(*inputs)
            assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), (n, params, got, want)
            assert torch.allclose(got, reference.reference(*inputs).float(), rtol=1e-4, atol=1e-4)
    else:
        torch.manual_seed(n)
        for shape in ((3, 40), (2, 200), (1, 5)):
            x = torch.randn(*shape)
            want, got = written.run(x), split.run(x)
            assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), (n, shape, got, want)
            assert torch.allclose(got, x.max(1).values - x.min(1).values + x.sum(1), rtol=1e-5, atol=1e-4)
print("ok")
''')


@pytest.mark.parametrize("change, why", [
    (("        total += x\n", "        total += x\n        tl.store(y_ptr + row, x.sum())\n"), "a store in the loop"),
    (("tl.max(hi, 0) - lo", "tl.max(hi + 1.0, 0) - lo"), "a carried vector used other than reduced whole"),
    (("tl.store(y_ptr + row, tl.max(hi, 0)", "tl.store(y_ptr + row, tl.max(x, 0)"), "the last iteration's value"),
    (("    total = tl.zeros([BLOCK], dtype=tl.float32)", "    total = 0"), "an integer sum"),
    (("        total += x\n", "        total = total * 2.0 + x\n"), "an update that is no reduction"),
    (("range(0, n_cols, BLOCK)", "range(0, n_cols * row, BLOCK)"), "a bound that is no parameter of the launch"),
    (("        total += x\n", "        total += x\n        if start > 0:\n            lo = lo + 0.0\n"), "a branch"),
    (("grid = (x.shape[0],)", "grid = (x.shape[0], 1)"), "a 2-D grid"),
    (("@triton.jit", "@triton.autotune(configs=[], key=[])\n@triton.jit"), "an autotuned kernel"),
])
def test_what_it_cannot_split_it_leaves_alone(change, why):
    assert split_rows(STATS) is not None
    assert split_rows(STATS.replace(*change)) is None, why


def test_kernels_with_two_loops_or_no_reduction_loop_are_left_alone():
    for name in ("cross_entropy", "softmax", "rmsnorm", "layernorm", "rope", "gemm_bf16", "merge_attn_states"):
        assert split_rows((TASKS / name / "baseline.py").read_text()) is None, name


def test_the_tuner_plans_it_before_the_prefetch_and_then_moves_the_part():
    task = load_task(TASKS / "cross_entropy")
    one_pass = one_pass_softmax(task.baseline_source or "")
    assert one_pass is not None
    member = MeasuredKernel(id="i1.m0.p0.k0", title="one pass", status="verified", parent_id="baseline",
                            speedup_vs_parent=1.26, speedup=1.26, config=config_of(one_pass))
    plans = TunerPolicy().plan(PlanRequest(task=task, iteration=2, member_id=member["id"], source=one_pass,
                                           measurements="", tried=[member], lessons=[], n=2)).plans
    # the prefetch would close the loop to the split: it waits, and is tried right after it
    assert [p.rewrite for p in plans] == [SPLIT_ROWS.name, f"{SPLIT_ROWS.name}+{PREFETCH_LOADS.name}"]
    split = split_rows(one_pass)
    assert split is not None
    child = MeasuredKernel(id="i2.m0.p0.k0", title=SPLIT_ROWS.title, status="verified", parent_id=member["id"],
                           speedup_vs_parent=1.1, speedup=1.4, config=config_of(split))
    later = TunerPolicy().plan(PlanRequest(task=task, iteration=3, member_id=child["id"], source=split,
                                           measurements="", tried=[member, child], lessons=[], n=12)).plans
    assert any(KNOB in (p.moves or {}) for p in later) and SPLIT_ROWS.name not in {p.rewrite for p in later}
    assert later[0].rewrite == PREFETCH_LOADS.name  # then the prefetch, on the parts' loop
