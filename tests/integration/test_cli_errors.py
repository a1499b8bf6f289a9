"""Bad input gets one clear error line and a non-zero exit, never a traceback."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def run_cli(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "accelopt", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})}, cwd=cwd)


def assert_clean_error(proc, *needles):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert lines and lines[0].startswith("error:"), proc.stderr
    for needle in needles:
        assert needle in proc.stderr


def test_missing_task_dir(tmp_path):
    assert_clean_error(run_cli("optimize", str(tmp_path / "nope"), "--device", "cpu"), "task directory not found")


def test_malformed_task_json(softmax_task):
    (softmax_task / "task.json").write_text("{ not json")
    assert_clean_error(run_cli("optimize", str(softmax_task)), "invalid JSON")


def test_task_json_missing_field(softmax_task):
    spec = json.loads((softmax_task / "task.json").read_text())
    del spec["workloads"]
    (softmax_task / "task.json").write_text(json.dumps(spec))
    assert_clean_error(run_cli("optimize", str(softmax_task)), "workloads")


def test_reference_without_required_function(softmax_task):
    (softmax_task / "reference.py").write_text("def reference(x):\n    return x\n")
    assert_clean_error(run_cli("optimize", str(softmax_task)), "make_inputs")


def test_unknown_provider(softmax_task):
    assert_clean_error(run_cli("optimize", str(softmax_task), "--model", "acme:big-model"),
                       "unknown model provider 'acme'")


def test_missing_api_key(softmax_task):
    proc = run_cli("optimize", str(softmax_task), "--model", "openai:gpt-4.1-mini")
    assert_clean_error(proc, "missing API key", "OPENAI_API_KEY")


@pytest.mark.parametrize("content,needle", [("[run]\nbeamz = 3\n", "unknown [run] setting"),
                                            ("[models.critic]\nmodel = 'x'\n", "unknown model role"),
                                            ("[run\n", "invalid TOML")])
def test_bad_config_file(softmax_task, tmp_path, content, needle):
    cfg = tmp_path / "accelopt.toml"
    cfg.write_text(content)
    assert_clean_error(run_cli("optimize", str(softmax_task), "--config", str(cfg)), needle)


def test_self_hosted_endpoint_needs_no_key(softmax_task, tmp_path):
    """vllm: provider with no key configured passes validation (it fails later only on connection)."""
    from accelopt.graph.config import load_context

    ctx, configured = load_context(None, model="vllm:openai/gpt-oss-120b")
    assert configured and ctx.model_spec("planner").provider == "vllm"


@pytest.mark.slow
def test_broken_baseline_stops_before_any_model_call(softmax_task, tmp_path):
    (softmax_task / "baseline.py").write_text(
        (softmax_task / "baseline.py").read_text().replace("num / den", "num / (den + 1.0)"))
    proc = run_cli("optimize", str(softmax_task), "--device", "cpu", "--no-memory", "--run-dir", str(tmp_path / "r"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "the baseline kernel fails its own check (wrong_output)" in proc.stderr
    result = json.loads((tmp_path / "r" / "candidates" / "baseline" / "result.json").read_text())
    assert result["status"] == "wrong_output"


@pytest.mark.slow
def test_corrupt_checkpoint_says_what_to_do_and_restart_replays_every_evaluation(tmp_path):
    run_dir = tmp_path / "run"
    first = run_cli("optimize", "evals/tasks/rmsnorm", "-B", "1", "-N", "2", "-K", "1", "-F", "0", "-T", "1",
                    "--device", "cpu", "--no-memory", "--run-dir", str(run_dir), cwd=ROOT)
    assert first.returncode == 0, first.stderr
    (run_dir / "checkpoints.sqlite").write_bytes(b"this is not a database" * 100)
    assert_clean_error(run_cli("resume", str(run_dir)), "is corrupt", "--restart", "replayed")
    again = run_cli("resume", str(run_dir), "--restart")
    assert again.returncode == 0, again.stderr
    # The search ran again from its start; every kernel was replayed from the cache, none re-measured.
    keys = [json.loads(line)["key"] for line in (run_dir / "evaluations.jsonl").read_text().splitlines()]
    assert len(keys) == len(set(keys)) == 3  # baseline and two kernels, each measured once
    assert json.loads((run_dir / "summary.json").read_text())["stop_reason"] == "reached T=1 iterations"


def test_run_dir_from_an_incompatible_version(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"format": 99, "task_dir": "x", "context": {}}))
    assert_clean_error(run_cli("resume", str(run_dir)), "incompatible accelopt", "run format 99")
    (run_dir / "run.json").write_text(json.dumps({"task_dir": "x", "context": {"beam_width": 3}}))
    assert_clean_error(run_cli("resume", str(run_dir)), "does not fit this version", "start a new run")
    assert_clean_error(run_cli("resume", str(tmp_path)), "not an accelopt run directory")


def test_a_graph_that_cannot_import_says_how_to_install(tmp_path):
    """What `langgraph dev` shows when langgraph.json's graph fails to import: here a dependency
    (openai) is shadowed by a broken module."""
    (tmp_path / "openai").mkdir()
    (tmp_path / "openai" / "__init__.py").write_text("raise ImportError('openai is broken here')\n")
    proc = subprocess.run([sys.executable, "-c", "import graph.builder"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"})
    assert proc.returncode != 0
    assert "accelopt's graph cannot be imported (openai is broken here)" in proc.stderr and "pip install -e ." \
        in proc.stderr
