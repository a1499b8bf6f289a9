"""The split-KV rewrite (policies/split_kv.py): an online-softmax loop over a sequence split into
KV_SPLITS parts a program and a combine. The bundled gqa_paged_decode, per query head (a scalar
maximum) and grouped (a vector of them), computes what the reference computes on the interpreter,
with more parts than a short sequence has blocks (empty parts); loops that carry anything else are
left alone; a recipe finds the chain grouped_heads then split_kv again."""

import textwrap

import pytest

from accelopt.policies.grouped_heads import grouped_heads
from accelopt.policies.rewrites import GROUPED_HEADS, SPLIT_KV, chain_between
from accelopt.policies.split_kv import FIRST_VALUE, KNOB, split_kv
from accelopt.tools.tunables import apply_config, config_of
from tests.conftest import TASKS
from tests.unit.test_rewrites import MODULE, run_on_interpreter

BUNDLED = (TASKS / "gqa_paged_decode" / "baseline.py").read_text()


def test_the_bundled_kernel_per_head_and_grouped_is_split():
    for source in (BUNDLED, grouped_heads(BUNDLED) or ""):
        out = split_kv(source)
        assert out is not None and split_kv(out) is None
        assert config_of(out)[KNOB] == FIRST_VALUE and "decode_kernel_parts[(_split_grid[0], _split_grid[1], _split_parts)]" in out
        assert "for start in range(_split_lo, tl.minimum(_split_lo + _split_span, seq_len), BLOCK_N):" in out
        assert out.count("torch.empty(") == 3  # m_i, l_i, acc
        # the kernel as written stays, for launches whose grid fills the GPU already
        assert "def decode_kernel(" in out and "    else:  # one part a program: the kernel as written\n        decode_kernel[_split_grid](" in out


def test_a_launch_takes_parts_only_where_its_grid_leaves_sms_idle():
    """On the H100 (132 SMs) B16_L4096's 128 grouped programs ran best in 2 parts (87% of a copy, 80%
    unsplit), B64 and B128 (512, 1024 programs) unsplit (BENCHMARKS.md, H100, 2026-11-27, 30da4d5)."""
    from types import SimpleNamespace

    source = split_kv(BUNDLED) or ""
    helper = source[source.index("def _split_kv_parts("):source.index("@triton.jit")]
    h100 = SimpleNamespace(cuda=SimpleNamespace(get_device_properties=lambda d: SimpleNamespace(multi_processor_count=132)))
    space: dict = {"torch": h100, KNOB: FIRST_VALUE}
    exec(helper, space)
    gpu, cpu = SimpleNamespace(type="cuda"), SimpleNamespace(type="cpu")
    assert [space["_split_kv_parts"](n, gpu) for n in (16, 128, 512, 1024)] == [FIRST_VALUE, 2, 1, 1]
    assert space["_split_kv_parts"](1024, cpu) == FIRST_VALUE  # the interpreter runs the split


@pytest.mark.parametrize("splits", [1, 3])
def test_split_kernels_compute_what_they_did(tmp_path, splits):
    """Sequences of 3 tokens (fewer blocks than parts), 10, 70; groups of 2, 1 and 3 heads; one part
    is the kernel as written."""
    variants = {"per_head": split_kv(BUNDLED), "grouped": split_kv(grouped_heads(BUNDLED) or "")}
    assert all(variants.values())
    variants = {k: (v or "").replace(f"{KNOB} = {FIRST_VALUE}", f"{KNOB} = {splits}") for k, v in variants.items()}
    run_on_interpreter(tmp_path, f'''
import importlib.util, sys, torch
sys.path.insert(0, {str(TASKS / "gqa_paged_decode")!r})
import reference

TMP = {str(tmp_path)!r}
{MODULE}
VARIANTS = {variants!r}
modules = {{name: module(name, text) for name, text in VARIANTS.items()}}
for params in ({{"B": 2, "L": 10, "HQ": 4, "HKV": 2, "D": 16, "PAGE": 4}}, {{"B": 1, "L": 3, "HQ": 2, "HKV": 2, "D": 8, "PAGE": 4}},
               {{"B": 3, "L": 70, "HQ": 6, "HKV": 2, "D": 16, "PAGE": 4}}):
    inputs = reference.make_inputs(params, 0, "cpu", "float32")
    want = reference.reference(*inputs)
    for name, mod in modules.items():
        got = mod.run(*inputs)
        assert torch.allclose(got, want, atol=1e-5), (name, params, (got - want).abs().max())
print("ok")
''')


HEADER = "import torch\nimport triton\nimport triton.language as tl\n"


def kernel(loop: str, after: str = "tl.store(y_ptr + row, acc / l)", inits: str = "") -> str:
    return HEADER + '''

@triton.jit
def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = tl.zeros([], dtype=tl.float32) - float("inf")
    l = tl.zeros([], dtype=tl.float32)
    acc = tl.zeros([], dtype=tl.float32)
{inits}
    for start in range(0, n, BLOCK):
        x = tl.load(x_ptr + row * n + start + tl.arange(0, BLOCK), mask=start + tl.arange(0, BLOCK) < n, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, 0))
        alpha = tl.exp(m - m_new)
        p = tl.exp(x - m_new)
{loop}
        m = m_new
    {after}


def run(x):
    y = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    k[(x.shape[0],)](x, y, x.shape[1], BLOCK=16)
    return y
'''.format(loop=textwrap.indent(textwrap.dedent(loop).strip(), " " * 8), after=after,
           inits=textwrap.indent(textwrap.dedent(inits).strip(), " " * 4))


PLAIN = "l = l * alpha + tl.sum(p, 0)\nacc = acc * alpha + tl.sum(p * tl.where(p > 0, x, 0.0), 0)"


@pytest.mark.parametrize("loop, after, inits, why", [
    ("l = l * alpha + tl.sum(p, 0)\nacc = acc + tl.sum(p * x, 0)", None, "", "a sum not kept scaled to the maximum"),
    (PLAIN + "\ncount = count + 1", None, "count = 0", "another carried value"),
    (PLAIN + "\ntl.store(y_ptr + row, acc)", None, "", "a store in the loop"),
    (PLAIN, "tl.store(y_ptr + row + start, acc / l)", "", "the loop variable read after the loop"),
    ("l = l * alpha + tl.sum(p, 0)\nacc = acc * alpha + tl.sum(p * x, 0)\nacc = acc * 2.0", None, "",
     "a carried value assigned twice"),
])
def test_loops_that_carry_anything_else_are_left_alone(loop, after, inits, why):
    assert split_kv(kernel(PLAIN)) is not None
    assert split_kv(kernel(loop, after or "tl.store(y_ptr + row, acc / l)", inits)) is None, why


def test_a_split_softmax_computes_the_same_on_the_interpreter(tmp_path):
    """A one-row online softmax-weighted mean (scalar state): rows of 1, 16 and 50 columns in 3 parts."""
    pair = (kernel(PLAIN), (split_kv(kernel(PLAIN)) or "").replace(f"{KNOB} = {FIRST_VALUE}", f"{KNOB} = 3"))
    run_on_interpreter(tmp_path, f'''
import importlib.util, torch
TMP = {str(tmp_path)!r}
{MODULE}
PAIR = {pair!r}
before, after = module("before", PAIR[0]), module("after", PAIR[1])
torch.manual_seed(0)
for cols in (1, 16, 50):
    x = torch.randn(3, cols) * 4
    assert torch.allclose(before.run(x), after.run(x), atol=1e-5), cols
    want = (torch.softmax(x, 1) * x).sum(1)
    assert torch.allclose(after.run(x), want, atol=1e-5), cols
print("ok")
''')


def test_the_chain_grouped_then_split_is_found_again():
    grouped = GROUPED_HEADS.apply(BUNDLED) or ""
    split = SPLIT_KV.apply(grouped) or ""
    tuned = apply_config(split, {KNOB: 8, "BLOCK_N": 128})
    assert chain_between(BUNDLED, tuned) == ([GROUPED_HEADS.name, SPLIT_KV.name], split)
