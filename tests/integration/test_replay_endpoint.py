"""The replay endpoint (evals/replay): a rehearsal, not an LLM. Over HTTP, per role: plans as the
response schema's JSON, a fenced kernel that is a real solution or a variant of one, realistic
failures, a lesson; the same draws from the same seed, other draws from another; the replies
read by the LLM policy's own readers through the real client; and one `accelopt optimize` on
the CPU interpreter run against it end to end."""

import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from accelopt.evals.replay import MODEL_ID, ReplayServer
from accelopt.evals.replay.material import FAILURES, Material
from accelopt.evals.replay.server import source_digest
from accelopt.policies.interface import PlanRequest, SummarizeRequest, WriteRequest
from accelopt.policies.llm import LLMPolicy
from accelopt.policies.replies import LESSON_KEYS
from accelopt.policies.structured_output import LESSON_SCHEMA, PLANS_SCHEMA
from accelopt.tools.llm import ModelSpec, build_chat_model
from accelopt.tools.task import load_task
from tests.conftest import ROOT

TASK = ROOT / "evals" / "realworld" / "tasks" / "rmsnorm_h128"
FENCE = re.compile(r"```python\n(.*?)(?:\n```|\Z)", re.DOTALL)


@pytest.fixture(scope="module")
def material() -> Material:
    return Material(TASK)


@pytest.fixture(scope="module")
def kernels(material):
    """Every kernel the material can serve whole, by digest: the real ones and every variant."""
    out = {source_digest(k.source): "real" for k in (material.real_kernel(i) for i in range(len(material.real)))}
    out.update({source_digest(material.variant(i).source): "variant" for i in range(len(material.moves))})
    return out


@pytest.fixture(scope="module")
def server():
    with ReplayServer(TASK, seed=0, time_scale=0, failure_rate=0.0) as s:
        yield s


def ask(url: str, role: str, prompt: str, **body):
    messages = [{"role": "system", "content": f"You are the accelopt {role}, part of an automated kernel optimizer."},
                {"role": "user", "content": prompt}]
    resp = httpx.post(f"{url}/chat/completions", json={"model": MODEL_ID, "messages": messages, **body}, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp


def content(resp) -> str:
    return resp.json()["choices"][0]["message"]["content"]


def kernel_of(text: str) -> str:
    found = FENCE.search(text)
    assert found, text[:300]
    return found.group(1)


def test_models_list_the_replay_model_with_a_context_length(server):
    data = httpx.get(f"{server.url}/models", timeout=10).json()["data"]
    assert [m["id"] for m in data] == ["replay"] and data[0]["max_model_len"] == 131072
    resp = httpx.post(f"{server.url}/chat/completions", json={"model": "gpt-oss-120b", "messages": []}, timeout=10)
    assert resp.status_code in (400, 404)
    resp = httpx.post(f"{server.url}/chat/completions", timeout=10,
                      json={"model": "gpt-oss-120b", "messages": [{"role": "user", "content": "hi"}]})
    assert resp.status_code == 404 and "rehearsal, not an LLM" in resp.text


def test_a_planner_gets_as_many_json_plans_as_it_asks(server):
    resp = ask(server.url, "planner", "## What to do\nPropose 3 distinct optimization plans for the current kernel.",
               response_format=PLANS_SCHEMA)
    body = resp.json()
    plans = json.loads(content(resp))["plans"]
    assert len(plans) == 3 and all(set(p) == {"title", "text"} and len(p["text"]) > 80 for p in plans)
    assert len({p["title"] for p in plans}) == 3
    assert body["model"] == "replay" and body["choices"][0]["finish_reason"] == "stop"
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert 1500 <= usage["completion_tokens_details"]["reasoning_tokens"] <= 4000
    assert "rehearsal" in body["choices"][0]["message"]["reasoning_content"]
    assert float(resp.headers["x-replay-modelled-s"]) > 10  # thousands of tokens at 150 tok/s
    # asked in text, without a number: four plans under headings
    text = content(ask(server.url, "planner", "Plan something for this kernel."))
    assert len(re.findall(r"^### Plan \d+: ", text, re.MULTILINE)) == 4


def test_an_executor_gets_a_real_kernel_or_a_variant(server, kernels):
    kinds = set()
    for i in range(12):
        resp = ask(server.url, "executor", f"## Plan to implement\nplan number {i}")
        source = kernel_of(content(resp))
        ast.parse(source)
        assert "def run(" in source and "@triton.jit" in source
        assert source_digest(source) in kernels
        kinds.add(kernels[source_digest(source)])
        assert resp.headers["x-replay-served"] == kernels[source_digest(source)]
        assert server.served()[source_digest(source)]["role"] == "executor"
    assert kinds == {"real", "variant"}


def test_draws_follow_the_seed_and_the_request_not_the_order():
    prompts = [f"## Plan to implement\nplan {i}" for i in range(6)]
    with ReplayServer(TASK, seed=0, time_scale=0) as a, ReplayServer(TASK, seed=0, time_scale=0) as b, \
            ReplayServer(TASK, seed=1, time_scale=0) as c:
        first = [content(ask(a.url, "executor", p)) for p in prompts]
        again = [content(ask(b.url, "executor", p)) for p in reversed(prompts)][::-1]  # another order
        other = [content(ask(c.url, "executor", p)) for p in prompts]
        # identical requests (the K samples of one plan) are told apart by how many came before
        second_a = content(ask(a.url, "executor", prompts[0]))
        second_b = content(ask(b.url, "executor", prompts[0]))
    assert first == again
    assert first != other
    assert second_a == second_b and second_a != first[0]


def test_failures_are_realistic_and_the_fixer_gets_a_kernel_that_keeps_the_semantics(material, kernels):
    fixable = {source_digest(k.source) for k in (material.real_kernel(i) for i in range(len(material.real)))}
    fixable |= {source_digest(material.variant(i, fixer=True).source) for i in range(len(material.fix_moves))}
    seen = set()
    with ReplayServer(TASK, seed=3, time_scale=0, failure_rate=1.0) as server:
        for i in range(15):
            resp = ask(server.url, "executor", f"## Plan to implement\nplan {i}")
            kind, choice = resp.headers["x-replay-served"], resp.json()["choices"][0]
            seen.add(kind)
            assert kind in FAILURES
            if kind == "truncated":
                assert choice["finish_reason"] == "length"
                assert "```" not in choice["message"]["content"].split("```python\n", 1)[1]  # the fence left open
                continue
            source = kernel_of(choice["message"]["content"])
            ast.parse(source)  # a bug that parses: it fails when it compiles or runs
            assert choice["finish_reason"] == "stop" and source_digest(source) not in kernels
        for i in range(6):
            resp = ask(server.url, "fixer", f"## What went wrong: compile_error\nattempt {i}")
            assert resp.headers["x-replay-served"] in ("real", "variant")
            assert source_digest(kernel_of(content(resp))) in fixable
        stats = server.stats()
    assert seen == set(FAILURES)
    assert stats["by_role"]["executor"]["requests"] == 15 and stats["by_role"]["fixer"]["requests"] == 6
    assert sum(stats["by_role"]["executor"]["served"].values()) == 15
    # the fewest modelled seconds the served model needs for these replies; no share of the peak at scale 0
    assert stats["decode_floor_s"] == pytest.approx(stats["completion_tokens"] / server.profile.peak_decode_tok_s, abs=0.1)
    assert stats["decode_floor_s"] > 0 and stats["decode_share_of_peak"] is None


def test_a_token_limit_cuts_the_reply_as_a_server_would(server):
    choice = ask(server.url, "executor", "## Plan to implement\nshort", max_tokens=50).json()["choices"][0]
    assert choice["finish_reason"] == "length" and choice["message"]["content"] == ""  # still reasoning


def test_a_streamed_reply_ends_with_its_usage(server):
    resp = ask(server.url, "summarizer", "Write one optimization lesson from this measured pair.", stream=True,
               stream_options={"include_usage": True})
    events = [line[len("data: "):] for line in resp.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    lesson = json.loads(re.search(r"```json\n(.*)\n```", text, re.DOTALL).group(1))
    assert set(lesson) == set(LESSON_KEYS) and lesson["kernel_class"] == "row reduction"


def test_the_llm_policy_reads_every_role_through_the_real_client(server, kernels):
    """The replies as accelopt's own readers take them: JSON plans, a kernel, a lesson."""
    spec = ModelSpec.parse(f"vllm:{MODEL_ID}", base_url=server.url, max_attempts=1)
    task = load_task(TASK)

    def policy(role: str) -> LLMPolicy:
        return LLMPolicy(build_chat_model(spec), spec, role, retry_wait_s=0.01, run_dir=None)

    plans = policy("planner").plan(PlanRequest(task, 1, "m0", None, "(not measured)", [], [], n=3))
    assert len(plans.plans) == 3 and plans.usage["reasoning_tokens"] > 0
    kernel = policy("executor").write(WriteRequest(task, 1, "i1.m0.p0.k0", None, plans.plans[0]))
    assert kernel.source is not None and source_digest(kernel.source) in kernels
    lesson = policy("summarizer").summarize(SummarizeRequest(
        task, 1, "i1.m0.p0.k0", "positive", "H100", plans.plans[0].text, kernel.source, kernel.source, 1.2, 1.2,
        ["w"], "memory bandwidth"))
    assert set(lesson.fields) == set(LESSON_KEYS)
    assert policy("fixer").label == "vllm:replay"
    by_role = server.stats()["by_role"]
    assert by_role["planner"]["served"].get("plans") and by_role["summarizer"]["served"].get("lesson")
    assert LESSON_SCHEMA["json_schema"]["name"] == "lesson"  # the schema name the server tells the role by


def test_the_module_entry_point_prints_the_url_and_its_stats():
    proc = subprocess.Popen([sys.executable, "-m", "accelopt.evals.replay", "--task", str(TASK), "--time-scale", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        banner = proc.stdout.readline()
        url = proc.stdout.readline().strip()
        how = proc.stdout.readline()
        assert "rehearsal, not an LLM" in banner and url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        assert "(3 real kernels, " in banner
        assert f"--model vllm:replay --base-url {url}" in how
        assert httpx.get(f"{url}/models", timeout=10).json()["data"][0]["id"] == "replay"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert json.loads(out)["requests"] == 0


@pytest.mark.slow
def test_an_optimization_runs_end_to_end_against_it(tmp_path):
    """`accelopt optimize` through the CLI on the CPU interpreter, from the PyTorch reference (the
    corpus's kernels need a GPU: on the interpreter they fail, and the fixer runs). Every
    candidate's kernel is one the server served; its stats and the run's ledger agree."""
    task = tmp_path / "rmsnorm_h128"
    shutil.copytree(TASK, task)
    with ReplayServer(task, seed=0, time_scale=0) as server:
        proc = subprocess.run(
            [sys.executable, "-m", "accelopt", "optimize", str(task), "--model", f"vllm:{MODEL_ID}",
             "--base-url", server.url, "-B", "1", "-N", "2", "-K", "1", "-F", "1", "-T", "1", "--device", "cpu",
             "--no-memory", "--run-dir", str(tmp_path / "run")],
            capture_output=True, text=True, env={**os.environ}, timeout=400)
        stats, served = server.stats(), server.served()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    candidates = [d for d in (tmp_path / "run" / "candidates").iterdir() if d.name != "baseline"]
    written = [d for d in candidates if (d / "kernel.py").is_file()]
    assert len(candidates) >= 2 and written
    for folder in written:
        assert source_digest((folder / "kernel.py").read_text()) in served, folder.name
    by_role = stats["by_role"]
    assert by_role["planner"]["requests"] >= 1 and by_role["executor"]["requests"] == 2
    assert by_role.get("fixer", {}).get("requests", 0) >= 1  # the corpus's GPU kernels fail on the interpreter
    usage = summary["usage"]
    assert {r: u["calls"] for r, u in usage["by_role"].items()} == {r: s["requests"] for r, s in by_role.items()}
    assert usage["input_tokens"] == stats["prompt_tokens"] and usage["output_tokens"] == stats["completion_tokens"]
    assert stats["modelled_s"] > 0 and Path(summary["task_dir"]).name == "rmsnorm_h128"


def test_a_task_with_one_real_kernel_says_one():
    """A bundled task has no LLM-written kernels: its baseline is served as its one real kernel."""
    proc = subprocess.Popen([sys.executable, "-m", "accelopt.evals.replay", "--task", str(ROOT / "evals" / "tasks" /
                                                                                       "softmax"), "--time-scale", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        banner = proc.stdout.readline()
        assert "(1 real kernel, " in banner, banner
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)


def test_a_client_that_goes_away_mid_reply_is_no_server_error(capfd):
    """A run killed while its calls are in flight closes their connections; the server carries on
    without a traceback per call (a killed T=16 run printed four into its bench's output)."""
    scale = 0.01
    with ReplayServer(TASK, seed=0, time_scale=scale, failure_rate=0.0) as s:
        for _ in range(3):
            with pytest.raises(httpx.TimeoutException):
                httpx.post(f"{s.url}/chat/completions", timeout=0.02, json={
                    "model": MODEL_ID, "messages": [{"role": "user", "content": "## Plan to implement\nshort"}]})
        assert ask(s.url, "summarizer", "Write one optimization lesson from this measured pair.").status_code == 200
        time.sleep(s.stats()["modelled_s"] * scale + 0.5)  # every abandoned reply has been written by now
        assert 0 < s.stats()["decode_share_of_peak"] < 1  # no wall decodes faster than the model's peak
    err = capfd.readouterr().err
    assert "Traceback" not in err and "BrokenPipe" not in err, err[-2000:]
