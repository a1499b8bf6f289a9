"""Every role's prompt, rendered for every bundled task at its largest (a grown kernel, the full
list of measured kernels, every recalled lesson with its code, the longest error), stays within
its token budget; the backend's notes, the workloads and the lessons' code reach the prompts;
each call's prompt size is recorded in its usage."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from accelopt.memory.schema import Evidence, Insight, Provenance
from accelopt.nodes.context import RunContext
from accelopt.nodes.measurements import TRIED_LIMIT
from accelopt.policies.interface import (
    FixRequest,
    MeasuredKernel,
    PlanDraft,
    PlanRequest,
    SummarizeRequest,
    WriteRequest,
)
from accelopt.policies.llm import LLMPolicy
from accelopt.policies.measurement_text import describe
from accelopt.tools.llm import ModelSpec
from accelopt.tools.task import Task, load_task
from tests.conftest import FIXTURES
from tests.scripted import INSIGHT, PLANS, fenced

EVALS = Path(__file__).resolve().parents[2] / "evals"
TASK_DIRS = sorted(p for root in (EVALS / "tasks", EVALS / "nkibench") for p in root.iterdir()
                   if (p / "task.json").is_file())
# Tokens of system + prompt at the largest bundled task.
BUDGETS = {"planner": 8000, "executor": 5000, "fixer": 5500, "summarizer": 3000}
TRITON_NOTES, TRITON_PITFALLS = "Fast Triton kernels on Hopper", "Triton API pitfalls"


@lru_cache(maxsize=1)
def _encoder():
    try:
        import tiktoken

        return tiktoken.get_encoding("o200k_base")
    except Exception:  # noqa: BLE001 - not installed, or its vocabulary cannot be fetched offline
        return None


def tokens(text: str) -> int:
    encoder = _encoder()
    return len(encoder.encode(text, disallowed_special=())) if encoder is not None else (len(text) + 3) // 4


class Capture(BaseChatModel):
    """Records each prompt (system + user) and answers as the role's scripted model would."""

    prompts: list[str] = []

    @property
    def _llm_type(self) -> str:
        return "capture-test"

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs) -> ChatResult:
        system, prompt = str(messages[0].content), str(messages[-1].content)
        self.prompts.append(system + prompt)
        reply = PLANS if "planner" in system else INSIGHT if "summarizer" in system else fenced("import triton\n")
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=reply))])


def _grown_kernel(task: Task) -> str:
    """A kernel twice the size of the task's starting point: rewrites grow."""
    start = task.baseline_source or task.reference_source
    return start + "\n\n" + start


def _measurements(task: Task) -> str:
    profile = (FIXTURES / "ncu_raw.csv").read_text()
    from accelopt.tools.harness.kernel_profile import parse_ncu_csv, summarize

    timing = {"median_us": 1234.5, "iqr_us": 12.3, "samples": 50, "metric": "gpu_span", "kernel_us": 800.0,
              "pct_peak": 45.0, "pct_achievable": 52.0, "bound": "memory"}
    findings = [{"severity": "warning", "line": 10 + i, "message": "torch compute in host code: " + "x" * 100}
                for i in range(8)]
    return describe({"workloads": {w.name: timing for w in task.spec.workloads}, "findings": findings,
                     "profile": summarize(parse_ncu_csv(profile), task.spec.workloads[0].name),
                     "versus": {"baseline": {"speedup": 1.5, "ci_low": 1.4, "ci_high": 1.6, "rounds": 9}}})


def _tried() -> list[MeasuredKernel]:
    return [MeasuredKernel(id=f"i3.m1.p{i}.k1.f2", title="a plan title of the longest kind, eighty characters long..."
                           [:80], status="verified", parent_id="i2.m0.p1.k0", speedup_vs_parent=1.03, speedup=1.21,
                           config={"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3})
            for i in range(TRIED_LIMIT)]


def _lessons(k: int) -> list[Insight]:
    code = "\n".join(f"    acc = tl.dot(a, b, acc)  # line {n} of the changed code" for n in range(12))
    return [Insight(kind="positive", title=f"lesson {i} in under ten words for the planner",
                    lesson="Two to four sentences about what changed and why it was faster. " * 4,
                    before=code, after=code,
                    evidence=Evidence(speedup=1.3, hardware="NVIDIA H100 80GB HBM3", timer="cuda_event", task="t",
                                      backend="triton"),
                    provenance=Provenance(run_id="r", parent_id="p", child_id=f"c{i}", iteration=1))
            for i in range(k)]


def _prompts(task: Task) -> dict[str, tuple[str, dict]]:
    """Each role's prompt at its largest, and the usage record of its call."""
    kernel, out = _grown_kernel(task), {}
    plan = PlanDraft("### Plan 1: a plan\n" + "What to change and why, in a few sentences. " * 12)
    requests = {
        "planner": lambda p: p.plan(PlanRequest(task=task, iteration=3, member_id="i2.m0.p1.k0", source=kernel,
                                                measurements=_measurements(task), tried=_tried(),
                                                lessons=_lessons(RunContext().recall_k), n=4)),
        "executor": lambda p: p.write(WriteRequest(task=task, iteration=3, candidate_id="c", source=kernel, plan=plan)),
        "fixer": lambda p: p.fix(FixRequest(task=task, iteration=3, candidate_id="c.f1", plan=plan,
                                            parent_source=kernel, source=kernel, status="runtime_error",
                                            error="Traceback (most recent call last):\n" + "x" * 1500,
                                            findings="Static findings:\n" + ("- warning: " + "y" * 100 + "\n") * 8)),
        "summarizer": lambda p: p.summarize(SummarizeRequest(
            task=task, iteration=3, child_id="c", kind="negative", hardware="NVIDIA H100 80GB HBM3",
            plan_text=plan.text, parent_source=kernel, child_source=kernel, speedup_vs_parent=0.8,
            speedup_vs_baseline=1.1, workloads=[w.name for w in task.spec.workloads], bottleneck="memory-bound")),
    }
    for role, ask in requests.items():
        model = Capture(prompts=[])
        answer = ask(LLMPolicy(model, ModelSpec.parse("vllm:budget"), role, 0.0, None, structured=False))
        out[role] = (model.prompts[0], answer.usage)
    return out


@pytest.mark.parametrize("task_dir", TASK_DIRS, ids=lambda p: p.name)
def test_prompts_stay_within_their_budgets(task_dir):
    prompts = _prompts(load_task(task_dir))
    over = {role: tokens(text) for role, (text, _) in prompts.items() if tokens(text) > BUDGETS[role]}
    assert not over, f"prompts over budget (tokens): {over}; budgets {BUDGETS}"
    for role, (text, usage) in prompts.items():
        assert usage["prompt_chars"] == len(text), role


def test_the_largest_planner_prompt_is_measured():
    """The budget test reads real sizes: the largest planner prompt is thousands of tokens, and
    the budget would catch a prompt twice that size."""
    largest = max(tokens(_prompts(load_task(d))["planner"][0]) for d in TASK_DIRS)
    assert 2000 < largest <= BUDGETS["planner"] < 2 * largest


def test_notes_workloads_and_lesson_code_reach_the_prompts():
    triton = _prompts(load_task(EVALS / "tasks" / "gemm_bf16"))
    for role in ("planner", "executor", "fixer"):
        text = triton[role][0]
        assert TRITON_NOTES in text and "online softmax" in text.lower(), role
        assert "M4096_N6144_K4096 (M=4096, N=6144, K=4096)" in text and "bfloat16" in text, role
    for role in ("executor", "fixer"):  # the API pitfalls go to the roles that write code
        assert TRITON_PITFALLS in triton[role][0] and "never pass an autotuned parameter" in triton[role][0].lower()
    assert TRITON_PITFALLS not in triton["planner"][0]
    planner = triton["planner"][0]
    assert "before:\n    " in planner and "acc = tl.dot(a, b, acc)  # line 7" in planner
    assert "# line 8" not in planner  # snippets are cut to their first lines
    assert "structural changes" in planner and "lower precision" in planner
    nki = _prompts(load_task(EVALS / "nkibench" / "matmul"))
    assert TRITON_NOTES not in nki["executor"][0] and TRITON_PITFALLS not in nki["executor"][0]
    assert "NKI on Trainium" in nki["executor"][0]
