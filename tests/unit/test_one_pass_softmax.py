"""The one-pass softmax rewrite (policies/one_pass_softmax.py): a max loop and an exp-sum loop over
the same columns, as people (the bundled cross_entropy baseline) and LLMs (a scalar running
maximum, a three-pass softmax, a persistent loop over rows) write them, become one online loop
that computes what the two computed (on the interpreter, with rows whose maximum moves by a lot
between chunks and a masked last chunk); anything the algebra does not cover is left alone."""

import textwrap

import pytest

from accelopt.policies.interface import MeasuredKernel, PlanRequest, WriteRequest
from accelopt.policies.one_pass_softmax import one_pass_softmax
from accelopt.policies.rewrites import ONE_PASS_SOFTMAX, applicable
from accelopt.policies.tuner import TunerPolicy
from accelopt.tools.task import load_task
from tests.conftest import TASKS
from tests.unit.test_rewrites import run_on_interpreter

HEADER = "import torch\nimport triton\nimport triton.language as tl\n"

# An LLM's three-pass softmax: a scalar running maximum, a scalar sum, then the normalising write.
THREE_PASS_SOFTMAX = HEADER + '''

@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * n_cols
    y_row = y_ptr + row * n_cols
    m = -float("inf")
    for off in range(0, n_cols, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
        m = tl.maximum(m, tl.max(x, axis=0))
    denom = 0.0
    for off in range(0, n_cols, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
        denom += tl.sum(tl.exp(x - m), axis=0)
    for off in range(0, n_cols, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
        tl.store(y_row + cols, tl.exp(x - m) / denom, mask=mask)


def run(x):
    y = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK_SIZE=128)
    return y
'''

# A persistent log-softmax: programs stride over rows; the maximum is renamed between the loops,
# the exponentials masked with tl.where and named before they are summed; the sum a lane vector.
PERSISTENT_LOG_SOFTMAX = HEADER + '''

@triton.jit
def log_softmax_kernel(x_ptr, y_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        run_max = float("-inf")
        for start in range(0, n_cols, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            valid = offs < n_cols
            v = tl.load(x_ptr + row * n_cols + offs, mask=valid, other=0.0)
            run_max = tl.maximum(run_max, tl.max(tl.where(valid, v, float("-inf")), 0))
        row_max = run_max
        lanes = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            valid = offs < n_cols
            v = tl.load(x_ptr + row * n_cols + offs, mask=valid, other=0.0)
            e = tl.where(valid, tl.exp(v - row_max), 0.0)
            lanes += e * 1.0
        lse = row_max + tl.log(tl.sum(lanes, 0))
        for start in range(0, n_cols, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            valid = offs < n_cols
            v = tl.load(x_ptr + row * n_cols + offs, mask=valid, other=0.0)
            tl.store(y_ptr + row * n_cols + offs, v - lse, mask=valid)


def run(x):
    y = torch.empty_like(x)
    log_softmax_kernel[(2,)](x, y, x.shape[0], x.shape[1], BLOCK=64)
    return y
'''

# the bundled cross_entropy baseline's two loops, the second's accumulation replaced: {}
VARIANT = '''
@triton.jit
def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    m = tl.full([BLOCK], -float("inf"), dtype=tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + cols, mask=cols < n, other=-float("inf")).to(tl.float32)
        m = tl.maximum(m, x)
    row_max = tl.max(m, axis=0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + cols, mask=cols < n, other=-float("inf")).to(tl.float32)
{body}
    tl.store(out_ptr, tl.sum(acc, axis=0) + row_max)
'''


def variant(body: str) -> str:
    return HEADER + VARIANT.format(body=textwrap.indent(textwrap.dedent(body).strip(), " " * 8))


def test_the_cross_entropy_baseline_reads_its_row_once_and_computes_the_loss(tmp_path):
    source = (TASKS / "cross_entropy" / "baseline.py").read_text()
    out = one_pass_softmax(source)
    assert out is not None and out.count("for start in range(0, vocab, BLOCK):") == 1
    assert out.count("tl.load(base + cols") == 1 and one_pass_softmax(out) is None  # fused once
    assert "def run(logits, labels):" in out and "BLOCK=1024, num_warps=4" in out  # the launch stays
    # the lanes' maximum is the running maximum reduced: its per-element update is gone
    assert "m = tl.maximum(m, x)" not in out and "row_max = _row_max_run" in out
    kept = one_pass_softmax(source.replace("tl.store(loss_ptr + row,", "tl.store(loss_ptr + row + tl.sum(m * 0, 0).to(tl.int32),"))
    assert kept is not None and "m = tl.maximum(m, x)" in kept and "row_max = tl.max(m, 0)" in kept  # m read after
    (tmp_path / "kernel.py").write_text(out)
    run_on_interpreter(tmp_path, f'''
import importlib.util, torch
spec = importlib.util.spec_from_file_location("kernel", {str(tmp_path / "kernel.py")!r})
kernel = importlib.util.module_from_spec(spec); spec.loader.exec_module(kernel)
torch.manual_seed(0)
logits = 3.0 * torch.randn(4, 700)
logits[1] *= 40.0                       # a maximum that moves by a lot between chunks
logits[2, 650:] += 200.0                # the maximum in the masked last chunk
logits[3] -= 1000.0                     # a row far below zero
labels = torch.tensor([0, 699, 5, 300])
expected = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
kernel.cross_entropy_kernel[(4,)](logits, labels, loss := torch.full((4,), float("nan")), 700, BLOCK=128)
assert torch.allclose(loss, expected, rtol=1e-5, atol=1e-4), (loss, expected)
print("ok")
''')


@pytest.mark.parametrize("source, passes, call", [
    (THREE_PASS_SOFTMAX, 2, "torch.softmax(x, 1)"),
    (PERSISTENT_LOG_SOFTMAX, 2, "torch.log_softmax(x, 1)"),
], ids=["three_pass_softmax", "persistent_log_softmax"])
def test_llm_shaped_kernels_lose_a_pass_and_compute_the_same(tmp_path, source, passes, call):
    out = one_pass_softmax(source)
    assert out is not None and out.count("tl.load(") == passes and one_pass_softmax(out) is None
    (tmp_path / "kernel.py").write_text(out)
    run_on_interpreter(tmp_path, f'''
import importlib.util, torch
spec = importlib.util.spec_from_file_location("kernel", {str(tmp_path / "kernel.py")!r})
kernel = importlib.util.module_from_spec(spec); spec.loader.exec_module(kernel)
torch.manual_seed(0)
x = torch.randn(5, 300) * torch.tensor([[1.0], [30.0], [0.01], [80.0], [5.0]])
x[4, 290:] += 60.0  # the maximum in the masked last chunk
assert torch.allclose(kernel.run(x), {call}, rtol=1e-5, atol=1e-5)
print("ok")
''')


@pytest.mark.parametrize("body", [
    "acc += tl.exp(x - row_max) * x",                                   # x * exp: rescales the same way
    "e = tl.exp(x - row_max)\nacc = acc + tl.where(cols < n, e, 0.0)",
    "acc = tl.exp(x - row_max).to(tl.float32) + acc",
])
def test_sums_proportional_to_the_exponential_are_fused(body):
    assert one_pass_softmax(variant(body)) is not None


@pytest.mark.parametrize("body, why", [
    ("acc += tl.exp(x - row_max) + 1.0", "a term free of the maximum would be rescaled"),
    ("acc += tl.exp((x - row_max) * 0.5)", "exp of a scaled difference rescales by another factor"),
    ("d = x - row_max\nacc += tl.exp(d)", "the maximum used outside exp(x - max)"),
    ("acc += tl.exp(x - row_max)\ntl.store(out_ptr + cols, x, mask=cols < n)", "a store in the loop"),
    ("acc += tl.exp(x - row_max) * acc", "the term reads the sum"),
    ("acc += tl.exp(row_max - x)", "the maximum on the other side"),
])
def test_what_the_algebra_does_not_cover_is_left_alone(body, why):
    assert one_pass_softmax(variant(body)) is None, why


def test_loops_that_are_not_the_same_walk_are_left_alone():
    base = variant("acc += tl.exp(x - row_max)")
    assert one_pass_softmax(base) is not None
    cases = {
        "another element": base.replace("x = tl.load(x_ptr + cols, mask=cols < n, other=-float(\"inf\")).to(tl.float32)"
                                        "\n        acc", "x = tl.load(x_ptr + 1 + cols, mask=cols < n).to(tl.float32)"
                                        "\n        acc"),
        "other columns": base.replace("for start in range(0, n, BLOCK):\n        cols = start + tl.arange(0, BLOCK)"
                                      "\n        x = tl.load(x_ptr + cols, mask=cols < n, other=-float(\"inf\"))"
                                      ".to(tl.float32)\n        acc",
                                      "for start in range(BLOCK, n, BLOCK):\n        cols = start + tl.arange(0, BLOCK)"
                                      "\n        x = tl.load(x_ptr + cols, mask=cols < n, other=-float(\"inf\"))"
                                      ".to(tl.float32)\n        acc"),
        "a sum that starts at one": base.replace("acc = tl.zeros([BLOCK], dtype=tl.float32)",
                                                 "acc = tl.full([BLOCK], 1.0, dtype=tl.float32)"),
        "a maximum not from -inf": base.replace('m = tl.full([BLOCK], -float("inf"), dtype=tl.float32)',
                                                "m = tl.full([BLOCK], 0.0, dtype=tl.float32)"),
        "a scaled term read after the loop": variant("e = tl.exp(x - row_max)\nacc += e").replace(
            "tl.store(out_ptr, tl.sum(acc, axis=0) + row_max)", "tl.store(out_ptr, tl.sum(e, axis=0) + row_max)"),
        "the maximum read between": base.replace("acc = tl.zeros([BLOCK], dtype=tl.float32)",
                                                 "acc = tl.zeros([BLOCK], dtype=tl.float32) + tl.max(m, 0) * 0"),
    }
    for why, source in cases.items():
        assert source != base, why
        assert one_pass_softmax(source) is None, why
    # a pointer walked forward carries more than the maximum between chunks
    walked = HEADER + '''
@triton.jit
def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    m = -float("inf")
    p = x_ptr + tl.arange(0, BLOCK)
    for start in range(0, n, BLOCK):
        p = p + BLOCK
        m = tl.maximum(m, tl.max(tl.load(p - BLOCK), 0))
    s = 0.0
    for start in range(0, n, BLOCK):
        p = p + BLOCK
        s += tl.sum(tl.exp(tl.load(p - BLOCK) - m), 0)
    tl.store(out_ptr, s)
'''
    assert one_pass_softmax(walked) is None


def test_the_tuner_plans_it_first_on_the_bundled_cross_entropy_and_writes_it():
    tuner, task = TunerPolicy(), load_task(TASKS / "cross_entropy")
    source = task.baseline_source
    assert [r.name for r in applicable(source)][0] == ONE_PASS_SOFTMAX.name
    baseline = MeasuredKernel(id="baseline", title="baseline", status="verified", parent_id=None,
                              speedup_vs_parent=None, speedup=1.0, config={})
    plans = tuner.plan(PlanRequest(task=task, iteration=1, member_id="baseline", source=source, measurements="",
                                   tried=[baseline], lessons=[], n=3)).plans
    # the prefetch alone waits until the loop rewrites were tried (none could follow it); after this one, it is tried
    assert [p.rewrite for p in plans[:2]] == [ONE_PASS_SOFTMAX.name, "one_pass_softmax+prefetch_loads"]
    assert plans[2].moves and not plans[2].rewrite
    kernel = tuner.write(WriteRequest(task=task, iteration=1, candidate_id="i1.m0.p0.k0", source=source,
                                      plan=plans[0]))
    assert kernel.source == one_pass_softmax(source)
