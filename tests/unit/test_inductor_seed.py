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


def test_a_reference_dynamo_cannot_capture_refuses_the_seed():
    with pytest.raises(SeedRefused, match="made 0 graphs of the reference on workload B16_L4096"):
        seed_source(capture("gqa_paged_decode.default"))


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
