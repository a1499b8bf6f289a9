"""The closing table of `accelopt optimize` after an offline run: its next steps fit the run. The
graph's drive is replaced by a finished state (the run itself is not what is checked here)."""

import pytest
from typer.testing import CliRunner

from accelopt.cli import app as cli_app


@pytest.fixture
def finished(monkeypatch):
    """`optimize` through the CLI, its drive returning a finished interpreter run at once."""
    def drive(ctx, run_dir, inputs, console, on_plans=None):
        baseline = {"id": "baseline", "status": "verified", "speedup": 1.0, "iteration": 0, "kind": "kernel",
                    "timer": "interpreter_wall"}
        return {"task_dir": inputs["task_dir"], "iteration": 1, "stop_reason": "iterations done",
                "beam": ["baseline"], "baseline_id": "baseline", "candidates": {"baseline": baseline}}

    monkeypatch.setattr("accelopt.graph.driver.drive", drive)
    monkeypatch.setattr(cli_app, "_html_report", lambda run_dir: None)
    monkeypatch.setattr(cli_app.console, "width", 400)  # one table row a line
    for name in ("ACCELOPT_MODEL", "ACCELOPT_BASE_URL", "ACCELOPT_CONFIG"):
        monkeypatch.delenv(name, raising=False)

    def run(task, run_dir, *flags):
        out = CliRunner().invoke(cli_app.app, ["optimize", str(task), "--device", "cpu", "--no-memory",
                                               "--no-preflight", "--run-dir", str(run_dir), *flags])
        assert out.exit_code == 0, out.output
        return out.output
    return run


def test_only_a_tuner_run_is_told_to_try_an_llm(finished, softmax_task, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./accelopt.toml
    tuner = finished(softmax_task, tmp_path / "tuner")
    assert "with an LLM: accelopt optimize" in tuner and "--model vllm:MODEL --base-url URL" in tuner
    llm = finished(softmax_task, tmp_path / "llm", "--model", "vllm:coder", "--base-url", "http://127.0.0.1:9/v1")
    assert "with an LLM" not in llm and "--model vllm:MODEL" not in llm
    assert f"accelopt show {tmp_path / 'llm'}" in llm and "with the same model settings" in llm
