"""Reply parsing and profile parsing."""

from langchain_core.messages import AIMessage

from accelopt.policies.replies import (
    Reply,
    code_from_tool_calls,
    decode_reply,
    encode_reply,
    extract_kernel,
    find_kernel,
    last_object_with,
    parse_lesson,
    plan_title,
    reply_of,
    split_plans,
    strip_reasoning,
)
from tests.conftest import FIXTURES
from tests.scripted import BASELINE, BROKEN, GOOD


def test_extract_kernel_variants():
    assert extract_kernel(f"```python\n{GOOD}```") == GOOD
    assert extract_kernel(f"<think>```python\nimport triton\n```</think>\nFinal:\n```py\n{GOOD}```") == GOOD
    # An unterminated fence (reply cut by max_tokens) still yields the code.
    assert extract_kernel(f"~~~python\n{GOOD}") == GOOD
    # A helper snippet and the full module: the full module wins.
    assert extract_kernel(f"```python\nx = 1\n```\n```python\n{GOOD}```") == GOOD
    # An unfenced module is accepted; prose and fragments are not.
    assert extract_kernel(GOOD) == GOOD
    assert extract_kernel("I cannot do that.") is None
    assert extract_kernel("```python\ndef run(x):\n    return x\n```") is None
    assert extract_kernel("") is None


def test_split_plans():
    reply = "Intro\n### Plan 1: a\nfirst idea\n**Plan 2: b**\nsecond idea\n## Plan 3 - c\nthird"
    plans = split_plans(reply, 5)
    assert [p.splitlines()[1] for p in plans] == ["first idea", "second idea", "third"]
    assert len(split_plans(reply, 2)) == 2
    assert split_plans("just one idea without headers", 3) == ["just one idea without headers"]
    assert split_plans("   ", 3) == []


def test_ncu_csv_parsing_on_a_fixture():
    """tests/fixtures/ncu_raw.csv is hand-written in the documented `ncu --csv --page raw` layout
    (header, units row, one row per kernel); real ncu output is exercised by the GPU tests."""

    from accelopt.tools.harness.kernel_profile import parse_ncu_csv, summarize

    kernels = parse_ncu_csv((FIXTURES / "ncu_raw.csv").read_text())
    assert len(kernels) == 1 and kernels[0]["name"] == "rmsnorm_kernel"
    assert abs(kernels[0]["time_us"] - 30.208) < 1e-9  # "30,208" nanoseconds
    text = summarize(kernels, "T4096_H4096")
    assert "DRAM throughput % 46" in text and "registers/thread 32" in text and "no unit saturated" in text


# ---------------------------------------------------------------- replies as real models write them
# The texts below imitate gpt-oss-120b (vLLM, harmony channels) and Qwen3 (SGLang, <think>) replies.

DRAFT = BASELINE.replace("num_warps=4", "num_warps=2")  # a complete module that is not the answer
AUTOTUNED = GOOD.replace("@triton.jit", "@triton.autotune(configs=[], key=['n_cols'])\n@triton.jit")


def test_gpt_oss_harmony_channels_keep_only_the_final_answer():
    reply = ("<|channel|>analysis<|message|>We need to speed up softmax. Let's draft:\n"
             f"```python\n{DRAFT}```\nBut exp2 is faster; final answer below.<|end|>"
             "<|start|>assistant<|channel|>final<|message|>Here is the optimized kernel:\n\n"
             f"```python\n{GOOD}```<|return|>")
    assert extract_kernel(reply) == GOOD
    assert strip_reasoning(reply) == f"Here is the optimized kernel:\n\n```python\n{GOOD}```"
    # The server skipped the special tokens: the channel names run into the text.
    flat = f"analysisWe need to speed up softmax. Draft:\n```python\n{DRAFT}```\nassistantfinal```python\n{GOOD}```"
    assert extract_kernel(flat) == GOOD
    # Cut off while still in the analysis channel: no answer at all, not the draft.
    assert strip_reasoning(f"<|channel|>analysis<|message|>Let's draft:\n```python\n{DRAFT}```\nHmm") == ""
    assert extract_kernel(f"analysisLet's draft:\n```python\n{DRAFT}```\nNow") is None


def test_qwen_think_pairs_and_unterminated_think():
    reply = (f"<think>\nOkay, the user wants a faster softmax. Maybe:\n```python\n{DRAFT}```\nNo wait.\n</think>\n\n"
             f"Here is the kernel:\n```python\n{GOOD}```")
    assert extract_kernel(reply) == GOOD
    assert strip_reasoning("<think>\nstill reasoning when max_tokens ran out ```python\nimport triton") == ""


def test_orphan_closing_think_drops_the_reasoning_before_it():
    # The chat template opened <think> in the prompt: the reply starts inside the reasoning.
    reply = ("Okay, I need two good plans. Candidates:\n### Plan 1: reasoning idea one\nmaybe exp2 here\n"
             "### Plan 2: reasoning idea two\nor more warps\nLet me finalize.\n</think>\n\n"
             "### Plan 1: exp2 with more warps\nUse exp2 with a folded log2(e) scale and 8 warps per row.\n"
             "### Plan 2: two rows per program\nProcess two rows per program to halve the grid size.\n"
             "### Plan 3: online softmax\nA single pass with a running max and sum for long rows.\n"
             "### Plan 4: vectorized loads\nAlign rows and hint contiguity so loads become 16-byte vectors.\n")
    plans = split_plans(reply, 4)
    assert [plan_title(p) for p in plans] == ["exp2 with more warps", "two rows per program", "online softmax",
                                              "vectorized loads"]


def test_numbered_list_plans_split_into_plans_with_titles():
    reply = ("Looking at the measurements, the kernel is memory-bound at 41% of achievable bandwidth.\n\n"
             "1. **Fuse the max and sum passes** - use an online softmax so each row is read once.\n"
             "   1. keep a running max m and sum s\n   2. rescale s when m grows\n"
             "2. **Vectorize the loads**: hint `tl.max_contiguous` so each thread loads 16 bytes.\n"
             "3. Process several rows per program for the short-row workloads, with a 2-D block.\n")
    plans = split_plans(reply, 5)
    assert len(plans) == 3
    assert [plan_title(p) for p in plans] == [
        "Fuse the max and sum passes", "Vectorize the loads",
        "Process several rows per program for the short-row workloads, with a 2-D block."]
    assert "rescale s when m grows" in plans[0] and "online softmax" in plans[0]
    assert not any("memory-bound at 41%" in p for p in plans)  # the preamble is no plan


def test_json_plans_in_every_shape():
    fenced = ('Here are the plans as JSON:\n```json\n[{"title": "Online softmax", "description": "One pass with a '
              'running max and sum."}, {"title": "Eight warps", "description": "More warps per long row."}]\n```')
    plans = split_plans(fenced, 4)
    assert [plan_title(p) for p in plans] == ["Online softmax", "Eight warps"]
    assert "running max and sum" in plans[0]
    wrapped = '{"plans": [{"title": "A", "text": "first plan text here"}, {"title": "B", "text": "second plan"}]}'
    assert [plan_title(p) for p in split_plans(wrapped, 4)] == ["A", "B"]
    strings = '["Use exp2 with a folded log2(e) scale", "Launch 8 warps per row for long rows"]'
    assert [plan_title(p) for p in split_plans(strings, 4)] == ["Use exp2 with a folded log2(e) scale",
                                                                "Launch 8 warps per row for long rows"]
    # Cut off at the token limit: the plans that were complete survive.
    cut = '{"plans": [{"title": "A", "text": "first"}, {"title": "B", "text": "second"}, {"title": "C", "te'
    assert [plan_title(p) for p in split_plans(cut, 4, truncated=True)] == ["A", "B"]
    # A markdown reply cut off midway loses its unfinished last plan.
    cut_md = "### Plan 1: exp2\nUse exp2 everywhere in the row loop.\n### Plan 2: warps\nLaunch 8 wa"
    assert [plan_title(p) for p in split_plans(cut_md, 4, truncated=True)] == ["exp2"]


def test_the_answer_is_the_first_module_not_an_appendix():
    reply = (f"Here is the optimized kernel:\n```python\n{GOOD}```\n\nKey changes: exp2 and 8 warps.\n\n"
             f"**Optional alternative** (autotuned variant, if you want to try it):\n```python\n{AUTOTUNED}```")
    assert extract_kernel(reply) == GOOD
    again = f"```python\n{GOOD}```\nAlternatively, a complete module with autotune:\n```python\n{AUTOTUNED}```"
    assert extract_kernel(again) == GOOD
    # ...unless the reply says a later module is the final one.
    corrected = (f"```python\n{BROKEN}```\nWait, there is a missing parenthesis. Here is the corrected version:\n"
                 f"```python\n{GOOD}```")
    assert extract_kernel(corrected) == GOOD
    # A block that repeats the kernel the model was given is not its answer.
    echoed = f"You gave me:\n```python\n{BASELINE}```\nMine:\n```python\n{GOOD}```"
    assert extract_kernel(echoed) == BASELINE and extract_kernel(echoed, echo=BASELINE) == GOOD


def test_unterminated_fence_is_marked_open():
    block = find_kernel(f"```python\n{GOOD[:-40]}")
    assert block is not None and not block.closed
    assert find_kernel(f"```python\n{GOOD}```").closed


def test_kernel_from_tool_call_arguments():
    message = AIMessage(content="", tool_calls=[{"name": "submit_kernel", "args": {"code": GOOD}, "id": "call_1"}])
    reply = reply_of(message)
    assert reply.text == "" and code_from_tool_calls(reply.tool_calls) == GOOD
    fenced = [{"name": "write_file", "args": {"path": "kernel.py", "content": f"```python\n{GOOD}```"}}]
    assert code_from_tool_calls(fenced) == GOOD
    assert code_from_tool_calls([{"name": "noop", "args": {"x": "1"}}]) is None


def test_reply_metadata_survives_the_text_round_trip():
    message = AIMessage(content="```python\nimport tri", response_metadata={"finish_reason": "length"},
                        additional_kwargs={"reasoning_content": "r" * 1234})
    reply = reply_of(message)
    assert reply.truncated and reply.reasoning_chars == 1234
    assert decode_reply(encode_reply(reply)) == reply
    # a plain reply stays plain text (so replies cached before stay readable)
    plain = reply_of(AIMessage(content="hello", response_metadata={"finish_reason": "stop"}))
    assert encode_reply(plain) == "hello" and decode_reply("hello") == Reply("hello")
    assert reply_of(AIMessage(content="x", response_metadata={"stop_reason": "max_tokens"})).truncated


def test_summarizer_last_json_wins_and_lists_become_text():
    reply = ('Draft:\n```json\n{"title": "draft title", "lesson": "draft", "bottleneck": "unknown"}\n```\n'
             "On reflection the bottleneck was bandwidth. Final:\n```json\n"
             '{"title": "exp2 and 8 warps for row softmax", "lesson": ["Prefer exp2.", "Use more warps."], '
             '"bottleneck": "memory bandwidth", "kernel_class": ["row reduction", "softmax"], '
             '"before": ["num = tl.exp(x)", "num_warps=4"], "after": "num = tl.exp2(x * LOG2E)"}\n```')
    lesson = parse_lesson(reply)
    assert lesson == {"title": "exp2 and 8 warps for row softmax", "lesson": "Prefer exp2. Use more warps.",
                      "bottleneck": "memory bandwidth", "kernel_class": "row reduction, softmax",
                      "before": "num = tl.exp(x)\nnum_warps=4", "after": "num = tl.exp2(x * LOG2E)"}
    assert last_object_with("no json here", ("title",)) == {}
    assert parse_lesson('<think>{"title": "thinking draft", "lesson": "x"}</think>{"lesson": "real"}') == \
        {"lesson": "real"}
