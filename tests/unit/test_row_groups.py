"""The row-group rewrite (policies/row_groups.py): one-row-per-program kernels whose row is one
tile, written by people (bundled baselines) and by LLMs (FlashInfer-Bench's rmsnorm_h128
solutions), take ROW_GROUP rows a program, compute what they computed before on the interpreter
(rows that do not divide evenly, two outputs, a rebound pointer), and reach runs through the
tuner, which then moves ROW_GROUP like any tile; kernels that walk their row in a loop are left
alone."""

import ast

import pytest

from accelopt.policies.interface import MeasuredKernel, PlanRequest, WriteRequest
from accelopt.policies.rewrites import ROW_GROUPS
from accelopt.policies.row_groups import FIRST_VALUE, KNOB, row_groups
from accelopt.policies.tuner import TunerPolicy
from accelopt.tools.task import load_task
from accelopt.tools.tunables import apply_config, config_of
from tests.conftest import TASKS
from tests.unit.test_rewrites import MODULE, run_on_interpreter

REALWORLD = TASKS.parent / "realworld" / "solutions"

# an LLM's habit: the row pointer advanced in place, then a second kernel parameter rebound
REBINDING = '''
import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, stride, n, BLOCK: tl.constexpr = 64):
    offs = tl.arange(0, BLOCK)
    pid = tl.program_id(axis=0)
    x_ptr += pid * stride
    out_ptr = out_ptr + pid * stride
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, x * 2.0 + pid, mask=offs < n)


def run(x):
    out = torch.empty_like(x)
    grid = (x.shape[0],)
    scale_kernel[grid](x, out, x.stride(0), x.shape[1])
    return out
'''


def test_one_tile_row_kernels_are_grouped_and_others_are_left_alone():
    for task in ("softmax", "merge_attn_states"):  # a row is one tile: no loop over it
        out = row_groups((TASKS / task / "baseline.py").read_text())
        assert out is not None, task
        ast.parse(out)
        assert f"\n{KNOB} = {FIRST_VALUE}\n" in out and "[(triton.cdiv(" in out and f"{KNOB}={KNOB}" in out
        assert config_of(out)[KNOB] == FIRST_VALUE  # a knob the tuner moves
        assert row_groups(out) is None  # grouped once
    # rows walked in a loop (long rows: grouping them lost on every one measured), and 2-D grids
    for task in ("rmsnorm", "fused_add_rmsnorm", "layernorm", "cross_entropy", "silu_and_mul",
                 "rope", "gemm_bf16", "gqa_paged_decode"):
        assert row_groups((TASKS / task / "baseline.py").read_text()) is None, task
    refused = {
        "a return": REBINDING.replace("    x = tl.load", "    if pid > 99:\n        return\n    x = tl.load"),
        "a rebinding inside a block": REBINDING.replace("    x = tl.load", "    if n > 0:\n        x_ptr += 1\n    x = tl.load"),
        "a loop over the row": REBINDING.replace("    x = tl.load", "    for i in range(2):\n        n = n + i\n    x = tl.load"),
        "a grid of two": REBINDING.replace("grid = (x.shape[0],)", "grid = (x.shape[0], 1)"),
        "an autotuner": REBINDING.replace("@triton.jit", "@triton.autotune(configs=[], key=[])\n@triton.jit"),
        "tl.num_programs": REBINDING.replace("x * 2.0 + pid", "x * 2.0 + tl.num_programs(0)"),
        "a kernel also referenced elsewhere": REBINDING + "\nKERNELS = [scale_kernel]\n",
    }
    assert row_groups(REBINDING) is not None
    for why, source in refused.items():
        assert row_groups(source) is None, why


def test_rebound_names_get_one_of_their_own():
    out = row_groups(REBINDING)
    assert out is not None
    kernel = next(n for n in ast.parse(out).body if isinstance(n, ast.FunctionDef) and n.name == "scale_kernel")
    text = ast.unparse(kernel)
    assert "x_ptr_row = x_ptr + pid * stride" in text and "out_ptr_row = out_ptr + pid * stride" in text
    assert "tl.load(x_ptr_row + offs" in text and "tl.store(out_ptr_row + offs" in text
    assert "_rows_total=0" in text and f"{KNOB}: tl.constexpr=1" in text  # after a defaulted parameter
    assert "scale_kernel[(triton.cdiv(grid[0], ROW_GROUP),)]" in out


@pytest.mark.parametrize("group", [1, 4, 8])
def test_grouped_kernels_compute_what_they_did(tmp_path, group):
    """On the interpreter: 7 rows (not a multiple of the group), the rebinding kernel, and
    merge_attn_states (two outputs) against the kernels as written."""
    softmax = row_groups((TASKS / "softmax" / "baseline.py").read_text())
    softmax = softmax.replace(f"{KNOB} = {FIRST_VALUE}", f"{KNOB} = {group}")
    merge = row_groups((TASKS / "merge_attn_states" / "baseline.py").read_text())
    merge = merge.replace(f"{KNOB} = {FIRST_VALUE}", f"{KNOB} = {group}")
    rebinding = row_groups(REBINDING).replace(f"{KNOB} = {FIRST_VALUE}", f"{KNOB} = {group}")
    script = f'''
import importlib.util, sys, torch

TMP = {str(tmp_path)!r}
{MODULE}
pairs = {{
    "softmax": ({(TASKS / "softmax" / "baseline.py").read_text()!r}, {softmax!r}),
    "merge": ({(TASKS / "merge_attn_states" / "baseline.py").read_text()!r}, {merge!r}),
    "rebinding": ({REBINDING!r}, {rebinding!r}),
}}
torch.manual_seed(0)
x = torch.randn(7, 300)
merge_in = (torch.randn(7, 2, 16), torch.randn(7, 2), torch.randn(7, 2, 16), torch.randn(7, 2))  # 14 rows
inputs = {{"softmax": (x,), "merge": merge_in, "rebinding": (x[:, :50].contiguous(),)}}
for name, (before, after) in pairs.items():
    want = module(name + "_before", before).run(*inputs[name])
    got = module(name + "_after", after).run(*inputs[name])
    want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
    for a, b in zip(want, got):
        assert torch.equal(a, b), (name, (a - b).abs().max())
print("ok")
'''
    run_on_interpreter(tmp_path, script)


def test_the_tuner_plans_it_first_writes_it_and_then_moves_the_group():
    tuner, task = TunerPolicy(), load_task(TASKS / "softmax")
    source = (TASKS / "softmax" / "baseline.py").read_text()
    baseline = MeasuredKernel(id="baseline", title="baseline", status="verified", parent_id=None,
                              speedup_vs_parent=None, speedup=1.0, config=config_of(source))
    plans = tuner.plan(PlanRequest(task=task, iteration=1, member_id="baseline", source=source, measurements="",
                                   tried=[baseline], lessons=[], n=2)).plans
    assert plans[0].rewrite == ROW_GROUPS.name and plans[1].moves
    kernel = tuner.write(WriteRequest(task=task, iteration=1, candidate_id="i1.m0.p0.k0", source=source,
                                      plan=plans[0]))
    assert kernel.source == row_groups(source)
    grouped = MeasuredKernel(id="i1.m0.p0.k0", title=ROW_GROUPS.title, status="verified", parent_id="baseline",
                             speedup_vs_parent=1.5, speedup=1.5, config=config_of(kernel.source))
    later = tuner.plan(PlanRequest(task=task, iteration=2, member_id="i1.m0.p0.k0", source=kernel.source,
                                   measurements="", tried=[baseline, grouped], lessons=[], n=8)).plans
    assert not any(p.rewrite == ROW_GROUPS.name for p in later)
    assert any(KNOB in (p.moves or {}) for p in later)
    moved = apply_config(kernel.source, {KNOB: 16})
    assert f"\n{KNOB} = 16\n" in moved and config_of(moved)[KNOB] == 16


def test_the_flashinfer_rmsnorm_h128_solutions_are_grouped():
    """The LLM-written one-row-per-program kernels AccelOpt started from (o3 and gemini-2.5-pro):
    AccelOpt's best for this task is rows per program, written by its LLM."""
    for name in ("o3_rmsnorm_h128_35b90e.py", "gemini-2.5-pro_rmsnorm_h128_jaedrq.py"):
        out = row_groups((REALWORLD / name).read_text())
        assert out is not None and ("if pid < _rows_total:" in out or "if pid_b < _rows_total:" in out), name
