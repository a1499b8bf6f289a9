"""The closing table of `accelopt optimize` after an offline run: its next steps fit the run. The
graph's drive is replaced by a finished state (the run itself is not what is checked here)."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from accelopt.cli import app as cli_app
from tests.conftest import ROOT


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
    tuner = _pasted(finished(softmax_task, tmp_path / "tuner"))
    assert tuner["with an LLM"] == f"accelopt optimize {softmax_task} --model vllm:MODEL --base-url URL"
    llm = _pasted(finished(softmax_task, tmp_path / "llm", "--model", "vllm:coder", "--base-url",
                           "http://127.0.0.1:9/v1"))
    assert set(llm) == {"on a GPU, with the same model settings", "what the model tried"}
    assert llm["what the model tried"] == f"accelopt show {tmp_path / 'llm'}"


# ---------------------------------------------------------------- pasted after `make demo`

def _pasted(output: str) -> dict[str, str]:
    """The closing next steps: each label (`  on a GPU:`) and its command as a shell reads the
    lines under it (a backslash-newline joins them: cli/layout.shell_command)."""
    block = output.split("\nnext:\n", 1)[1]
    found: dict[str, list[str]] = {}
    for line in block.splitlines():
        command = list(found.values())[-1] if found else None
        if line.startswith("  ") and not line.startswith("   ") and line.endswith(":"):
            found[line.strip()[:-1]] = []
        elif command is not None and (not command or command[-1].endswith("\\")):
            command.append(line)  # the command's first line, or one its last continues
        else:
            break
    return {label: " ".join(shlex.split("\n".join(lines).replace("\\\n", ""))) for label, lines in found.items()}


def _cli_word(command: str) -> str:
    """The command's first word: the CLI as the line names it."""
    return shlex.split(command)[0]


@pytest.mark.parametrize("activated", [False, True])
def test_the_next_steps_run_when_pasted_after_make_demo(finished, softmax_task, tmp_path, monkeypatch, activated):
    """`make demo` runs `.venv/bin/accelopt` from the clone's root, its venv not activated: PATH has
    no `accelopt`, and a line that says `accelopt show ...` is `command not found` (issue 53). Each
    line's CLI must start in a shell with that PATH, from that folder; in an activated venv it is
    plain `accelopt`."""
    script = Path(sys.executable).parent / "accelopt"  # the console script `make install` wrote
    assert script.is_file(), f"no console script beside {sys.executable}"
    clone = tmp_path / "clone"
    (clone / ".venv" / "bin").mkdir(parents=True)
    (clone / ".venv" / "bin" / "accelopt").symlink_to(script)
    monkeypatch.chdir(clone)
    path = (f"{clone / '.venv' / 'bin'}:" if activated else "") + "/usr/bin:/bin"
    monkeypatch.setenv("PATH", path)
    monkeypatch.setattr(sys, "argv", [".venv/bin/accelopt", "optimize"])  # as the Makefile's demo runs it
    out = finished(softmax_task, "runs/demo")
    lines = _pasted(out)
    assert set(lines) == {"on a GPU", "with an LLM", "what it tried"}, out
    assert lines["what it tried"].endswith(" show runs/demo")
    words = {_cli_word(c) for c in lines.values()}
    assert words == ({"accelopt"} if activated else {".venv/bin/accelopt"}), lines
    for word in words:  # pasted into a shell with the demo's PATH, in the folder it ran from
        ran = subprocess.run(["bash", "-c", f"{word} --version"], env={"PATH": path, "HOME": str(tmp_path)},
                             cwd=clone, capture_output=True, text=True, timeout=60)
        assert ran.returncode == 0 and "accelopt" in ran.stdout, (word, ran.stdout + ran.stderr)


def test_the_readme_pastes_what_the_demo_prints():
    """Every `accelopt` command of the README's first screen and install section, pasted after
    `make demo`, runs: it is `.venv/bin/accelopt`, or comes after `source .venv/bin/activate`."""
    text = (ROOT / "README.md").read_text()
    first = text.split("\n## Optimizing a task")[0]
    activate = first.find("source .venv/bin/activate")
    assert "make demo" in first and ".venv/bin/accelopt show runs/rmsnorm-TIME" in first
    bare = [m.start() for m in re.finditer(r"(?<![\w/.-])accelopt (?:optimize|show|runs|report|resume|eval|check)\b",
                                           first)]
    assert activate >= 0 and all(at > activate for at in bare), \
        [first[at:at + 40] for at in bare if activate < 0 or at < activate]
