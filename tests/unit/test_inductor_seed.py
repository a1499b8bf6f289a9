"""Inductor seeds from real captures (torch 2.11 Inductor on an H100, tests/fixtures/inductor/):
the converted module is plain Triton with pinned launches, or the seed is refused with its reason."""

import ast
import json

import pytest

from accelopt.tools.inductor_seed import SeedRefused, seed_source
from tests.conftest import FIXTURES

CAPTURES = FIXTURES / "inductor"


def capture(name: str) -> dict:
    return json.loads((CAPTURES / f"{name}.json").read_text())


@pytest.mark.parametrize("name", ["rmsnorm.default", "softmax.default", "merge_attn_states.default",
                                  "gemm_bf16.triton"])
def test_a_capture_becomes_plain_triton_with_the_autotuners_choice_pinned(name):
    seed = seed_source(capture(name))
    tree = ast.parse(seed.source)
    assert "triton_heuristics" not in seed.source and "async_compile" not in seed.source
    assert "get_raw_stream" not in seed.source and "torch.cuda" not in seed.source  # runs on any device
    jitted = [f for f in tree.body if isinstance(f, ast.FunctionDef)
              and any(ast.unparse(d) == "triton.jit" for d in f.decorator_list)]
    assert len(jitted) >= seed.workloads == len(capture(name)["workloads"])  # a kernel per specialization
    launches = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)]
    assert launches and all({"num_warps", "num_stages"} <= {k.arg for k in call.keywords} for call in launches)
    assert "torch 2.11.0+cu130" in seed.origin and "H100" in seed.origin


def test_the_launch_carries_the_config_inductor_chose_and_a_grid_that_follows_it():
    source = seed_source(capture("rmsnorm.default")).source
    # T2048_H8192: Inductor's autotuner picked XBLOCK=1, R0_BLOCK=2048, 16 warps on the H100
    assert ("[lambda META: (_cdiv(2048, META['XBLOCK']),)](arg0_1, arg1_1, buf1, 2048, 8192, XBLOCK=1, "
            "R0_BLOCK=2048, num_warps=16, num_stages=1)") in source


def test_the_persistent_tma_template_gets_tritons_scratch_allocator_before_its_launch():
    # gemm_bf16 under max-autotune-triton on the H100: Inductor's autotuner took the persistent TMA
    # template for the two large GEMMs (descriptors made on the device) and the plain one elsewhere
    tree = ast.parse(seed_source(capture("gemm_bf16.triton")).source)
    functions = {f.name: ast.unparse(f) for f in tree.body if isinstance(f, ast.FunctionDef)}
    kernel = "triton_tem_fused_mm_permute_0_w{}"
    uses_tma = ["make_tensor_descriptor" in functions[kernel.format(i)] for i in range(5)]
    assert uses_tma == [True, True, False, False, False]
    for i, tma in enumerate(uses_tma):
        call = functions[f"_call_{i}"]
        assert ("triton.set_allocator(_scratch_on(_device))" in call) == tma
        if tma:  # before the launch, which also gets Inductor's workspace buffer
            launch = call.index(kernel.format(i) + "[")
            assert call.index("set_allocator") < launch and "workspace_1" in call[launch:]


def test_inputs_are_taken_in_the_compiled_graphs_order():
    # merge_attn_states(prefix_out, prefix_lse, suffix_out, suffix_lse): Dynamo's graph takes the lse first
    source = seed_source(capture("merge_attn_states.default")).source
    assert "(_call_0, (1, 3, 0, 2))" in source


def test_a_library_call_refuses_the_seed_and_names_the_way_out():
    with pytest.raises(SeedRefused, match=r"extern_kernels\.mm.*max-autotune-triton") as refused:
        seed_source(capture("gemm_bf16.default"))
    assert refused.value.library  # a run then captures again with Triton templates (nodes/seeding.py)
    # where that capture calls a library too (a transposed convolution: no Triton template), the
    # refusal does not send the user back to the mode already tried
    templated = {**capture("gemm_bf16.default"), "mode": "max-autotune-triton"}
    with pytest.raises(SeedRefused) as again:
        seed_source(templated)
    assert str(again.value).endswith("no Triton template for it in mode max-autotune-triton either")
    assert "seed with --seed-mode" not in str(again.value)


def test_a_reference_dynamo_cannot_capture_refuses_the_seed():
    with pytest.raises(SeedRefused, match="made 0 graphs of the reference on workload B16_L4096"):
        seed_source(capture("gqa_paged_decode.default"))
    # one graph whose output code is not one module is refused as that: KernelBench's matmul with a
    # large K under max-autotune-triton read "made 1 graphs ... needs exactly one" on the H100
    softmax = capture("softmax.default")
    doubled = {**softmax, "workloads": [{**softmax["workloads"][0], "sources": softmax["workloads"][0]["sources"] * 2}]}
    with pytest.raises(SeedRefused, match="one graph of the reference on workload .* wrote 2 modules of output code"):
        seed_source(doubled)


def test_a_failed_or_empty_capture_refuses():
    broken = capture("softmax.default")
    broken["workloads"][1] = {"workload": "M1024_N32000", "error": "InductorError: out of resources\nmore"}
    with pytest.raises(SeedRefused, match="failed on workload M1024_N32000: InductorError: out of resources$"):
        seed_source(broken)
    with pytest.raises(SeedRefused, match="no workloads"):
        seed_source({"workloads": []})


def test_graph_inputs_map_back_to_named_and_packed_arguments():
    from accelopt.tools.inductor_seed import graph_argument_positions

    assert graph_argument_positions(["L_x_", "L_w_"], ["w", "x"]) == [1, 0]
    # Dynamo names the values of *args after their index (a KernelBench Model's forward)
    assert graph_argument_positions(["l_args_1_", "l_args_0_"], ["*args"]) == [1, 0]
    assert graph_argument_positions(["l_args_0_", "l_y_"], ["y", "*args"]) == [1, 0]
    # module state or a constant: no argument, and the seed is refused with that reason
    assert graph_argument_positions(["L_self_weight_", "l_args_x_"], ["*args"]) == [None, None]


# What Inductor (torch 2.11) emitted for torch.cumsum(x.flip(1), 1) on the H100 (KernelBench level 1
# problem 91, cumsum_reverse), at an interpreter-sized shape: the scan's combine function is a
# @triton.jit helper beside the kernel, which the kernel calls by name.
_SCAN_KERNEL = '''
import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math

@triton.jit
def _triton_helper_fn_add0(arg0_0, arg1_0):
    tmp0 = arg0_0 + arg1_0
    return tmp0

@triton_heuristics.reduction(
    size_hints={'x': 8, 'r0_': 16},
    reduction_hint=ReductionHint.DEFAULT,
    triton_meta={'signature': {'in_ptr0': '*fp32', 'out_ptr0': '*fp32', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr', 'R0_BLOCK': 'constexpr'}},
    inductor_meta={'grid_type': 'Grid1D', 'kernel_name': 'triton_red_fused_cumsum_flip_0'}
)
@triton.jit
def triton_red_fused_cumsum_flip_0(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 8
    r0_numel = 16
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    x0 = xindex
    tmp3 = tl.full([XBLOCK, 1], float('nan'), tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (15 + ((-1)*r0_1) + 16*x0), r0_mask, eviction_policy='evict_last', other=0.0)
        tmp1 = tmp0.to(tl.float32)
        tmp2 = tl.broadcast_to(tmp1, [XBLOCK, R0_BLOCK])
        tmp4, = tl.associative_scan((tmp2,), 1, _triton_helper_fn_add0)
        tmp5 = triton_helpers.select_one((tmp4), rbase == (RBLOCK - 1), dim=-1, keep_dims=True)
        tmp6 = tmp3 + tmp5
        tmp7 = tmp3 + tmp4
        tmp8 = tl.where(roffset > 0, tmp7, tmp4)
        tmp3 = tl.where(roffset > 0, tmp6, tmp5)
        tl.store(out_ptr0 + (r0_1 + 16*x0), tmp8, r0_mask)
'''


def test_a_scan_kernel_keeps_its_jitted_combine_function(tmp_path):
    """Found on the H100 (KernelBench problem 91): the seed kept the scan kernel but not the
    helper it calls, and every launch failed with NameError. The helper now travels with its
    kernel, renamed with it; the kernel runs (here on the interpreter) and computes the scan."""
    import subprocess
    import sys

    from accelopt.tools.inductor_seed import _HEADER, _kernel

    kernel = _kernel("triton_red_fused_cumsum_flip_0", _SCAN_KERNEL, "triton_red_fused_cumsum_flip_0_w0")
    assert "def triton_red_fused_cumsum_flip_0_w0__triton_helper_fn_add0(" in kernel.source
    assert "_triton_helper_fn_add0)" not in kernel.source.replace("w0__triton_helper_fn_add0)", "")
    script = tmp_path / "scan.py"
    script.write_text(_HEADER + "\n\n" + kernel.source + '''

x = torch.randn(8, 16)
out = torch.empty_like(x)
triton_red_fused_cumsum_flip_0_w0[(4,)](x, out, 8, 16, XBLOCK=2, R0_BLOCK=8)
# the kernel writes the reversed row's running sum (Inductor flips it back in a second kernel)
assert torch.allclose(out, torch.cumsum(x.flip(1), 1), atol=1e-5), (out, torch.cumsum(x.flip(1), 1))
print("ok")
''')
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "TRITON_INTERPRET": "1"})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_the_tuner_seeds_from_inductor_by_default_on_a_gpu(softmax_task, monkeypatch):
    """Under the tuner on a GPU every Triton task is seeded by default; an imported problem (no
    baseline.py) on a CPU gets one line on why nothing can start, before any setup. An explicit
    choice is kept."""
    from accelopt.nodes import seeding
    from accelopt.nodes.context import RunContext
    from accelopt.tools.task import load_task

    with_baseline = load_task(softmax_task)
    (softmax_task / "baseline.py").unlink()
    task = load_task(softmax_task)
    monkeypatch.setattr(seeding, "detect_device", lambda: "cuda")
    assert seeding.seeds_from_inductor(task, RunContext()) and seeding.nothing_to_start_from(task, RunContext()) is None
    assert not seeding.seeds_from_inductor(task, RunContext(seed="none"))
    assert "--seed none was given" in seeding.nothing_to_start_from(task, RunContext(seed="none"))
    assert "--device cpu was given" in seeding.nothing_to_start_from(task, RunContext(device="cpu"))
    # an LLM writes the first kernel from the reference: no seed unless asked for
    llm = RunContext(model="openai:some-model")
    assert not seeding.seeds_from_inductor(task, llm) and seeding.nothing_to_start_from(task, llm) is None
    monkeypatch.setattr(seeding, "detect_device", lambda: "cpu")
    assert "no CUDA GPU is visible here" in seeding.nothing_to_start_from(task, RunContext())
    assert seeding.seeds_from_inductor(task, RunContext(device="cpu", seed_capture="capture.json"))
    # a task with its baseline is seeded too under the tuner on a GPU (torch.compile is the bar),
    # not on the CPU without a capture, not under an LLM, and not when told not to
    monkeypatch.setattr(seeding, "detect_device", lambda: "cuda")
    assert seeding.seeds_from_inductor(with_baseline, RunContext())
    assert not seeding.seeds_from_inductor(with_baseline, RunContext(seed="none"))
    assert not seeding.seeds_from_inductor(with_baseline, llm)
    assert not seeding.seeds_from_inductor(with_baseline, RunContext(device="cpu"))



def test_a_reference_dynamo_splits_is_refused_for_its_graphs_not_lost_to_a_capture_error():
    """FlashInfer-Bench's paged-attention references break the graph at `.item()`: the capture
    must keep the record of what Dynamo compiled (the seed's refusal gives the reason), not fail
    probing the launch configurations of a graph with inputs it does not take (as it did on the H200, 2026-11-26:
    "ValueError: not enough values to unpack"). Inductor writes C++ on the CPU, but the capture's
    own logic is the one a GPU runs."""
    from accelopt.tools.inductor_capture import _reference_module, capture_workload
    from accelopt.tools.task import load_task
    from tests.conftest import ROOT

    task = load_task(ROOT / "evals" / "realworld" / "tasks" / "gqa_paged_decode_h32_kv8_d128_ps1")
    reference = _reference_module(task)
    workload = task.spec.interpreter_workloads[0]
    inputs = tuple(reference.make_inputs(workload.params, 0, "cpu", "float32"))
    record = capture_workload(reference, workload, inputs, "default")
    # Dynamo resumed after the break: the one graph it compiled takes values made in Python
    assert "configs" not in record and "error" not in record
    with pytest.raises(SeedRefused, match="takes an input .* that is not an argument of the"):
        seed_source({"mode": "default", "workloads": [{**record, "for": "cpu", "dtype": "float32"}]})


def test_the_seed_is_captured_in_the_mode_the_run_is_timed_against_unless_told(monkeypatch, tmp_path):
    """A run timed against max-autotune starts from max-autotune's kernels, not default mode's;
    --seed-mode still decides where given. The capture asked for is the one made (and kept)."""
    from accelopt.nodes import seeding
    from accelopt.nodes.context import RunContext
    from tests.conftest import TASKS

    asked = []

    def fake_capture(root, mode):
        asked.append(mode)
        raise seeding.CaptureError("no GPU in this test")

    monkeypatch.setattr(seeding, "capture_in_subprocess", fake_capture)
    from accelopt.tools.task import load_task

    task = load_task(TASKS / "softmax")
    for ctx, mode in ((RunContext(), "default"),
                      (RunContext(torch_compile_mode="max-autotune-no-cudagraphs"), "max-autotune-no-cudagraphs"),
                      (RunContext(torch_compile_mode="max-autotune-no-cudagraphs", seed_mode="default"), "default")):
        candidate, line = seeding.inductor_seed(task, ctx, {}, str(tmp_path))
        assert candidate is None and line == "no Inductor seed: no GPU in this test"
        assert asked.pop() == mode


def test_modules_inductor_compiled_only_to_time_an_autotuning_choice_are_not_the_graphs():
    """Under max-autotune a split-K choice is lowered and compiled as a module of its own
    (`benchmark_<choice>`) while the graph is lowered; only the graph's module becomes a seed."""
    from types import SimpleNamespace

    from torch._inductor.graph import GraphLowering
    from torch._inductor.virtualized import V

    from accelopt.tools.inductor_capture import run_and_get_graph_code

    def compiled(x):  # what Inductor does inside a compiled call, reduced to the hook it calls
        for k in (2, 4, 8):
            with V.set_graph_handler(SimpleNamespace(name=f"benchmark_decompose_k_mm_{k}_split")):
                GraphLowering.save_output_code(f"def call(args):  # split in {k}")
        with V.set_graph_handler(SimpleNamespace(name=None)):
            GraphLowering.save_output_code("def call(args):  # the graph")
        return x

    assert run_and_get_graph_code(compiled, (1,)) == (["def call(args):  # the graph"], 3)
