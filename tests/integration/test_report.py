"""The report: `accelopt eval` over a small suite on the CPU with the report rebuilt from disk, and
the page's content checked on run directories written here the way a GPU run writes them."""

import base64
import html
import io
import json
import re
import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from accelopt.cli.app import app
from accelopt.evals.reporting import report_plots
from accelopt.evals.reporting.report import build_report, load_rows, suite_figures
from accelopt.evals.reporting.report_html import diff_html, render_html
from accelopt.evals.reporting.report_plots import LABEL_WIDTH, _step_label
from accelopt.evals.reporting.rows import TaskRow, best_per_iteration, fast_p, interval_label
from tests.conftest import ROOT, TASKS

runner = CliRunner()
PNG = b"\x89PNG\r\n\x1a\n"
BASELINE = (TASKS / "rmsnorm" / "baseline.py").read_text()
H100 = "NVIDIA H100 80GB HBM3"
ENV = {"accelopt": "0.1.0", "torch": "2.11.0+cu130", "triton": "3.6.0", "python": "3.12.3",
       "git_commit": "0123456789abcdef0123456789abcdef01234567", "git_dirty": False}
# rmsnorm's GPU workloads: FLOPs and bytes as the reference counts them (fp16, 4 FLOPs an element)
ROUNDS = (0.98, 1.0, 1.01, 0.99, 1.02)  # each round's median, as a share of the median
WORKLOADS = {"T4096_H4096": (4096 * 4096 * 4.0, 4096 * 4096 * 4.0 + 8192), "T2048_H8192": (2048 * 8192 * 4.0,
                                                                                            2048 * 8192 * 4.0 + 16384)}


def _suite(tmp_path):
    suite = tmp_path / "suite"
    for name in ("rmsnorm", "softmax"):
        shutil.copytree(TASKS / name, suite / name)
    shutil.copytree(ROOT / "evals" / "nkibench" / "silu", suite / "nki_silu")  # not runnable here: skipped
    return suite


def _timing(us: float, flops: float, nbytes: float, timer: str) -> dict:
    metric = "interpreter_wall" if timer == "interpreter_wall" else "gpu_span"
    return {"median_us": us, "iqr_us": us * 0.04, "samples": 50, "metric": metric,
            "round_medians_us": [us * f for f in ROUNDS], "flops": flops, "bytes": nbytes}


def _write(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))


def write_run(run_dir: Path, *, speedup: float | None, interval=(0.97, 1.03), rounds=5, vs_tc=None, tc_mode=None,
              timer="cuda_event", device=H100, cost=0.0, failed=1) -> Path:
    """A finished run directory as the graph and `eval` write it: run.json, summary.json, the
    candidates' result.json and kernel.py, best_kernel.py and, with vs_tc, torch_compile.json.
    speedup None: nothing beat the baseline, the best is the baseline itself."""
    task = run_dir.name
    task_dir = run_dir.parent / "tasks" / task  # the task, under its own name
    if not task_dir.exists():
        shutil.copytree(TASKS / "rmsnorm", task_dir)
    _write(run_dir / "run.json", {
        "format": 1, "task_dir": str(task_dir), "thread_id": task, "created": "2026-11-23T10:00:00+0000",
        "environment": ENV, "context": {"beams": 1, "plans": 2, "samples": 1, "fixes": 2, "iterations": 2,
                                        "autotune": 0, "model": "openai:gpt-4.1-mini", "role_models": {},
                                        "use_memory": False}})
    base_us = 40.0
    device_name = device if timer != "interpreter_wall" else "cpu (Triton interpreter)"

    def result(cid, iteration, us, status="verified", versus=None, parent=None):
        record = {"id": cid, "iteration": iteration, "parent_id": parent, "status": status, "device_name": device_name,
                  "timer": timer, "kind": "kernel", "cost_usd": cost / 2,
                  "workloads": {w: _timing(us, f, b, timer) for w, (f, b) in WORKLOADS.items()}
                  if status == "verified" else {}}
        if versus:
            record |= {"versus": {"baseline": versus}, "speedup": versus["speedup"],
                       "compared_us": {"baseline": {w: base_us for w in WORKLOADS}}}
        _write(run_dir / "candidates" / cid / "result.json", record)
        _write(run_dir / "candidates" / cid / "kernel.py", BASELINE)

    result("baseline", 0, base_us)
    best_id, best_source = "baseline", BASELINE
    if speedup is not None:
        best_id = "i1.m0.p0.k0"
        best_source = BASELINE.replace("num_warps=4", "num_warps=8")
        result(best_id, 1, base_us / speedup, parent="baseline", versus={
            "speedup": speedup, "ci_low": interval[0], "ci_high": interval[1], "rounds": rounds,
            "faster": interval[0] > 1, "slower": interval[1] < 1})
        _write(run_dir / "candidates" / best_id / "kernel.py", best_source)
    result("i1.m0.p1.k0", 1, base_us * 1.3, versus={"speedup": 0.77, "ci_low": 0.75, "ci_high": 0.8, "rounds": rounds})
    for n in range(failed):
        result(f"i2.m0.p{n}.k0", 2, 0, status="wrong_output")
    _write(run_dir / "best_kernel.py", best_source)
    best = speedup or 1.0
    _write(run_dir / "summary.json", {
        "task_dir": str(task_dir), "iteration": 2, "stop_reason": "reached T=2 iterations", "best_id": best_id,
        "best_speedup": speedup, "baseline_kind": "kernel", "timer": timer, "device_name": device_name,
        "best_pct_peak": 61.0 if timer != "interpreter_wall" else None,
        "best_pct_achievable": 68.0 if timer != "interpreter_wall" else None,
        "best_pct_of_copy": 87.5 if timer != "interpreter_wall" else None,
        "usage": {"input_tokens": 1000, "output_tokens": 500, "cost_usd": cost},
        "iterations": [{"iteration": 1, "best_id": best_id, "best_speedup": best},
                       {"iteration": 2, "best_id": best_id, "best_speedup": best}]})
    if vs_tc is not None:
        us = base_us / best
        _write(run_dir / "torch_compile.json", {
            "status": "verified", "error": None, "device_name": device,
            **({"torch_compile_mode": tc_mode} if tc_mode else {}),
            "versus": {"torch_compile": {"speedup": vs_tc, "ci_low": vs_tc * 0.98, "ci_high": vs_tc * 1.01,
                                         "rounds": 5, "faster": vs_tc * 0.98 > 1, "slower": vs_tc * 1.01 < 1},
                       "eager": {"speedup": 2.0, "ci_low": 1.9, "ci_high": 2.1, "rounds": 5}},
            "median_us": {"best": {w: us for w in WORKLOADS}, "torch_compile": {w: us * vs_tc for w in WORKLOADS}},
            "workloads": {name: {w: {"median_us": us * f, "iqr_us": f, "round_medians_us": [us * f * g for g in ROUNDS]}
                                 for w in WORKLOADS} for name, f in (("best", 1.0), ("torch_compile", vs_tc),
                                                                     ("eager", 2.0))}})
    return run_dir


@pytest.fixture
def gpu_suite(tmp_path):
    """An eval directory of three GPU tasks: one optimized but slower than torch.compile, one where
    nothing beat the baseline, one skipped."""
    out = tmp_path / "eval"
    write_run(out / "fast", speedup=1.25, interval=(1.21, 1.3), vs_tc=0.8)
    write_run(out / "flat", speedup=None, vs_tc=0.9)
    _write(out / "gpu_only" / "skipped.json", {"reason": "NKI unavailable"})
    return out


def _page_text(page: Path) -> str:
    """The page without its inlined images."""
    return re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "IMG", page.read_text())


def _decodes(png: bytes) -> bool:
    import matplotlib.pyplot as plt

    return png[:8] == PNG and plt.imread(io.BytesIO(png), format="png").shape[0] > 50


# ---------------------------------------------------------------- the page, from run directories

def test_a_gpu_suite_page_tells_the_truth(gpu_suite):
    page = build_report(gpu_suite)
    text = _page_text(page)
    # provenance: when, which software, which device, how hard it searched, who wrote the kernels, which timer
    for field in ("2026-11-23T10:00:00+0000", "accelopt", "0.1.0", "0123456789abcdef", "torch", "2.11.0+cu130",
                  "Triton", "3.6.0", H100, "B=1 N=2 K=1 F=2 T=2", "openai:gpt-4.1-mini", "GPU time (CUDA)"):
        assert field in text, field
    assert "CPU Triton-interpreter" not in text and "CPU interpreter" not in text  # a GPU page says nothing of it
    # the interval is a range over 5 rounds, said so, never a 95% CI
    assert "95%" not in text and not re.search(r"\bCI\b", text)
    assert "1.210–1.300, range over 5 rounds" in text and "93.8%" in text
    assert "% of same-size copy" in text and "87.5%" in text  # the copy yardstick beside the roofline
    # a task whose best is its baseline is not optimized
    flat = text.split("id='task_flat'")[1]
    assert flat.split("</p>")[0].count("no faster kernel found") == 1 and "optimized" not in flat.split("</p>")[0]
    assert "The best kernel is the baseline itself" in flat and "(identical)" not in flat
    rows = {t["task"]: t for t in json.loads((gpu_suite / "report.json").read_text())["tasks"]}
    assert rows["flat"]["verdict"] == "no faster kernel" and rows["flat"]["label"] == "no faster kernel found"
    assert rows["fast"]["verdict"] == "faster" and rows["fast"]["label"].startswith("optimized")
    # slower than torch.compile: per task and for the suite's geomean
    assert "slower than torch.compile beyond noise: the best kernel runs at 0.800x of torch.compile(reference)" in text
    assert "The best kernels are slower than torch.compile</b>: geomean 0.849x" in text
    # a roofline per verified GPU task, every candidate per iteration, workloads with spread; no $0 cost plot
    for key in ("roofline_fast", "roofline_flat", "candidates_fast", "lineage_fast", "workloads_fast", "per_task",
                "fast_p"):
        assert _decodes((gpu_suite / "plots" / f"{key}.png").read_bytes()), key
        assert f"alt='{key}'" in text
    assert not (gpu_suite / "plots" / "speedup_vs_cost.png").exists() and "No cost figure" in text
    assert "No roofline" not in text
    # the diff: one element per line, nothing between them, additions and removals marked
    diff = text.split("<div class='diff'>")[1].split("</details>")[0]
    assert "\n" not in diff and "<div></div>" not in diff
    assert '<div class="del">-    rmsnorm_kernel[(n_rows,)](x, w, out, x.stride(0), hidden, 1e-6, BLOCK=256, ' \
           'num_warps=4)</div><div class="add">+' in diff


def test_an_interpreter_run_is_labelled_and_has_no_roofline(tmp_path):
    run = write_run(tmp_path / "r", speedup=1.3, interval=(1.2, 1.7), rounds=2, timer="interpreter_wall")
    text = _page_text(build_report(run))
    assert "CPU Triton-interpreter timings" in text and "CPU Triton-interpreter wall time" in text
    assert "No roofline: a CPU Triton-interpreter run" in text and "roofline_r" not in text
    # the interpreter decides nothing, whatever an older record says (faster: its interval lies above 1)
    assert "verified on the CPU interpreter, which cannot tell faster from slower" in text
    assert "optimized" not in text.split("id='task_r'")[1].split("</p>")[0] and "faster, within noise" not in text
    assert "range over 2 rounds" in text and "50.0%" in text and "95%" not in text
    assert "n/a (CPU)" in text and text.count("<span class='tag'>CPU interpreter</span>") >= 3


def test_gpu_and_interpreter_figures_are_never_pooled(tmp_path):
    write_run(tmp_path / "e" / "gpu", speedup=2.0, interval=(1.9, 2.1))
    write_run(tmp_path / "e" / "cpu", speedup=1.1, interval=(0.9, 1.2), rounds=2, timer="interpreter_wall")
    rows = load_rows(tmp_path / "e")
    figures = suite_figures(rows)
    assert figures["geomean_speedup"] is None  # two timers: no geomean over both
    assert figures["by_timer"]["cuda_event"]["geomean_speedup"] == pytest.approx(2.0)
    assert figures["by_timer"]["interpreter_wall"]["geomean_speedup"] == pytest.approx(1.1)
    build_report(tmp_path / "e")
    plots = {p.name for p in (tmp_path / "e" / "plots").iterdir()}
    assert {"per_task_cuda_event.png", "per_task_interpreter_wall.png"} <= plots and "per_task.png" not in plots


def test_the_cost_plot_appears_only_when_something_cost_money(tmp_path):
    write_run(tmp_path / "e" / "a", speedup=1.5, interval=(1.4, 1.6), cost=0.12)
    build_report(tmp_path / "e")
    assert _decodes((tmp_path / "e" / "plots" / "speedup_vs_cost.png").read_bytes())


def test_a_device_without_ceilings_says_why_there_is_no_roofline(tmp_path):
    run = write_run(tmp_path / "r", speedup=1.5, interval=(1.4, 1.6), device="NVIDIA GeForce RTX 4090")
    assert "No roofline: no ceilings known for the device NVIDIA GeForce RTX 4090" in _page_text(build_report(run))


def test_report_prints_the_headline_numbers_before_the_page(gpu_suite):
    result = runner.invoke(app, ["report", str(gpu_suite)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    table, page = result.output.rsplit("report: ", 1)
    assert page.strip().endswith("report.html")
    assert "no faster kernel found" in table and "optimized (faster beyond noise)" in table
    assert "1.250x (1.210–1.300, range over 5 rounds)" in table and "0.800x (slower)" in table
    assert "geomean best speedup over 2 tasks: 1.118x (GPU time (CUDA)); vs torch.compile over 2: 0.849x (slower " \
           "than torch.compile)" in table
    assert "skipped: NKI unavailable" in table and "95%" not in table


# ---------------------------------------------------------------- one evaluation per figure, the lineage

SETUP_US = 12.345  # the baseline's own evaluation at setup: another moment, never set beside the best


def write_interpreter_run(run_dir: Path, steps, failed: int = 1) -> Path:
    """A finished interpreter run as the demo leaves one. `steps`: (id, iteration, parent, plan title, the
    kernel's µs and the baseline's µs in the kernel's own evaluation, speedup, interval, vs parent); the
    last is the best. Each evaluation ran at its own moment, so absolute times do not compare across them."""
    task_dir = run_dir.parent / "tasks" / run_dir.name
    if not task_dir.exists():
        shutil.copytree(TASKS / "rmsnorm", task_dir)
    _write(run_dir / "run.json", {"format": 1, "task_dir": str(task_dir), "created": "2026-11-25T15:14:30+0000",
                                  "environment": ENV, "context": {"beams": 2, "plans": 2, "samples": 1,
                                                                  "iterations": 2, "model": "tuner"}})
    timer, names = "interpreter_wall", {"T4_H64": (1028.0, 1152.0), "T3_H200": (2403.0, 2800.0)}

    def timings(us: float) -> dict:
        return {w: {**_timing(us, f, b, timer), "round_medians_us": [us * 1.1, us * 0.9]}
                for w, (f, b) in names.items()}

    _write(run_dir / "candidates" / "baseline" / "result.json", {
        "id": "baseline", "iteration": 0, "parent_id": None, "status": "verified", "timer": timer, "kind": "kernel",
        "device_name": "cpu (Triton interpreter)", "workloads": timings(SETUP_US), "speedup": 1.0})
    _write(run_dir / "candidates" / "baseline" / "kernel.py", BASELINE)
    for cid, iteration, parent, title, own_us, base_us, speedup, (low, high), vs_parent in steps:
        versus = {"baseline": {"speedup": speedup, "ci_low": low, "ci_high": high, "rounds": 2, "faster": False}}
        if vs_parent is not None:
            versus["parent"] = {"speedup": vs_parent, "ci_low": vs_parent * 0.9, "ci_high": vs_parent * 1.1,
                                "rounds": 2, "faster": False}
        _write(run_dir / "candidates" / cid / "result.json", {
            "id": cid, "iteration": iteration, "parent_id": parent, "plan_title": title, "status": "verified",
            "timer": timer, "kind": "kernel", "device_name": "cpu (Triton interpreter)", "workloads": timings(own_us),
            "versus": versus, "speedup": speedup, "speedup_vs_parent": vs_parent or speedup,
            "compared_us": {"baseline": {w: base_us for w in names}}})
        _write(run_dir / "candidates" / cid / "kernel.py", BASELINE.replace("num_warps=4", f"num_warps={iteration}"))
    for n in range(failed):
        _write(run_dir / "candidates" / f"i2.m1.p{n}.k0" / "result.json",
               {"id": f"i2.m1.p{n}.k0", "iteration": 2, "parent_id": steps[0][0], "status": "wrong_output"})
    best = steps[-1]
    _write(run_dir / "best_kernel.py", BASELINE.replace("num_warps=4", f"num_warps={best[1]}"))
    by_iteration = {step[1]: step for step in steps}
    _write(run_dir / "summary.json", {
        "task_dir": str(task_dir), "iteration": 2, "stop_reason": "reached T=2 iterations", "best_id": best[0],
        "best_speedup": best[6], "baseline_kind": "kernel", "timer": timer, "device_name": "cpu (Triton interpreter)",
        "usage": {}, "iterations": [{"iteration": it, "best_id": step[0], "best_speedup": step[6]}
                                    for it, step in sorted(by_iteration.items())]})
    return run_dir


# The run: each step faster than the baseline in its own evaluation, each evaluated at a slower
# moment than the last (absolute times 20, then 38 µs, against the baseline's 12.3 µs at setup).
DEMO_STEPS = [("i1.m0.p0.k0", 1, "baseline", "BLOCK 256 -> 512", 20.0, 22.0, 1.10, (1.05, 1.15), None),
              ("i2.m0.p1.k0", 2, "i1.m0.p0.k0", "num_warps 4 -> 8", 38.0, 43.7, 1.149, (1.1, 1.2), 1.04)]


def test_every_figure_of_the_best_comes_from_its_own_evaluation(tmp_path):
    run = write_interpreter_run(tmp_path / "demo", DEMO_STEPS)
    row = load_rows(run)[0]
    # the baseline beside the best is the one timed in the best's rounds, never its setup times
    assert {t.median_us for t in row.workloads["baseline"].values()} == {43.7}
    assert {t.median_us for t in row.workloads["best"].values()} == {38.0}
    assert row.baseline_us == pytest.approx(43.7) and row.best_us == pytest.approx(38.0)
    assert row.baseline_spread_pct is None  # not recorded in those rounds: not borrowed from setup
    assert all(s.speedup == pytest.approx(43.7 / 38.0) for s in row.by_workload["baseline"].values())
    # the best so far is a speedup as measured, never an absolute time from another moment: it never steps
    # down (in latency: up) and ends at the headline's figure
    best = [c.speedup for _, c in best_per_iteration(row)]
    assert best == [1.0, 1.10, 1.149] and best[-1] == row.speedup
    assert [c.vs_baseline.ci_low for c in row.candidates if c.id == "i2.m0.p1.k0"] == [1.1]
    text = _page_text(build_report(run))
    assert not re.search(r"(?<![\d.])12\.3(?!\d)", text)  # the setup time (12.3 µs) is nowhere on the page
    per_workload = text.split("<h3>Per workload</h3>")[1].split("<h3>")[0]
    assert "43.7" in per_workload and "38.0 ± 1.5" in per_workload and "1.150x" in per_workload
    assert "baseline median (µs, CPU interpreter)" in per_workload
    # every figure of the task is labelled as interpreter time, and drawn
    for key in ("candidates_demo", "lineage_demo", "workloads_demo"):
        assert _decodes((run / "plots" / f"{key}.png").read_bytes()), key
        caption = text.split(f"alt='{key}'")[1].split("</figcaption>")[0]
        assert "CPU interpreter wall time: not GPU performance" in caption, key
    assert not any(p.name.startswith("latency_") for p in (run / "plots").iterdir())


def test_the_best_so_far_line_as_drawn_never_steps_down(tmp_path, monkeypatch):
    """Three iterations, each best evaluated at a slower moment (20, 30, 45 µs: the line the page drew
    before, in absolute time, stepped up) and each faster than the baseline in its own evaluation."""
    steps = DEMO_STEPS[:1] + [("i2.m0.p1.k0", 2, "i1.m0.p0.k0", "b", 30.0, 36.0, 1.2, (1.1, 1.3), 1.09),
                              ("i3.m0.p0.k0", 3, "i2.m0.p1.k0", "c", 45.0, 58.5, 1.3, (1.2, 1.4), 1.08)]
    row = load_rows(write_interpreter_run(tmp_path / "r", steps))[0]
    drawn = {}
    monkeypatch.setattr(report_plots, "_png", lambda fig: drawn.setdefault("fig", fig) and b"")
    report_plots.candidate_speedups(row)
    ax = drawn["fig"].axes[0]
    # an interpreter run: the line is its beam head's, never called best (the CLI's word)
    line = next(ln for ln in ax.get_lines() if ln.get_label() == "the run's beam head after each iteration")
    ys = list(line.get_ydata())
    assert ys == sorted(ys) and ys[0] == 1.0 and ys[-1] == row.speedup == 1.3
    # each verified candidate is drawn at its ratio to the baseline (wall times: no speedup), its interval as whiskers
    assert "baseline/kernel wall time" in ax.get_ylabel() and ax.get_yscale() == "log"
    assert "CPU interpreter wall time: not GPU performance" in ax.get_title()


def test_the_lineage_figure_and_table(tmp_path):
    long_title = ("Split the reduction over two program instances per row and combine partial sums with an "
                  "atomic add so that long rows use more of the machine")
    steps = [DEMO_STEPS[0], ("i2.m0.p1.k0.f1", 2, "i1.m0.p0.k0", long_title, 38.0, 43.7, 1.149, (1.1, 1.2), 1.04)]
    run = write_interpreter_run(tmp_path / "lin", steps)
    fixed = json.loads((run / "candidates" / "i2.m0.p1.k0.f1" / "result.json").read_text())
    _write(run / "candidates" / "i2.m0.p1.k0.f1" / "result.json", {**fixed, "fix_of": "i2.m0.p1.k0"})
    row = load_rows(run)[0]
    assert [s.id for s in row.lineage] == ["baseline", "i1.m0.p0.k0", "i2.m0.p1.k0.f1"]
    assert [s.plan_title for s in row.lineage] == [None, "BLOCK 256 -> 512", long_title]
    assert row.lineage[1].vs_baseline.speedup == 1.10 and row.lineage[1].vs_baseline.ci_high == 1.15
    assert row.lineage[1].vs_parent.speedup == 1.10  # a child of the baseline: one comparison is both
    assert row.lineage[2].vs_parent.speedup == 1.04 and row.lineage[2].fix_of == "i2.m0.p1.k0"
    # the figure's labels: the step, its kernel, its plan in at most two lines
    label = _step_label(2, row.lineage[2]).splitlines()
    assert label[0] == "2. i2.m0.p1.k0.f1" and len(label) == 3 and label[2].endswith("…")
    assert all(len(line) <= LABEL_WIDTH for line in label)
    text = _page_text(build_report(run))
    assert _decodes((run / "plots" / "lineage_lin.png").read_bytes()) and "alt='lineage_lin'" in text
    table = text.split("<h3>How i2.m0.p1.k0.f1 came from the baseline</h3>")[1].split("</table>")[0]
    assert "BLOCK 256 -&gt; 512" in table and html.escape(long_title) in table and "(repair of i2.m0.p1.k0)" in table
    assert "1.100x<br><span class='note'>1.050–1.150, range over 2 rounds</span>" in table
    assert "1.040x<br>" in table  # the second step against its parent
    # a run whose best is the baseline has no lineage to draw
    flat = write_run(tmp_path / "e" / "flat", speedup=None)
    assert [s.id for s in load_rows(flat)[0].lineage] == ["baseline"]
    build_report(flat)
    assert not (flat / "plots" / "lineage_flat.png").exists() and not (flat / "plots" / "workloads_flat.png").exists()


# ---------------------------------------------------------------- the page fits a 1280 px window

PAGE_PX = 1280 - 2 * 32  # the window less the body's 2em margins (16 px font)
CHAR_PX, CELL_PX = 7.8, 15  # 13 px text at most 0.6 em a character; padding and border of a cell


class _Tables(HTMLParser):
    """Every table of a page as rows of cells, each cell its unbreakable runs of text: words (a <wbr>
    ends one), and the whole of a no-wrap tag (`.tag`)."""

    def __init__(self):
        super().__init__()
        self.tables: list[list[list[list[str]]]] = []
        self.cell: list[str] | None = None
        self.nowrap = 0

    def handle_starttag(self, tag, attrs):
        classes = (dict(attrs).get("class") or "").split()
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th") and self.tables:
            self.cell = [""]
            self.tables[-1][-1].append(self.cell)
        elif tag == "span" and self.nowrap:
            self.nowrap += 1
        elif tag == "span" and "tag" in classes:
            self.nowrap = 1
            if self.cell is not None:
                self.cell.append("")
        elif tag in ("br", "wbr") and self.cell is not None:  # a line break, or where one may go
            self.cell.append("")

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.cell = None
        elif tag == "span" and self.nowrap:
            self.nowrap -= 1
            if not self.nowrap and self.cell is not None:
                self.cell.append("")

    def handle_data(self, data):
        if self.cell is None:
            return
        if self.nowrap:
            self.cell[-1] += data
        else:
            words = data.split(" ")
            self.cell[-1] += words[0]
            self.cell.extend(words[1:])


def min_widths(page: str) -> list[float]:
    """Each table's narrowest width in px (its min-content width): per column its longest unbreakable run,
    whatever overflow-wrap may still break."""
    parser = _Tables()
    parser.feed(page)
    widths = []
    for table in parser.tables:
        columns: dict[int, float] = {}
        for row in table:
            for i, cell in enumerate(row):
                runs = max((len(r) for r in cell), default=0)
                columns[i] = max(columns.get(i, 0.0), runs * CHAR_PX + CELL_PX)
        widths.append(sum(columns.values()))
    return widths


OLD_SUMMARY = (  # the 16-column table the page had: one interpreter row, as the demo's report showed it
    "<table><tr>" + "".join(f"<th>{h}</th>" for h in (
        "task", "outcome", "timer", "baseline µs", "spread", "best µs", "spread", "speedup", "interval",
        "vs torch.compile", "% peak", "% achievable", "% of same-size copy", "iterations", "tokens", "$"))
    + "</tr><tr><td>rmsnorm</td><td>verified on the CPU interpreter</td><td>CPU Triton-interpreter wall time</td>"
    "<td>25381.1 <span class='tag'>CPU interpreter</span></td><td>8.5%</td>"
    "<td>23745.5 <span class='tag'>CPU interpreter</span></td><td>50.1%</td>"
    "<td>1.013x <span class='tag'>CPU interpreter</span></td><td>0.815–1.210, range over 2 rounds</td>"
    "<td>n/a (CPU)</td><td>–</td><td>–</td><td>–</td><td>2</td><td>0</td><td>0.0000</td></tr></table>")


def test_every_table_fits_a_1280px_window(gpu_suite, tmp_path):
    # the measure sees a table that runs off: the one the summary was
    assert min_widths(OLD_SUMMARY)[0] > PAGE_PX
    write_run(gpu_suite / "level3_29_SwinMLP_long_task_name", speedup=1.5, interval=(1.4, 1.6), vs_tc=1.1, cost=0.3)
    write_interpreter_run(tmp_path / "cpu" / "demo", DEMO_STEPS)
    for path in (gpu_suite, tmp_path / "cpu" / "demo"):
        rows = load_rows(path)  # the page's tables without its figures: drawing them is the slow part
        page = render_html("tables", rows, suite_figures(rows), {})
        widths = min_widths(page)
        assert len(widths) >= 5 and max(widths) <= PAGE_PX, widths
        css = page.split("<style>")[1].split("</style>")[0]
        # no word breaks inside: with each table's narrowest width within the page, a cell breaks at spaces
        # and <wbr> only. `overflow-wrap:anywhere` let the layout squeeze a column below its longest word
        # (`rmsnor|m`, `iteration|s` at 1280 px, issue 53).
        cells = css_rules(css)["td"]
        assert cells.get("overflow-wrap", "normal") in ("normal", "break-word"), cells
        assert cells.get("word-break", "normal") == "normal" and "anywhere" not in css and "break-all" not in css
        assert css_rules(css)["table"]["max-width"] == "100%"
        assert "white-space:nowrap" not in css.split(".tag{")[0]  # only the short tags never wrap
        if path == gpu_suite:  # a long name breaks after its underscores, where its column needs it
            assert "level3_<wbr>29_<wbr>SwinMLP_<wbr>long_<wbr>task_<wbr>name</a>" in page


def css_rules(css: str) -> dict[str, dict[str, str]]:
    """A stylesheet's declarations by selector (a rule naming several selectors counts for each)."""
    rules: dict[str, dict[str, str]] = {}
    for selectors, body in re.findall(r"([^{}]+)\{([^}]*)\}", css):
        decls = {k.strip(): v.strip() for k, _, v in (d.partition(":") for d in body.split(";")) if v}
        for selector in selectors.split(","):
            rules.setdefault(selector.strip(), {}).update(decls)
    return rules


def _px(value: str) -> float:
    """A CSS length in px, at the browser's default 16 px font."""
    number = float(re.match(r"[\d.]+", value).group())
    return number * 16 if value.endswith("em") else number


class _Images(HTMLParser):
    """Each image of a page: its PNG's width in pixels, whether it sits in a `.grid`, and whether its
    grid cell spans the grid (`.wide`)."""

    VOID = {"img", "br", "wbr", "meta", "link", "hr", "input"}

    def __init__(self):
        super().__init__()
        self.stack: list[set[str]] = []
        self.images: list[dict] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = set((attrs.get("class") or "").split())
        if tag == "img":
            png = base64.b64decode(attrs["src"].split(",", 1)[1])
            grid = max((i for i, c in enumerate(self.stack) if "grid" in c), default=None)
            cell = self.stack[grid + 1] if grid is not None and grid + 1 < len(self.stack) else set()
            self.images.append({"alt": attrs.get("alt"), "width": struct.unpack(">I", png[16:20])[0],
                                "in_grid": grid is not None, "wide": "wide" in cell})
        elif tag not in self.VOID:
            self.stack.append(classes)

    def handle_endtag(self, tag):
        if tag not in self.VOID and self.stack:
            self.stack.pop()


def page_layout(css: str, window: int = 1280) -> dict[str, float]:
    """The widths the page's CSS gives at a window `window` px wide: the body's content, a grid column
    (auto-fit columns of at least their minimum, the gap between them) and a cell spanning the grid."""
    rules = css_rules(css)
    body = min(_px(rules["body"]["max-width"]), window - 2 * _px(rules["body"]["margin"]))
    grid = rules[".grid"]
    least = _px(re.search(r"minmax\(([^,]+),", grid["grid-template-columns"]).group(1))
    gap = _px(grid["gap"].split()[-1])
    n = max(1, int((body + gap) // (least + gap)))
    spans = rules.get(".grid>.wide", {}).get("grid-column") == "1/-1"
    return {"body": body, "column": (body - gap * (n - 1)) / n, "wide": body if spans else (body - gap * (n - 1)) / n}


def displayed(image: dict, css: str, layout: dict[str, float]) -> tuple[float, float]:
    """An image's outer width on the page (border included) and the width its pixels are drawn at."""
    img = css_rules(css)["img"]
    slot = layout["wide"] if image["wide"] else layout["column"] if image["in_grid"] else layout["body"]
    border = _px(img.get("border", "0").split()[0]) if img.get("border") else 0.0
    limit = slot if img.get("max-width") == "100%" else float("inf")
    if img.get("box-sizing") == "border-box":
        outer = min(image["width"] + 2 * border, limit)
    else:
        outer = min(image["width"], limit) + 2 * border
    return outer, outer - 2 * border


def test_every_figure_fits_its_column_at_1280px(gpu_suite, tmp_path):
    """No figure runs past its column (each had a scrollbar: a PNG scaled to 100% of its column plus
    its 1 px border is 2 px too wide) and each scales with its height (issue 53)."""
    for page in (build_report(gpu_suite), build_report(write_interpreter_run(tmp_path / "cpu" / "demo", DEMO_STEPS))):
        text = page.read_text()
        css = text.split("<style>")[1].split("</style>")[0]
        rules = css_rules(css)
        assert rules["img"].get("max-width") == "100%" and rules["img"].get("height") == "auto", rules["img"]
        for selector, decls in rules.items():  # nothing around a figure scrolls
            if selector.startswith((".grid", "figure")):
                assert not {decls.get("overflow"), decls.get("overflow-x")} & {"auto", "scroll"}, selector
        layout = page_layout(css)
        assert layout["body"] == 1216 and layout["column"] == 596  # two columns of figures at 1280 px
        parser = _Images()
        parser.feed(text)
        assert len(parser.images) >= 6 and any(i["width"] > layout["column"] for i in parser.images)
        for image in parser.images:
            slot = layout["wide"] if image["wide"] else layout["column"] if image["in_grid"] else layout["body"]
            outer, _ = displayed(image, css, layout)
            assert outer <= slot, (image, slot)
        assert "width=" not in "".join(re.findall(r"<img [^>]*>", re.sub(r"src='[^']*'", "", text)))


def test_the_lineage_labels_are_readable_at_1280px(tmp_path, monkeypatch):
    """Every label of the lineage figure (its steps' plans, their speedups, the axis) is at least 10 px
    as the page draws it at 1280 px: its size in points at the PNG's DPI, times the scale the page
    draws the PNG at. It was 7 pt in a figure about 1000 px wide shown in a 596 px column: ~6 px."""
    long_title = ("Split the reduction over two program instances per row and combine partial sums with an "
                  "atomic add so that long rows use more of the machine")
    steps = [DEMO_STEPS[0], ("i2.m0.p1.k0", 2, "i1.m0.p0.k0", long_title, 38.0, 43.7, 1.149, (1.1, 1.2), 1.04)]
    for run, plan in ((write_interpreter_run(tmp_path / "cpu" / "lin", steps), long_title[:20]),
                      (write_run(tmp_path / "gpu" / "lin", speedup=1.25, interval=(1.21, 1.3), vs_tc=0.8), "i1.m0.p0.k0")):
        text = build_report(run).read_text()
        css = text.split("<style>")[1].split("</style>")[0]
        parser = _Images()
        parser.feed(text)
        (image,) = [i for i in parser.images if i["alt"] == "lineage_lin"]
        _, drawn_px = displayed(image, css, page_layout(css))
        scale = min(1.0, drawn_px / image["width"])
        drawn: dict = {}
        real = report_plots._png
        monkeypatch.setattr(report_plots, "_png", lambda fig, drawn=drawn, real=real: drawn.setdefault("fig", fig)
                            and real(fig))
        png = report_plots.lineage_figure(load_rows(run)[0])
        monkeypatch.setattr(report_plots, "_png", real)
        assert abs(struct.unpack(">I", png[16:20])[0] - image["width"]) <= 2  # the figure the page shows
        ax = drawn["fig"].axes[0]
        low, high = ax.get_xlim()
        ticks = [t for t in ax.get_xticklabels(which="both") if low <= t.get_position()[0] <= high]
        labels = [t for t in [*ax.get_yticklabels(), *ticks, *ax.texts, ax.title, ax.xaxis.label]
                  if t.get_visible() and t.get_text().strip()]
        assert len(labels) >= 8 and any(plan in t.get_text() for t in labels)
        sizes = {t.get_text()[:30]: t.get_fontsize() * report_plots.DPI / 72 * scale for t in labels}
        assert min(sizes.values()) >= 10, (scale, sizes)



def test_interval_labels():
    assert interval_label(2) == "range over 2 rounds" and interval_label(5) == "range over 5 rounds"
    assert interval_label(20) == "bootstrap 95% interval over 20 rounds"
    assert interval_label(None) == "interval (rounds not recorded)"


def test_diffs_have_no_blank_lines_and_mark_changes():
    html = diff_html("a\nb\nc\n", "a\nB\nc\nd\n")
    assert "\n" not in html
    assert '<div class="del">-b</div><div class="add">+B</div><div class="ctx"> c</div><div class="add">+d</div>' \
        in html


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


# ---------------------------------------------------------------- in a browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or \
    ("/usr/bin/chromium" if Path("/usr/bin/chromium").is_file() else None)
# After load, the page's body says how many of its images decoded; the report itself has no script.
PROBE = ("<script>addEventListener('load',()=>{const i=[...document.images];document.body.dataset.decoded="
         "i.filter(x=>x.complete&&x.naturalWidth>0).length+'/'+i.length;"
         "document.body.dataset.wide=document.documentElement.scrollWidth;document.body.dataset.spill="
         "[...document.querySelectorAll('.grid>*')].filter(d=>d.scrollWidth>d.clientWidth).length})</script>")


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (/usr/bin/chromium), which CI does not install: "
                    "the page's HTML is checked by the tests above without it")
def test_the_page_renders_in_headless_chromium(gpu_suite, tmp_path):
    page = build_report(gpu_suite)
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(flags + ["--window-size=1280,2000", "--virtual-time-budget=10000", "--dump-dom",
                                  probe.as_uri()], capture_output=True, text=True, timeout=180).stdout
    images = page.read_text().count("<img ")
    assert images >= 8 and f'data-decoded="{images}/{images}"' in dom, dom[-2000:]
    wide = re.search(r'data-wide="(\d+)"', dom)
    assert wide and int(wide.group(1)) <= 1280, dom[-2000:]  # nothing runs off a 1280 px window
    assert 'data-spill="0"' in dom, dom[-2000:]  # and no figure runs past its column (none scrolls)
    for heading in ("Provenance", "Summary", "Suite figures", "Task: fast", "Task: flat", "Roofline",
                    "Every candidate against the baseline", "Lineage of the best kernel", "Speedup per workload",
                    "Best kernel against the baseline"):
        assert f">{heading}</h" in dom, heading
    shot = tmp_path / "shot.png"
    subprocess.run(flags + ["--window-size=1250,2000", f"--screenshot={shot}", page.as_uri()], capture_output=True,
                   timeout=180)
    assert _decodes(shot.read_bytes()) and shot.stat().st_size > 50_000  # a page with tables and figures


# ---------------------------------------------------------------- end to end, on the CPU interpreter

@pytest.mark.slow
def test_eval_writes_a_report_and_resumes_by_skipping_finished_tasks(tmp_path):
    suite, out = _suite(tmp_path), tmp_path / "eval"
    args = ["eval", str(suite), "--out", str(out), "-B", "1", "-N", "1", "-K", "1", "-T", "2", "--device", "cpu",
            "--no-memory"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "skipped (NKI unavailable: install" in result.output
    # the end-of-suite table: interpreter figures are named as the ratio of wall times they are (issue 53)
    assert "geomean over 2 tasks of the baseline's CPU Triton-interpreter wall time" in " ".join(result.output.split())
    assert "best speedup" not in result.output
    table = result.output.split("[3/3]")[-1]
    assert all(name in table for name in ("rmsnorm", "softmax", "nki_silu", "skipped"))
    page = (out / "report.html").read_text()
    assert "CPU Triton-interpreter timings" in page and "No roofline: a CPU Triton-interpreter run" in page
    assert "95%" not in page
    report = json.loads((out / "report.json").read_text())
    rows = {t["task"]: t for t in report["tasks"]}
    # each task's outcome as the terminal says it ("optimized (faster ...)" or "no faster kernel found":
    # whether a tuner move beat the baseline is the interpreter's noise)
    assert all(t["label"].split()[0] in table for t in rows.values()), table
    if any(t["ci_low"] is not None for t in rows.values()):  # a kernel beat the baseline: its interval is shown
        assert "range over 2 rounds" in page
    for plot in ("speedup_per_iteration", "per_task", "fast_p", "candidates_rmsnorm", "candidates_softmax"):
        assert (out / "plots" / f"{plot}.png").read_bytes()[:8] == PNG
    for task, row in rows.items():  # a best that is not the baseline: its lineage and its workloads against it
        if row["outcome"] == "optimized" and row["best_id"] != "baseline":
            assert (out / "plots" / f"lineage_{task}.png").is_file()
            assert (out / "plots" / f"workloads_{task}.png").is_file()
    assert not (out / "plots" / "speedup_vs_cost.png").exists()  # the tuner spent nothing
    assert rows["rmsnorm"]["outcome"] == "optimized" and rows["rmsnorm"]["iterations"] == 2
    assert rows["rmsnorm"]["provenance"]["accelopt"] and rows["rmsnorm"]["provenance"]["torch"]  # recorded at run time
    assert rows["rmsnorm"]["provenance"]["git commit"]
    assert rows["nki_silu"]["outcome"] == "skipped"
    assert report["figures"]["tasks"] == 3 and report["figures"]["verified"] == 2
    assert report["figures"]["fast_p"]["0.0"] == pytest.approx(2 / 3)  # the skipped task counts as not fast
    # Rerunning the same eval directory skips what finished; `report` rebuilds the same page from disk.
    again = runner.invoke(app, args)
    assert again.exit_code == 0 and again.output.count("finished earlier, skipped") == 3
    (out / "report.html").unlink()
    shown = runner.invoke(app, ["report", str(out)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and (out / "report.html").is_file()
    assert "CPU interpreter" in shown.output and "n/a (CPU)" in shown.output


@pytest.mark.slow
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


def test_the_report_names_the_torch_compile_mode_where_it_is_not_the_default(tmp_path):
    """A standing against max-autotune says so on every line that gives it; an older record
    (no mode written) reads as default mode, as it was timed."""
    write_run(tmp_path / "e" / "tuned", speedup=1.5, interval=(1.4, 1.6), vs_tc=1.03, tc_mode="max-autotune-no-cudagraphs")
    write_run(tmp_path / "e" / "old", speedup=1.2, interval=(1.1, 1.3), vs_tc=0.9)
    result = runner.invoke(app, ["report", str(tmp_path / "e")], env={"COLUMNS": "220"})
    assert result.exit_code == 0, result.output
    assert "1.030x (mode max-autotune-no-cudagraphs)" in result.output
    assert "0.900x (slower)" in result.output and "0.900x (slower) (mode" not in result.output
    page = _page_text(build_report(tmp_path / "e"))
    assert "faster than torch.compile (mode max-autotune-no-cudagraphs): 1.030x" in page


def test_the_best_kernels_autotuned_configurations_are_on_the_page(tmp_path):
    """Which configuration the best's @triton.autotune kernel ran on each workload (the judge's
    choice) and the advice on a shared key are in the report, as in `check --json` and over MCP."""
    run = write_run(tmp_path / "rmsnorm", speedup=1.37, interval=(1.36, 1.38))
    best = json.loads((run / "summary.json").read_text())["best_id"]
    path = run / "candidates" / best / "result.json"
    result = json.loads(path.read_text())
    result["autotune_choice"] = {"candidate": {
        "how": "timed", "notes": ["k: T2048_H8192 runs configuration 1, the best over the workloads sharing its key"],
        "kernels": [{"kernel": "k", "key": ["hidden"], "configs": ["BLOCK: 64", "BLOCK: 128"], "choices": {"(4096,)": 1},
                     "default": 1, "ran": {"T4096_H4096": 1, "T2048_H8192": 1}}]}}
    path.write_text(json.dumps(result))
    section = _page_text(build_report(run)).split("Autotuned configurations (chosen by the judge)")[1].split("<h3>")[0]
    assert "k (the judge timed 2 configurations): T4096_H4096: 1: BLOCK: 128; T2048_H8192: 1: BLOCK: 128" in section
    assert "T2048_H8192 runs configuration 1, the best over the workloads sharing its key" in section


def test_the_headline_counts_one_task_as_one_task(tmp_path):
    from accelopt.evals.reporting.report import headline

    rows = load_rows(write_run(tmp_path / "one", speedup=1.5, interval=(1.4, 1.6)))
    _, lines = headline(rows, suite_figures(rows))
    assert any(line.startswith("geomean best speedup over 1 task: ") for line in lines), lines
