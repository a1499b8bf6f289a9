"""`accelopt check`: one kernel judged as a user would, with exit codes scripts can rely on."""

import json

import pytest
from typer.testing import CliRunner

from accelopt.cli.app import app
from tests.scripted import BASELINE, WRONG

pytestmark = pytest.mark.slow


def test_a_verified_kernel_exits_0_with_its_evidence_and_times(softmax_task, tmp_path):
    kernel = tmp_path / "k.py"
    kernel.write_text(BASELINE)
    out = CliRunner().invoke(app, ["check", str(softmax_task), str(kernel), "--device", "cpu", "--json"])
    assert out.exit_code == 0, out.output
    result = json.loads(out.output)
    assert result["status"] == "verified" and result["timer"] == "interpreter_wall"
    assert any("ghost replay" in e for e in result["evidence"])
    assert set(result["versus"]) == {"baseline"}


def test_each_check_draws_its_own_seed_and_replay_draws_a_verdicts_inputs_again(softmax_task, tmp_path):
    """A wrong kernel's error names the seed of its failing draw; `--replay` fails the same way."""
    kernel = tmp_path / "k.py"
    kernel.write_text(WRONG)
    runs = [json.loads(CliRunner().invoke(app, ["check", str(softmax_task), str(kernel), "--device", "cpu",
                                                 "--json"]).output) for _ in range(2)]
    assert runs[0]["seed"] != runs[1]["seed"] and runs[0]["error"] != runs[1]["error"]
    again = CliRunner().invoke(app, ["check", str(softmax_task), str(kernel), "--device", "cpu", "--json",
                                     "--replay", str(runs[0]["seed"])])
    assert again.exit_code == 1 and json.loads(again.output)["error"] == runs[0]["error"]


def test_naming_a_compile_mode_asks_for_the_torch_comparison(softmax_task, tmp_path, monkeypatch):
    """--compile-mode without --versus-torch still times the PyTorch reference (on the CPU eager
    alone: Inductor's C++ against an interpreted kernel would mean nothing)."""
    from accelopt.cli import check as check_cli

    asked = {}
    judged = check_cli.judge

    def spy(task, kernel, against, versus_torch, device, timeout, compile_mode="default", **kwargs):
        asked.update(versus_torch=versus_torch, compile_mode=compile_mode)
        return judged(task, kernel, against, versus_torch, device, timeout, compile_mode, **kwargs)

    monkeypatch.setattr(check_cli, "judge", spy)
    kernel = tmp_path / "k.py"
    kernel.write_text(BASELINE)
    out = CliRunner().invoke(app, ["check", str(softmax_task), str(kernel), "--device", "cpu", "--json",
                                   "--compile-mode", "max-autotune-no-cudagraphs"])
    assert out.exit_code == 0, out.output
    assert asked == {"versus_torch": True, "compile_mode": "max-autotune-no-cudagraphs"}
    assert set(json.loads(out.output)["versus"]) == {"baseline", "eager"}


def test_a_rejected_kernel_exits_1_and_says_why(softmax_task, tmp_path):
    kernel, other = tmp_path / "k.py", tmp_path / "other.py"
    kernel.write_text(WRONG)
    other.write_text(BASELINE)
    out = CliRunner().invoke(app, ["check", str(softmax_task), str(kernel), "--against", str(other),
                                   "--device", "cpu"])
    assert out.exit_code == 1 and "wrong_output" in out.output and "max abs err" in out.output


@pytest.mark.parametrize("args", [["no-such-task", "k.py"], ["TASK", "no-such-kernel.py"]])
def test_bad_input_exits_2(softmax_task, args):
    args = [str(softmax_task) if a == "TASK" else a for a in args]
    out = CliRunner().invoke(app, ["check", *args, "--device", "cpu"])
    assert out.exit_code == 2 and "error:" in out.output


def test_a_failing_kernel_is_reported_in_the_users_file_once_per_call(softmax_task, tmp_path):
    """The traceback names the file the user gave (not the sandbox's copy), and the call it failed
    in once."""
    kernel = tmp_path / "mine.py"
    kernel.write_text(BASELINE.replace("tl.exp(", "undefined_name + tl.exp(", 1))
    assert kernel.read_text() != BASELINE
    out = CliRunner().invoke(app, ["check", str(softmax_task), str(kernel), "--device", "cpu", "--json"])
    result = json.loads(out.output)
    assert out.exit_code == 1 and result["status"] in ("runtime_error", "compile_error"), result["error"]
    assert f'"{kernel}"' in result["error"] and "sandbox-" not in result["error"]
    where = result["error"].split("\n", 1)[0]
    assert where.startswith("workload ") and result["error"].count(where) == 1, result["error"][:300]


def test_a_16_bit_task_failing_on_the_interpreter_says_what_its_inputs_are_there(tmp_path):
    from accelopt.tools.task import load_task
    from tests.conftest import TASKS

    given = load_task(TASKS / "gemm_bf16").spec.dtype_for("cpu")
    assert given != "bfloat16"

    kernel = tmp_path / "strict.py"
    source = (TASKS / "gemm_bf16" / "baseline.py").read_text()
    kernel.write_text(source.replace("    x, w = x.contiguous(), w.contiguous()\n",
                                     "    assert x.dtype == torch.bfloat16, x.dtype\n    x, w = x.contiguous(), w.contiguous()\n"))
    out = CliRunner().invoke(app, ["check", str(TASKS / "gemm_bf16"), str(kernel), "--device", "cpu", "--json"])
    result = json.loads(out.output)
    assert out.exit_code == 1, result
    assert f"this bfloat16 task's inputs are {given}" in result["error"], result["error"][-500:]


def test_a_check_says_where_its_seconds_went_before_the_judge(softmax_task, tmp_path):
    """Beyond the judge's own steps: the process's start and imports, the task and kernel read,
    the judge pool, the judge's start with its sandbox template; in --json as `before_judge_s`."""
    kernel = tmp_path / "k.py"
    kernel.write_text(BASELINE)
    out = CliRunner().invoke(app, ["check", str(softmax_task), str(kernel), "--device", "cpu", "--json"])
    before = json.loads(out.output)["before_judge_s"]
    assert set(before) == {"process", "prepare", "judge_pool", "judge_start", "to_verdict"}
    assert all(isinstance(v, float) and v >= 0 for v in before.values()), before
    assert before["to_verdict"] >= before["prepare"] + before["judge_pool"] + before["judge_start"]
    out = CliRunner().invoke(app, ["check", str(softmax_task), str(kernel), "--device", "cpu"])
    line = next(line for line in out.output.splitlines() if "before the judge" in line)
    assert all(words in line for words in ("process start and imports", "task and kernel", "judge pool",
                                           "judge start and sandbox template", "to the verdict")), line
