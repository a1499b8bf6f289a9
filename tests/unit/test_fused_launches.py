"""The fused-launch rewrite (policies/fused_launches.py): launches of one kernel the host makes one
after another become one launch. On the interpreter the bundled rope (as written and after the
axis-tile rewrite) and kernels launched directly compute bit for bit what they did, through the
joined launch (the kernel as written is made unreachable, so a silent fallback fails the test);
launches that must stay apart (another constexpr, a tensor one writes and another reads) run as
written; what the rewrite cannot prove it leaves alone; the tuner keeps the tunables."""

import ast

import pytest

from accelopt.policies.axis_tiles import axis_tiles
from accelopt.policies.fused_launches import fused_launches
from accelopt.tools.tunables import apply_config, config_of
from tests.conftest import TASKS
from tests.unit.test_rewrites import MODULE, run_on_interpreter

HEADER = "import torch\nimport triton\nimport triton.language as tl\n"

# y = x * s (+ b) per row: a 1-D grid, launched directly three times and through assignments
SCALE = HEADER + '''

@triton.jit
def scale_kernel(x_ptr, y_ptr, n_cols, s, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    keep = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=keep, other=0.0)
    tl.store(y_ptr + row * n_cols + cols, x * s + tl.num_programs(0), mask=keep)


def run(a, b, c):
    ya, yb, yc = torch.empty_like(a), torch.empty_like(b), torch.empty_like(c)
    scale_kernel[(a.shape[0],)](a, ya, a.shape[1], 2.0, BLOCK=triton.next_power_of_2(a.shape[1]))
    scale_kernel[(b.shape[0],)](b, yb, b.shape[1], 3.0, BLOCK=triton.next_power_of_2(b.shape[1]))
    scale_kernel[(c.shape[0],)](c, yc, c.shape[1], 4.0, BLOCK=triton.next_power_of_2(c.shape[1]))
    return ya, yb, yc
'''

# the same kernel through a helper whose calls are assignments, and a chain that must stay in order
HELPER = SCALE.split("\n\ndef run")[0] + '''


def _scaled(x, s):
    y = torch.empty_like(x)
    scale_kernel[(x.shape[0],)](x, y, x.shape[1], s, BLOCK=32, num_warps=2)
    return y


def run(a, b, c):
    ya = _scaled(a, 2.0)
    yb = _scaled(b, 3.0)
    return ya, yb, c
'''

CHAINED = SCALE.split("\n\ndef run")[0] + '''


def run(a, b, c):
    y, z = torch.empty_like(a), torch.empty_like(a)
    scale_kernel[(a.shape[0],)](a, y, a.shape[1], 2.0, BLOCK=32)
    scale_kernel[(a.shape[0],)](y, z, a.shape[1], 3.0, BLOCK=32)
    return y, z, c
'''

SENTINEL = '''
class Unreachable:
    def __getitem__(self, grid):
        raise AssertionError("the kernel as written was launched: the launches were not joined")
'''


def test_rope_as_written_and_tiled_computes_bit_for_bit_what_it_did_in_one_launch(tmp_path):
    rope = (TASKS / "rope" / "baseline.py").read_text()
    joined = fused_launches(rope)
    tiled = axis_tiles(rope)
    assert joined is not None and tiled is not None
    tiled_joined = fused_launches(tiled)
    assert tiled_joined is not None
    for out in (joined, tiled_joined):
        ast.parse(out)
        assert "def rope_kernel_fused_2(" in out and "_launch_rope_kernel(_fused_launch0, _fused_launch1)" in out
        assert fused_launches(out) is None and axis_tiles(out) is None  # nothing left; tiles cannot follow
        # what a launch writes is the `out` its helper just allocated: no bytes compared at run time
        assert "_fused_joined(records, written=())" in out
    # the tuner still finds and moves the launch's keywords, now on the recorded launch
    assert config_of(tiled_joined) == config_of(tiled) == {"num_warps": 1, "AXIS1_GROUP": 8}
    moved = apply_config(tiled_joined, {"num_warps": 2, "AXIS1_GROUP": 4})
    assert "num_warps=2" in moved and "AXIS1_GROUP = 4" in moved
    pairs = [(rope, joined), (rope, tiled_joined), (rope, moved)]
    run_on_interpreter(tmp_path, f'''
import importlib.util, sys, torch
sys.path.insert(0, {str(TASKS / "rope")!r})
import reference

TMP = {str(tmp_path)!r}
{MODULE}
{SENTINEL}
PAIRS = {pairs!r}
for n, (before, after) in enumerate(PAIRS):
    written, joined = module(f"before{{n}}", before), module(f"after{{n}}", after)
    joined.rope_kernel = Unreachable()
    for params in ({{"T": 3, "HQ": 5, "HK": 2, "D": 16, "P": 32}}, {{"T": 2, "HQ": 17, "HK": 1, "D": 8, "P": 16}}):
        inputs = reference.make_inputs(params, 0, "cpu", "float32")
        want, got = written.run(*inputs), joined.run(*inputs)
        assert all(torch.equal(a, b) for a, b in zip(want, got)), (n, params)
print("ok")
''')


def test_direct_launches_and_a_helper_s_calls_are_joined_and_launches_that_must_stay_apart_are_not(tmp_path):
    scale, helper, chained = (fused_launches(s) for s in (SCALE, HELPER, CHAINED))
    assert scale is not None and "def scale_kernel_fused_3(" in scale and "tl.num_programs(0) - _fused_start_2" in scale
    assert helper is not None and "ya, _fused_launch0 = _scaled_deferred(a, 2.0)" in helper
    assert config_of(helper)["num_warps"] == 2
    # the joined launch is made only where it is safe, decided at run time where the source cannot tell
    assert chained is not None and "_fused_joined(records, written=(1,))" in chained
    pairs = [(SCALE, scale, True), (HELPER, helper, True), (CHAINED, chained, False)]
    run_on_interpreter(tmp_path, f'''
import importlib.util, torch

TMP = {str(tmp_path)!r}
{MODULE}
{SENTINEL}
PAIRS = {pairs!r}
torch.manual_seed(0)
inputs = (torch.randn(5, 20), torch.randn(3, 17), torch.randn(4, 20))  # one BLOCK: 32
for n, (before, after, joins) in enumerate(PAIRS):
    written, rewritten = module(f"before{{n}}", before), module(f"after{{n}}", after)
    want = written.run(*inputs)
    if joins:
        rewritten.scale_kernel = Unreachable()
    got = rewritten.run(*inputs)
    assert all(torch.equal(a, b) for a, b in zip(want, got)), n

# the joiner's own rules, on recorded launches
joined = module("rules", PAIRS[0][1])
x, y, z = torch.zeros(4, 8), torch.zeros(4, 8), torch.zeros(2, 8)
record = joined._scale_kernel_later
same = [record[(4,)](x, y, 8, 2.0, BLOCK=8), record[(2,)](z, torch.zeros(2, 8), 8, 2.0, BLOCK=8)]
grid, runtime, starts, constexprs, options = joined._fused_joined(same, written=(1,))
assert grid == (6,) and starts == [4] and constexprs == {{"BLOCK": 8}} and len(runtime) == 8
other_block = [same[0], record[(2,)](z, z, 8, 2.0, BLOCK=16)]
other_warps = [same[0], record[(2,)](z, z, 8, 2.0, BLOCK=8, num_warps=2)]
reads_what_the_first_writes = [same[0], record[(4,)](y[1:3], z, 8, 2.0, BLOCK=8)]
writes_what_the_first_reads = [same[0], record[(2,)](z, x[2:], 8, 2.0, BLOCK=8)]
for records in (other_block, other_warps, reads_what_the_first_writes, writes_what_the_first_reads):
    assert joined._fused_joined(records, written=(1,)) is None
print("ok")
''')


@pytest.mark.parametrize("change, why", [
    (("    row = tl.program_id(0)\n", "    row = tl.program_id(0)\n    if row > 100:\n        return\n"), "a return"),
    (("scale_kernel[(a.shape[0],)](a", "scale_kernel[lambda meta: (a.shape[0],)](a"), "a grid that is a function"),
    (("@triton.jit", "@triton.autotune(configs=[], key=[])\n@triton.jit"), "an autotuned kernel"),
    (("    return ya, yb, yc", "    f = scale_kernel\n    return ya, yb, yc"), "the kernel referenced as a value"),
    (("tl.program_id(0)", "tl.program_id(axis)"), "a program id on an axis that is not a literal"),
])
def test_what_it_cannot_prove_it_leaves_alone(change, why):
    assert fused_launches(SCALE.replace(*change)) is None, why


def test_helpers_it_cannot_defer_and_calls_that_depend_on_each_other_are_left_alone():
    after_launch = HELPER.replace("    return y\n", "    y.add_(1)\n    return y\n")
    dependent = HELPER.replace("yb = _scaled(b, 3.0)", "yb = _scaled(ya, 3.0)")
    called_elsewhere = HELPER + "\n\ndef other(x):\n    return _scaled(x, 1.0)\n"
    one_launch = (TASKS / "softmax" / "baseline.py").read_text()
    for source in (after_launch, dependent, called_elsewhere, one_launch):
        assert fused_launches(source) is None
