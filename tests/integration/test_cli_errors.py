"""Bad input gets one clear error line and a non-zero exit, never a traceback."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT


def run_cli(*args, env=None, cwd=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "accelopt", *args], capture_output=True, text=True, timeout=timeout,
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


@pytest.mark.parametrize("content,needle", [("[run]\nbeamz = 3\n", "[run]: did you mean 'beams'?"),
                                            ("[models.critic]\nmodel = 'x'\n", "unknown model role"),
                                            ("[models.default]\nmax_token = 9\n", "did you mean 'max_tokens'?"),
                                            ("[models.default]\napi_key = 'sk-1'\n", "never stored in the config"),
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
    out = " ".join(first.stdout.replace("│", " ").split())  # the table wraps: words, not lines or cells
    assert "none stored (--no-memory)" in out and "insights stored" not in out
    assert "on a GPU: accelopt optimize" in out and "correct on 6 fresh input sets" in out
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


def _shadowed(tmp_path, package: str) -> dict:
    """An environment where `package` is shadowed by a module that fails to import."""
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text(f"raise ImportError('{package} is broken here')\n")
    return {**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"}


def test_a_graph_that_cannot_import_says_how_to_install(tmp_path):
    """What `langgraph dev` shows when langgraph.json's graph fails to import: here a dependency
    (platformdirs) is shadowed by a broken module."""
    proc = subprocess.run([sys.executable, "-c", "import graph.builder"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=_shadowed(tmp_path, "platformdirs"))
    assert proc.returncode != 0
    assert "accelopt's graph cannot be imported (platformdirs is broken here)" in proc.stderr and "pip install -e ." \
        in proc.stderr


def test_a_broken_llm_client_stops_a_model_run_in_one_line_and_no_tuner_run(softmax_task, tmp_path):
    """openai is imported only where a model is used: the graph imports without it, and a run
    with a model stops at its preflight with the fix, before any work."""
    env = _shadowed(tmp_path, "openai")
    proc = subprocess.run([sys.executable, "-c", "import graph.builder"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "run"
    proc = run_cli("optimize", str(softmax_task), "--device", "cpu", "--no-memory", "--run-dir", str(run_dir),
                   "--model", "vllm:m", "--base-url", "http://127.0.0.1:9/v1", env=env, cwd=ROOT)
    assert_clean_error(proc, "the LLM client cannot be imported (openai is broken here)", "--model tuner")
    assert not run_dir.exists()


NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}  # no GPU for torch, also on a machine that has one


def test_device_cuda_without_a_gpu_is_refused_before_any_work(softmax_task, tmp_path):
    """Not a 20 s run that ends in a worker traceback blaming the baseline: one line, exit 2."""
    run_dir = tmp_path / "run"
    proc = run_cli("optimize", str(softmax_task), "--device", "cuda", "--no-memory", "--run-dir", str(run_dir),
                   env=NO_GPU)
    assert_clean_error(proc, "--device cuda: no CUDA GPU is visible here", "--device cpu")
    assert len(proc.stderr.strip().splitlines()) == 1 and not run_dir.exists()
    proc = run_cli("check", str(softmax_task), str(softmax_task / "baseline.py"), "--device", "cuda", env=NO_GPU)
    assert_clean_error(proc, "--device cuda: no CUDA GPU is visible here")
    out = tmp_path / "eval"
    proc = run_cli("eval", str(softmax_task.parent), "--device", "cuda", "--out", str(out), env=NO_GPU)
    assert_clean_error(proc, "--device cuda: no CUDA GPU is visible here")
    assert not out.exists()
    proc = run_cli("optimize", str(softmax_task), "--device", "gpu")  # not a device: a usage error, one line
    assert_clean_error(proc, "'gpu' is not one of 'auto'")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_model_without_a_provider_is_refused_with_how_to_name_it(softmax_task, tmp_path):
    proc = run_cli("optimize", str(softmax_task), "--model", "llama3")
    assert_clean_error(proc, "model 'llama3' names no provider", "vllm:llama3", "ollama:llama3")
    proc = run_cli("eval", str(softmax_task.parent), "--model", "llama3", "--out", str(tmp_path / "eval"))
    assert_clean_error(proc, "model 'llama3' names no provider")
    proc = run_cli("optimize", str(softmax_task), "--model", "gpt-4.1-mini", env={"OPENAI_API_KEY": ""})
    assert_clean_error(proc, "missing API key for openai:gpt-4.1-mini")  # an OpenAI family: taken as openai's


def test_doctor_exits_1_when_something_a_run_needs_is_broken():
    proc = run_cli("doctor", env={"ACCELOPT_MODEL": "llama3", "COLUMNS": "400", **NO_GPU})  # one line a row
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "not ready: the model settings" in proc.stderr
    assert "names no provider" in " ".join(proc.stdout.split())
    assert "candidate confinement" in proc.stdout


def test_eval_exits_1_when_a_task_failed_and_0_when_tasks_were_skipped(softmax_task, tmp_path):
    (softmax_task / "task.json").write_text("{ not json")
    out = tmp_path / "eval"
    proc = run_cli("eval", str(softmax_task.parent), "--device", "cpu", "--no-memory", "--out", str(out))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert "error: 1 of 1 tasks failed: softmax (" in proc.stderr and "invalid JSON" in proc.stderr
    assert (out / "report.html").is_file()  # the report is written all the same
    # NKI tasks on a machine without the Neuron SDK: skipped, each with its reason; not a failure
    proc = run_cli("eval", "nkibench", "--tasks", "adamw", "--device", "auto", "--no-memory", "--out",
                   str(tmp_path / "nki"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "skipped" in proc.stdout


def _session_processes(sid: int) -> list[str]:
    """Command lines of the live (not zombie) processes of a session."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":  # fields after the name: state, ppid, pgrp, session
            found.append(cmdline)
    return found


@pytest.mark.slow
def test_ctrl_c_says_how_to_resume_exits_130_and_leaves_no_process(tmp_path):
    """Ctrl-C in a terminal reaches the whole process group: the run, its judges, their sandboxes."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "accelopt", "optimize", str(ROOT / "evals" / "tasks" / "rmsnorm"),
                             "-T", "3", "--device", "cpu", "--no-memory", "--run-dir", str(run_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not any("judge.py" in c for c in _session_processes(proc.pid)):  # evaluating: judges started
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err and f"interrupted: continue with `accelopt resume {run_dir}`" in err, err
    deadline = time.monotonic() + 10
    while _session_processes(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _session_processes(proc.pid) == []
    # nothing the interrupt cut off was recorded as a kernel's failure
    for line in (run_dir / "evaluations.jsonl").read_text().splitlines() if (run_dir / "evaluations.jsonl").exists() \
            else []:
        assert json.loads(line)["status"] != "runtime_error", line


@pytest.mark.slow
def test_eval_with_a_larger_t_extends_finished_tasks(tmp_path):
    suite = tmp_path / "suite"
    shutil.copytree(ROOT / "evals" / "tasks" / "rmsnorm", suite / "rmsnorm")
    out = tmp_path / "eval"
    args = ("eval", str(suite), "-B", "1", "-N", "1", "-F", "0", "--device", "cpu", "--no-memory", "--out", str(out))
    first = run_cli(*args, "-T", "1", timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    assert json.loads((out / "rmsnorm" / "summary.json").read_text())["iteration"] == 1
    again = run_cli(*args, "-T", "1")
    assert "finished earlier, skipped" in again.stdout
    longer = run_cli(*args, "-T", "2", timeout=600)
    assert longer.returncode == 0, longer.stdout + longer.stderr
    assert "extending to T=2" in longer.stdout and "finished earlier" not in longer.stdout
    summary = json.loads((out / "rmsnorm" / "summary.json").read_text())
    assert (summary["iteration"], summary["stop_reason"]) == (2, "reached T=2 iterations")
    assert json.loads((out / "rmsnorm" / "run.json").read_text())["context"]["iterations"] == 2


def test_a_cost_budget_with_an_unpriced_model_is_refused_before_any_work(softmax_task, tmp_path):
    proc = run_cli("optimize", str(softmax_task), "--model", "vllm:big", "--max-cost", "1", "--device", "cpu",
                   "--run-dir", str(tmp_path / "run"))
    assert_clean_error(proc, "vllm:big (planner, executor, fixer, summarizer) has no price",
                       '[prices] "vllm:big"', "run without --max-cost")
    assert not (tmp_path / "run").exists()


def test_calls_the_budget_did_not_pay_for_are_not_counted_as_evaluated():
    from accelopt.tools.run_record import candidate_counts

    candidates = {"baseline": {"status": "verified"}, "a": {"status": "no_code"}, "b": {"status": "not_sent"},
                  "c": {"status": "not_sent"}, "d": {"status": "wrong_output"}}
    # a reply without a kernel never reached the judge either
    assert candidate_counts(candidates) == (1, {"no_code": 1, "not_sent": 2, "wrong_output": 1})


@pytest.mark.parametrize("command,flag,value", [("optimize", "--max-cost", "-5"), ("optimize", "--max-tokens", "0"),
                                                ("optimize", "--max-wall", "-1.5"), ("eval", "--max-cost", "0")])
def test_a_budget_of_zero_or_less_is_refused(tmp_path, command, flag, value):
    proc = run_cli(command, str(tmp_path / "nope"), flag, value)
    assert_clean_error(proc, f"{flag} {value}: a budget must be greater than 0")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_memory_show_of_an_unknown_id_names_it_and_how_to_list_them(tmp_path):
    store = tmp_path / "memory"
    store.mkdir()
    proc = run_cli("memory", "show", "nosuchid", "--memory", str(store))
    assert_clean_error(proc, "no insight 'nosuchid'", f"accelopt memory list --memory {store}")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_the_tuner_on_a_task_without_a_baseline_is_refused_before_any_work(softmax_task, tmp_path):
    """A task with no baseline.py (a KernelBench import) needs a first kernel written from the
    reference: the tuner cannot, so the run is refused before judges start or the run dir is claimed."""
    (softmax_task / "baseline.py").unlink()
    run_dir = tmp_path / "run"
    proc = run_cli("optimize", str(softmax_task), "--model", "tuner", "--device", "cpu", "--no-memory",
                   "--run-dir", str(run_dir))
    assert_clean_error(proc, "task softmax has no baseline.py", "--device cpu was given", "--seed-capture", "--model")
    assert len(proc.stderr.strip().splitlines()) == 1 and not run_dir.exists()


HELP = "(see: python -m accelopt {} --help)"


@pytest.mark.parametrize("args,line", [
    # the values a RunContext field bounds: its rule, in the words the graph's setup uses (test_dev_server)
    (("optimize", "T", "-B", "-1"), "--beams -1: must be at least 1"),
    (("optimize", "T", "-T", "0"), "--iterations 0: must be at least 1"),
    (("optimize", "T", "-F", "-2"), "--fixes -2: must be at least 0"),
    (("optimize", "T", "--eval-timeout", "0"), "--eval-timeout 0: must be greater than 0"),
    (("eval", "T", "-K", "0"), "--samples 0: must be at least 1"),
    (("resume", "R", "-T", "0"), "--iterations 0: must be at least 1"),
    (("check", "T", "K.py", "--timeout", "-1"), "--timeout -1: must be greater than 0"),
    (("check", "T", "K.py", "--timeout", "0"), "--timeout 0: must be greater than 0"),
    # click's usage errors, each command's: one line, with where the usage is
    (("optimize", "T", "--device", "tpu"),
     "invalid value for '--device': 'tpu' is not one of 'auto', 'cuda', 'cpu'. " + HELP.format("optimize")),
    (("optimize", "T", "--beems", "2"),
     "no such option: --beems (Possible options: --beams, --seed) " + HELP.format("optimize")),
    (("optimize", "T", "-B", "two"), "invalid value for '--beams' / '-B': Input should be a valid integer, unable "
                                     "to parse string as an integer " + HELP.format("optimize")),
    (("optimize",), "missing argument 'task_dir'. " + HELP.format("optimize")),
    (("check", "T", "K.py", "--timeout", "soon"), "invalid value for '--timeout': Input should be a valid number, "
                                                  "unable to parse string as a number " + HELP.format("check")),
    (("memory", "list", "--limit", "x"), "invalid value for '--limit': Input should be a valid integer, unable to "
                                         "parse string as an integer " + HELP.format("memory list")),
    (("frobnicate",), "no such command 'frobnicate'. (see: python -m accelopt --help)"),
])
def test_every_usage_error_is_one_error_line_and_exit_2(args, line):
    """Not typer's 5-6 line box, nor a value taken as given (`check --timeout -1` judged a timeout)."""
    proc = run_cli(*args)
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, f"error: {line}\n", ""), proc.stderr


def test_a_base_url_that_is_not_a_url_is_named_before_any_work(softmax_task, tmp_path):
    """A README placeholder pasted as is (`--base-url URL`) said only `cannot connect
    (UnsupportedProtocol)`: now one line naming the value and what an address looks like."""
    run_dir = tmp_path / "run"
    for given in ("URL", "127.0.0.1:8000/v1"):
        proc = run_cli("optimize", str(softmax_task), "--device", "cpu", "--no-memory", "--run-dir", str(run_dir),
                       "--model", "vllm:m", "--base-url", given)
        assert_clean_error(proc, f"base_url '{given}' is not an http(s) URL", "http://127.0.0.1:8000/v1")
        assert not run_dir.exists()
