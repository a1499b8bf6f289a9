"""The tuner policy and the tunables it moves: discovery, AST edits, planning from recalled
lessons and from what was already measured, fixing, and the lessons it writes."""

import ast

from langchain_core.messages import HumanMessage, SystemMessage

from accelopt.memory.features import kernel_class
from tests.conftest import TASKS
from accelopt.tools.codeparse import extract_kernel, split_plans
from accelopt.tools.tunables import apply_config, config_of, neighbours
from accelopt.tools.tuner import TunerChatModel

RMSNORM = (TASKS / "rmsnorm" / "baseline.py").read_text()
ROW = kernel_class(RMSNORM)

MODULE_CONSTANT = '''import triton
import triton.language as tl

BLOCK = 128  # tile width


@triton.jit
def kernel(x_ptr, n, D: tl.constexpr, BLOCK: tl.constexpr, GROUP: tl.constexpr = 4):
    pass


def run(x):
    grid = (triton.cdiv(x.numel(), BLOCK),)
    kernel[grid](x, x.numel(), D=128, BLOCK=BLOCK,
                 )
    return x
'''


def ask(role: str, prompt: str) -> str:
    return TunerChatModel().invoke([SystemMessage(f"You are the accelopt {role}."), HumanMessage(prompt)]).content


def planner_prompt(source: str, n: int, lessons: str = "(none yet)", tried: str = "(none yet)") -> str:
    return (f"# Task: t (iteration 1)\n## Current kernel (baseline)\n```python\n{source}```\n"
            f"## Kernels already measured in this run\n{tried}\n\n## Lessons recalled from earlier\n{lessons}\n\n"
            f"## What to do\nPropose {n} distinct optimization plans")


def test_tunables_of_the_bundled_baselines():
    assert config_of(RMSNORM) == {"BLOCK": 256, "num_warps": 4, "num_stages": 3}  # num_stages: Triton's default
    gemm = config_of((TASKS / "gemm_bf16" / "baseline.py").read_text())
    assert gemm == {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 2}
    # Shape constants (HQ=hq, D=d, PAGE=page) are not tunables; the tile BLOCK_N is.
    assert config_of((TASKS / "gqa_paged_decode" / "baseline.py").read_text()) == \
        {"BLOCK_N": 64, "num_warps": 4, "num_stages": 3}
    # softmax's block is computed from the row length: only the warps can move.
    assert config_of((TASKS / "softmax" / "baseline.py").read_text()) == {"num_warps": 4}


def test_edits_keep_formatting_and_insert_implicit_defaults():
    edited = apply_config(RMSNORM, {"BLOCK": 1024, "num_stages": 2})
    assert edited == RMSNORM.replace("BLOCK=256, num_warps=4)", "BLOCK=1024, num_warps=4, num_stages=2)")
    assert config_of(edited) == {"BLOCK": 1024, "num_warps": 4, "num_stages": 2}
    # A module constant moves with the grid that reads it; a signature default and an absent
    # num_warps are edited in place; the shape constant D is left alone.
    assert config_of(MODULE_CONSTANT) == {"BLOCK": 128, "GROUP": 4, "num_warps": 4}
    edited = apply_config(MODULE_CONSTANT, {"BLOCK": 256, "GROUP": 8, "num_warps": 8, "D": 64})
    ast.parse(edited)
    assert "BLOCK = 256  # tile width" in edited and "GROUP: tl.constexpr = 8" in edited
    assert "D=128" in edited and "num_warps=8)" in edited
    assert config_of(edited) == {"BLOCK": 256, "GROUP": 8, "num_warps": 8}
    # Kernels under @triton.autotune are the autotuner's; broken source has nothing to tune.
    assert config_of("import triton\n@triton.autotune(configs=[], key=[])\n@triton.jit\ndef k(B: tl.constexpr):\n"
                     "    pass\ndef run(x):\n    k[(1,)](x, B=16)\n") == {}
    assert config_of("def run(:") == {}


def test_neighbours_step_each_knob_before_a_second_step():
    assert neighbours({"BLOCK": 256, "num_warps": 32, "num_stages": 1}) == [
        {"BLOCK": 512}, {"num_warps": 16}, {"num_stages": 2}, {"BLOCK": 128}]


def test_planner_skips_measured_configs_and_orders_by_recalled_directions():
    plans = split_plans(ask("planner", planner_prompt(RMSNORM, 2)), 5)
    assert [p.splitlines()[0] for p in plans] == ["### Plan 1: BLOCK 256 -> 512", "### Plan 2: num_warps 4 -> 8"]
    executed = extract_kernel(ask("executor", f"## Current kernel\n```python\n{RMSNORM}```\n"
                                              f"## Plan to implement\n{plans[0]}\n## Rules\n"))
    assert config_of(executed) == {"BLOCK": 512, "num_warps": 4, "num_stages": 3}
    tried = "- i1.m0.p0.k0 (BLOCK 256 -> 512): verified [config: BLOCK=512, num_warps=4, num_stages=3]"
    lessons = (f"- (ins-1) [0.70x on layernorm] avoid: Avoid: `num_warps` from 4 to 8: On layernorm ({ROW}), hurt. "
               "Starting launch config: BLOCK=256, num_warps=4.\n"
               # a row reduction with no tile at all (softmax): says nothing about one with a BLOCK
               f"- (ins-5) [0.60x on softmax] avoid: Avoid: `num_warps` from 4 to 2: On softmax ({ROW}), hurt. "
               "Starting launch config: num_warps=4.\n"
               # the same move measured on a GEMM: another class, so it does not apply here
               "- (ins-4) [1.50x on gemm] `num_warps` from 4 to 2: On gemm (GEMM / tiled matrix multiply), helped. "
               "Starting launch config: num_warps=4.\n"
               "- (ins-2) [1.20x on softmax] `num_stages` from 3 to 2: helped\n"
               # measured from another tile size: does not apply to this kernel
               f"- (ins-3) [1.30x on rmsnorm] `BLOCK` from 256 to 128: On rmsnorm ({ROW}), helped. Starting launch "
               "config: BLOCK=256, num_warps=16.")
    plans = split_plans(ask("planner", planner_prompt(RMSNORM, 6, lessons, tried)), 6)
    titles = [p.splitlines()[0].split(": ", 1)[1] for p in plans]
    assert "BLOCK 256 -> 512" not in titles  # measured already
    assert titles == ["num_stages 3 -> 2", "num_stages 3 -> 4", "BLOCK 256 -> 128", "num_warps 4 -> 2",
                      "num_warps 4 -> 8"]


def test_planner_jumps_to_recalled_configurations_of_the_same_kernel_class():
    lessons = (f"- (ins-b) [1.90x on layernorm] `BLOCK` from 256 to 2048: On layernorm ({ROW}; workloads x), ... "
               f"Resulting launch config: BLOCK=2048, num_warps=8, num_stages=3 (1.90x over the baseline).\n"
               f"- (ins-a) [1.30x on layernorm] `BLOCK` from 256 to 512: On layernorm ({ROW}; workloads x), ... "
               f"Resulting launch config: BLOCK=512, num_warps=4 (1.30x over the baseline).\n"
               f"- (ins-d) [2.00x on decode] x: On decode ({ROW}; w), ... "
               f"Resulting launch config: BLOCK_N=32, num_warps=2 (2.00x over the baseline).\n"
               f"- (ins-c) [1.50x on gemm] `BLOCK` from 64 to 128: On gemm (GEMM / tiled matrix multiply; w), ... "
               f"Resulting launch config: BLOCK=64, num_warps=2 (3.00x over the baseline).")
    plans = split_plans(ask("planner", planner_prompt(RMSNORM, 3, lessons)), 3)
    # Recalled configurations first, in recall order, each as one jump; the GEMM lesson is not
    # applied to a reduction, nor the decode lesson about another tile (BLOCK_N) to this BLOCK.
    assert plans[0].startswith("### Plan 1: BLOCK 256 -> 2048, num_warps 4 -> 8") and "ins-b" in plans[0]
    assert plans[1].startswith("### Plan 2: BLOCK 256 -> 512") and "ins-a" in plans[1]
    assert "one step" in plans[2] and "num_warps 4 -> 2" not in plans[2]


def test_fixer_shrinks_or_reverts_the_failed_move():
    big = apply_config(RMSNORM, {"BLOCK": 4096})
    fixed = extract_kernel(ask("fixer", f"## Plan that was being implemented\nSet `BLOCK` from 256 to 4096\n"
                                        f"## Kernel that failed\n```python\n{big}```\n## What went wrong: x\n"))
    assert config_of(fixed)["BLOCK"] == 1024  # halfway (geometrically) back
    both = apply_config(RMSNORM, {"BLOCK": 4096, "num_warps": 8})
    fixed = extract_kernel(ask("fixer", f"## Plan that was being implemented\nSet `BLOCK` from 256 to 4096 and "
                                        f"`num_warps` from 4 to 8\n## Kernel that failed\n```python\n{both}```\n"
                                        "## What went wrong: compile_error\nout of resources: shared memory\n"))
    assert config_of(fixed) == {"BLOCK": 256, "num_warps": 8, "num_stages": 3}  # the big step dropped
    one = apply_config(RMSNORM, {"BLOCK": 512})
    reply = ask("fixer", f"## Plan that was being implemented\nSet `BLOCK` from 256 to 512\n"
                         f"## Kernel that failed\n```python\n{one}```\n## What went wrong: x\n")
    assert extract_kernel(reply) is None and "nothing smaller" in reply


def test_summarizer_lesson_reads_back_as_a_recipe():
    child = apply_config(RMSNORM, {"BLOCK": 1024, "num_warps": 8})
    reply = ask("summarizer", f"# Task: rmsnorm (triton, NVIDIA H100)\n\nThe child ran at 1.400 x the speed of its "
                              f"parent\n## Measurements\nWorkloads: T4096_H4096; the parent was memory-bound. "
                              f"The child runs at 1.820 x the task's baseline.\n## Plan that produced the child\n"
                              f"x\n## Parent kernel\n```python\n{RMSNORM}```\n## Child kernel\n```python\n{child}```\n")
    import json

    lesson = json.loads(reply.split("```json\n", 1)[1].split("```", 1)[0])
    assert lesson["title"] == "`BLOCK` from 256 to 1024 and `num_warps` from 4 to 8"
    assert "1.40x against the parent" in lesson["lesson"] and "T4096_H4096" in lesson["lesson"]
    assert "BLOCK=1024, num_warps=8, num_stages=3 (1.82x over the baseline)" in lesson["lesson"]
    assert lesson["kernel_class"] == ROW and lesson["after"] == "BLOCK=1024, num_warps=8, num_stages=3"
    line = f"- (ins-z) [1.40x on rmsnorm] {lesson['title']}: {lesson['lesson']}"
    layernorm = (TASKS / "layernorm" / "baseline.py").read_text()
    plans = split_plans(ask("planner", planner_prompt(layernorm, 1, line)), 1)
    assert plans[0].startswith("### Plan 1: BLOCK 256 -> 1024, num_warps 4 -> 8")
