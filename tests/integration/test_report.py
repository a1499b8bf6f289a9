"""`accelopt eval` over a small suite on the CPU, and the report rebuilt from disk."""

import json
import shutil
import subprocess

import pytest
from typer.testing import CliRunner

from accelopt.evals.report import TaskRow, fast_p, load_rows, suite_figures
from accelopt.cli.app import app
from tests.conftest import ROOT, TASKS

pytestmark = pytest.mark.slow
runner = CliRunner()


def _suite(tmp_path):
    suite = tmp_path / "suite"
    for name in ("rmsnorm", "softmax"):
        shutil.copytree(TASKS / name, suite / name)
    shutil.copytree(ROOT / "evals" / "nkibench" / "silu", suite / "nki_silu")  # not runnable here: skipped
    return suite


def test_eval_writes_a_report_and_resumes_by_skipping_finished_tasks(tmp_path):
    suite, out = _suite(tmp_path), tmp_path / "eval"
    args = ["eval", str(suite), "--out", str(out), "-B", "1", "-N", "1", "-K", "1", "-T", "2", "--device", "cpu",
            "--no-memory"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "skipped (NKI unavailable: install" in result.output
    assert "geomean best speedup over 2 tasks" in result.output  # the end-of-suite table
    table = result.output.split("[3/3]")[-1]
    assert all(name in table for name in ("rmsnorm", "softmax", "nki_silu", "optimized", "skipped"))
    page = (out / "report.html").read_text()
    assert "CPU Triton-interpreter timings" in page and page.count("data:image/png;base64,") == 4
    for plot in ("speedup_per_iteration", "per_task", "speedup_vs_cost", "fast_p"):
        assert (out / "plots" / f"{plot}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = json.loads((out / "report.json").read_text())
    rows = {t["task"]: t for t in report["tasks"]}
    assert rows["rmsnorm"]["outcome"] == "optimized" and rows["rmsnorm"]["iterations"] == 2
    assert rows["nki_silu"]["outcome"] == "skipped"
    assert report["figures"]["tasks"] == 3 and report["figures"]["optimized"] == 2
    assert report["figures"]["fast_p"]["0.0"] == pytest.approx(2 / 3)  # the skipped task counts as not fast
    # Rerunning the same eval directory skips what finished; `report` rebuilds the same page from disk.
    again = runner.invoke(app, args)
    assert again.exit_code == 0 and again.output.count("finished earlier, skipped") == 3
    (out / "report.html").unlink()
    assert runner.invoke(app, ["report", str(out)]).exit_code == 0 and (out / "report.html").is_file()


def test_eval_resumes_an_interrupted_task_from_its_checkpoint(tmp_path):
    suite, out = _suite(tmp_path), tmp_path / "eval"
    args = ["eval", str(suite), "--tasks", "softmax", "--out", str(out), "-B", "1", "-N", "1", "-K", "1", "-T", "1",
            "--device", "cpu", "--no-memory"]
    assert runner.invoke(app, args).exit_code == 0
    summary = out / "softmax" / "summary.json"
    data = json.loads(summary.read_text())
    summary.write_text(json.dumps({**data, "stop_reason": None}))  # as if killed before the end
    result = runner.invoke(app, args)
    assert result.exit_code == 0 and "softmax: resuming" in result.output


def test_unknown_task_names_fail_with_the_list(tmp_path):
    result = runner.invoke(app, ["eval", str(_suite(tmp_path)), "--tasks", "nope", "--device", "cpu"])
    assert result.exit_code == 2 and "no task named nope" in result.output and "rmsnorm" in result.output


def test_fast_p_and_geomean():
    rows = [TaskRow(task="a", run_dir="", outcome="optimized", speedup=2.0),
            TaskRow(task="b", run_dir="", outcome="optimized", speedup=0.5),
            TaskRow(task="c", run_dir="", outcome="failed")]
    assert fast_p(rows, ps=(0.0, 1.0, 2.0)) == {0.0: 2 / 3, 1.0: 1 / 3, 2.0: 0.0}
    assert suite_figures(rows)["geomean_speedup"] == pytest.approx(1.0)


def test_report_of_a_directory_without_runs_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="holds no accelopt run"):
        load_rows(tmp_path)
    assert runner.invoke(app, ["report", str(tmp_path)]).exit_code == 2


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Chromium (apt install chromium)")
def test_the_page_renders_in_headless_chromium(tmp_path):
    page = ROOT / "evals" / "results" / "h200-eval-tuner" / "report.html"
    shot = tmp_path / "shot.png"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,1600", f"--screenshot={shot}",
                    page.as_uri()], capture_output=True, timeout=120)
    assert shot.read_bytes()[:4] == b"\x89PNG" and shot.stat().st_size > 50_000  # a page with tables and plots
